//===- LowerReductions.cpp - tile.reduce and tile.atomic_add ---------------===//
//
// Part of tessel-lower-tile-ops. A fragment reduction folds each thread's
// registers, then butterflies over the lanes and exchanges across warps
// through shared scratch, synchronised over the threads that run it (the
// role's named barrier inside a role). Shared reductions give each output
// element a group of lanes. Atomic adds go element by element or, for
// fragments, one vector reduction per run of contiguous registers.
//
//===----------------------------------------------------------------------===//
#include "TileLowering.h"
#include "tessel/Transforms/BufferUtils.h"
#include "tessel/Transforms/Remarks.h"

#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;
using layout::FragmentLayout;
using layout::LinearMap;

namespace {
/// A reduction's arithmetic. Floating-point buffers reduce in f32; integer
/// ones (signless, at most 32 bits: the verifier's rule) in i32, signed, so
/// that an index or a count is exact at any size (f32 would round past
/// 2^24).
struct Combiner {
  OpBuilder &b;
  Location loc;
  ReduceKind kind;
  Type work;
  Combiner(OpBuilder &b, Location loc, ReduceKind kind, Type sourceElement)
      : b(b), loc(loc), kind(kind),
        work(llvm::isa<FloatType>(sourceElement) ? Type(b.getF32Type()) : b.getI32Type()) {}
  bool isInteger() const { return work.isInteger(32); }
  Value identity() {
    if (isInteger()) {
      int32_t v = kind == ReduceKind::max   ? std::numeric_limits<int32_t>::min()
                  : kind == ReduceKind::min ? std::numeric_limits<int32_t>::max()
                                            : 0;
      return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(v));
    }
    float v = kind == ReduceKind::max   ? -std::numeric_limits<float>::infinity()
              : kind == ReduceKind::min ? std::numeric_limits<float>::infinity()
                                        : 0.0f;
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
  }
  Value operator()(Value x, Value y) {
    switch (kind) {
    case ReduceKind::sum:
      return isInteger() ? arith::AddIOp::create(b, loc, x, y).getResult()
                         : arith::AddFOp::create(b, loc, x, y).getResult();
    case ReduceKind::min:
      return isInteger() ? arith::MinSIOp::create(b, loc, x, y).getResult()
                         : arith::MinNumFOp::create(b, loc, x, y).getResult();
    default:
      return isInteger() ? arith::MaxSIOp::create(b, loc, x, y).getResult()
                         : arith::MaxNumFOp::create(b, loc, x, y).getResult();
    }
  }
  Value input(Value x) {
    if (kind != ReduceKind::absmax) return x;
    return isInteger() ? math::AbsIOp::create(b, loc, x).getResult()
                       : math::AbsFOp::create(b, loc, x).getResult();
  }
  /// Shared scratch holds f32 words; an integer partial travels as its bits.
  Value toScratch(Value x) {
    return isInteger() ? arith::BitcastOp::create(b, loc, b.getF32Type(), x).getResult() : x;
  }
  Value fromScratch(Value x) {
    return isInteger() ? arith::BitcastOp::create(b, loc, work, x).getResult() : x;
  }
};
} // namespace

void TileLowering::reduceFragment(ReduceOp op) {
  Access src = resolve(op.getSource()), dst = resolve(op.getDest());
  auto srcAttr = llvm::cast<FragmentLayoutAttr>(src.layout);
  FragmentLayout s = srcAttr.getLayout();
  FragmentLayout d = llvm::cast<FragmentLayoutAttr>(dst.layout).getLayout();
  unsigned dim = op.getDim();
  SmallVector<unsigned> kept;
  for (unsigned i = 0; i < s.getRank(); ++i)
    if (i != dim) kept.push_back(i);
  // Reducing the only dimension folds every register into the one result.
  std::optional<LinearMap> regMap =
      kept.empty() ? LinearMap(0, SmallVector<uint64_t>(s.getReg().size(), 0))
                   : s.registerMapTo(d, kept);
  if (!regMap) return fail(op, "reduction result layout is not the source layout without the "
                               "reduced dimension; run tessel-layout-inference");
  uint64_t dimMask = ((1ull << s.getDimBits(dim)) - 1) << s.getDimShift(dim);
  auto onlyReduced = [&](uint64_t col) { return (col & ~dimMask) == 0; };
  Combiner combine(b, loc, op.getKind(), src.elementType);
  Type work = combine.work;

  // In-thread: every source register folds into the result register it maps
  // to; registers in the padding of a non-power-of-two extent are skipped.
  int64_t outRegs = d.getNumRegisters();
  SmallVector<Value> acc(outRegs);
  for (int64_t r = 0; r < s.getNumRegisters(); ++r) {
    int64_t target = regMap->apply(r);
    Value x = combine.input(convert(
        memref::LoadOp::create(b, loc, src.root, ValueRange{idx(r)}).getResult(), work));
    if (Value valid = insideShape(coordsAt(srcAttr, idx(r)), src.tileShape, srcAttr))
      x = arith::SelectOp::create(b, loc, valid, x, combine.identity());
    acc[target] = acc[target] ? combine(acc[target], x) : x;
  }
  for (Value &a : acc)
    if (!a) a = combine.identity();

  // Across lanes: butterflies over the lane bits that step the reduced
  // dimension.
  for (auto [i, col] : llvm::enumerate(s.getLane())) {
    if (!col || !(col & dimMask)) continue;
    if (!onlyReduced(col))
      return fail(op, "a lane bit of the source layout steps both the reduced and a kept "
                      "dimension; this reduction needs a layout conversion first");
    for (Value &a : acc)
      a = combine(a, tilenv::ShflXorOp::create(b, loc, a.getType(), a, 1u << i, 32u));
  }

  // Across warps: through shared memory, each thread folding the partials of
  // the warps that differ from it only in reduced bits, in ascending warp
  // order so that every replica computes the same bits.
  uint64_t warpMask = 0;
  for (auto [i, col] : llvm::enumerate(s.getWarp())) {
    if (!col || !(col & dimMask)) continue;
    if (!onlyReduced(col))
      return fail(op, "a warp bit of the source layout steps both the reduced and a kept "
                      "dimension; this reduction needs a layout conversion first");
    warpMask |= 1ull << i;
  }
  if (warpMask) {
    Value scratch = reduceScratch.lookup(op);
    // Over the threads that run the reduction: inside a role, the others
    // never reach it.
    syncExecutingThreads(op);
    for (int64_t r = 0; r < outRegs; ++r)
      memref::StoreOp::create(b, loc, combine.toScratch(acc[r]), scratch,
                              ValueRange{add(mul(threadId, idx(outRegs)), idx(r))});
    syncExecutingThreads(op);
    Value lane = remC(threadId, 32), warp = divC(threadId, 32);
    Value base = arith::AndIOp::create(b, loc, warp, idx(~int64_t(warpMask)));
    // With a warp count that is not a power of two, the layout's last warps
    // do not exist. A missing warp's partial is that of the warp holding
    // the same elements: the one its replicating warp bits (those that
    // step no dimension) cleared name, when that warp exists (an element
    // layout spread over fewer warps, the rest replicas). Otherwise it held
    // padding only, and its partial is the identity (its slot is past the
    // scratch).
    int64_t warps = threads / 32;
    bool missingWarps = !llvm::isPowerOf2_64(warps);
    uint64_t replicaMask = 0;
    for (auto [i, col] : llvm::enumerate(s.getWarp()))
      if (!col) replicaMask |= 1ull << i;
    for (int64_t r = 0; r < outRegs; ++r) {
      Value total;
      for (uint64_t sub = 0;; sub = (sub - warpMask) & warpMask) {
        Value w = arith::OrIOp::create(b, loc, base, idx(sub));
        Value exists;
        if (missingWarps) {
          Value held = arith::AndIOp::create(b, loc, w, idx(~int64_t(replicaMask)));
          w = arith::SelectOp::create(b, loc, lt(w, idx(warps)), w, held);
          exists = lt(w, idx(warps));
          w = arith::SelectOp::create(b, loc, exists, w, base);
        }
        Value slot = add(mul(add(mul(w, idx(32)), lane), idx(outRegs)), idx(r));
        Value x = combine.fromScratch(memref::LoadOp::create(b, loc, scratch, ValueRange{slot}));
        if (exists) x = arith::SelectOp::create(b, loc, exists, x, combine.identity());
        total = total ? combine(total, x) : x;
        if (sub == warpMask) break;
      }
      acc[r] = total;
    }
  }

  for (int64_t r = 0; r < outRegs; ++r) {
    Value result = acc[r];
    if (!op.getClear())
      result = combine(result, convert(memref::LoadOp::create(b, loc, dst.root,
                                                               ValueRange{idx(r)}).getResult(),
                                       work));
    memref::StoreOp::create(b, loc, convert(result, dst.elementType), dst.root,
                            ValueRange{idx(r)});
  }
}

void TileLowering::lowerReduce(ReduceOp op) {
  Access src = resolve(op.getSource());
  if (src.isFragment()) return reduceFragment(op);
  Access dst = resolve(op.getDest());
  if (dst.isFragment()) return reduceIntoFragment(op, src, dst);
  int64_t dim = op.getDim();
  ArrayRef<int64_t> shape = src.tileShape;
  int64_t extent = shape[dim];
  SmallVector<int64_t> outShape(shape);
  outShape.erase(outShape.begin() + dim);
  int64_t outCount = std::accumulate(outShape.begin(), outShape.end(), int64_t{1},
                                     std::multiplies<int64_t>());
  // Shared source: a group of `width` lanes reduces one output element;
  // groups never straddle a warp, so the butterfly shuffles stay inside it.
  int64_t width = std::min<int64_t>(32, llvm::PowerOf2Ceil(extent));
  int64_t groups = threads / width;
  Combiner combine(b, loc, op.getKind(), src.elementType);
  Type work = combine.work;
  Value group = divC(threadId, width);
  Value lane = remC(threadId, width);
  auto outer = scf::ForOp::create(b, loc, zeroIdx, idx(outCount), idx(groups));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(outer.getBody());
  Value out = add(outer.getInductionVar(), group);
  Value valid = lt(out, idx(outCount));
  Value upper = arith::SelectOp::create(b, loc, valid, idx(extent), zeroIdx);
  auto inner = scf::ForOp::create(b, loc, lane, upper, idx(width), ValueRange{combine.identity()});
  {
    OpBuilder::InsertionGuard innerGuard(b);
    b.setInsertionPointToStart(inner.getBody());
    // Clamp so that idle groups compute in-range (unused) indices.
    Value safeOut = arith::SelectOp::create(b, loc, valid, out, zeroIdx);
    SmallVector<Value> srcIdx = delinearize(safeOut, outShape.empty() ? ArrayRef<int64_t>{1}
                                                                      : ArrayRef(outShape));
    if (outShape.empty()) srcIdx.clear();
    srcIdx.insert(srcIdx.begin() + dim, inner.getInductionVar());
    Value x = combine.input(convert(load(src, srcIdx), work));
    scf::YieldOp::create(b, loc, combine(inner.getRegionIterArgs()[0], x));
  }
  Value acc = inner.getResult(0);
  for (int64_t offset = width / 2; offset >= 1; offset /= 2) {
    Value other = tilenv::ShflXorOp::create(b, loc, acc.getType(), acc, (uint32_t)offset,
                                            (uint32_t)width);
    acc = combine(acc, other);
  }
  this->guard(andI(valid, eq(lane, zeroIdx)));
  SmallVector<Value> outIdx =
      outShape.empty() ? SmallVector<Value>{zeroIdx} : delinearize(out, outShape);
  if (!op.getClear()) acc = combine(acc, convert(load(dst, outIdx), work));
  store(dst, outIdx, convert(acc, dst.elementType));
}

void TileLowering::reduceIntoFragment(ReduceOp op, const Access &src, const Access &dst) {
  // The destination's layout says which of its elements each thread holds
  // (often the same element in several threads: a row's value in every
  // warp): each thread reduces the source's line through each of them
  // itself. (Lanes sharing one output and a shuffle would leave the value
  // in one lane, while the layout puts it in others.)
  auto attr = llvm::cast<FragmentLayoutAttr>(dst.layout);
  int64_t dim = op.getDim();
  int64_t extent = src.tileShape[dim];
  Combiner combine(b, loc, op.getKind(), src.elementType);
  Type work = combine.work;
  unrolledFor(attr.getLayout().getNumRegisters(), [&](Value r) {
    OpBuilder::InsertionGuard g(b);
    SmallVector<Value> outIdx = coordsAt(attr, r);
    guard(insideShape(outIdx, dst.tileShape, attr));
    // A reduction of every dimension writes element 0 of a one-element
    // destination; the source has no dimension left for it.
    SmallVector<Value> lineIdx =
        src.tileShape.size() == 1 ? SmallVector<Value>() : SmallVector<Value>(outIdx);
    auto line = scf::ForOp::create(b, loc, zeroIdx, idx(extent), idx(1),
                                   ValueRange{combine.identity()});
    {
      OpBuilder::InsertionGuard inLine(b);
      b.setInsertionPointToStart(line.getBody());
      SmallVector<Value> srcIdx(lineIdx);
      srcIdx.insert(srcIdx.begin() + dim, line.getInductionVar());
      Value x = combine.input(convert(load(src, srcIdx), work));
      scf::YieldOp::create(b, loc, combine(line.getRegionIterArgs()[0], x));
    }
    Value acc = line.getResult(0);
    if (!op.getClear())
      acc = combine(acc, convert(memref::LoadOp::create(b, loc, dst.root, ValueRange{r}), work));
    memref::StoreOp::create(b, loc, convert(acc, dst.elementType), dst.root, ValueRange{r});
  });
}

//===----------------------------------------------------------------------===//
// Atomics, loops
//===----------------------------------------------------------------------===//

void TileLowering::lowerAtomicAdd(AtomicAddOp op, bool insideParallel) {
  Access dst = resolve(op.getDest());
  if (dst.isFragment()) return fail(op, "atomic_add into a fragment; fragments are per thread");
  // The scalar form's indices are element code's (a histogram's bin read
  // from the data); the region form's are the compiler's.
  bool userIndices = !llvm::isa<MemRefType>(op.getValue().getType());
  auto atomicAt = [&](ArrayRef<Value> tileIdx, Value value) {
    SmallVector<Value> rootIdx = rootIndices(dst, tileIdx);
    OpBuilder::InsertionGuard g(b);
    guard(inBounds(dst, rootIdx, 0, userIndices));
    tilenv::AtomicAddOp::create(b, loc, value, dst.root, operandIndices(dst, rootIdx),
                                op.getOrder());
  };
  if (llvm::isa<MemRefType>(op.getValue().getType())) {
    Access src = resolve(op.getValue());
    // The build without TMA (the runtime's for arguments a tensor map
    // cannot hold, or --no-tma) runs the same program: its TMA reduce-adds
    // become thread atomics. So do they before sm_90, which has no TMA (as
    // a pipelined loop's TMA loads become cp.async copies there), saying so.
    bool tmaOff = !target.hasTma() || !target.tma;
    if (op.getTma() && !target.hasTma())
      emitMissed(op, "tessel-lower-tile-ops", missed::kTma)
          << "this TMA reduce-add is made by the threads' atomics: " << target.arch
          << " has no TMA";
    if (op.getTma() && !tmaOff) {
      if (op.getOrder() != MemoryOrder::relaxed)
        return fail(op, "a TMA reduce-add is relaxed; use order relaxed, or thread atomics for "
                        "ordered adds");
      if (src.space != MemorySpace::shared || src.elementType != dst.elementType)
        return fail(op, "a TMA reduce-add adds a shared buffer into a global window of the "
                        "same element type");
      return storeWithTma(op, src, dst, /*add=*/true);
    }
    if (src.isFragment()) return atomicAddFragment(op, src, dst);
    forEachElement(dst.tileShape, 1, [&](ArrayRef<Value> index) {
      atomicAt(index, convert(load(src, index), dst.elementType));
    });
    return;
  }
  SmallVector<Value> index(op.getIndices());
  if (insideParallel) return atomicAt(index, op.getValue());
  // Block-uniform code: one thread of the block performs the update.
  OpBuilder::InsertionGuard g(b);
  guard(eq(threadId, zeroIdx));
  atomicAt(index, op.getValue());
}

void TileLowering::atomicAddFragment(AtomicAddOp op, const Access &src, const Access &dst) {
  FragmentLayout l = llvm::cast<FragmentLayoutAttr>(src.layout).getLayout();
  // sm_90 adds runs of 2 or 4 contiguous f32 registers with one vector
  // reduction (relaxed or release); elsewhere, and where a run is cut by the
  // tensor's edge or misaligned, one atomic per element.
  bool vectorOrder = op.getOrder() == MemoryOrder::relaxed || op.getOrder() == MemoryOrder::release;
  int64_t v = target.computeCapability >= 90 && vectorOrder && dst.vectorizable &&
                      src.elementType.isF32() && dst.elementType.isF32()
                  ? std::min<int64_t>(vectorRegisters(l, dst.elementType), 4)
                  : 1;
  forEachOwnedRun(src, v, [&](Value r0, ArrayRef<Value> coords) {
    auto scalar = [&]() {
      forEachRunElement(src, r0, coords, v, [&](ArrayRef<Value> c, Value x) {
        SmallVector<Value> rootIdx = rootIndices(dst, c);
        guard(inBounds(dst, rootIdx));
        tilenv::AtomicAddOp::create(b, loc, convert(x, dst.elementType), dst.root,
                                    operandIndices(dst, rootIdx), op.getOrder());
      });
    };
    if (v == 1) return scalar();
    vectorRunOrScalar(src, coords, dst, v, [&](ArrayRef<Value> dstIdx) {
      tilenv::ReduceAddVectorOp::create(b, loc, src.root, r0, dst.root, operandIndices(dst, dstIdx),
                                        v, op.getOrder());
    }, scalar);
  });
}
