//===- RegisterPressure.h - fragment registers live at once -----*- C++ -*-===//
#ifndef TESSEL_TRANSFORMS_REGISTERPRESSURE_H
#define TESSEL_TRANSFORMS_REGISTERPRESSURE_H

#include "tessel/Dialect/Tile/TileDialect.h"

namespace tessel {
/// The fragments live together where a kernel holds the most fragment
/// registers, and that number.
struct RegisterPeak {
  int64_t registers = 0;
  llvm::SmallVector<mlir::Value> live;
};

/// Estimates per-thread fragment registers over the kernel's program order.
/// A fragment whose uses all lie in one loop body holds nothing from one
/// iteration to the next, so it counts from its first to its last use there
/// (to the end of the body when that use is a gemm, which may complete
/// late); any other fragment counts everywhere.
RegisterPeak peakFragmentRegisters(tile::KernelOp kernel, llvm::ArrayRef<mlir::Value> fragments,
                                   llvm::function_ref<int64_t(mlir::Value)> registersOf);
} // namespace tessel

#endif
