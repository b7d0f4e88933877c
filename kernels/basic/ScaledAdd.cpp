//===- ScaledAdd.cpp - y = alpha * x + y ----------------------------------===//
#include "tessel/kernels/basic/Basic.h"

using namespace tessel;

Program tessel::kernels::scaledAdd(const ScaledAddConfig &c) {
  Program p("scaled_add");
  Expr n = p.sym("N");
  Expr alpha = p.scalar("alpha", DType::f32);
  Tensor x = p.tensor("x", {n}, c.dtype);
  Tensor y = p.tensor("y", {n}, c.dtype);
  p.kernel({ceil_div(n, c.block)}, c.threads, [&](Expr bx) {
    Buffer xs = alloc_shared({c.block}, c.dtype);
    Buffer ys = alloc_shared({c.block}, c.dtype);
    Buffer yTile = y.tile({bx * c.block}, {c.block});
    copy(x.tile({bx * c.block}, {c.block}), xs);
    copy(yTile, ys);
    parallel(c.block, [&](Expr i) {
      ys(i) = alpha * cast(xs(i), DType::f32) + cast(ys(i), DType::f32);
    });
    copy(ys, yTile);
  });
  return p;
}
