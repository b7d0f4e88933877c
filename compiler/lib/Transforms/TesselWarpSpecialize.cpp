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
#include "PipelinePlanning.h"
#include "TmaRules.h"
#include "tessel/Transforms/BufferUtils.h"
#include "tessel/Transforms/Remarks.h"

#include "mlir/IR/IRMapping.h"

namespace tessel {
#define GEN_PASS_DEF_TESSELWARPSPECIALIZE
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

namespace {
constexpr int64_t kProducerThreads = 128;
// The producer runs scalar address code and TMA issues: setmaxnreg's floor
// of 24 registers suffices, and each register it gives up lets two consumer
// warpgroups keep 240. Those last 8 matter: at 232, ptxas serializes the
// attention backward pass's wgmmas (C7512) to fit its in-flight operands.
constexpr int64_t kProducerRegisters = 24;

/// Ops that every thread may run before the roles split: allocations,
/// mbarrier inits (thread 0 runs them; insert-barriers orders them before
/// the roles), layout annotations, global scalar loads and side-effect-free
/// scalar code.
static bool staysShared(Operation &op) {
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

/// A persistent kernel's loop over its work tiles (tessel::persistent): an
/// scf.for at the kernel's top level stepping by tile.num_blocks, directly
/// around `loop`. Null otherwise.
static scf::ForOp tileLoopAround(PipelinedOp loop, KernelOp kernel) {
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

/// The flag waits (and conditionals of them) before the loop: in program
/// order they come before every load of the loop, so the producer, which
/// issues those loads, runs them too; the consumers keep them in place.
static SmallVector<Operation *> guardsBeforeLoop(PipelinedOp loop, KernelOp kernel) {
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
static SetVector<Operation *> producerInputs(PipelinePlan &plan, KernelOp kernel,
                                             Operation **blocker = nullptr,
                                             SetVector<Operation *> *tileNeeds = nullptr,
                                             ArrayRef<CopyOp> prologue = {}) {
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

/// Whether `op` (or an op inside it) waits for other threads or for data
/// from elsewhere.
static bool ordersLaterCopies(Operation &op) {
  WalkResult r = op.walk([](Operation *inner) {
    return llvm::isa<WaitOp, BarrierOp, MbarrierWaitOp, MmaWaitOp>(inner) ? WalkResult::interrupt()
                                                                         : WalkResult::advance();
  });
  return r.wasInterrupted();
}

/// Whether `op` itself writes (a view of) the root buffer `root`.
static bool writesBuffer(Operation *op, Value root) {
  auto isRoot = [&](Value v) { return getRootBuffer(v) == root; };
  if (auto copy = llvm::dyn_cast<CopyOp>(op)) return isRoot(copy.getDest());
  if (auto copy = llvm::dyn_cast<CopyAsyncOp>(op)) return isRoot(copy.getDest());
  if (auto fill = llvm::dyn_cast<FillOp>(op)) return isRoot(fill.getDest());
  if (auto gemm = llvm::dyn_cast<GemmOp>(op)) return isRoot(gemm.getC());
  if (auto reduce = llvm::dyn_cast<ReduceOp>(op)) return isRoot(reduce.getDest());
  if (auto atomic = llvm::dyn_cast<AtomicAddOp>(op)) return isRoot(atomic.getDest());
  if (auto signal = llvm::dyn_cast<SignalOp>(op)) return isRoot(signal.getFlags());
  if (auto store = llvm::dyn_cast<memref::StoreOp>(op)) return isRoot(store.getMemRef());
  return false;
}

/// The copies before `plan.loop`, at its level, that the producer can issue
/// for the consumers (see the file comment): global to a whole shared buffer
/// by TMA, the buffer's only writer, no reader of it before the copy, and an
/// address the producer can compute in its own walk. Clusters keep their
/// copies (a multicast protocol for them is not built).
static SmallVector<CopyOp> prologueLoads(PipelinePlan &plan, KernelOp kernel,
                                         const TargetInfo &target) {
  // Only a walk gains: one tile per block waits for its copy either way
  // (the consumers' cp.async is as quick), and the producer's 24 registers
  // do not hold the tile's addresses beside its own loop's (the attention
  // backward's K and V spilled).
  if (!tileLoopAround(plan.loop, kernel)) return {};
  if (kernel.getClusterSize() > 1) return {};
  Block *scope = plan.loop->getBlock();
  SmallVector<CopyOp> out;
  for (Operation &op : *scope) {
    if (&op == plan.loop.getOperation()) break;
    // A flag wait or barrier orders what follows it after data arriving
    // from elsewhere, which the producer would not wait for: no copy past
    // one moves.
    if (ordersLaterCopies(op)) break;
    auto copy = llvm::dyn_cast<CopyOp>(op);
    if (!copy || copy.getMulticast()) continue;
    // Nor one from memory the kernel writes (the producer could read it
    // before the write).
    Value source = getRootBuffer(copy.getSource());
    WalkResult written = kernel.walk([&](Operation *other) {
      return writesBuffer(other, source) ? WalkResult::interrupt() : WalkResult::advance();
    });
    if (written.wasInterrupted()) continue;
    auto buffer = copy.getDest().getDefiningOp<AllocOp>();
    if (!buffer || buffer.getStages() || !whyNoTma(copy.getSource(), copy.getDest(), target).empty())
      continue;
    // Read only, as a gemm operand, a copy's source or by loads, and only
    // after the copy.
    bool onlyRead = llvm::all_of(buffer->getUsers(), [&](Operation *user) {
      if (llvm::isa<AnnotateLayoutOp>(user) || user == copy.getOperation()) return true;
      Operation *at = scope->findAncestorOpInBlock(*user);
      if (!at || !copy->isBeforeInBlock(at)) return false;
      if (auto gemm = llvm::dyn_cast<GemmOp>(user)) return gemm.getC() != buffer.getResult();
      if (auto other = llvm::dyn_cast<CopyOp>(user)) return other.getDest() != buffer.getResult();
      return llvm::isa<memref::LoadOp>(user);
    });
    if (onlyRead) out.push_back(copy);
  }
  if (out.empty()) return out;
  Operation *blocker = nullptr;
  producerInputs(plan, kernel, &blocker, nullptr, out);
  if (blocker) return {};
  return out;
}

/// Gives each prologue load's buffer a second copy, alternating between a
/// walk's tiles, where it fits in shared memory (taken in program order,
/// counting what lowering adds later: reduction scratch and mbarriers)
/// without lowering the blocks an SM holds at once. `onePerSm` says the
/// kernel's register budget already allows only one block per SM. Returns
/// each buffer's copies (1 or 2).
static SmallVector<int64_t> doublePrologueBuffers(KernelOp kernel, ArrayRef<CopyOp> prologue,
                                                  const TargetInfo &target, int64_t threads,
                                                  bool onePerSm) {
  SmallVector<int64_t> copies(prologue.size(), 1);
  if (prologue.empty()) return copies;
  int64_t later = getReductionScratchBytes(kernel, threads) + 2 * 2 * 8 * prologue.size() + 256;
  // An SM's shared memory is the per-block limit plus the 1 KiB the
  // hardware reserves for each block.
  const int64_t reserved = 1024, perSm = target.maxSharedBytes + reserved;
  int64_t blocks = perSm / (planSharedMemory(kernel) + later + reserved);
  auto i64 = IntegerType::get(kernel.getContext(), 64);
  for (auto [i, count] : llvm::enumerate(copies)) {
    auto buffer = CopyOp(prologue[i]).getDest().getDefiningOp<AllocOp>();
    buffer.setStagesAttr(IntegerAttr::get(i64, 2));
    int64_t bytes = planSharedMemory(kernel) + later;
    if (bytes <= target.maxSharedBytes && (onePerSm || perSm / (bytes + reserved) >= blocks))
      count = 2;
    else
      buffer.removeStagesAttr();
  }
  return copies;
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

/// The loop body's tcgen05 gemms when they are the only readers of the
/// stages and nothing else in the body touches their accumulators: their
/// MMAs can then run behind the consumers, each stage released by a
/// tcgen05.commit when the MMAs reading it complete. Empty otherwise.
static SmallVector<GemmOp> asyncMmas(PipelinePlan &plan) {
  Block &body = plan.loop.getBody().front();
  SmallVector<GemmOp> gemms;
  DenseSet<Value> staged, accumulators;
  for (PipelineLoad &load : plan.loads) staged.insert(load.buffer.getResult());
  body.walk([&](GemmOp gemm) {
    if (gemm.getInstruction() == GemmInstruction::tcgen05) {
      gemms.push_back(gemm);
      // A in tensor memory (the ts form) is read as late as C is written.
      for (Value v : {gemm.getA(), gemm.getC()})
        if (getMemorySpace(llvm::cast<MemRefType>(v.getType())) == MemorySpace::tmem)
          accumulators.insert(getRootBuffer(v));
    }
  });
  if (gemms.empty()) return {};
  for (Operation &op : body) {
    bool isLoad = llvm::any_of(plan.loads, [&](PipelineLoad &l) { return l.copy == &op; });
    if (isLoad || llvm::is_contained(gemms, llvm::dyn_cast<GemmOp>(op))) continue;
    WalkResult touches = op.walk([&](Operation *inner) {
      for (Value v : inner->getOperands())
        if (llvm::isa<MemRefType>(v.getType()) &&
            (staged.contains(getRootBuffer(v)) || accumulators.contains(getRootBuffer(v))))
          return WalkResult::interrupt();
      return WalkResult::advance();
    });
    if (touches.wasInterrupted()) return {};
  }
  return gemms;
}

struct Specializer {
  OpBuilder b;
  PipelinePlan plan;
  KernelOp kernel;
  const TargetInfo &target;

  /// For a walk's tile `iv` with ordinal n (0, 1, ...) in the walk, where a
  /// prologue buffer has `copies` copies: the copy the tile uses (n mod
  /// copies; null for a single one) and the phase of that copy's mbarriers
  /// ((n / copies) mod 2).
  struct TileSlot {
    Value copy, parity;
  };
  SmallVector<TileSlot> tileSlots(PipelineBuilder &pb, scf::ForOp walk, Value iv,
                                  ArrayRef<int64_t> copies) {
    Location loc = walk.getLoc();
    Value ordinal = arith::DivUIOp::create(
        b, loc, arith::SubIOp::create(b, loc, iv, walk.getLowerBound()), walk.getStep());
    auto slotFor = [&](int64_t count) {
      auto mod2 = [&](Value v) { return arith::RemUIOp::create(b, loc, v, pb.constant(2)); };
      if (count == 1) return TileSlot{Value(), mod2(ordinal)};
      Value copy = mod2(ordinal);
      return TileSlot{copy, mod2(arith::DivUIOp::create(b, loc, ordinal, pb.constant(2)))};
    };
    // One slot per number of copies, shared by the buffers that have it.
    std::optional<TileSlot> single, alternating;
    SmallVector<TileSlot> slots;
    for (int64_t count : copies) {
      std::optional<TileSlot> &slot = count == 1 ? single : alternating;
      if (!slot) slot = slotFor(count);
      slots.push_back(*slot);
    }
    return slots;
  }
  /// The mbarrier of a prologue load whose copies' mbarriers start at
  /// `first`, for the tile's copy.
  Value prologueBarrier(PipelineBuilder &pb, int64_t first, TileSlot slot) {
    if (!slot.copy) return pb.constant(first);
    return arith::AddIOp::create(b, slot.copy.getLoc(), pb.constant(first), slot.copy);
  }

  void run() {
    PipelinedOp loop = plan.loop;
    Location loc = loop.getLoc();
    PipelineBuilder pb{b, loc, plan};
    // A persistent kernel's tile loop around the pipeline: both roles walk
    // the tiles, and the pipeline's iteration count runs on across them so
    // that the producer fills the next tile's stages as they free up.
    scf::ForOp tiles = tileLoopAround(loop, kernel);
    if (tiles) {
      // Buffers are the whole kernel's: both roles' walks use them.
      for (Operation &op : llvm::make_early_inc_range(*tiles.getBody()))
        if (llvm::isa<AllocOp>(op) && op.isBeforeInBlock(loop)) op.moveBefore(tiles);
    }
    int64_t consumers = kernel.getThreads();
    // tcgen05 gemms that only read the stages release them by commit: one
    // arrival per stage, from the MMAs, not one per consumer warp.
    SmallVector<GemmOp> mmas = asyncMmas(plan);
    // Multicast loads write every block of the cluster's stage: a stage is
    // free once the consumers of every block are done with it, so each
    // consumer warp arrives on every block's `empty` (a tcgen05 commit
    // reaches its own block only, and the MMAs are waited for instead).
    int64_t clusterSize = kernel.getClusterSize();
    bool multicast = clusterSize > 1 && llvm::any_of(plan.loads, [](PipelineLoad &load) {
                       return load.copy.getMulticast();
                     });
    if (multicast) mmas.clear();
    SmallVector<CopyOp> prologue = prologueLoads(plan, kernel, target);
    pb.multiBuffer();
    Value full = pb.createBarriers(kernel, 1, "full");
    Value empty = pb.createBarriers(
        kernel, mmas.empty() ? consumers / 32 * (multicast ? clusterSize : 1) : 1, "empty");
    kernel.setThreads(consumers + kProducerThreads);

    // Everything with effects moves into the consumer role, in order.
    Operation *anchor = tiles ? tiles.getOperation() : loop.getOperation();
    b.setInsertionPoint(anchor);
    // Registers the producer gives up go to the consumers, in steps of 8.
    int64_t consumerRegisters =
        std::min<int64_t>(240, (65536 - kProducerThreads * kProducerRegisters) / consumers / 8 * 8);
    // Only worth moving when the consumers get more than they start with
    // (one consumer warpgroup already starts with enough).
    IntegerAttr consumerBudget, producerBudget;
    if (consumerRegisters > entryRegisters(consumers + kProducerThreads)) {
      consumerBudget = b.getI64IntegerAttr(consumerRegisters);
      producerBudget = b.getI64IntegerAttr(kProducerRegisters);
    }
    auto producer = RoleOp::create(b, loc, b.getI64IntegerAttr(consumers),
                                   b.getI64IntegerAttr(kProducerThreads), producerBudget);
    producer.getBody().emplaceBlock();
    auto consumer = RoleOp::create(b, loc, b.getI64IntegerAttr(0), b.getI64IntegerAttr(consumers),
                                   consumerBudget);
    Block *consumerBody = &consumer.getBody().emplaceBlock();
    // Before the loop, shared scalar code stays where every thread runs
    // it (the producer's addresses may need it); from the loop on,
    // everything is the consumers'.
    // So does what the producer's loads depend on (whyNot checked that
    // every thread can run it).
    Block &top = kernel.getBodyBlock();
    SetVector<Operation *> tileNeeds;
    SetVector<Operation *> producerNeeds =
        producerInputs(plan, kernel, nullptr, &tileNeeds, prologue);
    // The flag waits before the loop, run by the producer too: those at the
    // top level once, those of a walk's body in its own walk.
    SmallVector<Operation *> topGuards, tileGuards;
    for (Operation *guard : guardsBeforeLoop(loop, kernel))
      (guard->getBlock() == &top ? topGuards : tileGuards).push_back(guard);
    SmallVector<int64_t> copies = doublePrologueBuffers(kernel, prologue, target,
                                                        consumers + kProducerThreads,
                                                        /*onePerSm=*/bool(consumerBudget));
    // Each prologue load's mbarriers, one per copy of its buffer, from
    // firstBarrier[i] on.
    SmallVector<int64_t> firstBarrier;
    int64_t barriers = 0;
    for (int64_t count : copies) {
      firstBarrier.push_back(barriers);
      barriers += count;
    }
    Value prologueFull, prologueEmpty;
    if (!prologue.empty()) {
      prologueFull = pb.createBarriers(kernel, 1, "prologue_full", barriers);
      prologueEmpty = pb.createBarriers(kernel, consumers / 32, "prologue_empty", barriers);
    }
    // Scalar code that uses a moved value moves with it.
    auto usesMoved = [&](Operation &op) {
      WalkResult r = op.walk([&](Operation *inner) {
        for (Value v : inner->getOperands())
          if (Operation *def = v.getDefiningOp(); def && consumer->isAncestor(def))
            return WalkResult::interrupt();
        return WalkResult::advance();
      });
      return r.wasInterrupted();
    };
    bool afterLoop = false;
    for (Operation &op : llvm::make_early_inc_range(top)) {
      if (&op == producer.getOperation() || &op == consumer.getOperation()) continue;
      afterLoop |= &op == anchor;
      bool stays = !afterLoop && (producerNeeds.contains(&op) || (staysShared(op) && !usesMoved(op)));
      if (stays) continue;
      op.moveBefore(consumerBody, consumerBody->end());
    }

    // Producer: the loads, gated by `empty`. In a persistent kernel it
    // walks its own copy of the tile loop, recomputing what the loads'
    // addresses need and counting the pipeline's iterations on.
    Block &loopBody = loop.getBody().front();
    b.setInsertionPointToStart(&producer.getBody().front());
    IRMapping tileMap;
    for (Operation *guard : topGuards) b.clone(*guard);
    scf::ForOp produceTiles;
    if (tiles) {
      Value zero = pb.constant(0);
      produceTiles = scf::ForOp::create(b, loc, tiles.getLowerBound(), tiles.getUpperBound(),
                                        tiles.getStep(), ValueRange{zero});
      b.setInsertionPointToStart(produceTiles.getBody());
      tileMap.map(tiles.getInductionVar(), produceTiles.getInductionVar());
      for (Operation *op : tileNeeds) b.clone(*op, tileMap);
      pb.outer = &tileMap;
      pb.base = produceTiles.getRegionIterArgs().front();
    }
    // The prologue loads, ahead of the tile's stages, each once the
    // consumers are done with the tile's copy of the buffer (that of the
    // previous tile, or of the one before it with two copies).
    SmallVector<TileSlot> produceSlots;
    if (!prologue.empty())
      produceSlots = tileSlots(pb, produceTiles, produceTiles.getInductionVar(), copies);
    for (auto [i, copy] : llvm::enumerate(prologue)) {
      TileSlot slot = produceSlots[i];
      Value index = prologueBarrier(pb, firstBarrier[i], slot);
      MbarrierWaitOp::create(b, loc, prologueEmpty, index,
                             arith::XOrIOp::create(b, loc, slot.parity, pb.constant(1)));
      auto type = llvm::cast<MemRefType>(copy.getDest().getType());
      MbarrierExpectTxOp::create(
          b, loc, prologueFull, index,
          b.getI64IntegerAttr(type.getNumElements() * getElementBytes(type.getElementType())));
      Value dest = copy.getDest();
      if (slot.copy) dest = StageOp::create(b, loc, dest.getType(), dest, slot.copy);
      CopyAsyncOp::create(b, loc, pb.mapped(copy.getSource()), dest, prologueFull, index,
                          /*multicast=*/false);
    }
    for (Operation *guard : tileGuards) b.clone(*guard, tileMap);
    auto produce = scf::ForOp::create(b, loc, pb.mapped(loop.getLower()), pb.mapped(loop.getUpper()),
                                      pb.mapped(loop.getStep()));
    b.setInsertionPointToStart(produce.getBody());
    Value k = pb.iteration(produce.getInductionVar());
    Value stage = pb.stageOf(k);
    Value parity = pb.parityOf(k);
    Value freed = arith::XOrIOp::create(b, loc, parity, pb.constant(1));
    // Guarding flag waits first: the producer alone waits for data that
    // arrives from elsewhere; the consumers see it through `full`.
    pb.waitForGuards(loopBody, produce.getInductionVar());
    MbarrierWaitOp::create(b, loc, empty, stage, freed);
    MbarrierExpectTxOp::create(b, loc, full, stage, b.getI64IntegerAttr(plan.stageBytes()));
    for (PipelineLoad &load : plan.loads) {
      Value src = pb.sourceFor(load, loopBody, produce.getInductionVar());
      Value dst = StageOp::create(b, loc, load.buffer.getType(), load.buffer.getResult(), stage);
      CopyAsyncOp::create(b, loc, src, dst, full, stage,
                          clusterSize > 1 && load.copy.getMulticast());
    }
    if (tiles) {
      b.setInsertionPointAfter(produce);
      Value next = arith::AddIOp::create(
          b, loc, pb.base,
          buildTripCount(b, loc, produce.getLowerBound(), produce.getUpperBound(),
                         produce.getStep()));
      scf::YieldOp::create(b, loc, next);
      // The consumers' walk carries the same count.
      IRRewriter rewriter(b.getContext());
      rewriter.setInsertionPoint(tiles);
      Value none = arith::ConstantIndexOp::create(rewriter, loc, 0);
      FailureOr<LoopLikeOpInterface> carried = tiles.replaceWithAdditionalYields(
          rewriter, ValueRange{none}, /*replaceInitOperandUsesInLoop=*/false,
          [&](OpBuilder &at, Location l, ArrayRef<BlockArgument> args) -> SmallVector<Value> {
            Value trip = buildTripCount(at, l, loop.getLower(), loop.getUpper(), loop.getStep());
            return {arith::AddIOp::create(at, l, args.front(), trip).getResult()};
          });
      tiles = llvm::cast<scf::ForOp>(carried->getOperation());
      pb.outer = nullptr;
      pb.base = tiles.getRegionIterArgs().front();
    }

    // Consumers: the rest of the body, gated by `full`, releasing `empty`.
    b.setInsertionPoint(loop);
    auto consume = scf::ForOp::create(b, loc, loop.getLower(), loop.getUpper(), loop.getStep());
    loopBody.getArgument(0).replaceAllUsesWith(consume.getInductionVar());
    Block *body = consume.getBody();
    body->getOperations().splice(body->begin(), loopBody.getOperations());
    for (PipelineLoad &load : plan.loads) load.copy->erase();
    pb.eraseGuards();
    b.setInsertionPointToStart(body);
    k = pb.iteration(consume.getInductionVar());
    stage = pb.stageOf(k);
    MbarrierWaitOp::create(b, loc, full, stage, pb.parityOf(k));
    pb.useStage(consume.getRegion(), stage);
    b.setInsertionPoint(body->getTerminator());
    // The consumers' wait for their last MMAs, when they only issue them:
    // a buffer those MMAs read is free only after it.
    Operation *mmaWait = nullptr;
    if (mmas.empty()) {
      MbarrierArriveOp::create(b, loc, empty, stage, /*each_thread=*/false, /*cluster=*/multicast);
      // Asked for, the arrival may move an iteration later once the gemms
      // are lowered (tessel-release-stages-late).
      if (loop.getOverlapMma())
        consume->setAttr(kStageRingAttr, b.getI64IntegerAttr(plan.stages));
    } else {
      // The consumers' first thread issues the MMAs and goes on; the
      // commit frees the stage when they are done, and after the loop
      // every consumer waits for the last of them.
      for (GemmOp gemm : mmas) gemm.setIssueOnly(true);
      MmaCommitOp::create(b, loc, empty, stage);
      b.setInsertionPointAfter(consume);
      mmaWait = MmaWaitOp::create(b, loc);
    }
    if (loop.getPingpong()) consume->setAttr(kPingpongAttr, b.getUnitAttr());
    loop->erase();

    // The consumers wait for the prologue loads where they were and release
    // each buffer after its last reader in the tile; with two copies, the
    // tile reads its own.
    SmallVector<TileSlot> consumeSlots;
    if (!prologue.empty()) {
      // Before the first of them: every reader of the buffers follows it.
      b.setInsertionPoint(prologue.front());
      consumeSlots = tileSlots(pb, tiles, tiles.getInductionVar(), copies);
    }
    for (auto [i, copy] : llvm::enumerate(prologue)) {
      Block *scope = copy->getBlock();
      Value buffer = copy.getDest();
      Operation *lastReader = copy;
      for (Operation &op : llvm::make_range(std::next(copy->getIterator()), scope->end())) {
        WalkResult reads = op.walk([&](Operation *inner) {
          return llvm::any_of(inner->getOperands(),
                              [&](Value v) { return v == buffer; })
                     ? WalkResult::interrupt()
                     : WalkResult::advance();
        });
        if (reads.wasInterrupted()) lastReader = &op;
      }
      b.setInsertionPoint(copy);
      TileSlot slot = consumeSlots[i];
      Value index = prologueBarrier(pb, firstBarrier[i], slot);
      auto wait = MbarrierWaitOp::create(b, loc, prologueFull, index, slot.parity);
      if (lastReader == copy.getOperation()) lastReader = wait;
      else if (mmaWait && lastReader == consume.getOperation()) lastReader = mmaWait;
      b.setInsertionPointAfter(lastReader);
      MbarrierArriveOp::create(b, loc, prologueEmpty, index, /*each_thread=*/false,
                               /*cluster=*/false);
      copy->erase();
      if (slot.copy) {
        b.setInsertionPointAfter(slot.parity.getDefiningOp());
        Value view = StageOp::create(b, loc, buffer.getType(), buffer, slot.copy);
        buffer.replaceUsesWithIf(view, [&](OpOperand &use) {
          return tiles->isAncestor(use.getOwner()) && use.getOwner() != view.getDefiningOp();
        });
      }
    }
  }
};

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
      Specializer{OpBuilder(loop), plan, kernel, *target}.run();
    }
    if (failed(verifySharedMemory(kernel, target->arch, target->maxSharedBytes)))
      signalPassFailure();
  }
};
} // namespace
