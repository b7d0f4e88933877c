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
#include "tessel/Transforms/Remarks.h"

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

/// Elements per move of a copy between global and shared memory: 16 bytes
/// when both sides hold the same type contiguously; alignment and bounds are
/// checked per vector at run time, with an element-wise path for the vectors
/// that fail (tile edges, odd strides). `whyNarrower`, where given, says why
/// a move is narrower than 16 bytes.
static int64_t copyVectorWidth(const Access &src, const Access &dst,
                               std::string *whyNarrower = nullptr) {
  auto say = [&](std::string why) {
    if (whyNarrower) *whyNarrower = std::move(why);
  };
  if (src.elementType != dst.elementType) {
    say("the copy converts its element type, so it moves one element at a time");
    return 1;
  }
  if (!src.vectorizable || !dst.vectorizable) {
    say(std::string("its ") + (src.vectorizable ? "destination" : "source") +
        " is not contiguous along the tile's last dimension (or its affine layout does not step "
        "by one element along it), so it moves one element at a time");
    return 1;
  }
  int64_t bytes = getElementBytes(src.elementType);
  int64_t vector = 16 / bytes, last = src.tileShape.back();
  while (vector > 1 && last % vector) vector /= 2;
  if (vector * bytes < 4) vector = 1;
  if (vector * bytes < 16)
    say("the tile's rows of " + std::to_string(last) + " elements are not a multiple of 16 bytes, so "
        "it moves " + std::to_string(vector * bytes) + " bytes at a time");
  return vector;
}

void TileLowering::copyGlobalShared(const Access &src, const Access &dst, bool async) {
  ArrayRef<int64_t> shape = src.tileShape;
  int64_t vector = copyVectorWidth(src, dst);
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
  Value cond = andI(insideShape(last, frag.tileShape, llvm::dyn_cast_or_null<FragmentLayoutAttr>(frag.layout)),
                    inBounds(mem, memIdx, v - 1));
  cond = andI(cond, aligned(mem, memIdx, v));
  OpBuilder::InsertionGuard g(b);
  auto ifOp = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/true);
  b.setInsertionPointToStart(ifOp.thenBlock());
  vector(memIdx);
  b.setInsertionPointToStart(ifOp.elseBlock());
  scalar();
}

std::optional<TileLowering::SplitOffsets>
TileLowering::splitSharedOffsets(const Access &frag, const Access &mem, int64_t v) {
  auto shared = llvm::dyn_cast_or_null<SharedLayoutAttr>(mem.layout);
  if (!shared || mem.isGlobal()) return std::nullopt;
  SmallVector<int64_t> origin;
  for (Value offset : mem.offsets) {
    std::optional<int64_t> c = getConstantIntValue(offset);
    if (!c) return std::nullopt;
    origin.push_back(*c);
  }
  layout::SharedLayout sl = shared.getLayout();
  FragmentLayout l = llvm::cast<FragmentLayoutAttr>(frag.layout).getLayout();
  auto offsetOf = [&](int64_t r, int64_t thread) -> std::optional<int64_t> {
    SmallVector<int64_t> coord = l.apply(r, thread), root(origin);
    for (auto [k, d] : llvm::enumerate(mem.rootDims)) {
      if (coord[k] >= mem.tileShape[k]) return std::nullopt;
      root[d] += coord[k];
    }
    return sl.apply(root);
  };
  // Threads past the count that runs the copy do not exist (a layout for
  // three warpgroups is one for four whose last holds padding).
  const int64_t registers = l.getNumRegisters();
  const int64_t threads = std::min<int64_t>(l.getNumThreads(), this->threads);
  std::optional<int64_t> base = offsetOf(0, 0);
  if (!base) return std::nullopt;
  SplitOffsets split{Value(), {}, true};
  // Runs start at multiples of v: the bits below never vary.
  for (int64_t bitValue = 1; bitValue < registers; bitValue <<= 1) {
    std::optional<int64_t> o = bitValue < v ? base : offsetOf(bitValue, 0);
    if (!o) return std::nullopt;
    split.registerBits.push_back(*o ^ *base);
  }
  SmallVector<int64_t> threadOffsets;
  for (int64_t t = 0; t < threads; ++t) {
    std::optional<int64_t> o = offsetOf(0, t);
    if (!o) return std::nullopt;
    threadOffsets.push_back(*o);
  }
  for (int64_t r0 = 0; r0 < registers; r0 += v) {
    int64_t registerPart = 0;
    for (auto [i, part] : llvm::enumerate(split.registerBits))
      if (r0 >> i & 1) registerPart ^= part;
    for (int64_t t = 0; t < threads; ++t) {
      int64_t first = threadOffsets[t] ^ registerPart;
      if (first % v) return std::nullopt;
      for (int64_t j = 0; j < v; ++j)
        if (offsetOf(r0 + j, t) != first + j) return std::nullopt;
      split.disjoint = split.disjoint && !(threadOffsets[t] & registerPart);
    }
  }
  split.threadPart = layoutIndex(mem, rootIndices(mem, threadCoords(
                                                         llvm::cast<FragmentLayoutAttr>(frag.layout))));
  return split;
}

Value TileLowering::splitIndex(const Access &mem, const SplitOffsets &split, Value r0) {
  Value registerPart = zeroIdx;
  for (auto [i, part] : llvm::enumerate(split.registerBits))
    if (part) registerPart = xorI(registerPart, mul(bit(r0, i), idx(part)));
  Value index = split.disjoint ? add(split.threadPart, registerPart)
                               : xorI(split.threadPart, registerPart);
  return mem.stageBase ? add(mem.stageBase, index) : index;
}

void TileLowering::copyToFragment(const Access &src, const Access &dst) {
  auto attr = llvm::cast<FragmentLayoutAttr>(dst.layout);
  FragmentLayout l = attr.getLayout();
  int64_t v = src.vectorizable ? vectorRegisters(l, src.elementType) : 1;
  Value staging = v > 1 && src.elementType != dst.elementType ? allocLocal(v, src.elementType)
                                                              : Value();
  std::optional<SplitOffsets> split = splitSharedOffsets(dst, src, v);
  unrolledFor(l.getNumRegisters() / v, [&](Value group) {
    Value r0 = mul(group, idx(v));
    auto vectorMove = [&](ValueRange srcOperands) {
      int64_t bytes = v * getElementBytes(src.elementType);
      if (!staging) {
        tilenv::CopyVectorOp::create(b, loc, src.root, srcOperands, dst.root, ValueRange{r0},
                                     bytes);
        return;
      }
      tilenv::CopyVectorOp::create(b, loc, src.root, srcOperands, staging, ValueRange{zeroIdx},
                                   bytes);
      for (int64_t j = 0; j < v; ++j) {
        Value x = memref::LoadOp::create(b, loc, staging, ValueRange{idx(j)});
        memref::StoreOp::create(b, loc, convert(x, dst.elementType), dst.root,
                                ValueRange{add(r0, idx(j))});
      }
    };
    if (split) {
      Value index = splitIndex(src, *split, r0);
      if (v > 1) return vectorMove(index);
      Value x = memref::LoadOp::create(b, loc, src.root, ValueRange{index});
      memref::StoreOp::create(b, loc, convert(x, dst.elementType), dst.root, ValueRange{r0});
      return;
    }
    SmallVector<Value> coords = coordsAt(attr, r0);
    auto scalar = [&]() {
      for (int64_t j = 0; j < v; ++j) {
        OpBuilder::InsertionGuard g(b);
        SmallVector<Value> c(coords);
        c.back() = add(c.back(), idx(j));
        guard(insideShape(c, dst.tileShape, attr));
        memref::StoreOp::create(b, loc, convert(load(src, c), dst.elementType), dst.root,
                                ValueRange{add(r0, idx(j))});
      }
    };
    if (v == 1) return scalar();
    vectorRunOrScalar(dst, coords, src, v, [&](ArrayRef<Value> srcIdx) {
      vectorMove(operandIndices(src, srcIdx));
    }, scalar);
  });
}

void TileLowering::forEachOwnedRun(const Access &frag, int64_t v,
                                   function_ref<void(Value, ArrayRef<Value>)> body,
                                   bool withCoords) {
  auto attr = llvm::cast<FragmentLayoutAttr>(frag.layout);
  FragmentLayout l = attr.getLayout();
  Value threadOwner = threadOwns(l);
  unrolledFor(l.getNumRegisters() / v, [&](Value group) {
    Value r0 = mul(group, idx(v));
    OpBuilder::InsertionGuard g(b);
    // Replicas hold copies; only the owner writes.
    guard(andI(threadOwner, registerOwns(l, r0)));
    body(r0, withCoords ? coordsAt(attr, r0) : SmallVector<Value>());
  });
}

void TileLowering::forEachRunElement(const Access &frag, Value r0, ArrayRef<Value> coords,
                                     int64_t v, function_ref<void(ArrayRef<Value>, Value)> body) {
  for (int64_t j = 0; j < v; ++j) {
    OpBuilder::InsertionGuard g(b);
    SmallVector<Value> c(coords);
    c.back() = add(c.back(), idx(j));
    guard(insideShape(c, frag.tileShape, llvm::cast<FragmentLayoutAttr>(frag.layout)));
    body(c, memref::LoadOp::create(b, loc, frag.root, ValueRange{add(r0, idx(j))}));
  }
}

void TileLowering::copyFromFragment(const Access &src, const Access &dst) {
  FragmentLayout l = llvm::cast<FragmentLayoutAttr>(src.layout).getLayout();
  int64_t v = dst.vectorizable ? vectorRegisters(l, dst.elementType) : 1;
  Value staging = v > 1 && src.elementType != dst.elementType ? allocLocal(v, dst.elementType)
                                                              : Value();
  std::optional<SplitOffsets> split = splitSharedOffsets(src, dst, v);
  forEachOwnedRun(src, v, [&](Value r0, ArrayRef<Value> coords) {
    auto vectorMove = [&](ValueRange dstOperands) {
      int64_t bytes = v * getElementBytes(dst.elementType);
      if (!staging) {
        tilenv::CopyVectorOp::create(b, loc, src.root, ValueRange{r0}, dst.root, dstOperands,
                                     bytes);
        return;
      }
      // f32 to FP8, bf16 or f16 two registers a conversion (the same bits).
      bool pairs = v % 2 == 0 && src.elementType.isF32() &&
                   llvm::isa<Float8E4M3FNType, Float8E5M2Type, BFloat16Type, Float16Type>(
                       dst.elementType);
      auto loadAt = [&](int64_t j) {
        return memref::LoadOp::create(b, loc, src.root, ValueRange{add(r0, idx(j))}).getResult();
      };
      for (int64_t j = 0; j < v; j += pairs ? 2 : 1) {
        if (!pairs) {
          memref::StoreOp::create(b, loc, convert(loadAt(j), dst.elementType), staging,
                                  ValueRange{idx(j)});
          continue;
        }
        Value lo = loadAt(j), hi = loadAt(j + 1);
        auto pair = tilenv::ConvertPairOp::create(b, loc, dst.elementType, dst.elementType, lo, hi);
        memref::StoreOp::create(b, loc, pair.getLoResult(), staging, ValueRange{idx(j)});
        memref::StoreOp::create(b, loc, pair.getHiResult(), staging, ValueRange{idx(j + 1)});
      }
      tilenv::CopyVectorOp::create(b, loc, staging, ValueRange{zeroIdx}, dst.root, dstOperands,
                                   bytes);
    };
    if (split) {
      Value index = splitIndex(dst, *split, r0);
      if (v > 1) return vectorMove(index);
      Value x = memref::LoadOp::create(b, loc, src.root, ValueRange{r0});
      memref::StoreOp::create(b, loc, convert(x, dst.elementType), dst.root, ValueRange{index});
      return;
    }
    auto scalar = [&]() {
      forEachRunElement(src, r0, coords, v, [&](ArrayRef<Value> c, Value x) {
        store(dst, c, convert(x, dst.elementType));
      });
    };
    if (v == 1) return scalar();
    vectorRunOrScalar(src, coords, dst, v, [&](ArrayRef<Value> dstIdx) {
      vectorMove(operandIndices(dst, dstIdx));
    }, scalar);
  }, /*withCoords=*/!split);
}

void TileLowering::copyFragmentWindow(CopyOp op, const Access &src, const Access &dst) {
  bool fromWindow = op.getSource().getDefiningOp<RegionOp>() != nullptr;
  const Access &windowed = fromWindow ? src : dst, &own = fromWindow ? dst : src;
  SmallVector<int64_t> offsets;
  for (Value v : windowed.offsets) {
    std::optional<int64_t> c = getConstantIntValue(v);
    if (!c) return fail(op, "a window of a fragment at a run-time offset; run "
                            "tessel-fragment-windows, which makes its offsets constants");
    offsets.push_back(*c);
  }
  FragmentLayout parent = llvm::cast<FragmentLayoutAttr>(windowed.layout).getLayout();
  FragmentLayout mine = llvm::cast<FragmentLayoutAttr>(own.layout).getLayout();
  std::optional<layout::FragmentWindow> part =
      parent.window(offsets, windowed.windowShape, windowed.rootDims);
  if (!part || part->layout != mine)
    return fail(op, "a window of a fragment copied to registers that do not follow the "
                    "fragment's layout; run tessel-layout-inference");
  // Register r of the window's own fragment is register
  // registers(r) ^ base of the windowed one, in every thread.
  unrolledFor(mine.getNumRegisters(), [&](Value r) {
    Value theirs = xorI(applyMap(part->registers, r), idx(static_cast<int64_t>(part->base)));
    Value from = fromWindow ? theirs : r, to = fromWindow ? r : theirs;
    Value x = memref::LoadOp::create(b, loc, src.root, ValueRange{from});
    memref::StoreOp::create(b, loc, convert(x, dst.elementType), dst.root, ValueRange{to});
  });
}

void TileLowering::lowerCopy(CopyOp op) {
  if (touchesTmem(op)) return copyTmem(op);
  Access src = resolve(op.getSource()), dst = resolve(op.getDest());
  if (src.isFragment() && dst.isFragment() &&
      (op.getSource().getDefiningOp<RegionOp>() || op.getDest().getDefiningOp<RegionOp>()))
    return copyFragmentWindow(op, src, dst);
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
  if (isTmaStore(op, target)) return storeTileWithTma(op, src, dst);
  // A pipeline's loads (`async`) complete at its tile.cp_async_wait; every
  // other global-to-shared copy waits for itself. It is still issued by
  // cp.async: a thread's vectors are then all in flight at once, where a
  // load-then-store moves one per memory round trip (a 128x128 tile over 256
  // threads: 8 round trips before the first tensor-core op).
  bool global2shared = src.isGlobal() && dst.space == MemorySpace::shared;
  bool async = target.computeCapability >= 80 && global2shared;
  std::string whyNarrower;
  copyVectorWidth(src, dst, &whyNarrower);
  if (!whyNarrower.empty())
    emitMissed(op, "tessel-lower-tile-ops", missed::kVectorization)
        << "this copy is not moved in 16-byte vectors: " << whyNarrower;
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

void TileLowering::storeTileWithTma(CopyOp op, const Access &src, const Access &dst) {
  // A TMA store whose box starts before its tensor is an illegal
  // instruction (seen on the H100; a load zero-fills the same box). Where
  // the window may start there (a convolution's halo), the threads store
  // it instead, dropping what lies outside (the condition is the same for
  // every thread), and the TMA boxes are issued only otherwise.
  Value startsInside;
  for (Value offset : dst.offsets)
    if (!isProvablyNonNegative(offset))
      startsInside = andI(startsInside, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge,
                                                              offset, zeroIdx));
  storeWithTma(op, src, dst, /*add=*/false, startsInside);
  if (!startsInside) return;
  OpBuilder::InsertionGuard g(b);
  auto byThreads = scf::IfOp::create(b, loc, startsInside, /*withElseRegion=*/true);
  b.setInsertionPointToStart(byThreads.elseBlock());
  copyGlobalShared(src, dst, /*async=*/false);
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

