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
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace tessel {
#define GEN_PASS_DEF_TESSELFRAGMENTWINDOWS
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

namespace {
/// Loops that step windows' offsets are unrolled up to this many
/// iterations in all.
constexpr int64_t kMaxUnrolledTrips = 32;

bool isFragmentWindow(RegionOp region) {
  Value root = getRootBuffer(region.getSource());
  return root.getDefiningOp<AllocOp>() &&
         getMemorySpace(llvm::cast<MemRefType>(root.getType())) == MemorySpace::fragment;
}

/// Values already evaluated (each once, however often an expression
/// shares it).
using Known = DenseMap<Value, std::optional<int64_t>>;

/// The value of an integer computed from constants, by folding each op.
std::optional<int64_t> evaluate(Value v, Known &known, int depth = 0) {
  if (std::optional<int64_t> c = getConstantIntValue(v)) return c;
  if (auto it = known.find(v); it != known.end()) return it->second;
  Operation *op = v.getDefiningOp();
  if (!op || depth > 32 || op->getNumRegions() || !isPure(op)) return known[v] = std::nullopt;
  SmallVector<Attribute> operands;
  for (Value operand : op->getOperands()) {
    if (!operand.getType().isIntOrIndex()) return known[v] = std::nullopt;
    std::optional<int64_t> c = evaluate(operand, known, depth + 1);
    if (!c) return known[v] = std::nullopt;
    operands.push_back(IntegerAttr::get(operand.getType(), *c));
  }
  SmallVector<OpFoldResult> results;
  if (failed(op->fold(operands, results)) || results.size() != op->getNumResults())
    return known[v] = std::nullopt;
  OpFoldResult r = results[llvm::cast<OpResult>(v).getResultNumber()];
  if (auto attr = llvm::dyn_cast_if_present<Attribute>(r)) {
    auto i = llvm::dyn_cast<IntegerAttr>(attr);
    return known[v] = i ? std::optional<int64_t>(i.getInt()) : std::nullopt;
  }
  return known[v] = evaluate(llvm::cast<Value>(r), known, depth + 1);
}

/// The block argument a non-constant `v` depends on (the first found).
BlockArgument runTimeSource(Value v, Known &known) {
  if (auto arg = llvm::dyn_cast<BlockArgument>(v)) return arg;
  Operation *op = v.getDefiningOp();
  if (!op) return {};
  for (Value operand : op->getOperands())
    if (!evaluate(operand, known))
      if (BlockArgument arg = runTimeSource(operand, known)) return arg;
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
  /// The copies in and out around each op that uses the windows, one set
  /// of registers per op and window.
  LogicalResult giveRegisters(ArrayRef<RegionOp> regions);

  KernelOp kernel;
  Known known;
  /// Loop iterations unrolled so far, against kMaxUnrolledTrips in all.
  int64_t unrolled = 0;
};
} // namespace

void FragmentWindows::composeWindows() {
  SmallVector<RegionOp> outer;
  kernel.walk([&](RegionOp region) {
    if (region.getSource().getDefiningOp<RegionOp>() && isFragmentWindow(region))
      outer.push_back(region);
  });
  // Collected in program order: an inner window dominates the windows over
  // it, so it is composed (and its result replaced) first.
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
        if (!evaluate(v, known)) {
          pending = region;
          offset = v;
          return;
        }
    });
    if (!pending) return success();
    BlockArgument source = runTimeSource(offset, known);
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
    // The count as an unsigned number: a bound or step that wraps (an
    // upper bound of -1 read as 2^64 - 1) must fail the limit, not pass
    // it as a negative count and unroll without end.
    std::optional<APInt> trips = loop.getStaticTripCount();
    std::optional<int64_t> stepValue = getConstantIntValue(loop.getStep());
    if (!stepValue || *stepValue <= 0) trips.reset();
    if (!trips || trips->ugt(uint64_t(kMaxUnrolledTrips - unrolled))) {
      InFlightDiagnostic diag = pending.emitError(
          "a window of a fragment needs offsets known at compile time, so the loop its offset "
          "steps with is unrolled; ");
      if (trips)
        diag << "this loop runs " << trips->getZExtValue() << " times, and windows may unroll "
             << "at most " << kMaxUnrolledTrips << " iterations in all (" << unrolled
             << " so far)";
      else
        diag << "this loop's trip count is not a constant";
      diag.attachNote(loop.getLoc()) << "the loop";
      return diag;
    }
    unrolled += int64_t(trips->getZExtValue());
    // A loop that never runs goes whole (loopUnrollFull leaves one of zero
    // trips in place, and its window would stay pending for ever).
    if (trips->isZero()) {
      loop.replaceAllUsesWith(loop.getInitArgs());
      loop.erase();
      known.clear();
      continue;
    }
    if (failed(loopUnrollFull(loop)))
      return pending.emitError("the loop that steps this window's offset could not be unrolled");
    known.clear(); // the loop's values are gone
  }
}

/// Whether any of `uses` may write the buffer it uses (an op not known to
/// only read it may).
static bool writesThrough(ArrayRef<OpOperand *> uses) {
  for (OpOperand *use : uses) {
    Operation *op = use->getOwner();
    Value v = use->get();
    if (llvm::isa<memref::LoadOp>(op)) continue;
    if (auto copy = llvm::dyn_cast<CopyOp>(op)) {
      if (copy.getDest() == v) return true;
    } else if (auto gemm = llvm::dyn_cast<GemmOp>(op)) {
      if (gemm.getC() == v) return true;
    } else if (auto reduce = llvm::dyn_cast<ReduceOp>(op)) {
      if (reduce.getDest() == v) return true;
    } else {
      return true; // stores, fills, atomics and anything else
    }
  }
  return false;
}

namespace {
/// The uses one op (the outermost tile.parallel around them, if any)
/// makes of one window: every tile.region with the same fragment,
/// offsets and sizes counts as that window.
struct WindowUses {
  mutable RegionOp first; // op handles are not const-callable
  SmallVector<int64_t> offsets;
  SmallVector<OpOperand *> uses;
  bool same(RegionOp region, ArrayRef<int64_t> at) const {
    return region.getSource() == first.getSource() && at == ArrayRef<int64_t>(offsets) &&
           region.getSizes() == first.getSizes() && region.getType() == first.getType();
  }
  bool overlaps(const WindowUses &other) const {
    if (other.first.getSource() != first.getSource()) return false;
    ArrayRef<int64_t> sizes = first.getSizes(), otherSizes = other.first.getSizes();
    for (size_t d = 0; d < offsets.size(); ++d)
      if (offsets[d] + sizes[d] <= other.offsets[d] ||
          other.offsets[d] + otherSizes[d] <= offsets[d])
        return false;
    return true;
  }
};

Operation *anchorOf(Operation *user, KernelOp kernel) {
  Operation *anchor = user;
  for (Operation *p = user->getParentOp(); p && p != kernel; p = p->getParentOp())
    if (llvm::isa<ParallelOp>(p)) anchor = p;
  return anchor;
}
} // namespace

/// Each window gets its own registers around each op that uses it, so an
/// op that writes through one window must not see the same elements
/// through another (or through the fragment itself): the copies back
/// would overwrite each other.
static LogicalResult checkAliasing(Operation *anchor, ArrayRef<WindowUses> windows) {
  for (size_t i = 0; i < windows.size(); ++i) {
    bool written = writesThrough(windows[i].uses);
    for (size_t j = 0; j < i; ++j)
      if (windows[i].overlaps(windows[j]) && (written || writesThrough(windows[j].uses))) {
        InFlightDiagnostic diag =
            windows[i].first.emitError("this window of a fragment overlaps another used by the "
                                       "same op, and one of them is written; each window is "
                                       "registers of its own around the op, so a write through "
                                       "one is lost to the other: use one window");
        diag.attachNote(windows[j].first.getLoc()) << "the other window";
        return diag;
      }
    Value fragment = windows[i].first.getSource();
    bool direct = false, directWrite = false;
    anchor->walk([&](Operation *op) {
      for (OpOperand &operand : op->getOpOperands())
        if (operand.get() == fragment && !llvm::isa<RegionOp>(op)) {
          direct = true;
          directWrite |= writesThrough({&operand});
        }
    });
    if (direct && (written || directWrite))
      return windows[i].first.emitError(
          "this op uses a fragment both whole and through this window, and writes one of "
          "them; the window is registers of its own around the op, so the write would be "
          "lost: use the fragment, or the window, alone");
  }
  return success();
}

LogicalResult FragmentWindows::giveRegisters(ArrayRef<RegionOp> regions) {
  llvm::MapVector<Operation *, SmallVector<WindowUses>> byOp;
  for (RegionOp region : regions) {
    SmallVector<int64_t> at =
        llvm::map_to_vector(region.getOffsets(), [&](Value v) { return *evaluate(v, known); });
    for (OpOperand &use : region->getUses()) {
      SmallVector<WindowUses> &windows = byOp[anchorOf(use.getOwner(), kernel)];
      auto it = llvm::find_if(windows, [&](const WindowUses &w) { return w.same(region, at); });
      if (it == windows.end()) {
        windows.push_back({region, at, {}});
        it = std::prev(windows.end());
      }
      it->uses.push_back(&use);
    }
  }
  for (auto &[anchor, windows] : byOp) {
    if (failed(checkAliasing(anchor, windows))) return failure();
    for (WindowUses &w : windows) {
      RegionOp region = w.first;
      Location loc = region.getLoc();
      OpBuilder b(anchor);
      SmallVector<Value> offsets = llvm::map_to_vector(w.offsets, [&](int64_t v) -> Value {
        return arith::ConstantIndexOp::create(b, loc, v);
      });
      SmallVector<bool> dropped(region.getSizes().size(), true);
      SmallVector<unsigned> kept = *region.getKeptDims();
      for (unsigned d : kept) dropped[d] = false;
      auto regionType = llvm::cast<MemRefType>(region.getType());
      MemRefType registersType = getTileMemRefType(
          regionType.getShape(), regionType.getElementType(), MemorySpace::fragment);
      auto window =
          RegionOp::create(b, loc, region.getSource(), offsets, region.getSizes(), dropped);
      Value registers = AllocOp::create(b, loc, registersType, IntegerAttr(), Attribute(),
                                        StringAttr(), IntegerAttr())
                            .getResult();
      CopyOp::create(b, loc, window.getResult(), registers);
      bool written = writesThrough(w.uses);
      for (OpOperand *use : w.uses) use->set(registers);
      if (written) {
        b.setInsertionPointAfter(anchor);
        CopyOp::create(b, loc, registers, window.getResult());
      }
    }
  }
  for (RegionOp region : regions) region.erase();
  return success();
}

LogicalResult FragmentWindows::run() {
  composeWindows();
  if (failed(makeOffsetsConstant())) return failure();
  SmallVector<RegionOp> windows;
  kernel.walk([&](RegionOp region) {
    if (isFragmentWindow(region)) windows.push_back(region);
  });
  return giveRegisters(windows);
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
