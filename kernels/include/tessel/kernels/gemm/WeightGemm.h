//===- WeightGemm.h - weight-only quantised GEMM ----------------*- C++ -*-===//
//
// y = x w^T with w stored as 4- or 8-bit integer codes and a scale (and
// optionally a zero point) per group of K: the GEMM of weight-only
// quantised inference (GPTQ, AWQ). The call on tensor views is
// tessel::weight_gemm in tessel/Tessel.h.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_GEMM_WEIGHTGEMM_H
#define TESSEL_KERNELS_GEMM_WEIGHTGEMM_H

#include "tessel/dsl/Program.h"
#include "tessel/kernels/Settings.h"

namespace tessel::kernels {

/// How weights are stored. `int4`: w [N, K / 2] u8, two codes a byte (k
/// even in the low nibble), each code c in [0, 15], zero point 8 unless
/// zeros are given. `int8`: w [N, K] i8, c in [-128, 127], zero point 0
/// unless given.
enum class WeightFormat { int4, int8 };

/// The dequantised weight the tensor cores multiply, element (n, k) of
/// group g = k / group: ((c - z) * s) computed in f32 (c - z is exact, the
/// product rounded once) and rounded to the activations' type, with s =
/// scales[g, n] and z = zeros[g, n] (scales and zeros [K / group, N], the
/// activations' type, as GPTQ and AWQ store them) or the format's default.
/// Host references compute exactly this.
struct WeightGemmConfig {
  WeightFormat format = WeightFormat::int4;
  /// x's type (f16 or bf16), which scales and zeros share.
  DType activations = DType::bf16;
  /// y's type: f16, bf16 or f32; split-K adds into an f32 y.
  DType out = DType::bf16;
  /// K elements sharing a scale: 32, 64 or 128; K must be a multiple.
  int64_t group = 128;
  bool zeros = false;
  /// Weight rows (output features) a block: 64 a warpgroup (wgmma) or 16 a
  /// warp (mma.sync).
  int64_t blockN = 64;
  /// Tokens (rows of x) a block.
  int64_t blockM = 16;
  /// K a pipeline step: a multiple of the group, or a divisor of it.
  int64_t blockK = 128;
  int stages = 4;
  int threads = 128;
  /// K slices, one block each, adding into y (which must be f32 and zero).
  int splitK = 1;
  GemmInstruction instruction = GemmInstruction::automatic;
  /// sm_90a: a TMA producer warpgroup beside the consumers (automatic: when
  /// every load can be TMA), and two consumer warpgroups taking turns at
  /// the tensor cores so that one unpacks while the other's wgmmas run.
  WarpSpecialize warpSpecialize = WarpSpecialize::automatic;
  bool pingpong = false;
};

/// y [M, N] = x [M, K] w^T, w dequantised in registers on its way to the
/// tensor cores as the A operand (the weights' rows are the instruction's
/// M, the tokens its N: a decode step's few tokens fill an 8- or 16-wide
/// instruction instead of wasting a 64-row one).
Program weightGemm(const WeightGemmConfig &config);
const SettingsTable<WeightGemmConfig> &weightGemmSettings();

/// The dequantised weights as a dense [N, K] matrix of the activations'
/// type (the same values weightGemm multiplies), for a large M where the
/// dense GEMM's speed matters more than the weights' bytes.
struct WeightDequantizeConfig {
  WeightFormat format = WeightFormat::int4;
  DType activations = DType::bf16;
  int64_t group = 128;
  bool zeros = false;
  /// K elements a block handles per row and rows a block.
  int64_t blockK = 256;
  int64_t rows = 16;
  int threads = 128;
};
Program weightDequantize(const WeightDequantizeConfig &config);
const SettingsTable<WeightDequantizeConfig> &weightDequantizeSettings();

/// y = sums rounded to y's type, both flat [count]: a split-K product's f32
/// sums into a 16-bit y.
struct WeightSumsConfig {
  DType out = DType::bf16;
  int64_t block = 2048;
  int threads = 256;
};
Program weightGemmSums(const WeightSumsConfig &config);

/// The format names the settings take: int4, int8.
const Choices<WeightFormat> &weightFormatChoices();

} // namespace tessel::kernels

#endif
