//===- WarpSpecializationGpuTests.cpp - kernels written from outside ------===//
//
// Kernels a user writes, not the library's: collective ops inside the
// consumer role of a warp-specialized loop, and producer addresses computed
// before the loop from local or shared memory. Each loop runs for more
// iterations than it has stages, so a barrier only some threads reach, or a
// producer reading an address the consumers never computed for it, hangs or
// reads the wrong rows here.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "LibrarySupport.h"
#include "UserKernels.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;

static std::string deviceArch() {
  int cc = rt::Driver::get().computeCapability();
  return cc == 90 ? "sm_90a" : cc >= 100 ? "sm_100a" : "sm_80";
}

TEST_CASE("a cross-warp reduction inside the consumer role runs past the stage count", "[gpu][user]") {
  for (int64_t n : {64 * 5, 1000}) {
    Program p = test::reduceInConsumer();
    Kernel k = compile(p, {deviceArch()});
    std::mt19937_64 rng(n);
    HostTensor q(DType::bf16, {16, 64}), key(DType::bf16, {n, 64}), out(DType::f32, {16});
    randomize(q, rng);
    randomize(key, rng);
    std::vector<double> ref(16);
    for (int64_t i = 0; i < 16; ++i) {
      // Rows past N read as zero, so a partial last tile scores 0.
      double best = n % 64 ? 0.0 : -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t d = 0; d < 64; ++d) s += double(q.values[i * 64 + d]) * key.values[j * 64 + d];
        best = std::max(best, s);
      }
      ref[i] = best;
    }
    DeviceRun run;
    run.args.push_back(rt::LaunchArg::integer(n));
    run.addTensor(q, false);
    run.addTensor(key, false);
    run.addTensor(out, true);
    CheckResult r = launchAndCompare(k, run, 3, out, ref, 1e-2, {});
    INFO(fmt::format("N={}: rel error {:.3e}", n, r.relError));
    CHECK(r.passed);
  }
}

TEST_CASE("producer addresses computed before the loop reach the producer", "[gpu][user]") {
  for (test::RowSource source : test::allRowSources) {
    Program p = test::offsetRowsSum(source);
    Kernel k = compile(p, {deviceArch()});
    const int64_t rows = 640;
    std::mt19937_64 rng(int(source) + 1);
    HostTensor x(DType::bf16, {rows, 64}), off(DType::i32, {4}), y(DType::f32, {64, 64});
    randomize(x, rng);
    for (int64_t i = 0; i < 4; ++i) off.set(i, float(16 * (i + 1))); // row0 = 160 by a scan
    int64_t row0 = test::expectedRowStart(source, rows, off.values);
    std::vector<double> ref(64 * 64, 0.0);
    for (int64_t it = 0; it < 4; ++it)
      for (int64_t i = 0; i < 64; ++i)
        for (int64_t j = 0; j < 64; ++j) ref[i * 64 + j] += x.values[(row0 + it * 64 + i) * 64 + j];
    DeviceRun run;
    run.args.push_back(rt::LaunchArg::integer(rows));
    run.addTensor(x, false);
    run.addTensor(off, false);
    run.addTensor(y, true);
    CheckResult r = launchAndCompare(k, run, 3, y, ref, 1e-5, {});
    INFO(fmt::format("{}: row start {}, rel error {:.3e}", test::name(source), row0, r.relError));
    CHECK(r.passed);
  }
}
