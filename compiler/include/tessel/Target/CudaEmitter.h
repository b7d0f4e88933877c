//===- CudaEmitter.h - thread-level IR to CUDA C++ --------------*- C++ -*-===//
#ifndef TESSEL_TARGET_CUDAEMITTER_H
#define TESSEL_TARGET_CUDAEMITTER_H

#include "tessel/Dialect/Tile/TileDialect.h"
#include "tessel/runtime/KernelSpec.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace tessel {
/// The op one line of emitted CUDA was printed for, and its location (the
/// DSL caller's file:line for ops built from a program), so that a compiler
/// message about a generated line can name the user's line.
struct EmittedLine {
  mlir::Location loc;
  std::string op;
};

/// Prints a lowered kernel (thread-level IR) as one self-contained CUDA C++
/// translation unit that includes only Tessel's device header, and describes
/// its launch interface. An op the emitter does not know is an error at the
/// op's location. With `lines`, fills in the origin of every line printed
/// (lines[0] is the first line).
mlir::FailureOr<rt::KernelSpec> emitCuda(tile::KernelOp kernel, llvm::raw_ostream &os,
                                         std::vector<EmittedLine> *lines = nullptr);
} // namespace tessel

#endif
