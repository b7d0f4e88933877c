//===- WeightGemmLibrary.cpp - weight-only quantised GEMMs, with checks ---===//
//
// weight_gemm and weight_dequantize over random codes, scales and zero
// points. The host dequantises exactly as the kernels must
// (WeightGemmConfig: (c - z) * s in f32, rounded to the activations'
// type), so weight_dequantize is compared bit for bit and weight_gemm
// against a float64 product of those values. Benchmarks count the weight
// bytes (codes, scales and zeros), which bound a small-M product's time.
//
//===----------------------------------------------------------------------===//
#include "tessel/harness/LibrarySupport.h"
#include "tessel/kernels/Kernels.h"

#include <algorithm>
#include <fmt/format.h>
#include <mutex>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::harness;

std::vector<float> tessel::harness::dequantizeWeights(WeightFormat format, DType activations,
                                                     const HostTensor &codes,
                                                     const HostTensor &scales,
                                                     const HostTensor *zeros) {
  const bool int4 = format == WeightFormat::int4;
  const int64_t n = codes.shape[0], k = int4 ? 2 * codes.shape[1] : codes.shape[1];
  const int64_t group = k / scales.shape[0];
  std::vector<float> dense(n * k);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      int64_t g = (c / group) * n + r;
      float z = zeros ? zeros->values[g] : int4 ? 8.0f : 0.0f;
      float code;
      if (int4) {
        uint8_t byte = uint8_t(codes.bytes[r * (k / 2) + c / 2]);
        code = float(c % 2 ? byte >> 4 : byte & 15);
      } else {
        code = float(int8_t(codes.bytes[r * k + c]));
      }
      dense[r * k + c] = testing::roundTo(activations, (code - z) * scales.values[g]);
    }
  return dense;
}

namespace {
/// Random weights of one format and their dequantised values.
struct QuantizedWeights {
  int64_t n, k, group;
  WeightFormat format;
  DType activations;
  HostTensor codes, scales;
  std::optional<HostTensor> zeros;
  /// [N, K], the activations' type's values.
  std::vector<float> dense;

  QuantizedWeights(const Params &p, std::mt19937_64 &rng)
      : n(intParam(p, "N")), k(intParam(p, "K")), group(intParam(p, "group")),
        format(parseChoice("weights", p.at("weights"), weightFormatChoices())),
        activations(dtypeParam(p, "in")),
        codes(format == WeightFormat::int4 ? DType::u8 : DType::i8,
              {n, format == WeightFormat::int4 ? k / 2 : k}),
        scales(activations, {k / std::max<int64_t>(group, 1), n}) {
    if (k % group || (format == WeightFormat::int4 && k % 2))
      throw Error(fmt::format("weight gemm: K={} is not a multiple of group={}", k, group));
    randomize(codes, rng); // every byte value
    // Scales of a few hundredths, as a 4-bit code's range times a typical
    // weight's; zero points anywhere in the codes' range, not only whole.
    randomize(scales, rng, 0.002f, 0.03f);
    bool int4 = format == WeightFormat::int4;
    if (flagParam(p, "zeros")) {
      zeros.emplace(activations, std::vector<int64_t>{k / group, n});
      randomize(*zeros, rng, int4 ? 0.0f : -16.0f, int4 ? 15.0f : 16.0f);
    }
    dense = dequantizeWeights(format, activations, codes, scales, zeros ? &*zeros : nullptr);
  }
  void addArgs(DeviceRun &run) const {
    run.addTensor(codes, false);
    run.addTensor(scales, false);
    if (zeros) run.addTensor(*zeros, false);
  }
  int64_t bytes() const {
    return int64_t(codes.bytes.size() + scales.bytes.size() + (zeros ? zeros->bytes.size() : 0));
  }
};

/// y = x w^T against float64 over the dequantised weights. Split-K adds
/// into y, which starts at zero.
CheckResult checkWeightGemm(Kernel &kernel, const Params &p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  QuantizedWeights w(p, rng);
  int64_t m = intParam(p, "M"), n = w.n, k = w.k;
  DType out = dtypeParam(p, "out");
  HostTensor x(w.activations, {m, k}), y(out, {m, n});
  randomize(x, rng);
  std::vector<double> ref(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t l = 0; l < k; ++l) sum += double(x.values[i * k + l]) * w.dense[j * k + l];
      ref[i * n + j] = sum;
    }
  DeviceRun run;
  for (int64_t extent : {m, n, k}) run.args.push_back(rt::LaunchArg::integer(extent));
  run.addTensor(x, false);
  w.addArgs(run);
  bool splits = intParam(p, "split_k") > 1;
  run.addTensor(y, /*poison=*/!splits);
  CheckResult r;
  r.shape = fmt::format("M={} N={} K={} {} weights, group {}{}, {} -> {}", m, n, k, p.at("weights"),
                        w.group, w.zeros ? " with zeros" : "", name(w.activations), name(out));
  // The weights are exact on both sides: what is left is f32 accumulation
  // (and the rounding of a 16-bit y).
  return launchAndCompare(kernel, run, run.args.size() - 1, y, ref,
                          out == DType::f32 ? 1e-5 : toleranceFor(out), r);
}

/// weight_dequantize bit for bit against the host's values.
CheckResult checkWeightDequantize(Kernel &kernel, const Params &p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  QuantizedWeights w(p, rng);
  HostTensor dense(w.activations, {w.n, w.k});
  DeviceRun run;
  for (int64_t extent : {w.n, w.k}) run.args.push_back(rt::LaunchArg::integer(extent));
  w.addArgs(run);
  run.addTensor(dense, true);
  kernel.launch(run.args);
  synchronize();
  run.download(run.args.size() - 1, dense);
  int64_t wrong = 0;
  for (int64_t i = 0; i < w.n * w.k; ++i)
    if (!(dense.values[i] == w.dense[i]) && ++wrong <= 5)
      fmt::print(stderr, "weight_dequantize: [{}, {}] = {}, the host's is {}\n", i / w.k, i % w.k,
                 dense.values[i], w.dense[i]);
  CheckResult r;
  r.shape = fmt::format("N={} K={} {} weights, group {}{}: {} of {} differ", w.n, w.k,
                        p.at("weights"), w.group, w.zeros ? " with zeros" : "", wrong, w.n * w.k);
  r.relError = wrong ? 1.0 : 0.0;
  r.tolerance = 0;
  r.passed = wrong == 0;
  rt::LoadedKernel &loaded = kernel.loadedFor(run.args);
  r.ms = checkTime([&] { loaded.launch(run.args); });
  return r;
}

/// Times weight_gemm over copies of the weights that together exceed L2
/// twice, so that every launch reads its weights from memory, as a model's
/// layers do. gbps counts the weight bytes alone.
/// Times weight_dequantize over rotated weights; gbps counts the weight
/// bytes read and the dense matrix written.
BenchResult benchWeightDequantize(Kernel &kernel, const Params &p, int reps) {
  std::mt19937_64 rng(1);
  QuantizedWeights w(p, rng);
  HostTensor dense(w.activations, {w.n, w.k});
  int64_t bytes = w.bytes() + int64_t(dense.bytes.size());
  int copies = int(std::clamp<int64_t>(240ll * 1024 * 1024 / bytes + 1, 1, 64));
  std::vector<DeviceRun> runs(copies);
  std::vector<std::vector<rt::LaunchArg>> argSets;
  for (DeviceRun &run : runs) {
    for (int64_t extent : {w.n, w.k}) run.args.push_back(rt::LaunchArg::integer(extent));
    w.addArgs(run);
    run.addTensor(dense, false);
    argSets.push_back(run.args);
  }
  BenchResult r;
  r.ms = kernel.loadedFor(argSets[0]).time(argSets, 10, reps);
  r.gbps = bytes / r.ms / 1e6;
  r.shape = fmt::format("{}x{} {} weights, group {} -> {}, over {} copies", w.n, w.k,
                        p.at("weights"), w.group, name(w.activations), copies);
  return r;
}

BenchResult benchWeightGemm(Kernel &kernel, const Params &p, int reps) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::mt19937_64 rng(1);
  QuantizedWeights w(p, rng);
  int64_t m = intParam(p, "M");
  DType out = dtypeParam(p, "out");
  HostTensor x(w.activations, {m, w.k}), y(out, {m, w.n});
  randomize(x, rng);
  int copies = int(std::clamp<int64_t>(240ll * 1024 * 1024 / w.bytes() + 1, 1, 64));
  std::vector<DeviceRun> runs(copies);
  std::vector<std::vector<rt::LaunchArg>> argSets;
  for (DeviceRun &run : runs) {
    for (int64_t extent : {m, w.n, w.k}) run.args.push_back(rt::LaunchArg::integer(extent));
    run.addTensor(x, false);
    w.addArgs(run);
    run.addTensor(y, false);
    argSets.push_back(run.args);
  }
  rt::LoadedKernel &loaded = kernel.loadedFor(argSets[0]);
  BenchResult r;
  if (intParam(p, "split_k") > 1) {
    size_t yBytes = y.bytes.size();
    r.ms = rt::timeMedian(
        [&](int at) {
          const std::vector<rt::LaunchArg> &args = argSets[at % argSets.size()];
          rt::clearAsync(args.back().ptr, yBytes);
          loaded.launch(args);
        },
        10, reps);
  } else {
    r.ms = loaded.time(argSets, 10, reps);
  }
  r.tflops = 2.0 * m * w.n * w.k / r.ms / 1e9;
  r.gbps = w.bytes() / r.ms / 1e6;
  r.shape = fmt::format("{}x{}x{} {} weights, group {}, {} -> {}, weights over {} copies (gbps: "
                        "weight bytes)",
                        m, w.n, w.k, p.at("weights"), w.group, name(w.activations), name(out),
                        copies);
  return r;
}
} // namespace

std::vector<LibraryKernel> tessel::harness::weightGemmKernels() {
  return {
      {"weight_gemm",
       "y = x w^T (M, N, K at run time) with int4 or int8 weights and a scale (and zero point) per "
       "group of K, dequantised in registers",
       defaultsFrom(weightGemmSettings(), {{"M", "16"}, {"N", "320"}, {"K", "1024"}}),
       builtFrom(weightGemmSettings(), weightGemm), checkWeightGemm, benchWeightGemm},
      {"weight_dequantize",
       "dense [N, K] = (codes - zeros) * scales: int4 or int8 weights into f16/bf16",
       defaultsFrom(weightDequantizeSettings(), {{"N", "300"}, {"K", "1024"}}),
       builtFrom(weightDequantizeSettings(), weightDequantize), checkWeightDequantize,
       benchWeightDequantize},
  };
}
