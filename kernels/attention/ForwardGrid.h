//===- ForwardGrid.h - what every attention forward declares ----*- C++ -*-===//
//
// The three forward kernels (registers, tcgen05, warp-specialized tcgen05)
// take the same parameters and give each thread block the query rows of
// one head and sequence in the same way; they differ in how a tile is
// computed.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_FORWARDGRID_H
#define TESSEL_KERNELS_FORWARDGRID_H

#include "AttentionSequences.h"
#include "tessel/kernels/attention/Attention.h"
#include "tessel/dsl/Program.h"

#include <functional>
#include <optional>

namespace tessel::kernels {

/// The parameters every forward kernel starts with, in this order: the
/// inputs, O [batch, seqlen_q, heads_q, head_dim], LSE [batch, heads_q,
/// seqlen_q] and the batch's sequences.
struct ForwardTensors {
  AttentionInputs in;
  Tensor o, lse;
  Batch seqs;

  static ForwardTensors declare(Program &p, const AttentionConfig &c, int64_t headDim) {
    AttentionInputs in = AttentionInputs::declare(p, c.dtype, headDim, c.vTransposed);
    Tensor o = p.tensor("O", {in.batch, in.seqQ, in.headsQ, headDim}, attentionOutputType(c.dtype));
    Tensor lse = p.tensor("LSE", {in.batch, in.headsQ, in.seqQ}, DType::f32);
    Batch seqs = Batch::declare(p, c.varlen, in.batch, in.seqQ, "max_seqlen_q");
    return {in, o, lse, seqs};
  }
};

/// A thread block's query rows from `row0` of query head `head`, whose keys
/// and values are those of `kvHead`.
struct ForwardTile {
  Sequence queries, keys;
  Expr head, kvHead, row0;
  Expr sequence; // the batch entry, or a packed batch's sequence
};

/// FP8 scales read on the device (AttentionConfig::descales): Q's, K's and
/// V's of each (sequence, K/V head), each an f32 tensor with an offset (its
/// first scale's element, so that the buffer may start at the 16-byte
/// boundary below it) and a stride per sequence and per head (0
/// broadcasts), declared after v_scale as <x>_descale_offset,
/// <x>_descale_sequence_stride, <x>_descale_head_stride (index symbols),
/// <x>_descale [extent] for x in q, k, v.
class ForwardDescales {
public:
  static ForwardDescales declare(Program &p, const AttentionConfig &c) {
    ForwardDescales d;
    if (!c.descales) return d;
    for (const char *name : {"q", "k", "v"}) {
      std::string prefix = std::string(name) + "_descale";
      Expr offset = p.sym(prefix + "_offset");
      Expr sequenceStride = p.sym(prefix + "_sequence_stride");
      Expr headStride = p.sym(prefix + "_head_stride");
      Tensor values = p.tensor(prefix, {p.sym(prefix + "_extent")}, DType::f32);
      d.scales.push_back({values, offset, sequenceStride, headStride});
    }
    return d;
  }
  /// The softmax scale of the tile's head: `scale` times Q's and K's.
  Expr scores(const ForwardTile &t, Expr scale) const {
    return scales.empty() ? scale : scale * at(0, t) * at(1, t);
  }
  /// What multiplies O: `vScale` times V's.
  Expr values(const ForwardTile &t, Expr vScale) const {
    return scales.empty() ? vScale : vScale * at(2, t);
  }

private:
  struct Strided {
    Tensor values;
    Expr offset, sequenceStride, headStride;
  };
  Expr at(size_t which, const ForwardTile &t) const {
    const Strided &x = scales[which];
    return x.values(x.offset + t.sequence * x.sequenceStride + t.kvHead * x.headStride);
  }
  std::vector<Strided> scales; // q, k, v, or none
};

/// One block per `rows` query rows of a sequence and head (c.persistent: a
/// walk over them); `body` builds a block's tile. Diagnostics about the
/// kernel point at the caller.
inline void launchForwardGrid(Program &p, const AttentionConfig &c, const ForwardTensors &t,
                              int64_t rows, const std::function<void(const ForwardTile &)> &body,
                              SrcLoc loc = SrcLoc::current()) {
  const AttentionInputs &in = t.in;
  Expr rowBlocks = ceil_div(t.seqs.maxLength, rows);
  launchAttentionGrid(p, c.gridOrder, c.causal, rowBlocks, in.headsQ, t.seqs.sequences, c.threads,
                      [&](Expr bx, Expr h, Expr b) {
    Sequence sq = t.seqs.queries(b, in.seqQ), sk = t.seqs.keys(b, in.seqK);
    Expr kvHead = h / (in.headsQ / in.headsKv);
    // Causal: the last row blocks see the most keys; launching them first
    // leaves the short ones to fill the last wave.
    Expr row0 = (c.causal ? rowBlocks - 1 - bx : bx) * rows;
    body({sq, sk, h, kvHead, row0, b});
  }, loc, c.persistent);
}

/// The key blocks of `blockN` keys that the tile's `rows` queries walk.
/// Causal (key j visible to query i when j <= query_offset + i; top-left
/// aligned without an offset): the blocks right of the tile's last row are
/// skipped. A tile past its (packed) sequence's end walks none.
inline Expr keyBlocks(const AttentionConfig &c, const ForwardTile &t, int64_t rows, int64_t blockN,
                      std::optional<Expr> queryOffset = std::nullopt) {
  Expr blocks = ceil_div(t.keys.length, blockN);
  if (c.causal)
    blocks = min(blocks, ceil_div((queryOffset ? *queryOffset + t.row0 : t.row0) + rows, blockN));
  if (c.varlen) blocks = select(t.row0 < t.queries.length, blocks, Expr(0));
  return blocks;
}

/// The Q, K and V tiles in shared memory of a block that loads one K/V
/// block at a time.
struct ForwardOperands {
  Buffer q, k, v;

  static ForwardOperands allocate(const AttentionConfig &c, int64_t blockM, int64_t blockN) {
    Buffer q = alloc_shared({blockM, c.headDim}, c.dtype, "q_tile");
    Buffer k = alloc_shared({blockN, c.headDim}, c.dtype, "k_tile");
    Buffer v = c.vTransposed ? alloc_shared({c.headDim, blockN}, c.dtype, "v_t_tile")
                             : alloc_shared({blockN, c.headDim}, c.dtype, "v_tile");
    return {q, k, v};
  }
};

} // namespace tessel::kernels

#endif
