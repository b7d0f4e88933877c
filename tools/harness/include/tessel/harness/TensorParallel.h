//===- TensorParallel.h - host inputs and references of the tp layers -*- C++ -*-===//
//
// What the tensor-parallel layers' checks share (the `tessel run
// ag_gemm|gemm_rs` command and the GPU tests): every rank's inputs, made from
// a seed and the rank so that any rank can make any other's, and the float64
// reference of a rank's c from all of them.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_HARNESS_TENSORPARALLEL_H
#define TESSEL_HARNESS_TENSORPARALLEL_H

#include "tessel/Testing.h"

#include <cstdint>
#include <vector>

namespace tessel::harness {

/// 8-bit inputs' scales: none, one each, or a's rows' and op(b)'s columns'.
enum class TpScales { none, tensor, row };

/// A layer as every rank calls it: allgather_gemm (a [m, k] a rank, c [N *
/// m, n]) or gemm_reducescatter (a [N * m, k], c [m, n]); op(b) [k, n].
struct TpShape {
  bool allGather = true;
  int64_t rowsPerRank = 0, k = 0, n = 0;
  DType in = DType::bf16;
  bool transposeB = false;
  TpScales scales = TpScales::none;
};

/// One rank's a, b (op(b) [k, n]: [n, k] when transposed) and f32 scales
/// ([rows of a] and [n], [1] each, or empty).
struct TpRankInputs {
  testing::HostTensor a, b, scaleA, scaleB;
};

/// Rank q's inputs: random values of the input type, scales in [0.25, 2).
TpRankInputs tpRankInputs(const TpShape &s, int ranks, int q, uint64_t seed);

/// Rows `rows` of rank `me`'s c in float64, from every rank's inputs (all
/// rows when `rows` is empty), row after row.
std::vector<double> tpReference(const TpShape &s, int me, const std::vector<TpRankInputs> &all,
                                std::vector<int64_t> rows = {});

} // namespace tessel::harness

#endif
