//===- OutsideKernelGpuTests.cpp - a new user's kernels on the GPU --------===//
//
// The kernels of tests/common/OutsideKernels.h, built for the running
// GPU's architecture, on random inputs of shapes that are not multiples of
// their tiles, against float64 references on the host: a fused residual
// add + RMSNorm, rotary embeddings in place, an MoE grouped gemm that
// gathers and scatters rows by a token index, int8 quantisation per row
// and its dequantisation, a softmax fused with its top-1 (i32 indices),
// and integer reductions past f32's exact range.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "OutsideKernels.h"
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

namespace {

std::string deviceArch() { return rt::nativeArch(rt::Driver::get().computeCapability()); }

Kernel build(Program &p) { return compile(p, {deviceArch()}); }

/// The largest |a - b| over two tensors' elements.
double largestDifference(const HostTensor &a, const std::vector<double> &b) {
  double worst = 0;
  for (int64_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(double(a.values[i]) - b[i]));
  return worst;
}

} // namespace

TEST_CASE("outside: residual add + RMSNorm over wide rows matches the host", "[gpu][outside]") {
  struct Config {
    int64_t rows, chunk;
    int threads, stages;
    int64_t m, h; // h * 2 bytes a multiple of 16 or not (TMA or the cp.async build)
  };
  for (Config c : {Config{4, 256, 128, 3, 37, 4104}, Config{4, 256, 128, 3, 9, 4097},
                   Config{1, 1024, 256, 2, 5, 5000}}) {
    Program p = test::rmsNormResidual(c.rows, c.chunk, c.threads, c.stages);
    Kernel k = build(p);
    std::mt19937_64 rng(c.m * 131 + c.h);
    const double eps = 1e-6;
    HostTensor x(DType::bf16, {c.m, c.h}), r(DType::bf16, {c.m, c.h}), w(DType::bf16, {c.h});
    HostTensor y(DType::bf16, {c.m, c.h}), h(DType::bf16, {c.m, c.h});
    testing::randomize(x, rng);
    testing::randomize(r, rng);
    testing::randomize(w, rng, 0.5f, 1.5f);
    std::vector<double> refY(c.m * c.h), refH(c.m * c.h);
    for (int64_t i = 0; i < c.m; ++i) {
      double ss = 0;
      for (int64_t j = 0; j < c.h; ++j) {
        int64_t e = i * c.h + j;
        refH[e] = testing::roundTo(DType::bf16, x.values[e] + r.values[e]);
        ss += refH[e] * refH[e];
      }
      double rstd = 1.0 / std::sqrt(ss / double(c.h) + eps);
      for (int64_t j = 0; j < c.h; ++j) refY[i * c.h + j] = refH[i * c.h + j] * rstd * w.values[j];
    }
    DeviceRun run;
    run.args.push_back(rt::LaunchArg::integer(c.m));
    run.args.push_back(rt::LaunchArg::integer(c.h));
    run.args.push_back(rt::LaunchArg::real(eps));
    run.addTensor(x, false);
    run.addTensor(r, false);
    run.addTensor(w, false);
    run.addTensor(y, true);
    run.addTensor(h, true);
    k.launch(run.args);
    testing::synchronize();
    run.download(6, y);
    run.download(7, h);
    double errY = testing::relativeError(y, refY), errH = testing::relativeError(h, refH);
    fmt::print("rmsnorm {}x{} ({} threads), M {} H {}: y rel error {:.3e}, h {:.3e}\n", c.rows,
               c.chunk, c.threads, c.m, c.h, errY, errH);
    CHECK(errY < testing::toleranceFor(DType::bf16));
    CHECK(errH == 0.0); // one rounding of an exact f32 sum, as the host does
  }
}

TEST_CASE("outside: rotary embeddings applied in place through a position array", "[gpu][outside]") {
  struct Config {
    int64_t headsPerBlock;
    DType table;
    int threads;
    int64_t tokens, heads;
  };
  for (Config c : {Config{4, DType::f32, 128, 29, 14}, Config{8, DType::bf16, 256, 17, 12}}) {
    Program p = test::ropeInPlace(c.headsPerBlock, c.table, c.threads);
    Kernel k = build(p);
    const int64_t maxPos = 100;
    std::mt19937_64 rng(c.tokens * 7 + c.heads);
    HostTensor q(DType::bf16, {c.tokens, c.heads, 128}), pos(DType::i32, {c.tokens});
    HostTensor cosT(c.table, {maxPos, 64}), sinT(c.table, {maxPos, 64});
    testing::randomize(q, rng);
    for (int64_t t = 0; t < c.tokens; ++t) pos.set(t, float(rng() % maxPos));
    for (int64_t at = 0; at < maxPos; ++at)
      for (int64_t d = 0; d < 64; ++d) {
        double angle = double(at) * std::pow(10000.0, -double(d) / 64.0);
        cosT.set(at * 64 + d, float(std::cos(angle)));
        sinT.set(at * 64 + d, float(std::sin(angle)));
      }
    std::vector<double> ref(q.size());
    for (int64_t t = 0; t < c.tokens; ++t)
      for (int64_t hd = 0; hd < c.heads; ++hd)
        for (int64_t d = 0; d < 128; ++d) {
          int64_t base = (t * c.heads + hd) * 128, at = int64_t(pos.values[t]);
          double cs = cosT.values[at * 64 + d % 64], sn = sinT.values[at * 64 + d % 64];
          double self = q.values[base + d], partner = q.values[base + (d + 64) % 128];
          ref[base + d] = d < 64 ? self * cs - partner * sn : self * cs + partner * sn;
        }
    DeviceRun run;
    run.args.push_back(rt::LaunchArg::integer(c.tokens));
    run.args.push_back(rt::LaunchArg::integer(c.heads));
    run.args.push_back(rt::LaunchArg::integer(maxPos));
    run.addTensor(q, false);
    run.addTensor(pos, false);
    run.addTensor(cosT, false);
    run.addTensor(sinT, false);
    k.launch(run.args);
    testing::synchronize();
    HostTensor out(DType::bf16, {c.tokens, c.heads, 128});
    run.download(3, out);
    double err = testing::relativeError(out, ref);
    fmt::print("rope {} heads a block, {} tables, T {} heads {}: rel error {:.3e}\n",
               c.headsPerBlock, name(c.table), c.tokens, c.heads, err);
    CHECK(err < testing::toleranceFor(DType::bf16));
  }
}

TEST_CASE("outside: an MoE grouped gemm gathers and scatters rows by token", "[gpu][outside]") {
  // K = 197: rows of X are not whole 16-byte units, so the gathered rows
  // take the copies' unaligned path (ordinary shared stores read by the
  // tensor cores) as well as cp.async.
  for (int64_t kDim : {int64_t(192), int64_t(197)}) {
    Program p = test::moeGroupedGemm(3);
    Kernel k = build(p);
    const int64_t tokens = 300, n = 320, experts = 5;
    std::mt19937_64 rng(kDim);
    // Top-1 routing with one empty expert and one of more than 64 rows.
    std::vector<int64_t> expertOf(tokens);
    for (int64_t t = 0; t < tokens; ++t) {
      int64_t e = rng() % 4;
      expertOf[t] = e >= 2 ? e + 1 : (t % 3 == 0 ? 0 : e); // expert 2 stays empty
    }
    std::vector<int64_t> order(tokens);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return expertOf[a] < expertOf[b]; });
    HostTensor offsets(DType::i32, {experts + 1}), idx(DType::i32, {tokens});
    std::vector<int64_t> counts(experts, 0);
    for (int64_t t = 0; t < tokens; ++t) ++counts[expertOf[t]];
    int64_t at = 0, most = 0;
    for (int64_t e = 0; e < experts; ++e) {
      offsets.set(e, float(at));
      at += counts[e];
      most = std::max(most, counts[e]);
    }
    offsets.set(experts, float(at));
    for (int64_t r = 0; r < tokens; ++r) idx.set(r, float(order[r]));
    const int64_t rowTiles = (most + test::kMoeBlockM - 1) / test::kMoeBlockM;
    HostTensor x(DType::bf16, {tokens, kDim}), w(DType::bf16, {experts, kDim, n});
    HostTensor y(DType::f32, {tokens, n});
    testing::randomize(x, rng);
    testing::randomize(w, rng);
    std::vector<double> ref(tokens * n, 0.0);
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t l = 0; l < kDim; ++l) {
        double a = x.values[t * kDim + l];
        const float *row = &w.values[(expertOf[t] * kDim + l) * n];
        for (int64_t j = 0; j < n; ++j) ref[t * n + j] += a * row[j];
      }
    DeviceRun run;
    for (int64_t v : {tokens, kDim, n, experts, tokens, rowTiles})
      run.args.push_back(rt::LaunchArg::integer(v));
    run.addTensor(x, false);
    run.addTensor(w, false);
    run.addTensor(offsets, false);
    run.addTensor(idx, false);
    run.addTensor(y, true); // every token is routed once: every row is written
    k.launch(run.args);
    testing::synchronize();
    run.download(10, y);
    double err = testing::relativeError(y, ref);
    fmt::print("moe grouped gemm K {} ({} row tiles): rel error {:.3e}\n", kDim, rowTiles, err);
    CHECK(err < 1e-5);
  }
}

TEST_CASE("outside: int8 quantisation per row and back", "[gpu][outside]") {
  struct Config {
    DType in;
    int64_t rows, chunk;
    int threads;
    int64_t m, c;
  };
  for (Config cfg : {Config{DType::bf16, 8, 256, 256, 37, 4104}, Config{DType::bf16, 8, 256, 256, 11, 4099},
                     Config{DType::f16, 2, 512, 128, 7, 1000}}) {
    Program p = test::quantizeRowsInt8(cfg.in, cfg.rows, cfg.chunk, cfg.threads);
    Kernel k = build(p);
    std::mt19937_64 rng(cfg.m + cfg.c);
    HostTensor x(cfg.in, {cfg.m, cfg.c}), q(DType::i8, {cfg.m, cfg.c}), scale(DType::f32, {cfg.m});
    testing::randomize(x, rng, -3.0f, 3.0f);
    for (int64_t j = 0; j < cfg.c; ++j) x.set(2 * cfg.c + j, 0.0f); // an all-zero row
    // The host does the kernel's f32 arithmetic: amax / 127, 127 / amax, one
    // product, +-0.5 and truncation.
    std::vector<double> refQ(x.size()), refScale(cfg.m);
    for (int64_t i = 0; i < cfg.m; ++i) {
      float amax = 0;
      for (int64_t j = 0; j < cfg.c; ++j) amax = std::max(amax, std::abs(x.values[i * cfg.c + j]));
      refScale[i] = amax / 127.0f;
      float inv = amax > 0 ? 127.0f / amax : 0.0f;
      for (int64_t j = 0; j < cfg.c; ++j) {
        float v = x.values[i * cfg.c + j] * inv;
        refQ[i * cfg.c + j] = testing::roundTo(DType::i8, v + (v >= 0 ? 0.5f : -0.5f));
      }
    }
    DeviceRun run;
    run.args.push_back(rt::LaunchArg::integer(cfg.m));
    run.args.push_back(rt::LaunchArg::integer(cfg.c));
    run.addTensor(x, false);
    run.addTensor(q, true);
    run.addTensor(scale, true);
    k.launch(run.args);
    testing::synchronize();
    run.download(3, q);
    run.download(4, scale);
    double worst = largestDifference(q, refQ);
    int64_t differing = 0;
    for (int64_t e = 0; e < q.size(); ++e) differing += double(q.values[e]) != refQ[e];
    fmt::print("int8 quantize {} {}x{}, M {} C {}: largest code difference {}, scale rel error {:.3e}\n",
               name(cfg.in), cfg.rows, cfg.chunk, cfg.m, cfg.c, worst,
               testing::relativeError(scale, refScale));
    // NVRTC may contract x * inv + 0.5 into one FMA: a tie may then round
    // the other way.
    CHECK(worst <= 1.0);
    CHECK(differing * 1000 <= q.size());
    CHECK(testing::relativeError(scale, refScale) < 1e-6);

    // And back: y = q * scale.
    for (DType out : {DType::bf16, DType::f32}) {
      Program dp = test::dequantizeRowsInt8(out, out == DType::f32 ? 256 : 128);
      Kernel dk = build(dp);
      HostTensor y(out, {cfg.m, cfg.c});
      std::vector<double> refY(y.size());
      for (int64_t e = 0; e < y.size(); ++e) refY[e] = double(q.values[e]) * scale.values[e / cfg.c];
      DeviceRun back;
      back.args.push_back(rt::LaunchArg::integer(cfg.m));
      back.args.push_back(rt::LaunchArg::integer(cfg.c));
      back.addTensor(q, false);
      back.addTensor(scale, false);
      back.addTensor(y, true);
      dk.launch(back.args);
      testing::synchronize();
      back.download(4, y);
      double err = testing::relativeError(y, refY);
      fmt::print("int8 dequantize to {}, M {} C {}: rel error {:.3e}\n", name(out), cfg.m, cfg.c, err);
      CHECK(err < testing::toleranceFor(out));
    }
  }
}

TEST_CASE("outside: softmax over a vocabulary fused with its top-1", "[gpu][outside]") {
  struct Config {
    DType in;
    int64_t chunk;
    int threads;
    int64_t m, v;
  };
  for (Config c : {Config{DType::bf16, 2048, 256, 7, 32011}, Config{DType::f32, 256, 128, 5, 32000},
                   Config{DType::f32, 256, 128, 3, 50257}}) {
    Program p = test::softmaxTop1(c.in, c.chunk, c.threads);
    Kernel k = build(p);
    std::mt19937_64 rng(c.v + c.m);
    HostTensor logits(c.in, {c.m, c.v}), probs(DType::f32, {c.m, c.v});
    HostTensor top(DType::i32, {c.m}), topProb(DType::f32, {c.m});
    testing::randomize(logits, rng, -8.0f, 8.0f);
    std::vector<double> refProbs(probs.size()), refTop(c.m), refTopProb(c.m);
    for (int64_t i = 0; i < c.m; ++i) {
      const float *row = &logits.values[i * c.v];
      int64_t best = 0;
      for (int64_t j = 1; j < c.v; ++j)
        if (row[j] > row[best]) best = j; // the first index of the maximum
      double sum = 0;
      for (int64_t j = 0; j < c.v; ++j) sum += std::exp(double(row[j]) - row[best]);
      for (int64_t j = 0; j < c.v; ++j) refProbs[i * c.v + j] = std::exp(double(row[j]) - row[best]) / sum;
      refTop[i] = double(best);
      refTopProb[i] = 1.0 / sum;
    }
    DeviceRun run;
    run.args.push_back(rt::LaunchArg::integer(c.m));
    run.args.push_back(rt::LaunchArg::integer(c.v));
    run.addTensor(logits, false);
    run.addTensor(probs, true);
    run.addTensor(top, true);
    run.addTensor(topProb, true);
    k.launch(run.args);
    testing::synchronize();
    run.download(3, probs);
    run.download(4, top);
    run.download(5, topProb);
    double errP = testing::relativeError(probs, refProbs);
    double errTop = testing::relativeError(topProb, refTopProb);
    fmt::print("softmax top-1 {} chunk {}, M {} V {}: probs rel error {:.3e}, top prob {:.3e}\n",
               name(c.in), c.chunk, c.m, c.v, errP, errTop);
    CHECK(errP < 1e-5);
    CHECK(errTop < 1e-5);
    for (int64_t i = 0; i < c.m; ++i) {
      INFO("row " << i);
      CHECK(int64_t(top.values[i]) == int64_t(refTop[i]));
    }
  }
}

// Integer reductions are exact where f32 would round (past 2^24): row sums
// near 2^30, and a maximum, minimum and absolute maximum of 2^24 + odd
// numbers, over rows of 1000 (not a power of two), through the three
// lowerings: a fragment across lanes and warps, a shared tile by groups of
// lanes, and a shared tile into a fragment; and a fragment into a shared
// buffer. Shared results leave by TMA stores on sm_90a (fenced after the
// reduction's thread writes).
TEST_CASE("outside: integer reductions are exact past 2^24", "[gpu][outside]") {
  const int64_t rows = 4, cols = 1000;
  Program p("outside_integer_reductions");
  Tensor x = p.tensor("x", {rows, cols}, DType::i32);
  Tensor out = p.tensor("out", {7, rows}, DType::i32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer xs = alloc_shared({rows, cols}, DType::i32, "xs");
    Buffer xf = alloc_fragment({rows, cols}, DType::i32, "xf");
    copy(x.tile({0, 0}, {rows, cols}), xs);
    copy(xs, xf);
    Buffer sum = alloc_fragment({rows}, DType::i32, "sum"), mx = alloc_fragment({rows}, DType::i32, "mx");
    Buffer mn = alloc_fragment({rows}, DType::i32, "mn"), am = alloc_fragment({rows}, DType::i32, "am");
    Buffer sharedSum = alloc_shared({rows}, DType::i32, "shared_sum");
    Buffer intoFragment = alloc_fragment({rows}, DType::i32, "into_fragment");
    Buffer fragmentIntoShared = alloc_shared({rows}, DType::i32, "fragment_into_shared");
    reduce_sum(xf, sum, 1);
    reduce_max(xf, mx, 1);
    reduce_min(xf, mn, 1);
    reduce_absmax(xf, am, 1);
    reduce_sum(xs, sharedSum, 1);
    reduce_max(xs, intoFragment, 1);
    reduce_min(xf, fragmentIntoShared, 1);
    int k = 0;
    for (Buffer b : {sum, mx, mn, am, sharedSum, intoFragment, fragmentIntoShared})
      copy(b, out.tile({k++, 0}, {drop, rows}));
  });
  Kernel kernel = build(p);
  std::mt19937_64 rng(2024);
  std::vector<int32_t> values(rows * cols);
  std::uniform_int_distribution<int32_t> near(0, 1000);
  for (int32_t &v : values) v = (1 << 20) + near(rng);
  std::uniform_int_distribution<int64_t> at(0, cols - 1);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t hi = at(rng), lo = (hi + 1 + at(rng) % (cols - 1)) % cols;
    values[r * cols + hi] = (1 << 24) + 1 + 2 * int32_t(r);
    values[r * cols + lo] = -((1 << 24) + 3 + 2 * int32_t(r));
  }
  HostTensor xt(DType::i32, {rows, cols}), ot(DType::i32, {7, rows});
  std::memcpy(xt.bytes.data(), values.data(), values.size() * 4);
  xt.decode();
  DeviceRun run;
  run.addTensor(xt, false);
  run.addTensor(ot, true);
  kernel.launch(run.args);
  testing::synchronize();
  run.download(1, ot);
  std::vector<int32_t> got(7 * rows);
  std::memcpy(got.data(), ot.bytes.data(), got.size() * 4);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t *row = &values[r * cols];
    int64_t sum = std::accumulate(row, row + cols, int64_t{0});
    int32_t mx = *std::max_element(row, row + cols), mn = *std::min_element(row, row + cols);
    int32_t am = std::max(std::abs(mx), std::abs(mn));
    INFO("row " << r);
    CHECK(got[0 * rows + r] == sum);
    CHECK(got[1 * rows + r] == mx);
    CHECK(got[2 * rows + r] == mn);
    CHECK(got[3 * rows + r] == am);
    CHECK(got[4 * rows + r] == sum);
    CHECK(got[5 * rows + r] == mx);
    CHECK(got[6 * rows + r] == mn);
  }
}
