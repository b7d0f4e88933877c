//===- TesselDeferWgmmaWaits.cpp - wait for a wgmma only where needed ----===//
//
// The gemm lowering closes each gemm with `wgmma_commit; wgmma_wait 0`, so a
// warpgroup idles while its tensor cores drain. This pass deletes those waits
// and puts back, per block, the weakest wait before the first op that needs a
// gemm's result or could disturb its operands:
//
//  - any access to a pending group's accumulator or A registers;
//  - a write to shared memory the pending group's descriptors read, by this
//    thread, or by another one after a barrier (so a barrier followed, later
//    in the block, by such a write waits first);
//  - an mbarrier arrive (it may hand a pipeline stage back to its producer),
//    control flow that commits gemms of its own, and any op it cannot see
//    into;
//  - the end of the block.
//
// A wait for group g is `wgmma_wait N` with N the groups committed after g
// (groups complete in order). Its `ready` operands name the registers it
// makes safe, so that the emitter can pin their reads after it.
//
//===----------------------------------------------------------------------===//
#include "tessel/Dialect/Tile/TileDialect.h"
#include "tessel/Dialect/TileNV/TileNVDialect.h"
#include "tessel/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"

namespace tessel {
#define GEN_PASS_DEF_TESSELDEFERWGMMAWAITS
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

namespace {
/// What one committed group of wgmmas touches until it completes.
struct Group {
  llvm::SmallSetVector<Value, 4> registers; // accumulators and A fragments
  llvm::SmallSetVector<Value, 4> shared;    // buffers the descriptors read
  bool unknownShared = false;               // a descriptor we could not trace
};

/// One memory access of an op: the buffer and whether it may write it.
struct Access {
  Value buffer;
  bool write;
};

/// How an op (with everything nested in it) relates to pending wgmmas.
struct Effects {
  SmallVector<Access> accesses;
  SmallVector<Operation *> wgmmas; // issued inside (a gemm's k loop)
  bool opaque = false;             // must not run while any group is pending
  bool barrier = false;            // orders other threads' later writes
};

bool isShared(Value buffer) {
  auto type = llvm::dyn_cast<MemRefType>(buffer.getType());
  return type && getMemorySpace(type) == MemorySpace::shared;
}

/// The shared buffers whose addresses flow into `address` (a descriptor's
/// start); false when some part of it is not traced to a buffer.
bool traceSharedAddress(Value address, llvm::SmallSetVector<Value, 4> &buffers, int depth = 0) {
  Operation *def = address.getDefiningOp();
  if (!def || depth > 8) return false;
  if (auto smem = llvm::dyn_cast<tilenv::SmemAddressOp>(def)) {
    buffers.insert(smem.getBuffer());
    return true;
  }
  if (auto desc = llvm::dyn_cast<tilenv::WgmmaDescOp>(def))
    return traceSharedAddress(desc.getAddress(), buffers, depth + 1);
  if (!isPure(def) || def->getDialect()->getNamespace() != "arith") return false;
  // Offsets are plain integers; only operands that are addresses matter,
  // and an offset with no shared address in it adds none.
  bool found = false;
  for (Value operand : def->getOperands()) {
    llvm::SmallSetVector<Value, 4> part;
    if (traceSharedAddress(operand, part, depth + 1)) {
      buffers.insert(part.begin(), part.end());
      found = true;
    }
  }
  return found;
}

void addGemmOperands(Operation *wgmma, Group &group) {
  auto addDescriptor = [&](Value desc) {
    if (!traceSharedAddress(desc, group.shared)) group.unknownShared = true;
  };
  if (auto op = llvm::dyn_cast<tilenv::WgmmaOp>(wgmma)) {
    group.registers.insert(op.getAcc());
    addDescriptor(op.getDescA());
    addDescriptor(op.getDescB());
  } else if (auto op = llvm::dyn_cast<tilenv::WgmmaRegAOp>(wgmma)) {
    group.registers.insert(op.getAcc());
    group.registers.insert(op.getA());
    addDescriptor(op.getDescB());
  }
}

/// The accesses of one op that is not control flow.
void collectOwn(Operation *op, Effects &fx) {
  auto read = [&](Value v) { fx.accesses.push_back({v, false}); };
  auto write = [&](Value v) { fx.accesses.push_back({v, true}); };
  if (llvm::isa<tilenv::WgmmaOp, tilenv::WgmmaRegAOp>(op)) {
    fx.wgmmas.push_back(op);
    for (Value v : op->getOperands())
      if (llvm::isa<MemRefType>(v.getType())) write(v);
    return;
  }
  if (llvm::isa<tilenv::WgmmaCommitOp, tilenv::WgmmaWaitOp, tilenv::MbarrierArriveOp,
                tilenv::MbarrierInitOp, tilenv::TmaLoadOp, tilenv::SetMaxNRegOp>(op)) {
    fx.opaque = true;
    return;
  }
  if (llvm::isa<tilenv::NamedBarrierOp, tilenv::SyncThreadsOp, BarrierOp>(op)) {
    fx.barrier = true;
    return;
  }
  // Ops that touch no buffer an in-flight wgmma uses.
  if (llvm::isa<tilenv::WgmmaFenceOp, tilenv::SyncWarpOp, tilenv::FenceProxyAsyncOp,
                tilenv::MbarrierWaitOp, tilenv::CpAsyncCommitOp, tilenv::CpAsyncWaitOp,
                tilenv::BulkCommitOp, tilenv::BulkWaitOp, tilenv::TmaStoreOp,
                tilenv::FenceMbarrierInitOp, tilenv::ShflXorOp>(op))
    return;
  // A fresh buffer (say, A fragments packed for the next gemm) is nobody's
  // operand yet.
  if (llvm::isa<AllocOp>(op)) return;
  if (auto load = llvm::dyn_cast<memref::LoadOp>(op)) return read(load.getMemRef());
  if (auto store = llvm::dyn_cast<memref::StoreOp>(op)) return write(store.getMemRef());
  if (auto copy = llvm::dyn_cast<tilenv::CopyVectorOp>(op)) {
    read(copy.getSource());
    return write(copy.getDest());
  }
  if (auto copy = llvm::dyn_cast<tilenv::CpAsyncOp>(op)) {
    read(copy.getSource());
    return write(copy.getDest());
  }
  if (auto red = llvm::dyn_cast<tilenv::ReduceAddVectorOp>(op)) {
    read(red.getSource());
    return write(red.getDest());
  }
  if (auto atomic = llvm::dyn_cast<tilenv::AtomicAddOp>(op)) return write(atomic.getMemref());
  if (auto ld = llvm::dyn_cast<tilenv::LdMatrixOp>(op)) {
    read(ld.getSource());
    return write(ld.getDest());
  }
  if (auto mma = llvm::dyn_cast<tilenv::MmaSyncOp>(op)) {
    read(mma.getA());
    read(mma.getB());
    return write(mma.getAcc());
  }
  if (isMemoryEffectFree(op)) {
    // An address taken or an extent read is not an access, and pure ops
    // take no buffers otherwise; anything else with a buffer operand is not
    // understood.
    if (llvm::isa<tilenv::SmemAddressOp, memref::DimOp>(op)) return;
    for (Value v : op->getOperands())
      if (llvm::isa<MemRefType>(v.getType())) fx.opaque = true;
    return;
  }
  fx.opaque = true;
}

Effects effectsOf(Operation *op) {
  Effects fx;
  op->walk([&](Operation *nested) {
    if (nested->getNumRegions() == 0) collectOwn(nested, fx);
    else if (!llvm::isa<scf::ForOp, scf::IfOp, scf::YieldOp>(nested)) fx.opaque = true;
  });
  return fx;
}

struct Deferrer {
  /// Committed, incomplete groups, oldest first.
  SmallVector<Group> pending;
  /// The wgmmas issued since the last commit.
  Group open;

  /// Waits, before `at`, until `groups` oldest pending groups are complete.
  void complete(Operation *at, size_t groups) {
    OpBuilder b(at);
    complete(b, at->getLoc(), groups);
  }
  void complete(OpBuilder &b, Location loc, size_t groups) {
    if (groups == 0) return;
    SmallVector<Value> ready;
    for (size_t i = 0; i < groups; ++i)
      ready.append(pending[i].registers.begin(), pending[i].registers.end());
    tilenv::WgmmaWaitOp::create(b, loc, pending.size() - groups, ready);
    pending.erase(pending.begin(), pending.begin() + groups);
  }

  /// How many of the oldest pending groups `fx` needs complete: all up to
  /// the youngest group it conflicts with. `laterWrites` are shared buffers
  /// written after a barrier in `fx`.
  size_t needed(const Effects &fx, ArrayRef<Value> laterWrites) {
    if (fx.opaque) return pending.size();
    size_t groups = 0;
    for (auto [i, group] : llvm::enumerate(pending)) {
      auto conflicts = [&](Value buffer, bool write) {
        if (group.registers.contains(buffer)) return true;
        return write && isShared(buffer) && (group.unknownShared || group.shared.contains(buffer));
      };
      bool hit = llvm::any_of(fx.accesses, [&](Access a) { return conflicts(a.buffer, a.write); }) ||
                 llvm::any_of(laterWrites, [&](Value v) { return conflicts(v, true); });
      if (hit) groups = i + 1;
    }
    return groups;
  }

  void run(Block &block) {
    for (Operation &op : llvm::make_early_inc_range(block)) {
      if (auto wait = llvm::dyn_cast<tilenv::WgmmaWaitOp>(op)) {
        // Only this pass's own accounting decides; a wait for groups
        // committed outside this block stays.
        if (pending.empty() && open.registers.empty() && open.shared.empty()) continue;
        op.erase();
        continue;
      }
      if (llvm::isa<tilenv::WgmmaCommitOp>(op)) {
        pending.push_back(std::move(open));
        open = Group();
        continue;
      }
      if (op.hasTrait<OpTrait::IsTerminator>()) {
        complete(&op, pending.size());
        continue;
      }
      Effects fx = effectsOf(&op);
      // Control flow that commits gemms of its own keeps its own waits;
      // everything before it completes first.
      bool commitsInside = false;
      op.walk([&](Operation *nested) {
        commitsInside |= nested != &op && llvm::isa<tilenv::WgmmaCommitOp>(nested);
      });
      if (commitsInside) fx.opaque = true;
      SmallVector<Value> laterWrites;
      if (fx.barrier) laterWrites = sharedWritesAfter(&op);
      complete(&op, needed(fx, laterWrites));
      if (!commitsInside)
        for (Operation *wgmma : fx.wgmmas) addGemmOperands(wgmma, open);
    }
    // A block without a terminator (the kernel body) ends here.
    OpBuilder atEnd = OpBuilder::atBlockEnd(&block);
    complete(atEnd, block.getParentOp()->getLoc(), pending.size());
  }

  /// The shared buffers written by the ops after `op` in its block: after a
  /// barrier another warpgroup may reach them while ours still reads.
  static SmallVector<Value> sharedWritesAfter(Operation *op) {
    SmallVector<Value> writes;
    for (Operation *next = op->getNextNode(); next; next = next->getNextNode()) {
      Effects fx = effectsOf(next);
      for (Access a : fx.accesses)
        if (a.write && isShared(a.buffer)) writes.push_back(a.buffer);
    }
    return writes;
  }
};

struct TesselDeferWgmmaWaits : tessel::impl::TesselDeferWgmmaWaitsBase<TesselDeferWgmmaWaits> {
  void runOnOperation() override {
    getOperation()->walk([](Block *block) {
      bool hasGemm = llvm::any_of(*block, [](Operation &op) {
        return llvm::isa<tilenv::WgmmaCommitOp>(op);
      });
      if (hasGemm) Deferrer().run(*block);
    });
  }
};
} // namespace
