//===- Passes.td - Tessel passes ---------------------------*- tablegen -*-===//
#ifndef TESSEL_TRANSFORMS_PASSES
#define TESSEL_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def TesselVerifyKernel : Pass<"tessel-verify-kernel", "::tessel::tile::KernelOp"> {
  let summary = "Check whole-kernel rules the op verifiers cannot see";
  let description = [{
    Pre: tile-level IR. Checks: the thread count is a multiple of 32 and at most
    1024; `tile.parallel` bodies hold element code only (no collective tile
    op); the shared memory the kernel needs (shared buffers and fragments)
    fits the target's per-block limit. Each failure is an error at the
    offending op's location, which the DSL sets to the user's source line.
    Post: the IR is unchanged.
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
    scalar accesses) touch the same shared or fragment buffer and one of them
    writes it, a `tile.barrier` goes between them. Loops are walked twice so
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
    Pre: tile-level IR with barriers. Shared buffers and fragments get offsets
    in dynamic shared memory (fragments live in shared memory until layout
    inference places them in registers) and become 1-D, addressed through
    their annotated layout or row-major. Copies, fills and region atomics
    become thread-strided loops, 16-byte vectorized where contiguity and
    alignment are proven; gemm becomes an FMA loop per output element;
    reductions use warp shuffles; tile.parallel nests become thread-strided
    loops; accesses through tile.region get bounds guards (zero on read,
    dropped on write) where the window may pass the end of the buffer.
    Post: thread-level IR (scf, arith, math, memref, tilenv) with
    `smem_bytes` set on the kernel.
  }];
  let dependentDialects = ["::tessel::tile::TileDialect", "::tessel::tilenv::TileNVDialect",
                           "mlir::scf::SCFDialect", "mlir::arith::ArithDialect",
                           "mlir::math::MathDialect", "mlir::memref::MemRefDialect"];
}

#endif
