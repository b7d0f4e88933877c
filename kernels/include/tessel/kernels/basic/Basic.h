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
