//===- TesselVerifyBarriers.cpp - no block barrier in divergent code ------===//
//
// `__syncthreads` waits for every thread of the block; if some threads
// cannot reach it, the block hangs with no message. Lowering emits block
// barriers for collective ops, and a collective op inside a warp-specialized
// role must use the role's named barrier instead. This pass makes that class
// of bug a compile error: it computes which values depend on the thread
// index and rejects any block-wide barrier nested in a role or in control
// flow whose condition or bounds are such values.
//
//===----------------------------------------------------------------------===//
#include "tessel/Transforms/Passes.h"

namespace tessel {
#define GEN_PASS_DEF_TESSELVERIFYBARRIERS
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

namespace {
/// Values that may differ between the threads of a block: the thread index
/// and everything computed from it (memory reads at such indices included).
/// Values read from registers at uniform indices are taken as uniform, as the
/// tile level promises for its scalar code.
class ThreadDivergence {
public:
  explicit ThreadDivergence(KernelOp kernel) {
    // Loop-carried values can make a value divergent after a later one is
    // visited: iterate to a fixed point (each round only adds values).
    for (bool changed = true; changed;) {
      changed = false;
      kernel.walk([&](Operation *op) { changed |= visit(op); });
    }
  }
  bool isDivergent(Value v) const { return divergent.contains(v); }

private:
  DenseSet<Value> divergent;

  bool mark(Value v) { return divergent.insert(v).second; }
  bool anyDivergent(ValueRange values) const {
    return llvm::any_of(values, [&](Value v) { return divergent.contains(v); });
  }

  bool visit(Operation *op) {
    bool changed = false;
    if (llvm::isa<tilenv::ThreadIdOp>(op)) {
      for (Value r : op->getResults()) changed |= mark(r);
      return changed;
    }
    if (auto loop = llvm::dyn_cast<scf::ForOp>(op)) {
      if (anyDivergent({loop.getLowerBound(), loop.getUpperBound(), loop.getStep()}))
        changed |= mark(loop.getInductionVar());
      auto yield = llvm::cast<scf::YieldOp>(loop.getBody()->getTerminator());
      for (auto [i, init] : llvm::enumerate(loop.getInitArgs())) {
        if (divergent.contains(init) || divergent.contains(yield.getOperand(i)) ||
            divergent.contains(loop.getInductionVar())) {
          changed |= mark(loop.getRegionIterArg(i));
          changed |= mark(loop.getResult(i));
        }
      }
      return changed;
    }
    if (auto whileOp = llvm::dyn_cast<scf::WhileOp>(op)) {
      // Conservative: any divergent input, condition or carried value makes
      // every carried value and result divergent.
      bool any = anyDivergent(whileOp.getInits()) ||
                 anyDivergent(whileOp.getConditionOp().getOperands()) ||
                 anyDivergent(whileOp.getYieldOp().getOperands());
      if (!any) return false;
      for (Value v : whileOp.getBeforeArguments()) changed |= mark(v);
      for (Value v : whileOp.getAfterArguments()) changed |= mark(v);
      for (Value v : whileOp.getResults()) changed |= mark(v);
      return changed;
    }
    bool depends = anyDivergent(op->getOperands());
    // A region op's results are what its regions yield.
    // (Blocks of ops without terminators, such as tile.kernel, end in any op.)
    for (Region &region : op->getRegions())
      for (Block &block : region)
        if (!block.empty() && block.back().hasTrait<OpTrait::ReturnLike>() &&
            anyDivergent(block.back().getOperands()))
          depends = true;
    if (!depends) return false;
    for (Value r : op->getResults()) changed |= mark(r);
    return changed;
  }
};

/// The construct around `op` that only some threads may enter, if any.
static Operation *divergentAncestor(Operation *op, const ThreadDivergence &divergence) {
  for (Operation *parent = op->getParentOp(); parent && !llvm::isa<KernelOp>(parent);
       parent = parent->getParentOp()) {
    if (llvm::isa<RoleOp>(parent)) return parent;
    if (auto ifOp = llvm::dyn_cast<scf::IfOp>(parent);
        ifOp && divergence.isDivergent(ifOp.getCondition()))
      return parent;
    if (auto loop = llvm::dyn_cast<scf::ForOp>(parent);
        loop && (divergence.isDivergent(loop.getLowerBound()) ||
                 divergence.isDivergent(loop.getUpperBound()) ||
                 divergence.isDivergent(loop.getStep())))
      return parent;
    if (auto whileOp = llvm::dyn_cast<scf::WhileOp>(parent);
        whileOp && divergence.isDivergent(whileOp.getConditionOp().getCondition()))
      return parent;
  }
  return nullptr;
}

struct TesselVerifyBarriers : tessel::impl::TesselVerifyBarriersBase<TesselVerifyBarriers> {
  using Base::Base;
  void runOnOperation() override {
    KernelOp kernel = getOperation();
    ThreadDivergence divergence(kernel);
    bool ok = true;
    kernel.walk([&](Operation *op) {
      bool blockWide = llvm::isa<tilenv::SyncThreadsOp>(op);
      if (auto barrier = llvm::dyn_cast<BarrierOp>(op)) blockWide = !barrier.getId();
      if (!blockWide) return;
      Operation *where = divergentAncestor(op, divergence);
      if (!where) return;
      InFlightDiagnostic diag =
          op->emitError("block-wide barrier (__syncthreads) in code that only some threads run: "
                        "the others never reach it and the block hangs; use the role's named "
                        "barrier");
      diag.attachNote(where->getLoc())
          << (llvm::isa<RoleOp>(where) ? "inside this role"
                                        : "inside this construct, whose condition depends on "
                                          "the thread index");
      ok = false;
    });
    if (!ok) signalPassFailure();
  }
};
} // namespace
