//===- PipelinePlanning.cpp - what a pipelined loop loads ahead -----------===//
#include "PipelinePlanning.h"
#include "TmaRules.h"
#include "tessel/Transforms/BufferUtils.h"
#include "tessel/Transforms/Remarks.h"

#include "mlir/Analysis/SliceAnalysis.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"

#include <numeric>

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

/// Kernel tensors (arguments in global memory) that no op of `kernel`
/// writes: a load of one gives the same value whenever it runs, so it may be
/// issued ahead like any address arithmetic (a paged cache's page table).
static DenseSet<Value> tensorsOnlyRead(KernelOp kernel) {
  DenseSet<Value> tensors, written;
  for (BlockArgument arg : kernel.getBodyBlock().getArguments())
    if (auto type = llvm::dyn_cast<MemRefType>(arg.getType());
        type && getMemorySpace(type) == MemorySpace::global)
      tensors.insert(arg);
  kernel.walk([&](Operation *op) {
    for (OpOperand &use : op->getOpOperands()) {
      if (!llvm::isa<MemRefType>(use.get().getType())) continue;
      Value root = getRootBuffer(use.get());
      if (!tensors.contains(root)) continue;
      bool reads = llvm::isa<memref::LoadOp, RegionOp, StageOp, BoundOp>(op);
      if (auto copy = llvm::dyn_cast<CopyOp>(op)) reads = use.get() == copy.getSource();
      if (auto copy = llvm::dyn_cast<CopyAsyncOp>(op)) reads = use.get() == copy.getSource();
      if (auto gemm = llvm::dyn_cast<GemmOp>(op)) reads = use.get() != gemm.getC();
      if (!reads) written.insert(root);
    }
  });
  for (Value w : written) tensors.erase(w);
  return tensors;
}

/// Ops of the loop body that compute `values`, in order: side-effect-free
/// code and loads of kernel tensors in `onlyRead`. Fails at the first op
/// that is neither, returned in `blocker`.
static FailureOr<SetVector<Operation *>> addressSlice(ValueRange values, Block &body,
                                                      const DenseSet<Value> &onlyRead,
                                                      Operation **blocker = nullptr) {
  SetVector<Operation *> slice;
  BackwardSliceOptions options;
  options.filter = [&](Operation *op) { return op->getBlock() == &body; };
  options.inclusive = true;
  for (Value value : values)
    if (Operation *def = value.getDefiningOp(); def && def->getBlock() == &body)
      if (failed(getBackwardSlice(def, &slice, options))) return failure();
  // Backward slices of several values come in discovery order.
  SmallVector<Operation *> ordered(slice.begin(), slice.end());
  llvm::sort(ordered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  for (Operation *op : ordered) {
    if (isMemoryEffectFree(op)) continue;
    auto load = llvm::dyn_cast<memref::LoadOp>(op);
    if (load && onlyRead.contains(getRootBuffer(load.getMemRef()))) continue;
    if (blocker) *blocker = op;
    return failure();
  }
  return SetVector<Operation *>(ordered.begin(), ordered.end());
}

static DenseSet<Value> tensorsOnlyRead(Operation *inLoop) {
  return tensorsOnlyRead(inLoop->getParentOfType<KernelOp>());
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
bool tessel::isGuard(Operation &op) {
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

/// Why the address of a load cannot be computed ahead because of `blocker`.
static std::string blockedBy(Operation *blocker) {
  std::string why;
  llvm::raw_string_ostream os(why);
  os << "'" << blocker->getName() << "' at " << describeLocation(blocker->getLoc());
  if (auto load = llvm::dyn_cast<memref::LoadOp>(blocker)) {
    auto space = getMemorySpace(load.getMemRefType());
    if (space == MemorySpace::global && llvm::isa<BlockArgument>(getRootBuffer(load.getMemRef())))
      os << " reads a tensor the kernel also writes";
    else
      os << " reads " << (space == MemorySpace::global ? "global memory other than a kernel tensor"
                                                       : "memory other than a kernel tensor")
         << ", which may change between iterations";
  } else {
    os << " has side effects";
  }
  return why;
}

LogicalResult tessel::verifyLoadGuards(PipelinePlan &plan) {
  Block &body = plan.loop.getBody().front();
  DenseSet<Value> onlyRead = tensorsOnlyRead(plan.loop);
  for (Operation *guard : plan.guards) {
    Operation *blocker = nullptr;
    if (failed(addressSlice(guardInputs(guard), body, onlyRead, &blocker)))
      return guard->emitError("this wait guards the pipelined loop's loads, which are issued "
                             "ahead of the body, so its flag, index and value must be computed "
                             "from the induction variable, values from before the loop and "
                             "tensors the kernel only reads; here they depend on ")
             << (blocker ? blockedBy(blocker) : std::string("a value computed inside the loop"));
  }
  // A wait after a load would order the next iteration's loads in program
  // order, but pipelining issues those loads ahead of it: it would guard
  // nothing that the author wrote after it.
  if (plan.loads.empty()) return success();
  Operation *firstLoad = plan.loads.front().copy;
  for (PipelineLoad &load : plan.loads)
    if (load.copy->isBeforeInBlock(firstLoad)) firstLoad = load.copy;
  for (Operation *op = firstLoad->getNextNode(); op; op = op->getNextNode()) {
    WalkResult found = op->walk([&](WaitOp wait) {
      wait.emitError("this flag wait comes after a load of the pipelined loop (")
          << firstLoad->getLoc()
          << "), whose loads are issued stages ahead: it would order none of them; put the wait "
             "before the loop's first copy (it then guards that iteration's loads), or before "
             "the loop";
      return WalkResult::interrupt();
    });
    if (found.wasInterrupted()) return failure();
  }
  return success();
}

LogicalResult tessel::verifyStagesFit(PipelinePlan &plan, const TargetInfo &target) {
  // Each buffer has `stages` copies, however much of it the loads fill.
  int64_t bytes = 0;
  for (AllocOp buffer : plan.buffers())
    bytes += buffer.getType().getNumElements() * getElementBytes(buffer.getType().getElementType());
  if (bytes == 0 || plan.stages <= target.maxSharedBytes / bytes) return success();
  // A count that can be multi-buffered without overflow gets the usual
  // report, each buffer and its stages in a note.
  if (plan.stages <= target.maxSharedBytes) {
    for (AllocOp buffer : plan.buffers())
      buffer.setStagesAttr(IntegerAttr::get(IntegerType::get(buffer.getContext(), 64), plan.stages));
    auto kernel = plan.loop->getParentOfType<KernelOp>();
    if (failed(verifySharedMemory(kernel, target.arch, target.maxSharedBytes))) return failure();
  }
  return plan.loop.emitError("pipeline of ")
         << plan.stages << " stages of " << bytes << " bytes each needs more than the "
         << target.maxSharedBytes << " bytes of shared memory " << target.arch
         << " has per block; use fewer stages or smaller tiles";
}

int64_t PipelinePlan::stageBytes() {
  int64_t total = 0;
  for (PipelineLoad &load : loads) total += load.bytes;
  return total;
}

SmallVector<AllocOp> PipelinePlan::buffers() {
  SetVector<Operation *> unique;
  for (PipelineLoad &load : loads) unique.insert(load.buffer);
  return llvm::map_to_vector(unique, [](Operation *op) { return llvm::cast<AllocOp>(op); });
}

/// The windows between `dest` and its root buffer, the one on the buffer
/// first; fails when a window's offsets are not constants or it is not
/// defined in `body`.
static FailureOr<SmallVector<RegionOp>> constantWindows(Value dest, Block &body) {
  SmallVector<RegionOp> windows;
  while (auto region = dest.getDefiningOp<RegionOp>()) {
    if (region->getBlock() != &body ||
        !llvm::all_of(region.getOffsets(), [](Value v) { return getConstantIntValue(v); }))
      return failure();
    windows.insert(windows.begin(), region);
    dest = region.getSource();
  }
  return windows;
}

/// The box a write into `view` covers in its root buffer: the sizes of the
/// view and the sum of its windows' offsets; none when an offset is not a
/// constant or a window drops a dimension.
static std::optional<std::pair<SmallVector<int64_t>, SmallVector<int64_t>>> boxOf(Value view) {
  auto type = llvm::cast<MemRefType>(view.getType());
  SmallVector<int64_t> offsets(type.getRank(), 0);
  while (auto region = view.getDefiningOp<RegionOp>()) {
    if (llvm::cast<MemRefType>(region.getSource().getType()).getRank() != type.getRank())
      return std::nullopt;
    for (auto [i, v] : llvm::enumerate(region.getOffsets())) {
      std::optional<int64_t> c = getConstantIntValue(v);
      if (!c) return std::nullopt;
      offsets[i] += *c;
    }
    view = region.getSource();
  }
  if (!view.getDefiningOp<AllocOp>()) return std::nullopt;
  return std::make_pair(offsets, SmallVector<int64_t>(type.getShape()));
}

/// Whether the copies and fills among `ops` into views of `buffer` write all
/// of it: their boxes are disjoint and their volumes add up to the buffer's.
static bool writeAll(AllocOp buffer, ArrayRef<Operation *> ops) {
  SmallVector<std::pair<SmallVector<int64_t>, SmallVector<int64_t>>> boxes;
  for (Operation *op : ops) {
    Value dest;
    if (auto copy = llvm::dyn_cast<CopyOp>(op)) dest = copy.getDest();
    if (auto fill = llvm::dyn_cast<FillOp>(op)) dest = fill.getDest();
    if (!dest || getRootBuffer(dest) != buffer.getResult()) continue;
    if (auto box = boxOf(dest)) boxes.push_back(*box);
  }
  auto overlap = [](auto &a, auto &b) {
    for (size_t d = 0; d < a.first.size(); ++d)
      if (a.first[d] + a.second[d] <= b.first[d] || b.first[d] + b.second[d] <= a.first[d])
        return false;
    return true;
  };
  int64_t volume = 0;
  for (auto [i, box] : llvm::enumerate(boxes)) {
    for (size_t j = 0; j < i; ++j)
      if (overlap(box, boxes[j])) return false;
    volume += std::accumulate(box.second.begin(), box.second.end(), int64_t{1},
                              std::multiplies<int64_t>());
  }
  return volume == buffer.getType().getNumElements();
}

/// Whether `user`, outside `loop`, runs before it (true) or after it
/// (false) when nothing around both runs its body again (a loop or a walk
/// over tiles); none when something does.
static std::optional<bool> runsBefore(Operation *user, Operation *loop) {
  Operation *mine = loop, *theirs = nullptr;
  while (!(theirs = mine->getBlock()->findAncestorOpInBlock(*user))) mine = mine->getParentOp();
  for (Operation *op = mine->getParentOp(); !llvm::isa<KernelOp>(op); op = op->getParentOp())
    if (!llvm::isa<scf::IfOp, RoleOp>(op)) return std::nullopt;
  return theirs->isBeforeInBlock(mine);
}

/// Whether writes that all of `buffer` goes through run between the end of
/// `loop` and `user` whenever `user` runs: the copies and fills before
/// `user` (or before an op around it) in its block, up to the op holding
/// `loop`, cover the whole buffer.
static bool rewrittenBefore(Operation *user, AllocOp buffer, Operation *loop) {
  for (Operation *at = user; at && !llvm::isa<KernelOp>(at); at = at->getParentOp()) {
    if (at->isAncestor(loop)) return false;
    SmallVector<Operation *> before;
    for (Operation *op = at->getPrevNode(); op && !op->isAncestor(loop); op = op->getPrevNode())
      before.push_back(op);
    if (writeAll(buffer, before)) return true;
  }
  return false;
}

/// The op of `loop` other than the copies in `loads` that writes a view of
/// `buffer` with a copy or fill (it would overwrite a stage loaded ahead),
/// or one outside the loop that could see a stage the loop loaded; null
/// when none. The uses outside that cannot: writes, reads that run only
/// before the loop, reads after writes of the whole buffer, and reads of
/// stages of another pipelined loop over the same buffer (that loop reads
/// only what its own loads brought in). The first of them that may run
/// before the loop is left in `*harmless`.
static Operation *conflictingUse(AllocOp buffer, PipelinedOp loop, ArrayRef<CopyOp> loads,
                                 Operation **harmless) {
  SmallVector<Value> views{buffer.getResult()};
  while (!views.empty()) {
    Value view = views.pop_back_val();
    for (Operation *user : view.getUsers()) {
      if (llvm::isa<AnnotateLayoutOp>(user)) continue;
      bool inside = loop->isAncestor(user);
      if (llvm::isa<RegionOp>(user)) {
        views.push_back(user->getResult(0));
        continue;
      }
      if (!inside) {
        bool writes = (llvm::isa<CopyOp>(user) && llvm::cast<CopyOp>(user).getDest() == view) ||
                      llvm::isa<FillOp>(user);
        bool otherPipeline = llvm::isa<StageOp>(user) && buffer->hasAttr(kPipelineStagedAttr);
        std::optional<bool> before = runsBefore(user, loop);
        if (!writes && !otherPipeline && before != true && !rewrittenBefore(user, buffer, loop))
          return user;
        // Code that only runs after the loop needs no barrier before it.
        if (!*harmless && before != false) *harmless = user;
        continue;
      }
      if (auto copy = llvm::dyn_cast<CopyOp>(user))
        if (copy.getDest() == view && !llvm::is_contained(loads, copy)) return user;
      if (llvm::isa<FillOp>(user)) return user;
    }
  }
  return nullptr;
}

/// How a remark names an op of the user's program.
static std::string describeUse(Operation *op) {
  if (llvm::isa<CopyOp>(op)) return "the copy";
  if (llvm::isa<FillOp>(op)) return "the fill";
  if (llvm::isa<GemmOp>(op)) return "the gemm";
  if (llvm::isa<ReduceOp>(op)) return "the reduction";
  if (llvm::isa<memref::LoadOp>(op)) return "the element read";
  if (llvm::isa<memref::StoreOp>(op)) return "the element write";
  return (Twine("'") + op->getName().getStringRef() + "'").str();
}

PipelinePlan tessel::planPipeline(PipelinedOp loop, const TargetInfo &target) {
  PipelinePlan plan;
  plan.loop = loop;
  plan.stages = loop.getNumStages();
  Block &body = loop.getBody().front();
  DenseSet<Value> onlyRead = tensorsOnlyRead(loop);
  auto skip = [&](CopyOp copy, const Twine &why) { plan.skipped.push_back({copy, why.str()}); };
  // Candidates: global-to-shared copies into a buffer from before the loop,
  // whole or a constant window of it; grouped by buffer.
  llvm::MapVector<Operation *, SmallVector<CopyOp>> byBuffer;
  for (Operation &op : body) {
    auto copy = llvm::dyn_cast<CopyOp>(&op);
    if (!copy) continue;
    auto src = llvm::cast<MemRefType>(copy.getSource().getType());
    if (getMemorySpace(src) != MemorySpace::global) continue;
    auto buffer = getRootBuffer(copy.getDest()).getDefiningOp<AllocOp>();
    // A buffer another pipelined loop staged is staged for this one too
    // (the two run one after the other); one the program staged is its own.
    if (!buffer || !isSharedBacked(buffer.getResult()) ||
        (buffer.getStages() && !buffer->hasAttr(kPipelineStagedAttr)))
      continue;
    if (!buffer->getParentRegion()->isAncestor(&loop.getBody())) {
      skip(copy, "its buffer is allocated in code nested in the loop body, so it has no copies to "
                 "load ahead into");
      continue;
    }
    if (failed(constantWindows(copy.getDest(), body))) {
      skip(copy, "it writes a window of its buffer whose offsets are not constants, so the window "
                 "of a later iteration's stage is not known ahead");
      continue;
    }
    byBuffer[buffer].push_back(copy);
  }
  for (auto &[op, copies] : byBuffer) {
    auto buffer = llvm::cast<AllocOp>(op);
    Operation *harmless = nullptr;
    if (Operation *other = conflictingUse(buffer, loop, copies, &harmless)) {
      bool outside = !loop->isAncestor(other);
      for (CopyOp copy : copies)
        skip(copy, Twine("its buffer is ") + (outside ? "read after the loop" : "also written") +
                       " by " + describeUse(other) + " at " + describeLocation(other->getLoc()) +
                       (outside ? ", which would see whichever stage was loaded last (write "
                                  "the whole buffer before reading it there, or give the loop "
                                  "a buffer of its own)"
                                : ", which would overwrite a stage loaded ahead"));
      continue;
    }
    if (harmless && !plan.usedOutside) plan.usedOutside = harmless;
    for (CopyOp copy : copies) {
      Operation *blocker = nullptr;
      if (failed(addressSlice(copy.getSource(), body, onlyRead, &blocker))) {
        skip(copy, "its source address depends on " +
                       (blocker ? blockedBy(blocker) : std::string("a value computed in the loop")) +
                       ", so it cannot be computed ahead of the iteration");
        continue;
      }
      // A buffer allocated in the body is one buffer for every iteration
      // (its shape is static): its stages must exist before the loop, where
      // the loads ahead fill them.
      if (buffer->getBlock() == &body) buffer->moveBefore(loop);
      PipelineLoad load;
      load.copy = copy;
      load.buffer = buffer;
      load.window = *constantWindows(copy.getDest(), body);
      auto dest = llvm::cast<MemRefType>(copy.getDest().getType());
      load.bytes = dest.getNumElements() * getElementBytes(dest.getElementType());
      load.noTma = whyNoTma(copy.getSource(), copy.getDest(), target);
      plan.loads.push_back(load);
    }
  }
  // A buffer is filled one way: where one of its windows cannot be a TMA
  // box, its other windows are cp.async copies too (a stage half written
  // through each proxy would need both waits before every access).
  for (PipelineLoad &load : plan.loads) {
    if (!load.noTma.empty()) continue;
    for (PipelineLoad &other : plan.loads)
      if (other.buffer == load.buffer && !other.noTma.empty() &&
          other.noTma.rfind("another window", 0) != 0) {
        load.noTma = "another window of its buffer is a cp.async copy (" + other.noTma + ")";
        break;
      }
  }
  // Loads in program order (issue order; the guards below and the
  // prologue rely on it).
  llvm::sort(plan.loads, [](PipelineLoad &a, PipelineLoad &b) {
    return a.copy->isBeforeInBlock(b.copy);
  });
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

void tessel::remarkPlan(PipelinePlan &plan, const TargetInfo &target, StringRef pass) {
  for (SkippedCopy &skipped : plan.skipped)
    emitMissed(skipped.copy, pass, missed::kPipelining)
        << "this copy is not loaded ahead in the pipelined loop at "
        << describeLocation(plan.loop.getLoc()) << " (it runs in place, every iteration): "
        << skipped.reason;
  if (!target.hasTma() || !target.tma) return;
  for (PipelineLoad &load : plan.loads)
    if (!load.noTma.empty())
      emitMissed(load.copy, pass, missed::kTma)
          << "this load is a cp.async copy, not TMA: " << load.noTma;
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
  // Loops that share a buffer share its stages: it has as many as the
  // deepest of them.
  for (AllocOp buffer : plan.buffers()) {
    int64_t stages = std::max<int64_t>(plan.stages, buffer.getStages().value_or(1));
    buffer.setStagesAttr(b.getI64IntegerAttr(stages));
    buffer->setAttr(kPipelineStagedAttr, b.getUnitAttr());
  }
}

SetVector<Operation *> tessel::loadAddressSlice(PipelineLoad &load, Block &body) {
  FailureOr<SetVector<Operation *>> slice =
      addressSlice(load.copy.getSource(), body, tensorsOnlyRead(load.copy));
  assert(succeeded(slice) && "planPipeline checked the slice");
  return *slice;
}

SetVector<Operation *> tessel::guardSlice(Operation *guard, Block &body) {
  FailureOr<SetVector<Operation *>> slice =
      addressSlice(guardInputs(guard), body, tensorsOnlyRead(guard));
  assert(succeeded(slice) && "verifyLoadGuards checked the slice");
  return *slice;
}

Value PipelineBuilder::sourceFor(PipelineLoad &load, Block &body, Value iv) {
  IRMapping map = outer ? *outer : IRMapping();
  map.map(body.getArgument(0), iv);
  for (Operation *op : loadAddressSlice(load, body)) b.clone(*op, map);
  return map.lookupOrDefault(load.copy.getSource());
}

Value PipelineBuilder::destFor(PipelineLoad &load, Value stage) {
  Value dest = StageOp::create(b, loc, load.buffer.getType(), load.buffer.getResult(), stage);
  for (RegionOp window : load.window) {
    SmallVector<Value> offsets = llvm::map_to_vector(window.getOffsets(), [&](Value v) {
      return constant(*getConstantIntValue(v));
    });
    dest = RegionOp::create(b, loc, window.getType(), dest, offsets, window.getSizesAttr());
  }
  return dest;
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
  for (AllocOp buffer : plan.buffers()) {
    Value view = StageOp::create(b, loc, buffer.getType(), buffer.getResult(), stage);
    buffer.getResult().replaceUsesWithIf(view, [&](OpOperand &use) {
      return region.isAncestor(use.getOwner()->getParentRegion()) &&
             !llvm::isa<StageOp>(use.getOwner());
    });
  }
}
