//===- WeightGemmGpuTests.cpp - weight-only quantised GEMMs on the GPU ----===//
//
// weight_gemm and weight_dequantize through the harness's checks (random
// codes of every byte value, scales, zero points that are not whole
// numbers, float64 references over the host's dequantised weights) on
// every target the GPU runs; then tessel::weight_gemm, which picks its path
// and K split itself, against the same reference.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "GpuHelpers.h"
#include "LibraryChecks.h"
#include "tessel/Tessel.h"
#include "tessel/harness/LibrarySupport.h"
#include "tessel/runtime/Driver.h"

#include <fmt/format.h>
#include <random>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::harness;

namespace {
std::string nativeTarget() { return rt::nativeArch(rt::Driver::get().computeCapability()); }

/// The instructions that take a register A on `arch`'s GPU.
std::vector<std::string> instructionsOn(const std::string &arch) {
  if (arch == "sm_90a") return {"wgmma", "mma_sync"};
  return {"mma_sync"};
}
} // namespace

TEST_CASE("weight_gemm matches the reference", "[gpu][weights]") {
  const std::string arch = nativeTarget();
  for (const std::string &instruction : instructionsOn(arch))
    for (const char *format : {"int4", "int8"}) {
      // A token, a block's worth, a ragged count past one block; N past a
      // tile; groups smaller than, equal to and spanning steps.
      test::checkLibraryKernel("weight_gemm", {{"weights", format}, {"instruction", instruction}, {"M", "1"}},
                   arch);
      test::checkLibraryKernel("weight_gemm",
                   {{"weights", format}, {"instruction", instruction}, {"M", "37"}, {"N", "200"},
                    {"block_m", "32"}, {"zeros", "1"}, {"group", "32"}},
                   arch);
      test::checkLibraryKernel("weight_gemm",
                   {{"weights", format}, {"instruction", instruction}, {"M", "16"}, {"K", "1536"},
                    {"block_k", "64"}, {"in", "f16"}, {"out", "f16"}, {"zeros", "1"}},
                   arch);
      // K not a whole number of steps: the last step's codes, scales and
      // tokens past K read as zeros.
      test::checkLibraryKernel("weight_gemm",
                               {{"weights", format}, {"instruction", instruction}, {"M", "3"},
                                {"K", "1120"}, {"group", "32"}, {"zeros", "1"}},
                               arch);
      // K split three ways, the last slice short, adding into f32.
      test::checkLibraryKernel("weight_gemm",
                   {{"weights", format}, {"instruction", instruction}, {"M", "9"}, {"K", "1280"},
                    {"split_k", "3"}, {"out", "f32"}, {"group", "64"}},
                   arch);
    }
  // sm_80's code on a later GPU.
  if (arch != "sm_80")
    test::checkLibraryKernel("weight_gemm", {{"M", "20"}, {"block_m", "32"}, {"zeros", "1"}}, "sm_80");
}

TEST_CASE("weight_dequantize gives the host's weights bit for bit", "[gpu][weights]") {
  for (const char *format : {"int4", "int8"})
    for (const char *zeros : {"0", "1"})
      for (const char *group : {"32", "128"})
        test::checkLibraryKernel("weight_dequantize",
                     {{"weights", format}, {"zeros", zeros}, {"group", group}, {"N", "77"}},
                     nativeTarget());
}

TEST_CASE("tessel::weight_gemm fuses for few tokens, dequantises for many, and matches",
          "[gpu][weights]") {
  const int64_t n = 320, k = 1024, group = 128;
  std::mt19937_64 rng(11);
  for (auto [m, format, zeros, out, path] :
       {std::tuple{3, WeightFormat::int4, false, DType::bf16, "weight_gemm "},
        {3, WeightFormat::int8, true, DType::f32, "weight_gemm "},
        {300, WeightFormat::int4, true, DType::bf16, "weight_dequantize "}}) {
    bool int4 = format == WeightFormat::int4;
    testing::HostTensor x(DType::bf16, {m, k}), y(out, {m, n});
    testing::HostTensor codes(int4 ? DType::u8 : DType::i8, {n, int4 ? k / 2 : k});
    testing::HostTensor scales(DType::bf16, {k / group, n}), zero(DType::bf16, {k / group, n});
    testing::randomize(x, rng);
    testing::randomize(codes, rng);
    testing::randomize(scales, rng, 0.002f, 0.03f);
    testing::randomize(zero, rng, 0.0f, 15.0f);
    std::vector<float> dense =
        dequantizeWeights(format, DType::bf16, codes, scales, zeros ? &zero : nullptr);
    std::vector<double> ref(m * n, 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t l = 0; l < k; ++l) ref[i * n + j] += double(x.values[i * k + l]) * dense[j * k + l];
    auto xd = testing::upload(x), cd = testing::upload(codes), sd = testing::upload(scales);
    auto zd = testing::upload(zero), yd = testing::poisoned(y);
    auto view = [](const rt::DeviceBuffer &b, const testing::HostTensor &t) {
      rt::ScalarType type = t.type == DType::u8   ? rt::ScalarType::U8
                            : t.type == DType::i8  ? rt::ScalarType::I8
                            : t.type == DType::f32 ? rt::ScalarType::F32
                                                   : rt::ScalarType::BF16;
      return TensorView::contiguous(b.ptr(), type, t.shape, b.device());
    };
    WeightGemmOptions options;
    if (zeros) options.zeros = view(*zd, zero);
    test::Stream stream;
    Choice choice = tessel::weight_gemm(view(*xd, x), view(*cd, codes), view(*sd, scales),
                                        view(*yd, y), options, stream.s);
    stream.sync();
    testing::download(*yd, y);
    double error = testing::relativeError(y, ref);
    INFO(choice.config);
    fmt::print("tessel::weight_gemm M={} {}: rel error {:.3e}\n", m, choice.config, error);
    CHECK(choice.config.rfind(path, 0) == 0);
    CHECK(error < (out == DType::f32 ? 1e-5 : 1e-2));
  }
}
