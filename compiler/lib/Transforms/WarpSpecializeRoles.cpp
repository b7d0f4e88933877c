//===- WarpSpecializeRoles.cpp - producer and consumer roles --------------===//
//
// How tessel-warp-specialize splits a kernel once it has found a loop it
// can split (TesselWarpSpecialize.cpp describes the protocol): which copies
// before the loop the producer takes over, the two tile.role ops, the
// producer's loads, and the consumers' waits and releases.
//
//===----------------------------------------------------------------------===//
#include "WarpSpecializeRoles.h"
#include "TmaRules.h"
#include "tessel/Transforms/BufferUtils.h"

#include "mlir/IR/IRMapping.h"

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

// The producer runs scalar address code and TMA issues: setmaxnreg's floor
// of 24 registers suffices, and each register it gives up lets two consumer
// warpgroups keep 240. Those last 8 matter: at 232, ptxas serializes the
// attention backward pass's wgmmas (C7512) to fit its in-flight operands.
static constexpr int64_t kProducerRegisters = 24;

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
/// Every rank's copy of a tensor is one buffer here: a write to one may be
/// to the copy another op reads (this rank's own, through peer()).
static Value withoutPeer(Value root) {
  if (auto peer = root.getDefiningOp<PeerOp>()) return peer.getSource();
  return root;
}

static bool writesBuffer(Operation *op, Value root) {
  root = withoutPeer(root);
  auto isRoot = [&](Value v) { return withoutPeer(getRootBuffer(v)) == root; };
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

/// The last op after `copy`, in its block, that uses the buffer the copy
/// fills; the copy itself when none does.
static Operation *lastReaderOf(CopyOp copy) {
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
  return lastReader;
}

namespace {
/// Splits one kernel; each step builds on what the earlier ones chose,
/// which the members hold.
class Specializer {
public:
  Specializer(const PipelinePlan &plan, KernelOp kernel, const TargetInfo &target)
      : plan(plan), b(this->plan.loop), kernel(kernel), target(target), loop(this->plan.loop),
        loc(loop.getLoc()), pb{b, loc, this->plan} {}
  Specializer(const Specializer &) = delete;
  Specializer &operator=(const Specializer &) = delete;
  void run();

private:
  PipelinePlan plan;
  OpBuilder b;
  KernelOp kernel;
  const TargetInfo &target;
  /// Erased once the consumers' loop replaces it.
  PipelinedOp loop;
  Location loc;
  PipelineBuilder pb;

  /// A persistent kernel's walk over its tiles around the loop, or null.
  scf::ForOp tiles;
  /// The kernel's own threads, all consumers.
  int64_t consumers = 0;
  int64_t clusterSize = 1;
  /// Multicast loads: every block's consumers release every block's stage.
  bool multicast = false;
  /// The gemms whose MMAs release the stages by commit (asyncMmas).
  SmallVector<GemmOp> mmas;
  /// The copies before the loop the producer issues (prologueLoads), each
  /// one's buffer copies (1 or 2), and the index of its first mbarrier.
  SmallVector<CopyOp> prologue;
  SmallVector<int64_t> copies, firstBarrier;
  Value full, empty, prologueFull, prologueEmpty;
  RoleOp producer, consumer;
  /// The consumers' setmaxnreg count; null when registers do not move.
  IntegerAttr consumerBudget;
  /// What the producer recomputes in its own walk over the tiles, and the
  /// flag waits it runs too: at the top level and in a walk's body.
  SetVector<Operation *> tileNeeds;
  SmallVector<Operation *> topGuards, tileGuards;
  scf::ForOp consume;
  /// The consumers' wait for their last MMAs, when they only issue them.
  Operation *mmaWait = nullptr;

  /// Which release `empty` counts: the consumer warps' arrivals, or one
  /// tcgen05 commit per stage.
  void chooseStageRelease();
  /// The two tile.role ops, empty, before `anchor`.
  void createRoles(Operation *anchor);
  void splitGuards();
  /// The prologue loads' buffer copies and mbarriers.
  void createPrologueBarriers();
  /// Moves the kernel's top-level code into the consumer role, all but what
  /// every thread runs before the roles split.
  void moveIntoConsumer(Operation *anchor, const SetVector<Operation *> &producerNeeds);
  void buildProducer();
  /// The producer's copy of the walk over the tiles; the builder is left
  /// in its body.
  scf::ForOp beginProducerWalk(IRMapping &tileMap);
  void issuePrologueLoads(scf::ForOp produceTiles);
  /// The producer's loop over the pipeline's iterations.
  scf::ForOp issueStageLoads();
  /// Both walks carry the pipeline's iteration count from tile to tile.
  void carryIterationCount(scf::ForOp produce);
  void buildConsumerLoop();
  void consumePrologueLoads();

  /// For a walk's tile `iv` with ordinal n (0, 1, ...) in the walk, where a
  /// prologue buffer has `copies` copies: the copy the tile uses (n mod
  /// copies; null for a single one) and the phase of that copy's mbarriers
  /// ((n / copies) mod 2).
  struct TileSlot {
    Value copy, parity;
  };
  SmallVector<TileSlot> tileSlots(scf::ForOp walk, Value iv);
  /// The mbarrier of a prologue load whose copies' mbarriers start at
  /// `first`, for the tile's copy.
  Value prologueBarrier(int64_t first, TileSlot slot);
};
} // namespace

SmallVector<Specializer::TileSlot> Specializer::tileSlots(scf::ForOp walk, Value iv) {
  Location walkLoc = walk.getLoc();
  Value ordinal = arith::DivUIOp::create(
      b, walkLoc, arith::SubIOp::create(b, walkLoc, iv, walk.getLowerBound()), walk.getStep());
  auto slotFor = [&](int64_t count) {
    auto mod2 = [&](Value v) { return arith::RemUIOp::create(b, walkLoc, v, pb.constant(2)); };
    if (count == 1) return TileSlot{Value(), mod2(ordinal)};
    Value copy = mod2(ordinal);
    return TileSlot{copy, mod2(arith::DivUIOp::create(b, walkLoc, ordinal, pb.constant(2)))};
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

Value Specializer::prologueBarrier(int64_t first, TileSlot slot) {
  if (!slot.copy) return pb.constant(first);
  return arith::AddIOp::create(b, slot.copy.getLoc(), pb.constant(first), slot.copy);
}

void Specializer::run() {
  // A persistent kernel's tile loop around the pipeline: both roles walk
  // the tiles, and the pipeline's iteration count runs on across them so
  // that the producer fills the next tile's stages as they free up.
  tiles = tileLoopAround(loop, kernel);
  if (tiles) {
    // Buffers are the whole kernel's: both roles' walks use them.
    for (Operation &op : llvm::make_early_inc_range(*tiles.getBody()))
      if (llvm::isa<AllocOp>(op) && op.isBeforeInBlock(loop)) op.moveBefore(tiles);
  }
  consumers = kernel.getThreads();
  chooseStageRelease();
  prologue = prologueLoads(plan, kernel, target);
  pb.multiBuffer();
  full = pb.createBarriers(kernel, 1, "full");
  empty = pb.createBarriers(
      kernel, mmas.empty() ? consumers / 32 * (multicast ? clusterSize : 1) : 1, "empty");
  kernel.setThreads(consumers + kProducerThreads);

  // Everything with effects moves into the consumer role, in order.
  Operation *anchor = tiles ? tiles.getOperation() : loop.getOperation();
  createRoles(anchor);
  SetVector<Operation *> producerNeeds =
      producerInputs(plan, kernel, nullptr, &tileNeeds, prologue);
  splitGuards();
  createPrologueBarriers();
  moveIntoConsumer(anchor, producerNeeds);

  buildProducer();
  buildConsumerLoop();
  consumePrologueLoads();
}

void Specializer::chooseStageRelease() {
  // tcgen05 gemms that only read the stages release them by commit: one
  // arrival per stage, from the MMAs, not one per consumer warp.
  mmas = asyncMmas(plan);
  // Multicast loads write every block of the cluster's stage: a stage is
  // free once the consumers of every block are done with it, so each
  // consumer warp arrives on every block's `empty` (a tcgen05 commit
  // reaches its own block only, and the MMAs are waited for instead).
  clusterSize = kernel.getClusterSize();
  multicast = clusterSize > 1 && llvm::any_of(plan.loads, [](PipelineLoad &load) {
                return load.copy.getMulticast();
              });
  if (multicast) mmas.clear();
}

void Specializer::createRoles(Operation *anchor) {
  b.setInsertionPoint(anchor);
  // Registers the producer gives up go to the consumers, in steps of 8.
  int64_t consumerRegisters =
      std::min<int64_t>(240, (65536 - kProducerThreads * kProducerRegisters) / consumers / 8 * 8);
  // Only worth moving when the consumers get more than they start with
  // (one consumer warpgroup already starts with enough).
  IntegerAttr producerBudget;
  if (consumerRegisters > entryRegisters(consumers + kProducerThreads)) {
    consumerBudget = b.getI64IntegerAttr(consumerRegisters);
    producerBudget = b.getI64IntegerAttr(kProducerRegisters);
  }
  producer = RoleOp::create(b, loc, b.getI64IntegerAttr(consumers),
                            b.getI64IntegerAttr(kProducerThreads), producerBudget);
  producer.getBody().emplaceBlock();
  consumer = RoleOp::create(b, loc, b.getI64IntegerAttr(0), b.getI64IntegerAttr(consumers),
                            consumerBudget);
  consumer.getBody().emplaceBlock();
}

void Specializer::splitGuards() {
  // The flag waits before the loop, run by the producer too: those at the
  // top level once, those of a walk's body in its own walk.
  Block &top = kernel.getBodyBlock();
  for (Operation *guard : guardsBeforeLoop(loop, kernel))
    (guard->getBlock() == &top ? topGuards : tileGuards).push_back(guard);
}

void Specializer::createPrologueBarriers() {
  copies = doublePrologueBuffers(kernel, prologue, target, consumers + kProducerThreads,
                                 /*onePerSm=*/bool(consumerBudget));
  // Each prologue load's mbarriers, one per copy of its buffer, from
  // firstBarrier[i] on.
  int64_t barriers = 0;
  for (int64_t count : copies) {
    firstBarrier.push_back(barriers);
    barriers += count;
  }
  if (!prologue.empty()) {
    prologueFull = pb.createBarriers(kernel, 1, "prologue_full", barriers);
    prologueEmpty = pb.createBarriers(kernel, consumers / 32, "prologue_empty", barriers);
  }
}

void Specializer::moveIntoConsumer(Operation *anchor,
                                   const SetVector<Operation *> &producerNeeds) {
  // Before the loop, shared scalar code stays where every thread runs
  // it (the producer's addresses may need it); from the loop on,
  // everything is the consumers'.
  // So does what the producer's loads depend on (whyNot checked that
  // every thread can run it).
  Block *consumerBody = &consumer.getBody().front();
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
  for (Operation &op : llvm::make_early_inc_range(kernel.getBodyBlock())) {
    if (&op == producer.getOperation() || &op == consumer.getOperation()) continue;
    afterLoop |= &op == anchor;
    bool stays = !afterLoop && (producerNeeds.contains(&op) || (staysShared(op) && !usesMoved(op)));
    if (stays) continue;
    op.moveBefore(consumerBody, consumerBody->end());
  }
}

void Specializer::buildProducer() {
  // Producer: the loads, gated by `empty`. In a persistent kernel it
  // walks its own copy of the tile loop, recomputing what the loads'
  // addresses need and counting the pipeline's iterations on.
  b.setInsertionPointToStart(&producer.getBody().front());
  IRMapping tileMap;
  for (Operation *guard : topGuards) b.clone(*guard);
  scf::ForOp produceTiles;
  if (tiles) produceTiles = beginProducerWalk(tileMap);
  issuePrologueLoads(produceTiles);
  for (Operation *guard : tileGuards) b.clone(*guard, tileMap);
  scf::ForOp produce = issueStageLoads();
  // Ends the walk, and with it pb's use of tileMap.
  if (tiles) carryIterationCount(produce);
}

scf::ForOp Specializer::beginProducerWalk(IRMapping &tileMap) {
  Value zero = pb.constant(0);
  auto produceTiles = scf::ForOp::create(b, loc, tiles.getLowerBound(), tiles.getUpperBound(),
                                         tiles.getStep(), ValueRange{zero});
  b.setInsertionPointToStart(produceTiles.getBody());
  tileMap.map(tiles.getInductionVar(), produceTiles.getInductionVar());
  for (Operation *op : tileNeeds) b.clone(*op, tileMap);
  pb.outer = &tileMap;
  pb.base = produceTiles.getRegionIterArgs().front();
  return produceTiles;
}

void Specializer::issuePrologueLoads(scf::ForOp produceTiles) {
  // The prologue loads, ahead of the tile's stages, each once the
  // consumers are done with the tile's copy of the buffer (that of the
  // previous tile, or of the one before it with two copies).
  SmallVector<TileSlot> produceSlots;
  if (!prologue.empty())
    produceSlots = tileSlots(produceTiles, produceTiles.getInductionVar());
  for (auto [i, copy] : llvm::enumerate(prologue)) {
    TileSlot slot = produceSlots[i];
    Value index = prologueBarrier(firstBarrier[i], slot);
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
}

scf::ForOp Specializer::issueStageLoads() {
  Block &loopBody = loop.getBody().front();
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
    Value dst = pb.destFor(load, stage); // the load's window of the stage
    CopyAsyncOp::create(b, loc, src, dst, full, stage,
                        clusterSize > 1 && load.copy.getMulticast());
  }
  return produce;
}

void Specializer::carryIterationCount(scf::ForOp produce) {
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

void Specializer::buildConsumerLoop() {
  // Consumers: the rest of the body, gated by `full`, releasing `empty`.
  Block &loopBody = loop.getBody().front();
  b.setInsertionPoint(loop);
  consume = scf::ForOp::create(b, loc, loop.getLower(), loop.getUpper(), loop.getStep());
  loopBody.getArgument(0).replaceAllUsesWith(consume.getInductionVar());
  Block *body = consume.getBody();
  body->getOperations().splice(body->begin(), loopBody.getOperations());
  for (PipelineLoad &load : plan.loads) load.copy->erase();
  pb.eraseGuards();
  b.setInsertionPointToStart(body);
  Value k = pb.iteration(consume.getInductionVar());
  Value stage = pb.stageOf(k);
  MbarrierWaitOp::create(b, loc, full, stage, pb.parityOf(k));
  pb.useStage(consume.getRegion(), stage);
  b.setInsertionPoint(body->getTerminator());
  // A buffer the consumers' last MMAs read is free only after mmaWait.
  if (mmas.empty()) {
    MbarrierArriveOp::create(b, loc, empty, stage, /*each_thread=*/false, /*cluster=*/multicast);
    // Asked for, the arrival may move an iteration later once the gemms
    // are lowered (tessel-release-stages-late). Only wgmma groups can stay
    // in flight: elsewhere (sm_100a's tcgen05, or mma.sync) the option is
    // ignored, as PipelineOptions says, not an error for a loop of
    // another form.
    if (loop.getOverlapMma() && target.computeCapability == 90)
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
}

void Specializer::consumePrologueLoads() {
  // The consumers wait for the prologue loads where they were and release
  // each buffer after its last reader in the tile; with two copies, the
  // tile reads its own.
  SmallVector<TileSlot> consumeSlots;
  if (!prologue.empty()) {
    // Before the first of them: every reader of the buffers follows it.
    b.setInsertionPoint(prologue.front());
    consumeSlots = tileSlots(tiles, tiles.getInductionVar());
  }
  for (auto [i, copy] : llvm::enumerate(prologue)) {
    Value buffer = copy.getDest();
    Operation *lastReader = lastReaderOf(copy);
    b.setInsertionPoint(copy);
    TileSlot slot = consumeSlots[i];
    Value index = prologueBarrier(firstBarrier[i], slot);
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

void tessel::splitIntoRoles(const PipelinePlan &plan, KernelOp kernel, const TargetInfo &target) {
  Specializer(plan, kernel, target).run();
}
