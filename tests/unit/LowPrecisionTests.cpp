//===- LowPrecisionTests.cpp - FP8 conversions, 8-bit DLPack and tensors --===//
//
// The host's FP8 conversions against exact formulas and a nearest-value
// oracle written separately from them: every code decoded, every value and
// every midpoint between neighbours encoded, the special values, and
// millions of random floats. Then 8-bit DLPack import, host tensors of the
// 8-bit types, and the FP8 cast programs the GPU tests run compiled for
// each target. Last, the same for the ue8m0 scale type (round up, checked
// against a frexp oracle).
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "ErrorOf.h"
#include "tessel/Tessel.h"
#include "tessel/Testing.h"
#include "tessel/dsl/Compile.h"
#include "tessel/harness/LibrarySupport.h"
#include "tessel/runtime/LowPrecision.h"
#include "LowPrecisionKernels.h"

#include <algorithm>
#include <unistd.h>
#include <fstream>
#include <filesystem>
#include <bit>
#include <cmath>
#include <dlpack/dlpack.h>
#include <fmt/format.h>
#include <limits>
#include <random>

using namespace tessel;
using rt::ScalarType;

namespace {
/// One FP8 format: its conversions and the parameters of its exact values.
struct Format {
  const char *name;
  uint8_t (*encode)(float);
  float (*decode)(uint8_t);
  int mant, bias;
  uint8_t maxCode;
  double max;
  bool hasInfinity; // E5M2; E4M3 has none and only S.1111.111 is NaN
};

const Format e4m3{"e4m3", rt::toE4M3, rt::fromE4M3, 3, 7, 0x7e, 448, false};
const Format e5m2{"e5m2", rt::toE5M2, rt::fromE5M2, 2, 15, 0x7b, 57344, true};
const Format formats[] = {e4m3, e5m2};

enum class Kind { finite, infinity, nan };

Kind kindOf(const Format &f, uint8_t code) {
  unsigned field = (code & 0x7f) >> f.mant, mant = code & ((1u << f.mant) - 1);
  if (!f.hasInfinity) return (code & 0x7f) == 0x7f ? Kind::nan : Kind::finite;
  if (field != (1u << (7 - f.mant)) - 1) return Kind::finite;
  return mant == 0 ? Kind::infinity : Kind::nan;
}

/// The value of a finite code by the formats' definition:
/// (-1)^s * 2^(e - bias) * (1 + m / 2^mant), or 2^(1 - bias) * m / 2^mant
/// for e = 0.
double exactValue(const Format &f, uint8_t code) {
  int field = (code & 0x7f) >> f.mant, mant = code & ((1 << f.mant) - 1);
  double mag = field == 0 ? std::ldexp(double(mant), 1 - f.bias - f.mant)
                          : std::ldexp(1.0 + std::ldexp(double(mant), -f.mant), field - f.bias);
  return code & 0x80 ? -mag : mag;
}

uint32_t bitsOf(float v) { return std::bit_cast<uint32_t>(v); }
float floatOf(uint32_t x) { return std::bit_cast<float>(x); }

/// The finite non-negative codes in increasing order of value (which is
/// their order as numbers too).
std::vector<uint8_t> positiveCodes(const Format &f) {
  std::vector<uint8_t> codes;
  for (unsigned c = 0; c <= f.maxCode; ++c) codes.push_back(uint8_t(c));
  return codes;
}

/// The code `cvt.rn.satfinite` gives, found by search: the nearest of the
/// format's finite values to v in double precision, the even code on a
/// tie, MAX_NORM beyond it (infinities included), 0x7f for NaN.
uint8_t oracle(const Format &f, const std::vector<double> &values, float v) {
  if (std::isnan(v)) return 0x7f;
  uint8_t sign = std::signbit(v) ? 0x80 : 0;
  double a = std::fabs(double(v));
  if (a >= f.max) return sign | f.maxCode;
  size_t hi = std::upper_bound(values.begin(), values.end(), a) - values.begin();
  size_t lo = hi - 1; // values[0] = 0 <= a
  double below = a - values[lo], above = values[hi] - a;
  size_t pick = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
  return sign | uint8_t(pick);
}

std::string hexOf(float v) { return fmt::format("{} (0x{:08x})", v, bitsOf(v)); }

using test::errorOf;

DLManagedTensor deviceTensor(DLDataType dtype, int64_t *shape) {
  DLManagedTensor managed{};
  DLTensor &t = managed.dl_tensor;
  t.data = reinterpret_cast<void *>(uintptr_t(0x10000));
  t.device = {kDLCUDA, 0};
  t.ndim = 1;
  t.dtype = dtype;
  t.shape = shape;
  return managed;
}
} // namespace

TEST_CASE("every FP8 code decodes to its exact value", "[fp8]") {
  for (const Format &f : formats)
    for (unsigned c = 0; c < 256; ++c) {
      uint8_t code = uint8_t(c);
      float got = f.decode(code);
      INFO(f.name << " code 0x" << std::hex << c << ": " << hexOf(got));
      switch (kindOf(f, code)) {
      case Kind::nan: CHECK(std::isnan(got)); break;
      case Kind::infinity: CHECK(got == (code & 0x80 ? -INFINITY : INFINITY)); break;
      case Kind::finite:
        CHECK(double(got) == exactValue(f, code));
        CHECK(std::signbit(got) == bool(code & 0x80)); // -0 included
      }
    }
  // The extremes, spelled out.
  CHECK(rt::fromE4M3(0x7e) == 448.0f);
  CHECK(rt::fromE4M3(0x01) == std::ldexp(1.0f, -9));
  CHECK(rt::fromE4M3(0x08) == std::ldexp(1.0f, -6));
  CHECK(rt::fromE5M2(0x7b) == 57344.0f);
  CHECK(rt::fromE5M2(0x01) == std::ldexp(1.0f, -16));
  CHECK(rt::fromE5M2(0x04) == std::ldexp(1.0f, -14));
  CHECK(std::isinf(rt::fromE5M2(0x7c)));
  CHECK(std::isnan(rt::fromE5M2(0x7d)));
  CHECK(std::isnan(rt::fromE4M3(0xff)));
}

TEST_CASE("FP8 encoding is exact at every representable value", "[fp8]") {
  for (const Format &f : formats)
    for (unsigned c = 0; c < 256; ++c) {
      uint8_t code = uint8_t(c);
      if (kindOf(f, code) != Kind::finite) continue;
      INFO(f.name << " code 0x" << std::hex << c);
      CHECK(f.encode(float(exactValue(f, code))) == code);
    }
}

TEST_CASE("FP8 encoding rounds midpoints to the even code, their neighbours to the nearer",
          "[fp8]") {
  for (const Format &f : formats)
    for (uint8_t sign : {0x00, 0x80})
      // Codes c and c + 1 are neighbouring values. Past maxCode, c + 1 is
      // the value the formula gives the next code (480 for E4M3, 65536 for
      // E5M2): from MAX_NORM up everything saturates, its midpoint too.
      for (unsigned c = 0; c <= f.maxCode; ++c) {
        double lo = exactValue(f, uint8_t(c)), hi = exactValue(f, uint8_t(c + 1));
        float mid = float((lo + hi) / 2); // at most 5 significant bits: exact
        REQUIRE(double(mid) == (lo + hi) / 2);
        if (sign) mid = -mid;
        uint8_t low = uint8_t(sign | c);
        uint8_t high = c == f.maxCode ? low : uint8_t(sign | (c + 1));
        uint8_t even = c % 2 == 0 ? low : high;
        INFO(f.name << " between codes 0x" << std::hex << unsigned(low) << " and 0x" << c + 1
                    << ": " << hexOf(mid));
        CHECK(f.encode(mid) == even);
        float inner = std::nextafter(mid, 0.0f);
        float outer = std::nextafter(mid, sign ? -INFINITY : INFINITY);
        CHECK(f.encode(inner) == low);
        CHECK(f.encode(outer) == high);
      }
}

TEST_CASE("FP8 encoding of zeros, underflow, overflow, infinities and NaN", "[fp8]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const Format &f : formats) {
    INFO(f.name);
    float tiny = std::ldexp(1.0f, 1 - f.bias - f.mant); // the smallest subnormal
    CHECK(f.encode(0.0f) == 0x00);
    CHECK(f.encode(-0.0f) == 0x80);
    CHECK(f.encode(tiny) == 0x01);
    CHECK(f.encode(-tiny) == 0x81);
    // Half of it is a tie with zero (even); anything less rounds to a zero
    // of the value's sign, anything more to the subnormal.
    CHECK(f.encode(tiny / 2) == 0x00);
    CHECK(f.encode(-tiny / 2) == 0x80);
    CHECK(f.encode(std::nextafter(tiny / 2, 1.0f)) == 0x01);
    CHECK(f.encode(-std::nextafter(tiny / 2, 1.0f)) == 0x81);
    for (float small : {tiny / 4, std::nextafter(tiny / 2, 0.0f), std::ldexp(1.0f, -100),
                        std::numeric_limits<float>::min(),
                        std::numeric_limits<float>::denorm_min()}) {
      INFO(hexOf(small));
      CHECK(f.encode(small) == 0x00);
      CHECK(f.encode(-small) == 0x80);
    }
    // Past MAX_NORM everything saturates to it, infinities too.
    float max = float(f.max);
    for (float big : {max, std::nextafter(max, INFINITY), max * 1.0625f, max * 1.125f, max * 2,
                      1e30f, std::numeric_limits<float>::max(), INFINITY}) {
      INFO(hexOf(big));
      CHECK(f.encode(big) == f.maxCode);
      CHECK(f.encode(-big) == (0x80 | f.maxCode));
    }
    // Every NaN, of either sign and any payload, is 0x7f.
    for (uint32_t bits : {bitsOf(nan), bitsOf(-nan), 0x7f800001u, 0xff800001u, 0x7fbfffffu,
                          0x7fffffffu, 0xffffffffu, 0x7fc00001u})
      CHECK(f.encode(floatOf(bits)) == 0x7f);
  }
  CHECK(rt::toE4M3(1.0f) == 0x38);
  CHECK(rt::toE5M2(1.0f) == 0x3c);
  CHECK(rt::toE4M3(-2.0f) == 0xc0);
  CHECK(rt::toE5M2(0.1f) == 0x2e); // 0.09375 < 0.1 < 0.125: 0.1 is nearer 0.09375
}

TEST_CASE("FP8 encoding of random floats picks the nearest value", "[fp8]") {
  std::mt19937_64 rng(20261126);
  for (const Format &f : formats) {
    std::vector<double> values;
    for (uint8_t c : positiveCodes(f)) values.push_back(exactValue(f, c));
    REQUIRE(std::is_sorted(values.begin(), values.end()));
    // Any bit pattern (most are far outside FP8's range), and patterns
    // whose exponent falls within a few binades of it.
    std::uniform_int_distribution<int> exponent(127 - f.bias - f.mant - 4, 127 + f.bias + 4);
    int failures = 0;
    for (int i = 0; i < 4'000'000 && failures < 10; ++i) {
      uint32_t bits = uint32_t(rng());
      if (i % 2) bits = (bits & 0x807fffffu) | (uint32_t(exponent(rng)) << 23);
      float v = floatOf(bits);
      uint8_t want = oracle(f, values, v), got = f.encode(v);
      if (got != want) {
        ++failures;
        FAIL_CHECK(fmt::format("{} of {}: 0x{:02x}, the nearest value is 0x{:02x}", f.name,
                               hexOf(v), got, want));
      }
    }
    CHECK(failures == 0);
  }
}

TEST_CASE("DLPack tensors of 8-bit types become views", "[fp8][views]") {
  int64_t shape[] = {16};
  struct Case {
    DLDataType dtype;
    ScalarType want;
  };
  // Codes as DLPack 1.1 numbers them: kDLFloat8_e4m3fn = 10, kDLFloat8_e5m2 = 12.
  for (Case c : {Case{{kDLInt, 8, 1}, ScalarType::I8}, Case{{kDLUInt, 8, 1}, ScalarType::U8},
                 Case{{10, 8, 1}, ScalarType::F8E4M3}, Case{{12, 8, 1}, ScalarType::F8E5M2},
                 Case{{6, 8, 1}, ScalarType::I1}, Case{{kDLInt, 32, 1}, ScalarType::I32}}) {
    DLManagedTensor t = deviceTensor(c.dtype, shape);
    CHECK(rt::fromDLPack(t).dtype == c.want);
  }
  struct Refused {
    uint8_t code;
    const char *name;
  };
  for (Refused r : {Refused{7, "float8_e3m4"}, Refused{8, "float8_e4m3 "},
                    Refused{9, "float8_e4m3b11fnuz"}, Refused{11, "float8_e4m3fnuz"},
                    Refused{13, "float8_e5m2fnuz"}}) {
    DLManagedTensor t = deviceTensor({r.code, 8, 1}, shape);
    CHECK_THAT(errorOf([&] { rt::fromDLPack(t); }),
               Catch::Contains(r.name) && Catch::Contains("float8_e4m3fn (code 10)") &&
                   Catch::Contains("float8_e5m2 (code 12)"));
  }
  // Other widths of the 8-bit codes, and float8 spelled as kDLFloat.
  for (DLDataType t : {DLDataType{kDLUInt, 16, 1}, DLDataType{kDLInt, 16, 1}, DLDataType{10, 16, 1},
                       DLDataType{kDLFloat, 8, 1}, DLDataType{17, 4, 1}}) {
    DLManagedTensor m = deviceTensor(t, shape);
    CHECK_THAT(errorOf([&] { rt::fromDLPack(m); }),
               Catch::Contains(fmt::format("(code {}, {} bits) is not supported", int(t.code),
                                           int(t.bits))) &&
                   Catch::Contains("float8_e4m3fn"));
  }
}

TEST_CASE("host tensors of 8-bit types hold what the device sees", "[fp8]") {
  using testing::HostTensor;
  HostTensor a(DType::f8e4m3, {6}), b(DType::f8e5m2, {6}), i(DType::i8, {6}), u(DType::u8, {6});
  const float in[] = {0.1f, -3.3f, 1000.0f, -INFINITY, 1e-6f, 17.0f};
  for (int k = 0; k < 6; ++k)
    for (HostTensor *t : {&a, &b, &i, &u}) t->set(k, in[k]);
  CHECK(a.values == std::vector<float>{0.1015625f, -3.25f, 448.0f, -448.0f, 0.0f, 16.0f});
  CHECK(b.values == std::vector<float>{0.09375f, -3.5f, 1024.0f, -57344.0f, 0.0f, 16.0f});
  // Integers truncate toward zero and saturate.
  CHECK(i.values == std::vector<float>{0.0f, -3.0f, 127.0f, -128.0f, 0.0f, 17.0f});
  CHECK(u.values == std::vector<float>{0.0f, 0.0f, 255.0f, 0.0f, 0.0f, 17.0f});
  CHECK(a.bytes.size() == 6);
  CHECK(uint8_t(a.bytes[2]) == 0x7e);
  CHECK(uint8_t(b.bytes[3]) == 0xfb);
  CHECK(uint8_t(i.bytes[1]) == 0xfd);
  CHECK(uint8_t(u.bytes[2]) == 0xff);

  // decode() reads the bytes back: every code, as the device would leave them.
  for (DType t : {DType::f8e4m3, DType::f8e5m2, DType::i8, DType::u8}) {
    HostTensor h(t, {256});
    for (int c = 0; c < 256; ++c) h.bytes[c] = char(c);
    h.decode();
    for (int c = 0; c < 256; ++c) {
      float want = t == DType::f8e4m3   ? rt::fromE4M3(uint8_t(c))
                   : t == DType::f8e5m2 ? rt::fromE5M2(uint8_t(c))
                   : t == DType::i8     ? float(int8_t(c))
                                        : float(c);
      INFO(name(t) << " byte " << c);
      CHECK(bitsOf(h.values[c]) == bitsOf(want));
    }
  }

  // Random values are the type's, in its usual range.
  std::mt19937_64 rng(3);
  HostTensor r8(DType::f8e4m3, {4096}), ri(DType::i8, {4096}), ru(DType::u8, {4096});
  for (HostTensor *t : {&r8, &ri, &ru}) testing::randomize(*t, rng);
  auto [lo8, hi8] = std::minmax_element(r8.values.begin(), r8.values.end());
  CHECK((*lo8 >= -1 && *hi8 <= 1 && *lo8 < -0.5f && *hi8 > 0.5f));
  for (size_t k = 0; k < r8.values.size(); ++k)
    CHECK(rt::fromE4M3(uint8_t(r8.bytes[k])) == r8.values[k]);
  auto [loI, hiI] = std::minmax_element(ri.values.begin(), ri.values.end());
  CHECK((*loI == -128 && *hiI == 127));
  auto [loU, hiU] = std::minmax_element(ru.values.begin(), ru.values.end());
  CHECK((*loU == 0 && *hiU == 255));
  testing::randomize(ri, rng, -2.5f, 300);
  auto [lo2, hi2] = std::minmax_element(ri.values.begin(), ri.values.end());
  CHECK((*lo2 == -2 && *hi2 == 127));

  CHECK(testing::toleranceFor(DType::f8e4m3) == 0.0625);
  CHECK(testing::toleranceFor(DType::f8e5m2) == 0.125);
  CHECK(testing::toleranceFor(DType::f32) == 1e-5);
  CHECK(testing::toleranceFor(DType::bf16) == 1e-2);
  for (auto [word, t] : {std::pair{"e4m3", DType::f8e4m3}, std::pair{"f8e4m3", DType::f8e4m3},
                         std::pair{"e5m2", DType::f8e5m2}, std::pair{"f8e5m2", DType::f8e5m2},
                         std::pair{"i8", DType::i8}, std::pair{"u8", DType::u8},
                         std::pair{"bf16", DType::bf16}})
    CHECK(harness::dtypeParam({{"dtype", word}}, "dtype") == t);
  CHECK_THAT(errorOf([] { harness::dtypeParam({{"dtype", "f8"}}, "dtype"); }),
             Catch::Contains("f16") && Catch::Contains("e4m3") && Catch::Contains("u8"));
}

TEST_CASE("the FP8 cast programs compile for every target", "[fp8]") {
  for (const char *arch : {"sm_80", "sm_89", "sm_90a", "sm_100a"}) {
    INFO(arch);
    Program enc = test::fp8Encode(), dec = test::fp8Decode();
    Kernel e = compile(enc, {.arch = arch});
    Kernel d = compile(dec, {.arch = arch});
    CHECK_THAT(e.cuda(), Catch::Contains("f8e4m3") && Catch::Contains("f8e5m2"));
    // sm_89 and later convert in hardware; sm_80 through the device
    // header's software encoder.
    bool hardware = std::string(arch) != "sm_80";
    CHECK((e.ptx().find("cvt.rn.satfinite.e4m3x2.f32") != std::string::npos) == hardware);
    CHECK((e.ptx().find("cvt.rn.satfinite.e5m2x2.f32") != std::string::npos) == hardware);
    CHECK(e.spec().params.size() == 4);
    CHECK(d.spec().params.size() == 5);
    // Between fragments the conversions go in pairs: one cvt for two
    // values from sm_89 on, and each value by itself on sm_80.
    Program paired = test::fp8Encode(/*inRegisters=*/true);
    Kernel r = compile(paired, {.arch = arch});
    CHECK(r.cuda().find("tessel::convert_pair(") != std::string::npos);
    CHECK(r.cuda().find("tessel::f8e4m3(") == std::string::npos);
    CHECK((r.ptx().find("cvt.rn.satfinite.e4m3x2.f32") != std::string::npos) == hardware);
    CHECK((r.ptx().find("cvt.rn.satfinite.e5m2x2.f32") != std::string::npos) == hardware);
    CHECK(r.spillBytes() == 0);
  }
}

//===----------------------------------------------------------------------===//
// ue8m0, the OCP MX scale type
//===----------------------------------------------------------------------===//

namespace {
/// The code `cvt.rp.satfinite.ue8m0x2.f32` gives, from frexp in double
/// rather than the float's bits: 0xff for NaN, else the exponent of the
/// smallest power of two at least |v| (2^-127 at least, 2^127 at most)
/// plus 127.
uint8_t ue8m0Oracle(float v) {
  if (std::isnan(v)) return 0xff;
  double a = std::fabs(double(v));
  if (a <= std::ldexp(1.0, -127)) return 0x00; // zeros too
  if (a > std::ldexp(1.0, 127)) return 0xfe;   // infinities too
  int e;
  double m = std::frexp(a, &e); // a = m * 2^e, m in [0.5, 1)
  return uint8_t((m == 0.5 ? e - 1 : e) + 127);
}
} // namespace

TEST_CASE("every ue8m0 code decodes to 2^(code - 127), 0xff to NaN", "[fp8][ue8m0]") {
  for (unsigned c = 0; c < 256; ++c) {
    float got = rt::fromUE8M0(uint8_t(c));
    INFO("code 0x" << std::hex << c << ": " << hexOf(got));
    if (c == 0xff) {
      CHECK(std::isnan(got));
      continue;
    }
    CHECK(double(got) == std::ldexp(1.0, int(c) - 127));
    CHECK_FALSE(std::signbit(got));
  }
  CHECK(rt::fromUE8M0(0x7f) == 1.0f);
  CHECK(rt::fromUE8M0(0x80) == 2.0f);
  CHECK(rt::fromUE8M0(0x7e) == 0.5f);
  CHECK(rt::fromUE8M0(0xfe) == rt::kUE8M0Max);
  CHECK(rt::fromUE8M0(0xfe) == std::ldexp(1.0f, 127));
  // 2^-127 is a float subnormal (only half of FLT_MIN), not zero.
  CHECK(bitsOf(rt::fromUE8M0(0x00)) == 0x00400000u);
  CHECK(rt::fromUE8M0(0x00) == rt::kUE8M0Min);
  CHECK(rt::fromUE8M0(0x01) == std::numeric_limits<float>::min());
}

TEST_CASE("ue8m0 encoding rounds up to the next power of two and saturates", "[fp8][ue8m0]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Each code's value, and the floats next to it: just above rounds up to
  // the next code, just below to this one, anywhere between two powers of
  // two (the midpoint 1.5 * 2^k too) to the upper one. The sign is ignored.
  for (unsigned c = 0; c <= rt::kUE8M0MaxCode; ++c) {
    float v = rt::fromUE8M0(uint8_t(c));
    uint8_t next = uint8_t(c < rt::kUE8M0MaxCode ? c + 1 : c);
    INFO("code 0x" << std::hex << c << ": " << hexOf(v));
    for (float s : {1.0f, -1.0f}) {
      CHECK(rt::toUE8M0(s * v) == c);
      CHECK(rt::toUE8M0(s * std::nextafter(v, INFINITY)) == next);
      CHECK(rt::toUE8M0(s * std::nextafter(v, 0.0f)) == c);
      CHECK(rt::toUE8M0(s * v * 1.5f) == next);
      CHECK(rt::toUE8M0(s * std::nextafter(2 * v, 0.0f)) == next);
    }
  }
  // Everything up to 2^-127 (zeros, the smallest subnormals) is code 0;
  // above it, the subnormals round up to 2^-126.
  for (float small : {0.0f, -0.0f, std::numeric_limits<float>::denorm_min(), 0x1p-140f,
                      0x1p-128f, std::nextafter(0x1p-127f, 0.0f), 0x1p-127f})
    for (float s : {1.0f, -1.0f}) {
      INFO(hexOf(s * small));
      CHECK(rt::toUE8M0(s * small) == 0x00);
    }
  for (float sub : {std::nextafter(0x1p-127f, 1.0f), 0x1.8p-127f,
                    std::nextafter(std::numeric_limits<float>::min(), 0.0f),
                    std::numeric_limits<float>::min()}) {
    INFO(hexOf(sub));
    CHECK(rt::toUE8M0(sub) == 0x01);
  }
  // Past 2^127 everything saturates to it, infinities too.
  for (float big : {std::nextafter(0x1p127f, INFINITY), 0x1.8p127f,
                    std::numeric_limits<float>::max(), INFINITY})
    for (float s : {1.0f, -1.0f}) {
      INFO(hexOf(s * big));
      CHECK(rt::toUE8M0(s * big) == rt::kUE8M0MaxCode);
    }
  // Every NaN, of either sign and any payload, is 0xff.
  for (uint32_t bits : {bitsOf(nan), bitsOf(-nan), 0x7f800001u, 0xff800001u, 0x7fbfffffu,
                        0x7fffffffu, 0xffffffffu, 0x7fc00001u})
    CHECK(rt::toUE8M0(floatOf(bits)) == rt::kUE8M0NaNCode);
  // Scales as an MX quantiser computes them, amax / 448 for E4M3 elements:
  // rounded up, so amax / scale stays at most 448.
  CHECK(rt::toUE8M0(1.0f) == 0x7f);
  CHECK(rt::toUE8M0(3.0f) == 0x81);    // 4, not the nearer 2
  CHECK(rt::toUE8M0(1.0001f) == 0x80); // 2
  CHECK(rt::toUE8M0(0.3f) == 0x7e);    // 0.5
  for (float amax : {1.0f, 448.0f, 449.0f, 1000.0f, 0.01f, 3e20f, 7e-30f}) {
    float scale = rt::fromUE8M0(rt::toUE8M0(amax / 448.0f));
    INFO(amax);
    CHECK(amax / scale <= 448.0f);
    CHECK(amax / scale > 224.0f);
  }
  // Random floats against the oracle: any bit pattern, and patterns whose
  // exponent is near the ends of the range or near 1.
  std::mt19937_64 rng(20261127);
  std::uniform_int_distribution<int> exponent(0, 255);
  int failures = 0;
  for (int i = 0; i < 4'000'000 && failures < 10; ++i) {
    uint32_t bits = uint32_t(rng());
    if (i % 2) bits = (bits & 0x807fffffu) | (uint32_t(exponent(rng)) << 23);
    if (i % 8 == 1) bits &= 0xff800000u | uint32_t(rng() & 0xf); // mantissas of few bits
    float v = floatOf(bits);
    uint8_t want = ue8m0Oracle(v), got = rt::toUE8M0(v);
    if (got != want) {
      ++failures;
      FAIL_CHECK(fmt::format("ue8m0 of {}: 0x{:02x}, rounded up it is 0x{:02x}", hexOf(v), got,
                             want));
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("every ue8m0 code survives a round trip through float", "[fp8][ue8m0]") {
  for (unsigned c = 0; c < 256; ++c) {
    INFO("code 0x" << std::hex << c);
    CHECK(rt::toUE8M0(rt::fromUE8M0(uint8_t(c))) == c);
    // And through the host tensor that stores it.
    testing::HostTensor t(DType::ue8m0, {1});
    t.set(0, rt::fromUE8M0(uint8_t(c)));
    CHECK(uint8_t(t.bytes[0]) == c);
    CHECK(bitsOf(t.values[0]) == bitsOf(rt::fromUE8M0(uint8_t(c))));
  }
}

TEST_CASE("DLPack float8_e8m0fnu tensors become ue8m0 views", "[fp8][ue8m0][views]") {
  int64_t shape[] = {16};
  // kDLFloat8_e8m0fnu = 14 in DLPack 1.1's include/dlpack/dlpack.h.
  DLManagedTensor t = deviceTensor({14, 8, 1}, shape);
  TensorView v = rt::fromDLPack(t);
  CHECK(v.dtype == ScalarType::UE8M0);
  CHECK(v.str() == "ue8m0[16] on device 0");
  CHECK(rt::scalarBytes(ScalarType::UE8M0) == 1);
  CHECK(std::string(rt::scalarName(ScalarType::UE8M0)) == "ue8m0");
  // Another width of the code is refused; so are the 8-bit floats Tessel
  // has no type for, by a message that names the three it has.
  DLManagedTensor wide = deviceTensor({14, 16, 1}, shape);
  CHECK_THAT(errorOf([&] { rt::fromDLPack(wide); }),
             Catch::Contains("(code 14, 16 bits) is not supported") &&
                 Catch::Contains("float8_e8m0fnu"));
  DLManagedTensor fnuz = deviceTensor({13, 8, 1}, shape);
  CHECK_THAT(errorOf([&] { rt::fromDLPack(fnuz); }),
             Catch::Contains("float8_e5m2fnuz") && Catch::Contains("float8_e8m0fnu (code 14)"));
}

TEST_CASE("host tensors of ue8m0 hold scales as the device stores them", "[fp8][ue8m0]") {
  using testing::HostTensor;
  CHECK(std::string(name(DType::ue8m0)) == "ue8m0");
  CHECK(byteSize(DType::ue8m0) == 1);
  // No zero: zero bytes are 2^-127, and `values` says so.
  HostTensor zeros(DType::ue8m0, {3});
  CHECK(zeros.bytes == std::string(3, '\0'));
  CHECK(zeros.values == std::vector<float>(3, 0x1p-127f));
  HostTensor s(DType::ue8m0, {7}, {1.0f, 3.0f, -0.3f, 0.0f, 1e30f, INFINITY, NAN});
  CHECK(std::vector<float>(s.values.begin(), s.values.begin() + 6) ==
        std::vector<float>{1.0f, 4.0f, 0.5f, 0x1p-127f, 0x1p100f, 0x1p127f});
  CHECK(std::isnan(s.values[6]));
  CHECK(s.bytes == std::string("\x7f\x81\x7e\x00\xe3\xfe\xff", 7));
  CHECK(testing::roundTo(DType::ue8m0, 5.0f) == 8.0f);

  // decode() reads every code back.
  HostTensor all(DType::ue8m0, {256});
  for (int c = 0; c < 256; ++c) all.bytes[c] = char(c);
  all.decode();
  for (int c = 0; c < 256; ++c) {
    INFO("byte " << c);
    CHECK(bitsOf(all.values[c]) == bitsOf(rt::fromUE8M0(uint8_t(c))));
  }

  // Random scales are powers of two around 1, every exponent in [-8, 8]
  // about equally often; with bounds, the powers of two within them.
  std::mt19937_64 rng(5);
  HostTensor r(DType::ue8m0, {17 * 400});
  testing::randomize(r, rng);
  std::vector<int> seen(17);
  for (int64_t k = 0; k < r.size(); ++k) {
    int e = int(uint8_t(r.bytes[k])) - 127;
    REQUIRE((e >= -8 && e <= 8));
    CHECK(r.values[k] == std::ldexp(1.0f, e));
    ++seen[e + 8];
  }
  auto [fewest, most] = std::minmax_element(seen.begin(), seen.end());
  CHECK((*fewest > 300 && *most < 500));
  testing::randomize(r, rng, 3.0f, 40.0f); // 4, 8, 16, 32
  auto [lo, hi] = std::minmax_element(r.values.begin(), r.values.end());
  CHECK((*lo == 4.0f && *hi == 32.0f));
  CHECK_THAT(errorOf([&] { testing::randomize(r, rng, 3.0f, 3.5f); }),
             Catch::Contains("no ue8m0 value lies in [3, 3.5]"));

  // Exact, as a reference computes scales with rt::toUE8M0.
  CHECK(testing::toleranceFor(DType::ue8m0) == 1e-6);
  CHECK(harness::dtypeParam({{"dtype", "ue8m0"}}, "dtype") == DType::ue8m0);
}

TEST_CASE("the ue8m0 cast programs compile for every target", "[fp8][ue8m0]") {
  for (const char *arch : {"sm_80", "sm_89", "sm_90a", "sm_100a", "sm_100a-emu"}) {
    INFO(arch);
    Program enc = test::ue8m0Encode(), dec = test::ue8m0Decode();
    Kernel e = compile(enc, {.arch = arch});
    Kernel d = compile(dec, {.arch = arch});
    CHECK_THAT(e.cuda(), Catch::Contains("tessel::ue8m0"));
    CHECK_THAT(d.cuda(), Catch::Contains("tessel::ue8m0"));
    // sm_100a converts in hardware; the others (the emulated sm_100a is an
    // sm_90a build) through the device header's software encoder.
    bool hardware = std::string(arch) == "sm_100a";
    CHECK((e.ptx().find("cvt.rp.satfinite.ue8m0x2.f32") != std::string::npos) == hardware);
    REQUIRE(e.spec().params.size() == 4);
    CHECK(e.spec().params[2].type == ScalarType::UE8M0);
    CHECK(d.spec().params[1].type == ScalarType::UE8M0);
    // A cached kernel's spec keeps the type (specs store its number).
    rt::KernelSpec decoded;
    REQUIRE(rt::decodeSpec(rt::encodeSpec(e.spec()), decoded));
    CHECK(decoded.params[2].type == ScalarType::UE8M0);
  }
}
