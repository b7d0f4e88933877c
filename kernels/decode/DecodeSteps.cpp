//===- DecodeSteps.cpp - what the decode kernels share --------------------===//
#include "DecodeSteps.h"

using namespace tessel;
using namespace tessel::kernels;

DecodeRange DecodeRange::of(Expr length, int64_t blockN, Expr splits, Expr split) {
  DecodeRange r;
  r.length = length;
  Expr steps = ceil_div(length, blockN);
  Expr share = ceil_div(steps, splits);
  r.first = split * share;
  // max(0, ...) in index arithmetic: a split past the keys takes none.
  r.count = select(r.first < steps, min(share, steps - min(r.first, steps)), Expr(0));
  return r;
}

void tessel::kernels::copyKeyStep(const Tensor &blockTable, Expr b, const DecodeRange &range,
                                  Expr key0, int64_t pageSize, int64_t blockN,
                                  const PageCopy &copyPage) {
  if (pageSize >= blockN) {
    Expr page = cast(blockTable(b, key0 / pageSize), DType::index);
    copyPage(page, key0 % pageSize, blockN, 0);
    return;
  }
  Expr lastPage = ceil_div(range.length, pageSize) - 1;
  for (int64_t i = 0; i < blockN / pageSize; ++i) {
    Expr entry = min(key0 / pageSize + i, lastPage);
    copyPage(cast(blockTable(b, entry), DType::index), Expr(0), pageSize, i * pageSize);
  }
}

void tessel::kernels::maskKeys(const Buffer &scores, Expr key0, Expr length) {
  parallel(scores.shape()[0], scores.shape()[1], [&](Expr i, Expr j) {
    scores(i, j) = select(key0 + j < length, scores(i, j), Expr(kNegInf));
  });
}

void tessel::kernels::storeDecodeRows(const OnlineSoftmax &softmax, const Buffer &acc,
                                      DType outType, const DecodeOutputs &out,
                                      const std::optional<Buffer> &accFactor,
                                      Expr valueScale) {
  const int64_t rows = acc.shape()[0], dim = acc.shape()[1];
  softmax.reciprocalSums();
  parallel(rows, [&](Expr i) { softmax.factor(i) = softmax.factor(i) * valueScale; });
  if (accFactor) copy(softmax.factor, *accFactor);
  const Buffer &factor = accFactor ? *accFactor : softmax.factor;
  if (out.o) {
    Buffer values = alloc_fragment({rows, dim}, outType, "o");
    parallel(rows, dim, [&](Expr i, Expr d) {
      values(i, d) = cast(acc(i, d) * factor(i), outType);
    });
    copy(values, out.oTile(*out.o));
    return;
  }
  parallel(rows, dim, [&](Expr i, Expr d) { acc(i, d) = acc(i, d) * factor(i); });
  copy(acc, out.partialOTile(*out.partialO));
  // blockMax is free once the last step is done: the rows' natural-base
  // log-sum-exp, -inf for a row that saw no key (l = 0).
  parallel(rows, [&](Expr i) {
    softmax.blockMax(i) = select(softmax.rowSum(i) == Expr(0.0), Expr(kNegInf),
                                 softmax.rowMax(i) / kLog2e + log(softmax.rowSum(i)));
  });
  copy(softmax.blockMax, out.partialLseTile(*out.partialLse));
}
