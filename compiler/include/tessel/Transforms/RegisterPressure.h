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
/// A fragment counts from its first use to its last, and through the whole
/// of every loop it enters holding a value (a loop with a use inside, and
/// another use outside). The innermost loop holding all its uses carries
/// nothing from one iteration to the next; there a gemm's registers count
/// to the end of the body, since the gemm may complete late.
RegisterPeak peakFragmentRegisters(tile::KernelOp kernel, llvm::ArrayRef<mlir::Value> fragments,
                                   llvm::function_ref<int64_t(mlir::Value)> registersOf);
} // namespace tessel

#endif
