//===- LowPrecisionGpuTests.cpp - FP8 casts on the device, bit for bit ----===//
//
// The device's f32 <-> FP8 conversions (runtime/device/tessel_device.h)
// against the host's (tessel/runtime/LowPrecision.h), which were written
// separately: every code decoded, and every code's value, every midpoint
// between neighbours and a float ulp either side of it, the special values
// and about a million random floats encoded. Built for the device's own
// target (PTX's cvt.rn.satfinite from sm_89 on) and, where the device can
// run it, for sm_80, whose PTX the driver compiles for the device with the
// header's software encoder in it; so both device paths meet the host's.
// The library's quantize kernel and tessel::quantize, on both paths too:
// codes and scales bit for bit against the host's same arithmetic. Last,
// the ue8m0 scale type's casts the same way (hardware cvt.rp on sm_100a,
// the header's software encoder below it).
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "tessel/harness/LibrarySupport.h"
#include "tessel/Tessel.h"
#include "tessel/Testing.h"
#include "tessel/runtime/LowPrecision.h"
#include "LowPrecisionKernels.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <limits>

using namespace tessel;
using namespace tessel::harness;

namespace {
/// The targets whose builds run here: the device's own, and sm_80 (through
/// its PTX on later devices) when that is another.
std::vector<std::string> targets() {
  int cc = rt::Driver::get().computeCapability();
  std::vector<std::string> out = {rt::nativeArch(cc)};
  if (out[0] != "sm_80" && rt::archRunsOn("sm_80", cc)) out.push_back("sm_80");
  return out;
}

struct Format {
  const char *name;
  uint8_t (*encode)(float);
  float (*decode)(uint8_t);
  uint8_t maxCode;
};
const Format formats[] = {{"f8e4m3", rt::toE4M3, rt::fromE4M3, rt::kE4M3MaxCode},
                          {"f8e5m2", rt::toE5M2, rt::fromE5M2, rt::kE5M2MaxCode}};

/// Float bit patterns to encode: the special values, each format's values,
/// the midpoints between neighbours (MAX_NORM's with the value one step
/// past it) and a float ulp either side, then random patterns, half of
/// them anywhere and half near FP8's range.
std::vector<uint32_t> encodeInputs() {
  std::vector<uint32_t> in = {0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x00800000,
                              0x80800000, 0x7f7fffff, 0xff7fffff, 0x7f800000, 0xff800000,
                              0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fbfffff,
                              0xffffffff, 0x7fc00001};
  auto add = [&](float v) {
    for (float s : {v, -v}) in.push_back(std::bit_cast<uint32_t>(s));
  };
  for (const Format &f : formats)
    for (unsigned c = 0; c <= f.maxCode; ++c) {
      float lo = f.decode(uint8_t(c));
      float hi = c < f.maxCode ? f.decode(uint8_t(c + 1)) : 2 * lo - f.decode(uint8_t(c - 1));
      float mid = (lo + hi) / 2;
      for (float v : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) add(v);
    }
  std::mt19937_64 rng(20261126);
  std::uniform_int_distribution<uint32_t> exponent(127 - 30, 127 + 20);
  for (int i = 0; i < (1 << 20); ++i) {
    uint32_t bits = uint32_t(rng());
    in.push_back(i % 2 ? (bits & 0x807fffffu) | (exponent(rng) << 23) : bits);
  }
  return in;
}

std::string show(uint32_t bits) {
  return fmt::format("{} (0x{:08x})", std::bit_cast<float>(bits), bits);
}
} // namespace

TEST_CASE("FP8 casts on the device encode as the host does, bit for bit", "[gpu][fp8]") {
  std::vector<uint32_t> in = encodeInputs();
  const int64_t n = int64_t(in.size());
  testing::HostTensor x(DType::f32, {n});
  std::memcpy(x.bytes.data(), in.data(), in.size() * 4); // NaN payloads as they are
  x.decode();
  for (const std::string &arch : targets())
    for (bool inRegisters : {false, true}) {
      Program p = test::fp8Encode(inRegisters);
      Kernel k = compile(p, {arch});
      testing::HostTensor e4m3(DType::f8e4m3, {n}), e5m2(DType::f8e5m2, {n});
      testing::DeviceRun run;
      run.args.push_back(rt::LaunchArg::integer(n));
      run.addTensor(x, false);
      run.addTensor(e4m3, true); // 0xff: a NaN code no encoding gives
      run.addTensor(e5m2, true);
      k.launch(run.args);
      testing::synchronize();
      run.download(2, e4m3);
      run.download(3, e5m2);
      for (auto [f, out] : {std::pair{&formats[0], &e4m3}, std::pair{&formats[1], &e5m2}}) {
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; ++i) {
          uint8_t got = uint8_t(out->bytes[i]), want = f->encode(std::bit_cast<float>(in[i]));
          if (got != want && ++wrong <= 10)
            FAIL_CHECK(fmt::format("{} on {}{}: {} encodes as 0x{:02x}, the host's is 0x{:02x}",
                                   f->name, arch, inRegisters ? " in registers" : "",
                                   show(in[i]), got, want));
        }
        fmt::print("{} encode on {}{}: {} values, {} differ from the host\n", f->name, arch,
                   inRegisters ? " in registers (paired)" : "", n, wrong);
        CHECK(wrong == 0);
      }
    }
}

TEST_CASE("FP8 casts on the device decode every code as the host does", "[gpu][fp8]") {
  testing::HostTensor a(DType::f8e4m3, {256}), b(DType::f8e5m2, {256});
  for (int c = 0; c < 256; ++c) a.bytes[c] = b.bytes[c] = char(c);
  a.decode();
  b.decode();
  for (const std::string &arch : targets()) {
    Program p = test::fp8Decode();
    Kernel k = compile(p, {arch});
    testing::HostTensor x4(DType::f32, {256}), x5(DType::f32, {256});
    testing::DeviceRun run;
    run.args.push_back(rt::LaunchArg::integer(256));
    run.addTensor(a, false);
    run.addTensor(b, false);
    run.addTensor(x4, true);
    run.addTensor(x5, true);
    k.launch(run.args);
    testing::synchronize();
    run.download(3, x4);
    run.download(4, x5);
    for (auto [f, out] : {std::pair{&formats[0], &x4}, std::pair{&formats[1], &x5}}) {
      int wrong = 0;
      std::string nans;
      for (int c = 0; c < 256; ++c) {
        float got = out->values[c], want = f->decode(uint8_t(c));
        uint32_t gotBits = std::bit_cast<uint32_t>(got), wantBits = std::bit_cast<uint32_t>(want);
        // A NaN code decodes to some NaN; its bits are the device's to choose.
        bool same = std::isnan(want) ? std::isnan(got) : gotBits == wantBits;
        if (std::isnan(want) && std::isnan(got))
          nans += fmt::format(" 0x{:02x}->0x{:08x}", c, gotBits);
        if (!same && ++wrong <= 10)
          FAIL_CHECK(fmt::format("{} on {}: code 0x{:02x} decodes as {}, the host's is {}", f->name,
                                 arch, c, show(gotBits), show(wantBits)));
      }
      fmt::print("{} decode on {}: 256 codes, {} differ from the host; NaN codes:{}\n", f->name,
                 arch, wrong, nans);
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("quantize gives the host's FP8 codes and scales bit for bit", "[gpu][fp8]") {
  // Each run's x has ordinary, huge, tiny, below-floor and all-zero groups
  // and groups with one outlier (checkQuantize).
  const LibraryKernel &entry = findKernel("quantize");
  auto check = [&](const std::string &arch, const Params &overrides) {
    Params p = withDefaults(entry, overrides, arch);
    Program program = entry.build(p);
    Kernel k = compile(program, {arch, ""});
    uint64_t seed = std::random_device{}();
    CheckResult r = entry.check(k, p, seed);
    std::string line = fmt::format("quantize on {} {}: max group rel error {:.3e} (tolerance {:.0e}) "
                                   "{:.4f} ms seed {}",
                                   arch, r.shape, r.relError, r.tolerance, r.ms, seed);
    fmt::print("{}\n", line);
    INFO(line);
    CHECK(r.passed);
  };
  std::vector<std::string> archs = targets();
  for (const std::string &arch : archs)
    for (std::string granularity : {"row", "block", "mx"})
      for (std::string out : {"e4m3", "e5m2"})
        for (std::string dtype : {"bf16", "f16", "f32"})
          for (std::string cols : {"128", "512", "4096"})
            for (std::string m : {"1", "7", "300"}) {
              // sm_80's software encoder: one shape a combination.
              if (arch != archs[0] && (m != "300" || cols != "512")) continue;
              check(arch, {{"granularity", granularity}, {"out", out}, {"dtype", dtype},
                           {"cols", cols}, {"M", m}});
            }
  // Other blockings: rows of 128 blocks at 128 threads, a 7168-column row
  // (DeepSeek-V3's hidden size: 56 blocks, not a power of two) a block,
  // a row length that is no multiple of 16 bytes.
  const std::string native = archs[0];
  check(native, {{"granularity", "block"}, {"cols", "128"}, {"rows", "32"}, {"threads", "128"},
                 {"M", "333"}});
  check(native, {{"granularity", "block"}, {"cols", "7168"}, {"rows", "1"}, {"M", "77"}});
  // Block scales K-block-major, as the block-scaled gemm reads them.
  check(native, {{"granularity", "block"}, {"k_major_scales", "1"}, {"cols", "512"}, {"M", "300"}});
  check(native, {{"granularity", "block"}, {"k_major_scales", "1"}, {"cols", "7168"}, {"rows", "1"},
                 {"M", "77"}});
  check(native, {{"granularity", "row"}, {"cols", "7168"}, {"rows", "1"}, {"M", "77"}});
  check(native, {{"granularity", "row"}, {"cols", "1000"}, {"rows", "4"}, {"threads", "128"},
                 {"dtype", "f16"}, {"out", "e5m2"}, {"M", "45"}});
  // MX scales in cuBLAS's blocked layout: a partial last atom of rows and
  // of groups (cols 160: 5 groups), blocks of more rows than an atom (rows
  // past M then fall past the last atom), and 7168 columns.
  for (const std::string &arch : archs) {
    check(arch, {{"granularity", "mx"}, {"blocked_scales", "1"}, {"cols", "160"}, {"M", "300"}});
    check(arch, {{"granularity", "mx"}, {"blocked_scales", "1"}, {"cols", "64"}, {"rows", "256"},
                 {"threads", "256"}, {"M", "130"}, {"out", "e5m2"}});
  }
  check(native, {{"granularity", "mx"}, {"blocked_scales", "1"}, {"cols", "7168"}, {"rows", "1"},
                 {"M", "77"}});
  check(native, {{"granularity", "mx"}, {"cols", "992"}, {"rows", "4"}, {"threads", "128"},
                 {"dtype", "f32"}, {"M", "45"}});
}

TEST_CASE("tessel::quantize makes MX scales in the gemm's blocked layout", "[gpu][fp8]") {
  // ue8m0 scales make MXFP8: a power-of-two scale per 32 elements, rounded
  // up (no element saturates), in cuBLAS's blocked layout when 4-D, its
  // padding 1.0.
  const int64_t m = 200, cols = 96, groups = cols / 32, kTiles = 1;
  std::mt19937_64 rng(11);
  testing::HostTensor x(DType::bf16, {m, cols});
  testing::randomize(x, rng, -1000, 1000);
  for (int64_t j = 0; j < cols; ++j) x.set(3 * cols + j, 0.0f); // an all-zero row
  const int64_t blockedBytes = (m + 127) / 128 * kTiles * 512;
  rt::DeviceBuffer xd(x.bytes.size()), qd(m * cols), sd(blockedBytes);
  testing::upload(x, xd);
  qd.fillBytes(0xff);
  sd.fillBytes(0xff);
  auto at = [&](const rt::DeviceBuffer &b, rt::ScalarType t, std::vector<int64_t> shape) {
    return TensorView::contiguous(b.ptr(), t, std::move(shape), b.device());
  };
  Choice choice =
      tessel::quantize(at(xd, rt::ScalarType::BF16, {m, cols}), at(qd, rt::ScalarType::F8E4M3, {m, cols}),
                       at(sd, rt::ScalarType::UE8M0, {(m + 127) / 128, kTiles, 32, 16}));
  testing::synchronize();
  std::vector<uint8_t> q(m * cols), scales(blockedBytes);
  qd.download(q.data(), q.size());
  sd.download(scales.data(), scales.size());
  INFO(choice.config);
  CHECK(choice.config.find("granularity=mx") != std::string::npos);
  CHECK(choice.config.find("blocked_scales=1") != std::string::npos);
  int64_t wrong = 0, padding = 0, badPadding = 0, saturated = 0;
  std::vector<bool> real(blockedBytes, false);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t g = 0; g < groups; ++g) {
      int64_t at = ((i / 128) * kTiles + g / 4) * 512 + (i % 32) * 16 + (i % 128) / 32 * 4 + g % 4;
      real[at] = true;
      float amax = 0;
      for (int64_t e = 0; e < 32; ++e)
        amax = std::fmax(amax, std::fabs(x.values[i * cols + g * 32 + e]));
      uint8_t code = rt::toUE8M0(amax / rt::kE4M3Max);
      wrong += scales[at] != code;
      float inverse = 1.0f / rt::fromUE8M0(code);
      for (int64_t e = 0; e < 32; ++e) {
        int64_t j = i * cols + g * 32 + e;
        uint8_t want = rt::toE4M3(x.values[j] * inverse);
        wrong += q[j] != want;
        // Rounded up: no element saturates (448 is reached only by an
        // element that rounds there).
        saturated += std::fabs(x.values[j] * inverse) > rt::kE4M3Max * (1 + 0x1p-20f);
      }
    }
  for (int64_t b = 0; b < blockedBytes; ++b)
    if (!real[b]) {
      ++padding;
      badPadding += scales[b] != rt::kUE8M0One;
    }
  fmt::print("tessel::quantize {}: {} of {} codes and scales differ; {} padding cells, {} not 1.0\n",
             choice.config, wrong, m * cols + m * groups, padding, badPadding);
  CHECK(wrong == 0);
  CHECK(saturated == 0);
  CHECK(padding == blockedBytes - m * groups);
  CHECK(badPadding == 0);
  // The all-zero row: zero codes and the smallest scale, 2^-127.
  CHECK(std::all_of(&q[3 * cols], &q[4 * cols], [](uint8_t c) { return c == 0; }));
}

TEST_CASE("tessel::quantize takes the granularity from the scales' shape", "[gpu][fp8]") {
  const int64_t m = 300, cols = 1024;
  std::mt19937_64 rng(7);
  testing::HostTensor x(DType::bf16, {m, cols});
  testing::randomize(x, rng, -3, 3);
  for (int64_t j = 0; j < cols; ++j) x.set(5 * cols + j, 0.0f); // an all-zero row
  rt::DeviceBuffer xd(x.bytes.size()), qd(m * cols), sd(m * cols / 128 * 4);
  testing::upload(x, xd);
  auto at = [&](const rt::DeviceBuffer &b, rt::ScalarType t, std::vector<int64_t> shape) {
    return TensorView::contiguous(b.ptr(), t, std::move(shape), b.device());
  };
  for (bool blocks : {false, true})
    for (DType out : {DType::f8e4m3, DType::f8e5m2}) {
      int64_t width = blocks ? 128 : cols, groups = cols / width;
      qd.fillBytes(0xff);
      sd.fillBytes(0xff);
      rt::ScalarType qt = out == DType::f8e4m3 ? rt::ScalarType::F8E4M3 : rt::ScalarType::F8E5M2;
      TensorView scales = blocks ? at(sd, rt::ScalarType::F32, {m, groups})
                                 : at(sd, rt::ScalarType::F32, {m});
      Choice choice = tessel::quantize(at(xd, rt::ScalarType::BF16, {m, cols}),
                                       at(qd, qt, {m, cols}), scales);
      testing::synchronize();
      std::vector<uint8_t> q(m * cols);
      std::vector<float> scale(m * groups);
      qd.download(q.data(), q.size());
      sd.download(scale.data(), scale.size() * 4);
      // The arithmetic kernels::QuantizeConfig gives.
      const float fmax = float(kernels::fp8Max(out)), floor = std::ldexp(fmax, -126);
      int64_t wrong = 0;
      for (int64_t g = 0; g < m * groups; ++g) {
        float amax = 0;
        for (int64_t e = 0; e < width; ++e) amax = std::fmax(amax, std::fabs(x.values[g * width + e]));
        float a = std::max(amax, floor), inverse = fmax / a;
        wrong += !(scale[g] == a / fmax);
        for (int64_t e = 0; e < width; ++e) {
          float v = x.values[g * width + e] * inverse;
          wrong += q[g * width + e] != (out == DType::f8e4m3 ? rt::toE4M3(v) : rt::toE5M2(v));
        }
      }
      INFO(choice.config);
      fmt::print("tessel::quantize {}: {} of {} codes and scales differ\n", choice.config, wrong,
                 m * cols + m * groups);
      CHECK(choice.config.find(blocks ? "granularity=block" : "granularity=row") !=
            std::string::npos);
      CHECK(wrong == 0);
      // The all-zero row: zero codes, the floor's scale (2^-126).
      CHECK(scale[5 * groups] == 0x1p-126f);
      CHECK(std::all_of(&q[5 * cols], &q[6 * cols], [](uint8_t c) { return c == 0; }));
    }
}

namespace {
/// Float bit patterns to encode as ue8m0: the special values, every code's
/// value and the floats either side of it, the midpoints between powers
/// of two, of both signs, then random patterns, half of them anywhere and
/// half with a mantissa of few bits (near a power of two).
std::vector<uint32_t> ue8m0Inputs() {
  std::vector<uint32_t> in = {0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x00400000,
                              0x003fffff, 0x00400001, 0x00600000, 0x007fffff, 0x00800000,
                              0x7f000000, 0x7f000001, 0x7f7fffff, 0xff7fffff, 0x7f800000,
                              0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001,
                              0x7fbfffff, 0xffffffff, 0x7fc00001};
  auto add = [&](float v) {
    for (float s : {v, -v}) in.push_back(std::bit_cast<uint32_t>(s));
  };
  for (unsigned c = 0; c <= rt::kUE8M0MaxCode; ++c) {
    float v = rt::fromUE8M0(uint8_t(c));
    for (float u : {v, std::nextafter(v, 0.0f), std::nextafter(v, INFINITY), 1.5f * v}) add(u);
  }
  std::mt19937_64 rng(20261127);
  for (int i = 0; i < (1 << 20); ++i) {
    uint32_t bits = uint32_t(rng());
    in.push_back(i % 2 ? bits & 0xff80000fu : bits);
  }
  return in;
}
} // namespace

// On sm_100a (hardware cvt.rp.satfinite.ue8m0x2) and below it (the device
// header's software encoder), and f32 -> ue8m0 -> f32 in element code.
TEST_CASE("ue8m0 casts on the device encode as the host does, bit for bit", "[gpu][fp8][ue8m0]") {
  std::vector<uint32_t> in = ue8m0Inputs();
  const int64_t n = int64_t(in.size());
  testing::HostTensor x(DType::f32, {n});
  std::memcpy(x.bytes.data(), in.data(), in.size() * 4); // NaN payloads as they are
  x.decode();
  for (const std::string &arch : targets()) {
    Program p = test::ue8m0Encode();
    Kernel k = compile(p, {arch});
    testing::HostTensor s(DType::ue8m0, {n}), y(DType::f32, {n});
    testing::DeviceRun run;
    run.args.push_back(rt::LaunchArg::integer(n));
    run.addTensor(x, false);
    run.addTensor(s, true); // 0xff: NaN, which only a NaN encodes to
    run.addTensor(y, true);
    k.launch(run.args);
    testing::synchronize();
    run.download(2, s);
    run.download(3, y);
    int64_t wrong = 0, wrongTrip = 0;
    for (int64_t i = 0; i < n; ++i) {
      float v = std::bit_cast<float>(in[i]);
      uint8_t got = uint8_t(s.bytes[i]), want = rt::toUE8M0(v);
      if (got != want && ++wrong <= 10)
        FAIL_CHECK(fmt::format("ue8m0 on {}: {} encodes as 0x{:02x}, the host's is 0x{:02x}", arch,
                               show(in[i]), got, want));
      float back = rt::fromUE8M0(want);
      bool same = std::isnan(back) ? std::isnan(y.values[i]) : y.values[i] == back;
      if (!same && ++wrongTrip <= 10)
        FAIL_CHECK(fmt::format("ue8m0 on {}: {} comes back as {}, the host's is {}", arch,
                               show(in[i]), y.values[i], back));
    }
    fmt::print("ue8m0 encode on {}: {} values, {} differ from the host, {} round trips differ\n",
               arch, n, wrong, wrongTrip);
    CHECK(wrong == 0);
    CHECK(wrongTrip == 0);
  }
}

TEST_CASE("ue8m0 casts on the device decode every code as the host does", "[gpu][fp8][ue8m0]") {
  testing::HostTensor s(DType::ue8m0, {256});
  for (int c = 0; c < 256; ++c) s.bytes[c] = char(c);
  s.decode();
  for (const std::string &arch : targets()) {
    Program p = test::ue8m0Decode();
    Kernel k = compile(p, {arch});
    testing::HostTensor x(DType::f32, {256});
    testing::DeviceRun run;
    run.args.push_back(rt::LaunchArg::integer(256));
    run.addTensor(s, false);
    run.addTensor(x, true);
    k.launch(run.args);
    testing::synchronize();
    run.download(2, x);
    int wrong = 0;
    for (int c = 0; c < 256; ++c) {
      uint32_t got = std::bit_cast<uint32_t>(x.values[c]);
      uint32_t want = std::bit_cast<uint32_t>(rt::fromUE8M0(uint8_t(c)));
      // 0xff decodes to some NaN; its bits are the device's to choose.
      bool same = c == 0xff ? std::isnan(x.values[c]) : got == want;
      if (!same && ++wrong <= 10)
        FAIL_CHECK(fmt::format("ue8m0 on {}: code 0x{:02x} decodes as {}, the host's is {}", arch,
                               c, show(got), show(want)));
    }
    fmt::print("ue8m0 decode on {}: 256 codes, {} differ from the host\n", arch, wrong);
    CHECK(wrong == 0);
  }
}

// FP8 attention's two products: P (the scores' accumulator, converted to
// FP8 in registers) is the second product's A, whose registers hold K
// values in another order than the instructions read (tile.gemm's
// b_register_k_order). With V stored [N, 64] the compiler copies it K-major
// with K permuted; with V^T already stored in that order the program reads
// it as it is. Against a float64 reference of the same FP8 inputs and P
// rounded as the kernel rounds it; a K value paired with the wrong row of V
// would be off by the whole product. wgmma on sm_90a, mma.sync on sm_89
// (through its PTX).
TEST_CASE("FP8 attention's two products read P from registers", "[gpu][fp8]") {
  int cc = rt::Driver::get().computeCapability();
  std::vector<std::string> archs = {rt::nativeArch(cc)};
  if (archs[0] != "sm_89" && rt::archRunsOn("sm_89", cc)) archs.push_back("sm_89");
  const int64_t keys = 192;
  for (DType type : {DType::f8e4m3, DType::f8e5m2})
    for (test::EightBitV layout : {test::EightBitV::rows, test::EightBitV::registerOrder}) {
      bool rows = layout == test::EightBitV::rows;
      std::mt19937_64 rng(int(type) * 2 + rows);
      testing::HostTensor q(type, {64, 64}), kt(type, {keys, 64}), v(type, {keys, 64});
      testing::randomize(q, rng, -2, 2);
      testing::randomize(kt, rng, -2, 2);
      testing::randomize(v, rng);
      // V^T with key c(p) at position p of each 16: p = (q, b, e) bits.
      testing::HostTensor vt(type, {64, keys});
      for (int64_t c = 0; c < 64; ++c)
        for (int64_t p = 0; p < keys; ++p) {
          int64_t key = (p & ~int64_t{15}) | (p & 1) | ((p >> 1 & 1) << 3) | ((p >> 2 & 3) << 1);
          vt.set(c * keys + p, v.values[key * 64 + c]);
        }
      std::vector<double> ref(64 * 64, 0.0);
      for (int64_t i = 0; i < 64; ++i)
        for (int64_t block = 0; block < keys; block += 64) {
          std::vector<double> s(64, 0.0);
          for (int64_t j = 0; j < 64; ++j)
            for (int64_t c = 0; c < 64; ++c)
              s[j] += double(q.values[i * 64 + c]) * kt.values[(block + j) * 64 + c];
          double mx = *std::max_element(s.begin(), s.end());
          for (int64_t j = 0; j < 64; ++j) {
            double pj = testing::roundTo(type, float(std::exp(s[j] - mx)));
            for (int64_t c = 0; c < 64; ++c) ref[i * 64 + c] += pj * v.values[(block + j) * 64 + c];
          }
        }
      for (const std::string &arch : archs) {
        Program p = test::eightBitTwoProducts(type, layout);
        Kernel k = compile(p, {arch, ""});
        testing::HostTensor o(DType::f32, {64, 64});
        testing::DeviceRun run;
        run.args.push_back(rt::LaunchArg::integer(keys));
        run.addTensor(q, false);
        run.addTensor(kt, false);
        run.addTensor(rows ? v : vt, false);
        run.addTensor(o, true);
        // mma.sync's f32 sums of FP8 products are exact here (0 on an
        // H100). wgmma's FP8 sums keep fewer bits: the scores are off by
        // about 1e-3, and exp (the hardware approximation) moves some P
        // to the neighbouring FP8 value, 1/16 or 1/8 away (4e-4 to 9e-3 on
        // an H100).
        double tolerance = arch == "sm_89" ? 1e-5 : 3e-2;
        CheckResult r = launchAndCompare(k, run, 4, o, ref, tolerance, {});
        INFO(fmt::format("{} {} V {}: rel error {:.3e}", arch, name(type),
                         rows ? "[N, 64]" : "^T in register order", r.relError));
        CHECK(r.passed);
        if (rows) continue;
        // The order matters: V^T stored in plain key order is far off.
        testing::HostTensor plain(type, {64, keys});
        for (int64_t c = 0; c < 64; ++c)
          for (int64_t key = 0; key < keys; ++key)
            plain.set(c * keys + key, v.values[key * 64 + c]);
        testing::DeviceRun misordered;
        misordered.args.push_back(rt::LaunchArg::integer(keys));
        misordered.addTensor(q, false);
        misordered.addTensor(kt, false);
        misordered.addTensor(plain, false);
        misordered.addTensor(o, true);
        CheckResult wrong = launchAndCompare(k, misordered, 4, o, ref, tolerance, {});
        INFO(fmt::format("V^T in plain order: rel error {:.3e}", wrong.relError));
        CHECK(wrong.relError > 0.1);
      }
    }
}

TEST_CASE("FP8 attention forward kernels read per-head scales from the device", "[gpu][fp8]") {
  // descales=1: Q's, K's and V's scale of each (sequence, K/V head), from
  // 1/4 to 2, against float64 attention of the scaled values
  // (checkForward), on every form that runs FP8: wgmma with V rearranged or
  // permuted in shared memory, packed sequences, GQA under a causal mask,
  // the persistent walk, sm_89's mma.sync where it runs, and sm_100a's ss
  // form under the emulator.
  int cc = rt::Driver::get().computeCapability();
  std::string native = rt::nativeArch(cc);
  if (native != "sm_90a" && native != "sm_89") {
    WARN("SKIPPED: FP8 attention runs on wgmma (sm_90a) and mma.sync (sm_89); this is " << native);
    return;
  }
  const LibraryKernel &entry = findKernel("flash_attention_fwd");
  auto check = [&](const std::string &arch, Params overrides) {
    overrides.insert({{"descales", "1"}});
    Params p = withDefaults(entry, overrides, arch);
    Program program = entry.build(p);
    Kernel k = compile(program, {arch, ""});
    CheckResult r = entry.check(k, p, 5);
    std::string line = fmt::format("fp8 attention with descales on {}: {}: rel error {:.3e} "
                                   "(tolerance {:.0e})",
                                   arch, r.shape, r.relError, r.tolerance);
    fmt::print("{}\n", line);
    INFO(line);
    CHECK(r.passed);
  };
  const Params small = {{"batch", "2"}, {"seqlen_q", "200"}, {"seqlen_k", "200"}, {"heads_q", "4"},
                        {"heads_kv", "2"}};
  auto with = [&](Params extra) {
    extra.insert(small.begin(), small.end());
    return extra;
  };
  check(native, with({{"dtype", "e4m3"}, {"v_transposed", "1"}}));
  check(native, with({{"dtype", "e5m2"}, {"causal", "1"}}));
  check(native, with({{"dtype", "e4m3"}, {"v_transposed", "1"}, {"persistent", "1"},
                      {"causal", "1"}}));
  check(native, {{"dtype", "e4m3"}, {"varlen", "1"}, {"seqlens_q", "3,200,70"},
                 {"seqlens_k", "5,130,70"}, {"heads_q", "4"}, {"heads_kv", "1"}});
  if (native != "sm_89" && rt::archRunsOn("sm_89", cc))
    check("sm_89", with({{"dtype", "e4m3"}, {"v_transposed", "1"}, {"causal", "1"}}));
  check("sm_100a-emu", {{"dtype", "e4m3"}, {"batch", "1"}, {"seqlen_q", "130"},
                        {"seqlen_k", "200"}, {"heads_q", "2"}, {"heads_kv", "1"}, {"causal", "1"}});
}
