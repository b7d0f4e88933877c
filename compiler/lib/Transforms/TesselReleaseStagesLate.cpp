//===- TesselReleaseStagesLate.cpp - two wgmma groups in flight -----------===//
//
// A warp-specialized consumer loop waits for its wgmmas at the end of every
// iteration (wgmma_wait 0) because the next op hands the stage they read
// back to the producer. Releasing the stage one iteration later lets the
// wait be `wgmma_wait 1`: iteration k's group runs while iteration k+1
// issues, and stage k is released once group k is known complete (after
// k+1's commit). With a ring of at least two stages the producer still gets
// every stage before the consumer needs the next one.
//
// Only loops that warp specialization marked with their ring size (asked
// for with overlap_mma), in the plain gemm mainloop form: one commit, one
// wait 0, one release, the accumulators written by wgmmas alone (no other op
// touches registers a pending group writes). A marked loop of another form
// is an error at its line.
//
// ptxas serializes every wgmma of such a loop (C7515) when ordinary
// instructions write the accumulator before it, as the zero fill before a
// mainloop does: its stores reach a pipeline stage that spans the back
// edge. So when the accumulator enters the loop as a zero fill and one
// wgmma op writes it, the fill goes (kept only for a loop that does not
// run) and the first product into each register overwrites it (scale-d 0)
// instead, as in a hand-written Hopper mainloop.
//
//===----------------------------------------------------------------------===//
#include "tessel/Dialect/Tile/TileDialect.h"
#include "tessel/Dialect/TileNV/TileNVDialect.h"
#include "tessel/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"

namespace tessel {
#define GEN_PASS_DEF_TESSELRELEASESTAGESLATE
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;

namespace {
/// The parts of a loop that can release its stages late.
struct LateRelease {
  tilenv::WgmmaWaitOp wait;
  /// The arrival on the stage's `empty` barrier: the arrive itself or the
  /// scf.if that guards it, directly in the body.
  Operation *release = nullptr;
  /// Accumulators of the loop's wgmmas: ready after the loop's last wait.
  llvm::SmallSetVector<Value, 4> accumulators;
  SmallVector<tilenv::WgmmaOp> wgmmas;
};

/// True for the ops of a gemm mainloop that neither touch registers a
/// pending wgmma writes nor hand anything to other threads.
bool isQuietOp(Operation *op) {
  return isMemoryEffectFree(op) ||
         llvm::isa<tilenv::MbarrierWaitOp, tilenv::WgmmaFenceOp, tilenv::SyncWarpOp, scf::ForOp,
                   scf::IfOp, scf::YieldOp>(op);
}

/// The loop's parts, or why it cannot keep two groups in flight.
std::optional<LateRelease> match(scf::ForOp loop, std::string &why) {
  auto fail = [&](const char *reason) -> std::optional<LateRelease> {
    why = reason;
    return std::nullopt;
  };
  auto ring = loop->getAttrOfType<IntegerAttr>(kStageRingAttr);
  if (!ring || ring.getInt() < 2)
    return fail("a stage released an iteration late needs a ring of at least 2 stages");
  Block *body = loop.getBody();
  LateRelease plan;
  Operation *commit = nullptr;
  // The stage's release: one arrival, or (multicast stages) one on each
  // block of the cluster.
  SmallVector<Operation *> arrivals;
  bool expectsBytes = false;
  int commits = 0, waits = 0;
  bool plain = true;
  body->walk([&](Operation *op) {
    if (llvm::isa<tilenv::WgmmaCommitOp>(op)) {
      ++commits;
      commit = op;
    } else if (auto wait = llvm::dyn_cast<tilenv::WgmmaWaitOp>(op)) {
      ++waits;
      plan.wait = wait;
    } else if (auto a = llvm::dyn_cast<tilenv::MbarrierArriveOp>(op)) {
      arrivals.push_back(op);
      expectsBytes |= a.getExpectBytes().has_value();
    } else if (llvm::isa<tilenv::MbarrierArriveRemoteOp>(op)) {
      arrivals.push_back(op);
    } else if (auto wgmma = llvm::dyn_cast<tilenv::WgmmaOp>(op)) {
      plan.accumulators.insert(wgmma.getAcc());
      plan.wgmmas.push_back(wgmma);
    } else if (!isQuietOp(op)) {
      plain = false;
    }
  });
  if (!plain)
    return fail("its body does more than wgmmas from shared memory (element-wise work or "
                "register operands would race with a group still running)");
  if (plan.accumulators.empty()) return fail("its gemms are not wgmmas");
  Block *releaseBlock = arrivals.empty() ? nullptr : arrivals.front()->getBlock();
  if (commits != 1 || waits != 1 || arrivals.empty() || expectsBytes ||
      llvm::any_of(arrivals, [&](Operation *a) { return a->getBlock() != releaseBlock; }) ||
      (releaseBlock == body && arrivals.size() != 1) || commit->getBlock() != body ||
      plan.wait->getBlock() != body || plan.wait.getPending() != 0)
    return fail("its body is not one group of wgmmas followed by the stage's release");
  plan.release = arrivals.front();
  if (releaseBlock != body) {
    auto guard = llvm::dyn_cast<scf::IfOp>(releaseBlock->getParentOp());
    if (!guard || guard->getBlock() != body || !guard.getElseRegion().empty())
      return fail("its stage release is nested in control flow");
    plan.release = guard;
  }
  if (!commit->isBeforeInBlock(plan.wait) || !plan.wait->isBeforeInBlock(plan.release))
    return fail("its body is not one group of wgmmas followed by the stage's release");
  // After the wait: nothing but address arithmetic, warp syncs and the
  // release (all of which may move past a pending group).
  for (Operation *op = plan.wait->getNextNode(); op != body->getTerminator(); op = op->getNextNode())
    if (op != plan.release && !isMemoryEffectFree(op) && !llvm::isa<tilenv::SyncWarpOp>(op))
      return fail("its body does more after its gemms than release the stage");
  return plan;
}

/// The body's ops that `root` (with what it nests) depends on, in order.
SmallVector<Operation *> bodySlice(Operation *root, Block *body) {
  llvm::SetVector<Operation *> slice;
  SmallVector<Value> work;
  root->walk([&](Operation *op) { work.append(op->operand_begin(), op->operand_end()); });
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || def->getBlock() != body || !slice.insert(def)) continue;
    work.append(def->operand_begin(), def->operand_end());
  }
  SmallVector<Operation *> ordered(slice.begin(), slice.end());
  llvm::sort(ordered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  return ordered;
}

/// `release` and its slice again, for iteration `iteration`, where `when`
/// holds.
void releaseFor(OpBuilder &b, Location loc, scf::ForOp loop, ArrayRef<Operation *> slice,
                Operation *release, Value iteration, Value when) {
  auto guard = scf::IfOp::create(b, loc, when, /*withElseRegion=*/false);
  OpBuilder inside = OpBuilder::atBlockTerminator(guard.thenBlock());
  IRMapping map;
  map.map(loop.getInductionVar(), iteration);
  for (Operation *op : slice) inside.clone(*op, map);
  inside.clone(*release, map);
}

/// The unrolled loop right before `loop` (only pure ops between) that
/// stores 0.0 to every element of `acc`, the lowering of a zero fill.
scf::ForOp zeroFillBefore(scf::ForOp loop, Value acc) {
  auto type = llvm::dyn_cast<MemRefType>(acc.getType());
  if (!type || type.getRank() != 1 || !type.hasStaticShape()) return {};
  for (Operation *op = loop->getPrevNode(); op; op = op->getPrevNode()) {
    auto fill = llvm::dyn_cast<scf::ForOp>(op);
    if (!fill) {
      if (!isMemoryEffectFree(op)) return {};
      continue;
    }
    std::optional<int64_t> lower = getConstantIntValue(fill.getLowerBound()),
                           upper = getConstantIntValue(fill.getUpperBound()),
                           step = getConstantIntValue(fill.getStep());
    Block *body = fill.getBody();
    auto store = llvm::dyn_cast<memref::StoreOp>(&body->front());
    if (lower != 0 || upper != type.getDimSize(0) || step != 1 || !store ||
        store->getNextNode() != body->getTerminator() || store.getMemRef() != acc ||
        store.getIndices().size() != 1 || store.getIndices()[0] != fill.getInductionVar())
      return {};
    auto zero = store.getValue().getDefiningOp<arith::ConstantOp>();
    auto value = zero ? llvm::dyn_cast<FloatAttr>(zero.getValue()) : FloatAttr();
    if (!value || !value.getValue().isPosZero()) return {};
    return fill;
  }
  return {};
}

/// The block arguments (loop induction variables) `value` is computed from.
llvm::SmallPtrSet<Value, 4> inductionInputs(Value value) {
  llvm::SmallPtrSet<Value, 4> inputs;
  SmallVector<Value> work{value};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (llvm::isa<BlockArgument>(v)) {
      inputs.insert(v);
      continue;
    }
    Operation *def = v.getDefiningOp();
    if (def && seen.insert(def).second) work.append(def->operand_begin(), def->operand_end());
  }
  return inputs;
}

/// Drops the zero fill of the loop's one wgmma accumulator: the product
/// overwrites each register the first time the loop reaches it (first
/// iteration, and every enclosing loop in the body whose induction variable
/// the registers do not depend on at its first trip).
LogicalResult overwriteFirst(scf::ForOp loop, LateRelease &plan, std::string &why) {
  why = "its accumulator is not cleared right before it by one fill, for one wgmma to overwrite "
        "first (ptxas would serialize the wgmmas of a loop whose accumulator other "
        "instructions write)";
  if (plan.wgmmas.size() != 1 || plan.accumulators.size() != 1) return failure();
  tilenv::WgmmaOp wgmma = plan.wgmmas.front();
  if (wgmma.getAccumulate()) return failure();
  scf::ForOp fill = zeroFillBefore(loop, wgmma.getAcc());
  if (!fill) return failure();
  llvm::SmallPtrSet<Value, 4> addressed = inductionInputs(wgmma.getBase());
  OpBuilder b(wgmma);
  Location loc = wgmma.getLoc();
  Value accumulate;
  for (Operation *at = wgmma; at != loop.getOperation();) {
    at = at->getParentOp();
    auto enclosing = llvm::dyn_cast<scf::ForOp>(at);
    if (!enclosing) continue;
    if (enclosing != loop && addressed.contains(enclosing.getInductionVar())) continue;
    Value later = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne,
                                        enclosing.getInductionVar(), enclosing.getLowerBound());
    accumulate = accumulate ? arith::OrIOp::create(b, loc, accumulate, later) : later;
  }
  wgmma.getAccumulateMutable().assign(accumulate);
  // A loop that runs no iteration leaves the accumulator zero, as before.
  OpBuilder after(loop->getBlock(), std::next(Block::iterator(loop)));
  Value none = arith::CmpIOp::create(after, loc, arith::CmpIPredicate::sge, loop.getLowerBound(),
                                     loop.getUpperBound());
  auto guard = scf::IfOp::create(after, loc, none, /*withElseRegion=*/false);
  fill->moveBefore(guard.thenBlock()->getTerminator());
  return success();
}

LogicalResult rewrite(scf::ForOp loop, LateRelease &plan, std::string &why) {
  if (failed(overwriteFirst(loop, plan, why))) return failure();
  Location loc = loop.getLoc();
  Block *body = loop.getBody();
  SmallVector<Operation *> slice = bodySlice(plan.release, body);
  // In the loop: group k may still run; stage k-1 is free once k-1 is done.
  plan.wait.setPending(1);
  plan.wait.getReadyMutable().clear();
  OpBuilder b(plan.release);
  Value iv = loop.getInductionVar();
  Value previous = arith::SubIOp::create(b, loc, iv, loop.getStep());
  Value notFirst = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, iv, loop.getLowerBound());
  releaseFor(b, loc, loop, slice, plan.release, previous, notFirst);
  // After it: the last group completes, and its stage is released.
  b.setInsertionPointAfter(loop);
  tilenv::WgmmaWaitOp::create(b, loc, 0, plan.accumulators.getArrayRef());
  Value lower = loop.getLowerBound(), upper = loop.getUpperBound(), step = loop.getStep();
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value span = arith::SubIOp::create(b, loc, arith::SubIOp::create(b, loc, upper, lower), one);
  Value last = arith::AddIOp::create(
      b, loc, lower, arith::MulIOp::create(b, loc, arith::DivUIOp::create(b, loc, span, step), step));
  Value ran = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, lower, upper);
  releaseFor(b, loc, loop, slice, plan.release, last, ran);
  plan.release->erase();
  for (Operation *op : llvm::reverse(slice))
    if (op->use_empty()) op->erase();
  return success();
}

struct TesselReleaseStagesLate
    : tessel::impl::TesselReleaseStagesLateBase<TesselReleaseStagesLate> {
  void runOnOperation() override {
    SmallVector<scf::ForOp> loops;
    getOperation()->walk([&](scf::ForOp loop) {
      if (loop->hasAttr(kStageRingAttr)) loops.push_back(loop);
    });
    for (scf::ForOp loop : loops) {
      std::string why;
      std::optional<LateRelease> plan = match(loop, why);
      if (!plan || failed(rewrite(loop, *plan, why))) {
        loop.emitError("overlap_mma: this loop cannot keep its wgmmas running into the next "
                       "iteration: ")
            << why;
        return signalPassFailure();
      }
      loop->removeAttr(kStageRingAttr);
    }
  }
};
} // namespace
