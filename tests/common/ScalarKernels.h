//===- ScalarKernels.h - element code on integers, for unit and GPU tests -===//
//
// Element code as a user writes it (integer division and conversions of
// values of either sign, reads of a fragment every thread holds whole), as
// the unit tests compile it and the GPU tests run it.
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

/// Rows of conversions(), in order.
inline constexpr int kConversionRows = 5;

/// C++'s conversions, for f32 x and i32 k of either sign: out = [i32(x)
/// (toward zero), x != 0, k != 0, 2 * f32(k != 0), and k through i64
/// arithmetic (k * 65536 / 65536)].
inline Program conversions() {
  Program p("conversions");
  Tensor x = p.tensor("x", {kDivisionElements}, DType::f32);
  Tensor k = p.tensor("k", {kDivisionElements}, DType::i32);
  Tensor out = p.tensor("out", {kConversionRows, kDivisionElements}, DType::i32);
  p.kernel({kDivisionElements / 128}, 128, [&](Expr bx) {
    parallel(128, [&](Expr i) {
      Expr at = bx * 128 + i;
      Expr xv = x(at), kv = k(at);
      out(0, at) = cast(xv, DType::i32);
      out(1, at) = cast(cast(xv, DType::i1), DType::i32);
      out(2, at) = cast(cast(kv, DType::i1), DType::i32);
      out(3, at) = cast(cast(cast(kv, DType::i1), DType::f32) * 2.0, DType::i32);
      out(4, at) = cast(cast(kv, DType::i64) * 65536 / 65536, DType::i32);
    });
  });
  return p;
}

/// How the body of broadcastReads() reads the maximum.
enum class BroadcastForm { elementFirst, maximumFirst, maximumTwice };

/// y = exp(x - max(x)) with x read before or after the maximum, or
/// y = (x - max(x)) * max(x): a fragment every thread holds whole, read
/// inside parallel after another access or twice.
inline Program broadcastReads(BroadcastForm form) {
  Program p("broadcast_reads");
  Tensor x = p.tensor("x", {256}, DType::f32), y = p.tensor("y", {256}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer l = alloc_fragment({256}, DType::f32), mx = alloc_fragment({1}, DType::f32);
    copy(x.tile({0}, {256}), l);
    reduce_max(l, mx, 0);
    parallel(256, [&](Expr j) {
      if (form == BroadcastForm::maximumTwice) {
        l(j) = (l(j) - mx(0)) * mx(0);
        return;
      }
      Expr first = form == BroadcastForm::elementFirst ? l(j) : mx(0);
      Expr second = form == BroadcastForm::elementFirst ? mx(0) : l(j);
      l(j) = form == BroadcastForm::elementFirst ? exp(first - second) : exp(second - first);
    });
    copy(l, y.tile({0}, {256}));
  });
  return p;
}

} // namespace tessel::test

#endif
