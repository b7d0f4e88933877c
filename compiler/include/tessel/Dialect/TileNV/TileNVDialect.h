//===- TileNVDialect.h - NVIDIA thread-level intrinsics ---------*- C++ -*-===//
#ifndef TESSEL_DIALECT_TILENV_TILENVDIALECT_H
#define TESSEL_DIALECT_TILENV_TILENVDIALECT_H

#include "tessel/Dialect/Tile/TileDialect.h"
#include "tessel/Layout/TmemLayout.h"

#include "tessel/Dialect/TileNV/TileNVEnums.h.inc"
#include "tessel/Dialect/TileNV/TileNVDialect.h.inc"
#define GET_OP_CLASSES
#include "tessel/Dialect/TileNV/TileNVOps.h.inc"

namespace tessel::tilenv {
/// The tcgen05.mma kind and instruction-descriptor formats of `operand` x
/// `operand` into `acc` (block-scaled: kind::mxf8f6f4); nothing, with `why`
/// set, for a pair no kind takes.
std::optional<layout::Tcgen05Formats> tcgen05Formats(mlir::Type operand, mlir::Type acc,
                                                     std::string &why, bool blockScaled = false);
/// Whether the register-accumulator tensor-core instructions (wgmma,
/// mma.sync) take `operand` x `operand` into `acc`: i8 (u8) into i32; f16,
/// bf16 or FP8 into f32; f16 or FP8 into f16 (the .f16 forms).
bool registerAccumulatorTaken(mlir::Type operand, mlir::Type acc);
/// The dialect's spelling of a layout kind.
Tcgen05Kind toDialect(layout::Tcgen05Kind kind);
} // namespace tessel::tilenv

#endif
