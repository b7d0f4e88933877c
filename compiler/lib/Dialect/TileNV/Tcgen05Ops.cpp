//===- Tcgen05Ops.cpp - verifiers of the tcgen05 ops ----------------------===//
//
// Each rule is the PTX ISA's for the instruction the op prints as; the
// message names it.
//
//===----------------------------------------------------------------------===//
#include "tessel/Dialect/TileNV/TileNVDialect.h"
#include "tessel/Layout/TmemLayout.h"

using namespace mlir;
using namespace tessel;
using namespace tessel::tilenv;

static LogicalResult verifyColumns(Operation *op, int64_t columns) {
  std::string why;
  std::optional<int> allocated = layout::tmemAllocationColumns(static_cast<int>(columns), &why);
  if (columns < 32 || columns > 512 || !allocated || *allocated != columns)
    return op->emitOpError("allocates ")
           << columns << " columns; tensor memory is allocated in powers of two from 32 to 512";
  return success();
}

LogicalResult Tcgen05AllocOp::verify() { return verifyColumns(*this, getColumns()); }
LogicalResult Tcgen05DeallocOp::verify() { return verifyColumns(*this, getColumns()); }

std::optional<layout::Tcgen05Formats> tessel::tilenv::tcgen05Formats(Type operand, Type acc,
                                                                      std::string &why,
                                                                      bool blockScaled) {
  using layout::Tcgen05Kind;
  if (blockScaled) {
    llvm::raw_string_ostream os(why);
    if (!llvm::isa<Float8E4M3FNType, Float8E5M2Type>(operand)) {
      os << "kind::mxf8f6f4 (block scales) multiplies e4m3 or e5m2 here, not '" << operand << "'";
      return std::nullopt;
    }
    if (!acc.isF32()) {
      os << "kind::mxf8f6f4 accumulates in f32, not '" << acc << "'";
      return std::nullopt;
    }
    int format = llvm::isa<Float8E5M2Type>(operand) ? 1 : 0;
    return layout::Tcgen05Formats{Tcgen05Kind::mxf8f6f4, format, format, 1};
  }
  std::optional<Tcgen05Kind> kind;
  int format = 0;
  if (operand.isF16() || operand.isBF16()) {
    kind = Tcgen05Kind::f16;
    format = operand.isBF16() ? 1 : 0;
  } else if (llvm::isa<Float8E4M3FNType, Float8E5M2Type>(operand)) {
    kind = Tcgen05Kind::f8f6f4;
    format = llvm::isa<Float8E5M2Type>(operand) ? 1 : 0;
  } else if (operand.isInteger(8)) {
    kind = Tcgen05Kind::i8;
    format = operand.isUnsignedInteger() ? 0 : 1;
  }
  llvm::raw_string_ostream os(why);
  if (!kind) {
    os << "tcgen05.mma multiplies f16 or bf16 (kind::f16), e4m3 or e5m2 (kind::f8f6f4) or 8-bit "
          "integers (kind::i8), not '"
       << operand << "'";
    return std::nullopt;
  }
  bool integer = *kind == Tcgen05Kind::i8;
  if (integer ? !acc.isInteger(32) : !acc.isF32() && !acc.isF16()) {
    os << "kind::" << layout::name(*kind) << " accumulates in "
       << (integer ? "i32 (s32)" : "f32 or f16") << ", not '" << acc << "'";
    return std::nullopt;
  }
  int d = integer ? 2 : acc.isF32() ? 1 : 0;
  return layout::Tcgen05Formats{*kind, format, format, d};
}

Tcgen05Kind tessel::tilenv::toDialect(layout::Tcgen05Kind kind) {
  switch (kind) {
  case layout::Tcgen05Kind::f16: return Tcgen05Kind::f16;
  case layout::Tcgen05Kind::f8f6f4: return Tcgen05Kind::f8f6f4;
  case layout::Tcgen05Kind::i8: return Tcgen05Kind::i8;
  case layout::Tcgen05Kind::mxf8f6f4: return Tcgen05Kind::mxf8f6f4;
  }
  return Tcgen05Kind::f16;
}

LogicalResult Tcgen05InstrDescOp::verify() {
  std::string why = layout::tcgen05ShapeError(static_cast<int>(getM()), static_cast<int>(getN()));
  if (!why.empty()) return emitOpError(why);
  if (!tcgen05Formats(getOperandType(), getAccType(), why, getBlockScaled()))
    return emitOpError(why);
  return success();
}

LogicalResult Tcgen05MmaOp::verify() {
  // The kind in the opcode must be the one the descriptor's types select.
  bool scaled = getKind() == Tcgen05Kind::mxf8f6f4;
  if (scaled != (getScaleA() && getScaleB()))
    return emitOpError("kind::mxf8f6f4 and only it reads scale_a and scale_b");
  auto desc = getIdesc().getDefiningOp<Tcgen05InstrDescOp>();
  if (!desc) return success();
  std::string why;
  std::optional<layout::Tcgen05Formats> formats =
      tcgen05Formats(desc.getOperandType(), desc.getAccType(), why, desc.getBlockScaled());
  if (formats && toDialect(formats->kind) != getKind())
    return emitOpError("is kind::") << stringifyTcgen05Kind(getKind()) << " but its descriptor's "
                                    << desc.getOperandType() << " operands are kind::"
                                    << layout::name(formats->kind);
  return success();
}

LogicalResult Tcgen05SmemDescOp::verify() {
  if (!layout::tcgen05SmemDescriptor(0, getLeadingBytes(), getStrideBytes(),
                                     static_cast<int>(getSwizzleBytes())))
    return emitOpError("swizzle of ") << getSwizzleBytes()
                                      << " bytes; tcgen05 takes none, 32, 64 or 128";
  for (int64_t bytes : {getLeadingBytes(), getStrideBytes()})
    if (bytes < 0 || bytes % 16 || bytes >= (int64_t(1) << 18))
      return emitOpError("byte offset ") << bytes << " is not a multiple of 16 below 2^18";
  return success();
}

static layout::TmemShape toLayout(TmemShape shape) {
  switch (shape) {
  case TmemShape::s32x32b: return layout::TmemShape::s32x32b;
  case TmemShape::s16x64b: return layout::TmemShape::s16x64b;
  case TmemShape::s16x128b: return layout::TmemShape::s16x128b;
  case TmemShape::s16x256b: return layout::TmemShape::s16x256b;
  case TmemShape::s16x32bx2: return layout::TmemShape::s16x32bx2;
  }
  return layout::TmemShape::s32x32b;
}

/// The register array and the instruction's shape, count and immediate.
static LogicalResult verifyMove(Operation *op, Value registers, TmemShape shape, int64_t num,
                                std::optional<int64_t> offset) {
  std::string why;
  if (!layout::registersPerThread(toLayout(shape), static_cast<int>(num), &why))
    return op->emitOpError(why);
  auto type = llvm::cast<MemRefType>(registers.getType());
  if (type.getElementTypeBitWidth() != 32)
    return op->emitOpError("moves 32-bit registers, not ") << type.getElementType();
  tile::MemorySpace space = tile::getMemorySpace(type);
  if (space != tile::MemorySpace::local && space != tile::MemorySpace::fragment)
    return op->emitOpError("moves a thread's registers (local or fragment storage)");
  if ((shape == TmemShape::s16x32bx2) != offset.has_value())
    return op->emitOpError("the column immediate belongs to the 16x32bx2 shape, and it needs one");
  return success();
}

LogicalResult Tcgen05LdOp::verify() {
  return verifyMove(*this, getDest(), getShape(), getNum(), getOffset());
}
LogicalResult Tcgen05StOp::verify() {
  return verifyMove(*this, getSource(), getShape(), getNum(), getOffset());
}
