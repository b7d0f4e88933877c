//===- Passes.td - Tessel passes ---------------------------*- tablegen -*-===//
#ifndef TESSEL_TRANSFORMS_PASSES
#define TESSEL_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def TesselVerifyKernel : Pass<"tessel-verify-kernel", "::tessel::tile::KernelOp"> {
  let summary = "Check whole-kernel rules the op verifiers cannot see";
  let description = [{
    Pre: tile-level IR. Checks: the thread count is a multiple of 32 and at most
    1024; `tile.parallel` bodies hold element code only (no collective tile
    op); the shared memory the kernel needs (its shared buffers)
    fits the target's per-block limit. Each failure is an error at the
    offending op's location, which the DSL sets to the user's source line.
    Post: the IR is unchanged.
  }];
  let options = [Option<"arch", "arch", "std::string", "\"sm_90a\"",
                        "target architecture: sm_80, sm_90a or sm_100a">];
  let dependentDialects = ["::tessel::tile::TileDialect"];
}

def TesselLayoutInference : Pass<"tessel-layout-inference", "::tessel::tile::KernelOp"> {
  let summary = "Give every fragment a register layout and every shared buffer a layout";
  let description = [{
    Pre: tile-level IR. Strict constraints first: a `tile.annotate_layout`
    fixes a buffer's layout, and each `tile.gemm` picks its tensor-core
    instruction (wgmma on sm_90a when the tile allows it, mma.sync
    m16n8k16 otherwise), splits its tile over warps by its policy and fixes
    its accumulator's layout. Then layouts propagate to a fixed point: a
    `tile.parallel` takes the layout of a fragment it indexes with all its
    indices (or extends one indexed with some of them), and every fragment it
    indexes gets the loop layout projected on that fragment's indices; a
    reduction's result gets its source's layout without the reduced
    dimension; a fragment-to-fragment copy shares one layout. Fragments still
    free then get an element-wise layout from a cost model: the widest
    vector (16 bytes of the narrowest element the fragment is copied from or
    to) along the last dimension, lanes next, warps on the slowest
    dimensions so that row reductions stay inside a warp; threads left over
    replicate and padding past a non-power-of-two extent is skipped.
    Shared operands of tensor-core gemms get the widest XOR swizzle their
    rows allow, other shared buffers a plain row-major layout.
    A layout conflict is an error naming both ops and both layouts; a gemm
    tile that is not a multiple of its instruction names the multiple.
    Post: every fragment alloc and shared alloc has `layout`, every
    fragment-touching `tile.parallel` has `layout`, every gemm has
    `instruction` and `warps`.
  }];
  let options = [Option<"arch", "arch", "std::string", "\"sm_90a\"",
                        "target architecture: sm_80, sm_90a or sm_100a">];
  let dependentDialects = ["::tessel::tile::TileDialect"];
}

def TesselInsertBarriers : Pass<"tessel-insert-barriers", "::tessel::tile::KernelOp"> {
  let summary = "Insert block barriers between tile ops that share memory";
  let description = [{
    Pre: tile-level IR. A tile op distributes its elements over the threads
    differently from the next one, so when two tile ops (or block-uniform
    scalar accesses) touch the same shared buffer and one of them writes it,
    a `tile.barrier` goes between them. Fragments are registers, private to
    their threads, and need none. Loops are walked twice so
    that a write at the end of an iteration is ordered before a read at the
    start of the next. Barriers are only placed in block-uniform code (never in
    a `tile.parallel` body).
    Post: every cross-thread shared-memory dependence crosses a `tile.barrier`.
  }];
  let dependentDialects = ["::tessel::tile::TileDialect"];
}

def TesselLowerTileOps : Pass<"tessel-lower-tile-ops", "::tessel::tile::KernelOp"> {
  let summary = "Lower collective tile ops to per-thread code";
  let description = [{
    Pre: tile-level IR with layouts (tessel-layout-inference) and barriers.
    Fragments become per-thread register arrays of their layout's register
    count; a collective op on a fragment becomes an unrolled loop over the
    thread's registers (the element of register r is the layout's thread
    part XOR register part), with 16-byte vector moves between registers
    and memory where the layout holds contiguous elements. Replicated
    elements are written to memory by their owner only. Shared buffers get
    offsets in dynamic shared memory and are addressed through their layout
    (swizzle or padding) or annotated affine map. Global/shared copies stay
    thread-strided and vectorized, with cp.async inside pipelined loops on
    sm_80+. gemm becomes ldmatrix + mma.sync m16n8k16 per warp, or wgmma
    m64nNk16 per warpgroup with swizzled shared-memory descriptors.
    Fragment reductions fold registers in the thread, then shuffle across
    lanes, then go through shared memory only across warps.
    Post: thread-level IR (scf, arith, math, memref, tilenv) with
    `smem_bytes` set on the kernel.
  }];
  let options = [Option<"arch", "arch", "std::string", "\"sm_90a\"",
                        "target architecture: sm_80, sm_90a or sm_100a">];
  let dependentDialects = ["::tessel::tile::TileDialect", "::tessel::tilenv::TileNVDialect",
                           "mlir::scf::SCFDialect", "mlir::arith::ArithDialect",
                           "mlir::math::MathDialect", "mlir::memref::MemRefDialect"];
}

#endif
