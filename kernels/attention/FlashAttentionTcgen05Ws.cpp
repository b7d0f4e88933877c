//===- FlashAttentionTcgen05Ws.cpp - warp-specialized sm_100a forward -----===//
//
// The `ws` form, in the FlashAttention-4 arrangement: two query tiles of 128
// rows in flight, so that the tensor core computes one tile's scores while
// the other tile's softmax runs. 512 threads in roles:
//
//   warps 0-3   softmax of query tile 0 (and its epilogue)
//   warps 4-7   softmax of query tile 1
//   warps 8-11  correction: O_t rescaled in tensor memory between products
//   warp 12     TMA loads: Q once, K and V per key block into `stages` slots
//   warp 13     MMA issue: S_t = Q_t K^T, O_t += P_t V (P over S, packed)
//
// Tensor memory: S_0, S_1 (block_n columns each) and O_0, O_1 (head_dim
// each), 512 columns at head_dim 128. Every hand-off is an mbarrier:
//
//   kv_full[s]  TMA bytes of K and V in slot s       load -> MMA
//   kv_empty[s] the MMAs reading slot s are done     MMA (commit) -> load
//   s_full[t]   S_t is computed                      MMA (commit) -> softmax t
//   p_full[t]   P_t is in tensor memory              softmax t -> MMA
//   rescale[t]  the block's row factors are shared   softmax t -> correction
//   o_full[t]   O_t += P_t V is done                 MMA (commit) -> correction, epilogue
//   o_ready[t]  O_t is rescaled                      correction -> MMA
//
// Each barrier completes once per key block, so the phase to wait for is
// the block's parity; every waiter has seen the phase before it (the chain
// of hand-offs keeps each barrier within one phase of its waiters). The
// MMA warp issues S_t of the next block right after P_t V of this one: the
// tensor core runs its MMAs in order, so S_t overwrites P_t only after the
// product has read it.
//
// The softmax reads S in column chunks twice (maxima, then P), each thread
// one row, so its registers stay within the 128 a thread has at 512.
//
//===----------------------------------------------------------------------===//
#include "AttentionMask.h"
#include "ForwardGrid.h"
#include "OnlineSoftmax.h"
#include "tessel/kernels/attention/Attention.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;

namespace {
constexpr int64_t kThreads = 512;
constexpr int64_t kRows = 128;  // query rows per tile, every tensor-memory lane
constexpr int64_t kChunk = 32;       // columns of O a thread holds at a time
constexpr int64_t kScoreChunk = 32;  // and of S (the softmax holds more beside them)
// setmaxnreg budgets (a warpgroup each; 2 x 184 + 72 + 72 = 512, the
// register file over 128 threads).
constexpr int64_t kSoftmaxRegisters = 184, kCorrectionRegisters = 72, kIssueRegisters = 72;

void checkConfig(const AttentionConfig &c, int64_t bn) {
  if (byteSize(c.dtype) == 1 || c.vTransposed)
    throw Error(fmt::format("the warp-specialized tcgen05 attention forward (variant=ws) takes f16 "
                            "and bf16 inputs, not {}; FP8 runs on variant=ss", name(c.dtype)));
  if (c.descales)
    throw Error("descales scale FP8 inputs, which run on variant=ss, not the warp-specialized "
                "tcgen05 forward");
  if (c.persistent)
    throw Error("a persistent attention forward is the register kernel's (variant=registers)");
  if (c.tmaStore)
    throw Error("tma_store on the attention forward is the register kernel's (variant=registers)");
  const int64_t d = c.headDim;
  if (d != 64 && d != 128)
    throw Error(fmt::format("the ws attention forward keeps two query tiles' S and O in tensor "
                            "memory (2 x block_n + 2 x head_dim of 512 columns): head_dim 64 or "
                            "128, not {}",
                            d));
  // (At 64 keys a block the softmax warpgroups spilled 4 bytes.)
  if (bn != 128)
    throw Error(fmt::format("the ws attention forward takes block_n 128, not {}", bn));
  if (c.blockM != kRows || c.threads != kThreads)
    throw Error(fmt::format("the ws attention forward runs two query tiles of 128 rows on 512 "
                            "threads (block_m 128, threads 512), not block_m {} on {} threads",
                            c.blockM, c.threads));
  if (c.overlap || c.streamedShards || c.queryOffset)
    throw Error("the ws attention forward has no `overlap`, streamed shards or query offset");
  // The MMA warp waits for block j + 1's keys before it issues block j's
  // last product, which releases block j's slot: one slot would deadlock.
  if (c.stages < 2)
    throw Error(fmt::format("the ws attention forward loads the next key block while this one's "
                            "products run: stages >= 2 K/V slots, not {}",
                            c.stages));
}

Expr parity(Expr phase) { return phase % 2; }

/// One thread block: a pair of query tiles, its shared and tensor memory
/// and barriers, and the roles over them.
class WsBlock {
public:
  WsBlock(const AttentionConfig &c, int64_t bn, const ForwardTensors &tensors,
          const ForwardTile &tile)
      : c(c), d(c.headDim), bn(bn), stages(c.stages), tensors(tensors), tile(tile),
        sq(tile.queries), sk(tile.keys), row0(tile.row0),
        qTiles{alloc_shared({kRows, d}, c.dtype, "q_tile0"),
               alloc_shared({kRows, d}, c.dtype, "q_tile1")},
        kSlots(alloc_shared_stages(stages, {bn, d}, c.dtype, "k_slots")),
        vSlots(alloc_shared_stages(stages, {bn, d}, c.dtype, "v_slots")),
        factors{alloc_shared({kRows}, DType::f32, "rescale0"),
                alloc_shared({kRows}, DType::f32, "rescale1")},
        scores{alloc_tmem({kRows, bn}, DType::f32, "scores0"),
               alloc_tmem({kRows, bn}, DType::f32, "scores1")},
        outs{alloc_tmem({kRows, d}, DType::f32, "out_acc0"),
             alloc_tmem({kRows, d}, DType::f32, "out_acc1")},
        probs{alias_tmem(scores[0], {kRows, bn}, c.dtype),
              alias_tmem(scores[1], {kRows, bn}, c.dtype)},
        qFull(alloc_barriers(1, 1, "q_full")), kvFull(alloc_barriers(stages, 1, "kv_full")),
        kvEmpty(alloc_barriers(stages, 1, "kv_empty")), sFull(alloc_barriers(2, 1, "s_full")),
        pFull(alloc_barriers(2, 4, "p_full")), rescaled(alloc_barriers(2, kRows, "rescale")),
        oFull(alloc_barriers(2, 1, "o_full")), oReady(alloc_barriers(2, kRows, "o_ready")),
        // Key blocks: the later tile's (causal: it sees the most keys); the
        // earlier tile's extra blocks are masked whole. None when the pair
        // of tiles starts past its (packed) sequence.
        blocks(keyBlocks(c, tile, 2 * kRows, bn)) {}

  void build() const {
    // Registers: the 128 a thread starts with at 512 threads, moved by
    // setmaxnreg to the softmax warpgroups (the last warpgroup only issues).
    role(3 * kRows, kRows, [&] {
      role(12 * 32, 32, [&] { loads(); });
      role(13 * 32, 32, [&] { issueProducts(); });
    }, kIssueRegisters);
    for (int t = 0; t < 2; ++t)
      role(t * kRows, kRows, [&] { softmax(t); }, kSoftmaxRegisters);
    role(2 * kRows, kRows, [&] { correction(); }, kCorrectionRegisters);
  }

private:
  /// The TMA loads: both Q tiles once, K and V per key block into the slots.
  void loads() const {
    const AttentionInputs &in = tensors.in;
    int64_t tileBytes = kRows * d * byteSize(c.dtype), kvBytes = 2 * bn * d * byteSize(c.dtype);
    if_(blocks > 0, [&] {
      mbarrier_expect_tx(qFull, 0, 2 * tileBytes);
      for (int t = 0; t < 2; ++t)
        copy_async(sq.rows(in.q, row0 + t * kRows, tile.head, kRows, d), qTiles[t], qFull, 0);
      serial(blocks, [&](Expr j) {
        Expr slot = j % stages;
        if_(j >= stages, [&] { mbarrier_wait(kvEmpty, slot, parity(j / stages - 1)); });
        mbarrier_expect_tx(kvFull, slot, kvBytes);
        copy_async(sk.rows(in.k, j * bn, tile.kvHead, bn, d), kSlots.stage(slot), kvFull, slot);
        copy_async(sk.rows(in.v, j * bn, tile.kvHead, bn, d), vSlots.stage(slot), kvFull, slot);
      });
    });
  }

  /// S_t = Q_t K_j^T, issued.
  void issueScores(int t, Expr j) const {
    gemm(qTiles[t], kSlots.stage(j % stages), scores[t],
         {.transpose_b = true, .clear_accum = true, .issue_only = true});
    mma_commit(sFull, t);
  }

  /// The MMA issue: every tile's S of the first block, then per block each
  /// tile's O += P V followed by its S of the next block.
  void issueProducts() const {
    if_(blocks > 0, [&] {
      mbarrier_wait(qFull, 0, 0);
      mbarrier_wait(kvFull, 0, 0);
      issueScores(0, 0);
      issueScores(1, 0);
      serial(blocks, [&](Expr j) {
        Expr next = j + 1;
        for (int t = 0; t < 2; ++t) {
          mbarrier_wait(pFull, t, parity(j));
          Buffer values = vSlots.stage(j % stages);
          if_(j > 0, [&] {
            mbarrier_wait(oReady, t, parity(j - 1));
            gemm(probs[t], values, outs[t], {.issue_only = true});
          }, [&] { gemm(probs[t], values, outs[t], {.clear_accum = true, .issue_only = true}); });
          mma_commit(oFull, t);
          // K_j and V_j are read once both tiles' products are done.
          if (t == 1) mma_commit(kvEmpty, j % stages);
          if_(next < blocks, [&] {
            if (t == 0) mbarrier_wait(kvFull, next % stages, parity(next / stages));
            issueScores(t, next);
          });
        }
      });
    });
  }

  /// The softmax of tile t, then its epilogue. The online softmax's step
  /// is taken in its parts, not whole (OnlineSoftmax::step): S is read in
  /// column chunks twice (for the maxima, then for P), and between the two
  /// the block's factors go to the correction warpgroup, which rescales O
  /// while P is computed.
  void softmax(int t) const {
    Expr rows = row0 + t * kRows;
    Buffer part = alloc_fragment({kRows, kScoreChunk}, DType::f32, "s_part");
    Buffer pPart = alloc_fragment({kRows, kScoreChunk}, c.dtype, "p_part");
    OnlineSoftmax rowsSoftmax = OnlineSoftmax::allocate(kRows, "factor");
    rowsSoftmax.begin(tensors.in.scale);
    auto maskedChunk = [&](Expr col0, int64_t at) {
      copy(scores[t].tile({0, at}, {kRows, kScoreChunk}), part);
      maskScores(part, col0 + at, rows, sk.length, c.causal, Expr(0));
    };
    serial(blocks, [&](Expr j) {
      Expr col0 = j * bn;
      mbarrier_wait(sFull, t, parity(j));
      for (int64_t at = 0; at < bn; at += kScoreChunk) {
        maskedChunk(col0, at);
        rowsSoftmax.maxOf(part, /*first=*/at == 0);
      }
      rowsSoftmax.advance();
      // The correction read the previous factors before o_ready's
      // phase j - 2 completed. That phase is already complete (S_t(j)
      // was issued after it); waiting on it makes the hand-back of the
      // shared factors an edge of its own, from the readers to this
      // writer.
      if_(j > 1, [&] { mbarrier_wait(oReady, t, parity(j - 2)); });
      if_(j > 0, [&] {
        copy(rowsSoftmax.factor, factors[t]);
        mbarrier_arrive_each(rescaled, t);
      });
      // P over S, chunk by chunk: chunk c of P (packed, half the
      // columns) lands on columns this thread has already read.
      for (int64_t at = 0; at < bn; at += kScoreChunk) {
        maskedChunk(col0, at);
        rowsSoftmax.exponentiate(part, pPart);
        copy(pPart, probs[t].tile({0, at}, {kRows, kScoreChunk}));
      }
      mbarrier_arrive(pFull, t);
    });
    epilogue(t, rows, rowsSoftmax);
  }

  /// The last product, then O / rowsum and the log-sum-exp. Waiting for
  /// the phase before the last first keeps the parity wait within one
  /// phase.
  void epilogue(int t, Expr rows, const OnlineSoftmax &rowsSoftmax) const {
    if_(blocks > 1, [&] { mbarrier_wait(oFull, t, parity(blocks - 2)); });
    if_(blocks > 0, [&] { mbarrier_wait(oFull, t, parity(blocks - 1)); });
    Buffer out = sq.rows(tensors.o, rows, tile.head, kRows, d);
    Buffer oPart = alloc_fragment({kRows, kChunk}, DType::f32, "out_part");
    const Buffer &rowSum = rowsSoftmax.rowSum;
    for (int64_t at = 0; at < d; at += kChunk) {
      copy(outs[t].tile({0, at}, {kRows, kChunk}), oPart);
      parallel(kRows, kChunk, [&](Expr i, Expr jj) {
        oPart(i, jj) = select(rowSum(i) == Expr(0.0), Expr(0.0), oPart(i, jj) / rowSum(i));
      });
      sq.store(oPart, out.tile({0, at}, {kRows, kChunk}), rows);
    }
    rowsSoftmax.storeLse(sq, tensors.lse, tile.head, rows);
  }

  /// The correction: each tile's O rescaled in tensor memory by the
  /// factors its softmax shares, between its products.
  void correction() const {
    Buffer part = alloc_fragment({kRows, kChunk}, DType::f32, "o_part");
    Buffer factor = alloc_fragment({kRows}, DType::f32, "o_factor");
    serial(blocks - 1, [&](Expr j0) {
      Expr j = j0 + 1;
      for (int t = 0; t < 2; ++t) {
        mbarrier_wait(rescaled, t, parity(j - 1));
        mbarrier_wait(oFull, t, parity(j - 1));
        copy(factors[t], factor);
        for (int64_t at = 0; at < d; at += kChunk) {
          Buffer chunk = outs[t].tile({0, at}, {kRows, kChunk});
          copy(chunk, part);
          parallel(kRows, kChunk, [&](Expr i, Expr jj) { part(i, jj) = part(i, jj) * factor(i); });
          copy(part, chunk);
        }
        mbarrier_arrive_each(oReady, t);
      }
    });
  }

  const AttentionConfig &c;
  const int64_t d, bn, stages;
  const ForwardTensors &tensors;
  const ForwardTile &tile;
  const Sequence &sq, &sk;
  Expr row0; // the first tile's first row
  Buffer qTiles[2], kSlots, vSlots;
  Buffer factors[2]; // a block's row factors, softmax t -> correction
  Buffer scores[2], outs[2], probs[2]; // tensor memory: S_t, O_t, P_t over S_t
  // The barriers of the hand-offs above. p_full takes one arrival per
  // softmax warp; the shared row factors go out (rescale) and come back
  // (o_ready) with every thread's own arrival (each releases its own writes
  // or reads).
  Buffer qFull, kvFull, kvEmpty, sFull, pFull, rescaled, oFull, oReady;
  Expr blocks;
};
} // namespace

Program tessel::kernels::flashAttentionForwardTcgen05Ws(const AttentionConfig &c) {
  const int64_t bn = c.blockN ? c.blockN : 128;
  checkConfig(c, bn);
  Program p(c.varlen ? "flash_attention_varlen_fwd" : "flash_attention_fwd");
  ForwardTensors tensors = ForwardTensors::declare(p, c, c.headDim);
  launchForwardGrid(p, c, tensors, 2 * kRows, [&](const ForwardTile &tile) {
    WsBlock(c, bn, tensors, tile).build();
  });
  return p;
}
