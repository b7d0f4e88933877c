//===- PipelinePlanning.cpp - what a pipelined loop loads ahead -----------===//
#include "PipelinePlanning.h"
#include "TmaRules.h"
#include "tessel/Transforms/BufferUtils.h"

#include "mlir/Analysis/SliceAnalysis.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

int64_t PipelinePlan::stageBytes() {
  int64_t total = 0;
  for (PipelineLoad &load : loads) total += load.bytes;
  return total;
}

/// Ops of the loop body that compute `values` (free of memory effects), in
/// order.
static FailureOr<SetVector<Operation *>> addressSlice(ValueRange values, Block &body) {
  SetVector<Operation *> slice;
  BackwardSliceOptions options;
  options.filter = [&](Operation *op) { return op->getBlock() == &body; };
  options.inclusive = true;
  for (Value value : values)
    if (Operation *def = value.getDefiningOp(); def && def->getBlock() == &body)
      if (failed(getBackwardSlice(def, &slice, options))) return failure();
  for (Operation *op : slice)
    if (!isMemoryEffectFree(op)) return failure();
  // Backward slices of several values come in discovery order.
  SmallVector<Operation *> ordered(slice.begin(), slice.end());
  llvm::sort(ordered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  return SetVector<Operation *>(ordered.begin(), ordered.end());
}

/// The values a guard uses that are defined outside it.
static SmallVector<Value> guardInputs(Operation *guard) {
  SmallVector<Value> inputs;
  guard->walk([&](Operation *op) {
    for (Value v : op->getOperands())
      if (!guard->isAncestor(v.getParentBlock()->getParentOp()))
        inputs.push_back(v);
  });
  return inputs;
}

/// A flag wait, or an scf.if holding guards and the side-effect-free code
/// that computes their operands.
static bool isGuard(Operation &op) {
  if (llvm::isa<WaitOp>(op)) return true;
  auto ifOp = llvm::dyn_cast<scf::IfOp>(op);
  if (!ifOp || ifOp.getNumResults()) return false;
  bool waits = false;
  for (Region &region : ifOp->getRegions())
    for (Operation &inner : region.getOps()) {
      if (isGuard(inner)) waits = true;
      else if (!llvm::isa<scf::YieldOp>(inner) && !isMemoryEffectFree(&inner)) return false;
    }
  return waits;
}

LogicalResult tessel::verifyLoadGuards(PipelinePlan &plan) {
  Block &body = plan.loop.getBody().front();
  for (Operation *guard : plan.guards)
    if (failed(addressSlice(guardInputs(guard), body)))
      return guard->emitError("this wait guards the pipelined loop's loads, which are issued "
                             "ahead of the body, so its flag, index and value must be computed "
                             "from the induction variable and values from before the loop; "
                             "here they depend on memory read inside the loop");
  return success();
}

LogicalResult tessel::verifyStagesFit(PipelinePlan &plan, const TargetInfo &target) {
  int64_t bytes = plan.stageBytes();
  if (bytes == 0 || plan.stages <= target.maxSharedBytes / bytes) return success();
  // A count that can be multi-buffered without overflow gets the usual
  // report, each buffer and its stages in a note.
  if (plan.stages <= target.maxSharedBytes) {
    for (PipelineLoad &load : plan.loads)
      load.buffer.setStagesAttr(IntegerAttr::get(IntegerType::get(load.buffer.getContext(), 64),
                                                 plan.stages));
    auto kernel = plan.loop->getParentOfType<KernelOp>();
    if (failed(verifySharedMemory(kernel, target.arch, target.maxSharedBytes))) return failure();
  }
  return plan.loop.emitError("pipeline of ")
         << plan.stages << " stages of " << bytes << " bytes each needs more than the "
         << target.maxSharedBytes << " bytes of shared memory " << target.arch
         << " has per block; use fewer stages or smaller tiles";
}

PipelinePlan tessel::planPipeline(PipelinedOp loop, const TargetInfo &target) {
  PipelinePlan plan;
  plan.loop = loop;
  plan.stages = loop.getNumStages();
  Block &body = loop.getBody().front();
  for (Operation &op : body) {
    auto copy = llvm::dyn_cast<CopyOp>(&op);
    if (!copy) continue;
    auto src = llvm::cast<MemRefType>(copy.getSource().getType());
    if (getMemorySpace(src) != MemorySpace::global) continue;
    auto buffer = copy.getDest().getDefiningOp<AllocOp>();
    if (!buffer || !isSharedBacked(buffer.getResult()) || buffer.getStages()) continue;
    if (!loop->isAncestor(copy) || buffer->getParentRegion()->isAncestor(&loop.getBody()) == false)
      continue;
    // The buffer is read only inside the loop and written only by this copy.
    bool onlyHere = llvm::all_of(buffer->getUsers(), [&](Operation *user) {
      if (llvm::isa<AnnotateLayoutOp>(user)) return true;
      if (!loop->isAncestor(user)) return false;
      if (user == copy) return true;
      if (auto other = llvm::dyn_cast<CopyOp>(user)) return other.getDest() != buffer.getResult();
      if (llvm::isa<FillOp>(user)) return false;
      return true;
    });
    if (!onlyHere) continue;
    if (failed(addressSlice(copy.getSource(), body))) continue;
    PipelineLoad load;
    load.copy = copy;
    load.buffer = buffer;
    load.bytes = buffer.getType().getNumElements() * getElementBytes(src.getElementType());
    load.noTma = whyNoTma(copy.getSource(), copy.getDest(), target);
    plan.loads.push_back(load);
  }
  // Waits before the first load guard the loads.
  if (!plan.loads.empty())
    for (Operation &op : body) {
      if (llvm::any_of(plan.loads, [&](PipelineLoad &l) { return l.copy == &op; })) break;
      if (isGuard(op)) plan.guards.push_back(&op);
    }
  plan.tma = !plan.loads.empty() &&
             llvm::all_of(plan.loads, [](PipelineLoad &l) { return l.noTma.empty(); });
  return plan;
}

Value PipelineBuilder::constant(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }

Value tessel::buildTripCount(OpBuilder &b, Location loc, Value lower, Value upper, Value step) {
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value span = arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, upper, lower), zero);
  return arith::CeilDivUIOp::create(b, loc, span, step);
}

Value PipelineBuilder::iteration(Value iv) {
  Value delta = arith::SubIOp::create(b, loc, iv, mapped(plan.loop.getLower()));
  Value k = arith::DivUIOp::create(b, loc, delta, mapped(plan.loop.getStep()));
  return base ? arith::AddIOp::create(b, loc, base, k).getResult() : k;
}

Value PipelineBuilder::stageOf(Value iteration) {
  return arith::RemUIOp::create(b, loc, iteration, constant(plan.stages));
}

Value PipelineBuilder::parityOf(Value iteration) {
  Value round = arith::DivUIOp::create(b, loc, iteration, constant(plan.stages));
  return arith::RemUIOp::create(b, loc, round, constant(2));
}

Value PipelineBuilder::createBarriers(KernelOp kernel, int64_t arrivals, StringRef name,
                                      std::optional<int64_t> count) {
  OpBuilder::InsertionGuard guard(b);
  Block &entry = kernel.getBodyBlock();
  b.setInsertionPointToStart(&entry);
  int64_t n = count.value_or(plan.stages);
  auto type = getTileMemRefType({n}, b.getI64Type(), MemorySpace::shared);
  Value barriers = AllocOp::create(b, loc, type, IntegerAttr(), Attribute(),
                                   b.getStringAttr(name), IntegerAttr());
  for (int64_t s = 0; s < n; ++s)
    MbarrierInitOp::create(b, loc, barriers, constant(s), b.getI64IntegerAttr(arrivals));
  return barriers;
}

void PipelineBuilder::multiBuffer() {
  for (PipelineLoad &load : plan.loads)
    load.buffer.setStagesAttr(b.getI64IntegerAttr(plan.stages));
}

SetVector<Operation *> tessel::loadAddressSlice(PipelineLoad &load, Block &body) {
  FailureOr<SetVector<Operation *>> slice = addressSlice(load.copy.getSource(), body);
  assert(succeeded(slice) && "planPipeline checked the slice");
  return *slice;
}

SetVector<Operation *> tessel::guardSlice(Operation *guard, Block &body) {
  FailureOr<SetVector<Operation *>> slice = addressSlice(guardInputs(guard), body);
  assert(succeeded(slice) && "verifyLoadGuards checked the slice");
  return *slice;
}

Value PipelineBuilder::sourceFor(PipelineLoad &load, Block &body, Value iv) {
  IRMapping map = outer ? *outer : IRMapping();
  map.map(body.getArgument(0), iv);
  for (Operation *op : loadAddressSlice(load, body)) b.clone(*op, map);
  return map.lookupOrDefault(load.copy.getSource());
}

void PipelineBuilder::waitForGuards(Block &body, Value iv) {
  for (Operation *guard : plan.guards) {
    IRMapping map = outer ? *outer : IRMapping();
    map.map(body.getArgument(0), iv);
    for (Operation *op : guardSlice(guard, body)) b.clone(*op, map);
    b.clone(*guard, map);
  }
}

void PipelineBuilder::eraseGuards() {
  for (Operation *guard : plan.guards) guard->erase();
  plan.guards.clear();
}

void PipelineBuilder::useStage(Region &region, Value stage) {
  for (PipelineLoad &load : plan.loads) {
    Value view = StageOp::create(b, loc, load.buffer.getType(), load.buffer.getResult(), stage);
    load.buffer.getResult().replaceUsesWithIf(view, [&](OpOperand &use) {
      return region.isAncestor(use.getOwner()->getParentRegion()) &&
             !llvm::isa<StageOp>(use.getOwner());
    });
  }
}
