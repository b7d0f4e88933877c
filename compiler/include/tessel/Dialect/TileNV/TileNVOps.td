//===- TileNVOps.td - NVIDIA thread-level intrinsics -------*- tablegen -*-===//
//
// The thread-level IR after tessel-lower-tile-ops is per-thread scf, arith,
// math and memref code plus these NVIDIA intrinsics; the CUDA emitter prints
// each as one CUDA statement or device-header call.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TILENV_OPS
#define TESSEL_TILENV_OPS

include "mlir/IR/OpBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "tessel/Dialect/Tile/TileDialect.td"

def TileNV_Dialect : Dialect {
  let name = "tilenv";
  let cppNamespace = "::tessel::tilenv";
  let summary = "NVIDIA thread-level intrinsics";
  let dependentDialects = ["::tessel::tile::TileDialect"];
}

class TileNV_Op<string mnemonic, list<Trait> traits = []>
    : Op<TileNV_Dialect, mnemonic, traits>;

def TileNV_ThreadIdOp : TileNV_Op<"thread_id", [Pure]> {
  let summary = "threadIdx.x";
  let results = (outs Index:$result);
  let assemblyFormat = "attr-dict";
}

def TileNV_GridDimOp : TileNV_Op<"grid_dim", [Pure]> {
  let summary = "gridDim.x";
  let results = (outs Index:$result);
  let assemblyFormat = "attr-dict";
}

def TileNV_SyncThreadsOp : TileNV_Op<"sync_threads"> {
  let summary = "__syncthreads()";
  let assemblyFormat = "attr-dict";
}

def TileNV_ShflXorOp : TileNV_Op<"shfl_xor", [AllTypesMatch<["value", "result"]>]> {
  let summary = "butterfly shuffle within groups of `width` lanes (whole warp converged)";
  let arguments = (ins AnyTypeOf<[F32, I32]>:$value, I32Attr:$offset, I32Attr:$width);
  let results = (outs AnyTypeOf<[F32, I32]>:$result);
  let assemblyFormat = "$value `,` $offset `,` $width attr-dict `:` type($value)";
}

def TileNV_AtomicAddOp : TileNV_Op<"atomic_add"> {
  let summary = "atomic add to one element of global or shared memory";
  let arguments = (ins AnyType:$value, AnyMemRef:$memref, Variadic<Index>:$indices,
                       Tile_MemoryOrder:$order);
  let assemblyFormat = [{
    $value `,` $memref `[` $indices `]` $order attr-dict `:` type($value) `,` type($memref)
  }];
}

def TileNV_FlagStoreOp : TileNV_Op<"flag_store"> {
  let summary = "st.release.sys.global.u32: publish a flag to other GPUs";
  let description = [{
    With `add`, red.release.sys.global.add.u32: the value is added.
  }];
  let arguments = (ins I32:$value, AnyMemRef:$memref, Variadic<Index>:$indices,
                       UnitAttr:$add);
  let assemblyFormat = [{
    $value `,` $memref `[` $indices `]` attr-dict `:` type($value) `,` type($memref)
  }];
}

def TileNV_FlagWaitOp : TileNV_Op<"flag_wait"> {
  let summary = "spin with ld.acquire.sys until a flag reaches a value, or trap";
  let description = [{
    Traps after `timeout_ms` (measured with %globaltimer), printing `name`,
    the flag's offset and both values first.
  }];
  let arguments = (ins AnyMemRef:$memref, Variadic<Index>:$indices, I32:$value,
                       Tessel_I64Attr:$timeout_ms, StrAttr:$name);
  let assemblyFormat = [{
    $memref `[` $indices `]` `,` $value `timeout_ms` `(` $timeout_ms `)` `name` `(` $name `)`
    attr-dict `:` type($memref) `,` type($value)
  }];
}

def TileNV_FenceProxyAsyncGlobalOp : TileNV_Op<"fence_proxy_async_global"> {
  let summary = "fence.proxy.async.global: generic-proxy global writes seen by TMA loads";
  let description = [{
    Also after a waited TMA reduce-add into another rank's tile: its
    async-proxy writes are then ordered before the thread's later generic
    accesses (the release of the flag that tells the peer).
  }];
  let assemblyFormat = "attr-dict";
}

def TileNV_ReduceAddVectorOp : TileNV_Op<"red_add_vector"> {
  let summary = "red.global.add.v{2,4}.f32: add `count` contiguous f32 values atomically";
  let description = [{
    One vector reduction (sm_90) of `source[source_index..+count)` into the
    aligned global elements starting at `dest[dest_indices]`, relaxed or
    release at GPU scope.
  }];
  let arguments = (ins AnyMemRef:$source, Index:$source_index, AnyMemRef:$dest,
                       Variadic<Index>:$dest_indices, Tessel_I64Attr:$count, Tile_MemoryOrder:$order);
  let assemblyFormat = [{
    $source `[` $source_index `]` `,` $dest `[` $dest_indices `]` `count` `=` $count $order
    attr-dict `:` type($source) `,` type($dest)
  }];
}

def TileNV_CopyVectorOp : TileNV_Op<"copy_vector", [AttrSizedOperandSegments]> {
  let summary = "move `bytes` contiguous bytes (4, 8 or 16, aligned) between buffers";
  let arguments = (ins AnyMemRef:$source, Variadic<Index>:$source_indices,
                       AnyMemRef:$dest, Variadic<Index>:$dest_indices, Tessel_I64Attr:$bytes);
  let assemblyFormat = [{
    $source `[` $source_indices `]` `,` $dest `[` $dest_indices `]` `bytes` `=` $bytes
    attr-dict `:` type($source) `,` type($dest)
  }];
}

def TileNV_CpAsyncOp : TileNV_Op<"cp_async", [AttrSizedOperandSegments]> {
  let summary = "cp.async: copy 4, 8 or 16 aligned bytes from global to shared memory";
  let description = [{
    The copy completes asynchronously; `tilenv.cp_async_wait` waits for every
    copy the thread issued.
  }];
  let arguments = (ins AnyMemRef:$source, Variadic<Index>:$source_indices,
                       AnyMemRef:$dest, Variadic<Index>:$dest_indices, Tessel_I64Attr:$bytes);
  let assemblyFormat = [{
    $source `[` $source_indices `]` `,` $dest `[` $dest_indices `]` `bytes` `=` $bytes
    attr-dict `:` type($source) `,` type($dest)
  }];
}

def TileNV_CpAsyncWaitOp : TileNV_Op<"cp_async_wait"> {
  let summary = "cp.async.wait_all, or cp.async.wait_group N with `pending`";
  let description = [{
    Without `pending` every cp.async the thread issued is done; with it, all
    but the `pending` most recently committed groups are.
  }];
  let arguments = (ins OptionalAttr<Tessel_I64Attr>:$pending);
  let assemblyFormat = "(`pending` `(` $pending^ `)`)? attr-dict";
}

def TileNV_CpAsyncCommitOp : TileNV_Op<"cp_async_commit"> {
  let summary = "cp.async.commit_group: close the thread's current group of cp.async copies";
  let assemblyFormat = "attr-dict";
}

def TileNV_TmaLoadOp : TileNV_Op<"tma_load", [AttrSizedOperandSegments]> {
  let summary = "cp.async.bulk.tensor: one TMA box from global into shared memory";
  let description = [{
    Loads the box at element coordinates `coords` (outermost first) of the
    tensor map `descriptor` (an index into the kernel's `tma_descriptors`)
    into shared address `dest`, completing `bytes` transaction bytes on the
    mbarrier at shared address `barrier`. One thread issues it. With
    `rank`, the descriptor holds a map per rank of a symmetric tensor
    (tile.peer) and the box comes from rank `rank`'s copy.
  }];
  let arguments = (ins Tessel_I64Attr:$descriptor, Optional<Index>:$rank, I32:$dest, I32:$barrier,
                       Variadic<Index>:$coords, OptionalAttr<Tessel_I64Attr>:$multicast_mask);
  let assemblyFormat = [{
    $descriptor (`of` `rank` $rank^)? `[` $coords `]` `->` $dest `arrive` $barrier (`multicast` `(` $multicast_mask^ `)`)? attr-dict
  }];
}

def TileNV_ClusterRankOp : TileNV_Op<"cluster_rank", [Pure]> {
  let summary = "%cluster_ctarank: the block's rank in its cluster";
  let results = (outs Index:$rank);
  let assemblyFormat = "attr-dict";
}

def TileNV_ClusterBarrierOp : TileNV_Op<"cluster_barrier"> {
  let summary = "barrier.cluster.arrive.release + barrier.cluster.wait.acquire";
  let description = [{
    Every thread of every block in the cluster arrives and waits (exited
    threads count as arrived): writes before it, mbarrier inits included,
    are visible to the cluster after it, and no block leaves while a peer
    may still write to its shared memory.
  }];
  let assemblyFormat = "attr-dict";
}

def TileNV_MbarrierArriveRemoteOp : TileNV_Op<"mbarrier_arrive_remote"> {
  let summary = "mbarrier.arrive.release.cluster on the mbarrier at `address` in block `rank`";
  let description = [{
    `address` is the barrier's shared address in this block; mapa gives the
    same barrier in block `rank` of the cluster.
  }];
  let arguments = (ins I32:$address, Index:$rank);
  let assemblyFormat = "$address `in` $rank attr-dict";
}

def TileNV_TmaStoreOp : TileNV_Op<"tma_store", [AttrSizedOperandSegments]> {
  let summary = "cp.async.bulk.tensor (or cp.reduce.async.bulk.tensor.add): one box to global";
  let description = [{
    Stores (with `reduce_add`, adds) the shared box at address `source` to
    the box at `coords` (outermost first) of tensor map `descriptor`, in the
    thread's current bulk group. One thread issues it. With `rank`, the
    box goes to rank `rank`'s copy of a symmetric tensor (tile.peer).
  }];
  let arguments = (ins Tessel_I64Attr:$descriptor, Optional<Index>:$rank, I32:$source,
                       Variadic<Index>:$coords, UnitAttr:$reduce_add);
  let assemblyFormat = [{
    $source `->` $descriptor (`of` `rank` $rank^)? `[` $coords `]` (`reduce_add` $reduce_add^)? attr-dict
  }];
}

def TileNV_BulkCommitOp : TileNV_Op<"bulk_commit"> {
  let summary = "cp.async.bulk.commit_group";
  let assemblyFormat = "attr-dict";
}

def TileNV_BulkWaitOp : TileNV_Op<"bulk_wait"> {
  let summary = "cp.async.bulk.wait_group 0: the thread's bulk stores are complete";
  let description = [{
    With `read`, only their reads of shared memory are (`.read`): the
    source may be written again while the global writes are in flight.
  }];
  let arguments = (ins UnitAttr:$read);
  let assemblyFormat = "(`read` $read^)? attr-dict";
}

def TileNV_MbarrierInitOp : TileNV_Op<"mbarrier_init"> {
  let summary = "mbarrier.init.shared::cta.b64 [address], arrivals";
  let arguments = (ins I32:$address, Tessel_I64Attr:$arrivals);
  let assemblyFormat = "$address `arrivals` `=` $arrivals attr-dict";
}

def TileNV_MbarrierArriveOp : TileNV_Op<"mbarrier_arrive"> {
  let summary = "mbarrier.arrive.shared::cta.b64, with expect_tx `bytes` when set";
  let arguments = (ins I32:$address, OptionalAttr<Tessel_I64Attr>:$expect_bytes);
  let assemblyFormat = "$address (`expect_tx` `=` $expect_bytes^)? attr-dict";
}

def TileNV_MbarrierWaitOp : TileNV_Op<"mbarrier_wait"> {
  let summary = "spin on mbarrier.try_wait.parity until the phase of `parity` completes";
  let arguments = (ins I32:$address, Index:$parity);
  let assemblyFormat = "$address `parity` $parity attr-dict";
}

def TileNV_FenceMbarrierInitOp : TileNV_Op<"fence_mbarrier_init"> {
  let summary = "fence.mbarrier_init.release.cluster";
  let assemblyFormat = "attr-dict";
}

def TileNV_NamedBarrierOp : TileNV_Op<"named_barrier"> {
  let summary = "bar.sync id, threads: a barrier over a subset of the block's warps";
  let description = [{
    With `arrive` (bar.arrive) the warp counts towards the barrier without
    waiting for it.
  }];
  let arguments = (ins Tessel_I64Attr:$id, Tessel_I64Attr:$threads, UnitAttr:$arrive);
  let assemblyFormat = "$id `,` $threads (`arrive` $arrive^)? attr-dict";
}

def TileNV_SyncWarpOp : TileNV_Op<"sync_warp"> {
  let summary = "__syncwarp()";
  let assemblyFormat = "attr-dict";
}

def TileNV_SetMaxNRegOp : TileNV_Op<"setmaxnreg"> {
  let summary = "setmaxnreg.{inc,dec}.sync.aligned.u32 count (per warpgroup)";
  let arguments = (ins Tessel_I64Attr:$count, UnitAttr:$increase);
  let assemblyFormat = "$count (`increase` $increase^)? attr-dict";
}

def TileNV_FenceProxyAsyncOp : TileNV_Op<"fence_proxy_async"> {
  let summary = "fence.proxy.async.shared::cta: order generic writes before async-proxy reads";
  let assemblyFormat = "attr-dict";
}

def TileNV_LdMatrixOp : TileNV_Op<"ldmatrix"> {
  let summary = "ldmatrix.sync.aligned.m8n8: 1, 2 or 4 8x8 b16 matrices into registers";
  let description = [{
    Lane `8 * i + j` gives the shared address (`source[offset]`) of row j of
    matrix i; the matrices land in `dest[base]` .. `dest[base + count - 1]`,
    one 32-bit register each, transposed with `trans`.
  }];
  let arguments = (ins AnyMemRef:$source, Index:$offset, AnyMemRef:$dest, Index:$base,
                       Tessel_I64Attr:$count, UnitAttr:$trans);
  let assemblyFormat = [{
    $source `[` $offset `]` `->` $dest `[` $base `]` `x` $count (`trans` $trans^)?
    attr-dict `:` type($source) `,` type($dest)
  }];
}

def TileNV_MmaSyncOp : TileNV_Op<"mma_sync"> {
  let summary = "mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16} (m16n8k32.s32.{s8,u8}): acc += a * b";
  let description = [{
    `acc[acc_base..+3]` (f32 or s32; f16 for f16 and FP8 products, the
    .f16 form, two elements a register), `a[a_base..+3]` and
    `b[b_base..+1]` (packed pairs in i32) are the per-thread fragments of
    the instruction. An `a` of f16 or bf16 elements (a fragment used as
    operand A) is read in pairs from `a[a_base..+7]`.
  }];
  let arguments = (ins AnyMemRef:$acc, Index:$acc_base, AnyMemRef:$a, Index:$a_base,
                       AnyMemRef:$b, Index:$b_base, TypeAttr:$operand_type);
  let assemblyFormat = [{
    $acc `[` $acc_base `]` `,` $a `[` $a_base `]` `,` $b `[` $b_base `]` $operand_type
    attr-dict `:` type($acc) `,` type($a) `,` type($b)
  }];
}

def TileNV_SmemAddressOp : TileNV_Op<"smem_address", [Pure]> {
  let summary = "the 32-bit shared-window address of a shared buffer's first element";
  let arguments = (ins AnyMemRef:$buffer);
  let results = (outs I32:$result);
  let assemblyFormat = "$buffer attr-dict `:` type($buffer)";
}

def TileNV_WgmmaDescOp : TileNV_Op<"wgmma_desc", [Pure]> {
  let summary = "a wgmma shared-memory matrix descriptor";
  let description = [{
    Start address (`address`, bytes), leading and stride byte offsets and the
    swizzle (0, 32, 64 or 128 bytes), encoded as sm_90's 64-bit descriptor.
  }];
  let arguments = (ins I32:$address, Tessel_I64Attr:$leading_bytes, Tessel_I64Attr:$stride_bytes,
                       Tessel_I64Attr:$swizzle_bytes);
  let results = (outs I64:$result);
  let assemblyFormat = [{
    $address `lbo` `=` $leading_bytes `sbo` `=` $stride_bytes `swizzle` `=` $swizzle_bytes attr-dict
  }];
}

def TileNV_WgmmaOp : TileNV_Op<"wgmma"> {
  let summary = "wgmma.mma_async.sync.aligned.m64nNk{16,32}: acc += A * B";
  let description = [{
    Issued by a whole warpgroup; `acc[base]` .. `acc[base + n/2 - 1]` are the
    thread's accumulator registers. `trans_a`/`trans_b` mark MN-major
    operands. Completion: tilenv.wgmma_commit then tilenv.wgmma_wait.
    With `accumulate` false the product overwrites acc (scale-d 0), which
    clears an accumulator without writing its registers first.

    f16/bf16 operands take k16 with f32 accumulators (f16 ones also with
    f16 accumulators: n/4 registers of two elements). 8-bit operands take
    k32 and are K-major (no trans_a/trans_b): f8E4M3FN/f8E5M2 with f32 or
    f16 accumulators, i8 (s8) and ui8 (u8) with i32 accumulators.
  }];
  let hasVerifier = 1;
  let arguments = (ins AnyMemRef:$acc, Index:$base, I64:$desc_a, I64:$desc_b, Tessel_I64Attr:$n,
                       TypeAttr:$operand_type, UnitAttr:$trans_a, UnitAttr:$trans_b,
                       Optional<I1>:$accumulate);
  let assemblyFormat = [{
    $acc `[` $base `]` `,` $desc_a `,` $desc_b `n` `=` $n $operand_type
    (`trans_a` $trans_a^)? (`trans_b` $trans_b^)? (`accumulate` `(` $accumulate^ `)`)?
    attr-dict `:` type($acc)
  }];
}

def TileNV_WgmmaRegAOp : TileNV_Op<"wgmma_reg_a"> {
  let summary = "wgmma m64nNk16 with A in registers: acc += A * B";
  let description = [{
    As tilenv.wgmma, but A is the thread's part of a 64x16 K-major tile in
    registers: `a[a_base]` .. `a[a_base + 7]` (f16 or bf16), read in pairs,
    or, packed (i32, see tilenv.pack_pair), `a[a_base]` .. `a[a_base + 3]`.
    They must not change until the wgmma completes. `accumulate` as for
    tilenv.wgmma.
  }];
  let arguments = (ins AnyMemRef:$acc, Index:$base, AnyMemRef:$a, Index:$a_base, I64:$desc_b,
                       Tessel_I64Attr:$n, TypeAttr:$operand_type, UnitAttr:$trans_b,
                       Optional<I1>:$accumulate);
  let assemblyFormat = [{
    $acc `[` $base `]` `,` $a `[` $a_base `]` `,` $desc_b `n` `=` $n $operand_type
    (`trans_b` $trans_b^)? (`accumulate` `(` $accumulate^ `)`)? attr-dict `:` type($acc) `,`
    type($a)
  }];
}

def TileNV_PackPairOp : TileNV_Op<"pack_pair", [Pure, AllTypesMatch<["lo", "hi"]>]> {
  let summary = "two 16-bit floats in one 32-bit register, `lo` in the low half";
  let description = [{
    How tensor-core instructions take f16/bf16 register operands. Packing a
    wgmma's A fragment before its `wgmma_fence` keeps ptxas from fencing
    (and splitting the group) before every wgmma that reads it.
  }];
  let arguments = (ins AnyTypeOf<[F16, BF16]>:$lo, AnyTypeOf<[F16, BF16]>:$hi);
  let results = (outs I32:$result);
  let assemblyFormat = "$lo `,` $hi attr-dict `:` type($lo)";
}

def TileNV_ConvertPairOp : TileNV_Op<"convert_pair", [Pure, AllTypesMatch<["lo", "hi"]>,
                                                       AllTypesMatch<["lo_result", "hi_result"]>]> {
  let summary = "two f32 values to FP8, bf16 or f16 in one conversion";
  let description = [{
    `arith.truncf` of each (round to nearest even; saturating for FP8), as
    one `cvt.rn.satfinite.e4m3x2.f32` (or `.e5m2x2`) from sm_89 on, or one
    `cvt.rn.bf16x2.f32` (`.f16x2`): the conversion's throughput is per
    instruction, so pairs take half the time of single values, and a
    16-bit pair lands packed in one register as tensor-core operands and
    stores want it. tessel-lower-tile-ops pairs the conversions of an
    element loop's two neighbouring registers.
  }];
  let arguments = (ins F32:$lo, F32:$hi);
  let results = (outs AnyTypeOf<[F8E4M3FN, F8E5M2, BF16, F16]>:$lo_result,
                      AnyTypeOf<[F8E4M3FN, F8E5M2, BF16, F16]>:$hi_result);
  let assemblyFormat = "$lo `,` $hi attr-dict `:` type($lo_result)";
}

def TileNV_Exp2FmaOp : TileNV_Op<"exp2_fma", [Pure, AllTypesMatch<["x", "result"]>]> {
  let summary = "2^x by a polynomial on the FMA pipe";
  let description = [{
    What `math.exp2` computes (with ex2.approx.ftz's edges: 2^-inf = 0,
    results below 2^-126 flush to zero, NaN stays NaN), without the
    special-function unit: x splits into floor(x) and a fraction whose
    2^f is a degree-3 minimax polynomial (relative error below 8.6e-5).
    tessel-lower-tile-ops makes it from `tile.exp2` for the registers that
    op puts on the FMA pipe. f16 and bf16 compute in f32.

    ```mlir
    %p = tilenv.exp2_fma %x : f32
    ```
  }];
  let arguments = (ins AnyTypeOf<[F32, F16, BF16]>:$x);
  let results = (outs AnyTypeOf<[F32, F16, BF16]>:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
}

def TileNV_TrapUnlessOp : TileNV_Op<"trap_unless"> {
  let summary = "trap, with a report the host prints, unless a condition holds";
  let description = [{
    A run-time check of a rule the compiler could not prove: where
    `condition` is false the thread writes the trap report (`what`, `held`
    and `limit`, and its block) and traps, and the launch's error says
    what broke (tessel::trap_with_report). A window of a shared buffer at
    an offset computed at run time is checked so: past the buffer its
    copies would read and write other buffers' shared memory.

    ```mlir
    tilenv.trap_unless %inside, %offset, %last {what = "k.cpp:12: window outside its shared buffer"}
    ```
  }];
  let arguments = (ins I1:$condition, Index:$held, Index:$limit, StrAttr:$what);
  let assemblyFormat = "$condition `,` $held `,` $limit attr-dict";
}

def TileNV_UnpackPairOp : TileNV_Op<"unpack_pair", [Pure, AllTypesMatch<["lo", "hi"]>]> {
  let summary = "the two 16-bit floats of a 32-bit register, `lo` from the low half";
  let description = [{
    The inverse of tilenv.pack_pair: what tcgen05.ld returns for packed
    16-bit tensor memory (or with .pack::16b for unpacked).
  }];
  let arguments = (ins I32:$packed);
  let results = (outs AnyTypeOf<[F16, BF16]>:$lo, AnyTypeOf<[F16, BF16]>:$hi);
  let assemblyFormat = "$packed attr-dict `:` type($lo)";
}

def TileNV_WgmmaFenceOp : TileNV_Op<"wgmma_fence"> {
  let summary = "wgmma.fence.sync.aligned";
  let assemblyFormat = "attr-dict";
}

def TileNV_WgmmaCommitOp : TileNV_Op<"wgmma_commit"> {
  let summary = "wgmma.commit_group.sync.aligned";
  let assemblyFormat = "attr-dict";
}

def TileNV_WgmmaWaitOp : TileNV_Op<"wgmma_wait"> {
  let summary = "wgmma.wait_group.sync.aligned N";
  let description = [{
    Waits until at most `pending` of the warpgroup's most recently committed
    wgmma groups are incomplete. `ready` lists the register arrays (the
    completed groups' accumulators and A fragments) that may be touched
    again from here; the emitter keeps their accesses after the wait.
  }];
  let arguments = (ins Tessel_I64Attr:$pending, Variadic<AnyMemRef>:$ready);
  let assemblyFormat = "$pending (`ready` `(` $ready^ `:` type($ready) `)`)? attr-dict";
}

include "tessel/Dialect/TileNV/Tcgen05Ops.td"

#endif
