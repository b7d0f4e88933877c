//===- LowPrecisionTests.cpp - FP8 conversions, 8-bit DLPack and tensors --===//
//
// The host's FP8 conversions against exact formulas and a nearest-value
// oracle written separately from them: every code decoded, every value and
// every midpoint between neighbours encoded, the special values, and
// millions of random floats. Then 8-bit DLPack import, host tensors of the
// 8-bit types, and the FP8 cast programs the GPU tests run compiled for
// each target.
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
                    Refused{13, "float8_e5m2fnuz"}, Refused{14, "float8_e8m0fnu"}}) {
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

TEST_CASE("FP8 and i8 gemms run on mma.sync m16n8k32 on sm_89", "[fp8]") {
  const harness::LibraryKernel &entry = harness::findKernel("gemm");
  struct Case {
    const char *in, *out, *scale, *instruction;
  };
  for (Case c : {Case{"e4m3", "bf16", "tensor", "f32.e4m3.e4m3.f32"},
                 Case{"e5m2", "f32", "row", "f32.e5m2.e5m2.f32"},
                 Case{"e4m3", "f16", "block", "f32.e4m3.e4m3.f32"},
                 Case{"i8", "i32", "none", "s32.s8.s8.s32"}}) {
    INFO(c.in << " scale=" << c.scale);
    harness::Params p = {{"in", c.in}, {"out", c.out}, {"scale", c.scale}, {"transpose_b", "1"}};
    if (std::string(c.scale) == "block")
      p.insert({{"block_m", "64"}, {"block_n", "128"}, {"block_k", "128"}, {"threads", "128"}});
    Program program = entry.build(harness::withDefaults(entry, p, "sm_89"));
    Kernel k = compile(program, {"sm_89", ""});
    CHECK(k.ptx().find(".target sm_89") != std::string::npos);
    CHECK(k.ptx().find(std::string("mma.sync.aligned.m16n8k32.row.col.") + c.instruction) !=
          std::string::npos);
    auto ptx = std::filesystem::temp_directory_path() /
               fmt::format("tessel-sm89-{}-{}-{}.ptx", c.in, c.scale, ::getpid());
    std::ofstream(ptx) << k.ptx();
    CHECK(std::system(fmt::format("{} -arch=sm_89 {} -o /dev/null", TESSEL_PTXAS, ptx.string())
                          .c_str()) == 0);
    std::filesystem::remove(ptx);
  }
  // sm_80 has no FP8 tensor cores: an error that names the targets that do.
  Program fp8 = entry.build(harness::withDefaults(entry, {{"in", "e4m3"}, {"transpose_b", "1"}}, "sm_80"));
  CHECK_THAT(errorOf([&] { compile(fp8, {"sm_80", ""}); }),
             Catch::Contains("runs on mma.sync from sm_89 and on wgmma on sm_90a; target sm_80"));
  // The device an sm_89 build runs on: Ada itself, later GPUs through PTX.
  CHECK(rt::nativeArch(89) == "sm_89");
  CHECK(rt::archRunsOn("sm_89", 89));
  CHECK(rt::archRunsOn("sm_89", 90));
  CHECK_FALSE(rt::archRunsOn("sm_89", 86));
  CHECK(rt::runsThroughPtx("sm_89", 90));
  CHECK_FALSE(rt::runsThroughPtx("sm_89", 89));
}

// sm_100a: 8-bit gemms are tcgen05.mma kind::f8f6f4 (e4m3, e5m2) and kind::i8
// into tensor memory, K-major or MN-major, plain and warp-specialized, with
// no spills; the emulated build is the same kernel for sm_90a. Block scales
// are wgmma's (promotion in registers), an error here that says so.
TEST_CASE("FP8 and i8 gemms run on tcgen05.mma on sm_100a", "[fp8][tcgen05]") {
  const harness::LibraryKernel &entry = harness::findKernel("gemm");
  struct Case {
    const char *in, *out, *scale, *kind;
    bool kMajor;
  };
  for (Case c : {Case{"e4m3", "bf16", "tensor", "f8f6f4", true},
                 Case{"e5m2", "f32", "row", "f8f6f4", true},
                 Case{"e4m3", "f16", "none", "f8f6f4", false},
                 Case{"i8", "i32", "none", "i8", true}})
    for (std::string ws : {"off", "on"}) {
      INFO(c.in << " -> " << c.out << " scale=" << c.scale << " warp_specialize=" << ws
                << (c.kMajor ? " K-major" : " MN-major"));
      harness::Params p = {{"in", c.in},          {"out", c.out},     {"scale", c.scale},
                           {"transpose_b", c.kMajor ? "1" : "0"}, {"block_k", "128"},
                           {"warp_specialize", ws}};
      Program program = entry.build(harness::withDefaults(entry, p, "sm_100a"));
      Kernel k = compile(program, {"sm_100a", ""});
      CHECK(k.ptx().find(std::string("tcgen05.mma.cta_group::1.kind::") + c.kind) !=
            std::string::npos);
      CHECK(k.ptx().find("kind::f16") == std::string::npos);
      CHECK(k.ptx().find("wgmma") == std::string::npos);
      CHECK(k.ptx().find("mma.sync") == std::string::npos);
      CHECK(k.spillBytes() == 0);
      Program emulatedProgram = entry.build(harness::withDefaults(entry, p, "sm_100a-emu"));
      Kernel emulated = compile(emulatedProgram, {"sm_100a-emu", ""});
      CHECK(emulated.cuda().find(std::string("tessel::emu::tcgen05_mma(tessel::emu::kind_") +
                                 c.kind) != std::string::npos);
    }
  harness::Params block = {{"in", "e4m3"}, {"out", "bf16"}, {"scale", "block"},
                           {"transpose_b", "1"}, {"block_k", "128"}, {"block_n", "128"}};
  CHECK_THAT(errorOf([&] { entry.build(harness::withDefaults(entry, block, "sm_100a")); }),
             Catch::Contains("a block-scaled gemm"));
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
  }
}
