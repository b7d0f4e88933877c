//===- Kernels.h - Tessel's kernel library ----------------------*- C++ -*-===//
//
// Each kernel is a function from a configuration to a Program. Tensor extents
// that vary at run time are symbols; tile sizes, thread counts and types are
// compile-time configuration.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_KERNELS_H
#define TESSEL_KERNELS_KERNELS_H

#include "tessel/dsl/Program.h"

namespace tessel::kernels {

/// y = alpha * x + y over vectors of length N (a symbol).
struct ScaledAddConfig {
  DType dtype = DType::f32;
  int64_t block = 1024; // elements per thread block
  int threads = 256;
};
Program scaledAdd(const ScaledAddConfig &config);

/// Y = softmax(X) along rows; X is [M, cols] with M a symbol.
struct SoftmaxConfig {
  DType dtype = DType::f32;
  int64_t cols = 256;
  int64_t rows = 4; // rows per thread block
  int threads = 128;
};
Program rowSoftmax(const SoftmaxConfig &config);

/// C = op(A) x op(B); A is [M, K] ([K, M] transposed), B is [K, N] ([N, K]
/// transposed), C is [M, N], all row-major, M, N, K symbols.
struct GemmConfig {
  DType in = DType::f16;
  DType out = DType::f32;
  bool transposeA = false, transposeB = false;
  int64_t blockM = 64, blockN = 64, blockK = 32;
  int stages = 2;
  int threads = 128;
  WarpPolicy policy = WarpPolicy::square;
  GemmInstruction instruction = GemmInstruction::automatic;
  WarpSpecialize warpSpecialize = WarpSpecialize::automatic;
  /// Block rasterization: rows of tiles per panel (0 = launch order).
  int swizzlePanel = 0;
};
Program gemm(const GemmConfig &config);

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

/// y = alpha * x (or y += alpha * x) for x [M, cols]: each block's rows come
/// in through one TMA copy issued by a hand-written producer role and go out
/// through a TMA store (or TMA reduce-add) (sm_90a).
struct TmaScaleConfig {
  DType dtype = DType::f16;
  int64_t cols = 64, rows = 32;
  bool accumulate = false;
};
Program tmaScale(const TmaScaleConfig &config);

/// FlashAttention over BSHD tensors: Q, O [batch, seqlen_q, heads_q,
/// head_dim], K, V [batch, seqlen_k, heads_kv, head_dim], LSE [batch,
/// heads_q, seqlen_q] (f32, natural log). Every extent is a run-time symbol;
/// heads_q must be a multiple of heads_kv (GQA groups of heads_q / heads_kv).
struct AttentionConfig {
  DType dtype = DType::bf16;
  int64_t headDim = 128;
  int64_t blockM = 128, blockN = 128;
  int threads = 256;
  int stages = 2;
  bool causal = false;
  WarpSpecialize warpSpecialize = WarpSpecialize::automatic;
};
/// O = softmax(scale * Q K^T) V and its log-sum-exp.
Program flashAttentionForward(const AttentionConfig &config);

} // namespace tessel::kernels

#endif
