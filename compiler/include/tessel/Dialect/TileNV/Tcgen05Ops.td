//===- Tcgen05Ops.td - sm_100a tensor memory and tcgen05 ---*- tablegen -*-===//
//
// Blackwell's fifth-generation tensor-core instructions at thread level.
// Tensor-memory addresses are i32 `lane << 16 | column`, columns counted in
// 32-bit units; shared-memory matrices are 64-bit descriptors. Which thread
// or warp issues each op, and the fences around thread synchronisation, are
// the lowering's business; the ops print as one PTX instruction each.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TILENV_TCGEN05_OPS
#define TESSEL_TILENV_TCGEN05_OPS

include "tessel/Dialect/TileNV/TileNVEnums.td"

def TileNV_Tcgen05AllocOp : TileNV_Op<"tcgen05_alloc"> {
  let summary = "tcgen05.alloc: `columns` of tensor memory, base address into a shared word";
  let description = [{
    Executed by every thread of one warp. `columns` is a power of two in
    [32, 512]; the base address lands in the shared word at `dest`.
  }];
  let arguments = (ins I32:$dest, Tessel_I64Attr:$columns);
  let assemblyFormat = "$dest `columns` `=` $columns attr-dict";
  let hasVerifier = 1;
}

def TileNV_Tcgen05DeallocOp : TileNV_Op<"tcgen05_dealloc"> {
  let summary = "tcgen05.dealloc: free what the same warp allocated";
  let arguments = (ins I32:$address, Tessel_I64Attr:$columns);
  let assemblyFormat = "$address `columns` `=` $columns attr-dict";
  let hasVerifier = 1;
}

def TileNV_Tcgen05RelinquishOp : TileNV_Op<"tcgen05_relinquish"> {
  let summary = "tcgen05.relinquish_alloc_permit: this block allocates no more";
  let assemblyFormat = "attr-dict";
}

def TileNV_Tcgen05FenceBeforeOp : TileNV_Op<"tcgen05_fence_before"> {
  let summary = "tcgen05.fence::before_thread_sync: earlier tcgen05 ops before a barrier";
  let assemblyFormat = "attr-dict";
}

def TileNV_Tcgen05FenceAfterOp : TileNV_Op<"tcgen05_fence_after"> {
  let summary = "tcgen05.fence::after_thread_sync: later tcgen05 ops after a barrier";
  let assemblyFormat = "attr-dict";
}

def TileNV_Tcgen05InstrDescOp : TileNV_Op<"tcgen05_idesc", [Pure]> {
  let summary = "the instruction descriptor of a tcgen05.mma";
  let description = [{
    D = A x B with A [m, k] and B [k, n] of `operand_type`, 32 bytes of K:
    f16 or bf16 (kind::f16, k 16), e4m3 or e5m2 (kind::f8f6f4, k 32), both
    D of `acc_type` f32 or f16; i8 or ui8 (kind::i8, k 32) into i32.
    `trans_a`/`trans_b` mark MN-major operands. `block_scaled`: kind::
    mxf8f6f4 (e4m3 or e5m2 into f32, ue8m0 scales, bit 23), with both
    scale-factor ids 0; the lowering ORs each K step's ids in.
    cta_group::1 shapes: m 64 or 128, n 8 .. 256 in steps of 8 (16 for m
    128 with A in tensor memory is the caller's rule).
  }];
  let arguments = (ins Tessel_I64Attr:$m, Tessel_I64Attr:$n, TypeAttr:$operand_type,
                       TypeAttr:$acc_type, UnitAttr:$trans_a, UnitAttr:$trans_b,
                       UnitAttr:$block_scaled);
  let results = (outs I32:$result);
  let assemblyFormat = [{
    `m` `=` $m `n` `=` $n $operand_type `->` $acc_type (`trans_a` $trans_a^)?
    (`trans_b` $trans_b^)? (`block_scaled` $block_scaled^)? attr-dict
  }];
  let hasVerifier = 1;
}

def TileNV_Tcgen05SmemDescOp : TileNV_Op<"tcgen05_smem_desc", [Pure]> {
  let summary = "a tcgen05 shared-memory matrix descriptor";
  let description = [{
    As tilenv.wgmma_desc, in sm_100's encoding: version 1 in bits 46-48 and
    the swizzle (0, 32, 64 or 128 bytes) in bits 61-63.
  }];
  let arguments = (ins I32:$address, Tessel_I64Attr:$leading_bytes, Tessel_I64Attr:$stride_bytes,
                       Tessel_I64Attr:$swizzle_bytes);
  let results = (outs I64:$result);
  let assemblyFormat = [{
    $address `lbo` `=` $leading_bytes `sbo` `=` $stride_bytes `swizzle` `=` $swizzle_bytes attr-dict
  }];
  let hasVerifier = 1;
}

def TileNV_Tcgen05MmaOp : TileNV_Op<"tcgen05_mma", [AttrSizedOperandSegments]> {
  let summary = "tcgen05.mma.cta_group::1: D (+)= A x B, D in tensor memory";
  let description = [{
    Issued by one thread, asynchronously, of `kind` (f16 by default,
    f8f6f4, i8, or the block-scaled mxf8f6f4), which must be the kind of
    the descriptor's types. kind::mxf8f6f4 (.block_scale.scale_vec::1X)
    also reads `scale_a` and `scale_b`, the tensor-memory addresses of the
    ue8m0 scales of A's rows and B's columns (the byte in each 32-bit column
    chosen by the descriptor's scale-factor ids). `a` is a shared-memory descriptor
    (i64, the "ss" form) or a tensor-memory address (i32, "ts"); B is always
    in shared memory. With `accumulate` false D = A x B (the first K step).
    Completion: tilenv.tcgen05_commit on an mbarrier.
  }];
  let arguments = (ins I32:$d, AnyTypeOf<[I64, I32]>:$a, I64:$desc_b, I32:$idesc,
                       I1:$accumulate, Optional<I32>:$scale_a, Optional<I32>:$scale_b,
                       DefaultValuedAttr<TileNV_Tcgen05Kind,
                                         "::tessel::tilenv::Tcgen05Kind::f16">:$kind);
  let assemblyFormat = [{
    $d `,` $a `,` $desc_b `,` $idesc `accumulate` `(` $accumulate `)`
    (`scales` `(` $scale_a^ `,` $scale_b `)`)? (`kind` $kind^)? attr-dict `:` type($a)
  }];
  let hasVerifier = 1;
}

def TileNV_Tcgen05CommitOp : TileNV_Op<"tcgen05_commit"> {
  let summary = "tcgen05.commit: one arrival on the mbarrier once the thread's MMAs complete";
  let arguments = (ins I32:$barrier);
  let assemblyFormat = "$barrier attr-dict";
}

def TileNV_Tcgen05LdOp : TileNV_Op<"tcgen05_ld"> {
  let summary = "tcgen05.ld: a warp's registers from tensor memory";
  let description = [{
    Executed by a whole warp. Thread t's registers `dest[base]` ..
    `dest[base + registers - 1]` (32-bit) receive the cells the PTX ISA's
    table for `shape` gives, repeated `num` times along the columns from
    `address`. With `pack` two 16-bit columns become one register.
    `offset` is the .16x32bx2 immediate (columns). The registers hold the
    values only after tilenv.tcgen05_wait_ld.
  }];
  let arguments = (ins I32:$address, AnyMemRef:$dest, Index:$base, TileNV_TmemShape:$shape,
                       Tessel_I64Attr:$num, UnitAttr:$pack, OptionalAttr<Tessel_I64Attr>:$offset);
  let assemblyFormat = [{
    $address `->` $dest `[` $base `]` $shape `x` $num (`pack` $pack^)? (`offset` $offset^)?
    attr-dict `:` type($dest)
  }];
  let hasVerifier = 1;
}

def TileNV_Tcgen05StOp : TileNV_Op<"tcgen05_st"> {
  let summary = "tcgen05.st: a warp's registers into tensor memory";
  let description = [{
    The inverse of tilenv.tcgen05_ld; with `unpack` each register's two
    16-bit halves go to two columns. Complete after tilenv.tcgen05_wait_st.
  }];
  let arguments = (ins AnyMemRef:$source, Index:$base, I32:$address, TileNV_TmemShape:$shape,
                       Tessel_I64Attr:$num, UnitAttr:$unpack, OptionalAttr<Tessel_I64Attr>:$offset);
  let assemblyFormat = [{
    $source `[` $base `]` `->` $address $shape `x` $num (`unpack` $unpack^)? (`offset` $offset^)?
    attr-dict `:` type($source)
  }];
  let hasVerifier = 1;
}

def TileNV_Tcgen05WaitLdOp : TileNV_Op<"tcgen05_wait_ld"> {
  let summary = "tcgen05.wait::ld: the warp's tensor-memory loads have landed";
  let assemblyFormat = "attr-dict";
}

def TileNV_Tcgen05WaitStOp : TileNV_Op<"tcgen05_wait_st"> {
  let summary = "tcgen05.wait::st: the warp's tensor-memory stores are done";
  let assemblyFormat = "attr-dict";
}

def TileNV_Tcgen05CpOp : TileNV_Op<"tcgen05_cp"> {
  let summary = "tcgen05.cp: a shared-memory matrix (descriptor) into tensor memory";
  let description = [{
    Issued by one thread, asynchronously, ordered before a later
    tcgen05.mma of the same thread; tracked by tilenv.tcgen05_commit.
  }];
  let arguments = (ins I64:$desc, I32:$address, TileNV_TmemCopyShape:$shape);
  let assemblyFormat = "$desc `->` $address $shape attr-dict";
}

#endif
