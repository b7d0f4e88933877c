//===- Library.cpp - the kernel library by name, with GPU checks ----------===//
#include "tessel/kernels/Kernels.h"
#include "tessel/harness/LibrarySupport.h"
#include "tessel/runtime/LowPrecision.h"

#include <cmath>
#include <fmt/format.h>
#include <memory>
#include <mutex>
#include <tuple>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::harness;

namespace {
CheckResult checkTmaScale(Kernel &k, const Params &p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  int64_t m = intParam(p, "M"), cols = intParam(p, "cols");
  DType t = dtypeParam(p, "dtype");
  float alpha = std::uniform_real_distribution<float>(0.5f, 2.0f)(rng);
  bool accumulate = flagParam(p, "accumulate");
  HostTensor x(t, {m, cols}), y(DType::f32, {m, cols});
  randomize(x, rng);
  randomize(y, rng);
  std::vector<double> ref(m * cols);
  for (int64_t i = 0; i < m * cols; ++i)
    ref[i] = double(alpha) * x.values[i] + (accumulate ? y.values[i] : 0.0);
  CheckResult r;
  r.shape = fmt::format("M={} cols={} {}", m, cols, name(t));
  DeviceRun run;
  run.args.push_back(rt::LaunchArg::integer(m));
  run.args.push_back(rt::LaunchArg::real(alpha));
  run.addTensor(x, false);
  run.addTensor(y, /*poison=*/!accumulate);
  return launchAndCompare(k, run, 3, y, ref, 1e-6, r);
}

CheckResult checkScaledAdd(Kernel &k, const Params &p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  int64_t n = intParam(p, "N");
  DType t = dtypeParam(p, "dtype");
  float alpha = std::uniform_real_distribution<float>(0.5f, 2.0f)(rng);
  HostTensor x(t, {n}), y(t, {n});
  randomize(x, rng);
  randomize(y, rng);
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = double(alpha) * x.values[i] + y.values[i];
  CheckResult r;
  r.shape = fmt::format("N={} {}", n, name(t));
  DeviceRun run;
  run.args.push_back(rt::LaunchArg::integer(n));
  run.args.push_back(rt::LaunchArg::real(alpha));
  run.addTensor(x, false);
  run.addTensor(y, false);
  k.launch(run.args);
  synchronize();
  HostTensor out(t, {n});
  run.download(3, out);
  r.relError = relativeError(out.values, ref);
  r.tolerance = toleranceFor(t);
  r.passed = r.relError < r.tolerance;
  // In-place update: time on a copy so the check above saw one application.
  rt::LoadedKernel &loaded = k.loadedFor(run.args);
  r.ms = checkTime([&] { loaded.launch(run.args); });
  return r;
}

CheckResult checkPartialSum(Kernel &k, const Params &p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  int64_t parts = intParam(p, "P"), n = intParam(p, "N");
  DType t = dtypeParam(p, "dtype");
  HostTensor x(t, {parts, n}), y(t, {n});
  randomize(x, rng);
  std::vector<double> ref(n, 0.0);
  for (int64_t s = 0; s < parts; ++s)
    for (int64_t i = 0; i < n; ++i) ref[i] += x.values[s * n + i];
  CheckResult r;
  r.shape = fmt::format("P={} N={} {}", parts, n, name(t));
  DeviceRun run;
  run.args.push_back(rt::LaunchArg::integer(parts));
  run.args.push_back(rt::LaunchArg::integer(n));
  run.addTensor(x, false);
  run.addTensor(y, /*poison=*/true);
  return launchAndCompare(k, run, 3, y, ref, toleranceFor(t), r);
}

CheckResult checkColumnSlice(Kernel &k, const Params &p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  int64_t rows = intParam(p, "rows"), pitch = intParam(p, "pitch"), first = intParam(p, "first"),
          cols = intParam(p, "cols"), block = intParam(p, "block_cols");
  if (cols % block || first + cols > pitch)
    throw Error(fmt::format("column_slice: cols={} must be whole blocks of {} within pitch={} "
                            "from first={}",
                            cols, block, pitch, first));
  DType t = dtypeParam(p, "dtype");
  HostTensor src(t, {rows, pitch}), dst(t, {rows, cols});
  randomize(src, rng);
  std::vector<double> ref(rows * cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) ref[i * cols + j] = src.values[i * pitch + first + j];
  CheckResult r;
  r.shape = fmt::format("rows={} pitch={} first={} cols={} {}", rows, pitch, first, cols, name(t));
  DeviceRun run;
  for (int64_t v : {rows, pitch, first, cols}) run.args.push_back(rt::LaunchArg::integer(v));
  run.addTensor(src, false);
  run.addTensor(dst, true);
  k.launch(run.args);
  synchronize();
  run.download(5, dst);
  // A copy: every element exactly.
  r.relError = relativeError(dst.values, ref);
  r.tolerance = 0;
  r.passed = std::equal(dst.values.begin(), dst.values.end(), ref.begin(),
                        [](float got, double want) { return double(got) == want; });
  rt::LoadedKernel &loaded = k.loadedFor(run.args);
  r.ms = checkTime([&] { loaded.launch(run.args); });
  return r;
}

CheckResult checkSoftmax(Kernel &k, const Params &p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  int64_t m = intParam(p, "M"), cols = intParam(p, "cols");
  DType t = dtypeParam(p, "dtype");
  HostTensor x(t, {m, cols}), y(t, {m, cols});
  randomize(x, rng, -4, 4);
  std::vector<double> ref(m * cols);
  for (int64_t i = 0; i < m; ++i) {
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, double(x.values[i * cols + j]));
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(double(x.values[i * cols + j]) - mx);
    for (int64_t j = 0; j < cols; ++j) ref[i * cols + j] = std::exp(double(x.values[i * cols + j]) - mx) / sum;
  }
  CheckResult r;
  r.shape = fmt::format("M={} cols={} {}", m, cols, name(t));
  DeviceRun run;
  run.args.push_back(rt::LaunchArg::integer(m));
  run.addTensor(x, false);
  run.addTensor(y, true);
  return launchAndCompare(k, run, 2, y, ref, toleranceFor(t), r);
}

/// x for a quantize check: uniform values in [-1, 1] times a magnitude
/// that changes from group to group (a row, or a 128-element block, one
/// class after another), so that one run meets every path: ordinary, huge
/// and tiny groups, groups below the amax floor (their scale is the floor's),
/// all-zero groups, and groups of small values beside one outlier.
void quantizeInput(HostTensor &x, int64_t m, int64_t cols, int64_t width, std::mt19937_64 &rng) {
  // f16 holds 2^-24 to 65504: its huge and tiny groups are smaller.
  bool half = x.type == DType::f16;
  const float magnitudes[] = {1.0f, half ? 0x1p14f : 0x1p100f, half ? 0x1p-10f : 0x1p-100f,
                              half ? 0x1p-14f : 0x1p-124f, 0.0f, 0x1p-8f};
  std::uniform_real_distribution<float> dist(-1, 1);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      int64_t kind = (i + j / width) % 6;
      float v = dist(rng) * magnitudes[kind];
      if (kind == 5 && j % width == (i * 37) % std::min<int64_t>(width, cols))
        v = i % 2 ? 1.0f : -1.0f; // the outlier
      x.set(i * cols + j, v);
    }
}

/// The scales a quantize check downloaded, as [M, groups] values:
/// K-block-major and blocked MX layouts read back into row order.
std::vector<float> scalesByRow(const HostTensor &scale, int64_t m, int64_t groups, bool kMajor,
                               bool blocked) {
  std::vector<float> rows(m * groups);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t g = 0; g < groups; ++g) {
      int64_t at = kMajor    ? g * m + i
                   : blocked ? (((i / 128) * ((groups + 3) / 4) + g / 4) * 32 + i % 32) * 16 +
                                   (i % 128) / 32 * 4 + g % 4
                             : i * groups + g;
      rows[i * groups + g] = scale.values[at];
    }
  return rows;
}

/// FP8 quantisation: q bit for bit and the scales exactly against the
/// host's same f32 arithmetic (kernels::QuantizeConfig; every step is an
/// exact max or a correctly rounded IEEE division or product on both
/// sides, so nothing may differ by even an ulp), then q * scale against
/// x: the largest relative error of any group, so that a tiny group
/// counts as much as a huge one. MX scales are ue8m0 codes, compared
/// through their exact values.
CheckResult checkQuantize(Kernel &k, const Params &p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  int64_t m = intParam(p, "M"), cols = intParam(p, "cols");
  DType t = dtypeParam(p, "dtype"), out = dtypeParam(p, "out");
  const std::string granularity = p.at("granularity");
  bool mx = granularity == "mx", grouped = granularity != "row";
  bool kMajor = p.count("k_major_scales") && flagParam(p, "k_major_scales");
  bool blocked = p.count("blocked_scales") && flagParam(p, "blocked_scales");
  int64_t width = mx ? kMxBlock : grouped ? kQuantizeBlock : cols, groups = cols / width;
  if (grouped && cols % width)
    throw Error(fmt::format("quantize: cols={} is not a multiple of {}", cols, width));
  // At a grouped granularity the kernel declares x and q [M, cols / width,
  // width].
  std::vector<int64_t> shape = grouped ? std::vector<int64_t>{m, groups, width}
                                       : std::vector<int64_t>{m, cols};
  HostTensor x(t, shape), q(out, shape);
  HostTensor scale(mx ? DType::ue8m0 : DType::f32,
                   !grouped  ? std::vector<int64_t>{m}
                   : blocked ? std::vector<int64_t>{(m + 127) / 128, (groups + 3) / 4, 32, 16}
                   : kMajor  ? std::vector<int64_t>{groups, m}
                             : std::vector<int64_t>{m, groups});
  quantizeInput(x, m, cols, width, rng);
  const float fmax = float(fp8Max(out)), floor = std::ldexp(fmax, -126);
  auto encode = out == DType::f8e4m3 ? rt::toE4M3 : rt::toE5M2;
  auto decode = out == DType::f8e4m3 ? rt::fromE4M3 : rt::fromE5M2;
  std::vector<float> wantScale(m * groups);
  std::vector<uint8_t> wantCode(m * cols);
  for (int64_t g = 0; g < m * groups; ++g) {
    const float *xs = &x.values[g * width];
    float amax = 0;
    for (int64_t e = 0; e < width; ++e) amax = std::fmax(amax, std::fabs(xs[e]));
    float inverse;
    if (mx) {
      wantScale[g] = rt::fromUE8M0(rt::toUE8M0(amax / fmax));
      inverse = 1.0f / wantScale[g];
    } else {
      float a = std::max(amax, floor);
      inverse = fmax / a;
      wantScale[g] = a / fmax;
    }
    for (int64_t e = 0; e < width; ++e) wantCode[g * width + e] = encode(xs[e] * inverse);
  }
  DeviceRun run;
  run.args.push_back(rt::LaunchArg::integer(m));
  run.addTensor(x, false);
  run.addTensor(q, true); // 0xff: a NaN code in both formats (and in ue8m0)
  run.addTensor(scale, true);
  k.launch(run.args);
  synchronize();
  run.download(2, q);
  run.download(3, scale);
  // Back to [M, groups], as the checks below read it.
  scale.values = scalesByRow(scale, m, groups, kMajor, blocked);
  int64_t badCodes = 0, badScales = 0;
  for (int64_t i = 0; i < m * cols; ++i)
    if (uint8_t(q.bytes[i]) != wantCode[i] && ++badCodes <= 5)
      fmt::print(stderr, "quantize: q[{}, {}] = 0x{:02x}, the host's is 0x{:02x}\n", i / cols,
                 i % cols, uint8_t(q.bytes[i]), wantCode[i]);
  for (int64_t g = 0; g < m * groups; ++g)
    if (!(scale.values[g] == wantScale[g]) && ++badScales <= 5) // positive: equal is same bits
      fmt::print(stderr, "quantize: scale {} of row {} = {:a}, the host's is {:a}\n", g % groups,
                 g / groups, scale.values[g], wantScale[g]);
  // Dequantised against x, group by group.
  CheckResult r;
  for (int64_t g = 0; g < m * groups; ++g) {
    std::vector<float> back(width);
    std::vector<double> ref(width);
    for (int64_t e = 0; e < width; ++e) {
      back[e] = float(double(decode(uint8_t(q.bytes[g * width + e]))) * scale.values[g]);
      ref[e] = x.values[g * width + e];
    }
    bool zero = std::all_of(ref.begin(), ref.end(), [](double v) { return v == 0; });
    bool exact = std::equal(back.begin(), back.end(), ref.begin(),
                            [](float b, double v) { return double(b) == v; });
    r.relError = std::max(r.relError, zero ? (exact ? 0 : INFINITY) : relativeError(back, ref));
  }
  r.shape = fmt::format("M={} cols={} {}->{} per {}: {} of {} codes and {} of {} scales differ "
                        "from the host's",
                        m, cols, name(t), name(out),
                        mx ? "32-block (MX)" : grouped ? "128-block" : "row", badCodes,
                        m * cols, badScales, m * groups);
  r.tolerance = toleranceFor(out);
  r.passed = badCodes == 0 && badScales == 0 && r.relError < r.tolerance;
  rt::LoadedKernel &loaded = k.loadedFor(run.args);
  r.ms = checkTime([&] { loaded.launch(run.args); });
  return r;
}

/// tessel::gemm's own choice for the run's problem (kernels::
/// chooseGemmConfig), on this GPU's SMs (an H100's 132 without one).
Params gemmLibraryChoice(const std::string &arch, const Params &problem) {
  GemmConfig c = gemmSettings().read(problem);
  int sms = rt::Driver::available() ? rt::Driver::get().multiprocessors(0) : 132;
  GemmConfig chosen = chooseGemmConfig(arch, c, intParam(problem, "M"), intParam(problem, "N"), sms);
  return gemmSettings().write(chosen);
}

/// A gemm run's extents, types and random operands (C = A B, either
/// operand transposed, scaled per tensor or per row and column), and how
/// its launches take them.
struct GemmProblem {
  int64_t m, n, kk;
  bool ta, tb;
  DType in, outType;
  HostTensor a, b, c;
  std::string scale;
  std::optional<HostTensor> scaleA, scaleB;

  GemmProblem(const Params &p, std::mt19937_64 &rng)
      : m(intParam(p, "M")), n(intParam(p, "N")), kk(intParam(p, "K")),
        ta(flagParam(p, "transpose_a")), tb(flagParam(p, "transpose_b")), in(dtypeParam(p, "in")),
        outType(dtypeParam(p, "out")),
        a(in, ta ? std::vector<int64_t>{kk, m} : std::vector<int64_t>{m, kk}),
        b(in, tb ? std::vector<int64_t>{n, kk} : std::vector<int64_t>{kk, n}), c(outType, {m, n}),
        scale(p.count("scale") ? p.at("scale") : "none") {
    randomize(a, rng);
    randomize(b, rng);
    if (scale == "none") return;
    if (scale == "mx") {
      // ue8m0 per row (column) and 32 of K, in cuBLAS's blocked layout.
      std::vector<int64_t> tilesK = {(kk + 127) / 128, 32, 16};
      scaleA.emplace(DType::ue8m0, std::vector<int64_t>{(m + 127) / 128, tilesK[0], 32, 16});
      scaleB.emplace(DType::ue8m0, std::vector<int64_t>{(n + 127) / 128, tilesK[0], 32, 16});
      randomize(*scaleA, rng, 0.25, 4);
      randomize(*scaleB, rng, 0.25, 4);
      return;
    }
    if (scale == "block") {
      // A per 1 x 128 block, K-block-major; B per 128 x 128 block.
      scaleA.emplace(DType::f32, std::vector<int64_t>{(kk + 127) / 128, m});
      scaleB.emplace(DType::f32, std::vector<int64_t>{(n + 127) / 128, (kk + 127) / 128});
    } else {
      scaleA.emplace(DType::f32, std::vector<int64_t>{scale == "row" ? m : 1});
      scaleB.emplace(DType::f32, std::vector<int64_t>{scale == "row" ? n : 1});
    }
    randomize(*scaleA, rng, 0.5, 2);
    randomize(*scaleB, rng, 0.5, 2);
  }
  /// The factor element (i, j) of the product over K index l is scaled
  /// by.
  double scaleOf(int64_t i, int64_t j, int64_t l) const {
    if (!scaleA) return 1;
    if (scale == "mx") {
      // Row r's scale of K block j (of 32): atom [r / 128, j / 4], byte
      // 16 (r % 32) + 4 (r % 128 / 32) + j % 4.
      int64_t groups = (kk + 127) / 128, block = l / 32;
      auto at = [&](int64_t r) {
        return ((r / 128) * groups + block / 4) * 512 + (r % 32) * 16 + (r % 128 / 32) * 4 + block % 4;
      };
      return double(scaleA->values[at(i)]) * scaleB->values[at(j)];
    }
    if (scale == "block") {
      int64_t kBlocks = (kk + 127) / 128;
      return double(scaleA->values[(l / 128) * m + i]) * scaleB->values[(j / 128) * kBlocks + l / 128];
    }
    bool rows = scale == "row";
    return double(scaleA->values[rows ? i : 0]) * scaleB->values[rows ? j : 0];
  }
  /// M, N, K, then A, B and C: poisoned, or zero for a split-K gemm that
  /// adds into it.
  void addArgs(DeviceRun &run, bool accumulates = false) {
    for (int64_t extent : {m, n, kk}) run.args.push_back(rt::LaunchArg::integer(extent));
    run.addTensor(a, false);
    run.addTensor(b, false);
    run.addTensor(c, !accumulates);
    if (scaleA) {
      run.addTensor(*scaleA, false);
      run.addTensor(*scaleB, false);
    }
  }
  std::string shape(const char *format) const {
    return fmt::format(fmt::runtime(format), m, n, kk, ta ? "At" : "A", tb ? "Bt" : "B", name(in),
                       name(outType));
  }
};

/// A benchmark's device inputs, kept for the next benchmark of the same
/// problem: `tessel tune` times tens of configurations on one shape, and
/// drawing 8192^2 random elements for each took most of its time.
struct GemmInputs {
  std::string problem;
  std::unique_ptr<GemmProblem> g;
  std::vector<DeviceRun> runs;
  std::vector<std::vector<rt::LaunchArg>> argSets;
  int64_t bytes = 0;
};

BenchResult benchGemm(Kernel &k, const Params &p, int reps) {
  static std::mutex mutex;
  // The last problem only, to bound device memory; never destroyed, so
  // that no device memory is freed after the driver has gone at exit.
  static GemmInputs &kept = *new GemmInputs;
  std::lock_guard<std::mutex> lock(mutex);
  std::string problem;
  for (const char *key : {"M", "N", "K", "in", "out", "transpose_a", "transpose_b", "scale"})
    problem += std::string(key) + "=" + (p.count(key) ? p.at(key) : "") + ",";
  if (kept.problem != problem) {
    kept = GemmInputs{};
    std::mt19937_64 rng(1);
    kept.g = std::make_unique<GemmProblem>(p, rng);
    GemmProblem &g = *kept.g;
    // Enough copies of the inputs to exceed a 60 MB L2 twice over, so that
    // no launch finds its operands left in L2 by the one before.
    kept.bytes = g.a.bytes.size() + g.b.bytes.size() + g.c.bytes.size();
    int copies = static_cast<int>(std::clamp<int64_t>(120 * 1024 * 1024 / kept.bytes + 1, 1, 8));
    kept.runs.resize(copies);
    for (DeviceRun &run : kept.runs) {
      g.addArgs(run);
      kept.argSets.push_back(run.args);
    }
    kept.problem = problem;
  }
  GemmProblem &g = *kept.g;
  BenchResult r;
  rt::LoadedKernel &loaded = k.loadedFor(kept.argSets[0]);
  if (intParam(p, "split_k") > 1) {
    // Split-K adds into C: each launch clears it first, and the clear is
    // part of the time.
    size_t cBytes = g.c.bytes.size();
    r.ms = rt::timeMedian(
        [&](int run) {
          const std::vector<rt::LaunchArg> &args = kept.argSets[run % kept.argSets.size()];
          rt::clearAsync(args[5].ptr, cBytes);
          loaded.launch(args);
        },
        10, reps);
  } else {
    r.ms = loaded.time(kept.argSets, 10, reps);
  }
  r.tflops = 2.0 * g.m * g.n * g.kk / r.ms / 1e9;
  r.gbps = kept.bytes / r.ms / 1e6;
  r.shape = g.shape("{}x{}x{} {}{} {}->{}") +
            fmt::format(", inputs rotated over {} copies", kept.runs.size());
  return r;
}

CheckResult checkRowLse(Kernel &k, const Params &p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  int64_t m = intParam(p, "M"), n = intParam(p, "N"), d = intParam(p, "head_dim");
  DType t = dtypeParam(p, "dtype");
  float scale = 1.0f / std::sqrt(float(d));
  HostTensor q(t, {m, d}), kt(t, {n, d}), lse(DType::f32, {m});
  randomize(q, rng, -2, 2);
  randomize(kt, rng, -2, 2);
  std::vector<double> ref(m);
  for (int64_t i = 0; i < m; ++i) {
    std::vector<double> s(n);
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t l = 0; l < d; ++l) dot += double(q.values[i * d + l]) * kt.values[j * d + l];
      s[j] = dot * scale;
      mx = std::max(mx, s[j]);
    }
    for (int64_t j = 0; j < n; ++j) sum += std::exp(s[j] - mx);
    ref[i] = mx + std::log(sum);
  }
  CheckResult r;
  r.shape = fmt::format("M={} N={} d={} {}", m, n, d, name(t));
  DeviceRun run;
  run.args.push_back(rt::LaunchArg::integer(m));
  run.args.push_back(rt::LaunchArg::integer(n));
  run.args.push_back(rt::LaunchArg::real(scale));
  run.addTensor(q, false);
  run.addTensor(kt, false);
  run.addTensor(lse, true);
  return launchAndCompare(k, run, 5, lse, ref, 1e-5, r);
}

CheckResult checkGemm(Kernel &k, const Params &p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  GemmProblem g(p, rng);
  auto &[m, n, kk, ta, tb, in, outType, a, b, c, scale, scaleA, scaleB] = g;
  // Block scales vary along K: each 128-wide K block's product is scaled
  // on its own.
  const int64_t kBlock = scale == "block" ? 128 : scale == "mx" ? 32 : kk;
  std::vector<double> ref(m * n, 0.0), part(n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t l0 = 0; l0 < kk; l0 += kBlock) {
      std::fill(part.begin(), part.end(), 0.0);
      for (int64_t l = l0; l < std::min(kk, l0 + kBlock); ++l) {
        double av = a.values[ta ? l * m + i : i * kk + l];
        for (int64_t j = 0; j < n; ++j) part[j] += av * b.values[tb ? j * kk + l : l * n + j];
      }
      for (int64_t j = 0; j < n; ++j) ref[i * n + j] += part[j] * g.scaleOf(i, j, l0);
    }
  CheckResult r;
  r.shape = g.shape("M={} N={} K={} {}{} {}->{}");
  DeviceRun run;
  g.addArgs(run, intParam(p, "split_k") > 1);
  // Inputs are rounded on the host, so the reference sees the same operands;
  // the remaining error is the accumulation (and rounding of a 16-bit C).
  // i8 products are exact in i32. wgmma's FP8 products accumulate with
  // fewer bits than f32 (about 2^-13 relative, measured by DeepSeek-V3's
  // authors), hence FP8's f32 bound.
  bool fp8 = in == DType::f8e4m3 || in == DType::f8e5m2;
  double tolerance = outType == DType::i32 ? 1e-12 : outType != DType::f32 ? 1e-2 : fp8 ? 1e-3 : 1e-5;
  return launchAndCompare(k, run, 5, c, ref, tolerance, r);
}
} // namespace

/// What `tessel tune gemm` times on each target: tile shapes that fit its
/// registers and shared memory, pipelines of several depths, with and
/// without rasterized blocks.
static std::vector<Params> gemmCandidates(const std::string &arch, const Params &problem) {
  std::vector<Params> out;
  // K tiles are chosen in 16-bit elements; 8-bit inputs take twice as many
  // a stage, the same bytes (a 128-byte swizzle row at block_k = 64).
  int kScale = problem.count("in") && byteSize(dtypeParam(problem, "in")) == 1 ? 2 : 1;
  auto add = [&](int bm, int bn, int bk, int threads, int stages, int swizzle) {
    out.push_back({{"block_m", std::to_string(bm)}, {"block_n", std::to_string(bn)},
                   {"block_k", std::to_string(bk * kScale)}, {"threads", std::to_string(threads)},
                   {"stages", std::to_string(stages)}, {"swizzle", std::to_string(swizzle)}});
  };
  if (arch.rfind("sm_100a", 0) == 0) {
    for (int bn : {128, 256})
      for (int stages : {2, 3, 4})
        for (int swizzle : {0, 8}) {
          add(128, bn, 64, 128, stages, swizzle);
          out.back()["instruction"] = "tcgen05";
        }
    return out;
  }
  if (arch == "sm_90a") {
    // Warpgroup tiles: two consumer warpgroups for 128-row tiles.
    for (auto [bm, bn, threads] : {std::tuple{128, 256, 256}, {128, 128, 256}, {128, 128, 128},
                                   {64, 256, 128}, {64, 128, 128}, {256, 128, 256}})
      for (int stages : {3, 4})
        for (int swizzle : {0, 8}) add(bm, bn, 64, threads, stages, swizzle);
    for (int stages : {5, 6})
      for (int swizzle : {0, 8}) add(128, 256, 32, 256, stages, swizzle);
    // Two wgmma groups in flight: measured within 2% of the plain loop on an
    // H100 with two consumer warpgroups; a shape may still prefer it.
    for (auto [bm, bn, threads] : {std::tuple{128, 256, 256}, {64, 256, 128}, {128, 128, 128}}) {
      add(bm, bn, 64, threads, 4, 8);
      out.back()["overlap_mma"] = "1";
    }
    // Clusters of two blocks sharing each B tile by TMA multicast: from
    // 0.95x to 1.05x of the plain grid on an H200, by shape.
    for (int swizzle : {0, 8}) {
      add(128, 256, 64, 256, 4, swizzle);
      out.back()["cluster_m"] = "2";
    }
    // The epilogue through shared memory and a TMA store (3 stages leave
    // room for the 64 KB tile), in a grid or persistent: 5-10% ahead of the
    // register epilogue at 4096-8192 on an H100.
    for (const char *persistent : {"0", "1"})
      for (const char *policy : {"square", "full_row"}) {
        add(128, 256, 64, 256, 3, 8);
        out.back()["tma_store"] = "1";
        out.back()["persistent"] = persistent;
        out.back()["policy"] = policy;
      }
    add(128, 128, 64, 256, 4, 8);
    out.back()["tma_store"] = "1";
    out.back()["persistent"] = "1";
    // Skinny M (decode): narrow tiles put more blocks on the SMs, deep
    // pipelines keep B streaming.
    // Split-K for the skinny, K-heavy ones (M 16-128, N 4096, K 14336: 64
    // tiles of C, K slices to fill the rest of the SMs), adding by TMA
    // reduce-add: per-element 16-bit atomics made M = 16 1.3x slower than
    // no split on an H100, the reduce-add 1.15x faster.
    for (int splits : {2, 4}) {
      add(64, 64, 64, 128, 6, 0);
      out.back()["split_k"] = std::to_string(splits);
      out.back()["tma_store"] = "1";
      add(64, 128, 64, 128, 4, 0);
      out.back()["split_k"] = std::to_string(splits);
      out.back()["tma_store"] = "1";
    }
    add(64, 16, 64, 128, 8, 0);
    add(64, 32, 64, 128, 8, 0);
    add(64, 32, 128, 128, 6, 0);
    add(64, 64, 64, 128, 6, 0);
    // Two or more tile rows (M 128): the blocks that share a B tile launch
    // side by side (rasterized) so that B leaves HBM once, not once per
    // row (at M 128, N 4096, K 14336 the 64-row tiles ran at the time of
    // reading B twice); or one 128-row tile split along K.
    add(64, 64, 64, 128, 6, 8);
    add(64, 32, 64, 128, 8, 8);
    add(128, 64, 64, 256, 4, 0);
    out.back()["split_k"] = "2";
    out.back()["tma_store"] = "1";
    // Wider tiles split further: the same 128 blocks, but each A row block
    // is read by 32 or 16 column tiles instead of 64, halving or quartering
    // the L2 traffic of A, which at M 128 and K 14336 is twice that of B.
    add(128, 128, 64, 256, 4, 0);
    out.back()["split_k"] = "4";
    out.back()["tma_store"] = "1";
    add(128, 256, 64, 256, 3, 0);
    out.back()["split_k"] = "8";
    out.back()["tma_store"] = "1";
    return out;
  }
  for (int bm : {64, 128})
    for (int bn : {64, 128})
      for (int stages : {2, 3, 4})
        for (int threads : {128, 256}) add(bm, bn, 32, threads, stages, 0);
  return out;
}

const std::vector<LibraryKernel> &tessel::harness::library() {
  static const std::vector<LibraryKernel> all = {
      {"scaled_add", "y = alpha * x + y (vectors, length N at run time)",
       defaultsFrom(scaledAddSettings(), {{"N", "1000003"}}), builtFrom(scaledAddSettings(), scaledAdd),
       checkScaledAdd},
      {"partial_sum", "y = the sum over p of x [P, N] in f32, rounded once (P, N at run time)",
       defaultsFrom(partialSumSettings(), {{"P", "4"}, {"N", "1000003"}}),
       builtFrom(partialSumSettings(), partialSum), checkPartialSum},
      {"column_slice", "dst = src[:, first : first + cols], [rows, pitch] rows in (all at run time)",
       defaultsFrom(columnSliceSettings(),
                    {{"rows", "1001"}, {"pitch", "4096"}, {"first", "512"}, {"cols", "1024"}}),
       builtFrom(columnSliceSettings(), columnSlice), checkColumnSlice},
      {"tma_scale",
       "y (+)= alpha * x, [M, cols] rows in and out through TMA, with a hand-written producer role (sm_90a)",
       defaultsFrom(tmaScaleSettings(), {{"M", "1001"}}), builtFrom(tmaScaleSettings(), tmaScale),
       checkTmaScale},
      {"row_softmax", "row-wise softmax of an [M, cols] matrix (M at run time)",
       defaultsFrom(rowSoftmaxSettings(), {{"M", "1001"}}), builtFrom(rowSoftmaxSettings(), rowSoftmax),
       checkSoftmax},
      {"quantize",
       "FP8 quantisation of an [M, cols] matrix (M at run time): q and f32 scales per row or per "
       "128-element block, x ~= q * scale",
       defaultsFrom(quantizeSettings(), {{"M", "1001"}}), builtFrom(quantizeSettings(), quantize),
       checkQuantize},
      {"gemm", "C = op(A) x op(B) (M, N, K at run time): f16/bf16 or FP8 inputs (scale=tensor|row) into f32, i8 into i32",
       defaultsFrom(gemmSettings(), {{"M", "300"}, {"N", "200"}, {"K", "136"}}),
       builtFrom(gemmSettings(), kernels::gemm), checkGemm, benchGemm,
       // sm_100a: tcgen05.mma into tensor memory, 128 x 256 tiles (M 128
       // is every TMEM lane; N 256 the widest single instruction), unless
       // another instruction is asked for.
       [](const std::string &arch, const Params &overrides) {
         auto asked = overrides.find("instruction");
         if (arch.rfind("sm_100a", 0) != 0 ||
             (asked != overrides.end() && asked->second != "tcgen05"))
           return Params{};
         return Params{{"instruction", "tcgen05"}, {"block_m", "128"}, {"block_n", "256"},
                       {"block_k", "64"}, {"stages", "3"}};
       },
       {{"in", "out", "transpose_a", "transpose_b"}, {"M", "N", "K"}, gemmCandidates},
       gemmLibraryChoice},
      {"row_lse", "lse[i] = log sum_j exp(scale * (Q K^T)[i, j]): online softmax over gemm tiles",
       defaultsFrom(rowLogSumExpSettings(), {{"M", "300"}, {"N", "1000"}}),
       builtFrom(rowLogSumExpSettings(), rowLogSumExp), checkRowLse},
  };
  static const std::vector<LibraryKernel> withAttention = [] {
    std::vector<LibraryKernel> kernels = all;
    for (LibraryKernel &k : attentionKernels()) kernels.push_back(std::move(k));
    for (LibraryKernel &k : decodeKernels()) kernels.push_back(std::move(k));
    for (LibraryKernel &k : weightGemmKernels()) kernels.push_back(std::move(k));
    return kernels;
  }();
  return withAttention;
}

const LibraryKernel &tessel::harness::findKernel(const std::string &name) {
  std::string known;
  for (const LibraryKernel &k : library()) {
    if (k.name == name) return k;
    known += (known.empty() ? "" : ", ") + k.name;
  }
  throw Error(fmt::format("unknown kernel '{}'; the library has: {}", name, known));
}

Params tessel::harness::withDefaults(const LibraryKernel &k, const Params &overrides,
                                    const std::string &arch) {
  Params p = k.defaults;
  if (k.targetDefaults && !arch.empty())
    for (auto &[key, value] : k.targetDefaults(arch, overrides)) p[key] = value;
  for (auto &[key, value] : overrides) {
    if (!p.count(key)) {
      std::string known;
      for (auto &[dk, dv] : k.defaults) known += (known.empty() ? "" : ", ") + dk;
      throw Error(fmt::format("kernel {} has no parameter '{}'; it takes: {}", k.name, key, known));
    }
    p[key] = value;
  }
  return p;
}
