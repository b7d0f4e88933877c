//===- TesselFragmentWindows.cpp - windows of fragments -------------------===//
//
// A fragment lives in registers, spread over threads by its layout. A
// window of it (an epilogue that adds a quarter of an accumulator's
// columns at a time) is a subset of each thread's registers, which only
// compile-time offsets can name: registers are not indexed at run time
// (the CUDA compiler would move the whole array to local memory). This
// pass makes the offsets constants, unrolling the loops they step with,
// and gives every op that uses a window a fragment of the window's shape
// with copies in and out. The tile ops then see only whole fragments, and
// the copies, register moves inside each thread once lowered, vanish in
// the CUDA compiler's register allocation.
//
//===----------------------------------------------------------------------===//
#include "tessel/Transforms/BufferUtils.h"
#include "tessel/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/Dominance.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace tessel {
#define GEN_PASS_DEF_TESSELFRAGMENTWINDOWS
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

namespace {
/// Loops that step a window's offset are unrolled up to this trip count.
constexpr int64_t kMaxUnrolledTrips = 32;

bool isFragmentWindow(RegionOp region) {
  Value root = getRootBuffer(region.getSource());
  return root.getDefiningOp<AllocOp>() &&
         getMemorySpace(llvm::cast<MemRefType>(root.getType())) == MemorySpace::fragment;
}

/// The value of an integer computed from constants, by folding each op.
std::optional<int64_t> evaluate(Value v, int depth = 0) {
  if (std::optional<int64_t> c = getConstantIntValue(v)) return c;
  Operation *op = v.getDefiningOp();
  if (!op || depth > 32 || op->getNumRegions() || !isPure(op)) return std::nullopt;
  SmallVector<Attribute> operands;
  for (Value operand : op->getOperands()) {
    if (!operand.getType().isIntOrIndex()) return std::nullopt;
    std::optional<int64_t> c = evaluate(operand, depth + 1);
    if (!c) return std::nullopt;
    operands.push_back(IntegerAttr::get(operand.getType(), *c));
  }
  SmallVector<OpFoldResult> results;
  if (failed(op->fold(operands, results)) || results.size() != op->getNumResults())
    return std::nullopt;
  OpFoldResult r = results[llvm::cast<OpResult>(v).getResultNumber()];
  if (auto attr = llvm::dyn_cast_if_present<Attribute>(r)) {
    if (auto i = llvm::dyn_cast<IntegerAttr>(attr)) return i.getInt();
    return std::nullopt;
  }
  return evaluate(llvm::cast<Value>(r), depth + 1);
}

/// The block argument a non-constant `v` depends on (the first found).
BlockArgument runTimeSource(Value v) {
  if (auto arg = llvm::dyn_cast<BlockArgument>(v)) return arg;
  Operation *op = v.getDefiningOp();
  if (!op) return {};
  for (Value operand : op->getOperands())
    if (!evaluate(operand))
      if (BlockArgument arg = runTimeSource(operand)) return arg;
  return {};
}

class FragmentWindows {
public:
  explicit FragmentWindows(KernelOp kernel) : kernel(kernel) {}
  LogicalResult run();

private:
  /// A window of a window becomes one window of the fragment.
  void composeWindows();
  /// Unrolls the loops that window offsets step with, until every offset is
  /// a constant; an error where one cannot become one.
  LogicalResult makeOffsetsConstant();
  /// The copies in and out around each op that uses `region`.
  void giveRegisters(RegionOp region);

  KernelOp kernel;
};
} // namespace

void FragmentWindows::composeWindows() {
  SmallVector<RegionOp> outer;
  kernel.walk([&](RegionOp region) {
    if (region.getSource().getDefiningOp<RegionOp>() && isFragmentWindow(region))
      outer.push_back(region);
  });
  // Walked in pre-order: an inner window is composed before one over it.
  for (RegionOp region : outer) {
    auto inner = region.getSource().getDefiningOp<RegionOp>();
    OpBuilder b(region);
    SmallVector<unsigned> kept = *inner.getKeptDims();
    SmallVector<Value> offsets(inner.getOffsets());
    SmallVector<int64_t> sizes(inner.getSizes());
    SmallVector<bool> dropped(sizes.size(), true);
    for (unsigned d : kept) dropped[d] = false;
    SmallVector<unsigned> outerKept = *region.getKeptDims();
    for (auto [i, d] : llvm::enumerate(kept)) {
      offsets[d] = arith::AddIOp::create(b, region.getLoc(), offsets[d], region.getOffsets()[i]);
      sizes[d] = region.getSizes()[i];
      dropped[d] = !llvm::is_contained(outerKept, unsigned(i));
    }
    auto composed = RegionOp::create(b, region.getLoc(), inner.getSource(), offsets, sizes, dropped);
    region.getResult().replaceAllUsesWith(composed.getResult());
    region.erase();
    if (inner->use_empty()) inner.erase();
  }
}

LogicalResult FragmentWindows::makeOffsetsConstant() {
  while (true) {
    RegionOp pending;
    Value offset;
    kernel.walk([&](RegionOp region) {
      if (pending || !isFragmentWindow(region)) return;
      for (Value v : region.getOffsets())
        if (!evaluate(v)) {
          pending = region;
          offset = v;
          return;
        }
    });
    if (!pending) return success();
    BlockArgument source = runTimeSource(offset);
    auto loop = source ? llvm::dyn_cast<scf::ForOp>(source.getOwner()->getParentOp()) : nullptr;
    if (!loop || source != loop.getInductionVar()) {
      InFlightDiagnostic diag =
          pending.emitError("a window of a fragment needs offsets known at compile time (each "
                            "thread's registers are named, not indexed at run time); this "
                            "offset depends on ");
      if (!source) return diag << "a value computed at run time";
      Operation *owner = source.getOwner()->getParentOp();
      if (llvm::isa<KernelOp>(owner))
        return diag << "a kernel argument or block index";
      diag << "argument " << source.getArgNumber() << " of '" << owner->getName()
           << "', which is not the index of a loop of constant trip count";
      diag.attachNote(owner->getLoc()) << "defined here";
      return diag;
    }
    std::optional<APInt> trips = loop.getStaticTripCount();
    if (!trips || trips->getSExtValue() > kMaxUnrolledTrips) {
      InFlightDiagnostic diag = pending.emitError(
          "a window of a fragment needs offsets known at compile time, so the loop its offset "
          "steps with is unrolled; ");
      if (trips)
        diag << "this loop runs " << trips->getSExtValue() << " times, more than the "
             << kMaxUnrolledTrips << " unrolled copies allowed";
      else
        diag << "this loop's trip count is not a constant";
      diag.attachNote(loop.getLoc()) << "the loop";
      return diag;
    }
    if (failed(loopUnrollFull(loop)))
      return pending.emitError("the loop that steps this window's offset could not be unrolled");
  }
}

/// Whether `op` may write `buffer` (any op not known to only read it may).
static bool mayWrite(Operation *op, Value buffer) {
  if (auto copy = llvm::dyn_cast<CopyOp>(op)) return copy.getDest() == buffer;
  if (auto gemm = llvm::dyn_cast<GemmOp>(op)) return gemm.getC() == buffer;
  if (auto reduce = llvm::dyn_cast<ReduceOp>(op)) return reduce.getDest() == buffer;
  if (auto atomic = llvm::dyn_cast<AtomicAddOp>(op)) return atomic.getDest() == buffer;
  if (llvm::isa<ParallelOp>(op)) {
    bool writes = false;
    op->walk([&](Operation *nested) {
      if (nested->getNumRegions()) return;
      auto [memref, indices] = getElementAccess(nested);
      if (memref == buffer && !llvm::isa<memref::LoadOp>(nested)) writes = true;
    });
    return writes;
  }
  return true;
}

void FragmentWindows::giveRegisters(RegionOp region) {
  // The op each use belongs to: the outermost tile.parallel around it, if
  // any (its body indexes the window element by element).
  llvm::MapVector<Operation *, SmallVector<OpOperand *>> anchors;
  for (OpOperand &use : region->getUses()) {
    Operation *anchor = use.getOwner();
    for (Operation *p = anchor->getParentOp(); p && p != kernel; p = p->getParentOp())
      if (llvm::isa<ParallelOp>(p)) anchor = p;
    anchors[anchor].push_back(&use);
  }
  DominanceInfo dominance(kernel);
  SmallVector<Value> offsets;
  for (Value v : region.getOffsets()) {
    OpBuilder b(region);
    offsets.push_back(arith::ConstantIndexOp::create(b, region.getLoc(), *evaluate(v)));
  }
  auto regionType = llvm::cast<MemRefType>(region.getType());
  MemRefType windowType = getTileMemRefType(regionType.getShape(), regionType.getElementType(),
                                            MemorySpace::fragment);
  SmallVector<bool> dropped(region.getSizes().size(), true);
  SmallVector<unsigned> kept = *region.getKeptDims();
  for (unsigned d : kept) dropped[d] = false;
  for (auto &[anchor, uses] : anchors) {
    OpBuilder b(anchor);
    for (Value &v : offsets)
      if (!dominance.properlyDominates(v, anchor)) v = b.clone(*v.getDefiningOp())->getResult(0);
    Location loc = region.getLoc();
    auto window = RegionOp::create(b, loc, region.getSource(), offsets, region.getSizes(), dropped);
    Value registers = AllocOp::create(b, loc, windowType, IntegerAttr(), Attribute(), StringAttr(),
                                      IntegerAttr())
                          .getResult();
    CopyOp::create(b, loc, window.getResult(), registers);
    for (OpOperand *use : uses) use->set(registers);
    if (mayWrite(anchor, registers)) {
      b.setInsertionPointAfter(anchor);
      CopyOp::create(b, loc, registers, window.getResult());
    }
  }
  region.erase();
}

LogicalResult FragmentWindows::run() {
  composeWindows();
  if (failed(makeOffsetsConstant())) return failure();
  SmallVector<RegionOp> windows;
  kernel.walk([&](RegionOp region) {
    if (isFragmentWindow(region)) windows.push_back(region);
  });
  for (RegionOp region : windows) giveRegisters(region);
  return success();
}

namespace {
struct TesselFragmentWindows
    : tessel::impl::TesselFragmentWindowsBase<TesselFragmentWindows> {
  using Base::Base;
  void runOnOperation() override {
    if (failed(FragmentWindows(getOperation()).run())) signalPassFailure();
  }
};
} // namespace
