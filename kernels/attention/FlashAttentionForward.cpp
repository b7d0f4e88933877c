//===- FlashAttentionForward.cpp - softmax(Q K^T) V, tile by tile ---------===//
//
// One thread block computes block_m rows of one query head. It walks the
// key/value blocks of its K/V head (shared by `heads_q / heads_kv` query
// heads under GQA) with a running row maximum and row sum (the online
// softmax), rescaling the output accumulator whenever the maximum grows.
// Scores are kept in base 2 (scale * log2(e)) so that exp2 is one MUFU op.
// P goes from the score accumulator straight into the second product as its
// A operand, in registers. The row's log-sum-exp (natural base) is written
// for the backward pass.
//
//===----------------------------------------------------------------------===//
#include "AttentionMask.h"
#include "AttentionSequences.h"
#include "tessel/kernels/attention/Attention.h"

#include <cmath>
#include <functional>
#include <fmt/format.h>
#include <limits>
#include <optional>

using namespace tessel;

namespace {
const double kLog2e = 1.4426950408889634;
const double kNegInf = -std::numeric_limits<double>::infinity();
// Shared memory per block on the targets with TMA stores (sm_90a, sm_100a),
// and what a kernel keeps beside its tiles (mbarriers, reduction scratch).
const int64_t kSharedBytes = 232448, kSharedSlack = 1024;
} // namespace

Program tessel::kernels::flashAttentionForward(const AttentionConfig &c) {
  if (c.headDim != 64 && c.headDim != 128 && c.headDim != 256)
    throw Error(fmt::format("flash attention forward supports head_dim 64, 128 and 256, not {}",
                            c.headDim));
  if (c.queryOffset && (c.varlen || !c.causal))
    throw Error("flash attention forward: a query offset places queries for the causal mask; it "
                "needs `causal` and works without `varlen`");
  if (c.tmaStore && c.varlen)
    throw Error("flash attention forward: tma_store writes whole [block_m, head_dim] tiles of O; "
                "a packed (varlen) batch's tile would reach into the next sequence's rows");
  if (c.streamedShards && (c.overlap || c.varlen))
    throw Error("flash attention forward: streamed shards work without `overlap` and `varlen`");
  Program p(c.varlen            ? "flash_attention_varlen_fwd"
            : c.streamedShards ? "flash_attention_streamed_fwd"
                               : "flash_attention_fwd");
  const int64_t d = c.headDim, bm = c.blockM, bn = c.blockN ? c.blockN : d > 128 ? 64 : 128;
  auto [batch, seqQ, seqK, headsQ, headsKv, scale, q, k, v] = AttentionInputs::declare(p, c.dtype, d);
  Tensor o = p.tensor("O", {batch, seqQ, headsQ, d}, c.dtype);
  Tensor lse = p.tensor("LSE", {batch, headsQ, seqQ}, DType::f32);
  // One block per block_m queries of a sequence and head.
  Batch seqs = Batch::declare(p, c.varlen, batch, seqQ, "max_seqlen_q");
  struct Arrivals {
    Expr shardRows, shards, headGroups, epoch;
    Tensor flags;
  };
  std::optional<Arrivals> arrivals;
  if (c.streamedShards) {
    Expr shardRows = p.sym("shard_rows"), shards = p.sym("shards");
    Expr headGroups = p.sym("head_groups");
    Expr epoch = p.scalar("epoch", DType::i32);
    arrivals = Arrivals{shardRows, shards, headGroups, epoch,
                        p.tensor("arrivals", {headGroups * shards}, DType::i32)};
  }
  // Key position of query row 0 (0 unless given).
  Expr queryOffset = c.queryOffset ? p.sym("query_offset") : Expr(0);

  Expr rowBlocks = ceil_div(seqs.maxLength, bm);
  launchAttentionGrid(p, c.gridOrder, c.causal, rowBlocks, headsQ, seqs.sequences, c.threads,
                      [&](Expr bx, Expr h, Expr b) {
    Sequence sq = seqs.queries(b, seqQ), sk = seqs.keys(b, seqK);
    Expr kvHead = h / (headsQ / headsKv);
    // Causal: the last row blocks see the most keys; launching them first
    // leaves the short ones to fill the last wave.
    Expr row0 = (c.causal ? rowBlocks - 1 - bx : bx) * bm;
    Buffer qs = alloc_shared({bm, d}, c.dtype, "q_tile");
    Buffer ks = alloc_shared({bn, d}, c.dtype, "k_tile");
    Buffer vs = alloc_shared({bn, d}, c.dtype, "v_tile");
    Buffer s = alloc_fragment({bm, bn}, DType::f32, "scores");
    Buffer pr = alloc_fragment({bm, bn}, c.dtype, "probs");
    Buffer acc = alloc_fragment({bm, d}, DType::f32, "out_acc");
    Buffer rowMax = alloc_fragment({bm}, DType::f32, "row_max");
    Buffer rowSum = alloc_fragment({bm}, DType::f32, "row_sum");
    Buffer tileMax = alloc_fragment({bm}, DType::f32, "tile_max");
    Buffer rescale = alloc_fragment({bm}, DType::f32, "rescale");

    // Streamed shards: the flag of the shard holding `row` for this head.
    auto waitForShard = [&](Expr row) {
      Expr group = h / (headsQ / arrivals->headGroups);
      Expr shard = min(row / arrivals->shardRows, arrivals->shards - 1);
      wait(arrivals->flags, {group * arrivals->shards + shard}, arrivals->epoch);
    };
    // The queries' rows (at their key position, the last shard for any
    // past the keys).
    if (arrivals) waitForShard(queryOffset + row0);
    copy(sq.rows(q, row0, h, bm, d), qs);
    fill(rowMax, kNegInf);
    clear(rowSum);
    clear(acc);
    Expr scaleLog2 = scale * kLog2e;
    // Causal (key j visible to query i when j <= query_offset + i; top-left
    // aligned without an offset): the blocks right of this block's last row
    // are skipped. A block past its (packed) sequence's end runs no
    // iterations.
    Expr blocks = ceil_div(sk.length, bn);
    if (c.causal) blocks = min(blocks, ceil_div(queryOffset + row0 + bm, bn));
    if (c.varlen) blocks = select(row0 < sq.length, blocks, Expr(0));
    // Scores of the block at key col0 to probabilities: masked where the
    // block reaches past the keys (or, causal, crosses the diagonal), the
    // running maximum and sum updated, `rescale` set for the accumulator
    // (`thenRescaled` runs once it is known). The maximum is kept scaled
    // (scale > 0 keeps the order), so each probability is one fused
    // multiply-add and an exp2.
    auto softmax = [&](Expr col0, const std::function<void()> &thenRescaled) {
      maskScores(s, col0, row0, sk.length, c.causal, queryOffset);
      reduce_max(s, tileMax, 1);
      parallel(bm, [&](Expr i) {
        Expr next = max(rowMax(i), tileMax(i) * scaleLog2);
        // A row with nothing visible yet keeps max -inf; exp2(-inf - -inf)
        // would be NaN. (Only the overlapped prologue can see no key at all;
        // its scores are then shifted by 0.)
        rescale(i) = select(next == Expr(kNegInf), Expr(1.0), exp2(rowMax(i) - next));
        rowMax(i) = next;
        if (c.overlap) tileMax(i) = select(next == Expr(kNegInf), Expr(0.0), next);
        rowSum(i) = rowSum(i) * rescale(i);
      });
      thenRescaled();
      Buffer shift = c.overlap ? tileMax : rowMax;
      parallel(bm, bn, [&](Expr i, Expr j) {
        s(i, j) = exp2(s(i, j) * scaleLog2 - shift(i));
        pr(i, j) = cast(s(i, j), c.dtype);
      });
      reduce_sum(s, rowSum, 1, /*clear=*/false);
    };
    auto rescaleOutput = [&] {
      parallel(bm, d, [&](Expr i, Expr j) { acc(i, j) = acc(i, j) * rescale(i); });
    };
    GemmOptions scores{.transpose_b = true, .clear_accum = true, .policy = WarpPolicy::full_row};
    PipelineOptions loop{.warp_specialize = c.warpSpecialize};
    loop.pingpong = c.pingpong && c.threads == 256 && c.stages >= 2 &&
                    c.warpSpecialize != WarpSpecialize::off;
    if (!c.overlap) {
      pipelined(blocks, c.stages, loop, [&](Expr kt) {
        Expr col0 = kt * bn;
        // Before the loads, so that the loop issues the wait with them,
        // ahead. Only where the walk enters a shard (shards are whole
        // blocks): a flag load, barrier and proxy fence every step cost 12%.
        if (arrivals)
          if_(col0 % arrivals->shardRows == 0, [&] { waitForShard(col0); });
        copy(sk.rows(k, col0, kvHead, bn, d), ks);
        copy(sk.rows(v, col0, kvHead, bn, d), vs);
        gemm(qs, ks, s, scores);
        softmax(col0, rescaleOutput);
        gemm(pr, vs, acc, {.policy = WarpPolicy::full_row});
      });
    } else {
      // K runs one block ahead of V: step kt issues S_{kt+1} = Q K_{kt+1}^T
      // and O += P_kt V_kt back to back, then turns S_{kt+1} into P_{kt+1}
      // while the second product runs (FlashAttention-3's overlap within a
      // warpgroup). The last step loads a K block past the visible keys
      // (zeros past the tensor's end); its scores are fully masked and
      // change nothing where they are computed.
      Buffer k0s = alloc_shared({bn, d}, c.dtype, "k0_tile");
      copy(sk.rows(k, 0, kvHead, bn, d), k0s);
      gemm(qs, k0s, s, scores);
      softmax(0, [] {});
      pipelined(blocks, c.stages, loop, [&](Expr kt) {
        Expr col0 = kt * bn;
        copy(sk.rows(k, col0 + bn, kvHead, bn, d), ks);
        copy(sk.rows(v, col0, kvHead, bn, d), vs);
        auto step = [&](bool next) {
          if (next) gemm(qs, ks, s, scores);
          rescaleOutput();
          gemm(pr, vs, acc, {.policy = WarpPolicy::full_row});
          if (next) softmax(col0 + bn, [] {});
        };
        // The last step has no next block: its scores (all masked) would
        // cost a product and a softmax per tile, a large share of a tile
        // of a few key blocks. Each branch is straight-line code, which
        // ptxas needs to keep the wgmmas in flight (a product under a
        // condition of its own is serialized, C7515). At head_dim 256 the
        // accumulator holds 128 of the 240 registers and the two copies of
        // the step spill; there a tile has twice the (64-key) steps, so the
        // extra product costs half as much, and the step stays whole.
        if (d <= 128)
          if_(kt + 1 < blocks, [&] { step(true); }, [&] { step(false); });
        else
          step(true);
      });
    }
    // O / rowsum as one reciprocal per row and a multiply per element: an
    // IEEE division per element was ~10 instructions each, the largest part
    // of the epilogue, which nothing overlaps (a row without keys has an
    // accumulator of zeros and stays 0).
    parallel(bm, [&](Expr i) {
      rescale(i) = select(rowSum(i) == Expr(0.0), Expr(0.0), Expr(1.0) / rowSum(i));
    });
    parallel(bm, d, [&](Expr i, Expr j) { acc(i, j) = acc(i, j) * rescale(i); });
    if (c.tmaStore) {
      // O is staged in a tile of its own where one fits beside the stages:
      // Q's tile is then written only by its load, which the producer can
      // issue for the next tile under this one's epilogue. Else (head_dim
      // 256, or three stages at 128) in Q's tile, which is done with.
      int64_t tile = bm * d * byteSize(c.dtype), block = bn * d * byteSize(c.dtype);
      int64_t staged = tile + c.stages * 2 * block + (c.overlap ? block : 0);
      Buffer out = staged + tile + kSharedSlack <= kSharedBytes
                       ? alloc_shared({bm, d}, c.dtype, "o_tile")
                       : qs;
      copy(acc, out);
      copy(out, sq.rows(o, row0, h, bm, d));
    } else {
      sq.store(acc, sq.rows(o, row0, h, bm, d), row0);
    }
    parallel(bm, [&](Expr i) { tileMax(i) = rowMax(i) / kLog2e + log(rowSum(i)); });
    sq.store(tileMax, sq.vector(lse, h, row0, bm), row0);
  }, SrcLoc::current(), c.persistent);
  return p;
}
