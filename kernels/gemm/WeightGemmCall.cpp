//===- WeightGemmCall.cpp - tessel::weight_gemm on views ------------------===//
//
// Two ways to the product, by the number of tokens. A few tokens (decode,
// small batches) make the product memory-bound on the weights: the fused
// kernel reads each code once and unpacks it in registers, with K split
// over blocks when the output tiles alone would leave SMs idle. Many tokens
// make it compute-bound: the weights are dequantised once into a dense
// matrix (a pass over N x K that the product's M x N x K work hides) and
// the dense GEMM, at the tensor cores' full rate, takes it from there.
//
//===----------------------------------------------------------------------===//
#include "common/LibraryCalls.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Launch.h"

#include <algorithm>
#include <bit>
#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;
using rt::LaunchArg;
using rt::ScalarType;

namespace {
/// Tokens from which the dense path runs: measured on an H100, the fused
/// kernel's unpacking costs more than the dequantisation pass beyond it.
constexpr int64_t kDenseFromTokens = 256;

/// What the views say of the problem, checked.
struct WeightProblem {
  int64_t m, n, k, group;
  WeightFormat format;
};

WeightProblem problemOf(const TensorView &x, const TensorView &w, const TensorView &scales,
                        const TensorView &y, const WeightGemmOptions &o) {
  requireView(x, "x", 2, {ScalarType::BF16, ScalarType::F16});
  requireView(w, "w", 2, {ScalarType::U8, ScalarType::I8});
  requireView(scales, "scales", 2, {x.dtype});
  requireView(y, "y", 2, {ScalarType::BF16, ScalarType::F16, ScalarType::F32});
  WeightProblem p;
  p.m = x.shape[0];
  p.k = x.shape[1];
  p.format = w.dtype == ScalarType::U8 ? WeightFormat::int4 : WeightFormat::int8;
  p.n = w.shape[0];
  int64_t codes = p.format == WeightFormat::int4 ? (p.k + 1) / 2 : p.k;
  if (w.shape[1] != codes || (p.format == WeightFormat::int4 && p.k % 2))
    throw Error(fmt::format("w is {} for x {}: {} weights are [N, {}]{}", w.str(), x.str(),
                            p.format == WeightFormat::int4 ? "int4 (u8, two codes a byte)" : "int8",
                            p.format == WeightFormat::int4 ? "K / 2" : "K",
                            p.format == WeightFormat::int4 && p.k % 2 ? ", and K must be even" : ""));
  if (p.k == 0)
    throw Error(fmt::format("x is {}: weight_gemm needs K > 0 (its weights come in groups of K)",
                            x.str()));
  int64_t groups = scales.shape[0];
  if (groups < 1 || p.k % groups || scales.shape[1] != p.n)
    throw Error(fmt::format("scales is {}: it is [K / group, N] = [K / group, {}] with K = {} a "
                            "whole number of groups",
                            scales.str(), p.n, p.k));
  p.group = p.k / groups;
  if (p.group != 32 && p.group != 64 && p.group != 128)
    throw Error(fmt::format("scales is {} for K = {}: a group of {} of K; weight_gemm takes groups "
                            "of 32, 64 or 128",
                            scales.str(), p.k, p.group));
  if (o.zeros) {
    requireView(*o.zeros, "zeros", 2, {x.dtype});
    requireShape(*o.zeros, "zeros", scales.shape);
  }
  requireShape(y, "y", {p.m, p.n});
  return p;
}

/// The fused kernel's tiles on `arch`: 64 weight rows a block (a warpgroup
/// of wgmma on sm_90a; four warps of mma.sync elsewhere, where the tensor
/// memory instructions take no register operand), tokens in 8 to 64 a
/// block, and, where the tiles leave SMs idle, K split until the blocks
/// fill them twice over (each slice at least four 128-wide steps, to keep
/// its pipeline full).
WeightGemmConfig fusedConfig(const std::string &arch, const WeightProblem &p, int sms) {
  WeightGemmConfig c;
  c.instruction = arch == "sm_90a" ? GemmInstruction::wgmma : GemmInstruction::mma_sync;
  c.blockN = 64;
  c.threads = 128;
  c.blockK = 128;
  c.blockM = std::clamp<int64_t>(int64_t(std::bit_ceil(uint64_t(std::max<int64_t>(p.m, 1)))), 16, 64);
  c.stages = c.blockM <= 32 ? 6 : 4;
  int64_t tiles = ((p.n + c.blockN - 1) / c.blockN) * ((p.m + c.blockM - 1) / c.blockM);
  int64_t steps = (p.k + c.blockK - 1) / c.blockK;
  // A grid that fills the SMs once streams the weights as fast as a split
  // one (and needs no f32 sums): H100, 14336 x 4096 at 1-64 tokens.
  int64_t splits = tiles >= sms ? 1
                                : std::clamp<int64_t>((2 * sms + tiles - 1) / tiles, 1,
                                                      std::max<int64_t>(1, steps / 4));
  c.splitK = int(std::min<int64_t>(splits, 64));
  return c;
}

size_t denseBytes(const WeightProblem &p, ScalarType activations) {
  return size_t(p.n) * size_t(p.k) * size_t(rt::scalarBytes(activations));
}
size_t sumBytes(const WeightProblem &p) { return size_t(p.m) * size_t(p.n) * sizeof(float); }
bool densePath(const WeightProblem &p, const WeightGemmOptions &o) {
  return !o.config && p.m >= kDenseFromTokens;
}
} // namespace

size_t tessel::weightGemmWorkspaceBytes(const TensorView &x, const TensorView &w,
                                        const TensorView &scales, const TensorView &y,
                                        const WeightGemmOptions &o) {
  WeightProblem p = problemOf(x, w, scales, y, o);
  if (densePath(p, o)) return denseBytes(p, x.dtype);
  // Split-K into a 16-bit y sums in f32 first.
  return y.dtype == ScalarType::F32 ? 0 : sumBytes(p);
}

Choice tessel::weight_gemm(const TensorView &x, const TensorView &w, const TensorView &scales,
                           const TensorView &y, const WeightGemmOptions &o, CUstream stream) {
  WeightProblem p = problemOf(x, w, scales, y, o);
  if (p.m == 0 || p.n == 0) {
    Choice none;
    none.config = fmt::format("weight_gemm: nothing to compute (M = {}, N = {})", p.m, p.n);
    return none;
  }
  int device = o.zeros ? commonDevice({&x, &w, &scales, &y, &*o.zeros})
                       : commonDevice({&x, &w, &scales, &y});
  Choice choice;
  choice.arch = targetFor(o.arch, device);
  std::vector<LaunchArg> weights = {LaunchArg::view(w), LaunchArg::view(scales)};
  if (o.zeros) weights.push_back(LaunchArg::view(*o.zeros));

  if (densePath(p, o)) {
    WeightDequantizeConfig d;
    d.format = p.format;
    d.activations = dtypeOf(x.dtype);
    d.group = p.group;
    d.zeros = o.zeros.has_value();
    std::string key = "weight_dequantize " + weightDequantizeSettings().describe(d);
    bool compiled = false;
    std::shared_ptr<Kernel> dequantize =
        cachedKernel(key, choice.arch, [&] { return kernels::weightDequantize(d); }, compiled);
    StreamScratch scratch(o.workspace, o.workspaceBytes, denseBytes(p, x.dtype), stream,
                          "weightGemmWorkspaceBytes()");
    TensorView dense = TensorView::contiguous(scratch.base(), x.dtype, {p.n, p.k}, device);
    std::vector<LaunchArg> args = {LaunchArg::integer(p.n), LaunchArg::integer(p.k)};
    args.insert(args.end(), weights.begin(), weights.end());
    args.push_back(LaunchArg::view(dense));
    dequantize->launch(args, stream);
    Choice product = tessel::gemm(x, dense, y, {.transposeB = true, .arch = o.arch}, stream);
    choice.config = key + "; then " + product.config;
    choice.compiled = compiled || product.compiled;
    return choice;
  }

  WeightGemmConfig config =
      o.config.value_or(fusedConfig(choice.arch, p, rt::Driver::get().multiprocessors(device)));
  config.format = p.format;
  config.activations = dtypeOf(x.dtype);
  config.group = p.group;
  config.zeros = o.zeros.has_value();
  const bool split = config.splitK > 1;
  // Split-K adds into f32: y itself when it is f32, else a scratch of sums
  // rounded into y afterwards.
  config.out = split ? DType::f32 : dtypeOf(y.dtype);
  choice.config = "weight_gemm " + weightGemmSettings().describe(config);
  std::shared_ptr<Kernel> kernel = cachedKernel(
      choice.config, choice.arch, [&] { return kernels::weightGemm(config); }, choice.compiled);
  std::optional<StreamScratch> scratch;
  TensorView sums = y;
  if (split && y.dtype != ScalarType::F32) {
    scratch.emplace(o.workspace, o.workspaceBytes, sumBytes(p), stream, "weightGemmWorkspaceBytes()");
    sums = TensorView::contiguous(scratch->base(), ScalarType::F32, {p.m, p.n}, device);
  }
  if (split) rt::clearAsync(sums.data, sumBytes(p), stream);
  std::vector<LaunchArg> args = {LaunchArg::integer(p.m), LaunchArg::integer(p.n),
                                 LaunchArg::integer(p.k), LaunchArg::view(x)};
  args.insert(args.end(), weights.begin(), weights.end());
  args.push_back(LaunchArg::view(sums));
  kernel->launch(args, stream);
  if (sums.data != y.data) {
    WeightSumsConfig r{dtypeOf(y.dtype)};
    std::string key = std::string("weight_gemm_sums ") + name(r.out);
    bool compiled = false;
    std::shared_ptr<Kernel> round =
        cachedKernel(key, choice.arch, [&] { return kernels::weightGemmSums(r); }, compiled);
    auto flat = [&](TensorView v) {
      v.shape = {p.m * p.n};
      v.strides = v.contiguousStrides();
      return LaunchArg::view(v);
    };
    round->launch({LaunchArg::integer(p.m * p.n), flat(sums), flat(y)}, stream);
    choice.config += "; then " + key;
  }
  return choice;
}
