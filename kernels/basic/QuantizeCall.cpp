//===- QuantizeCall.cpp - tessel::quantize on views -----------------------===//
#include "common/LibraryCalls.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/LowPrecision.h"

#include <bit>
#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;
using rt::LaunchArg;
using rt::ScalarType;

namespace {
/// Whole rows, 8192 elements (of cols rounded up to a power of two, as the
/// registers are laid out) per block of 256 threads: 32 f32 registers of x
/// a thread. Longer rows take one row a block and up to 1024 threads.
QuantizeConfig defaultConfig(int64_t cols) {
  QuantizeConfig c;
  int64_t padded = int64_t(std::bit_ceil(uint64_t(cols)));
  c.rows = std::max<int64_t>(1, 8192 / padded);
  c.threads = int(std::clamp<int64_t>(c.rows * padded / 32, 32, 1024));
  return c;
}

/// MX scales (ue8m0, one per 32 elements of a row), checked against x [m,
/// cols]: [m, cols / 32], or cuBLAS's blocked layout when 4-D. Says whether
/// they are blocked.
bool checkMxScales(const TensorView &scales, int64_t m, int64_t cols, bool kMajor) {
  if (kMajor)
    throw Error(fmt::format("scales is {}: kMajorScales lays out 1x128 f32 block scales, not MX "
                            "scales",
                            scales.str()));
  if (cols % kMxBlock)
    throw Error(fmt::format("scales is {}: MX scales cover 32 elements of a row each, and x has "
                            "{} columns, not a multiple of 32",
                            scales.str(), cols));
  if (scales.shape.size() == 4) {
    requireView(scales, "scales", 4, {ScalarType::UE8M0});
    requireShape(scales, "scales", {(m + 127) / 128, (cols + 127) / 128, 32, 16});
    return true;
  }
  if (scales.shape.size() != 2)
    throw Error(fmt::format("scales is {}: ue8m0 (MX) scales are [{}, {}] (a scale per 32 elements "
                            "of a row) or [{}, {}, 32, 16] (cuBLAS's blocked layout, what "
                            "tessel::gemm's MX scales take)",
                            scales.str(), m, cols / kMxBlock, (m + 127) / 128, (cols + 127) / 128));
  requireView(scales, "scales", 2, {ScalarType::UE8M0});
  requireShape(scales, "scales", {m, cols / kMxBlock});
  return false;
}

/// The granularity the scales' type and shape ask for, after checking them
/// against x [m, cols].
QuantizeGranularity granularityOf(const TensorView &scales, int64_t m, int64_t cols,
                                  bool kMajor) {
  if (scales.dtype == ScalarType::UE8M0) return QuantizeGranularity::mx;
  if (scales.shape.size() == 1) {
    requireView(scales, "scales", 1, {ScalarType::F32});
    requireShape(scales, "scales", {m});
    if (kMajor)
      throw Error(fmt::format("scales is {}: kMajorScales lays out block scales ([cols / 128, "
                              "M]), not one per row",
                              scales.str()));
    return QuantizeGranularity::row;
  }
  if (scales.shape.size() != 2)
    throw Error(fmt::format("scales is {}: it needs 1 dimension ([{}], a scale per row) or 2 "
                            "([{}, cols / 128], a scale per 128 elements of a row), or ue8m0 "
                            "scales for MX blocks of 32",
                            scales.str(), m, m));
  requireView(scales, "scales", 2, {ScalarType::F32});
  if (cols % kQuantizeBlock)
    throw Error(fmt::format("scales is {}: a scale per 128 elements needs x's rows in whole "
                            "blocks of 128, and x has {} columns",
                            scales.str(), cols));
  if (kMajor) requireShape(scales, "scales", {cols / kQuantizeBlock, m});
  else requireShape(scales, "scales", {m, cols / kQuantizeBlock});
  return QuantizeGranularity::block;
}
} // namespace

Choice tessel::quantize(const TensorView &x, const TensorView &q, const TensorView &scales,
                        const QuantizeOptions &o, CUstream stream) {
  requireView(x, "x", 2, {ScalarType::F32, ScalarType::F16, ScalarType::BF16});
  requireView(q, "q", 2, {ScalarType::F8E4M3, ScalarType::F8E5M2});
  requireShape(q, "q", x.shape);
  int64_t m = x.shape[0], cols = x.shape[1];
  QuantizeGranularity granularity = granularityOf(scales, m, cols, o.kMajorScales);
  bool blocked = granularity == QuantizeGranularity::mx &&
                 checkMxScales(scales, m, cols, o.kMajorScales);
  int device = commonDevice({&x, &q, &scales});
  Choice choice;
  choice.arch = targetFor(o.arch, device);
  QuantizeConfig config = o.config.value_or(defaultConfig(cols));
  config.dtype = dtypeOf(x.dtype);
  config.out = dtypeOf(q.dtype);
  config.granularity = granularity;
  config.cols = cols;
  config.kMajorScales = o.kMajorScales;
  config.blockedScales = blocked;
  choice.config = "quantize " + quantizeSettings().describe(config);
  std::shared_ptr<Kernel> kernel = cachedKernel(
      choice.config, choice.arch, [&] { return kernels::quantize(config); }, choice.compiled);
  // At a grouped granularity the kernel sees each row as [cols / width,
  // width]: the same memory.
  auto shaped = [&](const TensorView &v) {
    if (granularity == QuantizeGranularity::row) return LaunchArg::view(v);
    int64_t width = quantizeGroupWidth(granularity);
    TensorView blocks = v;
    blocks.shape = {m, cols / width, width};
    blocks.strides = blocks.contiguousStrides();
    return LaunchArg::view(blocks);
  };
  // The blocked layout's padding (rows past M, groups past cols / 32) is
  // read by an MX gemm beside the zeros past M and K: 1.0, never a NaN.
  if (blocked && (m % 128 || cols % 128))
    rt::fillAsync(scales.data, size_t(scales.numel()), rt::kUE8M0One, stream);
  kernel->launch({LaunchArg::integer(m), shaped(x), shaped(q), LaunchArg::view(scales)}, stream);
  return choice;
}
