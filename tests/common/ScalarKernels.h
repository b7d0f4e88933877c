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
#include <vector>

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

/// Rows of bitOperations(), in order.
inline constexpr int kBitRows = 13;

/// C++'s bit and logical operators on a u8 q, an i32 k of either sign and
/// a shift amount s in [0, 32): out = [q & 15, q >> 4, k >> s, k << s,
/// k ^ ~q, (k | 0x100) & ~0xff, k != 3, !k, (k && q) || s == 0, the low
/// nibble of q through bitcast (0x4b000000 | n is 2^23 + n as a float),
/// select(k, 1, 2), i32(f32(q) * 2), q > 127], and q8 = q + 1 stored as u8.
inline Program bitOperations() {
  Program p("bit_operations");
  Tensor q = p.tensor("q", {kDivisionElements}, DType::u8);
  Tensor k = p.tensor("k", {kDivisionElements}, DType::i32);
  Tensor s = p.tensor("s", {kDivisionElements}, DType::i32);
  Tensor out = p.tensor("out", {kBitRows, kDivisionElements}, DType::i32);
  Tensor q8 = p.tensor("q8", {kDivisionElements}, DType::u8);
  p.kernel({kDivisionElements / 128}, 128, [&](Expr bx) {
    parallel(128, [&](Expr i) {
      Expr at = bx * 128 + i;
      Expr qv = q(at), kv = k(at), sv = s(at);
      out(0, at) = qv & 15;
      out(1, at) = qv >> 4;
      out(2, at) = kv >> sv;
      out(3, at) = kv << sv;
      out(4, at) = kv ^ ~qv;
      out(5, at) = (kv | 0x100) & ~0xff;
      out(6, at) = cast(kv != 3, DType::i32);
      out(7, at) = cast(!kv, DType::i32);
      out(8, at) = cast((kv && qv) || sv == 0, DType::i32);
      out(9, at) = cast(bitcast(0x4b000000 | (qv & 15), DType::f32) - 8388608.0, DType::i32);
      out(10, at) = select(kv, Expr(1), Expr(2));
      out(11, at) = cast(cast(qv, DType::f32) * 2.0, DType::i32);
      out(12, at) = cast(qv > 127, DType::i32);
      q8(at) = qv + 1;
    });
  });
  return p;
}

/// What bitOperations() computes for one element, row by row.
inline std::vector<int32_t> bitOperationsReference(uint8_t q, int32_t k, int32_t s) {
  return {q & 15,
          q >> 4,
          k >> s,
          int32_t(uint32_t(k) << s),
          k ^ ~int32_t(q),
          (k | 0x100) & ~0xff,
          k != 3,
          !k,
          (k && q) || s == 0,
          q & 15,
          k ? 1 : 2,
          q * 2,
          q > 127};
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
