//===- Tcgen05EmulationGpuTests.cpp - sm_100a kernels emulated on Hopper --===//
//
// The sm_100a-emu target runs the sm_100a pipeline unchanged on an sm_90
// GPU, every tcgen05 op done in software (tessel_tcgen05_emu.h). The
// library gemm's tcgen05 build is checked against the CPU reference here,
// and one check shows the emulation catches the seed's column-offset bug.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "Library.h"
#include "tessel/Dialect/Tile/TileDialect.h"
#include "tessel/runtime/Driver.h"

#include <fmt/format.h>
#include <random>

using namespace tessel;
using namespace tessel::kernels;

namespace {
constexpr const char *kEmulated = "sm_100a-emu";

bool hopper() {
  if (rt::Driver::get().computeCapability() == 90) return true;
  WARN("SKIPPED: the tcgen05 emulation compiles for sm_90a; this GPU is sm_"
       << rt::Driver::get().computeCapability());
  return false;
}

CheckResult checkEmulatedGemm(const Params &overrides, const CompileOptions &options) {
  const LibraryKernel &entry = findKernel("gemm");
  Params p = withDefaults(entry, overrides, kEmulated);
  Program program = entry.build(p);
  Kernel k = compile(program, options);
  REQUIRE(k.cuda().find("tessel::emu::tcgen05_mma") != std::string::npos);
  uint64_t seed = std::random_device{}();
  CheckResult r = entry.check(k, p, seed);
  std::string config;
  for (auto &[key, value] : overrides) config += fmt::format(" {}={}", key, value);
  fmt::print("emulated tcgen05 gemm{} {}: rel error {:.3e} (tolerance {:.0e}) {:.2f} ms seed {}\n",
             config, r.shape, r.relError, r.tolerance, r.ms, seed);
  return r;
}
} // namespace

TEST_CASE("the emulated sm_100a gemm matches the reference", "[gpu][tcgen05]") {
  if (!hopper()) return;
  CompileOptions emulated{kEmulated};
  // Tile multiples and not; the plain pipeline and the warp-specialized one;
  // 16-bit and 32-bit outputs; K- and MN-major operands.
  for (std::string ws : {"off", "on"}) {
    for (auto [m, n, k] : {std::tuple{"256", "512", "256"}, {"300", "200", "136"}, {"128", "256", "64"}})
      CHECK(checkEmulatedGemm({{"warp_specialize", ws}, {"M", m}, {"N", n}, {"K", k}}, emulated).passed);
    CHECK(checkEmulatedGemm({{"warp_specialize", ws}, {"in", "bf16"}, {"out", "bf16"}, {"transpose_a", "1"},
                             {"M", "200"}, {"N", "300"}, {"K", "192"}},
                            emulated)
              .passed);
    CHECK(checkEmulatedGemm({{"warp_specialize", ws}, {"out", "f16"}, {"transpose_b", "1"},
                             {"block_n", "128"}, {"threads", "256"}, {"M", "130"}, {"N", "250"},
                             {"K", "100"}},
                            emulated)
              .passed);
  }
}

// The seed's bug: warpgroup 1 of a 2-warpgroup copy out of tensor memory
// started at twice the right column. tessel-tmem-allocation records the step
// on each copy; doubling it on the first epilogue copy (columns 0-63, so
// warpgroup 1 reads columns 64-95 instead of 32-63, still inside the
// allocation) must make the emulated result wrong.
TEST_CASE("the emulation catches the seed's doubled warpgroup column base", "[gpu][tcgen05]") {
  if (!hopper()) return;
  Params shape = {{"threads", "256"}, {"block_n", "128"}, {"warp_specialize", "off"},
                  {"M", "256"}, {"N", "256"}, {"K", "128"}};
  CompileOptions right{kEmulated};
  CheckResult good = checkEmulatedGemm(shape, right);
  CHECK(good.passed);

  CompileOptions wrong{kEmulated};
  int64_t rightStep = 0;
  wrong.afterPass = [&](const std::string &pass, mlir::Operation *kernel) {
    if (pass != "tessel-tmem-allocation") return;
    mlir::Operation *first = nullptr;
    kernel->walk([&](tile::CopyOp copy) {
      if (!first && copy->hasAttr("tmem_group_columns")) first = copy;
    });
    REQUIRE(first);
    auto step = first->getAttrOfType<mlir::IntegerAttr>("tmem_group_columns");
    rightStep = step.getInt();
    first->setAttr("tmem_group_columns", mlir::IntegerAttr::get(step.getType(), 2 * rightStep));
  };
  CheckResult bad = checkEmulatedGemm(shape, wrong);
  fmt::print("warpgroup 1 at column {} (right) gives rel error {:.3e}; at column {} (the seed's) "
             "{:.3e}\n",
             rightStep, good.relError, 2 * rightStep, bad.relError);
  CHECK(rightStep == 32);
  CHECK_FALSE(bad.passed);
  CHECK(bad.relError > 0.1);
}
