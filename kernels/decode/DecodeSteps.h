//===- DecodeSteps.h - what the decode kernels share ------------*- C++ -*-===//
//
// A decode block walks one sequence's keys (its share of them, split) in
// steps of block_n keys, each step's rows gathered from the pages its block
// table lists; masks the keys past the sequence's length; and ends with O
// and the log-sum-exp of its rows, whole (unsplit) or as a split's partial
// result for decodeCombine.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_DECODE_DECODESTEPS_H
#define TESSEL_KERNELS_DECODE_DECODESTEPS_H

#include "attention/OnlineSoftmax.h"
#include "tessel/dsl/Program.h"

#include <functional>
#include <optional>

namespace tessel::kernels {

/// The key steps one split of a sequence takes.
struct DecodeRange {
  Expr length = 0; // the sequence's keys (index)
  Expr first = 0;  // its first step
  Expr count = 0;  // its steps (0 for a split past the keys)

  /// Split `split` of `splits` of a sequence of `length` keys in steps of
  /// `blockN`: equal shares of the steps, the last ones shorter.
  static DecodeRange of(Expr length, int64_t blockN, Expr splits, Expr split);
};

/// Copies one page's rows into a window of a step's staged tile: `rows`
/// rows of cache page `page` from row `offset` into the tile's rows from
/// `at`.
using PageCopy = std::function<void(Expr page, Expr offset, int64_t rows, int64_t at)>;

/// The rows of keys [key0, key0 + blockN) of sequence `b`: one copy when a
/// page holds the step (pageSize a multiple of blockN), else one per page,
/// each into its window. Pages past the sequence's last repeat its last
/// page (their keys are masked), so that no table entry past the length is
/// read.
void copyKeyStep(const Tensor &blockTable, Expr b, const DecodeRange &range, Expr key0,
                 int64_t pageSize, int64_t blockN, const PageCopy &copyPage);

/// Scores of keys at or past the sequence's length to -inf.
void maskKeys(const Buffer &scores, Expr key0, Expr length);

/// Where a decode block's rows go: o [..., rows, dim] of the output type
/// when unsplit; partial_o f32 [S, ..., rows, dim] and partial_lse f32
/// [S, ..., rows] when split. `tile(t)` is the block's window of `t` (rows
/// past the block's own are bounded off).
struct DecodeOutputs {
  std::function<Buffer(const Tensor &)> oTile, partialOTile, partialLseTile;
  const Tensor *o = nullptr, *partialO = nullptr, *partialLse = nullptr;
};

/// O / l (zeros for a row of no keys) into the block's output; split, the
/// rows' natural log-sum-exp too (-inf for no keys). `accFactor`: a
/// shared buffer the row factors pass through where the accumulator's
/// warps split its rows differently from the scores'.
/// Every row is multiplied by `valueScale` too (an FP8 cache's V scale).
void storeDecodeRows(const OnlineSoftmax &softmax, const Buffer &acc, DType outType,
                     const DecodeOutputs &out, const std::optional<Buffer> &accFactor = {},
                     Expr valueScale = 1.0);

} // namespace tessel::kernels

#endif
