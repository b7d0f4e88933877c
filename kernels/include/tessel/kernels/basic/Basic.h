//===- Basic.h - small kernels ----------------------------------*- C++ -*-===//
//
// Element-wise and row-wise kernels and the smallest examples of each
// mechanism (a TMA producer role, an online softmax over gemm tiles): each a
// function from a configuration to a Program (kernels/basic/).
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_BASIC_BASIC_H
#define TESSEL_KERNELS_BASIC_BASIC_H

#include "tessel/dsl/Program.h"
#include "tessel/kernels/Settings.h"

namespace tessel::kernels {

/// y = alpha * x + y over vectors of length N (a symbol).
struct ScaledAddConfig {
  DType dtype = DType::f32;
  int64_t block = 1024; // elements per thread block
  int threads = 256;
};
Program scaledAdd(const ScaledAddConfig &config);
/// Its settings: dtype, block, threads.
const SettingsTable<ScaledAddConfig> &scaledAddSettings();

/// y [N] = the sum over p of x [P, N] (P and N symbols): partial results
/// of several ranks or splits added in f32, in order of p, and rounded to
/// dtype once (a reduce-scatter's reduction).
struct PartialSumConfig {
  DType dtype = DType::bf16;
  int64_t block = 2048; // elements per thread block
  int threads = 256;
};
Program partialSum(const PartialSumConfig &config);
/// Its settings: dtype, block, threads.
const SettingsTable<PartialSumConfig> &partialSumSettings();

/// dst = src[:, first : first + cols] with src [rows, pitch] and dst
/// [rows, cols] row-major (all four symbols; cols a multiple of blockCols):
/// the local part of an exchange, which copy engines do slowly on narrow
/// rows.
struct ColumnSliceConfig {
  DType dtype = DType::f16; // any type of the width: the bits are copied
  int64_t blockRows = 32, blockCols = 256;
  int threads = 128;
};
Program columnSlice(const ColumnSliceConfig &config);
/// Its settings: dtype, block_rows, block_cols, threads.
const SettingsTable<ColumnSliceConfig> &columnSliceSettings();

/// Y = softmax(X) along rows; X is [M, cols] with M a symbol.
struct SoftmaxConfig {
  DType dtype = DType::f32;
  int64_t cols = 256;
  int64_t rows = 4; // rows per thread block
  int threads = 128;
};
Program rowSoftmax(const SoftmaxConfig &config);
/// Its settings: dtype, cols, rows, threads.
const SettingsTable<SoftmaxConfig> &rowSoftmaxSettings();

/// What one quantisation scale covers: a row (per token), 128 consecutive
/// elements of a row (DeepSeek-V3's 1x128 activation blocks), or 32 (an OCP
/// MX block: MXFP8, with a ue8m0 scale).
enum class QuantizeGranularity { row, block, mx };
/// The elements of a row one scale covers at QuantizeGranularity::block.
inline constexpr int64_t kQuantizeBlock = 128;
/// The elements of a row one scale covers at QuantizeGranularity::mx.
inline constexpr int64_t kMxBlock = 32;

/// FP8 quantisation of x [M, cols] (f32, f16 or bf16; M a symbol) into q
/// [M, cols] (f8e4m3 or f8e5m2) and f32 scales with x ~= q * scale: per row,
/// scale [M]; per block, scale [M, cols / 128], one per 128 elements of a
/// row (cols a multiple of 128). For each group G (a row or a block), in
/// f32 on the device and on the host alike:
///   amax     = max over G of |x|          (NaN elements do not count)
///   a        = max(amax, FP8_MAX * 2^-126)
///   scale[G] = a / FP8_MAX
///   q[j]     = fp8(x[j] * (FP8_MAX / a))  (round to nearest even, saturating)
/// with FP8_MAX 448 (e4m3) or 57344 (e5m2). Each element is multiplied by
/// the group's reciprocal, not divided by its scale (one instruction, not
/// an IEEE division's dozen); both reciprocal and scale are correctly
/// rounded IEEE divisions, so a host reference that computes the same
/// steps in f32 gets the same scales and codes bit for bit (a reference
/// that divides x by the scale may differ in the last place before the
/// FP8 rounding, and so, rarely, by one code). The floor keeps the scale a
/// normal float (never below 2^-126, FLT_MIN): an all-zero group gets scale
/// 2^-126 and zero codes (-0.0 gives the code 0x80), never a NaN from 0 / 0;
/// a group whose amax is below the floor is scaled as if it were at it.
/// x * (FP8_MAX / a) can round a hair past FP8_MAX; the conversion
/// saturates it to FP8_MAX. An infinite element makes its group's scale
/// infinite (and the codes zero, its own NaN): quantise finite x.
///
/// At MX granularity (OCP Microscaling v1.0's MXFP8) the scale of each 32
/// elements is a ue8m0 power of two, rounded up so that no element passes
/// FP8_MAX, and the elements are multiplied by its exact reciprocal:
///   s[G]     = ue8m0(amax / FP8_MAX)       (rounded up to a power of two,
///                                           2^-127 to 2^127; amax 0 gives 2^-127)
///   q[j]     = fp8(x[j] * (1 / value(s[G])))
/// (cols a multiple of 32). The scales are stored [M, cols / 32], or, with
/// blockedScales, in cuBLAS's blocked layout that tessel::gemm's MX scales
/// take: [ceil(M / 128), ceil(cols / 128), 32, 16], row r's scale of group
/// g at [r / 128, g / 4, r % 32, (r % 128) / 32 * 4 + g % 4]. The kernel
/// writes the blocked cells of rows it covers; tessel::quantize first fills
/// the padding (rows past M, groups past cols / 32) with 1.0, so that the
/// zeros a gemm reads past M and K are never multiplied by a NaN.
///
/// Each thread block reads `rows` whole rows once, 16 bytes a thread at a
/// time: at block (and MX) granularity x and q are declared [M, cols / 128,
/// 128] ([M, cols / 32, 32]), the same memory as [M, cols], so that each
/// block is a dimension the tile reduces along.
struct QuantizeConfig {
  DType dtype = DType::bf16; // x
  DType out = DType::f8e4m3; // q
  QuantizeGranularity granularity = QuantizeGranularity::row;
  int64_t cols = 4096;
  int64_t rows = 2; // rows per thread block
  int threads = 256;
  /// Block scales stored [cols / 128, M] (K-block-major), the layout the
  /// block-scaled gemm reads A's scales in (a K block's scales contiguous).
  bool kMajorScales = false;
  /// MX scales in cuBLAS's blocked layout (above), the layout the MX gemm
  /// reads.
  bool blockedScales = false;
};
/// The elements one scale covers at a grouped granularity (128 or 32).
int64_t quantizeGroupWidth(QuantizeGranularity granularity);
Program quantize(const QuantizeConfig &config);
/// Its settings: dtype, out (e4m3 or e5m2), granularity (row, block or mx),
/// cols, rows, threads, k_major_scales, blocked_scales.
const SettingsTable<QuantizeConfig> &quantizeSettings();
/// The largest finite value of an FP8 type (448 or 57344).
double fp8Max(DType t);

/// lse[i] = log(sum_j exp(scale * (Q K^T)[i, j])) with Q [M, headDim] and K
/// [N, headDim], M and N symbols: FlashAttention's online softmax over gemm
/// accumulator tiles.
struct RowLseConfig {
  DType dtype = DType::f16;
  int64_t headDim = 64;
  int64_t blockM = 64, blockN = 64;
  int threads = 128;
  WarpPolicy policy = WarpPolicy::square;
};
Program rowLogSumExp(const RowLseConfig &config);
/// Its settings: dtype, head_dim, block_m, block_n, threads, policy.
const SettingsTable<RowLseConfig> &rowLogSumExpSettings();

/// y = alpha * x (or y += alpha * x) for x [M, cols]: each block's rows come
/// in through one TMA copy issued by a hand-written producer role and go out
/// through a TMA store (or TMA reduce-add) (sm_90a).
struct TmaScaleConfig {
  DType dtype = DType::f16;
  int64_t cols = 64, rows = 32;
  bool accumulate = false;
};
Program tmaScale(const TmaScaleConfig &config);
/// Its settings: dtype, cols, rows, accumulate.
const SettingsTable<TmaScaleConfig> &tmaScaleSettings();

} // namespace tessel::kernels

#endif
