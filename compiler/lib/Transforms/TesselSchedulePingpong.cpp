//===- TesselSchedulePingpong.cpp - consumer warpgroups take turns -------===//
//
// In a warp-specialized loop marked `tessel.pingpong`, the two consumer
// warpgroups take turns issuing gemms, so that the tensor cores see them
// alternate and one warpgroup's element-wise work (a softmax) runs while
// the other's gemms do. A turn is the gemms a warpgroup issues back to back
// (from a wgmma fence to the next wgmma wait, as tessel-defer-wgmma-waits
// left them) between a pair of named barriers: warpgroup w waits on its own
// (`bar.sync 14 + w, 256`) before the turn's first wgmma and lets the other
// go (`bar.arrive 15 - w, 256`) once its last gemm is issued, before
// waiting for any:
//
//   wg 1: arrive(turn 0)                (wg 0 goes first)
//   loop: for each turn: wait(own turn); issue; arrive(other turn) ...
//   wg 0: wait(turn 0)                  (takes wg 1's last arrival)
//
// so every arrival meets one wait, and a turn never holds a wait for a
// gemm or a load. Warpgroups that synchronize with each other inside the
// loop would deadlock against the turns: that is an error.
//
// Gemms may sit in the branches of an scf.if whose condition is the same
// for every thread of the block (computed from loop counters, kernel
// arguments, block indices and global tensors the kernel only reads): each
// branch takes its own turns, and since both warpgroups take the same
// branch, arrivals still meet waits. (The attention forward's last key step
// skips the next block's scores that way.) Gemms under any other control
// flow are an error.
//
//===----------------------------------------------------------------------===//
#include "tessel/Dialect/Tile/TileDialect.h"
#include "tessel/Dialect/TileNV/TileNVDialect.h"
#include "tessel/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace tessel {
#define GEN_PASS_DEF_TESSELSCHEDULEPINGPONG
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

namespace {
constexpr int64_t kTurnThreads = 256;

struct Turns {
  OpBuilder &b;
  Location loc;
  Value isFirst; // this thread is in warpgroup 0

  /// `wait` on the warpgroup's own turn, or an arrival on the other's.
  void emit(bool wait) {
    auto branch = scf::IfOp::create(b, loc, isFirst, /*withElse=*/true);
    for (int64_t wg : {0, 1}) {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(wg == 0 ? branch.thenBlock() : branch.elseBlock());
      int64_t id = kPingpongBarrier + (wait ? wg : 1 - wg);
      tilenv::NamedBarrierOp::create(b, loc, id, kTurnThreads, /*arrive=*/!wait);
    }
  }
  /// One warpgroup alone: wg 0 waits on its turn or wg 1 arrives on it.
  void only(bool first, bool wait) {
    Value cond = first ? isFirst
                       : arith::XOrIOp::create(b, loc, isFirst,
                                               arith::ConstantIntOp::create(b, loc, 1, 1));
    auto branch = scf::IfOp::create(b, loc, cond, /*withElse=*/false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(branch.thenBlock());
    tilenv::NamedBarrierOp::create(b, loc, kPingpongBarrier, kTurnThreads,
                                   /*arrive=*/!wait);
  }
};

/// Whether `v` has one value across the block's threads: it is computed,
/// by side-effect-free ops and loads from global tensors the kernel only
/// reads (a packed batch's cu_seqlens), from constants, kernel arguments,
/// block indices and counters of loops with such bounds. (Memory another
/// thread may write could give the two warpgroups different values.)
/// Values being decided count as uniform (loop-carried values are uniform
/// if their update is).
bool isBlockUniform(Value v, llvm::DenseSet<Value> &assumed, int depth = 0) {
  if (!assumed.insert(v).second) return true;
  if (depth > 128) return false;
  auto uniform = [&](Value other) { return isBlockUniform(other, assumed, depth + 1); };
  if (auto arg = llvm::dyn_cast<BlockArgument>(v)) {
    Operation *owner = arg.getOwner()->getParentOp();
    if (llvm::isa<KernelOp>(owner)) return true;
    auto loop = llvm::dyn_cast<scf::ForOp>(owner);
    if (!loop) return false;
    if (arg == loop.getInductionVar())
      return uniform(loop.getLowerBound()) && uniform(loop.getStep());
    OpOperand *init = loop.getTiedLoopInit(arg);
    return init && uniform(init->get()) && uniform(loop.getTiedLoopYieldedValue(arg)->get());
  }
  Operation *def = v.getDefiningOp();
  if (llvm::isa<tilenv::ThreadIdOp>(def)) return false;
  if (auto load = llvm::dyn_cast<memref::LoadOp>(def)) {
    auto tensor = llvm::dyn_cast<BlockArgument>(load.getMemRef());
    if (!tensor || !llvm::isa<KernelOp>(tensor.getOwner()->getParentOp()) ||
        getMemorySpace(load.getMemRefType()) != MemorySpace::global)
      return false;
    for (Operation *user : tensor.getUsers())
      if (!llvm::isa<memref::LoadOp, memref::DimOp>(user)) return false;
  } else if (!isMemoryEffectFree(def) || def->getNumRegions()) {
    return false;
  }
  return llvm::all_of(def->getOperands(), [&](Value operand) {
    return llvm::isa<MemRefType>(operand.getType()) || uniform(operand);
  });
}

bool containsCommit(Operation &op) {
  WalkResult found = op.walk([](tilenv::WgmmaCommitOp) { return WalkResult::interrupt(); });
  return found.wasInterrupted();
}

/// The turns of `block`: from a fence to the last commit before the next
/// wait (or the block's end); the branches of a block-uniform scf.if take
/// turns of their own.
LogicalResult collectTurns(scf::ForOp loop, Block *block,
                           SmallVector<std::pair<Operation *, Operation *>> &spans) {
  Operation *open = nullptr, *lastCommit = nullptr;
  auto close = [&] {
    if (lastCommit) spans.push_back({open, lastCommit});
    open = lastCommit = nullptr;
  };
  for (Operation &op : *block) {
    if (auto branch = llvm::dyn_cast<scf::IfOp>(op); branch && containsCommit(op)) {
      llvm::DenseSet<Value> assumed;
      if (!isBlockUniform(branch.getCondition(), assumed))
        return branch.emitError("cannot schedule this loop's warpgroups in ping-pong turns: "
                                "its gemms are under a condition that may differ between "
                                "its threads");
      close();
      for (Region &region : op.getRegions())
        if (!region.empty() && failed(collectTurns(loop, &region.front(), spans)))
          return failure();
      continue;
    }
    if (llvm::isa<tilenv::WgmmaFenceOp>(op) && !open) open = &op;
    if (llvm::isa<tilenv::WgmmaCommitOp>(op)) {
      if (!open) return loop.emitError("a wgmma gemm without its wgmma fence");
      lastCommit = &op;
    } else if (containsCommit(op)) {
      return loop.emitError("cannot schedule this loop's warpgroups in ping-pong turns: some of "
                            "its gemms are inside control flow other than a block-uniform scf.if");
    }
    if (llvm::isa<tilenv::WgmmaWaitOp>(op) || op.hasTrait<OpTrait::IsTerminator>()) close();
  }
  close();
  return success();
}

LogicalResult schedule(scf::ForOp loop) {
  Block *body = loop.getBody();
  WalkResult synced = loop.getBody()->walk([](Operation *op) {
    return llvm::isa<tilenv::NamedBarrierOp, tilenv::SyncThreadsOp>(op) ? WalkResult::interrupt()
                                                                         : WalkResult::advance();
  });
  if (synced.wasInterrupted())
    return loop.emitError("cannot schedule this loop's warpgroups in ping-pong turns: they "
                          "synchronize inside it (its warps share data through shared memory), "
                          "which would deadlock against the turns");
  // A turn issues the gemms from one fence up to the next wait: gemms issued
  // back to back (nothing read in between) go to the tensor cores together.
  SmallVector<std::pair<Operation *, Operation *>> spans; // first fence, last commit
  if (failed(collectTurns(loop, body, spans))) return failure();
  if (spans.empty())
    return loop.emitError("cannot schedule this loop's warpgroups in ping-pong turns: it has no "
                          "wgmma gemm");

  OpBuilder b(loop);
  Location loc = loop.getLoc();
  Value warpgroup = arith::DivUIOp::create(b, loc, tilenv::ThreadIdOp::create(b, loc, b.getIndexType()),
                                           arith::ConstantIndexOp::create(b, loc, 128));
  Value isFirst = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, warpgroup,
                                        arith::ConstantIndexOp::create(b, loc, 0));
  Turns turns{b, loc, isFirst};
  turns.only(/*first=*/false, /*wait=*/false);
  for (auto [open, commit] : spans) {
    b.setInsertionPoint(open);
    turns.emit(/*wait=*/true);
    b.setInsertionPointAfter(commit);
    turns.emit(/*wait=*/false);
  }
  b.setInsertionPointAfter(loop);
  turns.only(/*first=*/true, /*wait=*/true);
  loop->removeAttr(kPingpongAttr);
  return success();
}

struct TesselSchedulePingpong
    : tessel::impl::TesselSchedulePingpongBase<TesselSchedulePingpong> {
  void runOnOperation() override {
    SmallVector<scf::ForOp> loops;
    getOperation()->walk([&](scf::ForOp loop) {
      if (loop->hasAttr(kPingpongAttr)) loops.push_back(loop);
    });
    for (scf::ForOp loop : loops)
      if (failed(schedule(loop))) return signalPassFailure();
  }
};
} // namespace
