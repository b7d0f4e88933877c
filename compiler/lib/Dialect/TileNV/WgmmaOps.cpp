//===- WgmmaOps.cpp - verifiers of the wgmma ops --------------------------===//
//
// Each rule is the PTX ISA's for the instruction the op prints as; the
// message names it.
//
//===----------------------------------------------------------------------===//
#include "tessel/Dialect/TileNV/TileNVDialect.h"

using namespace mlir;
using namespace tessel;
using namespace tessel::tilenv;

bool tessel::tilenv::registerAccumulatorTaken(Type operand, Type acc) {
  if (operand.isInteger(8)) return acc.isInteger(32);
  bool halfForm = operand.isF16() || llvm::isa<Float8E4M3FNType, Float8E5M2Type>(operand);
  bool floating = halfForm || operand.isBF16();
  return floating && (acc.isF32() || (acc.isF16() && halfForm));
}

LogicalResult WgmmaOp::verify() {
  Type operand = getOperandType();
  Type acc = llvm::cast<MemRefType>(getAcc().getType()).getElementType();
  int64_t n = getN();
  if (n < 8 || n > 256 || n % 8)
    return emitOpError("wgmma's N is a multiple of 8 from 8 to 256, got ") << n;
  // f16 and FP8 products may accumulate in f16 (packed pairs), bf16 ones
  // in f32 only.
  if (operand.isF16() || operand.isBF16()) {
    if (!registerAccumulatorTaken(operand, acc))
      return emitOpError("a wgmma of ") << operand << " accumulates in f32"
                                        << (operand.isF16() ? " or f16" : "");
    return success();
  }
  bool fp8 = llvm::isa<Float8E4M3FNType, Float8E5M2Type>(operand);
  if (!fp8 && !operand.isInteger(8))
    return emitOpError("wgmma takes f16, bf16, e4m3, e5m2, s8 or u8 operands, got ") << operand;
  if (getTransA() || getTransB())
    return emitOpError("a wgmma of ") << operand << " operands has no transposed form (both K-major)";
  if (!registerAccumulatorTaken(operand, acc))
    return emitOpError("a wgmma of ") << operand << " accumulates in " << (fp8 ? "f32 or f16" : "i32");
  return success();
}
