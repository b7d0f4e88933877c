//===- TesselDeferBulkWaits.cpp - let TMA stores read shared memory late --===//
//
// The tile lowering issues a TMA store (or reduce-add) from one thread and
// has that thread wait at once until the bulk group has read its shared
// source, so that the barrier before anyone writes the buffer again also
// orders the TMA's reads:
//
//   scf.if %elected { tma_store ...; bulk_commit; bulk_wait read }
//
// The issuing thread then idles for as long as the copy engine reads the
// tile, and with it its warp and, at the next warpgroup-wide instruction,
// its warpgroup. Nothing needs the wait that early: only a later write of
// shared memory, or a barrier that may order other threads' writes after
// this thread. The pass moves the wait before the first such op after the
// store, wrapping around a loop body (the first iteration's wait then finds
// no group and costs nothing) with one more wait after the loop for its
// last iteration.
//
//===----------------------------------------------------------------------===//
#include "tessel/Dialect/Tile/TileDialect.h"
#include "tessel/Dialect/TileNV/TileNVDialect.h"
#include "tessel/Transforms/Passes.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace tessel {
#define GEN_PASS_DEF_TESSELDEFERBULKWAITS
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

namespace {
bool isSharedMemref(Value v) {
  auto type = llvm::dyn_cast<MemRefType>(v.getType());
  return type && getMemorySpace(type) == MemorySpace::shared;
}

/// Ops that only read shared memory (or take its address).
bool onlyReadsShared(Operation *op) {
  // A vector copy out of shared memory (threads storing a tile the TMA
  // store could not) reads it like a load.
  if (auto copy = llvm::dyn_cast<tilenv::CopyVectorOp>(op))
    return !isSharedMemref(copy.getDest());
  return llvm::isa<memref::LoadOp, tilenv::SmemAddressOp, tilenv::WgmmaOp,
                   tilenv::WgmmaRegAOp, tilenv::LdMatrixOp, memref::DimOp>(op);
}

/// Whether the issuing thread must have its bulk reads complete before `op`:
/// `op` (or an op inside it) may write shared memory, is a barrier (other
/// threads may write after it), or starts or waits for bulk groups itself.
bool needsReadsDone(Operation *op) {
  bool needs = false;
  op->walk([&](Operation *nested) {
    if (llvm::isa<tilenv::NamedBarrierOp, tilenv::SyncThreadsOp, BarrierOp,
                  tilenv::BulkCommitOp, tilenv::BulkWaitOp, tilenv::TmaStoreOp>(
            nested)) {
      needs = true;
      return WalkResult::interrupt();
    }
    if (nested->getNumRegions() && !llvm::isa<scf::ForOp, scf::IfOp>(nested)) {
      needs = true; // control flow we do not look into
      return WalkResult::interrupt();
    }
    if (onlyReadsShared(nested))
      return WalkResult::advance();
    if (llvm::any_of(nested->getOperands(), isSharedMemref)) {
      needs = true;
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return needs;
}

/// `scf.if %c { ...; bulk_commit; bulk_wait read }` with no else: the
/// lowering's elected-thread store.
scf::IfOp electedStore(tilenv::BulkWaitOp wait) {
  auto guard = llvm::dyn_cast<scf::IfOp>(wait->getParentOp());
  if (!guard || !wait.getRead() || guard.getNumResults() ||
      !guard.getElseRegion().empty())
    return {};
  Operation *commit = wait->getPrevNode();
  if (!commit || !llvm::isa<tilenv::BulkCommitOp>(commit) ||
      wait->getNextNode() != wait->getBlock()->getTerminator())
    return {};
  return guard;
}

void waitUnder(Value condition, OpBuilder &b, Location loc) {
  auto guard = scf::IfOp::create(b, loc, condition, /*withElseRegion=*/false);
  OpBuilder inside = guard.getThenBodyBuilder();
  tilenv::BulkWaitOp::create(inside, loc, inside.getUnitAttr());
}

void defer(tilenv::BulkWaitOp wait) {
  scf::IfOp guard = electedStore(wait);
  if (!guard)
    return;
  Value condition = guard.getCondition();
  Location loc = wait.getLoc();
  Block *block = guard->getBlock();
  for (Operation *op = guard->getNextNode(); op; op = op->getNextNode()) {
    if (op->hasTrait<OpTrait::IsTerminator>())
      break;
    if (needsReadsDone(op)) {
      OpBuilder b(op);
      waitUnder(condition, b, loc);
      wait.erase();
      return;
    }
  }
  // Past the end of the block: in a loop whose iterations all see the
  // condition, the next iteration waits before its first conflict and the
  // loop's exit waits for the last one. Elsewhere the block's end waits.
  auto loop = llvm::dyn_cast<scf::ForOp>(block->getParentOp());
  bool conditionFromOutside =
      loop && !loop->isAncestor(condition.getParentBlock()->getParentOp());
  if (!conditionFromOutside) {
    OpBuilder b = block->mightHaveTerminator()
                      ? OpBuilder(block->getTerminator())
                      : OpBuilder::atBlockEnd(block);
    waitUnder(condition, b, loc);
    wait.erase();
    return;
  }
  Operation *at = &block->front();
  while (at != guard.getOperation() && !needsReadsDone(at))
    at = at->getNextNode();
  OpBuilder b(at);
  waitUnder(condition, b, loc);
  b.setInsertionPointAfter(loop);
  waitUnder(condition, b, loc);
  wait.erase();
}

struct TesselDeferBulkWaits
    : tessel::impl::TesselDeferBulkWaitsBase<TesselDeferBulkWaits> {
  void runOnOperation() override {
    SmallVector<tilenv::BulkWaitOp> waits;
    getOperation()->walk(
        [&](tilenv::BulkWaitOp wait) { waits.push_back(wait); });
    for (tilenv::BulkWaitOp wait : waits)
      defer(wait);
  }
};
} // namespace
