//===- BufferUtils.cpp - facts about tile buffers shared by passes --------===//
#include "tessel/Transforms/BufferUtils.h"
#include "tessel/Dialect/TileNV/TileNVDialect.h"

#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

Value tessel::getRootBuffer(Value buffer) {
  while (true) {
    if (auto region = buffer.getDefiningOp<RegionOp>()) buffer = region.getSource();
    else if (auto stage = buffer.getDefiningOp<StageOp>()) buffer = stage.getBuffer();
    else if (auto bound = buffer.getDefiningOp<BoundOp>()) buffer = bound.getSource();
    else if (auto alias = buffer.getDefiningOp<TmemAliasOp>()) buffer = alias.getSource();
    else return buffer;
  }
}

SmallVector<unsigned> tessel::getRootDims(Value buffer) {
  auto region = buffer.getDefiningOp<RegionOp>();
  if (!region) {
    if (auto stage = buffer.getDefiningOp<StageOp>()) return getRootDims(stage.getBuffer());
    if (auto bound = buffer.getDefiningOp<BoundOp>()) return getRootDims(bound.getSource());
    return llvm::to_vector(llvm::seq<unsigned>(0, llvm::cast<MemRefType>(buffer.getType()).getRank()));
  }
  SmallVector<unsigned> source = getRootDims(region.getSource());
  return llvm::map_to_vector(*region.getKeptDims(), [&](unsigned k) { return source[k]; });
}

BufferFootprint tessel::getFootprint(Value view) {
  BufferFootprint print;
  print.root = getRootBuffer(view);
  // Windows compose from the root outwards: collect them first.
  SmallVector<RegionOp> windows;
  bool exact = true;
  for (Value v = view; v != print.root;) {
    if (auto region = v.getDefiningOp<RegionOp>()) {
      windows.push_back(region);
      v = region.getSource();
    } else if (auto stage = v.getDefiningOp<StageOp>()) {
      print.stage = stage.getIndex();
      v = stage.getBuffer();
    } else if (auto bound = v.getDefiningOp<BoundOp>()) {
      v = bound.getSource();
    } else if (auto alias = v.getDefiningOp<TmemAliasOp>()) {
      exact = false; // another element type: boxes do not carry over
      v = alias.getSource();
    } else {
      break;
    }
  }
  auto rootType = llvm::dyn_cast<MemRefType>(print.root.getType());
  if (!exact || windows.empty() || !rootType || !rootType.hasStaticShape()) return print;
  SmallVector<int64_t> lower(rootType.getRank(), 0);
  SmallVector<int64_t> upper(rootType.getShape());
  for (RegionOp region : llvm::reverse(windows)) {
    SmallVector<unsigned> dims = getRootDims(region.getSource());
    if (dims.size() != region.getOffsets().size()) return print;
    for (auto [d, offset, size] : llvm::zip(dims, region.getOffsets(), region.getSizes())) {
      std::optional<int64_t> start = getConstantIntValue(offset);
      if (!start) return print;
      lower[d] += *start;
      upper[d] = std::min(upper[d], lower[d] + size);
    }
  }
  print.lower = std::move(lower);
  print.upper = std::move(upper);
  return print;
}

bool tessel::variesWithIteration(Value value, Operation *loop) {
  SmallVector<Value> work{value};
  DenseSet<Value> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second) continue;
    if (auto arg = llvm::dyn_cast<BlockArgument>(v)) {
      if (arg.getOwner()->getParentOp() == loop) return true;
      continue;
    }
    Operation *def = v.getDefiningOp();
    if (!loop->isAncestor(def)) continue;
    llvm::append_range(work, def->getOperands());
  }
  return false;
}

bool BufferFootprint::mayOverlap(const BufferFootprint &other) const {
  if (root != other.root) return false;
  if (stage && other.stage) {
    std::optional<int64_t> mine = getConstantIntValue(stage);
    std::optional<int64_t> theirs = getConstantIntValue(other.stage);
    if (mine && theirs && *mine != *theirs) return false;
  }
  if (lower.empty() || other.lower.empty()) return true;
  for (auto [lo, hi, otherLo, otherHi] : llvm::zip(lower, upper, other.lower, other.upper))
    if (hi <= otherLo || otherHi <= lo) return false;
  return true;
}

bool tessel::isSharedBacked(Value root) {
  auto type = llvm::dyn_cast<MemRefType>(root.getType());
  if (!type || !root.getDefiningOp<AllocOp>()) return false;
  return getMemorySpace(type) == MemorySpace::shared;
}

int64_t tessel::getElementBytes(Type t) {
  if (t.isIndex()) return 4;
  return std::max<int64_t>(1, t.getIntOrFloatBitWidth() / 8);
}

AnnotateLayoutOp tessel::getAnnotatedLayout(AllocOp alloc) {
  for (Operation *user : alloc->getUsers())
    if (auto annotate = llvm::dyn_cast<AnnotateLayoutOp>(user)) return annotate;
  return {};
}

int64_t tessel::getStorageElements(AllocOp alloc) {
  MemRefType type = alloc.getType();
  if (auto shared = llvm::dyn_cast_or_null<SharedLayoutAttr>(alloc.getLayoutAttr()))
    return shared.getLayout().getStorageElements();
  AnnotateLayoutOp annotated = getAnnotatedLayout(alloc);
  if (auto map = annotated ? llvm::dyn_cast<AffineMapAttr>(annotated.getLayout()) : nullptr) {
    // The verifier guarantees offsets grow with every index, so the last
    // element has the largest offset.
    SmallVector<int64_t> last;
    for (int64_t d : type.getShape()) last.push_back(d - 1);
    return map.getValue().compose(last)[0] + 1;
  }
  return type.getNumElements();
}

std::pair<Value, ValueRange> tessel::getElementAccess(Operation *op) {
  if (auto load = llvm::dyn_cast<memref::LoadOp>(op)) return {load.getMemRef(), load.getIndices()};
  if (auto store = llvm::dyn_cast<memref::StoreOp>(op))
    return {store.getMemRef(), store.getIndices()};
  if (auto atomic = llvm::dyn_cast<AtomicAddOp>(op);
      atomic && !llvm::isa<MemRefType>(atomic.getValue().getType()))
    return {atomic.getDest(), atomic.getIndices()};
  return {Value(), ValueRange()};
}

/// wgmma and TMA apply swizzles to absolute shared addresses: a swizzled
/// buffer (and each of its pipeline stages) starts on a 1024-byte boundary,
/// where the pattern repeats.
static int64_t sharedAlignment(AllocOp alloc) {
  auto shared = llvm::dyn_cast_or_null<SharedLayoutAttr>(alloc.getLayoutAttr());
  return shared && shared.getSwizzleBytes() ? 1024 : 128;
}

int64_t tessel::getStageBytes(AllocOp alloc) {
  int64_t bytes = getStorageElements(alloc) * getElementBytes(alloc.getType().getElementType());
  return alloc.getStages() ? (int64_t)llvm::alignTo(bytes, sharedAlignment(alloc)) : bytes;
}

int64_t tessel::planSharedMemory(KernelOp kernel,
                                 llvm::function_ref<void(AllocOp, int64_t)> place) {
  // Swizzled tiles (1024-byte aligned) first, then the rest in program
  // order: padding before a tile placed after a barrier or a vector cost up
  // to 1 KiB, which decided whether a kernel at the limit fits.
  SmallVector<AllocOp> allocs;
  kernel.walk([&](AllocOp alloc) {
    if (isSharedBacked(alloc.getResult())) allocs.push_back(alloc);
  });
  llvm::stable_sort(allocs, [](AllocOp a, AllocOp b) {
    return sharedAlignment(a) > sharedAlignment(b);
  });
  int64_t offset = 0;
  for (AllocOp alloc : allocs) {
    offset = llvm::alignTo(offset, sharedAlignment(alloc));
    if (place) place(alloc, offset);
    offset += getStageBytes(alloc) * alloc.getStages().value_or(1);
  }
  return offset;
}

int64_t tessel::getReductionScratchRegisters(ReduceOp op) {
  auto srcType = llvm::cast<MemRefType>(op.getSource().getType());
  if (getMemorySpace(srcType) != MemorySpace::fragment) return 0;
  auto srcAlloc = op.getSource().getDefiningOp<AllocOp>();
  auto dstAlloc = op.getDest().getDefiningOp<AllocOp>();
  if (!srcAlloc || !dstAlloc) return 0;
  auto layout = llvm::dyn_cast_or_null<FragmentLayoutAttr>(srcAlloc.getLayoutAttr());
  auto dstLayout = llvm::dyn_cast_or_null<FragmentLayoutAttr>(dstAlloc.getLayoutAttr());
  if (!layout || !dstLayout) return 0;
  layout::FragmentLayout l = layout.getLayout();
  uint64_t dimMask = ((uint64_t{1} << l.getDimBits(op.getDim())) - 1) << l.getDimShift(op.getDim());
  if (llvm::none_of(l.getWarp(), [&](uint64_t col) { return col & dimMask; })) return 0;
  return dstLayout.getLayout().getNumRegisters();
}

llvm::MapVector<Operation *, int64_t>
tessel::getReductionScratchGroups(KernelOp kernel, int64_t threads) {
  llvm::MapVector<Operation *, int64_t> groups;
  kernel.walk([&](ReduceOp op) {
    int64_t regs = getReductionScratchRegisters(op);
    if (!regs) return;
    RoleOp role = op->getParentOfType<RoleOp>();
    int64_t running = role ? role.getThreads() : threads;
    int64_t &floats = groups[role.getOperation()];
    floats = std::max(floats, running * regs);
  });
  return groups;
}

int64_t tessel::getReductionScratchBytes(KernelOp kernel, int64_t threads) {
  int64_t bytes = 0;
  for (auto [role, floats] : getReductionScratchGroups(kernel, threads))
    bytes = llvm::alignTo(bytes, 128) + floats * 4;
  return bytes;
}

LogicalResult tessel::verifySharedMemory(KernelOp kernel, StringRef arch, int64_t maxBytes) {
  int64_t smem = planSharedMemory(kernel);
  if (smem <= maxBytes) return success();
  InFlightDiagnostic diag = kernel.emitError("kernel needs ")
                            << smem << " bytes of shared memory; " << arch << " allows "
                            << maxBytes << " per block";
  kernel.walk([&](AllocOp alloc) {
    if (!isSharedBacked(alloc.getResult())) return;
    Diagnostic &note = diag.attachNote(alloc.getLoc());
    note << getStageBytes(alloc) * alloc.getStages().value_or(1) << " bytes for "
         << alloc.getType();
    if (alloc.getStages()) note << " x " << *alloc.getStages() << " pipeline stages";
  });
  return diag;
}

int64_t tessel::getRoleBarrierId(RoleOp role) {
  auto kernel = role->getParentOfType<KernelOp>();
  int64_t id = 0, found = 0;
  kernel.walk([&](RoleOp other) {
    ++id;
    if (other == role) found = id;
  });
  return found;
}

int64_t tessel::getExecutingThreads(Operation *op) {
  if (auto role = op->getParentOfType<RoleOp>()) return role.getThreads();
  auto kernel = llvm::dyn_cast<KernelOp>(op);
  return (kernel ? kernel : op->getParentOfType<KernelOp>()).getThreads();
}

/// The divisor c of `a - floor(a / c) * c` (a remainder written out, in
/// [0, c) for c > 0), where `v` is that.
static std::optional<int64_t> writtenOutRemainder(Value v) {
  auto sub = v.getDefiningOp<arith::SubIOp>();
  auto product = sub ? sub.getRhs().getDefiningOp<arith::MulIOp>() : nullptr;
  if (!product) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    auto quotient = product->getOperand(side).getDefiningOp<arith::FloorDivSIOp>();
    std::optional<int64_t> c = getConstantIntValue(product->getOperand(1 - side));
    if (quotient && c && *c > 0 && quotient.getLhs() == sub.getLhs() &&
        getConstantIntValue(quotient.getRhs()) == c)
      return c;
  }
  return std::nullopt;
}

/// `proved` keeps each answer, so that an index built as a DAG of shared
/// subexpressions is looked at once per value (an answer cut short by the
/// depth limit stays a conservative false).
static bool isNonNegative(Value v, function_ref<bool(Value)> known, unsigned depth,
                          DenseMap<Value, bool> &proved);

static bool isNonNegativeUncached(Value v, function_ref<bool(Value)> known, unsigned depth,
                                  DenseMap<Value, bool> &proved) {
  if (depth > 24) return false;
  if (known && known(v)) return true;
  if (std::optional<int64_t> c = getConstantIntValue(v)) return *c >= 0;
  auto nonNegative = [&](Value x) { return isNonNegative(x, known, depth + 1, proved); };
  if (auto arg = llvm::dyn_cast<BlockArgument>(v)) {
    Operation *owner = arg.getOwner()->getParentOp();
    if (llvm::isa_and_nonnull<KernelOp>(owner))
      return arg.getType().isIndex(); // a symbol or a block index
    if (llvm::isa_and_nonnull<ParallelOp>(owner)) return true;
    // Loop steps are positive: the counter never falls below its start.
    if (auto loop = llvm::dyn_cast_or_null<scf::ForOp>(owner))
      return arg == loop.getInductionVar() && nonNegative(loop.getLowerBound());
    if (auto loop = llvm::dyn_cast_or_null<PipelinedOp>(owner))
      return arg.getArgNumber() == 0 && nonNegative(loop.getLower());
    return false;
  }
  Operation *op = v.getDefiningOp();
  if (llvm::isa<tilenv::ThreadIdOp, tilenv::GridDimOp, tilenv::ClusterRankOp, NumBlocksOp,
                memref::DimOp, arith::ExtUIOp>(op))
    return true;
  // A remainder or quotient keeps the sign of its operands when both are
  // non-negative, floored or truncated alike.
  if (llvm::isa<arith::AddIOp, arith::MulIOp, arith::DivSIOp, arith::DivUIOp, arith::CeilDivSIOp,
                arith::CeilDivUIOp, arith::FloorDivSIOp, arith::RemSIOp, arith::RemUIOp,
                arith::MinSIOp, arith::OrIOp, arith::XOrIOp, arith::ShLIOp, arith::ShRSIOp,
                arith::IndexCastOp, arith::ExtSIOp>(op))
    return llvm::all_of(op->getOperands(), nonNegative);
  if (llvm::isa<arith::MaxSIOp, arith::AndIOp>(op))
    return llvm::any_of(op->getOperands(), nonNegative);
  // A logical shift right by a positive amount clears the sign bit.
  if (auto shift = llvm::dyn_cast<arith::ShRUIOp>(op)) {
    std::optional<int64_t> bits = getConstantIntValue(shift.getRhs());
    return (bits && *bits > 0) || nonNegative(shift.getLhs());
  }
  if (auto select = llvm::dyn_cast<arith::SelectOp>(op))
    return nonNegative(select.getTrueValue()) && nonNegative(select.getFalseValue());
  return writtenOutRemainder(v).has_value();
}

static bool isNonNegative(Value v, function_ref<bool(Value)> known, unsigned depth,
                          DenseMap<Value, bool> &proved) {
  if (auto it = proved.find(v); it != proved.end()) return it->second;
  bool result = isNonNegativeUncached(v, known, depth, proved);
  proved[v] = result;
  return result;
}

bool tessel::isProvablyNonNegative(Value v, function_ref<bool(Value)> known) {
  DenseMap<Value, bool> proved;
  return isNonNegative(v, known, 0, proved);
}

/// `bounds` keeps each answer (a DAG of shared subexpressions is looked at
/// once per value; an answer cut short by the depth limit stays unknown).
static std::optional<int64_t> upperBound(Value v, unsigned depth,
                                         DenseMap<Value, std::optional<int64_t>> &bounds);

static std::optional<int64_t> upperBoundUncached(Value v, unsigned depth,
                                                 DenseMap<Value, std::optional<int64_t>> &bounds) {
  constexpr int64_t kLimit = int64_t(1) << 40; // past any buffer: no use in tracking further
  if (depth > 24) return std::nullopt;
  if (std::optional<int64_t> c = getConstantIntValue(v)) return *c;
  auto bound = [&](Value x) { return upperBound(x, depth + 1, bounds); };
  auto nonNegative = [&](Value x) { return isProvablyNonNegative(x); };
  auto capped = [&](std::optional<int64_t> b) -> std::optional<int64_t> {
    if (!b || *b > kLimit) return std::nullopt;
    return b;
  };
  if (auto arg = llvm::dyn_cast<BlockArgument>(v)) {
    Operation *owner = arg.getOwner()->getParentOp();
    if (auto loop = llvm::dyn_cast_or_null<ParallelOp>(owner))
      return loop.getExtents()[arg.getArgNumber()] - 1;
    if (auto loop = llvm::dyn_cast_or_null<scf::ForOp>(owner)) {
      std::optional<int64_t> end = bound(loop.getUpperBound());
      if (arg != loop.getInductionVar() || !end) return std::nullopt;
      return *end - 1;
    }
    if (auto loop = llvm::dyn_cast_or_null<PipelinedOp>(owner)) {
      std::optional<int64_t> end = bound(loop.getUpper());
      if (arg.getArgNumber() != 0 || !end) return std::nullopt;
      return *end - 1;
    }
    return std::nullopt;
  }
  Operation *op = v.getDefiningOp();
  if (llvm::isa<tilenv::ThreadIdOp>(op)) {
    auto kernel = op->getParentOfType<KernelOp>();
    return kernel ? std::optional<int64_t>(kernel.getThreads() - 1) : std::nullopt;
  }
  // Zero-extended from a narrower integer: below 2^bits whatever it holds.
  if (llvm::isa<arith::ExtUIOp, arith::IndexCastUIOp>(op)) {
    Type from = op->getOperand(0).getType();
    if (from.isInteger() && from.getIntOrFloatBitWidth() < 40) {
      int64_t widest = (int64_t(1) << from.getIntOrFloatBitWidth()) - 1;
      std::optional<int64_t> b = bound(op->getOperand(0));
      return b && nonNegative(op->getOperand(0)) ? std::min(*b, widest) : widest;
    }
    return bound(op->getOperand(0));
  }
  if (llvm::isa<arith::IndexCastOp, arith::ExtSIOp>(op)) return bound(op->getOperand(0));
  auto operands = [&]() -> std::optional<std::pair<int64_t, int64_t>> {
    std::optional<int64_t> a = bound(op->getOperand(0)), b = bound(op->getOperand(1));
    if (!a || !b) return std::nullopt;
    return std::pair{*a, *b};
  };
  auto bothNonNegative = [&]() {
    return nonNegative(op->getOperand(0)) && nonNegative(op->getOperand(1));
  };
  if (llvm::isa<arith::AddIOp>(op))
    if (auto ab = operands()) return capped(ab->first + ab->second);
  if (auto sub = llvm::dyn_cast<arith::SubIOp>(op)) {
    if (std::optional<int64_t> c = writtenOutRemainder(v)) return *c - 1;
    // Less a non-negative value, at most what it was (a role's thread
    // index, counted from the role's first thread).
    if (nonNegative(sub.getRhs())) return bound(sub.getLhs());
  }
  if (llvm::isa<arith::MulIOp>(op) && bothNonNegative())
    if (auto ab = operands()) {
      if (ab->first > kLimit || ab->second > kLimit ||
          (ab->second && ab->first > kLimit / ab->second))
        return std::nullopt;
      return ab->first * ab->second;
    }
  // A remainder by a positive constant of a non-negative value is below it.
  if (llvm::isa<arith::RemUIOp, arith::RemSIOp>(op) && nonNegative(op->getOperand(0))) {
    std::optional<int64_t> divisor = getConstantIntValue(op->getOperand(1));
    std::optional<int64_t> a = bound(op->getOperand(0));
    if (divisor && *divisor > 0) return a ? std::min(*a, *divisor - 1) : *divisor - 1;
  }
  if (llvm::isa<arith::DivUIOp, arith::DivSIOp, arith::FloorDivSIOp>(op) &&
      nonNegative(op->getOperand(0))) {
    std::optional<int64_t> divisor = getConstantIntValue(op->getOperand(1));
    std::optional<int64_t> a = bound(op->getOperand(0));
    if (divisor && *divisor > 0 && a) return *a / *divisor;
  }
  if (llvm::isa<arith::MinSIOp, arith::MinUIOp>(op) && bothNonNegative()) {
    std::optional<int64_t> a = bound(op->getOperand(0)), b = bound(op->getOperand(1));
    if (a && b) return std::min(*a, *b);
    return a ? a : b;
  }
  if (llvm::isa<arith::MaxSIOp>(op))
    if (auto ab = operands()) return std::max(ab->first, ab->second);
  // A mask keeps at most the bits of a non-negative side: the result is at
  // most that side, whatever the other (x & -16 is at most x).
  if (llvm::isa<arith::AndIOp>(op)) {
    std::optional<int64_t> result;
    for (Value side : op->getOperands())
      if (nonNegative(side))
        if (std::optional<int64_t> b = bound(side)) result = result ? std::min(*result, *b) : *b;
    if (result) return result;
  }
  // Or and xor of non-negative values set no bit above the larger's top bit.
  if (llvm::isa<arith::OrIOp, arith::XOrIOp>(op) && bothNonNegative())
    if (auto ab = operands())
      return capped(int64_t(llvm::NextPowerOf2(uint64_t(std::max(ab->first, ab->second)))) - 1);
  if (llvm::isa<arith::ShRUIOp, arith::ShRSIOp>(op) && nonNegative(op->getOperand(0))) {
    std::optional<int64_t> shift = getConstantIntValue(op->getOperand(1));
    std::optional<int64_t> a = bound(op->getOperand(0));
    if (shift && *shift >= 0 && *shift < 63 && a) return *a >> *shift;
  }
  if (llvm::isa<arith::ShLIOp>(op) && nonNegative(op->getOperand(0))) {
    std::optional<int64_t> shift = getConstantIntValue(op->getOperand(1));
    std::optional<int64_t> a = bound(op->getOperand(0));
    if (shift && *shift >= 0 && *shift < 40 && a) return capped(*a << *shift);
  }
  if (auto select = llvm::dyn_cast<arith::SelectOp>(op)) {
    std::optional<int64_t> a = bound(select.getTrueValue()), b = bound(select.getFalseValue());
    if (a && b) return std::max(*a, *b);
  }
  return std::nullopt;
}

static std::optional<int64_t> upperBound(Value v, unsigned depth,
                                         DenseMap<Value, std::optional<int64_t>> &bounds) {
  if (auto it = bounds.find(v); it != bounds.end()) return it->second;
  std::optional<int64_t> result = upperBoundUncached(v, depth, bounds);
  bounds[v] = result;
  return result;
}

std::optional<int64_t> tessel::provableUpperBound(Value v) {
  DenseMap<Value, std::optional<int64_t>> bounds;
  return upperBound(v, 0, bounds);
}

bool tessel::isUnitStrideAlongLastDim(AffineMap map) {
  if (map.getNumResults() != 1 || map.getNumSymbols() || map.getNumDims() == 0) return false;
  bool linear = true;
  map.getResult(0).walk([&](AffineExpr e) {
    if (e.getKind() == AffineExprKind::Mod || e.getKind() == AffineExprKind::FloorDiv ||
        e.getKind() == AffineExprKind::CeilDiv)
      linear = false;
    if (auto mul = llvm::dyn_cast<AffineBinaryOpExpr>(e);
        mul && e.getKind() == AffineExprKind::Mul && !llvm::isa<AffineConstantExpr>(mul.getLHS()) &&
        !llvm::isa<AffineConstantExpr>(mul.getRHS()))
      linear = false;
  });
  if (!linear) return false;
  SmallVector<int64_t> origin(map.getNumDims(), 0), next(origin);
  next.back() = 1;
  return map.compose(next)[0] - map.compose(origin)[0] == 1;
}
