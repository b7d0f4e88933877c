//===- LayoutInferenceGemms.cpp - gemms' instructions and accumulators -===//
//
// Part of tessel-layout-inference: each gemm picks its tensor-core
// instruction (tcgen05.mma for a tensor-memory accumulator, wgmma on sm_90a
// where the tile allows it, mma.sync otherwise, saying why in a remark on
// sm_90a), splits its tile over warps by its policy (full_row where the
// accumulator reaches a register operand A) and fixes its accumulator's
// layout; a fragment copied to or from tensor memory takes the .32x32b one.
//
//===----------------------------------------------------------------------===//
#include "LayoutInference.h"
#include "tessel/Dialect/TileNV/TileNVDialect.h"
#include "tessel/Transforms/BufferUtils.h"
#include "tessel/Transforms/Remarks.h"

#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;
using namespace tessel::layout_inference;

void LayoutInference::collectTies() {
  for (auto &[loop, accesses] : loopAccesses)
    for (const LoopAccess &a : accesses) tied.unionSets(accesses.front().fragment, a.fragment);
  kernel.walk([&](CopyOp copy) {
    if (isFragment(copy.getSource()) && isFragment(copy.getDest()))
      tied.unionSets(getRootBuffer(copy.getSource()), getRootBuffer(copy.getDest()));
  });
  kernel.walk([&](GemmOp gemm) {
    if (isFragment(gemm.getA()))
      registerOperandTie.try_emplace(tied.getOrInsertLeaderValue(getRootBuffer(gemm.getA())), gemm);
  });
}

WarpPolicy LayoutInference::effectivePolicy(GemmOp gemm) {
  if (isFragment(gemm.getA())) return WarpPolicy::full_row;
  if (gemm.getPolicy() != WarpPolicy::square || !isFragment(gemm.getC())) return gemm.getPolicy();
  GemmOp reader =
      registerOperandTie.lookup(tied.getOrInsertLeaderValue(getRootBuffer(gemm.getC())));
  if (!reader) return windowedPolicy(gemm);
  emitMissed(gemm, "tessel-layout-inference", missed::kTensorCores)
      << "warps split along M only (full_row), not square: the accumulator's values reach the "
         "register operand A of the gemm at "
      << describeLocation(reader.getLoc()) << ", which is split that way";
  return WarpPolicy::full_row;
}

WarpPolicy LayoutInference::windowedPolicy(GemmOp gemm) {
  // Windows of the accumulator narrower in one dimension only: the warps
  // split the other, so that every window is in each thread's registers.
  ArrayRef<int64_t> shape = llvm::cast<MemRefType>(gemm.getC().getType()).getShape();
  // The first such windows in program order (the remark names one).
  RegionOp narrowRows, narrowCols;
  kernel.walk([&](RegionOp region) {
    if (region.getSource() != gemm.getC() || !isFragment(region.getSource())) return;
    if (!narrowRows && region.getSizes()[0] < shape[0]) narrowRows = region;
    if (!narrowCols && region.getSizes()[1] < shape[1]) narrowCols = region;
  });
  if (!narrowRows == !narrowCols) return WarpPolicy::square;
  RegionOp window = narrowCols ? narrowCols : narrowRows;
  // One warpgroup on wgmma has one split whatever the policy.
  int64_t threads = getExecutingThreads(gemm);
  bool choice = target.computeCapability != 90 ? threads > 32 : threads > 128;
  if (choice)
    emitMissed(gemm, "tessel-layout-inference", missed::kTensorCores)
        << "warps split along " << (narrowCols ? "M only (full_row)" : "N only (full_col)")
        << ", not square: the accumulator is used in windows of fewer "
        << (narrowCols ? "columns" : "rows") << " (at " << describeLocation(window.getLoc())
        << "), which each thread must hold a part of";
  return narrowCols ? WarpPolicy::full_row : WarpPolicy::full_col;
}

SmallVector<std::pair<int64_t, int64_t>> tessel::layout_inference::warpGrids(int64_t units, int64_t m, int64_t n,
                                                    WarpPolicy policy) {
  SmallVector<std::pair<int64_t, int64_t>> grids;
  if (policy == WarpPolicy::full_row) return {{units, 1}};
  if (policy == WarpPolicy::full_col) return {{1, units}};
  // The unit index is wm * gridN + wn, and a layout maps its bits: the
  // columns take a power of two of units, the rows the rest (three
  // warpgroups split [3, 1], six warps [3, 2] or [6, 1]).
  for (int64_t wn = 1; wn <= units; wn *= 2)
    if (units % wn == 0) grids.push_back({units / wn, wn});
  llvm::stable_sort(grids, [&](auto x, auto y) {
    auto skew = [&](std::pair<int64_t, int64_t> g) {
      double tm = double(m) / g.first, tn = double(n) / g.second;
      return std::max(tm, tn) / std::min(tm, tn);
    };
    return skew(x) < skew(y) || (skew(x) == skew(y) && x.first > y.first);
  });
  return grids;
}

LogicalResult LayoutInference::placeTcgen05Gemm(GemmOp gemm) {
  auto a = llvm::cast<MemRefType>(gemm.getA().getType());
  auto c = llvm::cast<MemRefType>(gemm.getC().getType());
  int64_t m = c.getDimSize(0), n = c.getDimSize(1);
  int64_t k = gemm.getTransposeA() ? a.getDimSize(0) : a.getDimSize(1);
  if (target.computeCapability < 100)
    return gemm.emitError("a gemm into tensor memory is tcgen05.mma, sm_100a's; the target is ")
           << target.arch;
  if (std::optional<GemmInstruction> forced = gemm.getInstruction();
      forced && *forced != GemmInstruction::tcgen05)
    return gemm.emitError("a gemm into tensor memory is tcgen05.mma, not ")
           << stringifyGemmInstruction(*forced);
  Type in = a.getElementType();
  std::string why;
  bool scaled = static_cast<bool>(gemm.getScaleA());
  std::optional<layout::Tcgen05Formats> formats =
      tilenv::tcgen05Formats(in, c.getElementType(), why, scaled);
  if (!formats) return gemm.emitError("a tcgen05 gemm: ") << why;
  for (Value scales : {gemm.getScaleA(), gemm.getScaleB()})
    if (scales && getRootBuffer(scales) != scales && !scales.getDefiningOp<StageOp>())
      return gemm.emitError("block scales are whole shared buffers (tcgen05.cp reads them by "
                            "descriptor), not windows of one");
  // f16 and f32 accumulators are both kind::f16's, but tensor memory holds
  // the gemm's accumulator as f32 (or s32).
  if (formats->d == 0)
    return gemm.emitError("a tcgen05 gemm accumulates in f32 tensor memory, got ")
           << c.getElementType();
  if (isFragment(gemm.getA()))
    return gemm.emitError("tcgen05 gemm takes A from shared or tensor memory, not registers");
  int64_t elementBytes = in.getIntOrFloatBitWidth() / 8;
  if (inTmem(gemm.getA()) && elementBytes != 2)
    return gemm.emitError("a tcgen05 operand A in tensor memory is 16-bit (f16 or bf16); ")
           << in << " operands are read from shared memory";
  if (inTmem(gemm.getA())) {
    // The ts form: A [128, K] in tensor memory, row m in lane m, K packed
    // two values to a column.
    auto alloc = getRootBuffer(gemm.getA()).getDefiningOp<AllocOp>();
    if (gemm.getTransposeA() || alloc.getUnpacked() || a.getDimSize(0) != 128)
      return gemm.emitError("a tcgen05 operand A in tensor memory is [128, K], K-major and packed "
                            "(two 16-bit values a column), got ")
             << a << (gemm.getTransposeA() ? " transposed" : "")
             << (alloc.getUnpacked() ? " unpacked" : "");
  } else if (getMemorySpace(a) != MemorySpace::shared) {
    return gemm.emitError("tcgen05 gemm operand A must be in shared or tensor memory");
  }
  if (getMemorySpace(llvm::cast<MemRefType>(gemm.getB().getType())) != MemorySpace::shared)
    return gemm.emitError("tcgen05 gemm operand B must be in shared memory");
  if (m != 128)
    return gemm.emitError("tcgen05 gemm computes all 128 lanes (M = 128); got M = ") << m;
  if (n % 16 || n < 16 || n > 256)
    return gemm.emitError("tcgen05.mma with M = 128 takes N from 16 to 256 in steps of 16; got N = ")
           << n;
  // One instruction reads 32 bytes of K.
  int64_t kStep = 32 / elementBytes;
  if (k % kStep)
    return gemm.emitError("gemm K (") << k << ") must be a multiple of " << kStep
                                      << ", the K of tcgen05.mma kind::" << layout::name(formats->kind)
                                      << " for " << in << " operands";
  // One thread issues the MMAs (a one-warp role may); the kernel's
  // warpgroups reach the 128 lanes.
  if (kernel.getThreads() % 128)
    return gemm.emitError("a kernel with a tcgen05 gemm runs whole warpgroups; it has ")
           << kernel.getThreads() << " threads";
  gemm.setInstructionAttr(GemmInstructionAttr::get(ctx, GemmInstruction::tcgen05));
  gemm.setWarpsAttr(DenseI64ArrayAttr::get(ctx, {1, 1}));
  return success();
}

LogicalResult LayoutInference::placeTmemCopy(CopyOp copy) {
  bool fromTmem = inTmem(copy.getSource());
  Value tmem = fromTmem ? copy.getSource() : copy.getDest();
  Value other = fromTmem ? copy.getDest() : copy.getSource();
  MemorySpace otherSpace = getMemorySpace(llvm::cast<MemRefType>(other.getType()));
  if (otherSpace == MemorySpace::tmem || otherSpace == MemorySpace::local)
    return copy.emitError("tensor memory is copied to and from fragments, shared or global "
                          "memory, not ")
           << stringifyMemorySpace(otherSpace) << " memory";
  auto view = llvm::cast<MemRefType>(tmem.getType());
  int64_t n = view.getRank() == 2 ? view.getDimSize(1) : 0;
  if (view.getRank() != 2 || view.getDimSize(0) != 128 || threads % 128 || !llvm::isPowerOf2_64(n) ||
      !llvm::isPowerOf2_64(threads) || n < threads / 128)
    return copy.emitError("a tensor-memory copy moves a [128, n] tile, n a power of two, by whole "
                          "warpgroups (at least one column each); got ")
           << view << " on " << threads << " threads";
  if (!isFragment(other)) return success(); // through registers, row by row
  return assign(other, FragmentLayout::tmemRows(n, threads / 128), copy);
}

/// Whether an [m, n] accumulator splits over a [gridM, gridN] grid of warps
/// (or warpgroups) into tiles a layout maps: each unit's tile a power of two
/// (its N may be padded where `wholeColumn` allows one column of units), and
/// a grid that is not a power of two padded in its slowest bits only (the
/// padded units are the ones that do not exist).
static bool splitsEvenly(int64_t m, int64_t n, int64_t gridM, int64_t gridN,
                         bool wholeColumn = false) {
  int64_t tileM = m / gridM, tileN = n / gridN;
  if (!llvm::isPowerOf2_64(tileM)) return false;
  if (!llvm::isPowerOf2_64(tileN) && !(wholeColumn && gridN == 1)) return false;
  return llvm::isPowerOf2_64(gridN) || gridM == 1;
}

FailureOr<bool> LayoutInference::placeOnWgmma(GemmOp gemm, int64_t m, int64_t n, int64_t k,
                                              WarpPolicy policy, bool aInRegisters) {
  for (auto [gm, gn] : warpGrids(threads / 128, m, n, policy)) {
    if (m % (gm * 64) || n % (gn * 8) || n / gn > 256) continue;
    // A padded N (not a power of two per warpgroup) stays on one warpgroup
    // column; each warpgroup's rows are a power of two (several 64-row
    // instructions), and a count of warpgroup columns that is not a power
    // of two needs a single row of them.
    if (!splitsEvenly(m, n, gm, gn, /*wholeColumn=*/true)) continue;
    gemm.setInstructionAttr(GemmInstructionAttr::get(ctx, GemmInstruction::wgmma));
    gemm.setWarpsAttr(DenseI64ArrayAttr::get(ctx, {gm, gn}));
    if (aInRegisters &&
        failed(assign(gemm.getA(), FragmentLayout::wgmmaAccumulator(m, k, gm, 1), gemm)))
      return failure();
    if (failed(assign(gemm.getC(), FragmentLayout::wgmmaAccumulator(m, n, gm, gn), gemm)))
      return failure();
    if (!llvm::isPowerOf2_64(n / gn))
      emitMissed(gemm, "tessel-layout-inference", missed::kTensorCores)
          << "the accumulator's register layout pads N = " << n << " to "
          << llvm::PowerOf2Ceil(n) << ": " << (m / gm / 64) * (int64_t(llvm::PowerOf2Ceil(n)) - n) / 2
          << " of its registers a thread hold no value";
    return true;
  }
  return false;
}

/// M and N index the accumulator's registers, whose layouts map index
/// bits (powers of two); K only counts instruction steps, so it may be any
/// multiple of the instruction's K where A is read from shared memory (512
/// + 64 = 576 for MLA's latent and rope parts in one product). An A in
/// registers is itself an accumulator-shaped fragment, so its K is an extent
/// of one.
/// N may also be any multiple of 8 up to 256 where wgmma takes the gemm on
/// one warpgroup column (`wgmmaN`): its accumulator's registers are the 8-column
/// chunks in order, the first of a layout padded to the next power of two.
/// With a count of warps that is not a power of two (three warpgroups), M or
/// N may be that count's odd factor times a power of two: each warp's share
/// is then a power of two (192 rows on three warpgroups).
static LogicalResult checkGemmExtents(GemmOp gemm, int64_t m, int64_t n, int64_t k,
                                      int64_t instructionK, bool aInRegisters, int64_t warps,
                                      bool wgmmaN = false) {
  bool wgmmaExtent = wgmmaN && n % 8 == 0 && n <= 256;
  auto oddPart = [](int64_t x) { return x >> llvm::countr_zero(static_cast<uint64_t>(x)); };
  for (auto [name, extent] : {std::pair{"M", m}, {"N", n}}) {
    if (llvm::isPowerOf2_64(extent) || (name[0] == 'N' && wgmmaExtent)) continue;
    if (extent > 0 && warps % oddPart(extent) == 0) continue;
    return gemm.emitError("gemm tile extents M and N must be powers of two (the "
                          "accumulator's register layout maps index bits; N may be a multiple "
                          "of 8 up to 256 on sm_90a's wgmma), got ")
           << name << " = " << extent << " on " << warps
           << " warps; split the tile into gemms on power-of-two windows (on a warp count "
              "that is not a power of two, an extent may be its odd factor times a power of "
              "two, 192 on 12 warps)";
  }
  if (k % instructionK)
    return gemm.emitError("gemm K (") << k << ") must be a multiple of " << instructionK
                                      << ", the K of the tensor-core instruction for "
                                      << llvm::cast<MemRefType>(gemm.getA().getType()).getElementType()
                                      << " operands";
  if (aInRegisters && !llvm::isPowerOf2_64(k))
    return gemm.emitError("gemm K (")
           << k << ") of an operand A in registers must be a power of two (A is laid out as an "
           << "accumulator); K of an A in shared memory may be any multiple of " << instructionK;
  return success();
}

LogicalResult LayoutInference::placeEightBitMmaSync(GemmOp gemm, int64_t m, int64_t n,
                                                    int64_t k) {
  int64_t warps = threads / 32;
  for (auto [wm, wn] : warpGrids(warps, m, n, effectivePolicy(gemm))) {
    if (m % (wm * 16) || n % (wn * 8) || !splitsEvenly(m, n, wm, wn)) continue;
    gemm.setInstructionAttr(GemmInstructionAttr::get(ctx, GemmInstruction::mma_sync));
    gemm.setWarpsAttr(DenseI64ArrayAttr::get(ctx, {wm, wn}));
    if (isFragment(gemm.getA()) &&
        failed(assign(gemm.getA(), FragmentLayout::mmaAccumulator(m, k, wm, 1), gemm)))
      return failure();
    return assign(gemm.getC(), FragmentLayout::mmaAccumulator(m, n, wm, wn), gemm);
  }
  return gemm.emitError("gemm tile [")
         << m << ", " << n << "] cannot be split " << stringifyWarpPolicy(gemm.getPolicy())
         << " over " << warps << " warps for mma.sync m16n8k32: each warp needs a multiple of 16 "
         << "rows and 8 columns";
}

LogicalResult LayoutInference::placeEightBitGemm(GemmOp gemm) {
  auto a = llvm::cast<MemRefType>(gemm.getA().getType());
  auto c = llvm::cast<MemRefType>(gemm.getC().getType());
  int64_t m = c.getDimSize(0), n = c.getDimSize(1), k = a.getDimSize(1);
  Type in = a.getElementType(), acc = c.getElementType();
  bool integer = in.isInteger(8);
  // FP8 products accumulate in f32, or in f16 (wgmma's and mma.sync's
  // .f16 forms: half the registers, with f16's 11 bits).
  if (!tilenv::registerAccumulatorTaken(in, acc))
    return gemm.emitError("a gemm of ") << in << " operands accumulates in "
                                        << (integer ? "i32" : "f32 or f16") << ", got " << acc;
  // A may come from registers, accumulator-shaped (FP8 attention's P x V),
  // read with K in register order (tessel-k-major-operands permuted B).
  bool aInRegisters = isFragment(gemm.getA());
  if ((!aInRegisters && getMemorySpace(a) != MemorySpace::shared) ||
      getMemorySpace(llvm::cast<MemRefType>(gemm.getB().getType())) != MemorySpace::shared)
    return gemm.emitError("a gemm of ")
           << in << " operands reads B from shared memory and A from shared memory or registers";
  if (aInRegisters && !gemm.getBRegisterKOrder())
    return gemm.emitError("a gemm of ")
           << in << " operands with A in registers reads B with K in register order "
           << "(b_register_k_order, which tessel-k-major-operands arranges)";
  // 8-bit wgmma has no transposed form: both operands are K-major.
  if (gemm.getTransposeA() || !gemm.getTransposeB())
    return gemm.emitError("a gemm of ")
           << in << " operands reads both operands K-major (8-bit wgmma has no transposed "
           << "form): A as [M, K] without transpose_a, B as [N, K] with transpose_b";
  if (aInRegisters && gemm.getPolicy() == WarpPolicy::full_col)
    return gemm.emitError("a gemm operand A in registers splits the warps along M; use policy "
                          "full_row (or square)");
  if (failed(checkGemmExtents(gemm, m, n, k, 32, aInRegisters, threads / 32)))
    return failure();
  // Integer products run on mma.sync m16n8k32 before sm_90a (or when asked
  // for); FP8 ones too from sm_89 on (sm_89 itself has no wgmma). On
  // sm_100a a register accumulator that tessel-tmem-accumulators could not
  // move to tensor memory (it said why in a remark) runs on mma.sync, as a
  // 16-bit gemm's does.
  std::optional<GemmInstruction> forced = gemm.getInstruction();
  bool mmaSyncTakes = integer || target.computeCapability >= 89;
  bool withoutWgmma = target.computeCapability < 90 || target.computeCapability >= 100;
  if (mmaSyncTakes &&
      (forced == GemmInstruction::mma_sync || (!forced && withoutWgmma)))
    return placeEightBitMmaSync(gemm, m, n, k);
  if (!integer && target.computeCapability < 90)
    return gemm.emitError("a gemm of ")
           << in << " operands runs on mma.sync from sm_89 and on wgmma on sm_90a; target "
           << target.arch;
  if (forced == GemmInstruction::tcgen05)
    return gemm.emitError("a gemm on tcgen05.mma accumulates in tensor memory: allocate its "
                          "accumulator with alloc_tmem");
  if (target.computeCapability != 90 || (forced && *forced != GemmInstruction::wgmma))
    return gemm.emitError("a gemm of ")
           << in << " operands runs on wgmma (sm_90a) only; target " << target.arch
           << (forced ? ", instruction " + stringifyGemmInstruction(*forced).str() : "");
  if (threads % 128)
    return gemm.emitError("wgmma runs on whole warpgroups: ") << threads << " threads";
  FailureOr<bool> placed = placeOnWgmma(gemm, m, n, k, effectivePolicy(gemm), aInRegisters);
  if (failed(placed)) return failure();
  if (!*placed)
    return gemm.emitError("gemm tile [")
           << m << ", " << n << "] cannot be split " << stringifyWarpPolicy(gemm.getPolicy())
           << " over " << threads / 128 << " warpgroups for wgmma m64nNk32: each warpgroup needs "
           << "a multiple of 64 rows and 8 to 256 columns";
  return success();
}

LogicalResult LayoutInference::placeGemm(GemmOp gemm) {
  if (inTmem(gemm.getC())) return placeTcgen05Gemm(gemm);
  if (gemm.getScaleA())
    return gemm.emitError("block scales are tcgen05.mma's (kind::mxf8f6f4, sm_100a): a "
                          "block-scaled gemm accumulates in tensor memory (alloc_tmem)");
  auto a = llvm::cast<MemRefType>(gemm.getA().getType());
  auto c = llvm::cast<MemRefType>(gemm.getC().getType());
  int64_t m = c.getDimSize(0), n = c.getDimSize(1);
  int64_t k = gemm.getTransposeA() ? a.getDimSize(0) : a.getDimSize(1);
  Type in = a.getElementType();
  if (in.getIntOrFloatBitWidth() == 8) return placeEightBitGemm(gemm);
  if (!in.isF16() && !in.isBF16())
    return gemm.emitError("tensor-core gemm needs f16, bf16, FP8 (f8e4m3, f8e5m2) or 8-bit "
                          "integer operands, got ")
           << in;
  // f16 products may accumulate in f16 (the instructions' .f16 forms);
  // bf16 ones have only the f32 form.
  if (!tilenv::registerAccumulatorTaken(in, c.getElementType()))
    return gemm.emitError("tensor-core gemm of ")
           << in << " operands accumulates in f32" << (in.isF16() ? " or f16" : "") << ", got "
           << c.getElementType();
  // A may come from registers (FlashAttention's P x V): its layout is then
  // the accumulator layout of an [M, K] tile on the same warps, which is
  // what the instructions read, so warps split M only.
  bool aInRegisters = isFragment(gemm.getA());
  if (getMemorySpace(llvm::cast<MemRefType>(gemm.getB().getType())) != MemorySpace::shared)
    return gemm.emitError("gemm operand B must be in shared memory");
  if (!aInRegisters &&
      getMemorySpace(llvm::cast<MemRefType>(gemm.getA().getType())) != MemorySpace::shared)
    return gemm.emitError("gemm operand A must be in shared memory or a fragment");
  if (aInRegisters && gemm.getTransposeA())
    return gemm.emitError("a gemm operand A in registers cannot be transposed; transpose the "
                          "product that produces it instead");
  if (aInRegisters && gemm.getPolicy() == WarpPolicy::full_col)
    return gemm.emitError("a gemm operand A in registers splits the warps along M; use policy "
                          "full_row (or square)");
  bool wgmmaTarget = target.computeCapability == 90 && threads % 128 == 0 &&
                     gemm.getInstruction() != GemmInstruction::mma_sync;
  if (failed(checkGemmExtents(gemm, m, n, k, 16, aInRegisters, threads / 32, wgmmaTarget)))
    return failure();

  std::optional<GemmInstruction> forced = gemm.getInstruction();
  WarpPolicy policy = effectivePolicy(gemm);
  // wgmma: warpgroups of 128 threads, each owning a multiple of 64 rows and
  // at most 256 columns.
  bool wgmmaPossible = target.computeCapability == 90 && threads % 128 == 0;
  if (forced == GemmInstruction::wgmma && !wgmmaPossible)
    return gemm.emitError("wgmma needs sm_90a and a multiple of 128 threads (target ")
           << target.arch << ", " << threads << " threads)";
  if (wgmmaPossible && forced != GemmInstruction::mma_sync) {
    FailureOr<bool> placed = placeOnWgmma(gemm, m, n, k, policy, aInRegisters);
    if (failed(placed)) return failure();
    if (*placed) return success();
    if (forced == GemmInstruction::wgmma)
      return gemm.emitError("gemm tile [")
             << m << ", " << n << "] cannot be split " << stringifyWarpPolicy(policy) << " over "
             << threads / 128 << " warpgroups for wgmma m64nNk16: each warpgroup needs a "
             << "multiple of 64 rows and 8 to 256 columns";
  }
  if (!llvm::isPowerOf2_64(n))
    return gemm.emitError("gemm tile [")
           << m << ", " << n << "] has an N that is not a power of two, which only wgmma takes "
           << "(on one warpgroup column: " << stringifyWarpPolicy(policy)
           << " does not give one); mma.sync needs a power of two";
  // On sm_90a mma.sync runs at a fraction of wgmma's rate: say why a gemm
  // that did not ask for it gets it.
  if (target.computeCapability == 90 && !forced)
    emitMissed(gemm, "tessel-layout-inference", missed::kTensorCores)
        << "this gemm runs on mma.sync, not wgmma: "
        << (threads % 128 ? "wgmma runs on whole warpgroups and this code runs on " +
                                std::to_string(threads) + " threads"
                          : "its [" + std::to_string(m) + ", " + std::to_string(n) +
                                "] tile cannot be split " + stringifyWarpPolicy(policy).str() +
                                " over " + std::to_string(threads / 128) +
                                " warpgroups of a multiple of 64 rows and 8 to 256 columns each");
  int64_t warps = threads / 32;
  for (auto [wm, wn] : warpGrids(warps, m, n, policy)) {
    if (m % (wm * 16) || n % (wn * 8) || !splitsEvenly(m, n, wm, wn)) continue;
    gemm.setInstructionAttr(GemmInstructionAttr::get(ctx, GemmInstruction::mma_sync));
    gemm.setWarpsAttr(DenseI64ArrayAttr::get(ctx, {wm, wn}));
    if (aInRegisters &&
        failed(assign(gemm.getA(), FragmentLayout::mmaAccumulator(m, k, wm, 1), gemm)))
      return failure();
    return assign(gemm.getC(), FragmentLayout::mmaAccumulator(m, n, wm, wn), gemm);
  }
  auto grid = warpGrids(warps, m, n, policy).front();
  return gemm.emitError("gemm tile [")
         << m << ", " << n << "] cannot be split " << stringifyWarpPolicy(policy) << " over "
         << warps << " warps for mma.sync m16n8k16: M must be a multiple of "
         << 16 * grid.first << " (16 x " << grid.first << " warps) and N a multiple of "
         << 8 * grid.second << " (8 x " << grid.second << " warps)";
}
