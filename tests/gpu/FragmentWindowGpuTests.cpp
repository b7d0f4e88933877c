//===- FragmentWindowGpuTests.cpp - windows of fragments on the GPU -------===//
//
// An epilogue over windows of an accumulator fragment (a quarter of its
// columns at a time, then a window of a window): each window's registers
// are the accumulator's own, so a window mapped to the wrong registers or
// threads gives wrong columns here.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "tessel/harness/LibrarySupport.h"
#include "UserKernels.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::harness;

TEST_CASE("an epilogue over windows of an accumulator matches the host", "[gpu][user]") {
  Program p = test::fragmentWindows();
  std::mt19937_64 rng(5);
  HostTensor x(DType::f16, {128, 64}), w(DType::f16, {64, 128}), parts(DType::f32, {4, 128, 32}),
      y(DType::f32, {128, 128});
  randomize(x, rng);
  randomize(w, rng);
  randomize(parts, rng);
  std::vector<double> ref(128 * 128);
  for (int i = 0; i < 128; ++i)
    for (int j = 0; j < 128; ++j) {
      double dot = 0;
      for (int l = 0; l < 64; ++l) dot += double(x.values[i * 64 + l]) * w.values[l * 128 + j];
      double part = parts.values[(j / 32) * 128 * 32 + i * 32 + j % 32];
      ref[i * 128 + j] = j >= 96 ? 0.0 : 2 * dot + part;
    }
  // mma.sync (warps along M, as the windows ask), the device's own tensor
  // cores (wgmma on sm_90a), and on a Hopper the tcgen05 emulation (the
  // accumulator leaves tensor memory a row a thread).
  std::vector<std::string> archs = {"sm_80",
                                    rt::nativeArch(rt::Driver::get().computeCapability())};
  if (rt::Driver::get().computeCapability() == 90) archs.push_back("sm_100a-emu");
  for (const std::string &arch : archs) {
    Kernel k = compile(p, {arch});
    CHECK(k.spillBytes() == 0);
    DeviceRun run;
    run.addTensor(x, false);
    run.addTensor(w, false);
    run.addTensor(parts, false);
    run.addTensor(y, true);
    CheckResult r = launchAndCompare(k, run, 3, y, ref, 1e-5, {});
    fmt::print("epilogue over windows of a [128, 128] accumulator, {}: rel error {:.3e}\n", arch,
               r.relError);
    CHECK(r.passed);
  }
}
