//===- RowSoftmax.cpp - softmax along rows --------------------------------===//
#include "tessel/kernels/basic/Basic.h"

using namespace tessel;

Program tessel::kernels::rowSoftmax(const SoftmaxConfig &c) {
  Program p("row_softmax");
  Expr m = p.sym("M");
  Tensor x = p.tensor("x", {m, c.cols}, c.dtype);
  Tensor y = p.tensor("y", {m, c.cols}, c.dtype);
  p.kernel({ceil_div(m, c.rows)}, c.threads, [&](Expr bx) {
    Buffer tile = alloc_fragment({c.rows, c.cols}, DType::f32, "tile");
    Buffer rowMax = alloc_fragment({c.rows}, DType::f32, "row_max");
    Buffer rowSum = alloc_fragment({c.rows}, DType::f32, "row_sum");
    copy(x.tile({bx * c.rows, 0}, {c.rows, c.cols}), tile);
    reduce_max(tile, rowMax, 1);
    parallel(c.rows, c.cols, [&](Expr i, Expr j) { tile(i, j) = exp(tile(i, j) - rowMax(i)); });
    reduce_sum(tile, rowSum, 1);
    parallel(c.rows, c.cols, [&](Expr i, Expr j) { tile(i, j) = tile(i, j) / rowSum(i); });
    copy(tile, y.tile({bx * c.rows, 0}, {c.rows, c.cols}));
  });
  return p;
}
