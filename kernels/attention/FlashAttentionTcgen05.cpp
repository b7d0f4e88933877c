//===- FlashAttentionTcgen05.cpp - attention forward on sm_100a -----------===//
//
// Both accumulators live in tensor memory. In the `ss` form both products
// read their operands from shared memory through tcgen05.mma; in the `ts`
// form P goes back into tensor memory (packed 16-bit) as the A operand of
// P x V. Per
// key block: S = Q K^T into tensor memory; S into registers (the .32x32b
// layout: a thread holds its row, so row maxima and sums stay in the thread
// but for the two warpgroups' halves); the online softmax; O in tensor
// memory rescaled in column chunks (load, scale, store back); P to shared
// (or tensor) memory; O += P V. As in the Hopper kernel, scores are kept in base 2 and
// the natural-base log-sum-exp is written for the backward pass.
//
//===----------------------------------------------------------------------===//
#include "AttentionMask.h"
#include "AttentionSequences.h"
#include "tessel/kernels/attention/Attention.h"

#include <fmt/format.h>
#include <limits>
#include <optional>

using namespace tessel;

namespace {
const double kLog2e = 1.4426950408889634;
const double kNegInf = -std::numeric_limits<double>::infinity();
} // namespace

Program tessel::kernels::flashAttentionForwardTcgen05(const AttentionConfig &c, bool pInTmem) {
  if (c.persistent)
    throw Error("a persistent attention forward is the register kernel's (variant=registers)");
  if (c.tmaStore)
    throw Error("tma_store on the attention forward is the register kernel's (variant=registers)");
  if (c.headDim != 64 && c.headDim != 128 && c.headDim != 256)
    throw Error(fmt::format("flash attention forward supports head_dim 64, 128 and 256, not {}",
                            c.headDim));
  if (c.blockM != 128)
    throw Error(fmt::format("the tcgen05 attention forward computes 128 query rows a block (every "
                            "tensor-memory lane), not block_m = {}",
                            c.blockM));
  if (c.threads != 256)
    throw Error(fmt::format("the tcgen05 attention forward runs two warpgroups (256 threads), not {}",
                            c.threads));
  if (c.overlap || c.streamedShards || c.queryOffset)
    throw Error("the tcgen05 attention forward has no `overlap`, streamed shards or query offset");
  Program p(c.varlen ? "flash_attention_varlen_fwd" : "flash_attention_fwd");
  // S (block_n columns) and O (head_dim) share the block's 512 columns.
  const int64_t d = c.headDim, bm = c.blockM, bn = c.blockN ? c.blockN : d > 128 ? 64 : 128;
  const int64_t chunk = 64; // O columns rescaled and stored at a time: 32 a thread
  auto [batch, seqQ, seqK, headsQ, headsKv, scale, q, k, v] = AttentionInputs::declare(p, c.dtype, d);
  Tensor o = p.tensor("O", {batch, seqQ, headsQ, d}, c.dtype);
  Tensor lse = p.tensor("LSE", {batch, headsQ, seqQ}, DType::f32);
  Batch seqs = Batch::declare(p, c.varlen, batch, seqQ, "max_seqlen_q");
  Expr rowBlocks = ceil_div(seqs.maxLength, bm);
  launchAttentionGrid(p, c.gridOrder, c.causal, rowBlocks, headsQ, seqs.sequences, c.threads,
                      [&](Expr bx, Expr h, Expr b) {
    Sequence sq = seqs.queries(b, seqQ), sk = seqs.keys(b, seqK);
    Expr kvHead = h / (headsQ / headsKv);
    Expr row0 = (c.causal ? rowBlocks - 1 - bx : bx) * bm;
    Buffer qs = alloc_shared({bm, d}, c.dtype, "q_tile");
    Buffer ks = alloc_shared({bn, d}, c.dtype, "k_tile");
    Buffer vs = alloc_shared({bn, d}, c.dtype, "v_tile");
    Buffer sTmem = alloc_tmem({bm, bn}, DType::f32, "scores");
    Buffer oTmem = alloc_tmem({bm, d}, DType::f32, "out_acc");
    // P x V's A operand: P in shared memory (ss) or packed in tensor memory
    // over the scores it came from (ts; they are in registers by then),
    // written by both warpgroups, the second from column 32 for 128 keys.
    std::optional<Buffer> ps, pTmem;
    if (pInTmem) pTmem = alias_tmem(sTmem, {bm, bn}, c.dtype);
    else ps = alloc_shared({bm, bn}, c.dtype, "p_tile");
    Buffer s = alloc_fragment({bm, bn}, DType::f32, "scores_regs");
    Buffer pr = alloc_fragment({bm, bn}, c.dtype, "probs");
    Buffer part = alloc_fragment({bm, chunk}, DType::f32, "out_part");
    Buffer rowMax = alloc_fragment({bm}, DType::f32, "row_max");
    Buffer rowSum = alloc_fragment({bm}, DType::f32, "row_sum");
    Buffer tileMax = alloc_fragment({bm}, DType::f32, "tile_max");
    Buffer rescale = alloc_fragment({bm}, DType::f32, "rescale");

    copy(sq.rows(q, row0, h, bm, d), qs);
    fill(rowMax, kNegInf);
    clear(rowSum);
    clear(oTmem);
    Expr scaleLog2 = scale * kLog2e;
    Expr blocks = ceil_div(sk.length, bn);
    if (c.causal) blocks = min(blocks, ceil_div(row0 + bm, bn));
    if (c.varlen) blocks = select(row0 < sq.length, blocks, Expr(0));
    pipelined(blocks, c.stages, {.warp_specialize = c.warpSpecialize}, [&](Expr kt) {
      Expr col0 = kt * bn;
      copy(sk.rows(k, col0, kvHead, bn, d), ks);
      copy(sk.rows(v, col0, kvHead, bn, d), vs);
      gemm(qs, ks, sTmem, {.transpose_b = true, .clear_accum = true});
      copy(sTmem, s);
      maskScores(s, col0, row0, sk.length, c.causal, Expr(0));
      reduce_max(s, tileMax, 1);
      parallel(bm, [&](Expr i) {
        Expr next = max(rowMax(i), tileMax(i) * scaleLog2);
        rescale(i) = select(next == Expr(kNegInf), Expr(1.0), exp2(rowMax(i) - next));
        rowMax(i) = next;
        rowSum(i) = rowSum(i) * rescale(i);
      });
      // The correction: O in tensor memory scaled by each row's factor.
      for (int64_t at = 0; at < d; at += chunk) {
        copy(oTmem.tile({0, at}, {bm, chunk}), part);
        parallel(bm, chunk, [&](Expr i, Expr j) { part(i, j) = part(i, j) * rescale(i); });
        copy(part, oTmem.tile({0, at}, {bm, chunk}));
      }
      parallel(bm, bn, [&](Expr i, Expr j) {
        s(i, j) = exp2(s(i, j) * scaleLog2 - rowMax(i));
        pr(i, j) = cast(s(i, j), c.dtype);
      });
      reduce_sum(s, rowSum, 1, /*clear=*/false);
      copy(pr, pInTmem ? *pTmem : *ps);
      gemm(pInTmem ? *pTmem : *ps, vs, oTmem);
    });
    Buffer out = sq.rows(o, row0, h, bm, d);
    // One reciprocal per row (a row without keys has O = 0 and stays 0).
    parallel(bm, [&](Expr i) {
      rescale(i) = select(rowSum(i) == Expr(0.0), Expr(0.0), Expr(1.0) / rowSum(i));
    });
    for (int64_t at = 0; at < d; at += chunk) {
      copy(oTmem.tile({0, at}, {bm, chunk}), part);
      parallel(bm, chunk, [&](Expr i, Expr j) { part(i, j) = part(i, j) * rescale(i); });
      sq.store(part, out.tile({0, at}, {bm, chunk}), row0);
    }
    parallel(bm, [&](Expr i) { tileMax(i) = rowMax(i) / kLog2e + log(rowSum(i)); });
    sq.store(tileMax, sq.vector(lse, h, row0, bm), row0);
  });
  return p;
}
