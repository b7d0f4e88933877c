//===- TesselWarpSpecialize.cpp - producer and consumer warpgroups --------===//
//
// On sm_90a a kernel whose one top-level `tile.pipelined` loop loads only
// through TMA gets one more warpgroup, the producer, placed after the
// kernel's own threads so that their thread indices (and the layouts
// inferred for them) stay as they were. Per stage, a `full` mbarrier says
// the stage's loads have landed (one arrival plus the TMA bytes) and an
// `empty` mbarrier says every consumer warp is done reading it:
//
//   producer (threads T .. T+127, setmaxnreg down):
//     for k: [flag waits guarding the loads]; wait empty[k % S] (parity of
//            round k/S, inverted: the first round passes at once);
//            expect_tx full[k % S]; TMA loads
//   consumers (threads 0 .. T-1, setmaxnreg up): everything else the
//     kernel does, with the loop becoming
//     for k: wait full[k % S] (parity of round k/S); body on stage k % S;
//            each warp arrives on empty[k % S]
//
// The producer runs up to S loads ahead of the consumers, who never wait
// on each other. When the body's only readers of the stages are tcgen05
// gemms (sm_100a), the consumers' first thread issues the MMAs without
// waiting, a tcgen05.commit on empty[k % S] (one arrival) frees the stage
// when they complete, and the consumers wait for the MMAs once, after the
// loop (tile.mma_wait).
//
// In a persistent kernel, a global-to-shared copy in the walk's body before
// the loop becomes the producer's too when TMA can carry it and it fills a
// whole buffer that the kernel otherwise only reads (the attention
// forward's Q tile): the producer issues it ahead of the tile's stages,
// arming a `prologue_full` mbarrier, and the consumers wait on that where
// the copy was. They release the buffer (`prologue_empty`, per warp) after
// its last reader in the tile, and the producer waits for that before
// loading the next tile's. Phases follow the tile's ordinal in the walk.
// Where shared memory has room without costing a block per SM, such a
// buffer gets two copies used by alternate tiles: the producer then loads
// the next tile's Q (and, behind it, that tile's first stages) while the
// consumers still read this tile's, instead of only once they release it
// after their last product. (The attention forward at the bench shapes
// timed the same either way on an H200: its loads were already hidden.)
//
// Loads marked `multicast` in a kernel launched in clusters are shared by
// the cluster's blocks: each block's producer issues its share of the TMA
// boxes to all of them, so a stage is free only when the consumers of every
// block have released it: their warps arrive on `empty` in every block,
// which counts the arrivals of the whole cluster.
//
//===----------------------------------------------------------------------===//
#include "WarpSpecializeRoles.h"
#include "tessel/Transforms/BufferUtils.h"
#include "tessel/Transforms/Remarks.h"

namespace tessel {
#define GEN_PASS_DEF_TESSELWARPSPECIALIZE
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

bool tessel::staysShared(Operation &op) {
  if (llvm::isa<AllocOp, AnnotateLayoutOp, RegionOp, MbarrierInitOp>(op)) return true;
  if (op.getNumRegions()) return false;
  if (auto load = llvm::dyn_cast<memref::LoadOp>(op))
    return getMemorySpace(load.getMemRefType()) == MemorySpace::global;
  return isMemoryEffectFree(&op);
}

/// Code every thread can run as well as the consumers alone: staysShared
/// ops, per-thread (local) memory, reads of shared and global memory,
/// global-to-shared copies and shared fills (spread over whatever threads run
/// them), and loops and conditionals made only of such code. Fragments are
/// the exception: their layouts are the consumer threads'.
static bool runsOnEveryThread(Operation &op) {
  if (staysShared(op)) return true;
  auto spaceOf = [](Value v) { return getMemorySpace(llvm::cast<MemRefType>(v.getType())); };
  if (auto load = llvm::dyn_cast<memref::LoadOp>(op))
    return spaceOf(load.getMemRef()) != MemorySpace::fragment;
  if (auto store = llvm::dyn_cast<memref::StoreOp>(op))
    return spaceOf(store.getMemRef()) == MemorySpace::local;
  if (auto copy = llvm::dyn_cast<CopyOp>(op))
    return spaceOf(copy.getSource()) == MemorySpace::global &&
           spaceOf(copy.getDest()) == MemorySpace::shared;
  if (auto fill = llvm::dyn_cast<FillOp>(op)) return spaceOf(fill.getDest()) == MemorySpace::shared;
  if (llvm::isa<scf::ForOp, scf::IfOp>(op)) {
    for (Region &region : op.getRegions())
      for (Operation &inner : region.getOps())
        if (!runsOnEveryThread(inner)) return false;
    return true;
  }
  return false;
}

/// Root buffers `op` (and the ops nested in it) read, and those it may write.
static void bufferAccesses(Operation *op, DenseSet<Value> &reads, DenseSet<Value> &writes) {
  op->walk([&](Operation *inner) {
    for (Value operand : inner->getOperands()) {
      if (!llvm::isa<MemRefType>(operand.getType())) continue;
      Value root = getRootBuffer(operand);
      reads.insert(root);
      if (!llvm::isa<memref::LoadOp, RegionOp, StageOp>(inner)) writes.insert(root);
    }
  });
}

scf::ForOp tessel::tileLoopAround(PipelinedOp loop, KernelOp kernel) {
  auto tiles = llvm::dyn_cast<scf::ForOp>(loop->getParentOp());
  if (!tiles || !kernel.getPersistent() || tiles->getParentOp() != kernel.getOperation() ||
      tiles.getNumRegionIterArgs() || !tiles.getStep().getDefiningOp<NumBlocksOp>())
    return {};
  return tiles;
}

/// The code a program runs before `loop` in which a flag wait may stand:
/// the kernel's top level before the loop (or before a persistent kernel's
/// walk over its tiles), and the walk's body before the loop.
static SmallVector<Operation *> codeBeforeLoop(PipelinedOp loop, KernelOp kernel) {
  SmallVector<Operation *> ops;
  scf::ForOp tiles = tileLoopAround(loop, kernel);
  Operation *anchor = tiles ? tiles.getOperation() : loop.getOperation();
  for (Operation &op : kernel.getBodyBlock()) {
    if (&op == anchor) break;
    ops.push_back(&op);
  }
  if (tiles)
    for (Operation &op : *tiles.getBody()) {
      if (&op == loop.getOperation()) break;
      ops.push_back(&op);
    }
  return ops;
}

SmallVector<Operation *> tessel::guardsBeforeLoop(PipelinedOp loop, KernelOp kernel) {
  SmallVector<Operation *> guards;
  for (Operation *op : codeBeforeLoop(loop, kernel))
    if (isGuard(*op)) guards.push_back(op);
  return guards;
}

/// A flag wait before the loop that the producer cannot run (nested in code
/// with other effects), or null.
static Operation *unreplicableWait(PipelinedOp loop, KernelOp kernel) {
  for (Operation *op : codeBeforeLoop(loop, kernel)) {
    if (isGuard(*op)) continue;
    Operation *found = nullptr;
    op->walk([&](WaitOp wait) { found = wait; });
    if (found) return found;
  }
  return nullptr;
}

SetVector<Operation *> tessel::producerInputs(PipelinePlan &plan, KernelOp kernel,
                                             Operation **blocker,
                                             SetVector<Operation *> *tileNeeds,
                                             ArrayRef<CopyOp> prologue) {
  PipelinedOp loop = plan.loop;
  Block &top = kernel.getBodyBlock();
  scf::ForOp tiles = tileLoopAround(loop, kernel);
  Operation *anchor = tiles ? tiles.getOperation() : loop.getOperation();
  SetVector<Operation *> needed, inTile;
  SmallVector<Operation *> work, tileWork;
  auto requireValue = [&](Value v) {
    Operation *def = v.getDefiningOp();
    if (!def) def = v.getParentBlock()->getParentOp();
    if (tiles && def == tiles.getOperation()) return; // the tile index: each walk has its own
    if (tiles && tiles->isAncestor(def)) {
      if (Operation *at = tiles.getBody()->findAncestorOpInBlock(*def); at && at->isBeforeInBlock(loop))
        tileWork.push_back(at);
      return;
    }
    if (Operation *at = top.findAncestorOpInBlock(*def); at && at->isBeforeInBlock(anchor))
      work.push_back(at);
  };
  for (Value v : {loop.getLower(), loop.getUpper(), loop.getStep()}) requireValue(v);
  if (tiles)
    for (Value v : {tiles.getLowerBound(), tiles.getUpperBound(), tiles.getStep()}) requireValue(v);
  for (PipelineLoad &load : plan.loads) {
    for (Operation *op : loadAddressSlice(load, loop.getBody().front()))
      for (Value v : op->getOperands())
        if (!loop->isAncestor(v.getParentBlock()->getParentOp())) requireValue(v);
    requireValue(load.copy.getSource());
  }
  for (CopyOp copy : prologue) requireValue(copy.getSource());
  for (Operation *guard : guardsBeforeLoop(loop, kernel))
    guard->walk([&](Operation *inner) {
      for (Value v : inner->getOperands())
        if (!guard->isAncestor(v.getParentBlock()->getParentOp())) requireValue(v);
    });
  for (Operation *guard : plan.guards) {
    for (Operation *op : guardSlice(guard, loop.getBody().front()))
      for (Value v : op->getOperands())
        if (!loop->isAncestor(v.getParentBlock()->getParentOp())) requireValue(v);
    guard->walk([&](Operation *inner) {
      for (Value v : inner->getOperands())
        if (!loop->isAncestor(v.getParentBlock()->getParentOp())) requireValue(v);
    });
  }
  if (blocker) *blocker = nullptr;
  // A tile's coordinates may come from memory the kernel only reads (a
  // packed batch's cu_seqlens): a load of a buffer nothing in the kernel
  // writes gives the producer's walk the same value again.
  DenseSet<Value> kernelReads, kernelWrites;
  if (tiles) bufferAccesses(kernel, kernelReads, kernelWrites);
  auto rereadable = [&](Operation *op) {
    auto load = llvm::dyn_cast<memref::LoadOp>(op);
    return load && !kernelWrites.contains(getRootBuffer(load.getMemRef()));
  };
  while (!tileWork.empty()) {
    Operation *op = tileWork.pop_back_val();
    if (!inTile.insert(op)) continue;
    if (blocker && !*blocker && !isMemoryEffectFree(op) && !rereadable(op)) *blocker = op;
    op->walk([&](Operation *inner) {
      for (Value v : inner->getOperands())
        if (!op->isAncestor(v.getParentBlock()->getParentOp())) requireValue(v);
    });
  }
  if (tileNeeds) {
    SmallVector<Operation *> ordered(inTile.begin(), inTile.end());
    llvm::sort(ordered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
    tileNeeds->insert(ordered.begin(), ordered.end());
  }
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    if (!needed.insert(op)) continue;
    if (blocker && !*blocker && !runsOnEveryThread(*op)) *blocker = op;
    op->walk([&](Operation *inner) {
      for (Value v : inner->getOperands())
        if (!op->isAncestor(v.getParentBlock()->getParentOp())) requireValue(v);
    });
    // Running it early must see, and leave, the same memory.
    DenseSet<Value> reads, writes;
    bufferAccesses(op, reads, writes);
    for (Operation &other : top) {
      if (&other == op) break;
      DenseSet<Value> otherReads, otherWrites;
      bufferAccesses(&other, otherReads, otherWrites);
      if (llvm::any_of(reads, [&](Value b) { return otherWrites.contains(b); }) ||
          llvm::any_of(writes, [&](Value b) { return otherReads.contains(b); }))
        work.push_back(&other);
    }
  }
  return needed;
}

/// Why the loop is not split, or empty when it can be.
static std::string whyNot(PipelinePlan &plan, KernelOp kernel) {
  if (plan.loads.empty()) return "it has no loads to issue ahead";
  if (!plan.tma) {
    PipelineLoad &culprit =
        *llvm::find_if(plan.loads, [](PipelineLoad &l) { return !l.noTma.empty(); });
    return "its loads are not all TMA: " + culprit.noTma + " (the load at " +
           describeLocation(culprit.copy.getLoc()) + ")";
  }
  if (plan.loop->getParentOp() != kernel.getOperation() && !tileLoopAround(plan.loop, kernel))
    return "it is nested inside other control flow (other than a persistent kernel's walk over "
           "its tiles)";
  int64_t threads = kernel.getThreads();
  if (threads % 128) return "the kernel's threads are not whole warpgroups";
  if (threads + kProducerThreads > 1024) return "a producer warpgroup would exceed 1024 threads";
  int64_t loops = 0;
  kernel.walk([&](PipelinedOp) { ++loops; });
  if (loops != 1) return "the kernel has more than one pipelined loop";
  // The producer's first loads are ordered after nothing the consumers did
  // before the loop.
  if (plan.usedOutside)
    return "its staging buffer is also used outside the loop, by the op at " +
           describeLocation(plan.usedOutside->getLoc());
  if (Operation *wait = unreplicableWait(plan.loop, kernel))
    return "the flag wait at " + describeLocation(wait->getLoc()) +
           " orders the loop's loads, but it is nested in code the producer cannot run";
  Operation *blocker = nullptr;
  producerInputs(plan, kernel, &blocker);
  if (blocker) {
    std::string what;
    llvm::raw_string_ostream os(what);
    os << "the loads' addresses depend on '" << blocker->getName() << "' at " << blocker->getLoc();
    scf::ForOp tiles = tileLoopAround(plan.loop, kernel);
    if (tiles && tiles->isAncestor(blocker))
      os << ", which the producer's own walk over the tiles would run again, and it has side "
            "effects or reads memory the kernel writes";
    else
      os << ", which only the consumer threads can run (it touches fragments or is a tensor-core "
            "or store operation)";
    return what;
  }
  return "";
}

/// Why the split loop's consumers cannot take ping-pong turns, or empty.
static std::string whyNoPingpong(PipelinedOp loop, KernelOp kernel) {
  if (kernel.getThreads() != 256)
    return "it takes exactly two consumer warpgroups (256 threads), not " +
           std::to_string(kernel.getThreads()) + " threads";
  // With one stage a warpgroup holding its turn would wait for a load that
  // needs the other warpgroup to release the only stage first.
  if (loop.getNumStages() < 2) return "it needs at least 2 stages";
  return "";
}

namespace {
struct TesselWarpSpecialize : tessel::impl::TesselWarpSpecializeBase<TesselWarpSpecialize> {
  using Base::Base;
  void runOnOperation() override {
    KernelOp kernel = getOperation();
    std::optional<TargetInfo> target = lookupTarget(arch, tma, kernel);
    if (!target) return signalPassFailure();
    if (!target->hasTma()) return;
    SmallVector<PipelinedOp> loops;
    kernel.walk([&](PipelinedOp loop) { loops.push_back(loop); });
    for (PipelinedOp loop : loops) {
      // Ping-pong turns order two consumer warpgroups' wgmmas; sm_100a's
      // gemms (mma.sync, or tcgen05 from one thread) have none to order, and
      // the loop is built as on sm_80, where the request never applied.
      if (target->computeCapability != 90) loop.removePingpongAttr();
      std::optional<bool> asked = loop.getWarpSpecialize();
      if (asked && !*asked) {
        if (loop.getPingpong()) {
          loop.emitError("ping-pong turns need a warp-specialized loop, and this one has "
                         "warp_specialize off");
          return signalPassFailure();
        }
        continue;
      }
      PipelinePlan plan = planPipeline(loop, *target);
      if (failed(verifyStagesFit(plan, *target)) || failed(verifyLoadGuards(plan)))
        return signalPassFailure();
      std::string why = whyNot(plan, kernel);
      if (!why.empty() && loop.getPingpong() && asked) {
        loop.emitError("ping-pong turns need a warp-specialized loop, and this one cannot be "
                       "split: ") << why;
        return signalPassFailure();
      }
      // Left to this pass, a loop that is not split has no warpgroups to
      // take turns.
      if (why.empty() && loop.getPingpong()) {
        if (std::string reason = whyNoPingpong(loop, kernel); !reason.empty()) {
          loop.emitError("cannot schedule this loop's warpgroups in ping-pong turns: ") << reason;
          return signalPassFailure();
        }
      }
      if (!why.empty()) {
        // The loop is software-pipelined without roles. Asked for, or what
        // the loop would normally get on this target, that is a warning; a
        // remark where TMA was turned off for the compile (which asked for
        // no producer), and nothing where there is nothing to load ahead
        // (tessel-software-pipeline says so).
        if (asked)
          emitMissed(loop, getArgument(), missed::kWarpSpecialization, RemarkSeverity::warning)
              << "cannot warp-specialize this pipelined loop, which asks for it (it runs "
                 "without a TMA producer warpgroup): "
              << why;
        else if (!plan.loads.empty())
          emitMissed(loop, getArgument(), missed::kWarpSpecialization,
                     target->tma ? RemarkSeverity::warning : RemarkSeverity::remark)
              << "this pipelined loop is not warp-specialized (no TMA producer warpgroup): "
              << why;
        continue;
      }
      remarkPlan(plan, *target, getArgument());
      splitIntoRoles(plan, kernel, *target);
    }
    if (failed(verifySharedMemory(kernel, target->arch, target->maxSharedBytes)))
      signalPassFailure();
  }
};
} // namespace
