//===- Fp8LayerGpuTests.cpp - FP8 linear layers from library calls -------===//
//
// tessel::quantize then tessel::gemm, as a user's FP8 linear layer runs
// them: DeepSeek-V3's block scales on wgmma, and MXFP8 on sm_100a's
// block-scaled tcgen05 (under the emulator on Hopper), against float64 over
// the dequantised operands and over the bf16 originals.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "GpuHelpers.h"
#include "tessel/Tessel.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/LowPrecision.h"

#include <cmath>
#include <fmt/format.h>

using namespace tessel;
using namespace tessel::testing;
using test::DeviceTensor;
using test::Stream;

// DeepSeek-V3's FP8 linear layer from library calls: activations quantized
// per 1 x 128 block on the device (scales K-block-major), weights per 128 x
// 128 block on the host, the block-scaled gemm into bf16. Against the
// dequantised operands the gemm's error is its own (f32 promotion, a bf16
// C); against the bf16/f32 originals it is FP8's rounding (about 2^-4 an
// element, shrinking over K), so a scale in the wrong layout or block
// shows as an error near 1.
TEST_CASE("quantize then a block-scaled gemm make an FP8 linear layer", "[gpu][api]") {
  if (rt::nativeArch(rt::Driver::get().computeCapability()) != "sm_90a") {
    WARN("SKIPPED: 8-bit gemms run on wgmma (sm_90a)");
    return;
  }
  const int64_t m = 300, n = 384, k = 640, kb = k / 128, nb = n / 128;
  std::mt19937_64 rng(11);
  DeviceTensor x(DType::bf16, {m, k}, &rng), qa(DType::f8e4m3, {m, k}), sa(DType::f32, {kb, m});
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> w(n * k);
  for (float &v : w) v = uniform(rng) * (1 + 7 * uniform(rng) * uniform(rng));
  // The weight's 128 x 128 blocks, quantized on the host as quantize does.
  DeviceTensor qb(DType::f8e4m3, {n, k}), sb(DType::f32, {nb, kb});
  for (int64_t bi = 0; bi < nb; ++bi)
    for (int64_t bk = 0; bk < kb; ++bk) {
      float amax = 0;
      for (int64_t i = bi * 128; i < bi * 128 + 128; ++i)
        for (int64_t l = bk * 128; l < bk * 128 + 128; ++l) amax = std::max(amax, std::fabs(w[i * k + l]));
      float scale = amax / float(rt::kE4M3Max), inverse = float(rt::kE4M3Max) / amax;
      sb.host.set(bi * kb + bk, scale);
      for (int64_t i = bi * 128; i < bi * 128 + 128; ++i)
        for (int64_t l = bk * 128; l < bk * 128 + 128; ++l)
          qb.host.set(i * k + l, rt::fromE4M3(rt::toE4M3(w[i * k + l] * inverse)));
    }
  for (DeviceTensor *t : {&qb, &sb}) t->device.upload(t->host.bytes.data(), t->host.bytes.size());
  DeviceTensor c(DType::bf16, {m, n});
  Stream stream;
  QuantizeOptions qo;
  qo.kMajorScales = true;
  Choice quantized = tessel::quantize(x.view(), qa.view(), sa.view(), qo, stream.s);
  GemmCallOptions go;
  go.transposeB = true;
  go.scaleA = sa.view();
  go.scaleB = sb.view();
  Choice multiplied = tessel::gemm(qa.view(), qb.view(), c.view(), go, stream.s);
  stream.sync();
  for (DeviceTensor *t : {&qa, &sa, &c}) t->fetch();
  std::vector<double> dequantised(m * n, 0), original(m * n, 0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l) {
        double a = double(qa.host.values[i * k + l]) * sa.host.values[(l / 128) * m + i];
        double b = double(qb.host.values[j * k + l]) * sb.host.values[(j / 128) * kb + l / 128];
        dequantised[i * n + j] += a * b;
        original[i * n + j] += double(x.host.values[i * k + l]) * w[j * k + l];
      }
  double exact = relativeError(c.host.values, dequantised);
  double fp8 = relativeError(c.host.values, original);
  fmt::print("FP8 linear layer {}x{}x{}: {:.2e} against the dequantised operands, {:.2e} against "
             "the originals ({} | {})\n",
             m, n, k, exact, fp8, quantized.config, multiplied.config);
  INFO(quantized.config << " | " << multiplied.config);
  CHECK(exact < 1e-2);
  CHECK(fp8 < 0.1);
}

// An MXFP8 linear layer from library calls, on sm_100a's block-scaled
// tcgen05 (under the emulator on Hopper): activations and weights
// quantized by tessel::quantize into e4m3 with ue8m0 scales per 32 of K,
// straight into the blocked layout the MX gemm reads, then the gemm into
// bf16. Ragged M, N and K (K = 224: a partial 128-wide K tile whose
// padding scales quantize sets to 1.0).
TEST_CASE("quantize then an MX gemm make an MXFP8 linear layer", "[gpu][api]") {
  const int64_t m = 200, n = 136, k = 224, kTiles = (k + 127) / 128;
  std::mt19937_64 rng(13);
  DeviceTensor x(DType::bf16, {m, k}, &rng), w(DType::bf16, {n, k});
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (int64_t i = 0; i < n * k; ++i) w.host.set(i, uniform(rng) * (1 + 30 * uniform(rng) * uniform(rng)));
  w.device.upload(w.host.bytes.data(), w.host.bytes.size());
  DeviceTensor qa(DType::f8e4m3, {m, k}), qb(DType::f8e4m3, {n, k});
  DeviceTensor sa(DType::ue8m0, {(m + 127) / 128, kTiles, 32, 16});
  DeviceTensor sb(DType::ue8m0, {(n + 127) / 128, kTiles, 32, 16});
  DeviceTensor c(DType::bf16, {m, n});
  Stream stream;
  Choice qx = tessel::quantize(x.view(), qa.view(), sa.view(), {}, stream.s);
  Choice qw = tessel::quantize(w.view(), qb.view(), sb.view(), {}, stream.s);
  GemmCallOptions go;
  go.arch = "sm_100a-emu";
  go.transposeB = true;
  go.scaleA = sa.view();
  go.scaleB = sb.view();
  Choice multiplied = tessel::gemm(qa.view(), qb.view(), c.view(), go, stream.s);
  stream.sync();
  for (DeviceTensor *t : {&qa, &qb, &sa, &sb, &c}) t->fetch();
  // Row r's scale of K group g in the blocked layout.
  auto scale = [&](const DeviceTensor &s, int64_t r, int64_t g) {
    return double(s.host.values[((r / 128) * kTiles + g / 4) * 512 + (r % 32) * 16 +
                                (r % 128) / 32 * 4 + g % 4]);
  };
  std::vector<double> dequantised(m * n, 0), original(m * n, 0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l) {
        double a = double(qa.host.values[i * k + l]) * scale(sa, i, l / 32);
        double b = double(qb.host.values[j * k + l]) * scale(sb, j, l / 32);
        dequantised[i * n + j] += a * b;
        original[i * n + j] += double(x.host.values[i * k + l]) * w.host.values[j * k + l];
      }
  double exact = relativeError(c.host.values, dequantised);
  double mxfp8 = relativeError(c.host.values, original);
  fmt::print("MXFP8 linear layer {}x{}x{}: {:.2e} against the dequantised operands, {:.2e} "
             "against the originals ({} | {} | {})\n",
             m, n, k, exact, mxfp8, qx.config, qw.config, multiplied.config);
  INFO(qx.config << " | " << multiplied.config);
  CHECK(qx.config.find("granularity=mx") != std::string::npos);
  CHECK(multiplied.config.find("scale=mx") != std::string::npos);
  CHECK(exact < 1e-2);
  CHECK(mxfp8 < 0.1);
}

