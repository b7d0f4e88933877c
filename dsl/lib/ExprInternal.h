//===- ExprInternal.h - what an Expr is made of -----------------*- C++ -*-===//
//
// Not installed: the node behind tessel::Expr and the scalar conversions
// that turn one into kernel IR. Expressions.cpp defines all of it but the
// floor division and remainder, which Division.cpp builds; the files that
// look inside an Expr (Program.cpp, Buffers.cpp, TileOps.cpp,
// ControlFlow.cpp) include it.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_DSL_EXPRINTERNAL_H
#define TESSEL_DSL_EXPRINTERNAL_H

#include "tessel/dsl/Program.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"

#include <memory>

namespace tessel {

/// A node of an Expr: a constant, a symbol (or scalar parameter, negative
/// index), a host binary operation, or a value built in the kernel's IR.
struct ExprNode {
  /// Unset: a default-constructed Expr, an error wherever it is read.
  enum Kind { Const, FConst, Sym, Bin, Val, Unset } kind;
  int64_t i = 0;
  double f = 0;
  char op = 0;
  std::shared_ptr<ExprNode> lhs, rhs;
  void *val = nullptr; // mlir::Value
  DType type = DType::index;
};

namespace detail {
/// An Expr standing for an IR value.
Expr fromValue(mlir::Value v);
mlir::Type toMlir(mlir::MLIRContext *ctx, DType t);
bool isFloat(DType t);
/// The message for reading an Expr that was never given a value.
inline constexpr const char *kUnsetExpr =
    "an Expr is read before it is given a value: assign a default-constructed Expr (e = ...) "
    "before using it";
/// An expression of constants and index symbols only (computable on the host).
bool isHost(const ExprNode &n);
/// `v` converted (int/float casts, widening or narrowing) to `to`.
mlir::Value convertTo(mlir::OpBuilder &b, mlir::Location l, mlir::Value v, mlir::Type to);
/// Integer division rounding toward negative infinity, and the remainder
/// with the divisor's sign (the DSL's `/` and `%`); C's truncating forms
/// where both operands are provably non-negative (Division.cpp).
mlir::Value floorDivide(mlir::OpBuilder &b, mlir::Location l, mlir::Value lhs, mlir::Value rhs);
mlir::Value floorRemainder(mlir::OpBuilder &b, mlir::Location l, mlir::Value lhs, mlir::Value rhs);
int64_t floorDivide(int64_t a, int64_t b);
int64_t floorRemainder(int64_t a, int64_t b);
} // namespace detail

} // namespace tessel

#endif
