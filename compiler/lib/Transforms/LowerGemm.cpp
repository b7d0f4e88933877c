//===- LowerGemm.cpp - tile.gemm on the tensor cores ----------------------===//
//
// Part of tessel-lower-tile-ops. The accumulator's layout (from
// tessel-layout-inference) fixes which warp computes which sub-tile; this
// file issues the instructions for it.
//
// mma.sync m16n8k16 (sm_80+): per k-step of 16, each warp loads its A
// fragments with ldmatrix.x4 (one per 16 rows) and its B fragments with
// ldmatrix.x4 (two 8-column tiles at a time; .trans for operands stored
// MN-major), then issues one mma per (16-row, 8-column) pair. Addresses go
// through the shared layout, so swizzled tiles are read without bank
// conflicts.
//
// wgmma m64nNk16 (sm_90a; m64nNk32 for 8-bit operands, both K-major): A
// and B stay in shared memory and are described by 64-bit matrix
// descriptors. A K-major operand (K contiguous) is a stack of 8-row
// core-matrix groups SBO = 8 rows apart; an MN-major operand is a stack
// of swizzle panels LBO apart along M/N, with 8-row K groups SBO apart. A
// k-step inside a swizzle panel moves the start address by the unswizzled
// offset: the hardware applies the XOR to the final address, which is why
// swizzled buffers start on a 1024-byte boundary.
//
//===----------------------------------------------------------------------===//
#include "TileLowering.h"
#include "tessel/Transforms/BufferUtils.h"

#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

/// Whether `op` (or an op nested in it) touches `root` through any view.
static bool touches(Operation *op, Value root) {
  WalkResult found = op->walk([&](Operation *nested) {
    for (Value v : nested->getOperands())
      if (llvm::isa<MemRefType>(v.getType()) && getRootBuffer(v) == root)
        return WalkResult::interrupt();
    return WalkResult::advance();
  });
  return found.wasInterrupted();
}

/// A gemm is still in flight when the block reads the result of an earlier
/// gemm it overtook (one issued before it and not read in between): the
/// wait for that earlier gemm must not take this one's wgmmas with it.
static bool overtakesAWaitedGemm(GemmOp gemm) {
  Block *block = gemm->getBlock();
  SmallVector<Value> unread;
  auto it = block->begin();
  for (; &*it != gemm.getOperation(); ++it) {
    llvm::erase_if(unread, [&](Value c) { return touches(&*it, c); });
    // Gemms under a condition count too (their group is waited for after
    // the scf.if, see tessel-defer-wgmma-waits).
    it->walk([&](GemmOp earlier) { unread.push_back(getRootBuffer(earlier.getC())); });
  }
  Value own = getRootBuffer(gemm.getC());
  for (++it; it != block->end(); ++it) {
    if (touches(&*it, own)) return false;
    if (llvm::any_of(unread, [&](Value c) { return touches(&*it, c); })) return true;
  }
  return false;
}

void TileLowering::decidePacking() {
  kernel.walk([&](GemmOp gemm) {
    auto aType = llvm::cast<MemRefType>(gemm.getA().getType());
    if (gemm.getInstruction() == GemmInstruction::wgmma &&
        getMemorySpace(aType) == MemorySpace::fragment && overtakesAWaitedGemm(gemm))
      packAFirst.insert(gemm);
  });
}

void TileLowering::lowerGemm(GemmOp op) {
  std::optional<GemmInstruction> instruction = op.getInstruction();
  if (!instruction || !op.getWarps())
    return fail(op, "gemm has no instruction; run tessel-layout-inference first");
  if (*instruction == GemmInstruction::tcgen05) return lowerTcgen05Gemm(op);
  if (*instruction == GemmInstruction::wgmma) return lowerWgmma(op);
  lowerMmaSync(op);
}

void TileLowering::lowerMmaSync(GemmOp op) {
  Access a = resolve(op.getA()), bOp = resolve(op.getB()), c = resolve(op.getC());
  ArrayRef<int64_t> warps = *op.getWarps();
  int64_t m = c.tileShape[0], n = c.tileShape[1];
  int64_t k = op.getTransposeA() ? a.tileShape[0] : a.tileShape[1];
  int64_t tileM = m / warps[0], tileN = n / warps[1];
  int64_t mTiles = tileM / 16, nTiles = tileN / 8;
  Type operandType = a.elementType;
  // An instruction takes 32 bytes of K (k16 of 16-bit, k32 of 8-bit
  // operands), and an 8x8 ldmatrix matrix 16 bytes of a row: `half` is that
  // many elements.
  int64_t half = 16 / getElementBytes(operandType), kStepElements = 2 * half;

  Value warp = divC(threadId, 32), lane = remC(threadId, 32);
  // The first row of the warp's 16-row tile 0, and the rows between its
  // tiles (FragmentLayout::mmaAccumulator: contiguous, or interleaved in
  // fours as wgmma's warpgroups).
  bool interleaved = layout::FragmentLayout::isMmaInterleaved(warps[0], warps[1]);
  Value rowBase = interleaved ? add(mul(divC(warp, 4), idx(4 * tileM)), mul(remC(warp, 4), idx(16)))
                              : mul(divC(warp, warps[1]), idx(tileM));
  int64_t rowStep = interleaved ? 64 : 16;
  Value colBase = mul(remC(warp, warps[1]), idx(tileN));
  // Lane 8i + j gives the address of row j of the i-th 8x8 matrix.
  Value matrix = divC(lane, 8), row = remC(lane, 8);
  Value matrixLow = remC(matrix, 2), matrixHigh = divC(matrix, 2);

  int64_t accRegs = mTiles * nTiles * 4;
  if (op.getClearAccum()) {
    Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(c.elementType));
    unrolledFor(accRegs, [&](Value r) {
      memref::StoreOp::create(b, loc, zero, c.root, ValueRange{r});
    });
  }
  // An A fragment already holds the instruction's A registers: for k-step
  // ks and 16-row tile mi, 8 (16 of 8 bits) elements from 8 * ks + mi * k /
  // 2 (its layout is the accumulator layout of [m, k], column tiles before
  // row tiles; 8-bit ones are read with B in register K order).
  bool aInRegisters = a.isFragment();
  if (aInRegisters && getElementBytes(operandType) == 1 && !op.getBRegisterKOrder())
    return fail(op, "an 8-bit A in registers needs B with K in register order "
                    "(b_register_k_order; run tessel-k-major-operands)");
  Value aRegs = aInRegisters ? a.root : allocLocal(mTiles * 4, b.getI32Type());
  Value bRegs = allocLocal(std::max<int64_t>(nTiles, 2) * 2, b.getI32Type());
  auto address = [&](const Access &x, Value r, Value col) {
    return physicalIndex(x, rootIndices(x, ValueRange{r, col}));
  };

  unrolledFor(k / kStepElements, [&](Value kStep) {
    Value k0 = mul(kStep, idx(kStepElements));
    if (!aInRegisters) unrolledFor(mTiles, [&](Value mi) {
      Value m0 = add(rowBase, mul(mi, idx(rowStep)));
      // a0..a3 = rows 0-7/8-15 x the first 16 bytes of K, then x the next.
      Value offset =
          op.getTransposeA()
              ? address(a, add(add(k0, mul(matrixHigh, idx(8))), row), add(m0, mul(matrixLow, idx(8))))
              : address(a, add(add(m0, mul(matrixLow, idx(8))), row), add(k0, mul(matrixHigh, idx(half))));
      tilenv::LdMatrixOp::create(b, loc, a.root, offset, aRegs, mul(mi, idx(4)), 4,
                                 op.getTransposeA());
    });
    // Two 8-column tiles per ldmatrix.x4: b0, b1 of tile j, then of j + 1.
    int64_t pairs = std::max<int64_t>(nTiles / 2, 1);
    int64_t count = nTiles == 1 ? 2 : 4;
    unrolledFor(pairs, [&](Value pair) {
      Value n0 = add(colBase, mul(pair, idx(16)));
      Value offset =
          op.getTransposeB()
              ? address(bOp, add(add(n0, mul(matrixHigh, idx(8))), row), add(k0, mul(matrixLow, idx(half))))
              : address(bOp, add(add(k0, mul(matrixLow, idx(8))), row), add(n0, mul(matrixHigh, idx(8))));
      tilenv::LdMatrixOp::create(b, loc, bOp.root, offset, bRegs, mul(pair, idx(4)), count,
                                 !op.getTransposeB());
    });
    // Accumulator register of (16-row tile mi, 8-column tile nj) starts at
    // 4 * (nj + nTiles * mi): the layout's register bits are (column pair,
    // row half, column tile, row tile).
    unrolledFor(mTiles, [&](Value mi) {
      unrolledFor(nTiles, [&](Value nj) {
        Value accBase = mul(add(nj, mul(mi, idx(nTiles))), idx(4));
        Value aBase = aInRegisters ? add(mul(kStep, idx(kStepElements / 2)), mul(mi, idx(k / 2)))
                                   : mul(mi, idx(4));
        tilenv::MmaSyncOp::create(b, loc, c.root, accBase, aRegs, aBase, bRegs,
                                  mul(nj, idx(2)), TypeAttr::get(operandType));
      });
    });
  });
}

std::optional<layout::SharedLayout> TileLowering::descriptorLayout(Operation *op, const Access &x,
                                                                  StringRef name) {
  // Descriptors address whole swizzled buffers.
  auto attr = llvm::dyn_cast_or_null<SharedLayoutAttr>(x.layout);
  if (!attr || !attr.getSwizzleBytes() || x.tileShape != ArrayRef<int64_t>(x.rootShape)) {
    fail(op, "the tensor cores read operand " + name +
                 " through a descriptor: it must be a whole shared buffer with a swizzled "
                 "#tile.shared layout");
    return std::nullopt;
  }
  return attr.getLayout();
}

Value TileLowering::operandDescriptor(const Access &x, const layout::SharedLayout &l, bool mnMajor,
                                      Value r, Value col, bool tcgen05) {
  // The core matrices' start at stored (row, col): the unswizzled offset
  // within the buffer.
  int64_t w = l.getPanelWidth(), sw = l.getSwizzleBytes();
  Value elements = add(mul(add(mul(divC(col, w), idx(l.getRows())), r), idx(w)), remC(col, w));
  Value start = sharedAddress(x, elements);
  int64_t leading = mnMajor ? l.getRows() * sw : 16; // K-major: unused, encoded 1
  if (tcgen05)
    return tilenv::Tcgen05SmemDescOp::create(b, loc, b.getI64Type(), start, leading, 8 * sw, sw);
  return tilenv::WgmmaDescOp::create(b, loc, b.getI64Type(), start, leading, 8 * sw, sw);
}

void TileLowering::lowerWgmma(GemmOp op) {
  Access a = resolve(op.getA()), bOp = resolve(op.getB()), c = resolve(op.getC());
  ArrayRef<int64_t> groups = *op.getWarps();
  int64_t m = c.tileShape[0], n = c.tileShape[1];
  int64_t k = op.getTransposeA() ? a.tileShape[0] : a.tileShape[1];
  int64_t tileM = m / groups[0], tileN = n / groups[1];
  int64_t mTiles = tileM / 64;
  // Registers of one 64-row tile: the layout pads N to a power of two.
  int64_t tileRegisters = int64_t(llvm::PowerOf2Ceil(tileN)) / 2;
  // One instruction takes 32 bytes of K: 16 elements of 16 bits (k16), 32
  // of 8 bits (k32).
  int64_t kStepElements = 32 / (a.elementType.getIntOrFloatBitWidth() / 8);

  bool aInRegisters = a.isFragment();
  std::optional<layout::SharedLayout> la =
      aInRegisters ? std::nullopt : descriptorLayout(op, a, "A");
  std::optional<layout::SharedLayout> lb = descriptorLayout(op, bOp, "B");
  if ((!aInRegisters && !la) || !lb) return;

  Value group = divC(threadId, 128);
  Value rowBase = mul(divC(group, groups[1]), idx(tileM));
  Value colBase = mul(remC(group, groups[1]), idx(tileN));

  // A in registers is packed into 32-bit pairs, by default as each wgmma
  // takes them: ptxas then fences before each wgmma (C7519) and the first
  // ones start while the rest of A is still being converted. That splits
  // the group, so a gemm that stays in flight while an earlier one is
  // waited for (overtakesAWaitedGemm) packs all of A before its fence.
  // An 8-bit A's words are formed before the fence (tessel::fence_quads)
  // in any case.
  Value aWords = a.root;
  bool packFirst = aInRegisters && packAFirst.contains(op) &&
                   a.elementType.getIntOrFloatBitWidth() == 16;
  if (aInRegisters && a.elementType.getIntOrFloatBitWidth() == 8 && !op.getBRegisterKOrder())
    return fail(op, "an 8-bit A in registers needs B with K in register order "
                    "(b_register_k_order; run tessel-k-major-operands)");
  if (packFirst) {
    aWords = allocLocal(mTiles * k / 4, b.getI32Type());
    unrolledFor(mTiles * k / 4, [&](Value word) {
      Value lo = memref::LoadOp::create(b, loc, a.root, ValueRange{mul(word, idx(2))});
      Value hi = memref::LoadOp::create(b, loc, a.root, ValueRange{add(mul(word, idx(2)), idx(1))});
      Value packed = tilenv::PackPairOp::create(b, loc, b.getI32Type(), lo, hi);
      memref::StoreOp::create(b, loc, packed, aWords, ValueRange{word});
    });
  }
  tilenv::WgmmaFenceOp::create(b, loc);
  bool aMnMajor = op.getTransposeA(), bMnMajor = !op.getTransposeB();
  // One k-step's products; `accumulate` null adds to the accumulator, a
  // constant false overwrites it (scale-d 0).
  auto kStepProducts = [&](Value kStep, Value accumulate) {
    Value k0 = mul(kStep, idx(kStepElements));
    unrolledFor(mTiles, [&](Value mi) {
      Value m0 = add(rowBase, mul(mi, idx(64)));
      auto descB = [&] {
        return bMnMajor ? operandDescriptor(bOp, *lb, true, k0, colBase)
                        : operandDescriptor(bOp, *lb, false, colBase, k0);
      };
      if (aInRegisters) {
        // The thread's A registers for (ks, mi), as for mma.sync: 8
        // 16-bit or 16 8-bit elements, or 4 packed words.
        Value aBase = packFirst ? add(mul(kStep, idx(4)), mul(mi, idx(k / 4)))
                                : add(mul(kStep, idx(kStepElements / 2)), mul(mi, idx(k / 2)));
        tilenv::WgmmaRegAOp::create(b, loc, c.root, mul(mi, idx(tileRegisters)), aWords, aBase, descB(),
                                    b.getI64IntegerAttr(tileN), TypeAttr::get(a.elementType),
                                    bMnMajor ? b.getUnitAttr() : UnitAttr(), accumulate);
        return;
      }
      Value descA = aMnMajor ? operandDescriptor(a, *la, true, k0, m0)
                             : operandDescriptor(a, *la, false, m0, k0);
      tilenv::WgmmaOp::create(b, loc, c.root, mul(mi, idx(tileRegisters)), descA, descB(),
                              b.getI64IntegerAttr(tileN),
                              TypeAttr::get(a.elementType),
                              aMnMajor ? b.getUnitAttr() : UnitAttr(),
                              bMnMajor ? b.getUnitAttr() : UnitAttr(), accumulate);
    });
  };
  // A cleared accumulator: the first k-step overwrites it, so its registers
  // are never written before the wgmma reads them. That step is peeled off
  // the loop with a constant scale-d, which the emitted CUDA declares as a
  // write of the registers: the accumulator is then dead between one
  // gemm's readers and the next gemm that clears it, not live around the
  // enclosing loop (a [128, 128] score tile per warpgroup pair kept live
  // that way cost 64 registers a thread).
  int64_t kSteps = k / kStepElements;
  if (op.getClearAccum()) {
    kStepProducts(zeroIdx, arith::ConstantIntOp::create(b, loc, b.getI1Type(), 0));
    if (kSteps > 1)
      unrolledFor(kSteps - 1, [&](Value step) { kStepProducts(add(step, idx(1)), Value()); });
  } else {
    unrolledFor(kSteps, [&](Value step) { kStepProducts(step, Value()); });
  }
  tilenv::WgmmaCommitOp::create(b, loc);
  tilenv::WgmmaWaitOp::create(b, loc, 0, ValueRange{});
}
