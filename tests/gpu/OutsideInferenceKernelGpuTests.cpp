//===- OutsideInferenceKernelGpuTests.cpp - inference kernels on the GPU --===//
//
// The kernels of tests/common/OutsideInferenceKernels.h, built for the
// running GPU's architecture (and sm_80's, through its PTX, on a later
// one), on random inputs of shapes that are not multiples of their tiles,
// against float64 references on the host: sliding-window causal attention
// with soft-capping, a SwiGLU GEMM, a bias + GELU(tanh) GEMM and a split-K
// GEMM whose slices meet in region atomics. Without a GPU the binary says
// so and skips (tests/gpu/GpuTests.cpp's main).
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "OutsideGpuRuns.h"
#include "OutsideInferenceKernels.h"
#include "tessel/Testing.h"
#include "tessel/dsl/Compile.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Launch.h"

#include <cmath>
#include <fmt/format.h>
#include <random>

using namespace tessel;
using testing::DeviceRun;
using testing::HostTensor;
using test::buildQuiet;
using test::runnableTargets;

namespace {

/// Tolerances (norm-wise relative error against float64 on the same bf16
/// inputs; products of bf16 values are exact in f32, so the f32 sums over
/// K < 2^11 terms contribute ~1e-6):
///  - a bf16 output that is one rounding of an f32 result: half an ulp of
///    bf16 (2^-9 = 1.95e-3) bounds each element's error, so the norm-wise
///    error stays below it; 4e-3 leaves room for exp (SiLU) and tanhf
///    (GELU) before the rounding.
///  - attention's O is rounded to bf16 twice, P before P V and O at the
///    end (each at most 2^-9, unbiased, so together below 2 x 2^-9 = 3.9e-3
///    element-wise), after exp2.approx (2 ulp of f32): 8e-3.
///  - f32 outputs (LSE, split-K's sums): f32 arithmetic in another order
///    (the tensor cores' f32 accumulation, the slices' atomic adds in any
///    order) and exp2.approx and __expf (a few ulp each, the capping's
///    times the cap: below 1e-5 absolute on LSEs of a few units), ~1e-6
///    norm-wise;
///    1e-5, testing::toleranceFor(f32), as the MoE gemm's f32 output.
constexpr double kBf16Output = 4e-3;
constexpr double kAttentionOutput = 8e-3;
constexpr double kF32Output = 1e-5;

/// The attention's shape and settings.
struct AttentionProblem {
  int64_t b, s, h, hkv, window;
  double cap;
};

std::vector<double> windowAttentionReference(const HostTensor &q, const HostTensor &k, const HostTensor &v,
                                             const AttentionProblem &pr, int64_t d, double scale,
                                             std::vector<double> &lse) {
  int64_t b = pr.b, s = pr.s, h = pr.h, window = pr.window;
  double cap = pr.cap;
  std::vector<double> o(b * s * h * d, 0.0), score(s);
  lse.assign(b * h * s, 0.0);
  auto at = [&](int64_t bb, int64_t i, int64_t hh) { return ((bb * s + i) * h + hh) * d; };
  auto kvAt = [&](int64_t bb, int64_t j, int64_t hh) {
    return ((bb * s + j) * pr.hkv + hh / (h / pr.hkv)) * d;
  };
  for (int64_t bb = 0; bb < b; ++bb)
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t i = 0; i < s; ++i) {
        int64_t lo = std::max<int64_t>(0, i - window + 1);
        double mx = -INFINITY;
        for (int64_t j = lo; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e)
            dot += double(q.values[at(bb, i, hh) + e]) * double(k.values[kvAt(bb, j, hh) + e]);
          score[j] = cap * std::tanh(dot * scale / cap);
          mx = std::max(mx, score[j]);
        }
        double sum = 0;
        for (int64_t j = lo; j <= i; ++j) {
          double pj = std::exp(score[j] - mx);
          sum += pj;
          for (int64_t e = 0; e < d; ++e)
            o[at(bb, i, hh) + e] += pj * double(v.values[kvAt(bb, j, hh) + e]);
        }
        for (int64_t e = 0; e < d; ++e)
          o[at(bb, i, hh) + e] /= sum;
        lse[(bb * h + hh) * s + i] = mx + std::log(sum);
      }
  return o;
}

/// c[i, j] = sum_k a[i, k] b(k, j) in float64, with b read as [N, K]
/// (`bNK`) or [K, N].
std::vector<double> product(const HostTensor &a, const HostTensor &b, int64_t m, int64_t n, int64_t kk,
                            bool bNK) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t e = 0; e < kk; ++e)
        acc += double(a.values[i * kk + e]) * double(bNK ? b.values[j * kk + e] : b.values[e * n + j]);
      c[i * n + j] = acc;
    }
  return c;
}

} // namespace

TEST_CASE("outside: sliding-window causal attention with soft-capping", "[gpu][outside][inference]") {
  using test::WindowAttentionConfig;
  struct Config {
    WindowAttentionConfig tiles;
    AttentionProblem problem;
  };
  // S is no multiple of the tiles; the windows: one key (O is V row for
  // row), one shorter than a query block, one spanning several key blocks
  // (interior blocks unmasked with maskEdgesOnly), and one past S (plain
  // causal attention). Caps of 2 and 5 bend the scores (a few units);
  // 30 barely does.
  const WindowAttentionConfig d128{128, 128, 64, 256, 2}, d128Edges{128, 128, 64, 256, 2, true, true},
      d64{64, 64, 64, 128, 3, true};
  for (Config c : {Config{d128, {2, 333, 4, 2, 100, 2.0}}, Config{d128, {1, 200, 2, 2, 1, 2.0}},
                   Config{d128Edges, {2, 517, 4, 1, 300, 5.0}}, Config{d128Edges, {1, 190, 2, 2, 1000, 30.0}},
                   Config{d64, {2, 301, 2, 2, 37, 5.0}}, Config{d64, {1, 450, 6, 3, 200, 2.0}}})
    for (const std::string &arch : runnableTargets()) {
      Program p = test::windowSoftcapAttention(c.tiles);
      Kernel k = buildQuiet(p, arch);
      const AttentionProblem &pr = c.problem;
      int64_t d = c.tiles.headDim;
      std::mt19937_64 rng(pr.s * 31 + pr.window);
      HostTensor q(DType::bf16, {pr.b, pr.s, pr.h, d}), kt(DType::bf16, {pr.b, pr.s, pr.hkv, d}),
          v(DType::bf16, {pr.b, pr.s, pr.hkv, d});
      // Scores of a few units, so that the small caps bend them.
      testing::randomize(q, rng, -2.0f, 2.0f);
      testing::randomize(kt, rng, -2.0f, 2.0f);
      testing::randomize(v, rng);
      double scale = 1.0 / std::sqrt(double(d));
      std::vector<double> refLse;
      std::vector<double> refO = windowAttentionReference(q, kt, v, pr, d, float(scale), refLse);
      HostTensor o(DType::bf16, {pr.b, pr.s, pr.h, d}), lse(DType::f32, {pr.b, pr.h, pr.s});
      DeviceRun run;
      for (int64_t sym : {pr.b, pr.s, pr.h, pr.hkv, pr.window})
        run.args.push_back(rt::LaunchArg::integer(sym));
      run.args.push_back(rt::LaunchArg::real(float(scale)));
      run.args.push_back(rt::LaunchArg::real(pr.cap));
      run.addTensor(q, false);
      run.addTensor(kt, false);
      run.addTensor(v, false);
      run.addTensor(o, true);
      run.addTensor(lse, true);
      k.launch(run.args);
      testing::synchronize();
      run.download(10, o);
      run.download(11, lse);
      double errO = testing::relativeError(o, refO), errL = testing::relativeError(lse, refLse);
      fmt::print("[{}] {}: B {} S {} H {}/{} W {} cap {}: O rel error {:.3e}, LSE {:.3e}\n", arch, p.name(),
                 pr.b, pr.s, pr.h, pr.hkv, pr.window, pr.cap, errO, errL);
      CHECK(errO < kAttentionOutput);
      CHECK(errL < kF32Output);
    }
}

TEST_CASE("outside: SwiGLU GEMM over two accumulators, and over a merged weight",
          "[gpu][outside][inference]") {
  struct Config {
    test::GemmTiles tiles;
    bool merged;
    int64_t m, n, k;
  };
  // K 520: rows of whole 16-byte units (TMA on sm_90a); 333: not (the
  // build with cp.async loads). N 130 and 90 leave a partial column tile
  // (the merged weight's gate rows past N read the up rows: dropped).
  for (Config c : {Config{{128, 64, 64, 256, 3}, false, 300, 200, 520},
                   Config{{128, 64, 64, 256, 3}, false, 77, 130, 333},
                   Config{{64, 64, 64, 128, 3}, false, 150, 90, 264},
                   Config{{128, 64, 64, 128, 3}, true, 300, 200, 520},
                   Config{{128, 64, 64, 256, 3}, true, 77, 130, 333}})
    for (const std::string &arch : runnableTargets()) {
      Program p = c.merged ? test::swigluMergedGemm(c.tiles) : test::swigluGemm(c.tiles);
      Kernel k = buildQuiet(p, arch);
      std::mt19937_64 rng(c.m * 7 + c.n * 3 + c.k);
      // The gate's rows, then the up projection's: one [2N, K] tensor for
      // the merged kernel, its halves for the other.
      HostTensor x(DType::bf16, {c.m, c.k}), w(DType::bf16, {2 * c.n, c.k});
      testing::randomize(x, rng);
      testing::randomize(w, rng, -0.2f, 0.2f);
      std::vector<float> half(w.values.begin(), w.values.begin() + c.n * c.k);
      HostTensor wg(DType::bf16, {c.n, c.k}, half);
      half.assign(w.values.begin() + c.n * c.k, w.values.end());
      HostTensor wu(DType::bf16, {c.n, c.k}, half);
      std::vector<double> g = product(x, wg, c.m, c.n, c.k, true), u = product(x, wu, c.m, c.n, c.k, true);
      std::vector<double> ref(c.m * c.n);
      for (size_t i = 0; i < ref.size(); ++i)
        ref[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      HostTensor out(DType::bf16, {c.m, c.n});
      DeviceRun run;
      for (int64_t sym : {c.m, c.n, c.k})
        run.args.push_back(rt::LaunchArg::integer(sym));
      run.addTensor(x, false);
      if (c.merged) {
        run.addTensor(w, false);
      } else {
        run.addTensor(wg, false);
        run.addTensor(wu, false);
      }
      run.addTensor(out, true);
      k.launch(run.args);
      testing::synchronize();
      run.download(run.args.size() - 1, out);
      double err = testing::relativeError(out, ref);
      fmt::print("[{}] {}, M {} N {} K {}: rel error {:.3e}\n", arch, p.name(), c.m, c.n, c.k, err);
      CHECK(err < kBf16Output);
    }
}

TEST_CASE("outside: bias + GELU(tanh) GEMM with ragged M, N and K", "[gpu][outside][inference]") {
  struct Config {
    test::GemmTiles tiles;
    int64_t m, n, k;
  };
  // N 264: the [K, N] weight's rows are whole 16-byte units; 190: not.
  for (Config c : {Config{{128, 128, 64, 256, 3}, 257, 264, 100},
                   Config{{128, 128, 64, 256, 3}, 130, 190, 200},
                   Config{{64, 128, 32, 128, 4}, 99, 264, 72}})
    for (const std::string &arch : runnableTargets()) {
      Program p = test::biasGeluGemm(c.tiles);
      Kernel k = buildQuiet(p, arch);
      std::mt19937_64 rng(c.m * 5 + c.n * 11 + c.k);
      HostTensor x(DType::bf16, {c.m, c.k}), w(DType::bf16, {c.k, c.n}), bias(DType::f32, {c.n});
      testing::randomize(x, rng);
      testing::randomize(w, rng, -0.3f, 0.3f);
      testing::randomize(bias, rng, -2.0f, 2.0f);
      std::vector<double> ref = product(x, w, c.m, c.n, c.k, false);
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.n; ++j) {
          double z = ref[i * c.n + j] + bias.values[j];
          ref[i * c.n + j] = 0.5 * z * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (z + 0.044715 * z * z * z)));
        }
      HostTensor y(DType::bf16, {c.m, c.n});
      DeviceRun run;
      for (int64_t sym : {c.m, c.n, c.k})
        run.args.push_back(rt::LaunchArg::integer(sym));
      run.addTensor(x, false);
      run.addTensor(w, false);
      run.addTensor(bias, false);
      run.addTensor(y, true);
      k.launch(run.args);
      testing::synchronize();
      run.download(6, y);
      double err = testing::relativeError(y, ref);
      fmt::print("[{}] {}, M {} N {} K {}: rel error {:.3e}\n", arch, p.name(), c.m, c.n, c.k, err);
      CHECK(err < kBf16Output);
    }
}

TEST_CASE("outside: split-K GEMM added into f32 by region atomics", "[gpu][outside][inference]") {
  struct Config {
    bool throughShared, overlapMma;
    int64_t m, n, k, splits;
  };
  // 1000 of K is 16 steps of 64: 3 splits take 6, 6 and 4; 7 take 3 each
  // and leave the last slice none (it adds zeros: with overlap_mma, the
  // zero fill kept for a loop that does not run). K 330: rows that are not
  // whole 16-byte units (cp.async loads).
  for (Config c : {Config{false, false, 200, 136, 1000, 3}, Config{false, false, 129, 72, 1000, 7},
                   Config{true, false, 200, 136, 1000, 3}, Config{true, false, 129, 72, 1000, 7},
                   Config{true, false, 64, 50, 330, 2}, Config{false, true, 200, 136, 1000, 3},
                   Config{false, true, 129, 72, 1000, 7}})
    for (const std::string &arch : runnableTargets()) {
      Program p = test::splitKGemm({128, 128, 64, 256, 3}, c.throughShared, c.overlapMma);
      Kernel k = buildQuiet(p, arch);
      std::mt19937_64 rng(c.m * 13 + c.k + c.splits);
      HostTensor x(DType::bf16, {c.m, c.k}), w(DType::bf16, {c.n, c.k});
      testing::randomize(x, rng);
      testing::randomize(w, rng);
      std::vector<double> ref = product(x, w, c.m, c.n, c.k, true);
      HostTensor out(DType::f32, {c.m, c.n});
      DeviceRun run;
      for (int64_t sym : {c.m, c.n, c.k, c.splits})
        run.args.push_back(rt::LaunchArg::integer(sym));
      run.addTensor(x, false);
      run.addTensor(w, false);
      run.addTensor(out, false); // zeros: the slices add into it
      k.launch(run.args);
      testing::synchronize();
      run.download(6, out);
      double err = testing::relativeError(out, ref);
      fmt::print("[{}] {}, M {} N {} K {} splits {}: rel error {:.3e}\n", arch, p.name(), c.m, c.n, c.k,
                 c.splits, err);
      CHECK(err < kF32Output);
    }
}
