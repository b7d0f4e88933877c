//===- Remarks.h - what the compiler declined to do, and why ----*- C++ -*-===//
//
// Wherever a pass does not apply an optimization a program asked for or
// would normally get (pipelining a `pipelined` loop, TMA for a copy, warp
// specialization, a copy's vector width, a swizzle), it says why at the op,
// whose location is the DSL caller's file:line. The remark is an MLIR
// diagnostic (a remark, or a warning when the program asked for what was
// declined), so tessel-opt -verify-diagnostics tests it like any other; its
// message leads with the pass and a short category that tools and callers
// parse back out: "tessel-software-pipeline [pipelining]: <reason>".
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TRANSFORMS_REMARKS_H
#define TESSEL_TRANSFORMS_REMARKS_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Operation.h"

#include <optional>
#include <string>

namespace tessel {

/// The stable categories of declined optimizations.
namespace missed {
inline constexpr llvm::StringLiteral kPipelining = "pipelining";
inline constexpr llvm::StringLiteral kTma = "tma";
inline constexpr llvm::StringLiteral kWarpSpecialization = "warp-specialization";
inline constexpr llvm::StringLiteral kVectorization = "vectorization";
inline constexpr llvm::StringLiteral kSwizzle = "swizzle";
inline constexpr llvm::StringLiteral kTensorCores = "tensor-cores";
} // namespace missed

enum class RemarkSeverity { remark, warning };

/// Starts the remark of `pass` at `op`; the caller streams the reason.
mlir::InFlightDiagnostic emitMissed(mlir::Operation *op, llvm::StringRef pass,
                                    llvm::StringRef category,
                                    RemarkSeverity severity = RemarkSeverity::remark);

/// A remark's parts, parsed back from its message.
struct MissedRemark {
  std::string pass, category, reason;
};
/// The parts of a message emitMissed started; nullopt for any other.
std::optional<MissedRemark> parseMissed(llvm::StringRef message);

/// "file:line" of the innermost file location in `loc`, else its printed form.
std::string describeLocation(mlir::Location loc);

} // namespace tessel

#endif
