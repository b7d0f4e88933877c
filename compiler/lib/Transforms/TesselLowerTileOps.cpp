//===- TesselLowerTileOps.cpp - tile ops to per-thread code ---------------===//
//
// The first, layout-free lowering. Every thread of a block runs the kernel
// body; a collective tile op becomes a loop in which thread `t` handles the
// elements t, t + T, t + 2T, ... of the tile (T = threads). Fragments live in
// shared memory until layout inference places them in registers, so every
// tile op reads and writes memory that any thread can see, and the barriers
// placed by tessel-insert-barriers make the hand-offs safe.
//
//===----------------------------------------------------------------------===//
#include "tessel/Transforms/BufferUtils.h"
#include "tessel/Transforms/Passes.h"

#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"
#include <numeric>

namespace tessel {
#define GEN_PASS_DEF_TESSELLOWERTILEOPS
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

namespace {
/// Where the elements of a (region of a) buffer live after lowering.
struct Access {
  Value root;                    // the global parameter or the lowered 1-D alloc
  AffineMap layout;              // shared/local: logical index -> linear offset
  SmallVector<Value> offsets;    // region origin in the root's logical index space
  SmallVector<int64_t> rootShape;
  ArrayRef<int64_t> tileShape;
  Type elementType;
  bool isGlobal;
  bool rowMajor;                 // consecutive innermost indices are adjacent
};

/// Lowered storage of one tile allocation.
struct Storage {
  Value buffer;     // 1-D shared or local alloc
  AffineMap layout; // logical index -> element offset
  bool rowMajor;
};

static AffineMap rowMajorLayout(ArrayRef<int64_t> shape, MLIRContext *ctx) {
  AffineExpr expr = getAffineConstantExpr(0, ctx);
  int64_t stride = 1;
  for (int64_t d = shape.size() - 1; d >= 0; --d) {
    expr = expr + getAffineDimExpr(d, ctx) * stride;
    stride *= shape[d];
  }
  return AffineMap::get(shape.size(), 0, expr);
}

class TileLowering {
public:
  TileLowering(KernelOp kernel) : kernel(kernel), b(kernel.getContext()) {}
  LogicalResult run();

private:
  KernelOp kernel;
  OpBuilder b;
  Location loc = UnknownLoc::get(kernel.getContext());
  Value threadId, numThreads, zeroIdx;
  int64_t threads = 0;
  /// Original allocation -> lowered 1-D storage and its layout.
  DenseMap<Value, Storage> storage;

  Value idx(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return arith::MulIOp::create(b, loc, x, y); }
  Value lt(Value x, Value y) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, x, y);
  }
  /// Conjunction where a null value means "always true".
  Value andI(Value x, Value y) {
    if (!x || !y) return x ? x : y;
    return arith::AndIOp::create(b, loc, x, y);
  }

  Access resolve(Value buffer);
  Value physicalIndex(const Access &a, ValueRange logical);
  SmallVector<Value> rootIndices(const Access &a, ValueRange tileIdx);
  Value inBounds(const Access &a, ValueRange rootIdx, int64_t innerExtra = 0);
  Value load(const Access &a, ValueRange tileIdx);
  void store(const Access &a, ValueRange tileIdx, Value value);
  Value convert(Value v, Type to);
  void forEachElement(ArrayRef<int64_t> shape, int64_t vector,
                      function_ref<void(ArrayRef<Value>)> body);
  SmallVector<Value> delinearize(Value linear, ArrayRef<int64_t> shape);

  void lowerCopy(CopyOp op);
  void lowerFill(FillOp op);
  void lowerGemm(GemmOp op);
  void lowerReduce(ReduceOp op);
  void lowerAtomicAdd(AtomicAddOp op, bool insideParallel);
  void lowerParallel(ParallelOp op);
  void lowerPipelined(PipelinedOp op);
};

Access TileLowering::resolve(Value buffer) {
  Access a;
  auto tileType = llvm::cast<MemRefType>(buffer.getType());
  a.tileShape = tileType.getShape();
  a.elementType = tileType.getElementType();
  SmallVector<Value> offsets;
  Value root = buffer;
  while (auto region = root.getDefiningOp<RegionOp>()) {
    if (offsets.empty()) {
      offsets.assign(region.getOffsets().begin(), region.getOffsets().end());
    } else {
      for (auto [acc, off] : llvm::zip(offsets, region.getOffsets())) acc = add(acc, off);
    }
    root = region.getSource();
  }
  auto rootType = llvm::cast<MemRefType>(root.getType());
  if (offsets.empty()) offsets.assign(rootType.getRank(), zeroIdx);
  a.offsets = offsets;
  a.rootShape.assign(rootType.getShape().begin(), rootType.getShape().end());
  a.isGlobal = getMemorySpace(rootType) == MemorySpace::global;
  a.rowMajor = true;
  a.root = root;
  if (!a.isGlobal) {
    auto it = storage.find(root);
    assert(it != storage.end() && "allocation lowered before its uses");
    a.root = it->second.buffer;
    a.layout = it->second.layout;
    a.rowMajor = it->second.rowMajor;
  }
  return a;
}

SmallVector<Value> TileLowering::rootIndices(const Access &a, ValueRange tileIdx) {
  SmallVector<Value> out;
  for (auto [off, i] : llvm::zip(a.offsets, tileIdx)) out.push_back(add(off, i));
  return out;
}

Value TileLowering::physicalIndex(const Access &a, ValueRange logical) {
  // Evaluate the layout's single result over the logical index.
  AffineExpr expr = a.layout.getResult(0);
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
  return eval(expr);
}

/// True where the whole element (and `innerExtra` more along the innermost
/// dimension) lies inside a global root; null when that is always so.
Value TileLowering::inBounds(const Access &a, ValueRange rootIdx, int64_t innerExtra) {
  if (!a.isGlobal) return {};
  Value cond;
  for (auto [d, i] : llvm::enumerate(rootIdx)) {
    int64_t extent = a.tileShape[d];
    int64_t dim = a.rootShape[d];
    std::optional<int64_t> off = getConstantIntValue(a.offsets[d]);
    if (!ShapedType::isDynamic(dim) && off && *off + extent <= dim) continue;
    Value bound = ShapedType::isDynamic(dim)
                      ? memref::DimOp::create(b, loc, a.root, d).getResult()
                      : idx(dim);
    Value last = d + 1 == rootIdx.size() && innerExtra ? add(i, idx(innerExtra)) : i;
    cond = andI(cond, lt(last, bound));
  }
  return cond;
}

Value TileLowering::load(const Access &a, ValueRange tileIdx) {
  SmallVector<Value> rootIdx = rootIndices(a, tileIdx);
  auto emitLoad = [&]() -> Value {
    if (a.isGlobal) return memref::LoadOp::create(b, loc, a.root, rootIdx);
    return memref::LoadOp::create(b, loc, a.root, ValueRange{physicalIndex(a, rootIdx)});
  };
  Value cond = inBounds(a, rootIdx);
  if (!cond) return emitLoad();
  auto ifOp = scf::IfOp::create(
      b, loc, cond,
      [&](OpBuilder &, Location) { scf::YieldOp::create(b, loc, emitLoad()); },
      [&](OpBuilder &, Location) {
        Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(a.elementType));
        scf::YieldOp::create(b, loc, zero);
      });
  return ifOp.getResult(0);
}

void TileLowering::store(const Access &a, ValueRange tileIdx, Value value) {
  SmallVector<Value> rootIdx = rootIndices(a, tileIdx);
  auto emitStore = [&]() {
    if (a.isGlobal)
      memref::StoreOp::create(b, loc, value, a.root, rootIdx);
    else
      memref::StoreOp::create(b, loc, value, a.root, ValueRange{physicalIndex(a, rootIdx)});
  };
  Value cond = inBounds(a, rootIdx);
  if (!cond) return emitStore();
  auto ifOp = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  emitStore();
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

SmallVector<Value> TileLowering::delinearize(Value linear, ArrayRef<int64_t> shape) {
  SmallVector<Value> out(shape.size());
  for (int64_t d = shape.size() - 1; d >= 0; --d) {
    if (d == 0) {
      out[d] = linear;
      break;
    }
    Value extent = idx(shape[d]);
    out[d] = arith::RemUIOp::create(b, loc, linear, extent);
    linear = arith::DivUIOp::create(b, loc, linear, extent);
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

void TileLowering::lowerCopy(CopyOp op) {
  Access src = resolve(op.getSource()), dst = resolve(op.getDest());
  ArrayRef<int64_t> shape = src.tileShape;
  // 16-byte moves when both sides hold the same type contiguously; alignment
  // and bounds are checked per vector at run time, with an element-wise path
  // for the vectors that fail (tile edges, odd strides).
  int64_t vector = 1;
  bool contiguous = src.elementType == dst.elementType && src.rowMajor && dst.rowMajor;
  if (contiguous) {
    vector = 16 / getElementBytes(src.elementType);
    while (vector > 1 && shape.back() % vector) vector /= 2;
  }
  forEachElement(shape, vector, [&](ArrayRef<Value> index) {
    auto scalarCopy = [&](int64_t count) {
      SmallVector<Value> elemIdx(index);
      Value first = elemIdx.back();
      for (int64_t v = 0; v < count; ++v) {
        elemIdx.back() = v ? add(first, idx(v)) : first;
        store(dst, elemIdx, convert(load(src, elemIdx), dst.elementType));
      }
    };
    if (vector == 1) return scalarCopy(1);
    SmallVector<Value> srcIdx = rootIndices(src, index), dstIdx = rootIndices(dst, index);
    Value cond = andI(inBounds(src, srcIdx, vector - 1), inBounds(dst, dstIdx, vector - 1));
    auto aligned = [&](const Access &a, ArrayRef<Value> rootIdx) -> Value {
      // Global roots are row-major; the vector is aligned when its linear
      // index is a multiple of the vector width (the base pointer is checked
      // at launch to be 16-byte aligned).
      Value linear;
      if (a.isGlobal) {
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
      Value rem = arith::RemUIOp::create(b, loc, linear, idx(vector));
      return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, rem, zeroIdx);
    };
    cond = andI(cond, aligned(src, srcIdx));
    cond = andI(cond, aligned(dst, dstIdx));
    auto ifOp = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    auto operand = [&](const Access &a, ArrayRef<Value> rootIdx) -> SmallVector<Value> {
      if (a.isGlobal) return SmallVector<Value>(rootIdx);
      return {physicalIndex(a, rootIdx)};
    };
    tilenv::CopyVectorOp::create(b, loc, src.root, operand(src, srcIdx), dst.root,
                                 operand(dst, dstIdx),
                                 vector * getElementBytes(src.elementType));
    b.setInsertionPointToStart(ifOp.elseBlock());
    scalarCopy(vector);
  });
}

void TileLowering::lowerFill(FillOp op) {
  Access dst = resolve(op.getDest());
  forEachElement(dst.tileShape, 1,
                 [&](ArrayRef<Value> index) { store(dst, index, op.getValue()); });
}

void TileLowering::lowerGemm(GemmOp op) {
  Access a = resolve(op.getA()), bAcc = resolve(op.getB()), c = resolve(op.getC());
  int64_t k = op.getTransposeA() ? a.tileShape[0] : a.tileShape[1];
  Type f32 = b.getF32Type();
  forEachElement(c.tileShape, 1, [&](ArrayRef<Value> index) {
    Value m = index[0], n = index[1];
    Value init = op.getClearAccum()
                     ? arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0)).getResult()
                     : convert(load(c, index), f32);
    auto kLoop = scf::ForOp::create(b, loc, zeroIdx, idx(k), idx(1), ValueRange{init});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(kLoop.getBody());
      Value kk = kLoop.getInductionVar();
      SmallVector<Value> aIdx = op.getTransposeA() ? SmallVector<Value>{kk, m}
                                                   : SmallVector<Value>{m, kk};
      SmallVector<Value> bIdx = op.getTransposeB() ? SmallVector<Value>{n, kk}
                                                   : SmallVector<Value>{kk, n};
      Value av = convert(load(a, aIdx), f32), bv = convert(load(bAcc, bIdx), f32);
      Value acc = math::FmaOp::create(b, loc, av, bv, kLoop.getRegionIterArgs()[0]);
      scf::YieldOp::create(b, loc, acc);
    }
    store(c, index, convert(kLoop.getResult(0), c.elementType));
  });
}

void TileLowering::lowerReduce(ReduceOp op) {
  Access src = resolve(op.getSource()), dst = resolve(op.getDest());
  int64_t dim = op.getDim();
  ArrayRef<int64_t> shape = src.tileShape;
  int64_t extent = shape[dim];
  SmallVector<int64_t> outShape(shape);
  outShape.erase(outShape.begin() + dim);
  int64_t outCount = std::accumulate(outShape.begin(), outShape.end(), int64_t{1},
                                     std::multiplies<int64_t>());
  // A group of `width` lanes reduces one output element; groups never straddle
  // a warp, so the butterfly shuffles stay inside it.
  int64_t width = std::min<int64_t>(32, llvm::PowerOf2Ceil(extent));
  int64_t groups = threads / width;
  Type f32 = b.getF32Type();
  ReduceKind kind = op.getKind();
  auto identity = [&]() -> Value {
    float v = kind == ReduceKind::max   ? -std::numeric_limits<float>::infinity()
              : kind == ReduceKind::min ? std::numeric_limits<float>::infinity()
                                        : 0.0f;
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
  };
  auto combine = [&](Value x, Value y) -> Value {
    switch (kind) {
    case ReduceKind::sum: return arith::AddFOp::create(b, loc, x, y);
    case ReduceKind::min: return arith::MinNumFOp::create(b, loc, x, y);
    default: return arith::MaxNumFOp::create(b, loc, x, y);
    }
  };
  Value group = arith::DivUIOp::create(b, loc, threadId, idx(width));
  Value lane = arith::RemUIOp::create(b, loc, threadId, idx(width));
  auto outer = scf::ForOp::create(b, loc, zeroIdx, idx(outCount), idx(groups));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(outer.getBody());
  Value out = add(outer.getInductionVar(), group);
  Value valid = lt(out, idx(outCount));
  Value upper = arith::SelectOp::create(b, loc, valid, idx(extent), zeroIdx);
  auto inner = scf::ForOp::create(b, loc, lane, upper, idx(width), ValueRange{identity()});
  SmallVector<Value> outIdx;
  {
    OpBuilder::InsertionGuard innerGuard(b);
    b.setInsertionPointToStart(inner.getBody());
    // Clamp so that idle groups compute in-range (unused) indices.
    Value safeOut = arith::SelectOp::create(b, loc, valid, out, zeroIdx);
    SmallVector<Value> srcIdx = delinearize(safeOut, outShape.empty() ? ArrayRef<int64_t>{1}
                                                                      : ArrayRef(outShape));
    if (outShape.empty()) srcIdx.clear();
    srcIdx.insert(srcIdx.begin() + dim, inner.getInductionVar());
    Value x = convert(load(src, srcIdx), f32);
    if (kind == ReduceKind::absmax) x = math::AbsFOp::create(b, loc, x);
    scf::YieldOp::create(b, loc, combine(inner.getRegionIterArgs()[0], x));
  }
  Value acc = inner.getResult(0);
  for (int64_t offset = width / 2; offset >= 1; offset /= 2) {
    Value other = tilenv::ShflXorOp::create(b, loc, acc.getType(), acc, (uint32_t)offset, (uint32_t)width);
    acc = combine(acc, other);
  }
  Value writer = andI(valid, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane,
                                                   zeroIdx));
  auto ifOp = scf::IfOp::create(b, loc, writer, /*withElseRegion=*/false);
  b.setInsertionPointToStart(ifOp.thenBlock());
  outIdx = outShape.empty() ? SmallVector<Value>{zeroIdx} : delinearize(out, outShape);
  if (!op.getClear()) acc = combine(acc, convert(load(dst, outIdx), f32));
  store(dst, outIdx, convert(acc, dst.elementType));
}

void TileLowering::lowerAtomicAdd(AtomicAddOp op, bool insideParallel) {
  Access dst = resolve(op.getDest());
  auto atomicAt = [&](ArrayRef<Value> tileIdx, Value value) {
    SmallVector<Value> rootIdx = rootIndices(dst, tileIdx);
    Value cond = inBounds(dst, rootIdx);
    OpBuilder::InsertionGuard guard(b);
    if (cond) {
      auto ifOp = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/false);
      b.setInsertionPointToStart(ifOp.thenBlock());
    }
    SmallVector<Value> operand =
        dst.isGlobal ? rootIdx : SmallVector<Value>{physicalIndex(dst, rootIdx)};
    tilenv::AtomicAddOp::create(b, loc, value, dst.root, operand, op.getOrder());
  };
  if (llvm::isa<MemRefType>(op.getValue().getType())) {
    Access src = resolve(op.getValue());
    forEachElement(dst.tileShape, 1, [&](ArrayRef<Value> index) {
      atomicAt(index, convert(load(src, index), dst.elementType));
    });
    return;
  }
  SmallVector<Value> index(op.getIndices());
  if (insideParallel) return atomicAt(index, op.getValue());
  // Block-uniform code: one thread of the block performs the update.
  Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, threadId, zeroIdx);
  auto ifOp = scf::IfOp::create(b, loc, first, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  atomicAt(index, op.getValue());
}

void TileLowering::lowerParallel(ParallelOp op) {
  ArrayRef<int64_t> extents = op.getExtents();
  Block &body = op.getBody().front();
  forEachElement(extents, 1, [&](ArrayRef<Value> index) {
    for (auto [arg, i] : llvm::zip(body.getArguments(), index)) arg.replaceAllUsesWith(i);
    Block *dest = b.getInsertionBlock();
    dest->getOperations().splice(b.getInsertionPoint(), body.getOperations());
  });
}

void TileLowering::lowerPipelined(PipelinedOp op) {
  // Software pipelining comes with tessel-software-pipeline; until then the
  // loop runs its stages one after another.
  auto loop = scf::ForOp::create(b, loc, op.getLower(), op.getUpper(), op.getStep());
  Block &body = op.getBody().front();
  body.getArgument(0).replaceAllUsesWith(loop.getInductionVar());
  Block *dest = loop.getBody();
  dest->getOperations().splice(dest->begin(), body.getOperations());
}

LogicalResult TileLowering::run() {
  threads = kernel.getThreads();
  Block &entry = kernel.getBodyBlock();
  b.setInsertionPointToStart(&entry);
  threadId = tilenv::ThreadIdOp::create(b, loc, b.getIndexType());
  numThreads = idx(threads);
  zeroIdx = idx(0);

  // Storage: shared-backed buffers in dynamic shared memory, local ones per
  // thread; all 1-D, addressed through their layout.
  int64_t smem = planSharedMemory(kernel, [&](AllocOp alloc, int64_t offset) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(alloc);
    MemRefType type = alloc.getType();
    auto lowered = AllocOp::create(
        b, alloc.getLoc(),
        getTileMemRefType({getStorageElements(alloc)}, type.getElementType(), MemorySpace::shared),
        b.getI64IntegerAttr(offset));
    AnnotateLayoutOp annotated = getAnnotatedLayout(alloc);
    storage[alloc.getResult()] = {
        lowered.getResult(),
        annotated ? annotated.getLayout() : rowMajorLayout(type.getShape(), b.getContext()),
        !annotated};
  });
  SmallVector<AllocOp> localAllocs;
  kernel.walk([&](AllocOp alloc) {
    if (getMemorySpace(alloc.getType()) == MemorySpace::local) localAllocs.push_back(alloc);
  });
  for (AllocOp alloc : localAllocs) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(alloc);
    MemRefType type = alloc.getType();
    auto lowered = AllocOp::create(
        b, alloc.getLoc(),
        getTileMemRefType({type.getNumElements()}, type.getElementType(), MemorySpace::local),
        IntegerAttr());
    storage[alloc.getResult()] = {lowered.getResult(),
                                  rowMajorLayout(type.getShape(), b.getContext()), true};
  }
  kernel.setSmemBytesAttr(b.getI64IntegerAttr(smem));

  // Collective ops, outermost first so that a loop's body is moved before its
  // ops are lowered in their new place.
  SmallVector<Operation *> work;
  kernel.walk<WalkOrder::PreOrder>([&](Operation *op) {
    if (llvm::isa<CopyOp, FillOp, GemmOp, ReduceOp, AtomicAddOp, ParallelOp, PipelinedOp,
                  BarrierOp>(op))
      work.push_back(op);
  });
  DenseSet<Operation *> inParallel;
  for (Operation *op : work)
    if (op->getParentOfType<ParallelOp>()) inParallel.insert(op);
  for (Operation *op : work) {
    b.setInsertionPoint(op);
    loc = op->getLoc();
    llvm::TypeSwitch<Operation *>(op)
        .Case([&](CopyOp o) { lowerCopy(o); })
        .Case([&](FillOp o) { lowerFill(o); })
        .Case([&](GemmOp o) { lowerGemm(o); })
        .Case([&](ReduceOp o) { lowerReduce(o); })
        .Case([&](AtomicAddOp o) { lowerAtomicAdd(o, inParallel.contains(o)); })
        .Case([&](ParallelOp o) { lowerParallel(o); })
        .Case([&](PipelinedOp o) { lowerPipelined(o); })
        .Case([&](BarrierOp) { tilenv::SyncThreadsOp::create(b, loc); });
  }
  for (Operation *op : llvm::reverse(work)) op->erase();

  // Element code (parallel bodies, block-uniform scalar code) still reads and
  // writes tile buffers and regions by their logical indices.
  SmallVector<Operation *> accesses;
  kernel.walk([&](Operation *op) {
    if (auto l = llvm::dyn_cast<memref::LoadOp>(op);
        l && (l.getMemRef().getDefiningOp<RegionOp>() || storage.count(l.getMemRef())))
      accesses.push_back(op);
    if (auto s = llvm::dyn_cast<memref::StoreOp>(op);
        s && (s.getMemRef().getDefiningOp<RegionOp>() || storage.count(s.getMemRef())))
      accesses.push_back(op);
  });
  for (Operation *op : accesses) {
    b.setInsertionPoint(op);
    loc = op->getLoc();
    if (auto l = llvm::dyn_cast<memref::LoadOp>(op)) {
      Value v = load(resolve(l.getMemRef()), l.getIndices());
      l.getResult().replaceAllUsesWith(v);
    } else {
      auto s = llvm::cast<memref::StoreOp>(op);
      store(resolve(s.getMemRef()), s.getIndices(), s.getValue());
    }
    op->erase();
  }

  // The logical buffers are now unused.
  SmallVector<Operation *> dead;
  kernel.walk([&](Operation *op) {
    if (llvm::isa<AnnotateLayoutOp, RegionOp>(op)) dead.push_back(op);
    if (auto alloc = llvm::dyn_cast<AllocOp>(op); alloc && storage.count(alloc.getResult()))
      dead.push_back(op);
  });
  for (Operation *op : llvm::reverse(dead)) {
    if (!op->use_empty() && !llvm::isa<AnnotateLayoutOp>(op))
      return op->emitError("buffer still used after lowering by ")
             << *op->getUsers().begin();
    op->erase();
  }
  return success();
}

struct TesselLowerTileOps : tessel::impl::TesselLowerTileOpsBase<TesselLowerTileOps> {
  void runOnOperation() override {
    if (failed(TileLowering(getOperation()).run())) signalPassFailure();
  }
};
} // namespace
