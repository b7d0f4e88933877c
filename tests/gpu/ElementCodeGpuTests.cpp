//===- ElementCodeGpuTests.cpp - element code against the host ------------===//
//
// Indices computed in the kernel: a gather through i32 and u8 values read
// from tensors (from global and shared memory, indices outside the table
// reading 0, as past any tensor's end), and a histogram whose scalar
// atomic_add lands at a bin computed from the data, against the host's.
//
// tessel::exp2(x, fmaEvery) computes some registers' 2^x with a polynomial
// (tessel::exp2_fma in the device header) rather than the special-function
// unit. Both forms run here over about a million inputs, from below 2^-126
// to past the largest float and the special values, in registers (where
// the form goes by register) and in a loop over memory, against std::exp2
// in double: at most 1.2e-4 relative where the result is a normal float,
// and ex2.approx.ftz's edges exactly (0 below 2^-126 and at -inf, inf from
// 128, NaN for NaN).
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "tessel/Tessel.h"
#include "tessel/Testing.h"
#include "tessel/runtime/Driver.h"
#include "UserKernels.h"
#include "ChildProcess.h"

#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <limits>
#include <random>

using namespace tessel;

namespace {
/// fma[i] = 2^x[i] with every register on the FMA pipe, mixed[i] with one
/// in `every` there (the others on the special-function unit), sfu[i] with
/// none; in registers or in a loop over global memory.
Program exp2Forms(int64_t every, bool inRegisters) {
  Program p(inRegisters ? "exp2_forms_in_registers" : "exp2_forms");
  Expr n = p.sym("N");
  Tensor x = p.tensor("x", {n}, DType::f32);
  Tensor fma = p.tensor("fma", {n}, DType::f32);
  Tensor mixed = p.tensor("mixed", {n}, DType::f32);
  Tensor sfu = p.tensor("sfu", {n}, DType::f32);
  p.kernel({ceil_div(n, 1024)}, 128, [&](Expr bx) {
    Buffer xs = x.tile({bx * 1024}, {1024});
    Buffer fs = fma.tile({bx * 1024}, {1024}), ms = mixed.tile({bx * 1024}, {1024});
    Buffer ss = sfu.tile({bx * 1024}, {1024});
    if (!inRegisters) {
      parallel(1024, [&](Expr i) {
        fs(i) = exp2(xs(i), 1);
        ms(i) = exp2(xs(i), every);
        ss(i) = exp2(xs(i));
      });
      return;
    }
    Buffer xf = alloc_fragment({1024}, DType::f32), ff = alloc_fragment({1024}, DType::f32);
    Buffer mf = alloc_fragment({1024}, DType::f32), sf = alloc_fragment({1024}, DType::f32);
    copy(xs, xf);
    parallel(1024, [&](Expr i) {
      ff(i) = exp2(xf(i), 1);
      mf(i) = exp2(xf(i), every);
      sf(i) = exp2(xf(i));
    });
    copy(ff, fs);
    copy(mf, ms);
    copy(sf, ss);
  });
  return p;
}

std::vector<float> exp2Inputs() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> in = {-inf, inf, std::numeric_limits<float>::quiet_NaN(), -0.0f, 0.0f,
                           -127.0f, -126.5f, -126.0f, -125.999f, 127.0f, 127.999f, 128.0f,
                           1e30f, -1e30f, 0.5f, -0.5f, 1.0f, -1.0f, 0x1p-30f, -0x1p-30f};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> anywhere(-130.0f, 130.0f), softmax(-30.0f, 0.0f);
  while (in.size() < (1u << 20)) in.push_back(in.size() % 2 ? anywhere(rng) : softmax(rng));
  return in;
}
} // namespace

TEST_CASE("values read in the kernel index buffers, and read 0 outside them", "[gpu]") {
  const int64_t n = 100003; // not a multiple of the 512-element tile
  testing::HostTensor table(DType::f32, {256}), offs(DType::i32, {n}), codes(DType::u8, {n});
  for (int64_t i = 0; i < 256; ++i) table.set(i, float(i) * 0.5f - 17.0f);
  std::mt19937 rng(11);
  for (int64_t i = 0; i < n; ++i) {
    offs.set(i, float(int(rng() % 300) - 20)); // some before the table, some past it
    codes.set(i, float(rng() % 256));
  }
  Program program = test::gatherAndHistogram();
  Kernel k = compile(program, {rt::nativeArch(rt::Driver::get().computeCapability())});
  testing::HostTensor out(DType::f32, {n}), bins(DType::i32, {64});
  testing::DeviceRun run;
  run.args.push_back(rt::LaunchArg::integer(n));
  run.addTensor(table, false);
  run.addTensor(offs, false);
  run.addTensor(codes, false);
  run.addTensor(out, true);
  run.addTensor(bins, false); // zeros
  k.launch(run.args);
  testing::synchronize();
  run.download(4, out);
  run.download(5, bins);
  std::vector<int64_t> want(64, 0);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    int o = int(offs.values[i]), c = int(codes.values[i]);
    ++want[((o % 64) + 64) % 64];
    // Outside the table (and its shared copy) an index reads 0.
    float at = o >= 0 && o < 256 ? table.values[o] : 0.0f;
    float expected = at + at + table.values[c];
    if (out.values[i] != expected && ++wrong <= 5)
      FAIL_CHECK(fmt::format("out[{}] = {}, want 2 table[{}] + table[{}] = {}", i, out.values[i],
                             o, c, expected));
  }
  CHECK(wrong == 0);
  for (int b = 0; b < 64; ++b) {
    INFO("bin " << b);
    CHECK(int64_t(bins.values[b]) == want[b]);
  }
}

TEST_CASE("element code indexing tensors directly reads 0 and drops writes outside them", "[gpu]") {
  const int64_t n = 1000; // the second block's last 24 elements are past N
  std::mt19937_64 rng(7);
  testing::HostTensor table(DType::f32, {256}), offs(DType::i32, {n});
  testing::randomize(table, rng, 1.0f, 2.0f); // never 0, so a guarded read shows
  std::uniform_int_distribution<int> pick(-300, 555); // about two in three outside
  for (int64_t i = 0; i < n; ++i) offs.set(i, float(pick(rng)));
  Program program = test::directGatherScatter();
  Kernel k = compile(program, {rt::nativeArch(rt::Driver::get().computeCapability())});
  testing::HostTensor out(DType::f32, {n}), hits(DType::f32, {256});
  testing::DeviceRun run;
  run.args.push_back(rt::LaunchArg::integer(n));
  run.addTensor(table, false);
  run.addTensor(offs, false);
  run.addTensor(out, true);
  run.addTensor(hits, false); // zeros
  k.launch(run.args);
  testing::synchronize();
  run.download(3, out);
  run.download(4, hits);
  // The elements past N still run (an element loop covers its tile): their
  // offs(e) reads 0, so they mark hits[0].
  std::vector<float> wantHits(256, 0.0f);
  wantHits[0] = 1.0f;
  int64_t wrong = 0, outside = 0;
  for (int64_t i = 0; i < n; ++i) {
    int o = int(offs.values[i]);
    bool inside = o >= 0 && o < 256;
    outside += !inside;
    if (inside) wantHits[o] = 1.0f;
    float want = inside ? table.values[o] : 0.0f;
    if (out.values[i] != want && ++wrong <= 5)
      FAIL_CHECK(fmt::format("out[{}] = {}, want table[{}] = {}", i, out.values[i], o, want));
  }
  CHECK(outside > n / 2);
  CHECK(wrong == 0);
  for (int j = 0; j < 256; ++j) CHECK(hits.values[j] == wantHits[j]);
}

TEST_CASE("a stencil's neighbour past the tensor's end reads 0", "[gpu]") {
  // y[i] = x[i + 1] - x[i] over one tile of a 256-element tensor: at i = 255
  // the neighbour is past the end (which the tile's static extent once
  // hid from the bounds check), so y[255] = -x[255].
  Program p("stencil");
  Tensor x = p.tensor("x", {256}, DType::f32);
  Tensor y = p.tensor("y", {256}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer t = x.tile({0}, {256}), o = y.tile({0}, {256});
    parallel(256, [&](Expr i) { o(i) = t(i + Expr(1)) - t(i); });
  });
  Kernel k = compile(p, {rt::nativeArch(rt::Driver::get().computeCapability())});
  testing::HostTensor in(DType::f32, {256}), out(DType::f32, {256});
  for (int64_t i = 0; i < 256; ++i) in.set(i, float(i * i % 97));
  testing::DeviceRun run;
  run.addTensor(in, false);
  run.addTensor(out, true);
  k.launch(run.args);
  testing::synchronize();
  run.download(1, out);
  for (int64_t i = 0; i < 256; ++i) {
    INFO("y[" << i << "]");
    CHECK(out.values[i] == (i < 255 ? in.values[i + 1] : 0.0f) - in.values[i]);
  }
}

// Run by the test below in a child process: the trap kills the context.
// Block b copies 64 elements into shared window [64 b, 64 b + 64) of 128:
// blocks 2 and 3 start past the last valid start, 64.
TEST_CASE("a shared window past its buffer traps", "[.window_trap_child]") {
  Program p("shared_window_past");
  Tensor x = p.tensor("x", {256}, DType::f32);
  p.kernel({4}, 64, [&](Expr bx) {
    Buffer s = alloc_shared({128}, DType::f32);
    Buffer w = s.tile({bx * 64}, {64});
    copy(x.tile({bx * 64}, {64}), w);
    copy(w, x.tile({bx * 64}, {64}));
  });
  Kernel k = compile(p, {rt::nativeArch(rt::Driver::get().computeCapability())});
  testing::HostTensor data(DType::f32, {256});
  testing::DeviceRun run;
  run.addTensor(data, false);
  k.launch(run.args);
  try {
    testing::synchronize();
  } catch (const Error &e) {
    fmt::print("child caught: {}\n", e.what());
    throw;
  }
}

TEST_CASE("a shared window at a run-time offset past its buffer traps and says where", "[gpu]") {
  auto [status, output] = test::runTaggedChild("[.window_trap_child]");
  INFO(output);
  CHECK(status != 0);
  CHECK_THAT(output, Catch::Contains("child caught:"));
  CHECK_THAT(output, Catch::Contains("a kernel trapped: ElementCodeGpuTests.cpp:"));
  CHECK_THAT(output, Catch::Contains("a shared window leaves its buffer in dim 0 (offset, last start)"));
  // The offset of block 2 or 3, against the last valid start.
  CHECK_THAT(output, Catch::Contains("limit 64)"));
  CHECK((output.find("thread value 128,") != std::string::npos ||
         output.find("thread value 192,") != std::string::npos));
}

TEST_CASE("exp2 on the FMA pipe matches 2^x within 1.2e-4 and keeps ex2's edges", "[gpu]") {
  std::vector<float> in = exp2Inputs();
  const int64_t n = int64_t(in.size());
  testing::HostTensor x(DType::f32, {n});
  std::memcpy(x.bytes.data(), in.data(), in.size() * 4);
  x.decode();
  std::string arch = rt::nativeArch(rt::Driver::get().computeCapability());
  for (int64_t every : {2, 3})
    for (bool inRegisters : {false, true}) {
      Program program = exp2Forms(every, inRegisters);
      Kernel k = compile(program, {arch});
      testing::HostTensor fma(DType::f32, {n}), mixed(DType::f32, {n}), sfu(DType::f32, {n});
      testing::DeviceRun run;
      run.args.push_back(rt::LaunchArg::integer(n));
      run.addTensor(x, false);
      run.addTensor(fma, true);
      run.addTensor(mixed, true);
      run.addTensor(sfu, true);
      k.launch(run.args);
      testing::synchronize();
      run.download(2, fma); // argument 0 is N, 1 is x
      run.download(3, mixed);
      run.download(4, sfu);
      double worst = 0;
      int64_t wrong = 0, polynomial = 0;
      for (int64_t i = 0; i < n; ++i) {
        float want = float(std::exp2(double(in[i])));
        if (std::abs(want) < std::numeric_limits<float>::min()) want = 0.0f; // ftz
        for (auto [form, out] : {std::pair{"fma", &fma}, std::pair{"mixed", &mixed}}) {
          float got = out->values[i];
          bool ok;
          if (std::isnan(in[i])) ok = std::isnan(got);
          else if (want == 0.0f || std::isinf(want)) ok = got == want;
          // Within 1.2e-4 of the largest float, the error may round to inf.
          else if (std::isinf(got)) ok = want > 0.99988 * std::numeric_limits<float>::max();
          else {
            double rel = std::abs(double(got) - want) / want;
            worst = std::max(worst, rel);
            ok = rel <= 1.2e-4;
          }
          if (!ok && ++wrong <= 10)
            FAIL_CHECK(fmt::format("{} (one in {}, {}): 2^{} gives {}, want {}", form, every,
                                   inRegisters ? "registers" : "memory", in[i], got, want));
        }
        // The mixed form took the polynomial for this element where it
        // differs from the special-function unit's result.
        polynomial += mixed.values[i] != sfu.values[i] && mixed.values[i] == fma.values[i];
      }
      fmt::print("exp2 one in {} on the FMA pipe ({}): worst relative error {:.2e}, {} of {} "
                 "mixed results from the polynomial\n",
                 every, inRegisters ? "registers" : "memory", worst, polynomial, n);
      CHECK(wrong == 0);
      CHECK(worst > 0); // the polynomial is not ex2.approx
      // In registers one in `every` takes the polynomial (not all: the
      // forms agree on some inputs); in memory none does.
      if (inRegisters) {
        CHECK(polynomial > n / every / 2);
        CHECK(polynomial <= n / every + 64);
      } else {
        CHECK(polynomial == 0);
      }
    }
}
