//===- TesselLowerTileOps.cpp - tile ops to per-thread code ---------------===//
//
// Every thread of a block runs the kernel body. Fragments become per-thread
// register arrays laid out by their #tile.fragment: a collective op on a
// fragment becomes a fully unrolled loop over the thread's registers, with
// the logical index of register r computed as (thread part) XOR (register
// part) of the layout. Shared buffers become 1-D and are addressed through
// their #tile.shared layout (swizzle, padding) or annotated affine map.
// Operations on shared and global memory alone stay thread-strided loops
// (thread t handles elements t, t + T, ...), 16-byte vectorized where
// contiguity and alignment allow, with cp.async for global-to-shared copies
// in pipelined loops. This file has the pass and the shared helpers; each op
// family is lowered in a file of its own: copies and fills (LowerCopies.cpp),
// element loops (LowerParallel.cpp), gemm on the tensor cores
// (LowerGemm.cpp), reductions and atomics (LowerReductions.cpp), roles,
// barriers, flags, mbarriers and TMA (LowerSync.cpp).
//
//===----------------------------------------------------------------------===//
#include "TileLowering.h"
#include "TmaRules.h"
#include "tessel/Transforms/BufferUtils.h"

#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/Path.h"
#include <numeric>

namespace tessel {
#define GEN_PASS_DEF_TESSELLOWERTILEOPS
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;
using layout::FragmentLayout;
using layout::LinearMap;

//===----------------------------------------------------------------------===//
// Arithmetic helpers
//===----------------------------------------------------------------------===//

Value TileLowering::idx(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
Value TileLowering::add(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
Value TileLowering::mul(Value x, Value y) { return arith::MulIOp::create(b, loc, x, y); }
Value TileLowering::lt(Value x, Value y) {
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, x, y);
}
Value TileLowering::eq(Value x, Value y) {
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, x, y);
}
/// Conjunction where a null value means "always true".
Value TileLowering::andI(Value x, Value y) {
  if (!x || !y) return x ? x : y;
  return arith::AndIOp::create(b, loc, x, y);
}
Value TileLowering::xorI(Value x, Value y) { return arith::XOrIOp::create(b, loc, x, y); }
Value TileLowering::shr(Value x, int64_t bits) {
  return bits ? arith::ShRUIOp::create(b, loc, x, idx(bits)).getResult() : x;
}
Value TileLowering::bit(Value x, unsigned position) {
  return arith::AndIOp::create(b, loc, shr(x, position), idx(1));
}
Value TileLowering::divC(Value x, int64_t c) {
  if (c == 1) return x;
  if (llvm::isPowerOf2_64(c)) return shr(x, llvm::Log2_64(c));
  return arith::DivUIOp::create(b, loc, x, idx(c));
}
Value TileLowering::remC(Value x, int64_t c) {
  if (llvm::isPowerOf2_64(c)) return arith::AndIOp::create(b, loc, x, idx(c - 1));
  return arith::RemUIOp::create(b, loc, x, idx(c));
}

Value TileLowering::convert(Value v, Type to) {
  Type from = v.getType();
  if (from == to) return v;
  auto fFrom = llvm::dyn_cast<FloatType>(from), fTo = llvm::dyn_cast<FloatType>(to);
  if (fFrom && fTo) {
    if (fFrom.getWidth() < fTo.getWidth()) return arith::ExtFOp::create(b, loc, to, v);
    if (fFrom.getWidth() > fTo.getWidth()) return arith::TruncFOp::create(b, loc, to, v);
    // f16 <-> bf16: through f32.
    Value wide = arith::ExtFOp::create(b, loc, b.getF32Type(), v);
    return arith::TruncFOp::create(b, loc, to, wide);
  }
  if (fTo) return arith::SIToFPOp::create(b, loc, to, v);
  if (fFrom) return arith::FPToSIOp::create(b, loc, to, v);
  if (from.isIndex() || to.isIndex()) return arith::IndexCastOp::create(b, loc, to, v);
  if (from.getIntOrFloatBitWidth() < to.getIntOrFloatBitWidth())
    return arith::ExtSIOp::create(b, loc, to, v);
  return arith::TruncIOp::create(b, loc, to, v);
}

void TileLowering::unrolledFor(int64_t count, function_ref<void(Value)> body) {
  if (count == 1) return body(zeroIdx);
  auto loop = scf::ForOp::create(b, loc, zeroIdx, idx(count), idx(1));
  loop->setAttr("tessel.unroll", b.getUnitAttr());
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(loop.getBody());
  body(loop.getInductionVar());
}

void TileLowering::guard(Value cond) {
  if (!cond) return;
  auto ifOp = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/false);
  b.setInsertionPointToStart(ifOp.thenBlock());
}

void TileLowering::fail(Operation *op, const Twine &message) {
  op->emitError(message);
  failure = mlir::failure();
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

Access TileLowering::resolve(Value buffer) {
  Access a;
  auto tileType = llvm::cast<MemRefType>(buffer.getType());
  a.tileShape = tileType.getShape();
  a.elementType = tileType.getElementType();
  Value root = buffer;
  SmallVector<RegionOp> regions; // innermost window first
  while (auto region = root.getDefiningOp<RegionOp>()) {
    regions.push_back(region);
    root = region.getSource();
  }
  // A pipeline stage, whole or windowed (a load into a window of a staged
  // tile): the stage's copy starts stageBase elements on, and the windows
  // index within it.
  if (auto stage = root.getDefiningOp<StageOp>()) {
    auto alloc = stage.getBuffer().getDefiningOp<AllocOp>();
    int64_t stageElements = getStageBytes(alloc) / getElementBytes(a.elementType);
    a.stageBase = mul(stage.getIndex(), idx(stageElements));
    root = stage.getBuffer();
  }
  if (auto bound = root.getDefiningOp<BoundOp>()) {
    a.limits.assign(bound.getLimits().begin(), bound.getLimits().end());
    root = bound.getSource();
  }
  auto rootType = llvm::cast<MemRefType>(root.getType());
  // Compose the windows from the root outwards: each one's offsets land on
  // the root dimensions its source dimensions walk.
  SmallVector<unsigned> dims = llvm::to_vector(llvm::seq<unsigned>(0, rootType.getRank()));
  a.offsets.assign(rootType.getRank(), zeroIdx);
  a.windowShape.assign(rootType.getShape().begin(), rootType.getShape().end());
  for (RegionOp region : llvm::reverse(regions)) {
    for (auto [d, off] : llvm::enumerate(region.getOffsets())) {
      Value &acc = a.offsets[dims[d]];
      acc = acc == zeroIdx ? off : add(acc, off);
      a.windowShape[dims[d]] = region.getSizes()[d];
    }
    SmallVector<unsigned> kept = *region.getKeptDims();
    dims = llvm::map_to_vector(kept, [&](unsigned k) { return dims[k]; });
  }
  a.rootDims = dims;
  a.rootShape.assign(rootType.getShape().begin(), rootType.getShape().end());
  a.space = getMemorySpace(rootType);
  a.root = root;
  // Vectors run along the tile's last dimension: contiguous only when that
  // is the root's last dimension too.
  a.vectorizable = a.rootDims.empty() || a.rootDims.back() + 1 == a.rootShape.size();
  if (!a.isGlobal()) {
    auto it = storage.find(root);
    assert(it != storage.end() && "allocation lowered before its uses");
    a.root = it->second.first;
    a.layout = it->second.second;
    // Swizzles move whole 16-byte chunks and padding whole rows; an affine
    // map keeps vectors only where it is linear with stride 1 along the last
    // dimension (padded rows); alignment is checked per vector.
    if (auto map = llvm::dyn_cast_or_null<AffineMapAttr>(a.layout))
      a.vectorizable = a.vectorizable && isUnitStrideAlongLastDim(map.getValue());
  }
  return a;
}

SmallVector<Value> TileLowering::rootIndices(const Access &a, ValueRange tileIdx) {
  SmallVector<Value> out(a.offsets);
  for (auto [d, i] : llvm::zip(a.rootDims, tileIdx)) out[d] = add(out[d], i);
  return out;
}

Value TileLowering::physicalIndex(const Access &a, ValueRange logical) {
  Value index = layoutIndex(a, logical);
  return a.stageBase ? add(a.stageBase, index) : index;
}

Value TileLowering::sharedAddress(const Access &a, Value elements) {
  Type i32 = b.getI32Type();
  if (a.stageBase) elements = add(a.stageBase, elements);
  Value bytes = arith::IndexCastOp::create(b, loc, i32,
                                           mul(elements, idx(getElementBytes(a.elementType))));
  Value base = tilenv::SmemAddressOp::create(b, loc, i32, a.root);
  return arith::AddIOp::create(b, loc, base, bytes);
}

Value TileLowering::layoutIndex(const Access &a, ValueRange logical) {
  if (auto shared = llvm::dyn_cast_or_null<SharedLayoutAttr>(a.layout)) {
    layout::SharedLayout l = shared.getLayout();
    Value row = zeroIdx;
    for (unsigned d = 0; d + 1 < logical.size(); ++d)
      row = d ? add(mul(row, idx(l.getShape()[d])), logical[d]) : logical[d];
    Value col = logical.back();
    if (!l.getSwizzleBytes()) return add(mul(row, idx(l.getCols() + l.getPad())), col);
    int64_t w = l.getPanelWidth(), eb = l.getElementBytes();
    Value linear = add(mul(add(mul(divC(col, w), idx(l.getRows())), row), idx(w)), remC(col, w));
    // Chunk bits [4, 4+n) ^= bits [7, 7+n) of the byte offset, in elements.
    int64_t chunkMask = l.getSwizzleBytes() / 16 - 1;
    Value rowBits = arith::AndIOp::create(b, loc, shr(linear, llvm::Log2_64(128 / eb)), idx(chunkMask));
    Value flip = arith::ShLIOp::create(b, loc, rowBits, idx(llvm::Log2_64(16 / eb)));
    return xorI(linear, flip);
  }
  if (auto map = llvm::dyn_cast_or_null<AffineMapAttr>(a.layout)) {
    std::function<Value(AffineExpr)> eval = [&](AffineExpr e) -> Value {
      if (auto c = llvm::dyn_cast<AffineConstantExpr>(e)) return idx(c.getValue());
      if (auto d = llvm::dyn_cast<AffineDimExpr>(e)) return logical[d.getPosition()];
      auto bin = llvm::cast<AffineBinaryOpExpr>(e);
      Value l = eval(bin.getLHS()), r = eval(bin.getRHS());
      switch (e.getKind()) {
      case AffineExprKind::Add: return add(l, r);
      case AffineExprKind::Mul: return mul(l, r);
      case AffineExprKind::Mod: return arith::RemUIOp::create(b, loc, l, r);
      case AffineExprKind::FloorDiv: return arith::DivUIOp::create(b, loc, l, r);
      default: return arith::CeilDivUIOp::create(b, loc, l, r);
      }
    };
    return eval(map.getValue().getResult(0));
  }
  // Row-major (local buffers).
  Value linear = logical[0];
  for (unsigned d = 1; d < logical.size(); ++d)
    linear = add(mul(linear, idx(a.rootShape[d])), logical[d]);
  return linear;
}

/// True where the whole element (and `innerExtra` more along the innermost
/// dimension) lies inside a global root; null when that is always so.
Value TileLowering::inBounds(const Access &a, ValueRange rootIdx, int64_t innerExtra,
                             bool userIndices) {
  if (!a.isGlobal()) return userIndices ? insideBuffer(a, rootIdx) : Value();
  // A role's thread index counts from its first thread.
  auto isRoleThreadId = [&](Value v) {
    return llvm::any_of(roleThreadIds, [&](const auto &role) { return role.second == v; });
  };
  Value cond;
  for (auto [d, i] : llvm::enumerate(rootIdx)) {
    int64_t extent = a.windowShape[d];
    int64_t dim = a.rootShape[d];
    // A window may start before the tensor (a convolution's halo before
    // its first row): elements there read 0 and drop writes, as past the
    // end. A vector's first element decides for all of it.
    if (!isProvablyNonNegative(i, isRoleThreadId))
      cond = andI(cond, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, i, zeroIdx));
    Value last = d == a.rootDims.back() && innerExtra ? add(i, idx(innerExtra)) : i;
    if (!a.limits.empty()) cond = andI(cond, lt(last, a.limits[d]));
    std::optional<int64_t> off = getConstantIntValue(a.offsets[d]);
    // A window inside a tensor of static extent needs no check where the
    // index stays inside the window: the compiler's always do; element
    // code's must be bounded (a stencil's i + 1 at the last row is not).
    if (!ShapedType::isDynamic(dim) && off && *off + extent <= dim) {
      std::optional<int64_t> largest = userIndices ? provableUpperBound(last) : std::nullopt;
      if (!userIndices || (largest && *largest < dim)) continue;
    }
    Value bound = ShapedType::isDynamic(dim)
                      ? memref::DimOp::create(b, loc, a.root, d).getResult()
                      : idx(dim);
    cond = andI(cond, lt(last, bound));
  }
  return cond;
}

/// True where element code's indices lie inside a shared or local buffer,
/// null where that is provable: an index read from memory may point past
/// it, into another buffer's shared memory or past the block's.
Value TileLowering::insideBuffer(const Access &a, ValueRange rootIdx) {
  if (a.space != MemorySpace::shared && a.space != MemorySpace::local) return {};
  Value cond;
  for (auto [d, i] : llvm::enumerate(rootIdx)) {
    int64_t dim = a.rootShape[d];
    if (ShapedType::isDynamic(dim)) continue;
    if (!isProvablyNonNegative(i))
      cond = andI(cond, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, i, zeroIdx));
    std::optional<int64_t> largest = provableUpperBound(i);
    if (!largest || *largest >= dim) cond = andI(cond, lt(i, idx(dim)));
  }
  return cond;
}

void TileLowering::checkWindowOffsets() {
  kernel.walk([&](RegionOp region) {
    auto type = llvm::cast<MemRefType>(region.getSource().getType());
    MemorySpace space = getMemorySpace(type);
    if (space != MemorySpace::shared && space != MemorySpace::local) return;
    for (auto [d, offset] : llvm::enumerate(region.getOffsets())) {
      int64_t dim = type.getDimSize(d), last = dim - region.getSizes()[d];
      if (ShapedType::isDynamic(dim) || getConstantIntValue(offset)) continue; // the verifier's
      bool from = isProvablyNonNegative(offset);
      std::optional<int64_t> largest = provableUpperBound(offset);
      if (from && largest && *largest <= last) continue;
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointAfter(region);
      Location at = region.getLoc();
      Value inside = arith::CmpIOp::create(b, at, arith::CmpIPredicate::sle, offset, idx(last));
      if (!from)
        inside = andI(inside, arith::CmpIOp::create(b, at, arith::CmpIPredicate::sge, offset, zeroIdx));
      std::string where;
      if (auto file = llvm::dyn_cast<FileLineColLoc>(at))
        where = (llvm::sys::path::filename(file.getFilename().getValue()) + ":" +
                 Twine(file.getLine()) + ": ")
                    .str();
      // The report holds 95 characters: the place first.
      tilenv::TrapUnlessOp::create(b, at, inside, offset, idx(last),
                                   b.getStringAttr(where + "a " +
                                                   (space == MemorySpace::shared ? "shared" : "local") +
                                                   " window leaves its buffer in dim " +
                                                   Twine(d).str() + " (offset, last start)"));
    }
  });
}

/// A `vector`-element access starting at rootIdx is aligned to its size.
Value TileLowering::aligned(const Access &a, ArrayRef<Value> rootIdx, int64_t vector) {
  // Global roots are row-major and their base pointers are checked at launch
  // to be 16-byte aligned; shared buffers are 128-byte aligned.
  Value linear;
  if (a.isGlobal()) {
    linear = rootIdx[0];
    for (size_t d = 1; d < rootIdx.size(); ++d) {
      Value dim = ShapedType::isDynamic(a.rootShape[d])
                      ? memref::DimOp::create(b, loc, a.root, d).getResult()
                      : idx(a.rootShape[d]);
      linear = add(mul(linear, dim), rootIdx[d]);
    }
  } else {
    linear = physicalIndex(a, rootIdx);
  }
  return eq(remC(linear, vector), zeroIdx);
}

SmallVector<Value> TileLowering::operandIndices(const Access &a, ArrayRef<Value> rootIdx) {
  if (a.isGlobal()) return SmallVector<Value>(rootIdx);
  return {physicalIndex(a, rootIdx)};
}

Value TileLowering::load(const Access &a, ValueRange tileIdx, bool userIndices) {
  SmallVector<Value> rootIdx = rootIndices(a, tileIdx);
  auto emitLoad = [&]() -> Value {
    return memref::LoadOp::create(b, loc, a.root, operandIndices(a, rootIdx));
  };
  Value cond = inBounds(a, rootIdx, 0, userIndices);
  if (!cond) return emitLoad();
  auto ifOp = scf::IfOp::create(
      b, loc, cond,
      [&](OpBuilder &, Location) { scf::YieldOp::create(b, loc, emitLoad()); },
      [&](OpBuilder &, Location) {
        // arith's constants are signless: a u8's zero is the i8 zero's bits.
        Type signless = a.elementType.isUnsignedInteger()
                            ? b.getIntegerType(a.elementType.getIntOrFloatBitWidth())
                            : a.elementType;
        Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(signless));
        if (signless != a.elementType)
          zero = UnrealizedConversionCastOp::create(b, loc, a.elementType, zero).getResult(0);
        scf::YieldOp::create(b, loc, zero);
      });
  return ifOp.getResult(0);
}

void TileLowering::store(const Access &a, ValueRange tileIdx, Value value, bool userIndices) {
  SmallVector<Value> rootIdx = rootIndices(a, tileIdx);
  OpBuilder::InsertionGuard g(b);
  guard(inBounds(a, rootIdx, 0, userIndices));
  memref::StoreOp::create(b, loc, value, a.root, operandIndices(a, rootIdx));
}

Value TileLowering::allocLocal(int64_t elements, Type type) {
  return AllocOp::create(b, loc, getTileMemRefType({elements}, type, MemorySpace::local),
                         IntegerAttr(), Attribute(), StringAttr(), IntegerAttr());
}

SmallVector<Value> TileLowering::delinearize(Value linear, ArrayRef<int64_t> shape) {
  SmallVector<Value> out(shape.size());
  for (int64_t d = shape.size() - 1; d >= 0; --d) {
    if (d == 0) {
      out[d] = linear;
      break;
    }
    out[d] = remC(linear, shape[d]);
    linear = divC(linear, shape[d]);
  }
  return out;
}

/// Thread-strided loop over a static shape; with `vector` > 1 each iteration
/// covers `vector` consecutive elements of the innermost dimension and the
/// body receives the index of the first.
void TileLowering::forEachElement(ArrayRef<int64_t> shape, int64_t vector,
                                  function_ref<void(ArrayRef<Value>)> body) {
  SmallVector<int64_t> iterShape(shape);
  iterShape.back() /= vector;
  int64_t count = std::accumulate(iterShape.begin(), iterShape.end(), int64_t{1},
                                  std::multiplies<int64_t>());
  auto loop = scf::ForOp::create(b, loc, threadId, idx(count), numThreads);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  SmallVector<Value> index = delinearize(loop.getInductionVar(), iterShape);
  if (vector > 1) index.back() = mul(index.back(), idx(vector));
  body(index);
}

//===----------------------------------------------------------------------===//
// Fragments
//===----------------------------------------------------------------------===//

ArrayRef<Value> TileLowering::threadCoords(FragmentLayoutAttr attr) {
  auto it = threadCoordCache.find(attr);
  if (it != threadCoordCache.end()) return it->second;
  FragmentLayout l = attr.getLayout();
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointAfter(zeroIdx.getDefiningOp());
  SmallVector<Value> coords;
  SmallVector<uint64_t> cols(l.getLane().begin(), l.getLane().end());
  cols.append(l.getWarp().begin(), l.getWarp().end());
  for (unsigned d = 0; d < l.getRank(); ++d) {
    // Each thread bit adds its column's part of dimension d; the parts of
    // distinct bits XOR together.
    Value value = zeroIdx;
    for (auto [i, col] : llvm::enumerate(cols)) {
      int64_t part = l.unpack(col)[d];
      if (part) value = xorI(value, mul(bit(threadId, i), idx(part)));
    }
    coords.push_back(value);
  }
  return threadCoordCache[attr] = coords;
}

SmallVector<Value> TileLowering::coordsAt(FragmentLayoutAttr attr, Value r) {
  FragmentLayout l = attr.getLayout();
  SmallVector<Value> coords(threadCoords(attr));
  std::optional<int64_t> constant = getConstantIntValue(r);
  for (unsigned d = 0; d < l.getRank(); ++d) {
    if (constant) {
      if (int64_t part = l.unpack(l.registerPart(*constant))[d]) coords[d] = xorI(coords[d], idx(part));
      continue;
    }
    for (auto [i, col] : llvm::enumerate(l.getReg()))
      if (int64_t part = l.unpack(col)[d]) coords[d] = xorI(coords[d], mul(bit(r, i), idx(part)));
  }
  return coords;
}

uint64_t TileLowering::paddedDimsReached(FragmentLayoutAttr attr) {
  auto key = std::make_pair(Attribute(attr), threads);
  auto it = paddedDimsCache.find(key);
  if (it != paddedDimsCache.end()) return it->second;
  FragmentLayout l = attr.getLayout();
  uint64_t reached = 0;
  int64_t count = std::min<int64_t>(threads, l.getNumThreads());
  for (int64_t t = 0; t < count; ++t)
    for (int64_t r = 0; r < l.getNumRegisters(); ++r) {
      SmallVector<int64_t> coord = l.apply(r, t);
      for (unsigned d = 0; d < l.getRank(); ++d)
        if (coord[d] >= l.getShape()[d]) reached |= uint64_t{1} << d;
    }
  return paddedDimsCache[key] = reached;
}

Value TileLowering::insideShape(ArrayRef<Value> coords, ArrayRef<int64_t> shape,
                                FragmentLayoutAttr layout) {
  uint64_t checked = layout ? paddedDimsReached(layout) : ~uint64_t{0};
  Value cond;
  for (auto [d, entry] : llvm::enumerate(llvm::zip(coords, shape))) {
    auto [c, extent] = entry;
    if (!llvm::isPowerOf2_64(extent) && (checked >> d & 1)) cond = andI(cond, lt(c, idx(extent)));
  }
  return cond;
}

/// Input bits whose columns depend on earlier ones: replicas.
static uint64_t replicaBits(const FragmentLayout &l) {
  LinearMap map = l.getMap();
  uint64_t mask = 0;
  unsigned rank = 0;
  for (unsigned i = 0; i < map.getInBits(); ++i) {
    unsigned next = LinearMap(map.getOutBits(), map.getColumns().take_front(i + 1)).rank();
    if (next == rank) mask |= 1ull << i;
    rank = next;
  }
  return mask;
}

Value TileLowering::threadOwns(const FragmentLayout &l) {
  uint64_t mask = replicaBits(l) >> l.getReg().size();
  if (!mask) return {};
  return eq(arith::AndIOp::create(b, loc, threadId, idx(mask)), zeroIdx);
}

Value TileLowering::registerOwns(const FragmentLayout &l, Value r) {
  uint64_t mask = replicaBits(l) & (l.getNumRegisters() - 1);
  if (!mask) return {};
  return eq(arith::AndIOp::create(b, loc, r, idx(mask)), zeroIdx);
}

Value TileLowering::applyMap(const LinearMap &map, Value input) {
  if (std::optional<int64_t> c = getConstantIntValue(input))
    return idx(map.apply(*c));
  Value out = zeroIdx;
  for (auto [i, col] : llvm::enumerate(map.getColumns()))
    if (col) out = xorI(out, mul(bit(input, i), idx(col)));
  return out;
}

int64_t TileLowering::vectorRegisters(const FragmentLayout &l, Type memType) {
  // Registers 0..v-1 of a group hold consecutive elements of the last
  // dimension and no other column touches those index bits.
  int64_t v = l.getContiguousRegisters();
  v = std::min<int64_t>(v, 16 / getElementBytes(memType));
  auto touchesLowBits = [&](int64_t vec) {
    SmallVector<uint64_t> others(l.getReg().drop_front(llvm::Log2_64(vec)));
    others.append(l.getLane().begin(), l.getLane().end());
    others.append(l.getWarp().begin(), l.getWarp().end());
    return llvm::any_of(others, [&](uint64_t c) { return c & uint64_t(vec - 1); });
  };
  while (v > 1 && touchesLowBits(v)) v /= 2;
  if (v * getElementBytes(memType) < 4) return 1;
  return v;
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

LogicalResult TileLowering::run() {
  threads = blockThreads = kernel.getThreads();
  Block &entry = kernel.getBodyBlock();
  b.setInsertionPointToStart(&entry);
  threadId = blockThreadId = tilenv::ThreadIdOp::create(b, loc, b.getIndexType());
  numThreads = idx(threads);
  zeroIdx = idx(0);

  checkWindowOffsets();
  markTensorElementAccesses();
  createReduceScratch();
  // Scratch added here counts against the limit too.
  if (mlir::failed(verifySharedMemory(kernel, target.arch, target.maxSharedBytes)))
    return mlir::failure();

  if (mlir::failed(prepareTensorMemory())) return mlir::failure();
  if (mlir::failed(lowerStorage())) return mlir::failure();
  allocateTensorMemory();

  if (mlir::failed(lowerCollectiveOps())) return mlir::failure();
  // exp2s outside element loops over fragments have no register to choose by.
  kernel.walk([&](Exp2Op op) { lowerExp2(op, Value()); });
  kernel.walk([&](NumBlocksOp op) {
    b.setInsertionPoint(op);
    op.replaceAllUsesWith(tilenv::GridDimOp::create(b, op.getLoc(), b.getIndexType()).getResult());
    op.erase();
  });
  // No block of a cluster leaves while a peer may still multicast into its
  // shared memory or arrive on its barriers.
  if (kernel.getClusterSize() > 1) {
    b.setInsertionPointToEnd(&kernel.getBodyBlock());
    tilenv::ClusterBarrierOp::create(b, kernel.getLoc());
  }

  lowerElementAccesses();
  if (mlir::failed(eraseLogicalBuffers())) return mlir::failure();
  return failure;
}

void TileLowering::createReduceScratch() {
  // Reductions across warps need shared scratch; those that stay inside
  // each warp (rows owned by one warp) do not. One buffer per group of
  // threads that reduces, sized by that group (a producer warpgroup never
  // reduces) and shared by its reductions (getReductionScratchGroups).
  llvm::DenseMap<Operation *, Value> bufferOf;
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointAfter(threadId.getDefiningOp());
  for (auto [role, floats] : getReductionScratchGroups(kernel, threads))
    bufferOf[role] = AllocOp::create(
        b, kernel.getLoc(), getTileMemRefType({floats}, b.getF32Type(), MemorySpace::shared),
        IntegerAttr(), Attribute(), b.getStringAttr("reduction_scratch"), IntegerAttr());
  kernel.walk([&](ReduceOp op) {
    if (getReductionScratchRegisters(op))
      reduceScratch[op] = bufferOf.lookup(op->getParentOfType<RoleOp>().getOperation());
  });
}

LogicalResult TileLowering::lowerStorage() {
  // Storage: shared buffers in dynamic shared memory, fragments and local
  // buffers per thread; all 1-D, addressed through their layout. The
  // allocations are listed before shared memory's lowered ones join them.
  SmallVector<AllocOp> allocs;
  kernel.walk([&](AllocOp alloc) { allocs.push_back(alloc); });
  DenseSet<Operation *> scratch;
  for (auto &[op, value] : reduceScratch) scratch.insert(value.getDefiningOp());
  int64_t smem = lowerSharedBuffers(scratch);
  if (mlir::failed(lowerRegisterBuffers(allocs))) return mlir::failure();
  // Erased only now: lowerRegisterBuffers looks at every op in `allocs`,
  // the scratch buffers among them.
  for (Operation *op : scratch) op->erase();
  // The tensor-memory emulation keeps the block's allocation record in the
  // last 16 bytes of dynamic shared memory (tessel_tcgen05_emu.h): static
  // shared memory would push the 1024-byte aligned dynamic region 1 KiB on.
  if (target.emulatesTcgen05 && tmemBaseWord) smem = llvm::alignTo(smem, 16) + kEmulationRecordBytes;
  kernel.setSmemBytesAttr(b.getI64IntegerAttr(smem));
  return mlir::success();
}

int64_t TileLowering::lowerSharedBuffers(const DenseSet<Operation *> &scratch) {
  // A reduction's scratch buffer is placed like the others, but its
  // reduction finds the lowered buffer in reduceScratch, not in storage.
  int64_t smem = planSharedMemory(kernel, [&](AllocOp alloc, int64_t offset) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(alloc);
    MemRefType type = alloc.getType();
    auto lowered = AllocOp::create(
        b, alloc.getLoc(),
        getTileMemRefType({getStorageElements(alloc)}, type.getElementType(), MemorySpace::shared),
        b.getI64IntegerAttr(offset), Attribute(), alloc.getNameAttr(), IntegerAttr());
    if (scratch.contains(alloc)) {
      for (auto &[op, value] : reduceScratch)
        if (value == alloc.getResult()) value = lowered;
      return;
    }
    Attribute layout = alloc.getLayoutAttr();
    if (AnnotateLayoutOp annotated = getAnnotatedLayout(alloc))
      layout = annotated.getLayout();
    if (!layout)
      layout = SharedLayoutAttr::get(b.getContext(),
                                     layout::SharedLayout(type.getShape(),
                                                          getElementBytes(type.getElementType()), 0, 0));
    storage[alloc.getResult()] = {lowered.getResult(), layout};
  });
  return smem;
}

LogicalResult TileLowering::lowerRegisterBuffers(ArrayRef<AllocOp> allocs) {
  for (AllocOp alloc : allocs) {
    MemRefType type = alloc.getType();
    MemorySpace space = getMemorySpace(type);
    if (space != MemorySpace::fragment && space != MemorySpace::local) continue;
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(alloc);
    auto layout = llvm::dyn_cast_or_null<FragmentLayoutAttr>(alloc.getLayoutAttr());
    if (space == MemorySpace::fragment && !layout)
      return alloc.emitError("fragment has no layout; run tessel-layout-inference first");
    int64_t elements = layout ? layout.getLayout().getNumRegisters() : type.getNumElements();
    auto lowered = AllocOp::create(
        b, alloc.getLoc(), getTileMemRefType({elements}, type.getElementType(), MemorySpace::local),
        IntegerAttr(), Attribute(), alloc.getNameAttr(), IntegerAttr());
    storage[alloc.getResult()] = {lowered.getResult(), layout};
  }
  return mlir::success();
}

LogicalResult TileLowering::lowerCollectiveOps() {
  // Collective ops, outermost first so that a loop's body is moved before its
  // ops are lowered in their new place.
  SmallVector<Operation *> work;
  kernel.walk<WalkOrder::PreOrder>([&](Operation *op) {
    if (llvm::isa<CopyOp, FillOp, GemmOp, ReduceOp, AtomicAddOp, ParallelOp, PipelinedOp,
                  BarrierOp, RoleOp, CopyAsyncOp, MbarrierInitOp, MbarrierArriveOp,
                  MbarrierExpectTxOp, MbarrierWaitOp, FenceProxyAsyncOp, FenceMbarrierInitOp,
                  CpAsyncCommitOp, CpAsyncWaitOp, SignalOp, WaitOp, MmaCommitOp, MmaWaitOp>(op))
      work.push_back(op);
  });
  decidePacking();
  // Where each op sits is recorded before any is lowered: lowering moves
  // role and parallel bodies out of their ops.
  DenseSet<Operation *> inParallel;
  for (Operation *op : work) {
    if (auto role = op->getParentOfType<RoleOp>()) roleOf[op] = role;
    if (op->getParentOfType<ParallelOp>()) inParallel.insert(op);
  }
  for (Operation *op : work) {
    b.setInsertionPoint(op);
    loc = op->getLoc();
    enterRoleOf(op);
    lowerCollectiveOp(op, inParallel.contains(op));
    if (mlir::failed(failure)) return mlir::failure();
  }
  for (Operation *op : llvm::reverse(work)) op->erase();
  return mlir::success();
}

void TileLowering::lowerCollectiveOp(Operation *op, bool insideParallel) {
  llvm::TypeSwitch<Operation *>(op)
      .Case([&](CopyOp o) { lowerCopy(o); })
      .Case([&](FillOp o) { lowerFill(o); })
      .Case([&](GemmOp o) { lowerGemm(o); })
      .Case([&](ReduceOp o) { lowerReduce(o); })
      .Case([&](AtomicAddOp o) { lowerAtomicAdd(o, insideParallel); })
      .Case([&](ParallelOp o) { lowerParallel(o); })
      .Case([&](PipelinedOp o) { lowerPipelined(o); })
      .Case([&](BarrierOp o) {
        if (o.getId()) tilenv::NamedBarrierOp::create(b, loc, *o.getId(), *o.getThreads());
        else tilenv::SyncThreadsOp::create(b, loc);
      })
      .Case([&](RoleOp o) { lowerRole(o); })
      .Case([&](CopyAsyncOp o) { lowerCopyAsync(o); })
      .Case<MbarrierInitOp, MbarrierArriveOp, MbarrierExpectTxOp, MbarrierWaitOp>(
          [&](Operation *o) { lowerMbarrier(o); })
      .Case([&](FenceProxyAsyncOp) { tilenv::FenceProxyAsyncOp::create(b, loc); })
      .Case([&](CpAsyncCommitOp) { tilenv::CpAsyncCommitOp::create(b, loc); })
      .Case([&](CpAsyncWaitOp o) {
        tilenv::CpAsyncWaitOp::create(b, loc, b.getI64IntegerAttr(o.getPending()));
      })
      .Case([&](FenceMbarrierInitOp o) { fenceMbarrierInits(o); })
      .Case<SignalOp, WaitOp>([&](Operation *o) { lowerFlag(o); })
      .Case([&](MmaCommitOp o) { lowerMmaCommit(o); })
      .Case([&](MmaWaitOp o) { completeMmas(o); });
}

void TileLowering::markTensorElementAccesses() {
  // Marked before the collective ops lower: their own loads and stores of
  // kernel tensors carry the copy's checks already, while element code's
  // (and its clones, unrolled per register) get them in
  // lowerElementAccesses.
  auto isKernelTensor = [&](Value m) {
    auto arg = llvm::dyn_cast<BlockArgument>(m);
    return arg && arg.getOwner()->getParentOp() == kernel.getOperation() &&
           getMemorySpace(llvm::cast<MemRefType>(m.getType())) == MemorySpace::global;
  };
  kernel.walk([&](Operation *op) {
    auto l = llvm::dyn_cast<memref::LoadOp>(op);
    auto s = llvm::dyn_cast<memref::StoreOp>(op);
    if ((l && isKernelTensor(l.getMemRef())) || (s && isKernelTensor(s.getMemRef())))
      op->setAttr(kTensorElementAccess, UnitAttr::get(op->getContext()));
  });
}

void TileLowering::lowerElementAccesses() {
  // Element code (parallel bodies, block-uniform scalar code) still reads and
  // writes tile buffers and regions by their logical indices, and kernel
  // tensors themselves (`table(offs(i))`): those get the same bounds checks
  // as a window of the whole tensor would.
  SmallVector<Operation *> accesses;
  auto isTileBuffer = [&](Value m) {
    return m.getDefiningOp<RegionOp>() || m.getDefiningOp<StageOp>() || m.getDefiningOp<BoundOp>() ||
           storage.count(m);
  };
  kernel.walk([&](Operation *op) {
    if (op->hasAttr(kTensorElementAccess)) return accesses.push_back(op);
    if (auto l = llvm::dyn_cast<memref::LoadOp>(op); l && isTileBuffer(l.getMemRef()))
      accesses.push_back(op);
    if (auto s = llvm::dyn_cast<memref::StoreOp>(op); s && isTileBuffer(s.getMemRef()))
      accesses.push_back(op);
  });
  for (Operation *op : accesses) {
    b.setInsertionPoint(op);
    loc = op->getLoc();
    if (auto l = llvm::dyn_cast<memref::LoadOp>(op)) {
      Value v = load(resolve(l.getMemRef()), l.getIndices(), /*userIndices=*/true);
      l.getResult().replaceAllUsesWith(v);
    } else {
      auto s = llvm::cast<memref::StoreOp>(op);
      store(resolve(s.getMemRef()), s.getIndices(), s.getValue(), /*userIndices=*/true);
    }
    op->erase();
  }
}

LogicalResult TileLowering::eraseLogicalBuffers() {
  // The logical buffers are now unused.
  SmallVector<Operation *> dead;
  kernel.walk([&](Operation *op) {
    if (llvm::isa<AnnotateLayoutOp, RegionOp, StageOp, BoundOp, TmemAliasOp>(op)) dead.push_back(op);
    if (auto alloc = llvm::dyn_cast<AllocOp>(op); alloc && storage.count(alloc.getResult()))
      dead.push_back(op);
    // Tensor-memory buffers are columns of the block's one allocation.
    if (auto alloc = llvm::dyn_cast<AllocOp>(op);
        alloc && getMemorySpace(alloc.getType()) == MemorySpace::tmem)
      dead.push_back(op);
  });
  for (Operation *op : llvm::reverse(dead)) {
    if (!op->use_empty() && !llvm::isa<AnnotateLayoutOp>(op))
      return op->emitError("buffer still used after lowering by ") << *op->getUsers().begin();
    op->erase();
  }
  return mlir::success();
}

namespace {
struct TesselLowerTileOps : tessel::impl::TesselLowerTileOpsBase<TesselLowerTileOps> {
  using Base::Base;
  void runOnOperation() override {
    std::optional<TargetInfo> target = lookupTarget(arch, tma, getOperation());
    if (!target) return signalPassFailure();
    if (mlir::failed(TileLowering(getOperation(), *target).run())) signalPassFailure();
  }
};
} // namespace
