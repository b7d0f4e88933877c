//===- TesselSoftwarePipeline.cpp - multi-buffered loads ahead of compute -===//
//
// A `tile.pipelined` loop with num_stages = S becomes an scf.for whose loads
// run S - 1 iterations ahead of the compute that uses them:
//
//   prologue:  loads of iterations 0 .. S-2 into stages 0 .. S-2
//   iteration k:
//     wait until the loads of iteration k have landed
//     [barrier: every thread is done with iteration k-1's stage]
//     loads of iteration k + S - 1 into stage (k + S - 1) % S
//     the body, reading stage k % S
//
// Flag waits in the body before its first load guard the loads (their data
// arrives from another block or GPU): they are issued with the loads, for
// the same iteration. The last S - 1 iterations are the epilogue: their loads fall past the
// trip count and are predicated off, which also covers a loop shorter than
// its stages. Two protocols carry the loads:
//   - TMA (sm_90a, every load eligible): one thread issues each load with
//     the stage's `full` mbarrier expecting its bytes; compute waits on the
//     stage's phase parity ((k / S) % 2).
//   - cp.async (sm_80, or loads TMA cannot carry): each thread's copies form
//     one commit group per iteration; waiting until S - 2 groups are pending
//     leaves iteration k's data in place, and a barrier publishes it.
// A loop with loads of both kinds (a peer's tile beside local ones) uses
// both: the cp.async wait and barrier, then the `full` phase for the TMA
// loads, so that one load TMA cannot carry leaves the others theirs.
//
//===----------------------------------------------------------------------===//
#include "PipelinePlanning.h"
#include "tessel/Transforms/BufferUtils.h"
#include "tessel/Transforms/Remarks.h"

namespace tessel {
#define GEN_PASS_DEF_TESSELSOFTWAREPIPELINE
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

namespace {

/// True when wgmma or tcgen05.mma (the async proxy) reads one of the
/// plan's buffers.
static bool readByAsyncProxy(PipelinePlan &plan) {
  bool found = false;
  plan.loop.walk([&](GemmOp gemm) {
    if (gemm.getInstruction() != GemmInstruction::wgmma &&
        gemm.getInstruction() != GemmInstruction::tcgen05)
      return;
    for (PipelineLoad &load : plan.loads)
      for (Value operand : gemm.getOperandsRead())
        found |= getRootBuffer(operand) == load.buffer.getResult();
  });
  return found;
}

/// Whether `load` is issued as a TMA copy.
static bool byTma(const PipelineLoad &load) { return load.noTma.empty(); }

struct Pipeliner {
  OpBuilder b;
  PipelinePlan plan;
  KernelOp kernel;
  Value full; // TMA: one mbarrier per stage
  bool anyTma = llvm::any_of(plan.loads, byTma);
  bool anyCpAsync = !llvm::all_of(plan.loads, byTma);

  /// Bytes a stage's TMA loads bring in.
  int64_t tmaBytes() {
    int64_t bytes = 0;
    for (PipelineLoad &load : plan.loads)
      if (byTma(load)) bytes += load.bytes;
    return bytes;
  }

  /// Issues the loads of the iteration with induction value `iv` into
  /// `stage`, when `iv` is inside the loop.
  void issueLoads(Location loc, Block &from, Value iv, Value stage, bool barrierFirst) {
    PipelineBuilder pb{b, loc, plan};
    Value inside = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, iv, plan.loop.getUpper());
    auto ifOp = scf::IfOp::create(b, loc, inside, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    if (barrierFirst) BarrierOp::create(b, loc, IntegerAttr(), IntegerAttr());
    pb.waitForGuards(from, iv);
    if (anyTma) MbarrierExpectTxOp::create(b, loc, full, stage, b.getI64IntegerAttr(tmaBytes()));
    for (PipelineLoad &load : plan.loads) {
      Value src = pb.sourceFor(load, from, iv);
      Value dst = pb.destFor(load, stage);
      if (byTma(load))
        CopyAsyncOp::create(b, loc, src, dst, full, stage);
      else
        CopyOp::create(b, loc, src, dst, /*async=*/true);
    }
  }

  /// A per-thread count of the loop's iterations over all its runs, zero
  /// at the kernel's start (every thread runs the kernel's first op).
  Value runCounter(Location loc) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&kernel.getBodyBlock());
    auto type = getTileMemRefType({1}, b.getI32Type(), MemorySpace::local);
    Value counter = AllocOp::create(b, loc, type, IntegerAttr(), Attribute(),
                                    b.getStringAttr("pipeline_runs"), IntegerAttr());
    Value zero = arith::ConstantIndexOp::create(b, loc, 0);
    memref::StoreOp::create(b, loc, arith::ConstantIntOp::create(b, loc, b.getI32Type(), 0),
                            counter, zero);
    return counter;
  }

  void run() {
    PipelinedOp loop = plan.loop;
    Location loc = loop.getLoc();
    PipelineBuilder pb{b, loc, plan};
    int64_t S = plan.stages;
    b.setInsertionPoint(loop);
    pb.multiBuffer();
    if (anyTma) full = pb.createBarriers(kernel, 1, "full");

    // A loop that runs again (nested in another) refills stages its last
    // run's final iterations read: every thread must be done with them.
    // So must they with a loop whose buffers other code used before it
    // (another loop over the same staging buffer), whose first loads
    // overwrite what that code read. With TMA a nested loop's mbarriers
    // also go on from the phases its last run left: the iterations of all
    // runs so far are counted in a local counter, and stages and parities
    // follow the running count.
    Value counter;
    bool nested = !llvm::isa<KernelOp>(loop->getParentOp());
    if (nested || plan.usedOutside) BarrierOp::create(b, loc, IntegerAttr(), IntegerAttr());
    if (nested) {
      if (anyTma) {
        counter = runCounter(loc);
        pb.base = arith::IndexCastOp::create(
            b, loc, b.getIndexType(), memref::LoadOp::create(b, loc, counter, pb.constant(0)));
      }
    }
    // Prologue: iterations 0 .. S-2.
    for (int64_t d = 0; d + 1 < S; ++d) {
      Value iv = arith::AddIOp::create(b, loc, loop.getLower(),
                                       arith::MulIOp::create(b, loc, loop.getStep(), pb.constant(d)));
      Value stage = pb.base ? pb.stageOf(arith::AddIOp::create(b, loc, pb.base, pb.constant(d)))
                            : pb.constant(d);
      issueLoads(loc, loop.getBody().front(), iv, stage, /*barrierFirst=*/false);
      if (anyCpAsync) CpAsyncCommitOp::create(b, loc);
    }

    // Asked before the body moves into the new loop (the walk finds the
    // gemms in the old one).
    bool asyncReads = readByAsyncProxy(plan);
    auto forOp = scf::ForOp::create(b, loc, loop.getLower(), loop.getUpper(), loop.getStep());
    Block &oldBody = loop.getBody().front();
    Block *body = forOp.getBody();
    oldBody.getArgument(0).replaceAllUsesWith(forOp.getInductionVar());
    body->getOperations().splice(body->begin(), oldBody.getOperations());

    b.setInsertionPointToStart(body);
    Value iv = forOp.getInductionVar();
    Value k = pb.iteration(iv);
    Value stage = pb.stageOf(k);
    Value aheadIv = arith::AddIOp::create(
        b, loc, iv, arith::MulIOp::create(b, loc, loop.getStep(), pb.constant(S - 1)));
    Value aheadStage = pb.stageOf(arith::AddIOp::create(b, loc, k, pb.constant(S - 1)));
    if (!anyCpAsync) {
      // The stage refilled below was read in iteration k-1: the barrier
      // before the refill orders those reads (wgmma has waited for them).
      issueLoads(loc, *body, aheadIv, aheadStage, /*barrierFirst=*/true);
      MbarrierWaitOp::create(b, loc, full, stage, pb.parityOf(k));
    } else {
      CpAsyncWaitOp::create(b, loc, b.getI64IntegerAttr(std::max<int64_t>(S - 2, 0)));
      // cp.async writes are the generic proxy's: the threads that made them
      // fence before the barrier that hands them to wgmma or tcgen05.mma.
      if (asyncReads) FenceProxyAsyncOp::create(b, loc);
      // Publishes iteration k's data and retires iteration k-1's reads.
      BarrierOp::create(b, loc, IntegerAttr(), IntegerAttr());
      issueLoads(loc, *body, aheadIv, aheadStage, /*barrierFirst=*/false);
      CpAsyncCommitOp::create(b, loc);
      // Iteration k's TMA loads, beside the cp.async ones.
      if (anyTma) MbarrierWaitOp::create(b, loc, full, stage, pb.parityOf(k));
    }
    pb.useStage(forOp.getRegion(), stage);
    if (counter) {
      // The next run starts where this one ends.
      b.setInsertionPointAfter(forOp);
      Value next = arith::AddIOp::create(
          b, loc, pb.base, buildTripCount(b, loc, loop.getLower(), loop.getUpper(), loop.getStep()));
      memref::StoreOp::create(b, loc, arith::IndexCastOp::create(b, loc, b.getI32Type(), next),
                              counter, pb.constant(0));
    }
    for (PipelineLoad &load : plan.loads) load.copy->erase();
    pb.eraseGuards();
    loop->erase();
  }
};

struct TesselSoftwarePipeline
    : tessel::impl::TesselSoftwarePipelineBase<TesselSoftwarePipeline> {
  using Base::Base;
  void runOnOperation() override {
    KernelOp kernel = getOperation();
    std::optional<TargetInfo> target = lookupTarget(arch, tma, kernel);
    if (!target) return signalPassFailure();
    SmallVector<PipelinedOp> loops;
    kernel.walk([&](PipelinedOp loop) { loops.push_back(loop); });
    for (PipelinedOp loop : loops) {
      PipelinePlan plan = planPipeline(loop, *target);
      // One stage: the loop stays as it is and its copies complete before
      // the compute that follows them.
      if (plan.stages < 2) continue;
      remarkPlan(plan, *target, getArgument());
      // Nothing to load ahead: the same, against what the loop asked for.
      if (plan.loads.empty()) {
        InFlightDiagnostic diag =
            emitMissed(loop, getArgument(), missed::kPipelining, RemarkSeverity::warning)
            << "this loop of " << plan.stages << " stages is not pipelined: ";
        if (plan.skipped.empty()) {
          diag << "it has no copy from global to shared memory to load ahead";
          continue;
        }
        diag << "the copy at " << describeLocation(plan.skipped.front().copy.getLoc())
             << " cannot be loaded ahead: " << plan.skipped.front().reason;
        if (plan.skipped.size() > 1)
          diag << " (and " << plan.skipped.size() - 1 << " more copies, each with its remark)";
        continue;
      }
      if (failed(verifyStagesFit(plan, *target)) || failed(verifyLoadGuards(plan)))
        return signalPassFailure();
      Pipeliner{OpBuilder(loop), plan, kernel}.run();
    }
    if (failed(verifySharedMemory(kernel, target->arch, target->maxSharedBytes)))
      signalPassFailure();
  }
};
} // namespace
