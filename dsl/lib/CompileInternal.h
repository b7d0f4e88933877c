//===- CompileInternal.h - what compiling and launching share ---*- C++ -*-===//
//
// Not installed: the two steps Compile.cpp defines for tessel::compile that
// Launch.cpp takes again for a kernel's build without TMA.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_DSL_COMPILEINTERNAL_H
#define TESSEL_DSL_COMPILEINTERNAL_H

#include "tessel/Target/CudaEmitter.h"
#include "tessel/Transforms/Passes.h"
#include "tessel/runtime/Nvrtc.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <memory>
#include <string>
#include <vector>

namespace tessel::detail {

/// Tessel's pipeline run again on a kernel's printed tile IR (for the
/// build without TMA, and for lowered IR a cache entry no longer has).
/// Throws naming `what`.
mlir::OwningOpRef<mlir::ModuleOp> lowerTileIr(mlir::MLIRContext &ctx, const std::string &tileIr,
                                              const TargetInfo &target, bool dropWarpSpecialize,
                                              const std::string &what);

/// The binary of emitted CUDA. Should NVRTC reject it, the message leads
/// with the op its first error's line was printed for, at the user's line,
/// and goes on with NVRTC's log.
std::shared_ptr<const rt::Binary> compileEmitted(const std::string &source,
                                                 const std::vector<EmittedLine> &lines,
                                                 const std::string &arch);

} // namespace tessel::detail

#endif
