//===- TesselLayoutInference.cpp - layouts for fragments and shared tiles -===//
//
// Strict constraints (annotations, gemm accumulators) are placed first, then
// propagated through parallel loops, reductions and copies until nothing
// changes, then every fragment still free gets an element-wise layout and
// propagation runs again. Each layout remembers the op that fixed it, so a
// conflict names both ops.
//
//===----------------------------------------------------------------------===//
#include "tessel/Transforms/BufferUtils.h"
#include "tessel/Transforms/Remarks.h"
#include "tessel/Transforms/Passes.h"
#include "tessel/Transforms/RegisterPressure.h"

#include "llvm/ADT/EquivalenceClasses.h"
#include "llvm/Support/MathExtras.h"

namespace tessel {
#define GEN_PASS_DEF_TESSELLAYOUTINFERENCE
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;
using layout::FragmentLayout;
using layout::SharedLayout;

namespace {
/// A fragment access inside a parallel body: the fragment and which loop
/// dimensions index it.
struct LoopAccess {
  Value fragment;
  SmallVector<unsigned> dims;
};

struct Placed {
  FragmentLayout layout;
  Operation *origin;
};

class LayoutInference {
public:
  LayoutInference(KernelOp kernel, const TargetInfo &target)
      : kernel(kernel), target(target), ctx(kernel.getContext()) {}
  LogicalResult run();

private:
  KernelOp kernel;
  TargetInfo target;
  MLIRContext *ctx;
  int64_t threads = 0;
  DenseMap<Value, Placed> fragments;
  DenseMap<Operation *, Placed> loops;
  DenseMap<Operation *, SmallVector<LoopAccess>> loopAccesses;
  /// Loads of a fragment at indices other than the loop's own.
  SmallVector<Operation *> broadcastReads;
  SmallVector<Value> fragmentOrder;

  static bool isFragment(Value v) {
    auto type = llvm::dyn_cast<MemRefType>(v.getType());
    return type && getMemorySpace(type) == MemorySpace::fragment;
  }
  /// Each fragment's threads: those of the code that uses it, which must
  /// be one role (or none); layouts are placed for that many threads.
  LogicalResult collectFragmentThreads();
  DenseMap<Value, int64_t> fragmentThreads;
  LogicalResult collectLoopAccesses();
  /// Fragments whose layouts are tied (indexed by one parallel loop, or
  /// copied one to the other), and the ties that reach a gemm's register
  /// operand A, whose layout splits warps along M only.
  void collectTies();
  llvm::EquivalenceClasses<Value> tied;
  DenseMap<Value, GemmOp> registerOperandTie; // tie leader -> the gemm reading it as A
  /// The policy a gemm places its warps by: `square` becomes full_row where
  /// the accumulator is tied to a register operand A (FlashAttention's S,
  /// exponentiated into P for P x V), so that the program's layouts agree
  /// on every target: wgmma splits a warpgroup's warps along M anyway,
  /// mma.sync's square split would not.
  WarpPolicy effectivePolicy(GemmOp gemm);
  LogicalResult checkFragmentUses();
  LogicalResult assign(Value fragment, const FragmentLayout &layout, Operation *origin);
  LogicalResult placeGemm(GemmOp gemm);
  /// FP8 and 8-bit integer operands: wgmma k32, both operands K-major.
  LogicalResult placeEightBitGemm(GemmOp gemm);
  /// 8-bit integer operands on mma.sync m16n8k32.
  LogicalResult placeEightBitMmaSync(GemmOp gemm, int64_t m, int64_t n);
  /// Places `gemm` on wgmma with the first warpgroup grid of `policy` that
  /// splits [m, n]; false when none does.
  FailureOr<bool> placeOnWgmma(GemmOp gemm, int64_t m, int64_t n, int64_t k, WarpPolicy policy,
                               bool aInRegisters);
  /// A gemm whose accumulator is in tensor memory: tcgen05.mma.
  LogicalResult placeTcgen05Gemm(GemmOp gemm);
  /// A fragment copied to or from tensor memory takes the .32x32b layout.
  LogicalResult placeTmemCopy(CopyOp copy);
  LogicalResult propagate(bool &changed);
  LogicalResult propagateLoop(ParallelOp loop, bool &changed);
  /// Every thread holding every element: the layout broadcast reads need.
  FragmentLayout replicated(ArrayRef<int64_t> shape) const;
  LogicalResult checkBroadcastReads();
  int64_t preferredVector(Value fragment);
  void placeSharedLayouts();
};

std::string str(const FragmentLayout &l) { return "#tile.fragment<" + l.str() + ">"; }

LogicalResult LayoutInference::assign(Value fragment, const FragmentLayout &layout,
                                      Operation *origin) {
  auto it = fragments.find(fragment);
  if (it == fragments.end()) {
    fragments.try_emplace(fragment, Placed{layout, origin});
    return success();
  }
  if (it->second.layout == layout) return success();
  InFlightDiagnostic diag = origin->emitError("layout conflict on a fragment: '")
                            << origin->getName() << "' needs " << str(layout) << " but '"
                            << it->second.origin->getName() << "' gave it "
                            << str(it->second.layout);
  diag.attachNote(it->second.origin->getLoc()) << "the other layout comes from here";
  diag.attachNote(fragment.getLoc()) << "the fragment is allocated here";
  return failure();
}

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
  if (!reader) return WarpPolicy::square;
  emitMissed(gemm, "tessel-layout-inference", missed::kTensorCores)
      << "warps split along M only (full_row), not square: the accumulator's values reach the "
         "register operand A of the gemm at "
      << describeLocation(reader.getLoc()) << ", which is split that way";
  return WarpPolicy::full_row;
}

LogicalResult LayoutInference::collectFragmentThreads() {
  // Uses in program order, so that a mismatch is reported at the later one.
  DenseMap<Value, Operation *> firstUse;
  for (Value f : fragmentOrder) firstUse[f] = nullptr;
  WalkResult walk = kernel.walk<WalkOrder::PreOrder>([&](Operation *user) -> WalkResult {
    if (llvm::isa<AnnotateLayoutOp>(user)) return WalkResult::advance();
    for (Value operand : user->getOperands()) {
      auto it = firstUse.find(operand);
      if (it == firstUse.end()) continue;
      Operation *first = it->second;
      if (!first) {
        it->second = user;
        continue;
      }
      if (getExecutingThreads(user) == getExecutingThreads(first)) continue;
      InFlightDiagnostic diag =
          user->emitError("this fragment is used by ")
          << getExecutingThreads(user) << " threads here and by " << getExecutingThreads(first)
          << " threads elsewhere; a fragment belongs to the threads of one role (allocate one "
             "for each)";
      diag.attachNote(first->getLoc()) << "the other use";
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (walk.wasInterrupted()) return failure();
  for (Value f : fragmentOrder) {
    Operation *first = firstUse.lookup(f);
    int64_t count = first ? getExecutingThreads(first) : kernel.getThreads();
    if (count < 32 || !llvm::isPowerOf2_64(count))
      return (first ? first : f.getDefiningOp())->emitError(
                 "fragments need a power-of-two number of threads, at least 32 (layouts split "
                 "threads into lane and warp bits); these run on ")
             << count;
    fragmentThreads[f] = count;
  }
  return success();
}

LogicalResult LayoutInference::collectLoopAccesses() {
  WalkResult result = kernel.walk([&](ParallelOp loop) -> WalkResult {
    Block &body = loop.getBody().front();
    SmallVector<LoopAccess> &accesses = loopAccesses[loop];
    WalkResult inner = loop.getBody().walk([&](Operation *op) -> WalkResult {
      auto [memref, indices] = getElementAccess(op);
      if (!memref || !isFragment(memref)) return WalkResult::advance();
      if (!memref.getDefiningOp<AllocOp>())
        return op->emitError("fragments are indexed directly, not through tile.region");
      if (llvm::isa<AtomicAddOp>(op))
        return op->emitError("atomic_add into a fragment: fragments are private to threads; "
                             "use plain arithmetic");
      LoopAccess access{memref, {}};
      bool loopIndexed = true;
      for (Value index : indices) {
        auto arg = llvm::dyn_cast<BlockArgument>(index);
        if (!arg || arg.getOwner() != &body ||
            (!access.dims.empty() && arg.getArgNumber() <= access.dims.back()))
          loopIndexed = false;
        else
          access.dims.push_back(arg.getArgNumber());
      }
      if (loopIndexed) {
        accesses.push_back(access);
        return WalkResult::advance();
      }
      // Any other index reads a fragment every thread holds whole (a
      // replicated layout, such as a reduction over all its dimensions
      // gives): a broadcast value.
      if (!llvm::isa<memref::LoadOp>(op))
        return op->emitError("a fragment written inside tile.parallel is indexed by the "
                             "loop's own indices, in loop order (each thread holds only its "
                             "part)");
      broadcastReads.push_back(op);
      return WalkResult::advance();
    });
    return inner.wasInterrupted() ? WalkResult::interrupt() : WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

LogicalResult LayoutInference::checkFragmentUses() {
  // Fragments live in registers: only tile ops and parallel bodies, which
  // know the layout, may touch them.
  WalkResult result = kernel.walk([&](AllocOp alloc) -> WalkResult {
    if (!isFragment(alloc.getResult())) return WalkResult::advance();
    fragmentOrder.push_back(alloc.getResult());
    for (Operation *user : alloc->getUsers()) {
      if (llvm::isa<CopyOp, FillOp, GemmOp, ReduceOp, AtomicAddOp, AnnotateLayoutOp>(user))
        continue;
      if (llvm::isa<memref::LoadOp, memref::StoreOp>(user) && user->getParentOfType<ParallelOp>())
        continue;
      if (llvm::isa<RegionOp>(user))
        return user->emitError("a fragment cannot be windowed with tile.region; copy it to "
                               "shared memory first");
      return user->emitError("a fragment is read or written outside tile.parallel; its "
                             "elements are spread over the threads");
    }
    return WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

/// Warp grids [along M, along N] for a gemm, best first by the policy.
SmallVector<std::pair<int64_t, int64_t>> warpGrids(int64_t units, int64_t m, int64_t n,
                                                    WarpPolicy policy) {
  SmallVector<std::pair<int64_t, int64_t>> grids;
  if (policy == WarpPolicy::full_row) return {{units, 1}};
  if (policy == WarpPolicy::full_col) return {{1, units}};
  for (int64_t wm = 1; wm <= units; wm *= 2) grids.push_back({wm, units / wm});
  llvm::stable_sort(grids, [&](auto x, auto y) {
    auto skew = [&](std::pair<int64_t, int64_t> g) {
      double tm = double(m) / g.first, tn = double(n) / g.second;
      return std::max(tm, tn) / std::min(tm, tn);
    };
    return skew(x) < skew(y) || (skew(x) == skew(y) && x.first > y.first);
  });
  return grids;
}

static bool inTmem(Value v) {
  return getMemorySpace(llvm::cast<MemRefType>(v.getType())) == MemorySpace::tmem;
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
  if (!in.isF16() && !in.isBF16())
    return gemm.emitError("tcgen05 gemm needs f16 or bf16 operands, got ") << in;
  if (!c.getElementType().isF32())
    return gemm.emitError("tcgen05 gemm accumulates in f32 tensor memory, got ")
           << c.getElementType();
  if (isFragment(gemm.getA()))
    return gemm.emitError("tcgen05 gemm takes A from shared or tensor memory, not registers");
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
  if (k % 16)
    return gemm.emitError("gemm K (") << k << ") must be a multiple of 16, the K of tcgen05.mma "
                                      << "for 16-bit operands";
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

FailureOr<bool> LayoutInference::placeOnWgmma(GemmOp gemm, int64_t m, int64_t n, int64_t k,
                                              WarpPolicy policy, bool aInRegisters) {
  for (auto [gm, gn] : warpGrids(threads / 128, m, n, policy)) {
    if (m % (gm * 64) || n % (gn * 8) || n / gn > 256) continue;
    // A padded N (not a power of two) stays on one warpgroup column.
    if (!llvm::isPowerOf2_64(n) && gn != 1) continue;
    gemm.setInstructionAttr(GemmInstructionAttr::get(ctx, GemmInstruction::wgmma));
    gemm.setWarpsAttr(DenseI64ArrayAttr::get(ctx, {gm, gn}));
    if (aInRegisters &&
        failed(assign(gemm.getA(), FragmentLayout::wgmmaAccumulator(m, k, gm, 1), gemm)))
      return failure();
    if (failed(assign(gemm.getC(), FragmentLayout::wgmmaAccumulator(m, n, gm, gn), gemm)))
      return failure();
    if (!llvm::isPowerOf2_64(n))
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
static LogicalResult checkGemmExtents(GemmOp gemm, int64_t m, int64_t n, int64_t k,
                                      int64_t instructionK, bool aInRegisters, bool wgmmaN = false) {
  bool wgmmaExtent = wgmmaN && n % 8 == 0 && n <= 256;
  for (auto [name, extent] : {std::pair{"M", m}, {"N", n}})
    if (!llvm::isPowerOf2_64(extent) && !(name[0] == 'N' && wgmmaExtent))
      return gemm.emitError("gemm tile extents M and N must be powers of two (the "
                            "accumulator's register layout maps index bits; N may be a multiple "
                            "of 8 up to 256 on sm_90a's wgmma), got ")
             << name << " = " << extent << "; split the tile into gemms on power-of-two windows";
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

LogicalResult LayoutInference::placeEightBitMmaSync(GemmOp gemm, int64_t m, int64_t n) {
  int64_t warps = threads / 32;
  for (auto [wm, wn] : warpGrids(warps, m, n, gemm.getPolicy())) {
    if (m % (wm * 16) || n % (wn * 8)) continue;
    gemm.setInstructionAttr(GemmInstructionAttr::get(ctx, GemmInstruction::mma_sync));
    gemm.setWarpsAttr(DenseI64ArrayAttr::get(ctx, {wm, wn}));
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
  if (integer ? !acc.isInteger(32) : !acc.isF32())
    return gemm.emitError("a gemm of ") << in << " operands accumulates in "
                                        << (integer ? "i32" : "f32") << ", got " << acc;
  if (isFragment(gemm.getA()) ||
      getMemorySpace(a) != MemorySpace::shared ||
      getMemorySpace(llvm::cast<MemRefType>(gemm.getB().getType())) != MemorySpace::shared)
    return gemm.emitError("a gemm of ") << in << " operands reads A and B from shared memory";
  // 8-bit wgmma has no transposed form: both operands are K-major.
  if (gemm.getTransposeA() || !gemm.getTransposeB())
    return gemm.emitError("a gemm of ")
           << in << " operands reads both operands K-major (8-bit wgmma has no transposed "
           << "form): A as [M, K] without transpose_a, B as [N, K] with transpose_b";
  if (failed(checkGemmExtents(gemm, m, n, k, 32, /*aInRegisters=*/false))) return failure();
  // Integer products run on mma.sync m16n8k32 before sm_90a (or when asked
  // for); FP8's mma.sync needs sm_89, which is no target here, and the
  // tcgen05 forms (sm_100a) are not implemented: an error rather than a
  // silent fallback.
  std::optional<GemmInstruction> forced = gemm.getInstruction();
  if (integer && (forced == GemmInstruction::mma_sync ||
                  (!forced && target.computeCapability < 90)))
    return placeEightBitMmaSync(gemm, m, n);
  if (target.computeCapability != 90 || (forced && *forced != GemmInstruction::wgmma))
    return gemm.emitError("a gemm of ")
           << in << " operands runs on wgmma (sm_90a) only; target " << target.arch
           << (forced ? ", instruction " + stringifyGemmInstruction(*forced).str() : "");
  if (threads % 128)
    return gemm.emitError("wgmma runs on whole warpgroups: ") << threads << " threads";
  FailureOr<bool> placed = placeOnWgmma(gemm, m, n, k, gemm.getPolicy(), /*aInRegisters=*/false);
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
  if (!c.getElementType().isF32())
    return gemm.emitError("tensor-core gemm accumulates in f32, got ") << c.getElementType();
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
  if (failed(checkGemmExtents(gemm, m, n, k, 16, aInRegisters, wgmmaTarget))) return failure();

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
    if (m % (wm * 16) || n % (wn * 8)) continue;
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

/// Extends a layout over some loop dimensions to all of them: the missing
/// dimensions' bits become registers.
FragmentLayout extendToLoop(const FragmentLayout &part, ArrayRef<unsigned> dims,
                            ArrayRef<int64_t> extents) {
  FragmentLayout probe(extents, {}, {0, 0, 0, 0, 0}, {});
  auto lift = [&](uint64_t packed) {
    SmallVector<int64_t> coord(extents.size(), 0), small = part.unpack(packed);
    for (auto [i, d] : llvm::enumerate(dims)) coord[d] = small[i];
    return probe.pack(coord);
  };
  SmallVector<uint64_t> reg, lane, warp;
  for (uint64_t c : part.getReg()) reg.push_back(lift(c));
  for (uint64_t c : part.getLane()) lane.push_back(lift(c));
  for (uint64_t c : part.getWarp()) warp.push_back(lift(c));
  for (unsigned d = 0; d < extents.size(); ++d) {
    if (llvm::is_contained(dims, d)) continue;
    for (unsigned bit = 0; bit < probe.getDimBits(d); ++bit)
      reg.push_back(1ull << (probe.getDimShift(d) + bit));
  }
  return FragmentLayout(extents, reg, lane, warp);
}

LogicalResult LayoutInference::propagateLoop(ParallelOp loop, bool &changed) {
  SmallVector<LoopAccess> &accesses = loopAccesses[loop];
  if (accesses.empty()) return success();
  ArrayRef<int64_t> extents = loop.getExtents();
  if (!loops.count(loop)) {
    // The loop takes the layout of its highest-rank placed fragment.
    const LoopAccess *best = nullptr;
    for (const LoopAccess &a : accesses)
      if (fragments.count(a.fragment) && (!best || a.dims.size() > best->dims.size())) best = &a;
    if (!best) return success();
    const FragmentLayout &l = fragments.find(best->fragment)->second.layout;
    FragmentLayout loopLayout = best->dims.size() == extents.size()
                                    ? l
                                    : extendToLoop(l, best->dims, extents);
    loops.try_emplace(loop, Placed{loopLayout, loop});
    changed = true;
  }
  const FragmentLayout &loopLayout = loops.find(loop)->second.layout;
  for (const LoopAccess &a : accesses) {
    auto it = fragments.find(a.fragment);
    if (it == fragments.end()) {
      fragments.try_emplace(a.fragment, Placed{loopLayout.project(a.dims), loop});
      changed = true;
      continue;
    }
    if (!loopLayout.registerMapTo(it->second.layout, a.dims)) {
      InFlightDiagnostic diag =
          loop.emitError("layout conflict: this 'tile.parallel' runs with ")
          << str(loopLayout) << " but a fragment it indexes has " << str(it->second.layout)
          << " from '" << it->second.origin->getName() << "'; the elements would be in "
          << "other threads";
      diag.attachNote(it->second.origin->getLoc()) << "the fragment's layout comes from here";
      return failure();
    }
  }
  return success();
}

FragmentLayout LayoutInference::replicated(ArrayRef<int64_t> shape) const {
  FragmentLayout probe(shape, {}, {0, 0, 0, 0, 0}, {});
  SmallVector<uint64_t> reg;
  for (unsigned bit = 0; bit < probe.getLogicalBits(); ++bit) reg.push_back(uint64_t{1} << bit);
  SmallVector<uint64_t> warp(llvm::Log2_64(threads / 32), 0);
  return FragmentLayout(shape, reg, {0, 0, 0, 0, 0}, warp);
}

LogicalResult LayoutInference::checkBroadcastReads() {
  for (Operation *op : broadcastReads) {
    Value fragment = getElementAccess(op).first;
    const Placed &placed = fragments.find(fragment)->second;
    const FragmentLayout &l = placed.layout;
    auto zero = [](uint64_t column) { return column == 0; };
    if (llvm::all_of(l.getLane(), zero) && llvm::all_of(l.getWarp(), zero) && l.isSurjective())
      continue;
    InFlightDiagnostic diag =
        op->emitError("this fragment is read inside tile.parallel at an index that is not the "
                      "loop's own, so every thread must hold all of it, but its layout ")
        << str(l) << " spreads it over the threads; index it with the loop's indices, or "
        << "read a reduction's result (which every thread holds)";
    diag.attachNote(placed.origin->getLoc()) << "the fragment's layout comes from here";
    return failure();
  }
  return success();
}

LogicalResult LayoutInference::propagate(bool &changed) {
  WalkResult result = kernel.walk([&](Operation *op) -> WalkResult {
    threads = getExecutingThreads(op);
    if (auto loop = llvm::dyn_cast<ParallelOp>(op))
      return failed(propagateLoop(loop, changed)) ? WalkResult::interrupt()
                                                  : WalkResult::advance();
    if (auto reduce = llvm::dyn_cast<ReduceOp>(op)) {
      if (!isFragment(reduce.getSource())) return WalkResult::advance();
      if (!isFragment(reduce.getDest()))
        return reduce.emitError("the reduction of a fragment goes into a fragment");
      auto src = fragments.find(reduce.getSource());
      if (src == fragments.end()) return WalkResult::advance();
      SmallVector<unsigned> kept;
      for (unsigned d = 0; d < src->second.layout.getRank(); ++d)
        if (d != reduce.getDim()) kept.push_back(d);
      // Reducing the only dimension leaves one element that every thread
      // ends up holding.
      FragmentLayout result =
          kept.empty() ? replicated({1}) : src->second.layout.project(kept);
      if (!fragments.count(reduce.getDest())) changed = true;
      return failed(assign(reduce.getDest(), result, reduce)) ? WalkResult::interrupt()
                                                              : WalkResult::advance();
    }
    if (auto copy = llvm::dyn_cast<CopyOp>(op)) {
      if (!isFragment(copy.getSource()) || !isFragment(copy.getDest()))
        return WalkResult::advance();
      auto src = fragments.find(copy.getSource()), dst = fragments.find(copy.getDest());
      if (src != fragments.end() && dst == fragments.end()) {
        changed = true;
        return failed(assign(copy.getDest(), src->second.layout, copy)) ? WalkResult::interrupt()
                                                                        : WalkResult::advance();
      }
      if (dst != fragments.end()) {
        if (src == fragments.end()) changed = true;
        return failed(assign(copy.getSource(), dst->second.layout, copy))
                   ? WalkResult::interrupt()
                   : WalkResult::advance();
      }
    }
    return WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

int64_t LayoutInference::preferredVector(Value fragment) {
  // 16-byte accesses of the narrowest element the fragment exchanges with
  // memory: an f32 fragment loaded from f16 takes 8 elements per access.
  int64_t bytes = getElementBytes(llvm::cast<MemRefType>(fragment.getType()).getElementType());
  for (Operation *user : fragment.getUsers()) {
    auto copy = llvm::dyn_cast<CopyOp>(user);
    if (!copy) continue;
    Value other = copy.getSource() == fragment ? copy.getDest() : copy.getSource();
    bytes = std::min(bytes,
                     getElementBytes(llvm::cast<MemRefType>(other.getType()).getElementType()));
  }
  return 16 / bytes;
}

void LayoutInference::placeSharedLayouts() {
  DenseSet<Value> tensorCoreOperands;
  kernel.walk([&](GemmOp gemm) {
    if (!isFragment(gemm.getA())) tensorCoreOperands.insert(getRootBuffer(gemm.getA()));
    tensorCoreOperands.insert(getRootBuffer(gemm.getB()));
  });
  // A buffer that registers write (an epilogue staged for a TMA store)
  // takes the tensor cores' swizzle too: an accumulator fragment writes a
  // few bytes of each of 8 rows per warp instruction, and unswizzled rows a
  // multiple of 128 bytes apart would put them all in the same banks. Only
  // where copies alone touch the buffer, or a region atomic_add reads it (a
  // TMA reduce-add, or thread atomics), so every access goes through the
  // layout's address map.
  DenseSet<Value> writtenFromRegisters;
  // The first op that touches each buffer other than by a copy.
  DenseMap<Value, Operation *> touchedOtherwise;
  kernel.walk([&](Operation *op) {
    if (llvm::isa<RegionOp, StageOp>(op)) return;
    auto copy = llvm::dyn_cast<CopyOp>(op);
    auto atomic = llvm::dyn_cast<AtomicAddOp>(op);
    for (Value operand : op->getOperands()) {
      if (!llvm::isa<MemRefType>(operand.getType())) continue;
      Value root = getRootBuffer(operand);
      if (atomic && operand == atomic.getValue()) continue;
      if (!copy) touchedOtherwise.try_emplace(root, op);
      else if (operand == copy.getDest() && isFragment(copy.getSource()))
        writtenFromRegisters.insert(root);
    }
  });
  kernel.walk([&](AllocOp alloc) {
    MemRefType type = alloc.getType();
    if (getMemorySpace(type) != MemorySpace::shared || alloc.getLayout()) return;
    AnnotateLayoutOp annotated = getAnnotatedLayout(alloc);
    if (annotated) {
      if (auto shared = llvm::dyn_cast<SharedLayoutAttr>(annotated.getLayout()))
        alloc.setLayoutAttr(shared);
      return; // an affine annotation stays on its op
    }
    int64_t bytes = getElementBytes(type.getElementType());
    Value buffer = alloc.getResult();
    bool fromRegisters = type.getRank() >= 2 && writtenFromRegisters.contains(buffer);
    bool stagedTile = fromRegisters && !touchedOtherwise.contains(buffer);
    if (fromRegisters && !stagedTile && !tensorCoreOperands.contains(buffer)) {
      Operation *other = touchedOtherwise.lookup(buffer);
      emitMissed(alloc, "tessel-layout-inference", missed::kSwizzle)
          << "this shared buffer is not swizzled, though registers write it (a swizzle keeps "
             "their rows out of each other's banks): '"
          << other->getName() << "' at " << describeLocation(other->getLoc())
          << " accesses it other than by a copy, and only copies follow a swizzled layout";
    }
    SharedLayout l = tensorCoreOperands.contains(buffer) || stagedTile
                         ? SharedLayout::forTensorCores(type.getShape(), bytes)
                         : SharedLayout(type.getShape(), bytes, 0, 0);
    alloc.setLayoutAttr(SharedLayoutAttr::get(ctx, l));
  });
}

LogicalResult LayoutInference::run() {
  threads = kernel.getThreads();
  if (failed(checkFragmentUses()) || failed(collectFragmentThreads()) ||
      failed(collectLoopAccesses()))
    return failure();
  collectTies();

  // Strict constraints.
  WalkResult strict = kernel.walk([&](Operation *op) -> WalkResult {
    // Placed for the threads that run the op (a role's, inside one).
    threads = getExecutingThreads(op);
    if (auto annotate = llvm::dyn_cast<AnnotateLayoutOp>(op)) {
      if (auto f = llvm::dyn_cast<FragmentLayoutAttr>(annotate.getLayout())) {
        FragmentLayout l = f.getLayout();
        int64_t users = fragmentThreads.lookup(annotate.getBuffer());
        if (l.getNumThreads() != users)
          return annotate.emitError("the annotated layout is for ")
                 << l.getNumThreads() << " threads, the fragment's users run on " << users;
        return failed(assign(annotate.getBuffer(), l, annotate)) ? WalkResult::interrupt()
                                                                 : WalkResult::advance();
      }
    }
    if (auto gemm = llvm::dyn_cast<GemmOp>(op))
      return failed(placeGemm(gemm)) ? WalkResult::interrupt() : WalkResult::advance();
    if (auto copy = llvm::dyn_cast<CopyOp>(op);
        copy && (inTmem(copy.getSource()) || inTmem(copy.getDest())))
      return failed(placeTmemCopy(copy)) ? WalkResult::interrupt() : WalkResult::advance();
    return WalkResult::advance();
  });
  if (strict.wasInterrupted()) return failure();

  // Propagation, then free choices one fragment at a time.
  while (true) {
    bool changed = true;
    while (changed) {
      changed = false;
      if (failed(propagate(changed))) return failure();
    }
    Value free;
    for (Value f : fragmentOrder)
      if (!fragments.count(f) &&
          (!free || llvm::cast<MemRefType>(f.getType()).getRank() >
                        llvm::cast<MemRefType>(free.getType()).getRank()))
        free = f;
    if (!free) break;
    auto type = llvm::cast<MemRefType>(free.getType());
    threads = fragmentThreads.lookup(free);
    // Replicated only when nothing indexes it element-wise: a fragment
    // computed in parallel loops keeps those loops' spread layout (and a
    // broadcast read of it is then an error).
    bool loopIndexed = llvm::any_of(loopAccesses, [&](auto &entry) {
      return llvm::any_of(entry.second, [&](const LoopAccess &a) { return a.fragment == free; });
    });
    bool broadcast = !loopIndexed && llvm::any_of(broadcastReads, [&](Operation *op) {
      return getElementAccess(op).first == free;
    });
    fragments.try_emplace(free, Placed{broadcast ? replicated(type.getShape())
                                                 : FragmentLayout::elementwise(
                                                       type.getShape(), threads,
                                                       preferredVector(free)),
                                       free.getDefiningOp()});
  }
  if (failed(checkBroadcastReads())) return failure();

  // Registers: 16-bit elements pack in pairs.
  auto registersOf = [&](Value f) {
    auto type = llvm::cast<MemRefType>(f.getType());
    return llvm::divideCeil(fragments.find(f)->second.layout.getNumRegisters() *
                                getElementBytes(type.getElementType()),
                            4);
  };
  RegisterPeak peak = peakFragmentRegisters(kernel, fragmentOrder, registersOf);
  if (peak.registers > 224) {
    InFlightDiagnostic diag = kernel.emitError("fragments need ")
                              << peak.registers << " 32-bit registers per thread; at most 224 fit "
                              << "beside addresses and temporaries (255 per thread)";
    for (Value f : peak.live)
      diag.attachNote(f.getLoc()) << registersOf(f) << " registers for " << f.getType();
    return failure();
  }

  for (auto &[value, placed] : fragments)
    value.getDefiningOp<AllocOp>().setLayoutAttr(FragmentLayoutAttr::get(ctx, placed.layout));
  for (auto &[op, placed] : loops)
    llvm::cast<ParallelOp>(op).setLayoutAttr(FragmentLayoutAttr::get(ctx, placed.layout));
  placeSharedLayouts();
  return success();
}

struct TesselLayoutInference
    : tessel::impl::TesselLayoutInferenceBase<TesselLayoutInference> {
  using Base::Base;
  void runOnOperation() override {
    std::optional<TargetInfo> target = lookupTarget(arch, getOperation());
    if (!target) return signalPassFailure();
    if (failed(LayoutInference(getOperation(), *target).run())) signalPassFailure();
  }
};
} // namespace
