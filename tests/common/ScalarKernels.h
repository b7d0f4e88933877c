//===- ScalarKernels.h - element code on integers, for unit and GPU tests -===//
//
// Integer division of values of either sign, as the unit tests compile it
// and the GPU tests run it.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TESTS_SCALARKERNELS_H
#define TESSEL_TESTS_SCALARKERNELS_H

#include "tessel/dsl/Program.h"

#include <cstdint>

namespace tessel::test {

/// Python's integer division and remainder, the DSL's semantics.
inline int64_t floorDivision(int64_t a, int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}
inline int64_t floorRemainder(int64_t a, int64_t b) { return a - floorDivision(a, b) * b; }

/// Elements of the output rows of signedDivision(), in order.
inline constexpr int kDivisionRows = 6;
inline constexpr int64_t kDivisionElements = 256;

/// For i32 x and d of either sign, out = [x / d, x % d, x / 4, x % 4,
/// ceil_div(x, d), and the element index split as (i / 16) * 16 + i % 16]
/// (the last is index math on non-negative values).
inline Program signedDivision() {
  Program p("signed_division");
  Tensor x = p.tensor("x", {kDivisionElements}, DType::i32);
  Tensor d = p.tensor("d", {kDivisionElements}, DType::i32);
  Tensor out = p.tensor("out", {kDivisionRows, kDivisionElements}, DType::i32);
  p.kernel({kDivisionElements / 128}, 128, [&](Expr bx) {
    parallel(128, [&](Expr i) {
      Expr at = bx * 128 + i;
      Expr xv = x(at), dv = d(at);
      out(0, at) = xv / dv;
      out(1, at) = xv % dv;
      out(2, at) = xv / 4;
      out(3, at) = xv % 4;
      out(4, at) = ceil_div(xv, dv);
      out(5, at) = cast((at / 16) * 16 + at % 16, DType::i32);
    });
  });
  return p;
}

} // namespace tessel::test

#endif
