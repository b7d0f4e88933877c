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
#include "ForwardGrid.h"
#include "OnlineSoftmax.h"
#include "tessel/kernels/attention/Attention.h"

#include <fmt/format.h>
#include <optional>

using namespace tessel;

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
  // FP8: kind::f8f6f4 for both products, P through shared memory (the ts
  // form's A in tensor memory is 16-bit).
  bool fp8 = c.dtype == DType::f8e4m3 || c.dtype == DType::f8e5m2;
  if (byteSize(c.dtype) == 1 && !fp8)
    throw Error(fmt::format("the tcgen05 attention forward takes f16, bf16, f8e4m3 or f8e5m2 "
                            "inputs, not {}", name(c.dtype)));
  if (c.vTransposed)
    throw Error("v_transposed is the register kernel's (wgmma reads FP8 V K-major only); "
                "tcgen05.mma reads V as it is stored");
  if (c.descales && !fp8)
    throw Error(fmt::format("descales scale FP8 inputs; these are {}", name(c.dtype)));
  if (fp8 && pInTmem)
    throw Error("the ts attention forward keeps P in tensor memory, which tcgen05.mma reads as "
                "16-bit only; FP8 inputs take variant=ss");
  Program p(c.varlen ? "flash_attention_varlen_fwd" : "flash_attention_fwd");
  // S (block_n columns) and O (head_dim) share the block's 512 columns.
  const int64_t d = c.headDim, bm = c.blockM, bn = forwardKeyBlock(c);
  const int64_t chunk = 64; // O columns rescaled and stored at a time: 32 a thread
  ForwardTensors tensors = ForwardTensors::declare(p, c, d);
  Expr vScale = fp8 ? p.scalar("v_scale", DType::f32) : Expr(1.0);
  ForwardDescales descales = ForwardDescales::declare(p, c);
  launchForwardGrid(p, c, tensors, bm, [&](const ForwardTile &tile) {
    const Sequence &sq = tile.queries, &sk = tile.keys;
    Expr row0 = tile.row0;
    ForwardOperands qkv = ForwardOperands::allocate(c, bm, bn);
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
    OnlineSoftmax softmax = OnlineSoftmax::allocate(bm, "rescale", false, fp8 ? 8 : 0);

    copy(sq.rows(tensors.in.q, row0, tile.head, bm, d), qkv.q);
    softmax.begin(descales.scores(tile, tensors.in.scale), oTmem);
    Expr blocks = keyBlocks(c, tile, bm, bn);
    pipelined(blocks, c.stages, {.warp_specialize = c.warpSpecialize}, [&](Expr kt) {
      Expr col0 = kt * bn;
      copy(sk.rows(tensors.in.k, col0, tile.kvHead, bn, d), qkv.k);
      copy(sk.rows(tensors.in.v, col0, tile.kvHead, bn, d), qkv.v);
      gemm(qkv.q, qkv.k, sTmem, {.transpose_b = true, .clear_accum = true});
      copy(sTmem, s);
      maskScores(s, col0, row0, sk.length, c.causal, Expr(0));
      softmax.step(s, pr, [&] {
        // The correction: O in tensor memory scaled by each row's factor.
        for (int64_t at = 0; at < d; at += chunk) {
          copy(oTmem.tile({0, at}, {bm, chunk}), part);
          parallel(bm, chunk, [&](Expr i, Expr j) { part(i, j) = part(i, j) * softmax.factor(i); });
          copy(part, oTmem.tile({0, at}, {bm, chunk}));
        }
      });
      copy(pr, pInTmem ? *pTmem : *ps);
      gemm(pInTmem ? *pTmem : *ps, qkv.v, oTmem);
    });
    Buffer out = sq.rows(tensors.o, row0, tile.head, bm, d);
    softmax.reciprocalSums();
    if (fp8) {
      Expr outScale = descales.values(tile, vScale);
      parallel(bm, [&](Expr i) { softmax.factor(i) = softmax.factor(i) * outScale; });
    }
    for (int64_t at = 0; at < d; at += chunk) {
      copy(oTmem.tile({0, at}, {bm, chunk}), part);
      parallel(bm, chunk, [&](Expr i, Expr j) { part(i, j) = part(i, j) * softmax.factor(i); });
      sq.store(part, out.tile({0, at}, {bm, chunk}), row0);
    }
    softmax.storeLse(sq, tensors.lse, tile.head, row0);
  });
  return p;
}
