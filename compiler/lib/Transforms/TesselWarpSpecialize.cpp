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
//     for k: wait empty[k % S] (parity of round k/S, inverted: the first
//            round passes at once); expect_tx full[k % S]; TMA loads
//   consumers (threads 0 .. T-1, setmaxnreg up): everything else the
//     kernel does, with the loop becoming
//     for k: wait full[k % S] (parity of round k/S); body on stage k % S;
//            each warp arrives on empty[k % S]
//
// The producer runs up to S loads ahead of the consumers, who never wait
// on each other.
//
//===----------------------------------------------------------------------===//
#include "PipelinePlanning.h"
#include "tessel/Transforms/BufferUtils.h"

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

/// Why the loop is not split, or empty when it can be.
static std::string whyNot(PipelinePlan &plan, KernelOp kernel) {
  if (plan.loads.empty()) return "it has no loads to issue ahead";
  if (!plan.tma) return "its loads are not all TMA: " + plan.loads.front().noTma;
  if (plan.loop->getParentOp() != kernel.getOperation())
    return "it is nested inside other control flow";
  int64_t threads = kernel.getThreads();
  if (threads % 128) return "the kernel's threads are not whole warpgroups";
  if (threads + kProducerThreads > 1024) return "a producer warpgroup would exceed 1024 threads";
  int64_t loops = 0;
  kernel.walk([&](PipelinedOp) { ++loops; });
  if (loops != 1) return "the kernel has more than one pipelined loop";
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

struct Specializer {
  OpBuilder b;
  PipelinePlan plan;
  KernelOp kernel;

  void run() {
    PipelinedOp loop = plan.loop;
    Location loc = loop.getLoc();
    PipelineBuilder pb{b, loc, plan};
    int64_t consumers = kernel.getThreads();
    pb.multiBuffer();
    Value full = pb.createBarriers(kernel, 1, "full");
    Value empty = pb.createBarriers(kernel, consumers / 32, "empty");
    kernel.setThreads(consumers + kProducerThreads);

    // Everything with effects moves into the consumer role, in order.
    b.setInsertionPoint(loop);
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
    Block &top = kernel.getBodyBlock();
    bool afterLoop = false;
    for (Operation &op : llvm::make_early_inc_range(top)) {
      if (&op == producer.getOperation() || &op == consumer.getOperation()) continue;
      afterLoop |= &op == loop.getOperation();
      if (afterLoop || !staysShared(op)) op.moveBefore(consumerBody, consumerBody->end());
    }

    // Producer: the loads, gated by `empty`.
    Block &loopBody = loop.getBody().front();
    b.setInsertionPointToStart(&producer.getBody().front());
    auto produce = scf::ForOp::create(b, loc, loop.getLower(), loop.getUpper(), loop.getStep());
    b.setInsertionPointToStart(produce.getBody());
    Value k = pb.iteration(produce.getInductionVar());
    Value stage = pb.stageOf(k);
    Value parity = pb.parityOf(k);
    Value freed = arith::XOrIOp::create(b, loc, parity, pb.constant(1));
    MbarrierWaitOp::create(b, loc, empty, stage, freed);
    MbarrierExpectTxOp::create(b, loc, full, stage, b.getI64IntegerAttr(plan.stageBytes()));
    for (PipelineLoad &load : plan.loads) {
      Value src = pb.sourceFor(load, loopBody, produce.getInductionVar());
      Value dst = StageOp::create(b, loc, load.buffer.getType(), load.buffer.getResult(), stage);
      CopyAsyncOp::create(b, loc, src, dst, full, stage);
    }

    // Consumers: the rest of the body, gated by `full`, releasing `empty`.
    b.setInsertionPoint(loop);
    auto consume = scf::ForOp::create(b, loc, loop.getLower(), loop.getUpper(), loop.getStep());
    loopBody.getArgument(0).replaceAllUsesWith(consume.getInductionVar());
    Block *body = consume.getBody();
    body->getOperations().splice(body->begin(), loopBody.getOperations());
    for (PipelineLoad &load : plan.loads) load.copy->erase();
    b.setInsertionPointToStart(body);
    k = pb.iteration(consume.getInductionVar());
    stage = pb.stageOf(k);
    MbarrierWaitOp::create(b, loc, full, stage, pb.parityOf(k));
    pb.useStage(consume.getRegion(), stage);
    b.setInsertionPoint(body->getTerminator());
    MbarrierArriveOp::create(b, loc, empty, stage);
    if (loop.getPingpong()) consume->setAttr(kPingpongAttr, b.getUnitAttr());
    loop->erase();
  }
};

struct TesselWarpSpecialize : tessel::impl::TesselWarpSpecializeBase<TesselWarpSpecialize> {
  using Base::Base;
  void runOnOperation() override {
    KernelOp kernel = getOperation();
    std::optional<TargetInfo> target = lookupTarget(arch, tma, kernel);
    if (!target) return signalPassFailure();
    if (target->computeCapability != 90) return;
    SmallVector<PipelinedOp> loops;
    kernel.walk([&](PipelinedOp loop) { loops.push_back(loop); });
    for (PipelinedOp loop : loops) {
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
        // Asked for explicitly: say why not; otherwise the loop is
        // software-pipelined without roles.
        if (asked) {
          loop.emitError("cannot warp-specialize this pipelined loop: ") << why;
          return signalPassFailure();
        }
        continue;
      }
      Specializer{OpBuilder(loop), plan, kernel}.run();
    }
    if (failed(verifySharedMemory(kernel, target->arch, target->maxSharedBytes)))
      signalPassFailure();
  }
};
} // namespace
