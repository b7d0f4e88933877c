//===- FlashAttentionForward.cpp - softmax(Q K^T) V, tile by tile ---------===//
//
// One thread block computes block_m rows of one query head. It walks the
// key/value blocks of its K/V head (shared by `heads_q / heads_kv` query
// heads under GQA) with a running row maximum and row sum (the online
// softmax, OnlineSoftmax.h), rescaling the output accumulator whenever the
// maximum grows. P goes from the score accumulator straight into the second
// product as its A operand, in registers. The row's log-sum-exp (natural
// base) is written for the backward pass.
//
//===----------------------------------------------------------------------===//
#include "AttentionMask.h"
#include "ForwardGrid.h"
#include "OnlineSoftmax.h"
#include "tessel/kernels/attention/Attention.h"

#include <fmt/format.h>
#include <functional>
#include <optional>

using namespace tessel;
using namespace tessel::kernels;

namespace {
// Shared memory per block on the targets with TMA stores (sm_90a, sm_100a),
// and what a kernel keeps beside its tiles (mbarriers, reduction scratch).
const int64_t kSharedBytes = 232448, kSharedSlack = 1024;

bool isFp8(DType t) { return t == DType::f8e4m3 || t == DType::f8e5m2; }

void checkConfig(const AttentionConfig &c) {
  if (byteSize(c.dtype) == 1 && !isFp8(c.dtype))
    throw Error(fmt::format("flash attention forward takes f16, bf16, f8e4m3 or f8e5m2 inputs, not {}",
                            name(c.dtype)));
  if (c.headDim != 64 && c.headDim != 128 && c.headDim != 256)
    throw Error(fmt::format("flash attention forward supports head_dim 64, 128 and 256, not {}",
                            c.headDim));
  if (c.queryOffset && (c.varlen || !c.causal))
    throw Error("flash attention forward: a query offset places queries for the causal mask; it "
                "needs `causal` and works without `varlen`");
  if (c.tmaStore && c.varlen)
    throw Error("flash attention forward: tma_store writes whole [block_m, head_dim] tiles of O; "
                "a packed (varlen) batch's tile would reach into the next sequence's rows");
  if (c.vTransposed && (!isFp8(c.dtype) || c.varlen || c.streamedShards))
    throw Error("flash attention forward: v_transposed (V as [batch, heads_kv, head_dim, keys] in "
                "register order) is for FP8 inputs of fixed-length batches without streamed "
                "shards");
  if (c.descales && !isFp8(c.dtype))
    throw Error("flash attention forward: descales scale FP8 inputs; these are " +
                std::string(name(c.dtype)));
  if (c.streamedShards && (c.overlap || c.varlen))
    throw Error("flash attention forward: streamed shards work without `overlap` and `varlen`");
}

/// Streamed shards' parameters (AttentionConfig::streamedShards): rows of
/// shard s of head group g may be read once arrivals[g * shards + s]
/// reaches `epoch`.
struct Arrivals {
  Expr shardRows, shards, headGroups, epoch;
  Tensor flags;

  static std::optional<Arrivals> declare(Program &p, const AttentionConfig &c) {
    if (!c.streamedShards) return std::nullopt;
    Expr shardRows = p.sym("shard_rows"), shards = p.sym("shards");
    Expr headGroups = p.sym("head_groups");
    Expr epoch = p.scalar("epoch", DType::i32);
    return Arrivals{shardRows, shards, headGroups, epoch,
                    p.tensor("arrivals", {headGroups * shards}, DType::i32)};
  }
};

/// One thread block: block_m query rows of a head against the keys of its
/// K/V head.
class ForwardBlock {
public:
  ForwardBlock(const AttentionConfig &c, int64_t blockN, const ForwardTensors &tensors,
               const std::optional<Arrivals> &arrivals, Expr queryOffset, Expr vScale,
               const ForwardDescales &descales, const ForwardTile &tile)
      : c(c), d(c.headDim), bm(c.blockM), bn(blockN), tensors(tensors), arrivals(arrivals),
        queryOffset(queryOffset), vScale(vScale), descales(descales), tile(tile),
        sq(tile.queries), sk(tile.keys),
        row0(tile.row0),
        qkv(ForwardOperands::allocate(c, bm, bn)),
        s(alloc_fragment({bm, bn}, DType::f32, "scores")),
        pr(alloc_fragment({bm, bn}, c.dtype, "probs")),
        acc(alloc_fragment({bm, d}, DType::f32, "out_acc")),
        softmax(OnlineSoftmax::allocate(bm, "rescale", /*shiftByBlock=*/c.overlap,
                                        /*pBias=*/isFp8(c.dtype) ? 8 : 0)) {
    softmax.exp2FmaEvery = c.exp2FmaEvery;
  }

  void build() {
    // The queries' rows (at their key position, the last shard for any
    // past the keys).
    if (arrivals) waitForShard(queryOffset + row0);
    copy(sq.rows(tensors.in.q, row0, tile.head, bm, d), qkv.q);
    softmax.begin(descales.scores(tile, tensors.in.scale), acc);
    Expr blocks = keyBlocks(c, tile, bm, bn, queryOffset);
    PipelineOptions loop{.warp_specialize = c.warpSpecialize};
    loop.pingpong = c.pingpong && c.threads == 256 && c.stages >= 2 &&
                    c.warpSpecialize != WarpSpecialize::off;
    if (!c.overlap) walkKeys(blocks, loop);
    else walkKeysOverlapped(blocks, loop);
    epilogue();
  }

private:
  /// Streamed shards: waits for the flag of the shard holding `row` for
  /// this head.
  void waitForShard(Expr row) const {
    Expr group = tile.head / (tensors.in.headsQ / arrivals->headGroups);
    Expr shard = min(row / arrivals->shardRows, arrivals->shards - 1);
    wait(arrivals->flags, {group * arrivals->shards + shard}, arrivals->epoch);
  }

  /// S = Q K^T of the K tile `keys`.
  void scores(const Buffer &keys) const {
    gemm(qkv.q, keys, s,
         {.transpose_b = true, .clear_accum = true, .policy = WarpPolicy::full_row});
  }

  /// Scores of the block at key col0 to probabilities: masked where the
  /// block reaches past the keys (or, causal, crosses the diagonal), then
  /// the online softmax's step (`correct` runs once the factors are known).
  void probabilities(Expr col0, const std::function<void()> &correct) const {
    maskScores(s, col0, row0, sk.length, c.causal, queryOffset);
    softmax.step(s, pr, correct);
  }

  /// O, row by row, times the softmax's factors.
  void rescaleOutput() const {
    parallel(bm, d, [&](Expr i, Expr j) { acc(i, j) = acc(i, j) * softmax.factor(i); });
  }

  void accumulateOutput() const {
    gemm(pr, qkv.v, acc,
         {.transpose_b = c.vTransposed, .policy = WarpPolicy::full_row,
          .b_register_k_order = c.vTransposed});
  }

  /// The V tile of keys [col0, col0 + block_n): rows of V, or columns of
  /// V^T in register order.
  void loadValues(Expr col0) const {
    if (!c.vTransposed) return copy(sk.rows(tensors.in.v, col0, tile.kvHead, bn, d), qkv.v);
    copy(tensors.in.v.tile({sk.batch, tile.kvHead, 0, col0}, {drop, drop, d, bn}), qkv.v);
  }

  void walkKeys(Expr blocks, const PipelineOptions &loop) const {
    pipelined(blocks, c.stages, loop, [&](Expr kt) {
      Expr col0 = kt * bn;
      // Before the loads, so that the loop issues the wait with them,
      // ahead. Only where the walk enters a shard (shards are whole
      // blocks): a flag load, barrier and proxy fence every step cost 12%.
      if (arrivals)
        if_(col0 % arrivals->shardRows == 0, [&] { waitForShard(col0); });
      copy(sk.rows(tensors.in.k, col0, tile.kvHead, bn, d), qkv.k);
      loadValues(col0);
      scores(qkv.k);
      probabilities(col0, [&] { rescaleOutput(); });
      accumulateOutput();
    });
  }

  // K runs one block ahead of V: step kt issues S_{kt+1} = Q K_{kt+1}^T
  // and O += P_kt V_kt back to back, then turns S_{kt+1} into P_{kt+1}
  // while the second product runs (FlashAttention-3's overlap within a
  // warpgroup). The last step loads a K block past the visible keys
  // (zeros past the tensor's end); its scores are fully masked and
  // change nothing where they are computed.
  void walkKeysOverlapped(Expr blocks, const PipelineOptions &loop) const {
    Buffer k0s = alloc_shared({bn, d}, c.dtype, "k0_tile");
    copy(sk.rows(tensors.in.k, 0, tile.kvHead, bn, d), k0s);
    scores(k0s);
    probabilities(0, [] {});
    pipelined(blocks, c.stages, loop, [&](Expr kt) {
      Expr col0 = kt * bn;
      copy(sk.rows(tensors.in.k, col0 + bn, tile.kvHead, bn, d), qkv.k);
      loadValues(col0);
      auto step = [&](bool next) {
        if (next) scores(qkv.k);
        rescaleOutput();
        accumulateOutput();
        if (next) probabilities(col0 + bn, [] {});
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

  /// O / l (the epilogue, which nothing overlaps), then the log-sum-exp.
  void epilogue() const {
    softmax.reciprocalSums();
    if (isFp8(c.dtype)) {
      Expr outScale = descales.values(tile, vScale);
      parallel(bm, [&](Expr i) { softmax.factor(i) = softmax.factor(i) * outScale; });
    }
    rescaleOutput();
    if (c.tmaStore) {
      // O is staged in a tile of its own where one fits beside the stages:
      // Q's tile is then written only by its load, which the producer can
      // issue for the next tile under this one's epilogue. Else (head_dim
      // 256, or three stages at 128) in Q's tile, which is done with.
      DType outType = attentionOutputType(c.dtype);
      int64_t tileBytes = bm * d * byteSize(c.dtype), block = bn * d * byteSize(c.dtype);
      int64_t outBytes = bm * d * byteSize(outType);
      int64_t staged = tileBytes + c.stages * 2 * block + (c.overlap ? block : 0);
      if (outType != c.dtype && staged + outBytes + kSharedSlack > kSharedBytes)
        throw Error("flash attention forward: tma_store stages O in a tile of its own for FP8 "
                    "inputs, which does not fit beside the stages; use fewer stages");
      Buffer out = staged + outBytes + kSharedSlack <= kSharedBytes
                       ? alloc_shared({bm, d}, outType, "o_tile")
                       : qkv.q;
      copy(acc, out);
      copy(out, sq.rows(tensors.o, row0, tile.head, bm, d));
    } else {
      sq.store(acc, sq.rows(tensors.o, row0, tile.head, bm, d), row0);
    }
    softmax.storeLse(sq, tensors.lse, tile.head, row0);
  }

  const AttentionConfig &c;
  const int64_t d, bm, bn;
  const ForwardTensors &tensors;
  const std::optional<Arrivals> &arrivals;
  Expr queryOffset; // key position of query row 0
  Expr vScale;      // FP8: V's scale, which multiplies O
  const ForwardDescales &descales;
  const ForwardTile &tile;
  const Sequence &sq, &sk;
  Expr row0;
  ForwardOperands qkv;
  Buffer s, pr, acc; // scores, P in the operand type, O
  OnlineSoftmax softmax;
};
} // namespace

Program tessel::kernels::flashAttentionForward(const AttentionConfig &c) {
  checkConfig(c);
  Program p(c.varlen            ? "flash_attention_varlen_fwd"
            : c.streamedShards ? "flash_attention_streamed_fwd"
                               : "flash_attention_fwd");
  const int64_t d = c.headDim, bn = forwardKeyBlock(c);
  // One block per block_m queries of a sequence and head.
  ForwardTensors tensors = ForwardTensors::declare(p, c, d);
  std::optional<Arrivals> arrivals = Arrivals::declare(p, c);
  // Key position of query row 0 (0 unless given).
  Expr queryOffset = c.queryOffset ? p.sym("query_offset") : Expr(0);
  Expr vScale = isFp8(c.dtype) ? p.scalar("v_scale", DType::f32) : Expr(1.0);
  ForwardDescales descales = ForwardDescales::declare(p, c);
  launchForwardGrid(p, c, tensors, c.blockM, [&](const ForwardTile &tile) {
    ForwardBlock(c, bn, tensors, arrivals, queryOffset, vScale, descales, tile).build();
  });
  return p;
}
