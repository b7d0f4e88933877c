//===- CudaEmitter.h - thread-level IR to CUDA C++ --------------*- C++ -*-===//
#ifndef TESSEL_TARGET_CUDAEMITTER_H
#define TESSEL_TARGET_CUDAEMITTER_H

#include "tessel/Dialect/Tile/TileDialect.h"
#include "tessel/runtime/KernelSpec.h"
#include "llvm/Support/raw_ostream.h"

namespace tessel {
/// Prints a lowered kernel (thread-level IR) as one self-contained CUDA C++
/// translation unit that includes only Tessel's device header, and describes
/// its launch interface. An op the emitter does not know is an error at the
/// op's location.
mlir::FailureOr<rt::KernelSpec> emitCuda(tile::KernelOp kernel, llvm::raw_ostream &os);
} // namespace tessel

#endif
