//===- DecodeCombine.cpp - merge a decode's key splits --------------------===//
//
// Each block merges `rows` rows (a head of a sequence each): a first walk
// over the splits finds each row's largest log-sum-exp, a second adds the
// splits' partial outputs weighted by exp(lse_s - max) and divides by the
// weights' sum. Partial rows are f32 and read once, 16 bytes a thread.
//
//===----------------------------------------------------------------------===//
#include "tessel/kernels/decode/Decode.h"

#include <algorithm>
#include <fmt/format.h>
#include <limits>

using namespace tessel;
using namespace tessel::kernels;

Program tessel::kernels::decodeCombine(const DecodeCombineConfig &c) {
  if (c.dtype != DType::f16 && c.dtype != DType::bf16 && c.dtype != DType::f32)
    throw Error(fmt::format("decode_combine: dtype={} is not f16, bf16 or f32", name(c.dtype)));
  if (c.headDim < 1 || c.rows < 1 || c.rows * c.headDim > 16384)
    throw Error(fmt::format("decode_combine: rows={} x head_dim={} is not 1 to 16384 elements",
                            c.rows, c.headDim));
  const double negInf = -std::numeric_limits<double>::infinity();
  const int64_t d = c.headDim, rows = c.rows;
  Program p("decode_combine");
  Expr splits = p.sym("S"), all = p.sym("R");
  Tensor partialO = p.tensor("partial_o", {splits, all, d}, DType::f32);
  Tensor partialLse = p.tensor("partial_lse", {splits, all}, DType::f32);
  Tensor o = p.tensor("o", {all, d}, c.dtype);
  p.kernel({ceil_div(all, rows)}, c.threads, [&](Expr bx) {
    Expr r0 = bx * rows;
    Buffer lse = alloc_fragment({rows}, DType::f32, "lse");
    Buffer top = alloc_fragment({rows}, DType::f32, "top");
    Buffer weight = alloc_fragment({rows}, DType::f32, "weight");
    Buffer total = alloc_fragment({rows}, DType::f32, "total");
    Buffer part = alloc_fragment({rows, d}, DType::f32, "part");
    Buffer acc = alloc_fragment({rows, d}, DType::f32, "acc");
    Buffer values = alloc_fragment({rows, d}, c.dtype, "o");
    fill(top, negInf);
    serial(splits, [&](Expr s) {
      copy(partialLse.tile({s, r0}, {drop, rows}), lse);
      parallel(rows, [&](Expr i) { top(i) = max(top(i), lse(i)); });
    });
    clear(total);
    clear(acc);
    serial(splits, [&](Expr s) {
      copy(partialLse.tile({s, r0}, {drop, rows}), lse);
      copy(partialO.tile({s, r0, 0}, {drop, rows, d}), part);
      // A split of no keys (lse -inf) weighs nothing, also when every
      // split of the row is empty (top -inf, where exp would be NaN).
      parallel(rows, [&](Expr i) {
        weight(i) = select(lse(i) == Expr(negInf), Expr(0.0), exp(lse(i) - top(i)));
        total(i) = total(i) + weight(i);
      });
      parallel(rows, d, [&](Expr i, Expr e) { acc(i, e) = acc(i, e) + weight(i) * part(i, e); });
    });
    parallel(rows, d, [&](Expr i, Expr e) {
      values(i, e) = cast(select(total(i) == Expr(0.0), Expr(0.0), acc(i, e) / total(i)), c.dtype);
    });
    copy(values, o.tile({r0, 0}, {rows, d}));
  });
  return p;
}
