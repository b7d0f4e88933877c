//===- TestingTests.cpp - tessel/Testing.h on the host --------------------===//
//
// The installed package's test support without a GPU: bf16 and f16
// rounding against nearest-value oracles written separately from the
// conversions (ties to even, subnormals, overflow, NaN), FP8 and integer
// elements rounding and saturating as the device does, host tensors'
// bytes round-tripping, the relative error (the non-finite cases), the
// default tolerances and what one rounding to each type costs, and the
// poison bytes reading as NaN in every float type.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "ErrorOf.h"
#include "tessel/Testing.h"
#include "tessel/runtime/Driver.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <limits>
#include <random>

using namespace tessel;
using test::errorOf;

namespace {
float floatOf(uint32_t x) { return std::bit_cast<float>(x); }
uint32_t bitsOf(float v) { return std::bit_cast<uint32_t>(v); }

/// bf16 is the upper half of a float: the code nearest to `v` by double
/// arithmetic between the truncated code and the next one up in
/// magnitude, the even one on a tie.
uint16_t bf16Oracle(float v) {
  uint32_t x = bitsOf(v);
  uint16_t lo = uint16_t(x >> 16), hi = uint16_t(lo + 1);
  // The code past the largest finite value stands for 2^128, where the
  // binade would continue: from its midpoint up everything is infinity.
  auto magnitude = [](uint16_t code) {
    return (code & 0x7fff) == 0x7f80 ? std::ldexp(1.0, 128)
                                     : std::fabs(double(floatOf(uint32_t(code) << 16)));
  };
  double a = std::fabs(double(v)), below = a - magnitude(lo), above = magnitude(hi) - a;
  if (below < above) return lo;
  if (above < below) return hi;
  return lo % 2 == 0 ? lo : hi;
}

/// The f16 value of a code by the format's definition (finite codes).
double f16Value(uint16_t code) {
  int field = (code >> 10) & 0x1f, mant = code & 0x3ff;
  double mag = field == 0 ? std::ldexp(double(mant), -24)
                          : std::ldexp(1.0 + std::ldexp(double(mant), -10), field - 15);
  return code & 0x8000 ? -mag : mag;
}

/// The f16 code nearest to a finite `v`, found among every finite value
/// (65536, the value the next code would have, stands for infinity: from
/// the midpoint 65520 up everything rounds to it).
uint16_t f16Oracle(const std::vector<double> &values, float v) {
  uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  double a = std::fabs(double(v));
  size_t hi = std::upper_bound(values.begin(), values.end(), a) - values.begin();
  if (hi == values.size()) return sign | 0x7c00;
  size_t lo = hi - 1;
  double below = a - values[lo], above = values[hi] - a;
  size_t pick = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
  return uint16_t(sign | pick);
}

const DType hostTypes[] = {DType::f32, DType::f16,    DType::bf16, DType::f8e4m3,
                           DType::f8e5m2, DType::i8, DType::u8,   DType::i32};
} // namespace

TEST_CASE("Testing.h: bf16 rounds to nearest, ties to the even code", "[testing]") {
  // Around 1.0 a bf16 ulp is 2^-7: 1 + 2^-8 is a tie between 1 (0x3f80,
  // even) and 1 + 2^-7 (0x3f81); 1 + 3 * 2^-8 one between 0x3f81 and 0x3f82.
  CHECK(testing::toBf16(1.0f) == 0x3f80);
  CHECK(testing::toBf16(1.0f + 0x1p-8f) == 0x3f80);
  CHECK(testing::toBf16(std::nextafter(1.0f + 0x1p-8f, 2.0f)) == 0x3f81);
  CHECK(testing::toBf16(1.0f + 3 * 0x1p-8f) == 0x3f82);
  CHECK(testing::toBf16(std::nextafter(1.0f + 3 * 0x1p-8f, 0.0f)) == 0x3f81);
  CHECK(testing::toBf16(-(1.0f + 0x1p-8f)) == 0xbf80);
  CHECK(testing::toBf16(-0.0f) == 0x8000);
  // Subnormals are kept, not flushed; the largest float rounds to infinity.
  CHECK(testing::toBf16(floatOf(0x00010000)) == 0x0001);
  CHECK(testing::toBf16(floatOf(0x00008000)) == 0x0000); // a tie with zero
  CHECK(testing::toBf16(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(testing::toBf16(-INFINITY) == 0xff80);
  // NaN stays NaN of its sign, whatever its payload (adding the rounding
  // bias to 0x7fffffff would carry into the sign).
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0xffffffffu}) {
    uint16_t code = testing::toBf16(floatOf(nan));
    CHECK(std::isnan(testing::fromBf16(code)));
    CHECK(bool(code & 0x8000) == bool(nan & 0x80000000u));
  }
  // Every code decodes to the float whose upper half it is.
  for (uint32_t c = 0; c < 0x10000; ++c)
    if (!std::isnan(floatOf(c << 16))) REQUIRE(bitsOf(testing::fromBf16(uint16_t(c))) == c << 16);

  std::mt19937_64 rng(11);
  int failures = 0;
  for (int i = 0; i < 2'000'000 && failures < 10; ++i) {
    float v = floatOf(uint32_t(rng()));
    // Half the inputs sit exactly on a tie (the lower 16 bits 0x8000).
    if (i % 2) v = floatOf((bitsOf(v) & 0xffff0000u) | 0x8000u);
    if (!std::isfinite(v)) continue;
    uint16_t want = bf16Oracle(v), got = testing::toBf16(v);
    if (got != want && ++failures)
      FAIL_CHECK(fmt::format("bf16 of {:a}: 0x{:04x}, the nearest is 0x{:04x}", v, got, want));
  }
  CHECK(failures == 0);
}

TEST_CASE("Testing.h: f16 rounds to nearest even, overflowing to infinity", "[testing]") {
  // Decoding is exact for every code.
  for (uint32_t c = 0; c < 0x10000; ++c) {
    uint16_t code = uint16_t(c);
    float got = testing::fromF16(code);
    if (((c >> 10) & 0x1f) == 0x1f) {
      CHECK(((c & 0x3ff) ? std::isnan(got) : std::isinf(got)));
      continue;
    }
    REQUIRE(double(got) == f16Value(code));
    REQUIRE(std::signbit(got) == bool(c & 0x8000));
  }
  CHECK(testing::toF16(1.0f) == 0x3c00);
  CHECK(testing::toF16(1.0f + 0x1p-11f) == 0x3c00);        // a tie: the even code
  CHECK(testing::toF16(1.0f + 3 * 0x1p-11f) == 0x3c02);    // a tie: the even code
  CHECK(testing::toF16(65504.0f) == 0x7bff);
  CHECK(testing::toF16(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
  CHECK(testing::toF16(65520.0f) == 0x7c00); // the midpoint to 65536 rounds to infinity
  CHECK(testing::toF16(-1e9f) == 0xfc00);
  CHECK(testing::toF16(0x1p-24f) == 0x0001);                // the smallest subnormal
  CHECK(testing::toF16(0x1p-25f) == 0x0000);                // a tie with zero
  CHECK(testing::toF16(std::nextafter(0x1p-25f, 1.0f)) == 0x0001);
  CHECK(testing::toF16(-0x1p-30f) == 0x8000);
  CHECK(std::isnan(testing::fromF16(testing::toF16(NAN))));

  std::vector<double> values;
  for (uint32_t c = 0; c < 0x7c00; ++c) values.push_back(f16Value(uint16_t(c)));
  values.push_back(65536.0);
  REQUIRE(std::is_sorted(values.begin(), values.end()));
  std::mt19937_64 rng(12);
  std::uniform_int_distribution<uint32_t> exponent(127 - 28, 127 + 17);
  int failures = 0;
  for (int i = 0; i < 2'000'000 && failures < 10; ++i) {
    uint32_t bits = uint32_t(rng());
    if (i % 2) bits = (bits & 0x807fffffu) | (exponent(rng) << 23);
    float v = floatOf(bits);
    if (!std::isfinite(v)) continue;
    uint16_t want = f16Oracle(values, v), got = testing::toF16(v);
    if (got != want && ++failures)
      FAIL_CHECK(fmt::format("f16 of {:a}: 0x{:04x}, the nearest is 0x{:04x}", v, got, want));
  }
  CHECK(failures == 0);
}

TEST_CASE("Testing.h: host tensors round FP8 and integers as the device does", "[testing]") {
  // E4M3 around 1 has steps of 1/8: 1.0625 is a tie (to 1, code 0x38),
  // 1.1875 one between 0x39 and 0x3a (to 1.25). Beyond 448 it saturates,
  // the midpoint 464 and infinities too.
  testing::HostTensor a(DType::f8e4m3, {8},
                        {1.0625f, 1.1875f, 448.0f, 464.0f, 1e9f, -INFINITY, 0x1p-10f, 0x1p-9f});
  CHECK(a.values ==
        std::vector<float>{1.0f, 1.25f, 448.0f, 448.0f, 448.0f, -448.0f, 0.0f, 0x1p-9f});
  CHECK(uint8_t(a.bytes[0]) == 0x38);
  CHECK(uint8_t(a.bytes[4]) == 0x7e);
  CHECK(uint8_t(a.bytes[5]) == 0xfe);
  // E5M2 saturates to 57344 (never its infinity) and keeps NaN as 0x7f.
  testing::HostTensor b(DType::f8e5m2, {4}, {1e6f, INFINITY, 1.125f, NAN});
  CHECK(b.values[0] == 57344.0f);
  CHECK(b.values[1] == 57344.0f);
  CHECK(uint8_t(b.bytes[1]) == 0x7b);
  CHECK(b.values[2] == 1.0f); // a tie between 1 and 1.25: the even code
  CHECK(std::isnan(b.values[3]));
  CHECK(uint8_t(b.bytes[3]) == 0x7f);
  // Integers truncate toward zero and saturate; NaN gives 0.
  testing::HostTensor i(DType::i32, {5}, {-2.7f, 3e9f, -3e9f, NAN, 16777216.0f});
  CHECK(i.values == std::vector<float>{-2.0f, 2147483648.0f, -2147483648.0f, 0.0f, 16777216.0f});
  int32_t stored[5];
  std::memcpy(stored, i.bytes.data(), sizeof(stored));
  CHECK(stored[1] == std::numeric_limits<int32_t>::max());
  CHECK(stored[2] == std::numeric_limits<int32_t>::min());
  CHECK(stored[3] == 0);
  testing::HostTensor u(DType::u8, {3}, {-5.0f, 255.9f, 300.0f});
  CHECK(u.values == std::vector<float>{0.0f, 255.0f, 255.0f});
  testing::HostTensor s(DType::i8, {3}, {-128.9f, 127.5f, -0.5f});
  CHECK(s.values == std::vector<float>{-128.0f, 127.0f, 0.0f});
  // roundTo is what an element holds, without a tensor.
  CHECK(testing::roundTo(DType::bf16, 1.0f + 3 * 0x1p-8f) == 1.015625f);
  CHECK(testing::roundTo(DType::f16, 70000.0f) == INFINITY);
  CHECK(testing::roundTo(DType::f8e4m3, -500.0f) == -448.0f);
  CHECK(testing::roundTo(DType::f32, 0.1f) == 0.1f);
}

TEST_CASE("Testing.h: a host tensor's bytes round-trip", "[testing]") {
  std::mt19937_64 rng(5);
  for (DType t : hostTypes) {
    INFO(name(t));
    testing::HostTensor x(t, {3, 5, 7});
    REQUIRE(x.size() == 105);
    REQUIRE(int64_t(x.bytes.size()) == 105 * byteSize(t));
    testing::randomize(x, rng, -300, 300);
    // The bytes alone give the same values back, as after a download.
    testing::HostTensor y(t, x.shape);
    y.bytes = x.bytes;
    y.decode();
    for (int64_t k = 0; k < x.size(); ++k) REQUIRE(bitsOf(y.values[k]) == bitsOf(x.values[k]));
    // A value already of the type is stored as it is.
    testing::HostTensor z(t, x.shape, x.values);
    CHECK(z.bytes == x.bytes);
    CHECK(z.values == x.values);
  }
  // Little-endian elements, as the device stores them.
  testing::HostTensor h(DType::bf16, {2}, {1.0f, -2.0f});
  CHECK(h.bytes == std::string("\x80\x3f\x00\xc0", 4));
  testing::HostTensor f(DType::f16, {1}, {1.0f});
  CHECK(f.bytes == std::string("\x00\x3c", 2));
  testing::HostTensor w(DType::i32, {1}, {-2.0f});
  CHECK(w.bytes == std::string("\xfe\xff\xff\xff", 4));

  CHECK_THAT(errorOf([] { (void)testing::HostTensor(DType::f64, {4}); }),
             Catch::Contains("not f64") && Catch::Contains("bf16"));
  CHECK_THAT(errorOf([] { (void)testing::HostTensor(DType::i1, {4}); }), Catch::Contains("not i1"));
  CHECK_THAT(errorOf([] { (void)testing::HostTensor(DType::f32, {2, -1}); }),
             Catch::Contains("negative extent -1"));
  CHECK_THAT(errorOf([] { (void)testing::HostTensor(DType::f32, {2, 2}, {1, 2, 3}); }),
             Catch::Contains("4 elements given 3 values"));
  CHECK_THAT(errorOf([] { (void)testing::roundTo(DType::i64, 1); }), Catch::Contains("not i64"));
}

TEST_CASE("Testing.h: random values lie in the type's range", "[testing]") {
  std::mt19937_64 rng(9), again(9);
  testing::HostTensor x(DType::bf16, {4096}), y(DType::bf16, {4096});
  testing::randomize(x, rng);
  testing::randomize(y, again);
  CHECK(x.bytes == y.bytes); // the generator decides everything
  auto [lo, hi] = std::minmax_element(x.values.begin(), x.values.end());
  CHECK((*lo >= -1 && *hi <= 1 && *lo < -0.9f && *hi > 0.9f));
  for (float v : x.values) REQUIRE(testing::roundTo(DType::bf16, v) == v);
  testing::HostTensor q(DType::u8, {4096});
  testing::randomize(q, rng, 10.5f, 12);
  auto [qlo, qhi] = std::minmax_element(q.values.begin(), q.values.end());
  CHECK((*qlo == 11 && *qhi == 12));
  CHECK_THAT(errorOf([&] { testing::randomize(q, rng, 300, 400); }),
             Catch::Contains("no u8 value lies in [300, 400]"));
}

TEST_CASE("Testing.h: relative error and its non-finite cases", "[testing]") {
  CHECK(testing::relativeError({3, 5}, {3, 4}) == Approx(0.2).epsilon(1e-12));
  CHECK(testing::relativeError({3, 4}, {3, 4}) == 0);
  CHECK(testing::relativeError({1e-3f}, {0}) > 1e20); // a zero reference: no division by zero
  // A non-finite output is infinite error, unless the reference has the
  // same infinity there.
  CHECK(std::isinf(testing::relativeError({1, NAN}, {1, 2})));
  CHECK(std::isinf(testing::relativeError({1, INFINITY}, {1, 2})));
  CHECK(std::isinf(testing::relativeError({1, -INFINITY}, {1, INFINITY})));
  CHECK(std::isinf(testing::relativeError({NAN}, {NAN})));
  CHECK(testing::relativeError({3, -INFINITY, 5}, {3, -INFINITY, 4}) ==
        Approx(0.2).epsilon(1e-12));
  CHECK_THAT(errorOf([] { testing::relativeError({1, 2}, {1, 2, 3}); }),
             Catch::Contains("2 outputs against 3 reference values"));
  testing::HostTensor out(DType::f32, {2}, {3, 5});
  CHECK(testing::relativeError(out, {3, 4}) == testing::relativeError(out.values, {3, 4}));

  // The poison bytes (0xff) read as NaN in every float type, so an element
  // a kernel leaves unwritten makes the error infinite.
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f8e4m3, DType::f8e5m2}) {
    INFO(name(t));
    testing::HostTensor poisoned(t, {4});
    poisoned.bytes.assign(poisoned.bytes.size(), char(0xff));
    poisoned.decode();
    for (float v : poisoned.values) CHECK(std::isnan(v));
    CHECK(std::isinf(testing::relativeError(poisoned, {1, 2, 3, 4})));
  }
}

TEST_CASE("Testing.h: the default tolerances allow one rounding to the type", "[testing]") {
  CHECK(testing::toleranceFor(DType::f32) == 1e-5);
  CHECK(testing::toleranceFor(DType::f16) == 1e-2);
  CHECK(testing::toleranceFor(DType::bf16) == 1e-2);
  CHECK(testing::toleranceFor(DType::f8e4m3) == 0x1p-4);
  CHECK(testing::toleranceFor(DType::f8e5m2) == 0x1p-3);
  CHECK(testing::toleranceFor(DType::i8) == 1e-6);
  CHECK(testing::toleranceFor(DType::u8) == 1e-6);
  // A float64 reference of values in [-4, 4], and the same values stored
  // once in each type: within the type's tolerance, and the worst single
  // element (a value just past a power of two) within half an ulp.
  std::mt19937_64 rng(21);
  std::uniform_real_distribution<double> dist(-4, 4);
  std::vector<double> ref(8192);
  for (double &v : ref) v = dist(rng);
  for (DType t : {DType::f16, DType::bf16, DType::f8e4m3, DType::f8e5m2}) {
    INFO(name(t));
    testing::HostTensor x(t, {int64_t(ref.size())});
    for (size_t k = 0; k < ref.size(); ++k) x.set(int64_t(k), float(ref[k]));
    double error = testing::relativeError(x, ref);
    CHECK(error > 0);
    CHECK(error < testing::toleranceFor(t));
  }
  testing::HostTensor e4m3(DType::f8e4m3, {1}, {1.0625f + 0x1p-20f}); // just past a tie
  CHECK(testing::relativeError(e4m3, {1.0625 + 0x1p-20}) < testing::toleranceFor(DType::f8e4m3));
}

TEST_CASE("Testing.h: synchronize needs a device and says so", "[testing]") {
  std::string why;
  if (rt::Driver::available(&why)) {
    CHECK_NOTHROW(testing::synchronize());
    return;
  }
  INFO(why);
  CHECK_THROWS_AS(testing::synchronize(), Error);
}
