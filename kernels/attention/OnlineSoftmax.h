//===- OnlineSoftmax.h - the forward kernels' running softmax ---*- C++ -*-===//
//
// A forward kernel walks a query tile's key blocks keeping, per query row,
// the running maximum m of its scores and the running sum l of exp(score -
// m). When a block raises m, l and the output accumulator O are multiplied
// by exp(m_old - m_new) (the correction) before the block's probabilities
// are added. Scores are kept in base 2: m is the maximum of scale * log2(e)
// * score (scale > 0 keeps the order), so each probability is one fused
// multiply-add and an exp2, a single MUFU op. The log-sum-exp written for
// the backward pass is in the natural base.
//
// The kernels hold a block's scores differently (a register fragment of the
// whole block, or tensor-memory rows read back in column chunks) and correct
// O in different places (in registers, in tensor memory by the same threads,
// or by a warpgroup of its own): the step comes in parts, called in this
// order for every block,
//
//   blockMax    once per chunk of the masked scores (the whole block: once)
//   advance     the new maximum, the correction factor, the rescaled sum
//   (the correction of O by `factor`, the kernel's own)
//   exponentiate once per chunk of the masked scores: P, added to the sum
//
// and `step` is that sequence for a block held whole in registers.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_ONLINESOFTMAX_H
#define TESSEL_KERNELS_ONLINESOFTMAX_H

#include "AttentionSequences.h"
#include "tessel/dsl/Program.h"

#include <functional>
#include <limits>
#include <optional>

namespace tessel::kernels {

/// log2(e): scores in base 2 are natural ones times this.
inline constexpr double kLog2e = 1.4426950408889634;
/// A masked score.
inline constexpr double kNegInf = -std::numeric_limits<double>::infinity();

/// The per-row state of the online softmax of `rows` query rows, each row's
/// elements held by one thread.
struct OnlineSoftmax {
  Buffer rowMax;   // m, scaled to base 2
  Buffer rowSum;   // l
  Buffer blockMax; // the block's maximum of the unscaled scores
  Buffer factor;   // exp2(m_old - m_new), what O is multiplied by
  // The overlapped register kernel computes P of a block whose rows may
  // have seen no visible key at all (see advance()); its P is shifted by
  // blockMax, which advance() sets to m, or 0 for such a row, rather than
  // by m itself.
  bool shiftByBlock = false;
  Expr scaleLog2 = 0; // scale * log2(e), set by begin()
  // P (and l with it) is 2^pBias times the probabilities: an FP8 P in
  // (0, 256] keeps FP8's normal range down to 2^-14 of the row's maximum,
  // where (0, 1] would round the small ones to FP8's subnormals or zero.
  // O / l is unchanged; the log-sum-exp takes it off.
  int pBias = 0;
  // exp2 with one register in this many on the FMA pipe (0: none), where
  // the special-function unit is what a step waits for.
  int64_t exp2FmaEvery = 0;

  /// The four fragments of `rows` f32 elements, `factor` named `factorName`.
  static OnlineSoftmax allocate(int64_t rows, const char *factorName, bool shiftByBlock = false,
                                int pBias = 0);

  /// Starts every row: m = -inf, l = 0, and `output` (the O accumulator,
  /// where given) zeroed; `scale` is the softmax scale.
  void begin(Expr scale, std::optional<Buffer> output = std::nullopt);
  /// Folds the row maxima of the masked scores `s` into blockMax, which the
  /// first chunk of a block starts afresh.
  void maxOf(const Buffer &s, bool first = true) const;
  /// m, `factor` and l for the block whose maxima are in blockMax.
  void advance() const;
  /// The probabilities exp2(s * scale * log2(e) - m) of the masked scores
  /// `s`, into `s` (f32) and `p` (the operand type), added to l.
  void exponentiate(const Buffer &s, const Buffer &p) const;
  /// The whole step on the masked scores `s` of a block, P into `p`;
  /// `correct` multiplies O by `factor`.
  void step(const Buffer &s, const Buffer &p, const std::function<void()> &correct) const;

  /// `factor` = 1 / l, the epilogue's O / l as a multiply per element (an
  /// IEEE division per element is about ten instructions). A row without
  /// keys has l = 0 and O = 0, and keeps O = 0.
  void reciprocalSums() const;
  /// The natural-base log-sum-exp of the rows [row, row + rows) of head
  /// `head` of sequence `sq`, into `lse` (blockMax is its scratch).
  void storeLse(const Sequence &sq, const Tensor &lse, Expr head, Expr row) const;
};

} // namespace tessel::kernels

#endif
