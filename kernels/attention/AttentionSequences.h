//===- AttentionSequences.h - where a block's sequence lies -----*- C++ -*-===//
//
// Attention kernels take BSHD tensors [batch, seqlen, heads, dim]. A
// variable-length batch packs its sequences' rows into one sequence of a
// batch of one, [1, total, heads, dim], and sequence b is rows
// cu_seqlens[b] .. cu_seqlens[b + 1]; lengths are kernel arguments, so new
// lengths do not recompile. Row vectors (LSE, delta) are [batch, heads,
// seqlen] in the same way.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_ATTENTIONSEQUENCES_H
#define TESSEL_KERNELS_ATTENTIONSEQUENCES_H

#include "tessel/kernels/attention/Attention.h"
#include "tessel/dsl/Program.h"

#include <functional>

namespace tessel::kernels {

struct Sequence {
  Expr batch;  // index into the tensors' batch dimension (0 when packed)
  Expr start;  // first row of the sequence
  Expr length; // its rows
  bool packed = false;

  /// Sequence `b` of a fixed-length batch.
  static Sequence fixed(Expr b, Expr seqlen) { return {b, 0, seqlen, false}; }
  /// Sequence `b` of a packed batch with prefix sums `cuSeqlens` (int32).
  static Sequence packedAt(const Tensor &cuSeqlens, Expr b) {
    Expr start = cast(cuSeqlens(b), DType::index);
    return {0, start, cast(cuSeqlens(b + 1), DType::index) - start, true};
  }

  /// Rows [row, row + block) of head `head`: a [block, dim] tile.
  Buffer rows(const Tensor &t, Expr row, Expr head, int64_t block, int64_t dim) const {
    return t.tile({batch, start + row, head, 0}, {drop, block, drop, dim});
  }
  /// Elements [row, row + block) of a [batch, heads, seqlen] row vector.
  Buffer vector(const Tensor &t, Expr head, Expr row, int64_t block) const {
    return t.tile({batch, head, start + row}, {drop, drop, block});
  }
  /// A TMA box starts on a 16-byte boundary, and a packed sequence's rows
  /// start anywhere: a row vector tile of a packed batch starts at the
  /// 4-element boundary at or below `row` and is kAlignPad longer, and row +
  /// i is its element i + shift. A fixed batch's tile is exact (shift 0).
  static constexpr int64_t kAlignPad = 4; // 16 bytes of f32
  struct AlignedVector {
    Buffer tile;
    Expr shift;
  };
  AlignedVector alignedVector(const Tensor &t, Expr head, Expr row, int64_t block) const {
    if (!packed) return {vector(t, head, row, block), Expr(0)};
    Expr first = start + row;
    Expr aligned = first / kAlignPad * kAlignPad;
    return {t.tile({batch, head, aligned}, {drop, drop, block + kAlignPad}), first - aligned};
  }
  /// The length of alignedVector's tile.
  int64_t alignedVectorLength(int64_t block) const { return packed ? block + kAlignPad : block; }

  /// Writes `frag` to `dst` (a tile from rows() or vector() at `row`). In a
  /// packed batch the rows past the sequence belong to the next one and are
  /// left alone; in a fixed batch they lie past the tensor and are dropped.
  void store(const Buffer &frag, const Buffer &dst, Expr row) const {
    if (!packed) return copy(frag, dst);
    if (frag.rank() == 1) {
      parallel(frag.shape()[0], [&](Expr i) {
        if_(row + i < length, [&] { dst(i) = cast(frag(i), dst.dtype()); });
      });
      return;
    }
    parallel(frag.shape()[0], frag.shape()[1], [&](Expr i, Expr j) {
      if_(row + i < length, [&] { dst(i, j) = cast(frag(i, j), dst.dtype()); });
    });
  }
};

/// The parameters every attention kernel starts with, in this order:
/// extents, the softmax scale, and Q, K, V ([batch, seqlen, heads, dim]).
struct AttentionInputs {
  Expr batch, seqQ, seqK, headsQ, headsKv, scale;
  Tensor q, k, v;

  /// With `vTransposed`, V is [batch, heads_kv, head_dim, seqlen_k rounded
  /// up to 16] (AttentionConfig::vTransposed).
  static AttentionInputs declare(Program &p, DType dtype, int64_t headDim,
                                 bool vTransposed = false) {
    // Braced initialisers run left to right: the parameters keep this order.
    Expr batch = p.sym("batch"), seqQ = p.sym("seqlen_q"), seqK = p.sym("seqlen_k");
    Expr headsQ = p.sym("heads_q"), headsKv = p.sym("heads_kv");
    Expr scale = p.scalar("scale", DType::f32);
    return {batch,
            seqQ,
            seqK,
            headsQ,
            headsKv,
            scale,
            p.tensor("Q", {batch, seqQ, headsQ, headDim}, dtype),
            p.tensor("K", {batch, seqK, headsKv, headDim}, dtype),
            vTransposed
                ? p.tensor("V", {batch, headsKv, headDim, ceil_div(seqK, 16) * 16}, dtype)
                : p.tensor("V", {batch, seqK, headsKv, headDim}, dtype)};
  }
};

/// The sequences of a batch as kernel parameters: for a packed batch, the
/// query and key prefix sums (`cu_entries` = sequences + 1 of each) and the
/// longest sequence on the side that sizes the grid (`maxName`).
struct Batch {
  bool packed = false;
  Expr sequences;  // grid extent over sequences
  Expr maxLength;  // grid extent over the gridded side's rows
  Tensor cuQ, cuK; // packed only

  static Batch declare(Program &p, bool packed, Expr batch, Expr seqlen, const char *maxName) {
    if (!packed) return {false, batch, seqlen, {}, {}};
    Expr entries = p.sym("cu_entries");
    Expr maxLength = p.sym(maxName);
    Tensor cuQ = p.tensor("cu_seqlens_q", {entries}, DType::i32);
    Tensor cuK = p.tensor("cu_seqlens_k", {entries}, DType::i32);
    return {true, entries - 1, maxLength, cuQ, cuK};
  }
  /// Sequence `b`'s queries and keys (fixed batches: seqlen_q, seqlen_k).
  Sequence queries(Expr b, Expr seqQ) const {
    return packed ? Sequence::packedAt(cuQ, b) : Sequence::fixed(b, seqQ);
  }
  Sequence keys(Expr b, Expr seqK) const {
    return packed ? Sequence::packedAt(cuK, b) : Sequence::fixed(b, seqK);
  }
};

/// One block per (row block, head, sequence), launched in `order`; `body`
/// gets them in that order whatever the grid's. Diagnostics about the
/// kernel point at the caller.
/// `walk`: one block per resident slot walks the (row block, head,
/// sequence) tiles (persistent()), in the grid's launch order or, causal,
/// longest row blocks first, so a warp-specialized producer loads the next
/// tile's first K/V stages while the consumers finish the current tile.
inline void launchAttentionGrid(Program &p, GridOrder order, bool causal, Expr rowBlocks,
                                Expr heads, Expr sequences, int threads,
                                const std::function<void(Expr, Expr, Expr)> &body,
                                SrcLoc loc = SrcLoc::current(), bool walk = false) {
  if (order == GridOrder::automatic) order = causal ? GridOrder::heads : GridOrder::blocks;
  bool blocksFirst = order == GridOrder::blocks;
  std::vector<Expr> grid = blocksFirst ? std::vector<Expr>{rowBlocks, heads, sequences}
                                       : std::vector<Expr>{heads, rowBlocks, sequences};
  auto tile = [&](Expr x, Expr y, Expr z) {
    if (blocksFirst) body(x, y, z);
    else body(y, x, z);
  };
  if (!walk) return p.kernel(grid, threads, tile, loc);
  // A causal walk takes every head's and sequence's longest row block
  // before any shorter one (the body maps block 0 to the last rows), in
  // rounds of alternating direction, so each block's share of the work
  // evens out by the end.
  bool longestFirst = causal && order == GridOrder::heads;
  std::vector<Expr> tiles = longestFirst ? std::vector<Expr>{heads, sequences, rowBlocks} : grid;
  p.kernel(
      grid, threads,
      [&](Expr, Expr, Expr) {
        persistent(tiles, longestFirst ? TileWalk::serpentine : TileWalk::round_robin,
                   [&](std::vector<Expr> t) {
          if (longestFirst) body(t[2], t[0], t[1]);
          else tile(t[0], t[1], t[2]);
        }, loc);
      },
      loc);
}

} // namespace tessel::kernels

#endif
