//===- WarpSpecializeRoles.h - tessel-warp-specialize's parts ---*- C++ -*-===//
//
// tessel-warp-specialize decides which pipelined loop it can split into
// producer and consumer roles (TesselWarpSpecialize.cpp, which also
// describes the protocol) and then builds the roles
// (WarpSpecializeRoles.cpp). Both ask the same questions of the code
// before the loop; this header shares them.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TRANSFORMS_WARPSPECIALIZEROLES_H
#define TESSEL_TRANSFORMS_WARPSPECIALIZEROLES_H

#include "PipelinePlanning.h"

namespace tessel {

/// The producer warpgroup, placed after the kernel's own threads.
constexpr int64_t kProducerThreads = 128;

/// Ops that every thread may run before the roles split: allocations,
/// mbarrier inits (thread 0 runs them; insert-barriers orders them before
/// the roles), layout annotations, global scalar loads and side-effect-free
/// scalar code.
bool staysShared(mlir::Operation &op);

/// A persistent kernel's loop over its work tiles (tessel::persistent): an
/// scf.for at the kernel's top level stepping by tile.num_blocks, directly
/// around `loop`. Null otherwise.
mlir::scf::ForOp tileLoopAround(tile::PipelinedOp loop, tile::KernelOp kernel);

/// The flag waits (and conditionals of them) before the loop: in program
/// order they come before every load of the loop, so the producer, which
/// issues those loads, runs them too; the consumers keep them in place.
llvm::SmallVector<mlir::Operation *> guardsBeforeLoop(tile::PipelinedOp loop,
                                                      tile::KernelOp kernel);

/// The ops before the loop, at the kernel's top level, that issuing its
/// loads depends on: those computing the loop bounds and the loads'
/// addresses, those writing memory these read, and those touching memory
/// these write before they do. They must run before the roles split, on
/// every thread; the first that cannot is returned in `blocker`, if given.
/// In a persistent kernel, the ops of the tile loop's body before the loop
/// that the loads depend on (the tile's coordinates) go to `tileNeeds`, in
/// order: the producer runs them again in its own walk over the tiles, so
/// they must be free of side effects (loads of memory the kernel never
/// writes included).
llvm::SetVector<mlir::Operation *>
producerInputs(PipelinePlan &plan, tile::KernelOp kernel, mlir::Operation **blocker = nullptr,
               llvm::SetVector<mlir::Operation *> *tileNeeds = nullptr,
               llvm::ArrayRef<tile::CopyOp> prologue = {});

/// Splits the kernel around `plan.loop` into a producer role that issues the
/// loads and a consumer role that runs everything else, the stages passed
/// between them by mbarriers. The loop is one the pass found splittable.
void splitIntoRoles(const PipelinePlan &plan, tile::KernelOp kernel, const TargetInfo &target);

} // namespace tessel

#endif
