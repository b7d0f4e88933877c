//===- PartialSum.cpp - y = the sum of P partial results ------------------===//
//
// Each block adds `block` elements of every part into an f32 fragment, part
// after part (the order a host reference adds in), and rounds once. Every
// thread reads whole 16-byte vectors of each part, so the sum runs at the
// bandwidth of reading P inputs and writing one.
//
//===----------------------------------------------------------------------===//
#include "tessel/kernels/basic/Basic.h"

#include <fmt/format.h>

using namespace tessel;

Program tessel::kernels::partialSum(const PartialSumConfig &c) {
  if (c.dtype != DType::f16 && c.dtype != DType::bf16 && c.dtype != DType::f32)
    throw Error(fmt::format("partial_sum: dtype={} is not f16, bf16 or f32", name(c.dtype)));
  if (c.block < 1 || c.block % c.threads != 0)
    throw Error(fmt::format("partial_sum: block={} is not a positive multiple of threads={}",
                            c.block, c.threads));
  Program p("partial_sum");
  Expr parts = p.sym("P"), n = p.sym("N");
  Tensor x = p.tensor("x", {parts, n}, c.dtype);
  Tensor y = p.tensor("y", {n}, c.dtype);
  p.kernel({ceil_div(n, c.block)}, c.threads, [&](Expr bx) {
    Buffer part = alloc_fragment({c.block}, c.dtype, "part");
    Buffer sum = alloc_fragment({c.block}, DType::f32, "sum");
    Buffer out = alloc_fragment({c.block}, c.dtype, "out");
    clear(sum);
    serial(parts, [&](Expr s) {
      copy(x.tile({s, bx * c.block}, {drop, c.block}), part);
      parallel(c.block, [&](Expr i) { sum(i) = sum(i) + cast(part(i), DType::f32); });
    });
    parallel(c.block, [&](Expr i) { out(i) = cast(sum(i), c.dtype); });
    copy(out, y.tile({bx * c.block}, {c.block}));
  });
  return p;
}
