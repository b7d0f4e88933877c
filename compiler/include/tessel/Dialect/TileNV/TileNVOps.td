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

def TileNV_CopyVectorOp : TileNV_Op<"copy_vector", [AttrSizedOperandSegments]> {
  let summary = "move `bytes` contiguous bytes (4, 8 or 16, aligned) between buffers";
  let arguments = (ins AnyMemRef:$source, Variadic<Index>:$source_indices,
                       AnyMemRef:$dest, Variadic<Index>:$dest_indices, I64Attr:$bytes);
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
                       AnyMemRef:$dest, Variadic<Index>:$dest_indices, I64Attr:$bytes);
  let assemblyFormat = [{
    $source `[` $source_indices `]` `,` $dest `[` $dest_indices `]` `bytes` `=` $bytes
    attr-dict `:` type($source) `,` type($dest)
  }];
}

def TileNV_CpAsyncWaitOp : TileNV_Op<"cp_async_wait"> {
  let summary = "cp.async.wait_all: the thread's cp.async copies are done";
  let assemblyFormat = "attr-dict";
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
                       I64Attr:$count, UnitAttr:$trans);
  let assemblyFormat = [{
    $source `[` $offset `]` `->` $dest `[` $base `]` `x` $count (`trans` $trans^)?
    attr-dict `:` type($source) `,` type($dest)
  }];
}

def TileNV_MmaSyncOp : TileNV_Op<"mma_sync"> {
  let summary = "mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: acc += a * b";
  let description = [{
    `acc[acc_base..+3]` (f32), `a[a_base..+3]` and `b[b_base..+1]` (packed
    pairs in i32) are the per-thread fragments of the instruction.
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
  let arguments = (ins I32:$address, I64Attr:$leading_bytes, I64Attr:$stride_bytes,
                       I64Attr:$swizzle_bytes);
  let results = (outs I64:$result);
  let assemblyFormat = [{
    $address `lbo` `=` $leading_bytes `sbo` `=` $stride_bytes `swizzle` `=` $swizzle_bytes attr-dict
  }];
}

def TileNV_WgmmaOp : TileNV_Op<"wgmma"> {
  let summary = "wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}: acc += A * B";
  let description = [{
    Issued by a whole warpgroup; `acc[base]` .. `acc[base + n/2 - 1]` are the
    thread's accumulator registers. `trans_a`/`trans_b` mark MN-major
    operands. Completion: tilenv.wgmma_commit then tilenv.wgmma_wait.
  }];
  let arguments = (ins AnyMemRef:$acc, Index:$base, I64:$desc_a, I64:$desc_b, I64Attr:$n,
                       TypeAttr:$operand_type, UnitAttr:$trans_a, UnitAttr:$trans_b);
  let assemblyFormat = [{
    $acc `[` $base `]` `,` $desc_a `,` $desc_b `n` `=` $n $operand_type
    (`trans_a` $trans_a^)? (`trans_b` $trans_b^)? attr-dict `:` type($acc)
  }];
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
  let arguments = (ins I64Attr:$pending);
  let assemblyFormat = "$pending attr-dict";
}

#endif
