//===- Fp8Values.cpp - V^T in register order for the FP8 forward ---------===//
//
// The FP8 forward's second product, P x V, reads P from registers, where
// a thread holds the probabilities of keys 2q, 2q + 1, 8 + 2q and 9 + 2q
// of each 16 (the scores' accumulator layout) and the instruction reads
// them as four consecutive K values; and 8-bit wgmma reads B K-major only.
// So V is given to it transposed, [batch, heads_kv, head_dim, keys], the
// keys of each 16 in that order: key 8 b + 2 q + e at 4 q + 2 b + e. This
// kernel writes that once per call, in O(keys x head_dim), rather than
// each query block permuting each V tile in shared memory.
//
//===----------------------------------------------------------------------===//
#include "tessel/kernels/attention/Attention.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;

Program tessel::kernels::fp8Values(DType dtype, int64_t headDim) {
  if (dtype != DType::f8e4m3 && dtype != DType::f8e5m2)
    throw Error(fmt::format("fp8Values rearranges FP8 values (f8e4m3, f8e5m2), not {}", name(dtype)));
  if (headDim <= 0 || headDim % 16)
    throw Error(fmt::format("fp8Values: head_dim {} is not a positive multiple of 16", headDim));
  Program p("attention_fp8_values");
  Expr batch = p.sym("batch"), keys = p.sym("seqlen_k"), heads = p.sym("heads_kv");
  Tensor v = p.tensor("V", {batch, keys, heads, headDim}, dtype);
  Tensor vt = p.tensor("VT", {batch, heads, headDim, ceil_div(keys, 16) * 16}, dtype);
  const int64_t block = 128; // keys a block
  p.kernel({ceil_div(keys, block), heads, batch}, 256, [&](Expr bx, Expr h, Expr b) {
    Buffer rows = alloc_shared({block, headDim}, dtype, "v_rows");
    Buffer cols = alloc_shared({headDim, block}, dtype, "v_cols");
    // Rows past the keys arrive as zeros, which fill the last 16 of VT.
    // Consecutive threads read consecutive bytes of a row and write down
    // a column of the swizzled tile, which spreads them over 8 banks (by
    // columns, a warp's reads of one column would all hit one bank: 0.15
    // ms at 8k keys over 2 x 16 heads on an H100).
    copy(v.tile({b, bx * block, h, 0}, {drop, block, drop, headDim}), rows);
    parallel(block, headDim, [&](Expr key, Expr c) {
      cols(c, register_k_position(key)) = rows(key, c);
    });
    copy(cols, vt.tile({b, h, 0, bx * block}, {drop, drop, headDim, block}));
  });
  return p;
}
