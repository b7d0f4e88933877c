//===- TesselTmemAllocation.cpp - tensor-memory columns per buffer --------===//
//
// A block's tensor memory is one tcgen05.alloc of a power of two of 32-bit
// columns (32 to 512). Giving each buffer a power-of-two share, widest
// first, keeps every buffer aligned to its width (the MMA's accumulator
// columns and the 16-lane load shapes address whole aligned runs) and the
// sum a simple bound to check.
//
//===----------------------------------------------------------------------===//
#include "tessel/Layout/TmemLayout.h"
#include "tessel/Transforms/Passes.h"

namespace tessel {
#define GEN_PASS_DEF_TESSELTMEMALLOCATION
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

namespace {
struct TesselTmemAllocation : tessel::impl::TesselTmemAllocationBase<TesselTmemAllocation> {
  using Base::Base;
  void runOnOperation() override {
    KernelOp kernel = getOperation();
    std::optional<TargetInfo> target = lookupTarget(arch, kernel);
    if (!target) return signalPassFailure();
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
    kernel->setAttr("tmem_columns",
                    b.getI64IntegerAttr(*layout::tmemAllocationColumns(static_cast<int>(total))));
  }
};
} // namespace
