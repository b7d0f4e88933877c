//===- DslInternal.h - what the DSL's source files share --------*- C++ -*-===//
//
// Not installed: the expression node and the helpers Program.cpp (program
// state, expressions, buffers, tile ops) and ControlFlow.cpp (loops, roles,
// mbarriers, flags) both use.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_DSL_DSLINTERNAL_H
#define TESSEL_DSL_DSLINTERNAL_H

#include "tessel/dsl/Program.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"

#include <memory>
#include <string>
#include <vector>

namespace tessel {

/// A node of an Expr: a constant, a symbol (or scalar parameter, negative
/// index), a host binary operation, or a value built in the kernel's IR.
struct ExprNode {
  enum Kind { Const, FConst, Sym, Bin, Val } kind;
  int64_t i = 0;
  double f = 0;
  char op = 0;
  std::shared_ptr<ExprNode> lhs, rhs;
  void *val = nullptr; // mlir::Value
  DType type = DType::index;
};

namespace tile {
class KernelOp;
}

namespace detail {
/// The user's line of the DSL call being built, for errors raised below it.
extern thread_local SrcLoc lastLoc;
/// The kernel whose body `p` is building (an error at `loc` outside one).
tile::KernelOp enclosingKernel(Program &p, SrcLoc loc);
/// An Expr standing for an IR value.
Expr fromValue(mlir::Value v);
/// Index values of `idx` at the current insertion point.
llvm::SmallVector<mlir::Value> indexValues(const std::vector<Expr> &idx);
const char *spaceName(Space s);
mlir::Type toMlir(mlir::MLIRContext *ctx, DType t);
bool isFloat(DType t);
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
/// "[64, ?]" for messages (-1 is a dynamic extent).
std::string shapeText(const std::vector<int64_t> &shape);
/// Runs the op's verifier; its diagnostics become a tessel::Error at the
/// user's line.
void verifyAtUserLine(mlir::Operation *op);
} // namespace detail

} // namespace tessel

#endif
