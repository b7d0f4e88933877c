//===- LowerCopies.cpp - tile.copy and tile.fill --------------------------===//
//
// Part of tessel-lower-tile-ops. Global and shared memory move in
// thread-strided loops, 16-byte vectors where contiguity and alignment allow
// (cp.async for global-to-shared copies from sm_80 on); fragments move run by
// run of the registers each thread owns.
//
//===----------------------------------------------------------------------===//
#include "TileLowering.h"
#include "TmaRules.h"
#include "tessel/Transforms/BufferUtils.h"

#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"
#include <numeric>

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;
using layout::FragmentLayout;
using layout::LinearMap;

//===----------------------------------------------------------------------===//
// Copies and fills
//===----------------------------------------------------------------------===//

void TileLowering::copyGlobalShared(const Access &src, const Access &dst, bool async) {
  ArrayRef<int64_t> shape = src.tileShape;
  // 16-byte moves when both sides hold the same type contiguously; alignment
  // and bounds are checked per vector at run time, with an element-wise path
  // for the vectors that fail (tile edges, odd strides).
  int64_t vector = 1;
  if (src.elementType == dst.elementType && src.vectorizable && dst.vectorizable) {
    vector = 16 / getElementBytes(src.elementType);
    while (vector > 1 && shape.back() % vector) vector /= 2;
    if (vector * getElementBytes(src.elementType) < 4) vector = 1;
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
    cond = andI(cond, aligned(src, srcIdx, vector));
    cond = andI(cond, aligned(dst, dstIdx, vector));
    auto ifOp = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    int64_t bytes = vector * getElementBytes(src.elementType);
    if (async)
      tilenv::CpAsyncOp::create(b, loc, src.root, operandIndices(src, srcIdx), dst.root,
                                operandIndices(dst, dstIdx), bytes);
    else
      tilenv::CopyVectorOp::create(b, loc, src.root, operandIndices(src, srcIdx), dst.root,
                                   operandIndices(dst, dstIdx), bytes);
    b.setInsertionPointToStart(ifOp.elseBlock());
    scalarCopy(vector);
  });
}

void TileLowering::vectorRunOrScalar(const Access &frag, ArrayRef<Value> coords, const Access &mem,
                                     int64_t v, function_ref<void(ArrayRef<Value>)> vector,
                                     function_ref<void()> scalar) {
  SmallVector<Value> memIdx = rootIndices(mem, coords);
  SmallVector<Value> last(coords);
  last.back() = add(last.back(), idx(v - 1));
  Value cond = andI(insideShape(last, frag.tileShape), inBounds(mem, memIdx, v - 1));
  cond = andI(cond, aligned(mem, memIdx, v));
  OpBuilder::InsertionGuard g(b);
  auto ifOp = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/true);
  b.setInsertionPointToStart(ifOp.thenBlock());
  vector(memIdx);
  b.setInsertionPointToStart(ifOp.elseBlock());
  scalar();
}

void TileLowering::copyToFragment(const Access &src, const Access &dst) {
  auto attr = llvm::cast<FragmentLayoutAttr>(dst.layout);
  FragmentLayout l = attr.getLayout();
  int64_t v = src.vectorizable ? vectorRegisters(l, src.elementType) : 1;
  Value staging = v > 1 && src.elementType != dst.elementType ? allocLocal(v, src.elementType)
                                                              : Value();
  unrolledFor(l.getNumRegisters() / v, [&](Value group) {
    Value r0 = mul(group, idx(v));
    SmallVector<Value> coords = coordsAt(attr, r0);
    auto scalar = [&]() {
      for (int64_t j = 0; j < v; ++j) {
        OpBuilder::InsertionGuard g(b);
        SmallVector<Value> c(coords);
        c.back() = add(c.back(), idx(j));
        guard(insideShape(c, dst.tileShape));
        memref::StoreOp::create(b, loc, convert(load(src, c), dst.elementType), dst.root,
                                ValueRange{add(r0, idx(j))});
      }
    };
    if (v == 1) return scalar();
    vectorRunOrScalar(dst, coords, src, v, [&](ArrayRef<Value> srcIdx) {
      int64_t bytes = v * getElementBytes(src.elementType);
      if (!staging) {
        tilenv::CopyVectorOp::create(b, loc, src.root, operandIndices(src, srcIdx), dst.root,
                                     ValueRange{r0}, bytes);
        return;
      }
      tilenv::CopyVectorOp::create(b, loc, src.root, operandIndices(src, srcIdx), staging,
                                   ValueRange{zeroIdx}, bytes);
      for (int64_t j = 0; j < v; ++j) {
        Value x = memref::LoadOp::create(b, loc, staging, ValueRange{idx(j)});
        memref::StoreOp::create(b, loc, convert(x, dst.elementType), dst.root,
                                ValueRange{add(r0, idx(j))});
      }
    }, scalar);
  });
}

void TileLowering::forEachOwnedRun(const Access &frag, int64_t v,
                                   function_ref<void(Value, ArrayRef<Value>)> body) {
  auto attr = llvm::cast<FragmentLayoutAttr>(frag.layout);
  FragmentLayout l = attr.getLayout();
  Value threadOwner = threadOwns(l);
  unrolledFor(l.getNumRegisters() / v, [&](Value group) {
    Value r0 = mul(group, idx(v));
    OpBuilder::InsertionGuard g(b);
    // Replicas hold copies; only the owner writes.
    guard(andI(threadOwner, registerOwns(l, r0)));
    body(r0, coordsAt(attr, r0));
  });
}

void TileLowering::forEachRunElement(const Access &frag, Value r0, ArrayRef<Value> coords,
                                     int64_t v, function_ref<void(ArrayRef<Value>, Value)> body) {
  for (int64_t j = 0; j < v; ++j) {
    OpBuilder::InsertionGuard g(b);
    SmallVector<Value> c(coords);
    c.back() = add(c.back(), idx(j));
    guard(insideShape(c, frag.tileShape));
    body(c, memref::LoadOp::create(b, loc, frag.root, ValueRange{add(r0, idx(j))}));
  }
}

void TileLowering::copyFromFragment(const Access &src, const Access &dst) {
  FragmentLayout l = llvm::cast<FragmentLayoutAttr>(src.layout).getLayout();
  int64_t v = dst.vectorizable ? vectorRegisters(l, dst.elementType) : 1;
  Value staging = v > 1 && src.elementType != dst.elementType ? allocLocal(v, dst.elementType)
                                                              : Value();
  forEachOwnedRun(src, v, [&](Value r0, ArrayRef<Value> coords) {
    auto scalar = [&]() {
      forEachRunElement(src, r0, coords, v, [&](ArrayRef<Value> c, Value x) {
        store(dst, c, convert(x, dst.elementType));
      });
    };
    if (v == 1) return scalar();
    vectorRunOrScalar(src, coords, dst, v, [&](ArrayRef<Value> dstIdx) {
      int64_t bytes = v * getElementBytes(dst.elementType);
      if (!staging) {
        tilenv::CopyVectorOp::create(b, loc, src.root, ValueRange{r0}, dst.root,
                                     operandIndices(dst, dstIdx), bytes);
        return;
      }
      for (int64_t j = 0; j < v; ++j) {
        Value x = memref::LoadOp::create(b, loc, src.root, ValueRange{add(r0, idx(j))});
        memref::StoreOp::create(b, loc, convert(x, dst.elementType), staging, ValueRange{idx(j)});
      }
      tilenv::CopyVectorOp::create(b, loc, staging, ValueRange{zeroIdx}, dst.root,
                                   operandIndices(dst, dstIdx), bytes);
    }, scalar);
  });
}

void TileLowering::lowerCopy(CopyOp op) {
  if (touchesTmem(op)) return copyTmem(op);
  Access src = resolve(op.getSource()), dst = resolve(op.getDest());
  if (src.isFragment() && dst.isFragment()) {
    if (src.layout != dst.layout)
      return fail(op, "copy between fragments with different layouts; run "
                      "tessel-layout-inference, which gives them one");
    int64_t regs = llvm::cast<FragmentLayoutAttr>(src.layout).getLayout().getNumRegisters();
    unrolledFor(regs, [&](Value r) {
      Value x = memref::LoadOp::create(b, loc, src.root, ValueRange{r});
      memref::StoreOp::create(b, loc, convert(x, dst.elementType), dst.root, ValueRange{r});
    });
    return;
  }
  if (dst.isFragment()) return copyToFragment(src, dst);
  if (src.isFragment()) return copyFromFragment(src, dst);
  if (isTmaStore(op, target)) return storeWithTma(op, src, dst, /*add=*/false);
  // A pipeline's loads (`async`) complete at its tile.cp_async_wait; every
  // other global-to-shared copy waits for itself. It is still issued by
  // cp.async: a thread's vectors are then all in flight at once, where a
  // load-then-store moves one per memory round trip (a 128x128 tile over 256
  // threads: 8 round trips before the first tensor-core op).
  bool global2shared = src.isGlobal() && dst.space == MemorySpace::shared;
  bool async = target.computeCapability >= 80 && global2shared;
  copyGlobalShared(src, dst, async);
  if (!async || op.getAsync()) return;
  // Copies in a row, with only address arithmetic and proxy fences between
  // them (the attention backward's K and V), wait once, after the last: its
  // wait_all covers them all, and the fence after it orders every write
  // before it.
  Operation *next = op->getNextNode();
  while (next && (llvm::isa<FenceProxyAsyncOp>(next) ||
                  (isMemoryEffectFree(next) && !next->getNumRegions())))
    next = next->getNextNode();
  auto nextCopy = llvm::dyn_cast_or_null<CopyOp>(next);
  bool nextWaits = nextCopy && !nextCopy.getAsync() && !touchesTmem(nextCopy) &&
                   getMemorySpace(nextCopy.getSource().getType()) == MemorySpace::global &&
                   getMemorySpace(nextCopy.getDest().getType()) == MemorySpace::shared;
  if (!nextWaits) tilenv::CpAsyncWaitOp::create(b, loc, IntegerAttr());
}

void TileLowering::lowerFill(FillOp op) {
  if (touchesTmem(op)) return fillTmem(op);
  Access dst = resolve(op.getDest());
  if (dst.isFragment()) {
    int64_t regs = llvm::cast<FragmentLayoutAttr>(dst.layout).getLayout().getNumRegisters();
    unrolledFor(regs, [&](Value r) {
      memref::StoreOp::create(b, loc, op.getValue(), dst.root, ValueRange{r});
    });
    return;
  }
  forEachElement(dst.tileShape, 1,
                 [&](ArrayRef<Value> index) { store(dst, index, op.getValue()); });
}

