//===- TesselInsertBarriers.cpp - order cross-thread shared accesses ------===//
//
// Each tile op maps elements to threads in its own way, so a shared buffer
// written by one tile op and read (or rewritten) by a later one is a
// cross-thread dependence. The pass walks block-uniform code in order,
// tracking which shared-backed buffers have been read and written since the
// last barrier, and places a tile.barrier before the first op that conflicts.
//
//===----------------------------------------------------------------------===//
#include "tessel/Transforms/BufferUtils.h"
#include "tessel/Transforms/Passes.h"

#include "llvm/ADT/SetOperations.h"
#include "llvm/ADT/TypeSwitch.h"

namespace tessel {
#define GEN_PASS_DEF_TESSELINSERTBARRIERS
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

namespace {
using BufferSet = llvm::SmallPtrSet<void *, 8>;

struct AccessState {
  BufferSet reads, writes;
  void merge(const AccessState &other) {
    llvm::set_union(reads, other.reads);
    llvm::set_union(writes, other.writes);
  }
};

/// Shared-backed buffers an op reads and writes, element code inside a
/// tile.parallel body included.
static void collectAccesses(Operation *op, AccessState &acc) {
  auto note = [&](Value buffer, bool write) {
    Value root = getRootBuffer(buffer);
    if (!isSharedBacked(root)) return;
    (write ? acc.writes : acc.reads).insert(root.getAsOpaquePointer());
  };
  op->walk([&](Operation *inner) {
    llvm::TypeSwitch<Operation *>(inner)
        .Case([&](CopyOp o) { note(o.getSource(), false), note(o.getDest(), true); })
        .Case([&](FillOp o) { note(o.getDest(), true); })
        .Case([&](GemmOp o) {
          note(o.getA(), false), note(o.getB(), false), note(o.getC(), false);
          note(o.getC(), true);
        })
        .Case([&](ReduceOp o) {
          note(o.getSource(), false), note(o.getDest(), false), note(o.getDest(), true);
        })
        .Case([&](AtomicAddOp o) {
          if (llvm::isa<MemRefType>(o.getValue().getType())) note(o.getValue(), false);
          note(o.getDest(), false), note(o.getDest(), true);
        })
        .Case([&](memref::LoadOp o) { note(o.getMemRef(), false); })
        .Case([&](memref::StoreOp o) { note(o.getMemRef(), true); });
  });
}

static bool conflicts(const AccessState &pending, const AccessState &next) {
  for (void *w : next.writes)
    if (pending.reads.contains(w) || pending.writes.contains(w)) return true;
  for (void *r : next.reads)
    if (pending.writes.contains(r)) return true;
  return false;
}

struct BarrierPlacer {
  bool dryRun;

  /// Walks one block of block-uniform code; returns the state at its end.
  AccessState walkBlock(Block &block, AccessState state) {
    for (Operation &op : llvm::make_early_inc_range(block)) {
      if (llvm::isa<BarrierOp>(op)) {
        state = {};
        continue;
      }
      if (llvm::isa<scf::ForOp, PipelinedOp>(op)) {
        Block &body = op.getRegion(0).front();
        AccessState exit = BarrierPlacer{true}.walkBlock(body, state);
        AccessState entry = state;
        entry.merge(exit); // the back edge
        AccessState realExit = walkBlock(body, entry);
        state.merge(realExit); // zero or more iterations
        continue;
      }
      if (auto ifOp = llvm::dyn_cast<scf::IfOp>(op)) {
        AccessState out = walkBlock(ifOp.getThenRegion().front(), state);
        if (!ifOp.getElseRegion().empty())
          out.merge(walkBlock(ifOp.getElseRegion().front(), state));
        else
          out.merge(state);
        state = out;
        continue;
      }
      AccessState here;
      collectAccesses(&op, here);
      if (here.reads.empty() && here.writes.empty()) continue;
      if (conflicts(state, here)) {
        if (!dryRun) {
          OpBuilder b(&op);
          BarrierOp::create(b, op.getLoc());
        }
        state = {};
      }
      state.merge(here);
    }
    return state;
  }
};

struct TesselInsertBarriers : tessel::impl::TesselInsertBarriersBase<TesselInsertBarriers> {
  void runOnOperation() override {
    BarrierPlacer{false}.walkBlock(getOperation().getBodyBlock(), {});
  }
};
} // namespace
