//===- PipelinePlanning.h - what a pipelined loop loads ahead ---*- C++ -*-===//
//
// The planning step shared by tessel-warp-specialize and
// tessel-software-pipeline: which copies of a `tile.pipelined` body are
// loads that can be issued ahead into multi-buffered shared memory, whether
// TMA can carry them, and the IR helpers both passes use to issue a load for
// a later iteration and to name an iteration's stage and mbarrier parity.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TRANSFORMS_PIPELINEPLANNING_H
#define TESSEL_TRANSFORMS_PIPELINEPLANNING_H

#include "tessel/Transforms/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace tessel {

/// A global-to-shared copy of the loop body that fills a shared buffer used
/// only inside the loop, whole or a window of it at constant offsets (the
/// window of stage i is then the same offset into stage i's copy).
struct PipelineLoad {
  tile::CopyOp copy;
  tile::AllocOp buffer;
  /// The windows from the buffer to the copy's destination, the one on the
  /// buffer first; empty when the copy fills the whole buffer.
  llvm::SmallVector<tile::RegionOp> window;
  int64_t bytes = 0;
  /// Why TMA cannot carry it (empty when it can).
  std::string noTma;
};

/// A global-to-shared copy of the loop body that is not loaded ahead, and why.
struct SkippedCopy {
  tile::CopyOp copy;
  std::string reason;
};

/// Marks a buffer that tessel-software-pipeline multi-buffered (as opposed
/// to one the program staged itself): later pipelined loops may share it.
inline constexpr llvm::StringLiteral kPipelineStagedAttr = "tessel.pipeline_staged";

struct PipelinePlan {
  tile::PipelinedOp loop;
  llvm::SmallVector<PipelineLoad> loads;
  /// The body's other global-to-shared copies: they stay synchronous.
  llvm::SmallVector<SkippedCopy> skipped;
  /// Flag waits of the body placed before its first load, alone or in
  /// scf.if ops that hold only such waits: they guard the loads (the data
  /// they read arrives from elsewhere, announced by the flag), so whoever
  /// issues an iteration's loads ahead waits first.
  llvm::SmallVector<mlir::Operation *> guards;
  int64_t stages = 1;
  /// A use of the loads' buffers outside the loop that cannot see its
  /// stages (another loop's, or code that rewrites the buffer first); null
  /// when the loop has them to itself. Its first loads then wait for every
  /// thread to be done with that code.
  mlir::Operation *usedOutside = nullptr;
  /// Every load can be a TMA copy (sm_90a, unpadded layouts, 16-byte rows).
  bool tma = false;
  /// Bytes one stage's loads bring in.
  int64_t stageBytes();
  /// The distinct buffers the loads fill.
  llvm::SmallVector<tile::AllocOp> buffers();
};

/// Errors at the loop when its stages cannot all fit in the target's
/// shared memory, before any pass unrolls a prologue per stage.
mlir::LogicalResult verifyStagesFit(PipelinePlan &plan, const TargetInfo &target);

/// Errors at a guarding wait (or conditional wait) whose flag, index, value
/// or condition is not computed
/// from the induction variable and values defined before the loop by
/// side-effect-free ops: it could not be issued ahead with the loads.
mlir::LogicalResult verifyLoadGuards(PipelinePlan &plan);
/// A flag wait, or an scf.if holding such guards and the side-effect-free
/// code that computes their operands: code that orders the loads after it
/// after data arriving from elsewhere.
bool isGuard(mlir::Operation &op);

/// The loads of `loop` and how they can be carried. Copies that cannot be
/// issued ahead (their buffer is read after the loop before being written
/// whole, or written by another op of the loop) stay synchronous in place;
/// `PipelinePlan::skipped` says why. A buffer another pipelined loop
/// staged is staged for this one too.
PipelinePlan planPipeline(tile::PipelinedOp loop, const TargetInfo &target);

/// Remarks (tessel/Transforms/Remarks.h) of `pass`, which carries out
/// `plan`, at each copy it does not load ahead and, on a target with TMA,
/// at each load that is not a TMA copy, saying why.
void remarkPlan(PipelinePlan &plan, const TargetInfo &target, llvm::StringRef pass);

/// The ops of the loop body `body` that compute a load's source window (its
/// address arithmetic), in order.
llvm::SetVector<mlir::Operation *> loadAddressSlice(PipelineLoad &load, mlir::Block &body);
/// The same for the operands of a guarding wait.
llvm::SetVector<mlir::Operation *> guardSlice(mlir::Operation *guard, mlir::Block &body);

/// Iterations of a loop from `lower` to `upper` by `step`: ceil((upper -
/// lower) / step), 0 when it does not run.
mlir::Value buildTripCount(mlir::OpBuilder &b, mlir::Location loc, mlir::Value lower,
                           mlir::Value upper, mlir::Value step);

/// Builds index arithmetic for a pipeline at the current insertion point.
struct PipelineBuilder {
  mlir::OpBuilder &b;
  mlir::Location loc;
  PipelinePlan &plan;
  /// Where the loop's surroundings were cloned (a persistent kernel's
  /// producer walks its own copy of the tile loop): values defined outside
  /// the loop are looked up here first.
  const mlir::IRMapping *outer = nullptr;
  /// Iterations of the pipeline before this run of the loop (earlier tiles
  /// of a persistent kernel), added to every iteration number.
  mlir::Value base;

  mlir::Value mapped(mlir::Value v) const { return outer ? outer->lookupOrDefault(v) : v; }

  mlir::Value constant(int64_t v);
  /// The iteration number of induction value `iv`.
  mlir::Value iteration(mlir::Value iv);
  /// iteration % stages and (iteration / stages) % 2.
  mlir::Value stageOf(mlir::Value iteration);
  mlir::Value parityOf(mlir::Value iteration);
  /// A shared i64 buffer of `count` mbarriers (one per stage unless given),
  /// each initialised for `arrivals`, created at the start of the kernel.
  mlir::Value createBarriers(tile::KernelOp kernel, int64_t arrivals, llvm::StringRef name,
                             std::optional<int64_t> count = std::nullopt);
  /// Marks every load buffer as having `stages` copies.
  void multiBuffer();
  /// Clones the load's source window for the iteration whose induction
  /// value is `iv`: its address arithmetic is cloned from `body`, the
  /// block (with the induction variable as argument 0) that holds the copy.
  mlir::Value sourceFor(PipelineLoad &load, mlir::Block &body, mlir::Value iv);
  /// The load's destination in stage `stage`: that copy of its buffer, or
  /// the load's window of it.
  mlir::Value destFor(PipelineLoad &load, mlir::Value stage);
  /// The plan's guarding waits for the iteration whose induction value is
  /// `iv`, cloned at the insertion point (to precede that iteration's loads).
  void waitForGuards(mlir::Block &body, mlir::Value iv);
  /// Erases the guarding waits from the loop body once they are issued
  /// with the loads.
  void eraseGuards();
  /// Replaces the uses of every load buffer inside `region` with the stage
  /// `stage` of it (views created at the insertion point).
  void useStage(mlir::Region &region, mlir::Value stage);
};

} // namespace tessel

#endif
