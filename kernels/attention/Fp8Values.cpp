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
// It moves 32-bit words (four FP8 values): word q of a 16-key group of
// column c is the c-th byte of keys 2q, 2q + 1, 8 + 2q and 9 + 2q, four
// shifts and masks of the words that hold them. Byte by byte, the index
// arithmetic of each element bound it (445 GB/s at 8k keys over 2 x 16
// heads on an H100).
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
  // The FP8 tensors' bytes as words: four values of a row of V, four keys
  // of a row of VT.
  const int64_t rowWords = headDim / 4;
  Tensor v = p.tensor("V", {batch, keys, heads, rowWords}, DType::i32);
  Tensor vt = p.tensor("VT", {batch, heads, headDim, ceil_div(keys, 16) * 4}, DType::i32);
  const int64_t block = 128; // keys a block
  p.kernel({ceil_div(keys, block), heads, batch}, 256, [&](Expr bx, Expr h, Expr b) {
    Buffer rows = alloc_shared({block, rowWords}, DType::i32, "v_rows");
    Buffer cols = alloc_shared({headDim, block / 4}, DType::i32, "v_cols");
    // Rows past the keys arrive as zeros, which fill the last 16 of VT.
    copy(v.tile({b, bx * block, h, 0}, {drop, block, drop, rowWords}), rows);
    // Consecutive threads take consecutive columns: they read the same or
    // neighbouring words of a row.
    parallel(block / 4, headDim, [&](Expr w, Expr c) {
      Expr first = w / 4 * 16 + w % 4 * 2, word = c / 4, shift = c % 4 * 8;
      auto byte = [&](Expr key) { return rows(key, word) >> shift & 255; };
      cols(c, w) = byte(first) | byte(first + 1) << 8 | byte(first + 8) << 16 |
                   byte(first + 9) << 24;
    });
    copy(cols, vt.tile({b, h, 0, bx * (block / 4)}, {drop, drop, headDim, block / 4}));
  });
  return p;
}
