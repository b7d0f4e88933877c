//===- AttentionMask.h - the score mask of a key block ----------*- C++ -*-===//
#ifndef TESSEL_KERNELS_ATTENTIONMASK_H
#define TESSEL_KERNELS_ATTENTIONMASK_H

#include "tessel/dsl/Program.h"

#include <limits>

namespace tessel::kernels {

/// Sets to -inf the scores s [block_m, block_n] of the key block at col0
/// that no query row0 + i may see: keys past `keys`, and (causal) keys past
/// the query's position query_offset + row0 + i. Only a block that reaches
/// past the last key or the first query's diagonal pays for it.
inline void maskScores(const Buffer &s, Expr col0, Expr row0, Expr keys, bool causal,
                       Expr queryOffset) {
  const double negInf = -std::numeric_limits<double>::infinity();
  int64_t bm = s.shape()[0], bn = s.shape()[1];
  Expr lastVisible = causal ? min(keys, queryOffset + row0 + 1) : keys;
  if_(col0 + bn > lastVisible, [&] {
    parallel(bm, bn, [&](Expr i, Expr j) {
      Expr visible = col0 + j < keys;
      if (causal) visible = visible && col0 + j <= queryOffset + row0 + i;
      s(i, j) = select(visible, s(i, j), Expr(negInf));
    });
  });
}

} // namespace tessel::kernels

#endif
