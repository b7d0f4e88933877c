//===- RowLogSumExp.cpp - online softmax statistics of Q K^T --------------===//
//
// The inner step of FlashAttention without the second matrix product: for
// each row i of S = scale * Q K^T, lse[i] = log(sum_j exp(S[i, j])), computed
// block by block over the columns with a running maximum and a rescaled
// running sum, all on the gemm accumulator's register layout.
//
//===----------------------------------------------------------------------===//
#include "tessel/kernels/basic/Basic.h"

#include <limits>

using namespace tessel;

Program tessel::kernels::rowLogSumExp(const RowLseConfig &c) {
  Program p("row_lse");
  Expr m = p.sym("M"), n = p.sym("N");
  Expr scale = p.scalar("scale", DType::f32);
  Tensor q = p.tensor("Q", {m, c.headDim}, c.dtype);
  Tensor k = p.tensor("K", {n, c.headDim}, c.dtype);
  Tensor lse = p.tensor("lse", {m}, DType::f32);
  const int64_t bm = c.blockM, bn = c.blockN, d = c.headDim;
  const double negInf = -std::numeric_limits<double>::infinity();
  p.kernel({ceil_div(m, bm)}, c.threads, [&](Expr bx) {
    Buffer qs = alloc_shared({bm, d}, c.dtype, "q_tile");
    Buffer ks = alloc_shared({bn, d}, c.dtype, "k_tile");
    Buffer s = alloc_fragment({bm, bn}, DType::f32, "scores");
    Buffer rowMax = alloc_fragment({bm}, DType::f32, "row_max");
    Buffer rowSum = alloc_fragment({bm}, DType::f32, "row_sum");
    Buffer tileMax = alloc_fragment({bm}, DType::f32, "tile_max");
    copy(q.tile({bx * bm, 0}, {bm, d}), qs);
    fill(rowMax, negInf);
    clear(rowSum);
    pipelined(ceil_div(n, bn), 1, [&](Expr kt) {
      copy(k.tile({kt * bn, 0}, {bn, d}), ks);
      gemm(qs, ks, s, {.transpose_b = true, .clear_accum = true, .policy = c.policy});
      // Columns past N take no part.
      parallel(bm, bn, [&](Expr i, Expr j) {
        s(i, j) = select(kt * bn + j < n, s(i, j) * scale, Expr(negInf));
      });
      reduce_max(s, tileMax, 1);
      parallel(bm, [&](Expr i) {
        Expr next = max(rowMax(i), tileMax(i));
        rowSum(i) = rowSum(i) * exp(rowMax(i) - next);
        rowMax(i) = next;
      });
      parallel(bm, bn, [&](Expr i, Expr j) { s(i, j) = exp(s(i, j) - rowMax(i)); });
      reduce_sum(s, rowSum, 1, /*clear=*/false);
    });
    parallel(bm, [&](Expr i) { tileMax(i) = rowMax(i) + log(rowSum(i)); });
    copy(tileMax, lse.tile({bx * bm}, {bm}));
  });
  return p;
}
