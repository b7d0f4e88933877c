//===- OnlineSoftmax.cpp - the forward kernels' running softmax -----------===//
#include "OnlineSoftmax.h"

using namespace tessel;
using namespace tessel::kernels;

OnlineSoftmax OnlineSoftmax::allocate(int64_t rows, const char *factorName, bool shiftByBlock,
                                      int pBias) {
  OnlineSoftmax s;
  s.rowMax = alloc_fragment({rows}, DType::f32, "row_max");
  s.rowSum = alloc_fragment({rows}, DType::f32, "row_sum");
  s.blockMax = alloc_fragment({rows}, DType::f32, "tile_max");
  s.factor = alloc_fragment({rows}, DType::f32, factorName);
  s.shiftByBlock = shiftByBlock;
  s.pBias = pBias;
  return s;
}

void OnlineSoftmax::begin(Expr scale, std::optional<Buffer> output) {
  fill(rowMax, kNegInf);
  clear(rowSum);
  if (output) clear(*output);
  scaleLog2 = scale * kLog2e;
}

void OnlineSoftmax::maxOf(const Buffer &s, bool first) const {
  reduce_max(s, blockMax, 1, /*clear=*/first);
}

void OnlineSoftmax::advance() const {
  parallel(rowMax.shape()[0], [&](Expr i) {
    Expr next = max(rowMax(i), blockMax(i) * scaleLog2);
    // A row none of whose keys so far is visible (every score masked to
    // -inf) keeps m = -inf, and exp2(-inf - -inf) would be NaN: its factor
    // is 1 (its l and O are still 0). Only the overlapped register kernel's
    // prologue computes a block that can have no visible key at all (a
    // tile past its sequence's keys); its P is then shifted by 0.
    factor(i) = select(next == Expr(kNegInf), Expr(1.0), exp2(rowMax(i) - next));
    rowMax(i) = next;
    if (shiftByBlock) blockMax(i) = select(next == Expr(kNegInf), Expr(0.0), next);
    rowSum(i) = rowSum(i) * factor(i);
  });
}

void OnlineSoftmax::exponentiate(const Buffer &s, const Buffer &p) const {
  const Buffer &shift = shiftByBlock ? blockMax : rowMax;
  parallel(s.shape()[0], s.shape()[1], [&](Expr i, Expr j) {
    Expr power = pBias ? s(i, j) * scaleLog2 - (shift(i) - Expr(double(pBias)))
                       : s(i, j) * scaleLog2 - shift(i);
    s(i, j) = exp2FmaEvery ? exp2(power, exp2FmaEvery) : exp2(power);
    p(i, j) = cast(s(i, j), p.dtype());
  });
  reduce_sum(s, rowSum, 1, /*clear=*/false);
}

void OnlineSoftmax::step(const Buffer &s, const Buffer &p,
                         const std::function<void()> &correct) const {
  maxOf(s);
  advance();
  correct();
  exponentiate(s, p);
}

void OnlineSoftmax::reciprocalSums() const {
  parallel(rowSum.shape()[0], [&](Expr i) {
    factor(i) = select(rowSum(i) == Expr(0.0), Expr(0.0), Expr(1.0) / rowSum(i));
  });
}

void OnlineSoftmax::storeLse(const Sequence &sq, const Tensor &lse, Expr head, Expr row) const {
  int64_t rows = rowMax.shape()[0];
  parallel(rows, [&](Expr i) {
    Expr m = pBias ? rowMax(i) - Expr(double(pBias)) : rowMax(i);
    blockMax(i) = m / kLog2e + log(rowSum(i));
  });
  sq.store(blockMax, sq.vector(lse, head, row, rows), row);
}
