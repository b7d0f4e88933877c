//===- TesselTmemAllocation.cpp - tensor-memory columns per buffer --------===//
//
// A block's tensor memory is one tcgen05.alloc of a power of two of 32-bit
// columns (32 to 512). Giving each buffer a power-of-two share, widest
// first, keeps every buffer aligned to its width (the MMA's accumulator
// columns and the 16-lane load shapes address whole aligned runs) and the
// sum a simple bound to check. A block-scaled gemm's scales get buffers
// of their own here, recorded on the gemm as columns.
//
//===----------------------------------------------------------------------===//
#include "tessel/Layout/TmemLayout.h"
#include "tessel/Transforms/BufferUtils.h"
#include "tessel/Transforms/Passes.h"

#include "llvm/Support/MathExtras.h"

namespace tessel {
#define GEN_PASS_DEF_TESSELTMEMALLOCATION
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

namespace {
/// The tensor-memory operand of a copy or fill (null when it has none).
Value tmemOperand(Operation *op) {
  for (Value v : op->getOperands())
    if (auto type = llvm::dyn_cast<MemRefType>(v.getType());
        type && getMemorySpace(type) == MemorySpace::tmem)
      return v;
  return {};
}

/// Records on a copy or fill of tensor memory where each warpgroup's share
/// of the tile's columns starts: warpgroups split a [128, n] tile by
/// columns, warp w reaching lanes 32 * (w % 4) onwards, and the step
/// between shares is counted in 32-bit columns (a packed 16-bit share of 64
/// values is 32 columns, the seed's bug was stepping by 64).
LogicalResult annotateAccess(Operation *op, Value tmem, int64_t threads) {
  auto view = llvm::cast<MemRefType>(tmem.getType());
  auto alloc = getRootBuffer(tmem).getDefiningOp<AllocOp>();
  if (view.getRank() != 2 || view.getDimSize(0) != 128 || alloc.getType().getDimSize(0) != 128)
    return op->emitError("tensor-memory copies and fills move whole [128, n] tiles (all 128 "
                         "lanes); got a ")
           << view << " view of " << alloc.getType();
  if (threads % 128)
    return op->emitError("tensor memory is copied by whole warpgroups (warp w reaches lanes 32 * "
                         "(w % 4) onwards); this code runs on ")
           << threads << " threads";
  int64_t groups = threads / 128, values = view.getDimSize(1);
  int bits = view.getElementTypeBitWidth();
  bool packed = bits == 16 && !alloc.getUnpacked();
  if (values % groups || !llvm::isPowerOf2_64(values / groups) || (packed && values / groups < 2))
    return op->emitError("the ")
           << groups << " warpgroups split the tile's " << values << " columns into equal "
           << "power-of-two shares" << (packed ? " of at least two packed values" : "")
           << "; they cannot";
  int step = layout::warpgroupColumnOffset(1, static_cast<int>(groups), static_cast<int>(values),
                                           bits, packed);
  op->setAttr("tmem_group_columns", IntegerAttr::get(IntegerType::get(op->getContext(), 64), step));
  return success();
}

/// A block-scaled gemm's scales in tensor memory: buffers of their own,
/// placed with the others, whose columns the gemm records.
struct ScaleBuffers {
  GemmOp gemm;
  AllocOp a, b;
};

/// Tensor-memory buffers for each block-scaled gemm's scales, at the
/// kernel's top: 4 columns of A's per K group of 128, 4 per 128-column atom
/// of B's (tcgen05.cp puts an atom's 128 rows in 32 lanes x 4 columns,
/// copied to every lane quarter, one byte per K block).
SmallVector<ScaleBuffers> addScaleBuffers(KernelOp kernel) {
  SmallVector<ScaleBuffers> scales;
  OpBuilder top = OpBuilder::atBlockBegin(&kernel.getBody().front());
  kernel.walk([&](GemmOp gemm) {
    if (!gemm.getScaleA()) return;
    auto a = llvm::cast<MemRefType>(gemm.getA().getType());
    auto c = llvm::cast<MemRefType>(gemm.getC().getType());
    int64_t k = gemm.getTransposeA() ? a.getDimSize(0) : a.getDimSize(1);
    int64_t groups = k / 128, bAtoms = (c.getDimSize(1) + 127) / 128;
    auto buffer = [&](int64_t atoms, StringRef name) {
      return AllocOp::create(top, gemm.getLoc(),
                             getTileMemRefType({128, 4 * atoms}, top.getI32Type(), MemorySpace::tmem),
                             IntegerAttr(), Attribute(), top.getStringAttr(name), IntegerAttr());
    };
    scales.push_back({gemm, buffer(groups, "scale_a_tmem"),
                      buffer(groups * bAtoms, "scale_b_tmem")});
  });
  return scales;
}

struct TesselTmemAllocation : tessel::impl::TesselTmemAllocationBase<TesselTmemAllocation> {
  using Base::Base;
  void runOnOperation() override {
    KernelOp kernel = getOperation();
    std::optional<TargetInfo> target = lookupTarget(arch, kernel);
    if (!target) return signalPassFailure();
    SmallVector<ScaleBuffers> scales = addScaleBuffers(kernel);
    SmallVector<std::pair<AllocOp, int64_t>> buffers; // with their share of columns
    kernel.walk([&](AllocOp alloc) {
      if (getMemorySpace(alloc.getType()) != MemorySpace::tmem) return;
      int64_t share = 32;
      while (share < alloc.getTmemColumns()) share *= 2;
      buffers.push_back({alloc, share});
    });
    if (buffers.empty()) return;
    if (target->computeCapability < 100) {
      buffers.front().first.emitError("tensor memory is sm_100a's; this kernel compiles for ")
          << target->arch;
      return signalPassFailure();
    }
    llvm::stable_sort(buffers, [](auto &a, auto &b) { return a.second > b.second; });
    int64_t total = 0;
    for (auto &[alloc, share] : buffers) total += share;
    if (total > layout::kTmemColumns) {
      InFlightDiagnostic error = kernel.emitError("tensor-memory buffers need ")
                                 << total << " columns; a block has " << layout::kTmemColumns;
      for (auto &[alloc, share] : buffers) {
        Diagnostic &note = error.attachNote(alloc.getLoc());
        if (std::optional<StringRef> name = alloc.getName()) note << "'" << *name << "' ";
        else note << "a buffer ";
        note << alloc.getType() << ": " << alloc.getTmemColumns() << " columns, allocated as "
             << share;
      }
      return signalPassFailure();
    }
    OpBuilder b(kernel.getContext());
    int64_t column = 0;
    for (auto &[alloc, share] : buffers) {
      alloc.setOffsetAttr(b.getI64IntegerAttr(column));
      column += share;
    }
    for (ScaleBuffers &x : scales) {
      x.gemm->setAttr("scale_a_column", x.a.getOffsetAttr());
      x.gemm->setAttr("scale_b_column", x.b.getOffsetAttr());
    }
    kernel->setAttr("tmem_columns",
                    b.getI64IntegerAttr(*layout::tmemAllocationColumns(static_cast<int>(total))));
    if (target->emulatesTcgen05) kernel->setAttr("tcgen05_emulated", b.getUnitAttr());

    WalkResult accesses = kernel.walk([&](Operation *op) {
      if (!llvm::isa<CopyOp, FillOp>(op)) return WalkResult::advance();
      Value tmem = tmemOperand(op);
      if (!tmem) return WalkResult::advance();
      return failed(annotateAccess(op, tmem, getExecutingThreads(op))) ? WalkResult::interrupt()
                                                       : WalkResult::advance();
    });
    if (accesses.wasInterrupted()) signalPassFailure();
  }
};
} // namespace
