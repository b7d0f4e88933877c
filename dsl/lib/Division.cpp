//===- Division.cpp - integer division that floors ------------------------===//
//
// The DSL's integer `/` rounds toward negative infinity and `%` takes the
// divisor's sign (-7 / 4 = -2, -7 % 4 = 1), as in Python and TileLang, so a
// kernel that unpacks packed words or walks a halo before index 0 decodes
// negative values as it does positive ones. Where both operands are
// provably non-negative (block and loop indices, index symbols, non-negative
// constants, sums and products of them: isProvablyNonNegative) C's truncating
// division agrees, and that is what is built: index math stays one
// instruction.
//
//===----------------------------------------------------------------------===//
#include "ExprInternal.h"
#include "tessel/Transforms/BufferUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace tessel;

Value tessel::detail::floorDivide(OpBuilder &b, Location l, Value lhs, Value rhs) {
  if (isProvablyNonNegative(lhs) && isProvablyNonNegative(rhs))
    return arith::DivSIOp::create(b, l, lhs, rhs);
  return arith::FloorDivSIOp::create(b, l, lhs, rhs);
}

Value tessel::detail::floorRemainder(OpBuilder &b, Location l, Value lhs, Value rhs) {
  Value rem = arith::RemSIOp::create(b, l, lhs, rhs);
  if (isProvablyNonNegative(lhs) && isProvablyNonNegative(rhs)) return rem;
  // C's remainder has the dividend's sign: where it is not zero and the
  // signs of the remainder and the divisor differ, one more divisor moves it
  // into the divisor's range.
  Value zero = arith::ConstantOp::create(b, l, b.getZeroAttr(lhs.getType()));
  auto cmp = [&](arith::CmpIPredicate p, Value x, Value y) {
    return arith::CmpIOp::create(b, l, p, x, y).getResult();
  };
  Value negative = cmp(arith::CmpIPredicate::slt, rem, zero);
  APInt divisor;
  Value adjust = negative;
  if (!matchPattern(rhs, m_ConstantInt(&divisor)) || !divisor.isStrictlyPositive()) {
    Value signsDiffer = cmp(arith::CmpIPredicate::ne, negative,
                            cmp(arith::CmpIPredicate::slt, rhs, zero));
    adjust = arith::AndIOp::create(b, l, cmp(arith::CmpIPredicate::ne, rem, zero), signsDiffer);
  }
  return arith::SelectOp::create(b, l, adjust, arith::AddIOp::create(b, l, rem, rhs), rem);
}

int64_t tessel::detail::floorDivide(int64_t a, int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}

int64_t tessel::detail::floorRemainder(int64_t a, int64_t b) { return a - floorDivide(a, b) * b; }
