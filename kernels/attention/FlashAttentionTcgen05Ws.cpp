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
#include "AttentionSequences.h"
#include "tessel/kernels/attention/Attention.h"

#include <fmt/format.h>
#include <limits>

using namespace tessel;

namespace {
const double kLog2e = 1.4426950408889634;
const double kNegInf = -std::numeric_limits<double>::infinity();
constexpr int64_t kThreads = 512;
constexpr int64_t kRows = 128;  // query rows per tile, every tensor-memory lane
constexpr int64_t kChunk = 32;       // columns of O a thread holds at a time
constexpr int64_t kScoreChunk = 32;  // and of S (the softmax holds more beside them)
// setmaxnreg budgets (a warpgroup each; 2 x 184 + 72 + 72 = 512, the
// register file over 128 threads).
constexpr int64_t kSoftmaxRegisters = 184, kCorrectionRegisters = 72, kIssueRegisters = 72;
} // namespace

Program tessel::kernels::flashAttentionForwardTcgen05Ws(const AttentionConfig &c) {
  if (c.persistent)
    throw Error("a persistent attention forward is the register kernel's (variant=registers)");
  if (c.tmaStore)
    throw Error("tma_store on the attention forward is the register kernel's (variant=registers)");
  const int64_t d = c.headDim, bn = c.blockN ? c.blockN : 128;
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
  const int64_t stages = c.stages;
  Program p(c.varlen ? "flash_attention_varlen_fwd" : "flash_attention_fwd");
  auto [batch, seqQ, seqK, headsQ, headsKv, scale, q, k, v] = AttentionInputs::declare(p, c.dtype, d);
  Tensor o = p.tensor("O", {batch, seqQ, headsQ, d}, c.dtype);
  Tensor lse = p.tensor("LSE", {batch, headsQ, seqQ}, DType::f32);
  Batch seqs = Batch::declare(p, c.varlen, batch, seqQ, "max_seqlen_q");
  Expr pairs = ceil_div(seqs.maxLength, 2 * kRows);
  launchAttentionGrid(p, c.gridOrder, c.causal, pairs, headsQ, seqs.sequences, kThreads,
                      [&](Expr bx, Expr h, Expr b) {
    Sequence sq = seqs.queries(b, seqQ), sk = seqs.keys(b, seqK);
    Expr kvHead = h / (headsQ / headsKv);
    Expr row0 = (c.causal ? pairs - 1 - bx : bx) * (2 * kRows);
    int64_t tileBytes = kRows * d * byteSize(c.dtype), kvBytes = 2 * bn * d * byteSize(c.dtype);

    Buffer qTiles[2] = {alloc_shared({kRows, d}, c.dtype, "q_tile0"),
                        alloc_shared({kRows, d}, c.dtype, "q_tile1")};
    Buffer kSlots = alloc_shared_stages(stages, {bn, d}, c.dtype, "k_slots");
    Buffer vSlots = alloc_shared_stages(stages, {bn, d}, c.dtype, "v_slots");
    Buffer factors[2] = {alloc_shared({kRows}, DType::f32, "rescale0"),
                         alloc_shared({kRows}, DType::f32, "rescale1")};
    Buffer scores[2] = {alloc_tmem({kRows, bn}, DType::f32, "scores0"),
                        alloc_tmem({kRows, bn}, DType::f32, "scores1")};
    Buffer outs[2] = {alloc_tmem({kRows, d}, DType::f32, "out_acc0"),
                      alloc_tmem({kRows, d}, DType::f32, "out_acc1")};
    Buffer probs[2] = {alias_tmem(scores[0], {kRows, bn}, c.dtype),
                       alias_tmem(scores[1], {kRows, bn}, c.dtype)};
    Buffer qFull = alloc_barriers(1, 1, "q_full");
    Buffer kvFull = alloc_barriers(stages, 1, "kv_full");
    Buffer kvEmpty = alloc_barriers(stages, 1, "kv_empty");
    Buffer sFull = alloc_barriers(2, 1, "s_full");
    Buffer pFull = alloc_barriers(2, 4, "p_full");      // one arrival per softmax warp
    // The shared row factors go out and come back with every thread's own
    // arrival (each releases its own writes or reads).
    Buffer rescaled = alloc_barriers(2, kRows, "rescale");
    Buffer oFull = alloc_barriers(2, 1, "o_full");
    Buffer oReady = alloc_barriers(2, kRows, "o_ready");

    // Key blocks: the later tile's (causal: it sees the most keys); the
    // earlier tile's extra blocks are masked whole. None when the pair of
    // tiles starts past its (packed) sequence.
    Expr blocks = ceil_div(sk.length, bn);
    if (c.causal) blocks = min(blocks, ceil_div(row0 + 2 * kRows, bn));
    if (c.varlen) blocks = select(row0 < sq.length, blocks, Expr(0));
    auto parity = [](Expr phase) { return phase % 2; };

    // Registers: the 128 a thread starts with at 512 threads, moved by
    // setmaxnreg to the softmax warpgroups (the last warpgroup only issues).
    role(3 * kRows, kRows, [&] {
    role(12 * 32, 32, [&] { // TMA loads
      if_(blocks > 0, [&] {
        mbarrier_expect_tx(qFull, 0, 2 * tileBytes);
        for (int t = 0; t < 2; ++t)
          copy_async(sq.rows(q, row0 + t * kRows, h, kRows, d), qTiles[t], qFull, 0);
        serial(blocks, [&](Expr j) {
          Expr slot = j % stages;
          if_(j >= stages, [&] { mbarrier_wait(kvEmpty, slot, parity(j / stages - 1)); });
          mbarrier_expect_tx(kvFull, slot, kvBytes);
          copy_async(sk.rows(k, j * bn, kvHead, bn, d), kSlots.stage(slot), kvFull, slot);
          copy_async(sk.rows(v, j * bn, kvHead, bn, d), vSlots.stage(slot), kvFull, slot);
        });
      });
    });

    role(13 * 32, 32, [&] { // MMA issue
      auto scoresOf = [&](int t, Expr j) {
        gemm(qTiles[t], kSlots.stage(j % stages), scores[t],
             {.transpose_b = true, .clear_accum = true, .issue_only = true});
        mma_commit(sFull, t);
      };
      if_(blocks > 0, [&] {
        mbarrier_wait(qFull, 0, 0);
        mbarrier_wait(kvFull, 0, 0);
        scoresOf(0, 0);
        scoresOf(1, 0);
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
              scoresOf(t, next);
            });
          }
        });
      });
    });
    }, kIssueRegisters);

    for (int t = 0; t < 2; ++t)
      role(t * kRows, kRows, [&] { // softmax of tile t, then its epilogue
        Expr rows = row0 + t * kRows;
        Buffer part = alloc_fragment({kRows, kScoreChunk}, DType::f32, "s_part");
        Buffer pPart = alloc_fragment({kRows, kScoreChunk}, c.dtype, "p_part");
        Buffer rowMax = alloc_fragment({kRows}, DType::f32, "row_max");
        Buffer rowSum = alloc_fragment({kRows}, DType::f32, "row_sum");
        Buffer tileMax = alloc_fragment({kRows}, DType::f32, "tile_max");
        Buffer factor = alloc_fragment({kRows}, DType::f32, "factor");
        fill(rowMax, kNegInf);
        clear(rowSum);
        Expr scaleLog2 = scale * kLog2e;
        auto maskedChunk = [&](Expr col0, int64_t at) {
          copy(scores[t].tile({0, at}, {kRows, kScoreChunk}), part);
          maskScores(part, col0 + at, rows, sk.length, c.causal, Expr(0));
        };
        serial(blocks, [&](Expr j) {
          Expr col0 = j * bn;
          mbarrier_wait(sFull, t, parity(j));
          for (int64_t at = 0; at < bn; at += kScoreChunk) {
            maskedChunk(col0, at);
            reduce_max(part, tileMax, 1, /*clear=*/at == 0);
          }
          parallel(kRows, [&](Expr i) {
            Expr next = max(rowMax(i), tileMax(i) * scaleLog2);
            factor(i) = select(next == Expr(kNegInf), Expr(1.0), exp2(rowMax(i) - next));
            rowMax(i) = next;
            rowSum(i) = rowSum(i) * factor(i);
          });
          // O from the earlier blocks is rescaled by the correction
          // warpgroup while P is computed.
          // The correction read the previous factors before o_ready's
          // phase j - 2 completed. That phase is already complete (S_t(j)
          // was issued after it); waiting on it makes the hand-back of the
          // shared factors an edge of its own, from the readers to this
          // writer.
          if_(j > 1, [&] { mbarrier_wait(oReady, t, parity(j - 2)); });
          if_(j > 0, [&] {
            copy(factor, factors[t]);
            mbarrier_arrive_each(rescaled, t);
          });
          // P over S, chunk by chunk: chunk c of P (packed, half the
          // columns) lands on columns this thread has already read.
          for (int64_t at = 0; at < bn; at += kScoreChunk) {
            maskedChunk(col0, at);
            parallel(kRows, kScoreChunk, [&](Expr i, Expr jj) {
              part(i, jj) = exp2(part(i, jj) * scaleLog2 - rowMax(i));
              pPart(i, jj) = cast(part(i, jj), c.dtype);
            });
            reduce_sum(part, rowSum, 1, /*clear=*/false);
            copy(pPart, probs[t].tile({0, at}, {kRows, kScoreChunk}));
          }
          mbarrier_arrive(pFull, t);
        });
        // The epilogue: the last product, then O / rowsum and the
        // log-sum-exp. Waiting for the phase before the last first keeps
        // the parity wait within one phase.
        if_(blocks > 1, [&] { mbarrier_wait(oFull, t, parity(blocks - 2)); });
        if_(blocks > 0, [&] { mbarrier_wait(oFull, t, parity(blocks - 1)); });
        Buffer out = sq.rows(o, rows, h, kRows, d);
        Buffer oPart = alloc_fragment({kRows, kChunk}, DType::f32, "out_part");
        for (int64_t at = 0; at < d; at += kChunk) {
          copy(outs[t].tile({0, at}, {kRows, kChunk}), oPart);
          parallel(kRows, kChunk, [&](Expr i, Expr jj) {
            oPart(i, jj) = select(rowSum(i) == Expr(0.0), Expr(0.0), oPart(i, jj) / rowSum(i));
          });
          sq.store(oPart, out.tile({0, at}, {kRows, kChunk}), rows);
        }
        parallel(kRows, [&](Expr i) { tileMax(i) = rowMax(i) / kLog2e + log(rowSum(i)); });
        sq.store(tileMax, sq.vector(lse, h, rows, kRows), rows);
      }, kSoftmaxRegisters);

    role(2 * kRows, kRows, [&] { // correction
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
    }, kCorrectionRegisters);
  });
  return p;
}
