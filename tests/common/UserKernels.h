//===- UserKernels.h - kernels written as a user would ----------*- C++ -*-===//
//
// Small kernels outside the library that exercise what the library's own
// kernels never did; the unit tests compile them for every target and the
// GPU tests run them.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TESTS_USERKERNELS_H
#define TESSEL_TESTS_USERKERNELS_H

#include "tessel/dsl/Program.h"

#include <cmath>
#include <vector>

namespace tessel::test {

/// out[i] = max_j (q k^T)[i, j] over N keys, with the row maximum taken
/// across warps (full_col splits the columns over them) inside a pipelined
/// loop that sm_90a warp-specializes.
inline Program reduceInConsumer() {
  Program p("reduce_in_consumer");
  Expr n = p.sym("N");
  Tensor q = p.tensor("q", {16, 64}, DType::bf16), k = p.tensor("k", {n, 64}, DType::bf16);
  Tensor out = p.tensor("out", {16}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer qs = alloc_shared({16, 64}, DType::bf16), ks = alloc_shared({64, 64}, DType::bf16);
    Buffer s = alloc_fragment({16, 64}, DType::f32), m = alloc_fragment({16}, DType::f32);
    copy(q.tile({0, 0}, {16, 64}), qs);
    fill(m, -INFINITY);
    pipelined(ceil_div(n, 64), 2, [&](Expr kt) {
      copy(k.tile({kt * 64, 0}, {64, 64}), ks);
      gemm(qs, ks, s, {.transpose_b = true, .clear_accum = true, .policy = WarpPolicy::full_col});
      reduce_max(s, m, 1, /*clear=*/false);
    });
    copy(m, out.tile({0}, {16}));
  });
  return p;
}

/// Where offsetRowsSum's first row comes from: a serial scan into local
/// memory, a conditional on a symbol, or an element of a shared tile.
enum class RowSource { localScan, conditional, sharedRead };

inline const char *name(RowSource s) {
  switch (s) {
  case RowSource::localScan: return "serial scan into alloc_local";
  case RowSource::conditional: return "if_ before the loop";
  default: return "element of a shared tile";
  }
}

/// y = sum over k < 4 of x[row0 + 64k .. +64, :], with row0 computed before
/// the pipelined loop (2 stages, 4 iterations) that loads the tiles.
inline Program offsetRowsSum(RowSource source) {
  Program p("offset_rows_sum");
  Expr n = p.sym("N");
  Tensor x = p.tensor("x", {n, 64}, DType::bf16), off = p.tensor("off", {4}, DType::i32);
  Tensor y = p.tensor("y", {64, 64}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer base = alloc_local({1}, DType::i32, "base");
    Expr row0 = 0;
    if (source == RowSource::localScan) {
      base(0) = 0;
      serial(4, [&](Expr i) { base(0) = base(0) + off(i); });
      row0 = cast(base(0), DType::index);
    } else if (source == RowSource::conditional) {
      base(0) = 0;
      if_(n > 256, [&] { base(0) = 128; });
      row0 = cast(base(0), DType::index);
    } else {
      Buffer offsets = alloc_shared({4}, DType::i32, "offsets");
      copy(off.tile({0}, {4}), offsets);
      row0 = cast(offsets(2), DType::index);
    }
    Buffer s = alloc_shared({64, 64}, DType::bf16);
    Buffer acc = alloc_fragment({64, 64}, DType::f32);
    clear(acc);
    pipelined(4, 2, [&](Expr k) {
      copy(x.tile({row0 + k * 64, 0}, {64, 64}), s);
      parallel(64, 64, [&](Expr i, Expr j) { acc(i, j) = acc(i, j) + cast(s(i, j), DType::f32); });
    });
    copy(acc, y.tile({0, 0}, {64, 64}));
  });
  return p;
}

/// The row offsetRowsSum starts at for `rows` rows and offsets `off`.
inline int64_t expectedRowStart(RowSource source, int64_t rows, const std::vector<float> &off) {
  switch (source) {
  case RowSource::localScan: return int64_t(off[0] + off[1] + off[2] + off[3]);
  case RowSource::conditional: return rows > 256 ? 128 : 0;
  default: return int64_t(off[2]);
  }
}

} // namespace tessel::test

#endif
