//===- Decode.h - attention decode over a paged KV cache --------*- C++ -*-===//
//
// One query token per sequence against a KV cache kept in pages (vLLM's
// layout: a block table maps each sequence's n-th page to a page of the
// cache): GQA decode and DeepSeek-style MLA decode, each split along the
// keys when the batch alone does not fill the GPU, with a combine kernel
// that merges the splits by their log-sum-exps (kernels/decode/). The calls
// on tensor views are tessel::decode in tessel/Tessel.h.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_DECODE_DECODE_H
#define TESSEL_KERNELS_DECODE_DECODE_H

#include "tessel/dsl/Program.h"
#include "tessel/kernels/Settings.h"

namespace tessel::kernels {

/// GQA decode: q [batch, heads_kv * group, head_dim]; k_cache, v_cache
/// [pages, page_size, heads_kv, head_dim]; block_table i32 [batch,
/// max_pages]; lengths i32 [batch] (keys of each sequence, on the device).
/// Symbols: B (batch), H (heads_kv), P (pages), T (max_pages), S (splits).
/// One block per (kv head, sequence, split) computes the `group` query heads
/// that share the kv head; split z takes an equal share of the sequence's
/// key steps. Unsplit (`split` false) it writes o [batch, heads_q,
/// head_dim] in `dtype`; split it writes partial_o f32 [S, batch, heads_q,
/// head_dim] and partial_lse f32 [S, batch, heads_q] for decodeCombine. A
/// sequence of no keys (or a split past its keys) gets zeros and an lse of
/// -inf. The softmax scale is the run-time scalar `scale`.
struct PagedDecodeConfig {
  DType dtype = DType::bf16;
  int64_t headDim = 128;
  int64_t group = 4;      // heads_q / heads_kv, 1 to 64
  int64_t pageSize = 16;  // keys per page of the cache
  /// Keys per step: a multiple of page_size (several pages a step, each
  /// copied into its window of the staged tile) or a divisor of it (several
  /// steps a page).
  int64_t blockN = 64;
  int stages = 3;
  int threads = 128;
  bool split = false;
  /// K and V cached as f8e4m3 with one f32 scale each (the run-time
  /// scalars k_scale and v_scale after `scale`: key = k_scale * code):
  /// each stage's tiles are widened to `dtype` in shared memory before the
  /// products, the K scale folded into the softmax scale and the V scale
  /// into the output.
  bool fp8Cache = false;
};
Program pagedDecode(const PagedDecodeConfig &config);
/// Its settings: dtype, head_dim, group, page_size, split, fp8_cache (what
/// it computes); block_n, stages, threads.
const SettingsTable<PagedDecodeConfig> &pagedDecodeSettings();

/// MLA decode (DeepSeek-V2/V3 with the up-projections absorbed into q and
/// o): q [batch, heads, latent + rope], cache [pages, page_size, latent +
/// rope] (one latent vector and its rope key per token, shared by every
/// head); scores over all latent + rope columns, values the first `latent`
/// columns of the same cache rows. Symbols B, N (heads), P, T, S as above.
/// One block per (block_m heads, sequence, split); unsplit it writes o
/// [batch, heads, latent] in `dtype`, split partial_o and partial_lse as
/// pagedDecode does.
struct MlaDecodeConfig {
  DType dtype = DType::bf16;
  int64_t latent = 512, rope = 64;
  int64_t pageSize = 64;
  int64_t blockM = 64; // heads a block
  int64_t blockN = 64; // keys a step
  int stages = 2;
  int threads = 256;
  bool split = false;
};
Program mlaDecode(const MlaDecodeConfig &config);
/// The keys a step of mla_decode takes by default on `arch`: 64 on sm_90a
/// (two stages of 64 cache rows and q fill 224 KB of shared memory); 32
/// elsewhere (sm_80 allows 163 KB a block; sm_100a keeps reduction scratch
/// beside the stages).
int64_t mlaDefaultKeys(const std::string &arch);
/// Its settings: dtype, latent, rope, page_size, split (fixed); block_m,
/// block_n, stages, threads.
const SettingsTable<MlaDecodeConfig> &mlaDecodeSettings();

/// Merges S splits: o[b, h] = sum_s w_s partial_o[s, b, h] with w_s =
/// exp(lse_s - lse) and lse = log sum_s exp(lse_s) (a split of no keys has
/// weight 0; a row all of whose splits are empty gets zeros). partial_o f32
/// [S, R, head_dim], partial_lse f32 [S, R] with R = batch * heads (symbols
/// S and R); o [R, head_dim] in `dtype`.
struct DecodeCombineConfig {
  DType dtype = DType::bf16;
  int64_t headDim = 128;
  int64_t rows = 8; // rows (batch x head) a block
  int threads = 128;
};
Program decodeCombine(const DecodeCombineConfig &config);
/// Its settings: dtype, head_dim (fixed); rows, threads.
const SettingsTable<DecodeCombineConfig> &decodeCombineSettings();

/// How far a decode kernel's grid is split along the keys: into enough
/// splits for `waves` waves of the GPU's resident slots, each split
/// keeping at least `minSteps` key steps.
struct DecodeSplitRule {
  double waves;
  int64_t minSteps;
};
/// The paged kernel asks for 4 waves of at least 8 steps: with several
/// blocks resident an SM, ragged lengths leave a long tail unless each
/// block's share is short (batch 64, 8 kv heads, 4k-8k keys on an H100:
/// 2.60 TB/s unsplit, 2.75 in 3 splits).
inline DecodeSplitRule splitRule(const PagedDecodeConfig &) { return {4.0, 8}; }
/// MLA (one block an SM, compute-bound) asks for 1 wave: at batch 64, 128
/// head blocks on 132 SMs ran at 396 TFLOP/s unsplit and 317 in 3 splits.
inline DecodeSplitRule splitRule(const MlaDecodeConfig &) { return {1.0, 4}; }

/// The splits a decode grid of `blocks` (kv heads or head blocks, times
/// batch) takes where `slots` blocks can be resident at once (SMs times
/// blocks an SM), for sequences of up to `maxSteps` key steps: the rule's
/// waves (the splits whose last wave is fullest), at most 64; 1 when the
/// blocks alone reach half of that.
int64_t decodeSplits(int64_t blocks, int64_t slots, int64_t maxSteps, DecodeSplitRule rule);

} // namespace tessel::kernels

#endif
