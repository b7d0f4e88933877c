//===- TmaScale.cpp - y = alpha * x through a hand-scheduled TMA role -----===//
//
// Warp specialization written by hand with the DSL's explicit ops: the last
// warpgroup arms an mbarrier and issues one TMA copy per tile, the first
// warpgroup waits for the bytes, computes into shared memory and writes the
// tile back with a TMA store (or adds it into y with a TMA reduce-add).
// tessel-warp-specialize builds the load side automatically for pipelined
// loops.
//
//===----------------------------------------------------------------------===//
#include "tessel/kernels/basic/Basic.h"

using namespace tessel;

Program tessel::kernels::tmaScale(const TmaScaleConfig &c) {
  Program p("tma_scale");
  Expr m = p.sym("M");
  Expr alpha = p.scalar("alpha", DType::f32);
  Tensor x = p.tensor("x", {m, c.cols}, c.dtype);
  Tensor y = p.tensor("y", {m, c.cols}, DType::f32);
  p.kernel({ceil_div(m, c.rows)}, 256, [&](Expr bx) {
    Buffer full = alloc_barriers(1, 1, "full");
    Buffer tile = alloc_shared({c.rows, c.cols}, c.dtype, "tile");
    role(128, 128, [&] {
      mbarrier_expect_tx(full, 0, c.rows * c.cols * byteSize(c.dtype));
      copy_async(x.tile({bx * c.rows, 0}, {c.rows, c.cols}), tile, full, 0);
    }, /*max_registers=*/40);
    role(0, 128, [&] {
      mbarrier_wait(full, 0, 0);
      Buffer result = alloc_shared({c.rows, c.cols}, DType::f32, "result");
      parallel(c.rows, c.cols, [&](Expr i, Expr j) { result(i, j) = alpha * cast(tile(i, j), DType::f32); });
      // Out through TMA too: a store, or an add into y.
      Buffer out = y.tile({bx * c.rows, 0}, {c.rows, c.cols});
      if (c.accumulate) atomic_add(out, result, MemoryOrder::relaxed, AtomicPath::tma);
      else copy(result, out);
    });
  });
  return p;
}
