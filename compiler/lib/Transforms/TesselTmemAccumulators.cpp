//===- TesselTmemAccumulators.cpp - fragment accumulators on tcgen05 ------===//
//
// sm_100a's tensor cores are tcgen05.mma, whose accumulator lives in tensor
// memory; a gemm into a register fragment would otherwise run on mma.sync
// at a fraction of the rate, and a program written for sm_90a (where wgmma
// accumulates in registers) would silently lose most of its speed. Where
// tcgen05 can take the gemm, the accumulator goes through a tensor-memory
// buffer of its own: copied in before the gemm when it accumulates, out
// after it. The copies cost a pass over the accumulator per gemm, which a
// remark says, so that a kernel that wants the accumulator to stay in
// tensor memory allocates it there itself.
//
//===----------------------------------------------------------------------===//
#include "tessel/Dialect/TileNV/TileNVDialect.h"
#include "tessel/Transforms/BufferUtils.h"
#include "tessel/Transforms/Passes.h"
#include "tessel/Transforms/Remarks.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/MathExtras.h"

namespace tessel {
#define GEN_PASS_DEF_TESSELTMEMACCUMULATORS
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

namespace {
constexpr llvm::StringLiteral kPass = "tessel-tmem-accumulators";
constexpr int64_t kTmemColumns = 512;

MemorySpace spaceOf(Value v) { return getMemorySpace(llvm::cast<MemRefType>(v.getType())); }

/// The 32-bit columns tessel-tmem-allocation gives a buffer of `columns`.
int64_t allocatedColumns(int64_t columns) {
  int64_t share = 32;
  while (share < columns) share *= 2;
  return share;
}

/// Why tcgen05.mma cannot take this gemm with its accumulator moved to
/// tensor memory, or empty when it can.
std::string whyNotTcgen05(GemmOp gemm, int64_t threads) {
  auto a = llvm::cast<MemRefType>(gemm.getA().getType());
  auto c = llvm::cast<MemRefType>(gemm.getC().getType());
  Type in = a.getElementType();
  if (gemm.getInstruction())
    return "the gemm asks for " + stringifyGemmInstruction(*gemm.getInstruction()).str();
  if (spaceOf(gemm.getA()) != MemorySpace::shared || spaceOf(gemm.getB()) != MemorySpace::shared)
    return "tcgen05.mma reads A and B from shared memory here, and an operand is a fragment";
  // 16-bit operands into f32, FP8 into f32, i8 into s32: the kinds
  // tcgen05.mma takes (kind::f16, f8f6f4, i8), accumulating in tensor memory
  // at 32 bits.
  std::string why;
  std::optional<layout::Tcgen05Formats> formats =
      tilenv::tcgen05Formats(in, c.getElementType(), why, /*blockScaled=*/false);
  if (!formats) return why;
  if (formats->d == 0) return "its accumulator is not f32 (s32 for 8-bit integers)";
  if (c.getRank() != 2 || c.getDimSize(0) != 128)
    return "tcgen05.mma computes 128 rows (all tensor-memory lanes) and the accumulator has " +
           std::to_string(c.getRank() == 2 ? c.getDimSize(0) : 0);
  int64_t n = c.getDimSize(1);
  if (n < 16 || n > 256 || !llvm::isPowerOf2_64(n))
    return "its N of " + std::to_string(n) + " is not a power of two from 16 to 256";
  if (threads % 128 || n < threads / 128)
    return "the kernel's " + std::to_string(threads) +
           " threads are not whole warpgroups that each take a share of the columns";
  if (getRootBuffer(gemm.getC()) != gemm.getC())
    return "the accumulator is a window of a larger fragment";
  return "";
}

/// Gives each eligible gemm of `kernel` a tensor-memory accumulator (one
/// per accumulator fragment, at the kernel's top), copied in before the gemm
/// when it accumulates and out after it.
void moveToTmem(KernelOp kernel, ArrayRef<GemmOp> gemms) {
  llvm::DenseMap<Value, Value> tmemFor; // accumulator fragment -> its tensor memory
  for (GemmOp gemm : gemms) {
    Value acc = gemm.getC();
    auto type = llvm::cast<MemRefType>(acc.getType());
    Value &tmem = tmemFor[acc];
    if (!tmem) {
      OpBuilder top = OpBuilder::atBlockBegin(&kernel.getBody().front());
      StringAttr name;
      if (auto owner = acc.getDefiningOp<AllocOp>(); owner && owner.getName())
        name = top.getStringAttr(*owner.getName() + "_tmem");
      tmem = AllocOp::create(top, acc.getLoc(),
                             getTileMemRefType(type.getShape(), type.getElementType(),
                                               MemorySpace::tmem),
                             IntegerAttr(), Attribute(), name, IntegerAttr());
    }
    OpBuilder b(gemm);
    if (!gemm.getClearAccum()) CopyOp::create(b, gemm.getLoc(), acc, tmem, false, false);
    gemm.getCMutable().assign(tmem);
    b.setInsertionPointAfter(gemm);
    CopyOp::create(b, gemm.getLoc(), tmem, acc, false, false);
  }
}

/// Whether the kernel's layouts still agree with the gemms' accumulators
/// moved: a fragment copied from tensor memory takes the tcgen05 row layout
/// (a thread a row), which other code may have fixed otherwise (an
/// attention's row statistics). Tried on a copy of the kernel, silently;
/// `why` gets the trial's first error, for the remark.
bool layoutsAgreeMoved(KernelOp kernel, ArrayRef<GemmOp> gemms, StringRef arch, std::string &why) {
  MLIRContext *ctx = kernel.getContext();
  OwningOpRef<ModuleOp> scratch = ModuleOp::create(kernel.getLoc());
  IRMapping map;
  auto copy = llvm::cast<KernelOp>(kernel->clone(map));
  scratch->push_back(copy);
  SmallVector<GemmOp> moved;
  for (GemmOp gemm : gemms) moved.push_back(llvm::cast<GemmOp>(map.lookup(gemm.getOperation())));
  moveToTmem(copy, moved);
  // Anchored on the kernel itself: no nested adaptor, so no parallel
  // diagnostic handler of its own interleaves with the running pipeline's.
  PassManager pm(ctx, KernelOp::getOperationName());
  // As the pipeline runs next: the gemms left in registers get their
  // 8-bit operands' K-major copies before layouts are placed.
  pm.addPass(createTesselKMajorOperands());
  pm.addPass(createTesselTmemAllocation(TesselTmemAllocationOptions{arch.str()}));
  pm.addPass(createTesselFragmentWindows());
  pm.addPass(createTesselLayoutInference(TesselLayoutInferenceOptions{arch.str()}));
  ScopedDiagnosticHandler silence(ctx, [&](Diagnostic &d) {
    if (why.empty() && d.getSeverity() == DiagnosticSeverity::Error) why = d.str();
    return success();
  });
  return succeeded(pm.run(copy));
}

struct TesselTmemAccumulators
    : tessel::impl::TesselTmemAccumulatorsBase<TesselTmemAccumulators> {
  using Base::Base;

  void runOnOperation() override {
    KernelOp kernel = getOperation();
    std::optional<TargetInfo> target = lookupTarget(arch, kernel);
    if (!target) return signalPassFailure();
    if (target->computeCapability < 100) return;
    int64_t threads = kernel.getThreads();
    // Columns already taken by the kernel's own tensor-memory buffers.
    int64_t used = 0;
    kernel.walk([&](AllocOp alloc) {
      if (getMemorySpace(alloc.getType()) == MemorySpace::tmem)
        used += allocatedColumns(alloc.getTmemColumns());
    });
    SmallVector<GemmOp> eligible;
    llvm::DenseSet<Value> placed;
    auto stays = [&](GemmOp gemm, StringRef why) {
      emitMissed(gemm, kPass, missed::kTensorCores)
          << "this gemm runs on mma.sync on " << target->arch << ", not tcgen05.mma: " << why
          << "; an accumulator in tensor memory (alloc_tmem) runs on tcgen05";
    };
    kernel.walk([&](GemmOp gemm) {
      if (spaceOf(gemm.getC()) != MemorySpace::fragment) return;
      // No remark that a gemm no instruction takes runs on mma.sync:
      // layout inference reports it as an error.
      if (!tilenv::registerAccumulatorTaken(
              llvm::cast<MemRefType>(gemm.getA().getType()).getElementType(),
              llvm::cast<MemRefType>(gemm.getC().getType()).getElementType()))
        return;
      std::string why = whyNotTcgen05(gemm, threads);
      int64_t columns =
          allocatedColumns(llvm::cast<MemRefType>(gemm.getC().getType()).getDimSize(1));
      if (why.empty() && !placed.count(gemm.getC()) && used + columns > kTmemColumns)
        why = "tensor memory has " + std::to_string(kTmemColumns - used) +
              " columns left and the accumulator needs " + std::to_string(columns);
      if (!why.empty()) return stays(gemm, why);
      if (placed.insert(gemm.getC()).second) used += columns;
      eligible.push_back(gemm);
    });
    if (eligible.empty()) return;
    std::string conflict;
    if (!layoutsAgreeMoved(kernel, eligible, arch, conflict)) {
      // The trial's own error says what disagrees (row statistics laid
      // out otherwise, windows narrower than a warpgroup's columns, ...).
      if (!conflict.empty()) conflict = "; moved, layouts disagree: " + conflict;
      for (GemmOp gemm : eligible)
        stays(gemm, "the accumulator's register layout is fixed by other code, and a fragment "
                    "read from tensor memory holds a row a thread (a warpgroup's share of "
                    "its columns)" +
                        conflict);
      return;
    }
    moveToTmem(kernel, eligible);
    for (GemmOp gemm : eligible) {
      // In a loop the copies run every iteration: a pass over the
      // accumulator each way per K step, which alloc_tmem avoids.
      bool inLoop = gemm->getParentOfType<PipelinedOp>() || gemm->getParentOfType<scf::ForOp>();
      emitMissed(gemm, kPass, missed::kTensorCores)
          << "the accumulator moves through tensor memory for tcgen05.mma ("
          << (gemm.getClearAccum() ? "copied out after" : "copied in before and out after")
          << " the gemm" << (inLoop ? ", in every iteration of its loop" : "")
          << "); an accumulator allocated with alloc_tmem stays there";
    }
  }
};
} // namespace
