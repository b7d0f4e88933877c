//===- OutsideTrainingKernelGpuTests.cpp - training kernels on the GPU ----===//
//
// The kernels of tests/common/OutsideTrainingKernels.h, built for the
// running GPU's architecture, on random inputs of shapes that are not
// multiples of their tiles, against float64 references on the host:
// LayerNorm's backward, a fused cross-entropy forward and backward, a
// histogram, two transposes, a causal depthwise conv1d with SiLU, a
// split-K GEMV (bf16 and int8 weights) and an MoE router's top-k.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "OutsideGpuRuns.h"
#include "OutsideTrainingKernels.h"
#include "tessel/Testing.h"
#include "tessel/dsl/Compile.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Launch.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <numeric>
#include <random>

using namespace tessel;
using testing::DeviceRun;
using testing::HostTensor;
using test::buildQuiet;
using test::runnableTargets;

namespace {

/// The relative error of a 16-bit output that is one rounding of an f32
/// result: half an ulp of bf16 (2^-9) bounds it element by element, so the
/// norm-wise error stays below it; 4e-3 leaves room for the f32 arithmetic
/// before the rounding and for exp's approximation.
constexpr double kBf16Output = 4e-3;

} // namespace

TEST_CASE("outside: LayerNorm backward (dx, and dgamma/dbeta by atomics)", "[gpu][outside][training]") {
  struct Config {
    int64_t rows, chunk;
    int threads, stages;
    int64_t m, h;
  };
  // H 4104: rows of whole 16-byte units (TMA on sm_90a); 1001 and 2050: not
  // (the build without TMA).
  for (Config c :
       {Config{4, 256, 128, 3, 37, 4104}, Config{4, 256, 128, 3, 9, 1001}, Config{8, 128, 256, 2, 21, 2050}})
    for (const std::string &arch : runnableTargets()) {
      Program p = test::layerNormBackward(c.rows, c.chunk, c.threads, c.stages);
      Kernel k = buildQuiet(p, arch);
      std::mt19937_64 rng(c.m * 1009 + c.h);
      HostTensor x(DType::bf16, {c.m, c.h}), gamma(DType::bf16, {c.h}), dy(DType::bf16, {c.m, c.h});
      HostTensor mean(DType::f32, {c.m}), rstd(DType::f32, {c.m});
      testing::randomize(x, rng, -2.0f, 3.0f);
      testing::randomize(gamma, rng, 0.5f, 1.5f);
      testing::randomize(dy, rng);
      // The forward's statistics, rounded to f32 as it stores them.
      for (int64_t i = 0; i < c.m; ++i) {
        double s = 0, s2 = 0;
        for (int64_t j = 0; j < c.h; ++j)
          s += x.values[i * c.h + j];
        double mu = s / double(c.h);
        for (int64_t j = 0; j < c.h; ++j)
          s2 += (x.values[i * c.h + j] - mu) * (x.values[i * c.h + j] - mu);
        mean.set(i, float(mu));
        rstd.set(i, float(1.0 / std::sqrt(s2 / double(c.h) + 1e-5)));
      }
      std::vector<double> refDx(c.m * c.h), refDgamma(c.h, 0.0), refDbeta(c.h, 0.0);
      for (int64_t i = 0; i < c.m; ++i) {
        double mu = mean.values[i], rs = rstd.values[i], sg = 0, sgx = 0;
        for (int64_t j = 0; j < c.h; ++j) {
          double xhat = (x.values[i * c.h + j] - mu) * rs, d = dy.values[i * c.h + j];
          double g = gamma.values[j] * d;
          sg += g;
          sgx += g * xhat;
          refDgamma[j] += d * xhat;
          refDbeta[j] += d;
        }
        sg /= double(c.h);
        sgx /= double(c.h);
        for (int64_t j = 0; j < c.h; ++j) {
          double xhat = (x.values[i * c.h + j] - mu) * rs;
          double g = gamma.values[j] * dy.values[i * c.h + j];
          refDx[i * c.h + j] = rs * (g - sg - xhat * sgx);
        }
      }
      HostTensor dx(DType::bf16, {c.m, c.h}), dgamma(DType::f32, {c.h}), dbeta(DType::f32, {c.h});
      DeviceRun run;
      run.args.push_back(rt::LaunchArg::integer(c.m));
      run.args.push_back(rt::LaunchArg::integer(c.h));
      run.addTensor(x, false);
      run.addTensor(gamma, false);
      run.addTensor(mean, false);
      run.addTensor(rstd, false);
      run.addTensor(dy, false);
      run.addTensor(dx, true);
      run.addTensor(dgamma, false); // zeros: the kernel adds into them
      run.addTensor(dbeta, false);
      k.launch(run.args);
      testing::synchronize();
      run.download(7, dx);
      run.download(8, dgamma);
      run.download(9, dbeta);
      double errDx = testing::relativeError(dx, refDx);
      double errG = testing::relativeError(dgamma, refDgamma), errB = testing::relativeError(dbeta, refDbeta);
      fmt::print("[{}] layernorm bwd {}x{} ({} threads), M {} H {}: dx rel error {:.3e}, dgamma {:.3e}, "
                 "dbeta {:.3e}\n",
                 arch, c.rows, c.chunk, c.threads, c.m, c.h, errDx, errG, errB);
      CHECK(errDx < kBf16Output);
      CHECK(errG < 1e-6);
      CHECK(errB < 1e-6);
    }
}

TEST_CASE("outside: cross-entropy forward and backward over a vocabulary", "[gpu][outside][training]") {
  struct Config {
    int64_t chunk;
    int threads, stages;
    int64_t m, v;
  };
  for (Config c :
       {Config{2048, 256, 3, 7, 32000}, Config{256, 128, 4, 6, 32011}, Config{1024, 128, 2, 5, 50257}})
    for (const std::string &arch : runnableTargets()) {
      Program p = test::crossEntropyFwdBwd(c.chunk, c.threads, c.stages);
      Kernel k = buildQuiet(p, arch);
      std::mt19937_64 rng(c.v * 3 + c.m);
      HostTensor logits(DType::bf16, {c.m, c.v}), labels(DType::i32, {c.m});
      testing::randomize(logits, rng, -6.0f, 6.0f);
      // An ignored row, the first and the last class, and random ones.
      for (int64_t i = 0; i < c.m; ++i)
        labels.set(i, float(rng() % c.v));
      labels.set(1, float(test::kIgnoreIndex));
      labels.set(2, 0.0f);
      labels.set(3, float(c.v - 1));
      std::vector<double> refLoss(c.m), refGrad(c.m * c.v);
      for (int64_t i = 0; i < c.m; ++i) {
        const float *row = &logits.values[i * c.v];
        int64_t label = int64_t(labels.values[i]);
        double mx = *std::max_element(row, row + c.v), sum = 0;
        for (int64_t j = 0; j < c.v; ++j)
          sum += std::exp(double(row[j]) - mx);
        bool valid = label != test::kIgnoreIndex;
        refLoss[i] = valid ? std::log(sum) + mx - row[label] : 0.0;
        for (int64_t j = 0; j < c.v; ++j)
          refGrad[i * c.v + j] = valid ? std::exp(double(row[j]) - mx) / sum - (j == label ? 1.0 : 0.0) : 0.0;
      }
      HostTensor loss(DType::f32, {c.m}), dlogits(DType::bf16, {c.m, c.v});
      DeviceRun run;
      run.args.push_back(rt::LaunchArg::integer(c.m));
      run.args.push_back(rt::LaunchArg::integer(c.v));
      run.addTensor(logits, false);
      run.addTensor(labels, false);
      run.addTensor(loss, true);
      run.addTensor(dlogits, true);
      k.launch(run.args);
      testing::synchronize();
      run.download(4, loss);
      run.download(5, dlogits);
      double errLoss = testing::relativeError(loss, refLoss),
             errGrad = testing::relativeError(dlogits, refGrad);
      // The gradient's softmax part alone (the -1 at the label dominates the
      // norm above).
      std::vector<double> refSoft(refGrad);
      std::vector<float> gotSoft(dlogits.values);
      for (int64_t i = 0; i < c.m; ++i) {
        int64_t label = int64_t(labels.values[i]);
        if (label == test::kIgnoreIndex)
          continue;
        refSoft[i * c.v + label] = 0;
        gotSoft[i * c.v + label] = 0;
      }
      double errSoft = testing::relativeError(gotSoft, refSoft);
      fmt::print("[{}] cross entropy chunk {}, M {} V {}: loss rel error {:.3e}, dlogits {:.3e} (softmax "
                 "part {:.3e})\n",
                 arch, c.chunk, c.m, c.v, errLoss, errGrad, errSoft);
      CHECK(errLoss < 1e-6);
      CHECK(errGrad < kBf16Output);
      CHECK(errSoft < kBf16Output);
      CHECK(loss.values[1] == 0.0f);
      for (int64_t j = 0; j < c.v; ++j)
        if (dlogits.values[1 * c.v + j] != 0.0f) {
          FAIL("ignored row's dlogits[1, " << j << "] = " << dlogits.values[1 * c.v + j]);
          break;
        }
    }
}

TEST_CASE("outside: histogram through shared-memory atomics", "[gpu][outside][training]") {
  struct Config {
    int64_t bins, chunk, chunksPerBlock;
    int threads;
    int64_t n;
  };
  for (Config c :
       {Config{256, 256, 16, 256, 100003}, Config{1000, 2048, 4, 256, 54321}, Config{256, 1024, 8, 256, 777}})
    for (const std::string &arch : runnableTargets()) {
      Program p = test::histogram(c.bins, c.chunk, c.chunksPerBlock, c.threads);
      Kernel k = buildQuiet(p, arch);
      std::mt19937_64 rng(c.n + c.bins);
      HostTensor values(DType::i32, {c.n}), counts(DType::i32, {c.bins});
      std::vector<double> ref(c.bins, 0.0);
      std::uniform_int_distribution<int32_t> pick(-40, int32_t(c.bins) + 40);
      std::vector<int32_t> raw(c.n);
      // Skewed towards bin 3 so that its count needs many atomics.
      for (int64_t i = 0; i < c.n; ++i)
        raw[i] = i % 5 == 0 ? 3 : pick(rng);
      raw[0] = int32_t(1) << 30; // far past the bins
      raw[c.n - 1] = -(int32_t(1) << 30);
      for (int64_t i = 0; i < c.n; ++i)
        if (raw[i] >= 0 && raw[i] < c.bins)
          ref[raw[i]] += 1;
      std::memcpy(values.bytes.data(), raw.data(), raw.size() * 4);
      values.decode();
      DeviceRun run;
      run.args.push_back(rt::LaunchArg::integer(c.n));
      run.addTensor(values, false);
      run.addTensor(counts, false); // zeros: the kernel adds into them
      k.launch(run.args);
      testing::synchronize();
      run.download(2, counts);
      std::vector<int32_t> got(c.bins);
      std::memcpy(got.data(), counts.bytes.data(), got.size() * 4);
      int64_t wrong = 0, total = 0;
      for (int64_t b = 0; b < c.bins; ++b) {
        wrong += got[b] != int64_t(ref[b]);
        total += got[b];
      }
      fmt::print("[{}] histogram {} bins, N {}: {} bins differ, {} counted of {} in range\n", arch, c.bins,
                 c.n, wrong, total, int64_t(std::accumulate(ref.begin(), ref.end(), 0.0)));
      CHECK(wrong == 0);
    }
}

TEST_CASE("outside: transposes through a shared tile", "[gpu][outside][training]") {
  // rowStride: the shared tile padded by annotate_layout (72: rows on 16
  // bytes, copied in vectors; 65: rows off 16 bytes, each vector's
  // alignment checked).
  struct Config2d {
    int64_t tile;
    int threads;
    int64_t m, n, rowStride = 0;
  };
  for (Config2d c : {Config2d{64, 128, 77, 131}, Config2d{32, 256, 33, 65}, Config2d{64, 128, 129, 63},
                     Config2d{64, 128, 77, 131, 72}, Config2d{64, 128, 129, 63, 65}})
    for (const std::string &arch : runnableTargets()) {
      Program p = test::transpose2d(c.tile, c.threads, c.rowStride);
      Kernel k = buildQuiet(p, arch);
      std::mt19937_64 rng(c.m * c.n);
      HostTensor x(DType::bf16, {c.m, c.n}), y(DType::bf16, {c.n, c.m});
      testing::randomize(x, rng);
      std::vector<double> ref(c.m * c.n);
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.n; ++j)
          ref[j * c.m + i] = x.values[i * c.n + j];
      DeviceRun run;
      run.args.push_back(rt::LaunchArg::integer(c.m));
      run.args.push_back(rt::LaunchArg::integer(c.n));
      run.addTensor(x, false);
      run.addTensor(y, true);
      k.launch(run.args);
      testing::synchronize();
      run.download(3, y);
      double err = testing::relativeError(y, ref);
      fmt::print("[{}] transpose tile {} (row stride {}), {}x{}: rel error {:.3e}\n", arch, c.tile,
                 c.rowStride ? c.rowStride : c.tile, c.m, c.n, err);
      CHECK(err == 0.0);
    }
  struct Config4d {
    int64_t d, seqTile, headTile;
    int threads;
    int64_t b, s, h;
  };
  for (Config4d c : {Config4d{64, 32, 2, 128, 2, 45, 7}, Config4d{128, 16, 4, 256, 1, 33, 6},
                     Config4d{64, 32, 2, 128, 3, 17, 3}})
    for (const std::string &arch : runnableTargets()) {
      Program p = test::bshdToBhsd(c.d, c.seqTile, c.headTile, c.threads);
      Kernel k = buildQuiet(p, arch);
      std::mt19937_64 rng(c.s * c.h + c.d);
      HostTensor x(DType::bf16, {c.b, c.s, c.h, c.d}), y(DType::bf16, {c.b, c.h, c.s, c.d});
      testing::randomize(x, rng);
      std::vector<double> ref(x.size());
      for (int64_t b = 0; b < c.b; ++b)
        for (int64_t s = 0; s < c.s; ++s)
          for (int64_t h = 0; h < c.h; ++h)
            for (int64_t d = 0; d < c.d; ++d)
              ref[((b * c.h + h) * c.s + s) * c.d + d] = x.values[((b * c.s + s) * c.h + h) * c.d + d];
      DeviceRun run;
      for (int64_t v : {c.b, c.s, c.h})
        run.args.push_back(rt::LaunchArg::integer(v));
      run.addTensor(x, false);
      run.addTensor(y, true);
      k.launch(run.args);
      testing::synchronize();
      run.download(4, y);
      double err = testing::relativeError(y, ref);
      fmt::print("[{}] bshd->bhsd D {} ({}x{} a block), B {} S {} H {}: rel error {:.3e}\n", arch, c.d,
                 c.seqTile, c.headTile, c.b, c.s, c.h, err);
      CHECK(err == 0.0);
    }
}

TEST_CASE("outside: causal depthwise conv1d with SiLU", "[gpu][outside][training]") {
  struct Config {
    int64_t stepRows, steps, channels;
    int threads, stages;
    int64_t b, l, d;
  };
  for (Config c : {Config{32, 4, 128, 128, 3, 2, 301, 200}, Config{16, 8, 64, 128, 2, 3, 77, 96},
                   Config{32, 4, 128, 128, 3, 1, 129, 137}})
    for (const std::string &arch : runnableTargets()) {
      Program p = test::causalConv1dSilu(c.stepRows, c.steps, c.channels, c.threads, c.stages);
      Kernel k = buildQuiet(p, arch);
      std::mt19937_64 rng(c.l * 17 + c.d);
      HostTensor x(DType::bf16, {c.b, c.l, c.d}), w(DType::f32, {c.d, 4}), bias(DType::f32, {c.d});
      HostTensor y(DType::bf16, {c.b, c.l, c.d});
      testing::randomize(x, rng, -2.0f, 2.0f);
      testing::randomize(w, rng, -0.8f, 0.8f);
      testing::randomize(bias, rng, -0.5f, 0.5f);
      std::vector<double> ref(y.size());
      for (int64_t b = 0; b < c.b; ++b)
        for (int64_t t = 0; t < c.l; ++t)
          for (int64_t d = 0; d < c.d; ++d) {
            double acc = bias.values[d];
            for (int64_t k = 0; k < 4; ++k) {
              int64_t at = t - 3 + k;
              if (at >= 0)
                acc += double(w.values[d * 4 + k]) * x.values[(b * c.l + at) * c.d + d];
            }
            ref[(b * c.l + t) * c.d + d] = acc / (1.0 + std::exp(-acc));
          }
      DeviceRun run;
      for (int64_t v : {c.b, c.l, c.d})
        run.args.push_back(rt::LaunchArg::integer(v));
      run.addTensor(x, false);
      run.addTensor(w, false);
      run.addTensor(bias, false);
      run.addTensor(y, true);
      k.launch(run.args);
      testing::synchronize();
      run.download(6, y);
      double err = testing::relativeError(y, ref);
      fmt::print("[{}] causal conv1d {}x{} rows, {} channels, B {} L {} D {}: rel error {:.3e}\n", arch,
                 c.stepRows, c.steps, c.channels, c.b, c.l, c.d, err);
      CHECK(err < kBf16Output);
    }
}

TEST_CASE("outside: split-K decode GEMV with bf16 and int8 weights", "[gpu][outside][training]") {
  struct Config {
    DType weight;
    int64_t rows, chunk;
    int threads, stages;
    int64_t n, k, slices;
  };
  // K 1030 bf16 / 1001 i8: rows not whole 16-byte units (the cp.async build).
  for (Config c :
       {Config{DType::bf16, 8, 256, 128, 4, 1000, 4104, 3}, Config{DType::bf16, 8, 512, 128, 4, 333, 1030, 4},
        Config{DType::i8, 16, 256, 256, 4, 1001, 4112, 3}, Config{DType::i8, 16, 512, 256, 4, 250, 1001, 2}})
    for (const std::string &arch : runnableTargets()) {
      Program p = test::gemvSplitK(c.weight, c.rows, c.chunk, c.threads, c.stages);
      Kernel k = buildQuiet(p, arch);
      std::mt19937_64 rng(c.n * 7 + c.k);
      HostTensor w(c.weight, {c.n, c.k}), x(DType::bf16, {c.k}), scale(DType::f32, {c.n});
      HostTensor y(DType::f32, {c.n});
      testing::randomize(w, rng);
      testing::randomize(x, rng);
      testing::randomize(scale, rng, 0.001f, 0.01f);
      bool quantized = c.weight == DType::i8;
      std::vector<double> ref(c.n, 0.0);
      for (int64_t i = 0; i < c.n; ++i) {
        for (int64_t j = 0; j < c.k; ++j)
          ref[i] += double(w.values[i * c.k + j]) * x.values[j];
        if (quantized)
          ref[i] *= scale.values[i];
      }
      DeviceRun run;
      for (int64_t v : {c.n, c.k, c.slices})
        run.args.push_back(rt::LaunchArg::integer(v));
      run.addTensor(w, false);
      run.addTensor(x, false);
      if (quantized)
        run.addTensor(scale, false);
      run.addTensor(y, false); // zeros: the slices add into it
      k.launch(run.args);
      testing::synchronize();
      run.download(quantized ? 6 : 5, y);
      double err = testing::relativeError(y, ref);
      fmt::print("[{}] gemv {} {}x{}, N {} K {} in {} slices: rel error {:.3e}\n", arch, name(c.weight),
                 c.rows, c.chunk, c.n, c.k, c.slices, err);
      CHECK(err < 1e-6);
    }
}

TEST_CASE("outside: MoE router softmax and top-k", "[gpu][outside][training]") {
  struct Config {
    int64_t experts, topK, rows;
    int threads;
    int64_t tokens;
  };
  for (Config c : {Config{64, 2, 8, 128, 37}, Config{160, 8, 4, 128, 29}, Config{160, 8, 4, 128, 3}})
    for (const std::string &arch : runnableTargets()) {
      Program p = test::moeRouterTopK(c.experts, c.topK, c.rows, c.threads);
      Kernel k = buildQuiet(p, arch);
      std::mt19937_64 rng(c.tokens * 11 + c.experts);
      HostTensor logits(DType::f32, {c.tokens, c.experts});
      testing::randomize(logits, rng, -4.0f, 4.0f);
      // A tie for the top at experts 5 and 17 of token 0, and for the second
      // place at 9 and 40 of token 1: the first index wins.
      logits.set(0 * c.experts + 5, 5.0f);
      logits.set(0 * c.experts + 17, 5.0f);
      if (c.tokens > 1) {
        logits.set(1 * c.experts + 50, 6.0f);
        logits.set(1 * c.experts + 9, 5.5f);
        logits.set(1 * c.experts + 40, 5.5f);
      }
      std::vector<double> refIdx(c.tokens * c.topK), refW(c.tokens * c.topK);
      for (int64_t t = 0; t < c.tokens; ++t) {
        const float *row = &logits.values[t * c.experts];
        double mx = *std::max_element(row, row + c.experts), sum = 0;
        std::vector<double> prob(c.experts);
        for (int64_t e = 0; e < c.experts; ++e)
          sum += std::exp(double(row[e]) - mx);
        for (int64_t e = 0; e < c.experts; ++e)
          prob[e] = std::exp(double(row[e]) - mx) / sum;
        std::vector<bool> taken(c.experts, false);
        double total = 0;
        for (int64_t r = 0; r < c.topK; ++r) {
          int64_t best = -1;
          for (int64_t e = 0; e < c.experts; ++e)
            if (!taken[e] && (best < 0 || prob[e] > prob[best]))
              best = e;
          taken[best] = true;
          refIdx[t * c.topK + r] = double(best);
          refW[t * c.topK + r] = prob[best];
          total += prob[best];
        }
        for (int64_t r = 0; r < c.topK; ++r)
          refW[t * c.topK + r] /= total;
      }
      HostTensor idx(DType::i32, {c.tokens, c.topK}), weights(DType::f32, {c.tokens, c.topK});
      DeviceRun run;
      run.args.push_back(rt::LaunchArg::integer(c.tokens));
      run.addTensor(logits, false);
      run.addTensor(idx, true);
      run.addTensor(weights, true);
      k.launch(run.args);
      testing::synchronize();
      run.download(2, idx);
      run.download(3, weights);
      int64_t wrong = 0;
      for (int64_t e = 0; e < idx.size(); ++e)
        wrong += int64_t(idx.values[e]) != int64_t(refIdx[e]);
      double err = testing::relativeError(weights, refW);
      fmt::print("[{}] moe router E {} top-{}, T {}: {} indices differ, weights rel error {:.3e}\n", arch,
                 c.experts, c.topK, c.tokens, wrong, err);
      CHECK(wrong == 0);
      CHECK(err < 1e-6);
      for (int64_t t = 0; t < std::min<int64_t>(c.tokens, 2); ++t) {
        INFO("token " << t);
        CHECK(int64_t(idx.values[t * c.topK]) == int64_t(refIdx[t * c.topK]));
        CHECK(int64_t(idx.values[t * c.topK + 1]) == int64_t(refIdx[t * c.topK + 1]));
      }
    }
}
