//===- Attention.h - FlashAttention kernels ---------------------*- C++ -*-===//
//
// FlashAttention forward (registers, tcgen05 and warp-specialized tcgen05
// forms) and backward (preprocess, main kernel, postprocess): their
// configurations, builders and argument checks (kernels/attention/). The
// calls on tensor views are tessel::attention in tessel/Tessel.h.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_ATTENTION_ATTENTION_H
#define TESSEL_KERNELS_ATTENTION_ATTENTION_H

#include "tessel/dsl/Compile.h"
#include "tessel/dsl/Program.h"
#include "tessel/kernels/Settings.h"
#include "tessel/runtime/Launch.h"

#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tessel::kernels {

/// The order in which an attention grid's blocks are launched. `blocks`
/// walks one head's row blocks before the next head: concurrent blocks share
/// that head's K/V (forward) or Q/dO (backward) in L2. `heads` walks every
/// head's first row block first: concurrent blocks spread over heads, so
/// under a causal mask the longest blocks of all heads start first, and in
/// the backward pass fewer blocks add into the same dQ rows at once.
/// `automatic` takes `heads` under a causal mask and `blocks` otherwise
/// (8k, head_dim 128 on an H200: causal forward 559 against 541 TFLOP/s,
/// backward 391 against 377; full 612 against 596 and 414 against 408 the
/// other way).
enum class GridOrder { automatic, blocks, heads };


/// FlashAttention over BSHD tensors: Q, O [batch, seqlen_q, heads_q,
/// head_dim], K, V [batch, seqlen_k, heads_kv, head_dim], LSE [batch,
/// heads_q, seqlen_q] (f32, natural log). Every extent is a run-time symbol;
/// heads_q must be a multiple of heads_kv (GQA groups of heads_q / heads_kv).
struct AttentionConfig {
  /// Q, K and V's type; O's is attentionOutputType's. FP8 (f8e4m3,
  /// f8e5m2; the register kernel, sm_89 and sm_90a) takes per-tensor
  /// scales: Q's and K's multiply the softmax scale (the caller folds them
  /// in), V's is the kernel's last parameter, v_scale (f32), which
  /// multiplies O.
  DType dtype = DType::bf16;
  int64_t headDim = 128;
  /// blockN 0: 128 keys per step, 64 at head_dim 256 (where two score
  /// tiles of 128 columns and a 256-column accumulator exceed the registers).
  int64_t blockM = 128, blockN = 0;
  int threads = 256;
  int stages = 2;
  bool causal = false;
  /// Packed sequences: batch = 1, seqlen = total rows, plus cu_seqlens_q/k
  /// (int32 prefix sums, cu_entries = sequences + 1) and max_seqlen_q.
  bool varlen = false;
  WarpSpecialize warpSpecialize = WarpSpecialize::automatic;
  /// The two consumer warpgroups take turns issuing gemms (sm_90a, split
  /// loops of 256 threads and two or more stages; ignored otherwise). Off:
  /// with each gemm waited for where it is issued, the free-running
  /// warpgroups overlap better (8k, head_dim 128 on H200: 603 TFLOP/s
  /// against 554 with turns).
  bool pingpong = false;
  /// K one block ahead of V, so that each step's softmax runs while its
  /// P V product does (costs a K tile of shared memory and one product of
  /// scores that are all masked). With `pingpong` a turn issues both
  /// products of a step: FlashAttention-3's schedule. Off: on an H200 it
  /// wins only at 8k without a mask (head_dim 128: 609 TFLOP/s with turns
  /// against 593) and loses elsewhere (causal 8k 533 against 553, 4k 540
  /// against 552, 1k 307 against 360).
  bool overlap = false;
  GridOrder gridOrder = GridOrder::automatic;
  /// One block per resident slot walks the (row block, head, sequence)
  /// tiles in grid order (causal: all longest row blocks first): the
  /// warp-specialized producer loads the next tile's first K/V stages while
  /// the consumers finish the current one.
  bool persistent = false;
  /// O leaves through a shared tile and a TMA store instead of register
  /// stores (fixed-length batches: a packed sequence's tile would write
  /// into the next sequence's rows). In a persistent walk the store runs
  /// under the next tile's first steps: its thread waits only for the copy
  /// engine to read the tile, and only before the next tile's O is staged.
  /// O gets a [block_m, head_dim] tile of its own where it fits beside the
  /// stages (so that a persistent walk's producer can load the next Q), and
  /// Q's tile otherwise.
  bool tmaStore = false;
  /// Q, K and V arrive while the kernel runs, in shards of rows (as a
  /// sequence-parallel exchange delivers them): rows [s * shard_rows,
  /// (s + 1) * shard_rows) of head group g (heads_q / head_groups query
  /// heads and their K/V heads) may be read once arrivals[g * shards + s]
  /// reaches `epoch`. A block waits for its queries' shard before loading
  /// them, and its producer for each K/V shard just before the shard's
  /// first block, so compute on the shards present starts before the rest
  /// arrive. Keys are walked in order: starting the walk at a later shard
  /// (the one present first) cost 8% of the kernel at 8k without a mask on
  /// an H200, more than the wait it saves. Parameters after LSE: shard_rows,
  /// shards, head_groups (index symbols), epoch (i32), arrivals
  /// [head_groups * shards] (i32). shard_rows must be a multiple of block_m
  /// and block_n. Not with `overlap` or `varlen`.
  bool streamedShards = false;
  /// Causal only: query row i sits at key position query_offset + i (an
  /// index symbol, the last parameter), so a chunk of queries attends to
  /// the keys up to its own place in the sequence (the mask aligned to the
  /// bottom right when query_offset = seqlen_k - seqlen_q). Not with
  /// `varlen`.
  bool queryOffset = false;
  /// FP8, fixed-length batches: V arrives transposed, [batch, heads_kv,
  /// head_dim, seqlen_k rounded up to 16], the keys of each 16 in the order
  /// in which P x V reads P from registers (key 8 b + 2 q + e at 4 q + 2 b
  /// + e; tile.gemm's b_register_k_order) and zeros past seqlen_k, as
  /// fp8Values() writes it. Without it, each block copies each V tile into
  /// that order in shared memory, element by element (a remark says so).
  bool vTransposed = false;
  /// FP8: Q's, K's and V's scales read on the device, one per (sequence,
  /// K/V head) as FlashAttention-3's descale tensors are (per tensor with
  /// strides 0), so that scales a quantisation kernel computed need no
  /// trip to the host. Parameters after v_scale, for x in q, k, v:
  /// x_descale_offset, x_descale_sequence_stride, x_descale_head_stride
  /// (index symbols, elements), x_descale [x_descale_extent] (f32); element
  /// (b, h) at offset + b * sequence stride + h * head stride (the offset
  /// lets a scale that is not 16-byte aligned be read from the aligned
  /// buffer below it). Q's and K's multiply the softmax scale of the
  /// sequence's heads, V's O (beside scale and v_scale).
  bool descales = false;
  /// The softmax's exp2 with one register in `exp2FmaEvery` of each
  /// thread computed by a polynomial on the FMA pipe, beside the
  /// special-function unit (tessel::exp2(x, fmaEvery)); 0: all on the
  /// special-function unit. Register kernels on sm_90a.
  int64_t exp2FmaEvery = 0;
};
/// O's type for inputs of `dtype`: bf16 for FP8, else the inputs' own.
DType attentionOutputType(DType dtype);
/// The key rows a forward step takes (registers, ss and ts forms): blockN,
/// or where that is 0 the kernels' choice, 128, and 64 at head_dim over 128
/// (where two score tiles of 128 columns and the accumulator exceed the
/// registers).
int64_t forwardKeyBlock(const AttentionConfig &config);
/// The forward's query tile where no configuration is given:
/// FlashAttention-3's 192 rows on three consumer warpgroups at head_dim 64
/// on sm_90a, except causal problems under 2048 queries; `config` is left
/// alone elsewhere. attention::forward and `tessel bench attention` use it.
void chooseForwardRows(AttentionConfig &config, const std::string &arch, int64_t queries);
/// The forward's schedule where no configuration is given: the query tile
/// above, and on sm_90a at head_dim 128 with 8k keys or more, K a block
/// ahead of V (overlap), with ping-pong turns for full attention without
/// grouped K/V heads, and the persistent walk with a TMA store of O for
/// full attention with them. Measured on an H100 (tessel tune): 32k
/// causal, K ahead 581 against 554 TFLOP/s, turns 567; 8k full with 32/8
/// heads, the persistent walk 659 against 605. attention::forward and
/// `tessel bench attention` use it.
///
/// Causal: the grid order of chooseCausalGridOrder for the K and V tiles a
/// step streams, over every K/V head of a sequence.
void chooseForwardSchedule(AttentionConfig &config, const std::string &arch, int64_t queries,
                           int64_t keys, int64_t headsQ, int64_t headsKv, int64_t l2Bytes);
/// The order of a causal pass's grid where none is given, from the bytes
/// its blocks stream (K and V forward; Q, dO and dQ's f32 sums backward)
/// over every head of a sequence. Heads first (each head's longest tiles
/// before any shorter one, the best balance) while those fit in twice the
/// L2 cache; beyond, the blocks running together cover every head and
/// none of the streams stays in L2, so blocks first, which runs one head's
/// tiles together on one stream. On an H100 (L2 50 MB): 32k tokens over 32
/// heads forward 15.24 -> 14.29 ms, backward 46.3 -> 43.4 ms; 8k over
/// 64/8 heads backward 17.1 -> 12.2 ms; the 4k and 8k rows of
/// FlashAttention-3's table within 1-4% either way (heads first ahead at
/// 4k, blocks first at 8k and head_dim 64 backward).
GridOrder chooseCausalGridOrder(int64_t streamBytes, int64_t l2Bytes);
/// O = softmax(scale * Q K^T) V and its log-sum-exp.
Program flashAttentionForward(const AttentionConfig &config);
/// V [batch, seqlen_k, heads_kv, head_dim] (FP8) as a forward built with
/// AttentionConfig::vTransposed reads it: VT [batch, heads_kv, head_dim,
/// seqlen_k rounded up to 16], the keys of each 16 in register order
/// (register_k_position), zeros past seqlen_k. Parameters: batch,
/// seqlen_k, heads_kv, V, VT, both tensors' bytes seen as i32 words (V
/// [..., head_dim / 4], VT [..., keys / 4]).
Program fp8Values(DType dtype, int64_t headDim);
/// The same on sm_100a: S and O accumulate in tensor memory through
/// tcgen05.mma, P goes through shared memory (`ss`) or back into tensor
/// memory as the A operand of P x V (`ts`, `pInTmem`). block_m 128, 256
/// threads; no overlap, shards or query offset.
Program flashAttentionForwardTcgen05(const AttentionConfig &config, bool pInTmem);
/// The warp-specialized form (`ws`): two query tiles of 128 rows in flight
/// on 512 threads in roles (TMA loads, MMA issue, two softmax warpgroups, a
/// correction warpgroup), every hand-off an mbarrier. head_dim 64 or 128,
/// block_n 128, `stages` (at least 2) K/V slots.
Program flashAttentionForwardTcgen05Ws(const AttentionConfig &config);

/// AttentionConfig as settings, for every form: dtype, head_dim, block_m,
/// block_n ("auto" for 0), threads, stages, causal, varlen,
/// warp_specialize, grid_order, pingpong, overlap, persistent, tma_store.
/// (Streamed shards and the query offset come with their run-time
/// arguments: the sequence-parallel callers set them.)
const SettingsTable<AttentionConfig> &attentionSettings();

/// The forward kernels' launch arguments (every form: registers, tcgen05,
/// warp-specialized), in the order the kernels declare their parameters:
/// batch, seqlen_q, seqlen_k, heads_q, heads_kv (index symbols), scale, Q,
/// K, V, O, LSE; then, as the kernel was built, the streamed shards' (see
/// AttentionConfig::streamedShards), the query offset, and a packed batch's
/// sequences. The public call, the sequence-parallel forms and the harness
/// all launch through this.
struct AttentionForwardArgs {
  int64_t batch = 0, seqQ = 0, seqK = 0, headsQ = 0, headsKv = 0;
  double scale = 0;
  rt::LaunchArg q, k, v, o, lse;
  struct Streamed {
    int64_t shardRows = 0, shards = 0, headGroups = 0;
    int32_t epoch = 0;
    rt::LaunchArg arrivals; // i32 [head_groups * shards]
  };
  std::optional<Streamed> streamed;
  std::optional<int64_t> queryOffset;
  struct Packed {
    int64_t entries = 0, maxSeqlenQ = 0; // cu_seqlens entries (sequences + 1)
    rt::LaunchArg cuSeqlensQ, cuSeqlensK;
  };
  std::optional<Packed> packed;
  /// FP8 kernels: V's scale.
  std::optional<double> vScale;
  /// FP8 kernels built with descales: Q's, K's and V's, each f32 (b, h) at
  /// element offset + b * sequenceStride + h * headStride of the 16-byte
  /// aligned `data`, `extent` elements in all.
  struct Descale {
    CUdeviceptr data = 0;
    int64_t offset = 0, sequenceStride = 0, headStride = 0, extent = 1;
  };
  std::optional<std::array<Descale, 3>> descales;

  /// Where O and LSE stand in list().
  static constexpr size_t kOutIndex = 9, kLseIndex = 10;
  /// Dense BSHD buffers (Q, O [batch, seqQ, headsQ, headDim], K, V [batch,
  /// seqK, headsKv, headDim], LSE f32 [batch, headsQ, seqQ]).
  static AttentionForwardArgs dense(int64_t batch, int64_t seqQ, int64_t seqK, int64_t headsQ,
                                    int64_t headsKv, int64_t headDim, double scale,
                                    CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, CUdeviceptr o,
                                    CUdeviceptr lse);
  std::vector<rt::LaunchArg> list() const;
};

/// An attention call's arguments as the host holds them, for checking
/// before any launch.
struct AttentionArgs {
  struct TensorArg {
    DType dtype;
    std::vector<int64_t> shape; // [batch, seqlen, heads, head_dim]
  };
  TensorArg q, k, v, o;
  /// Packed batches (batch 1): int32 prefix sums with one entry more than
  /// sequences, and each side's longest sequence.
  std::vector<int32_t> cuSeqlensQ, cuSeqlensK;
  int64_t maxSeqlenQ = 0, maxSeqlenK = 0;
};
/// Throws tessel::Error, naming the argument, when `args` do not fit a
/// kernel built with `config`: ranks, dtypes, head_dim, batch and sequence
/// extents that disagree between Q/K/V/O, heads_q not a positive multiple of
/// heads_kv, and for packed batches a cu_seqlens that does not start at 0,
/// decreases, does not end at the packed row count, or has a sequence
/// longer than max_seqlen.
void validateAttention(DType dtype, int64_t headDim, bool varlen, const AttentionArgs &args);

/// How the backward pass combines the dK/dV of the query heads that share a
/// K/V head: written directly (heads_q == heads_kv), added into fp32
/// accumulators with atomic_add, or written as one fp32 slice per query
/// head and summed by the postprocess kernel.
enum class KvReduction { direct, atomic, split };
/// Where the backward main kernel accumulates: in registers (wgmma on
/// sm_90a, mma.sync elsewhere), or in tensor memory through tcgen05.mma
/// (sm_100a) with P^T going to dV's product through shared memory (`ss`)
/// or packed in tensor memory over S^T (`ts`).
enum class BackwardForm { registers, ss, ts };
struct AttentionBackwardConfig {
  DType dtype = DType::bf16;
  int64_t headDim = 128;
  int64_t blockM = 64, blockN = 128; // query rows per step, key rows per block
  int64_t preBlock = 64;             // rows per block of the pre/postprocess
  int threads = 256;
  int stages = 2;
  bool causal = false;
  /// Packed sequences (see AttentionConfig::varlen); the grid follows
  /// max_seqlen_k.
  bool varlen = false;
  KvReduction kvReduction = KvReduction::direct;
  /// Causal, fixed-length batches: query row i sits at key position
  /// query_offset + i (an index symbol, the main kernel's parameter after
  /// dV), as AttentionConfig::queryOffset places the forward's queries: the
  /// gradients of a chunk of queries over the keys up to its place.
  bool queryOffset = false;
  /// Per-element atomics instead of one region atomic_add per fragment (for
  /// comparison).
  bool elementAtomics = false;
  MemoryOrder dqOrder = MemoryOrder::relaxed;
  /// dQ goes through a shared tile added by TMA (sm_90a, relaxed) instead
  /// of register-pair atomics.
  bool dqTma = false;
  /// wgmma and mma.sync (form registers): P^T and dS^T go to shared memory
  /// and dV's and dK's products read them there, instead of from operand
  /// fragments. The two [block_n, block_m] fragments that frees let 128
  /// query rows a step fit at head_dim 64.
  bool dkvOperandsShared = false;
  /// wgmma and mma.sync: scores by query rows (S = Q K^T, each warpgroup's
  /// accumulator rows its queries) instead of key rows (S^T = K Q^T). A
  /// thread then needs two rows' LSE and delta, not a column's worth; P and
  /// dS always go through shared memory (dkvOperandsShared implied).
  bool queryRows = false;
  WarpSpecialize warpSpecialize = WarpSpecialize::automatic;
  GridOrder gridOrder = GridOrder::automatic;
  BackwardForm form = BackwardForm::registers;
};
/// The backward's grid order where none is given (chooseCausalGridOrder;
/// the kernels' own choice without a mask).
void chooseBackwardGridOrder(AttentionBackwardConfig &config, int64_t queries, int64_t headsQ,
                             int64_t l2Bytes);
/// AttentionBackwardConfig as settings: dtype, head_dim, block_m, block_n,
/// pre_block, threads, stages, causal, varlen, warp_specialize, grid_order,
/// kv_reduction, element_atomics, dq_order, dq_atomics (registers or tma),
/// dkv_operands (registers or shared), scores (keys or queries), variant
/// (the form: registers, ss or ts). (The query offset comes with its
/// run-time argument: callers that set it name it.)
const SettingsTable<AttentionBackwardConfig> &attentionBackwardSettings();
/// delta [batch, heads_q, seqlen_q] = rowsum(dO * O).
Program flashAttentionBackwardPre(const AttentionBackwardConfig &config);
/// dQ_accum (+)= dQ (fp32, zeroed first) and dK, dV as `kvReduction` says,
/// from Q, K, V, dO, LSE and delta.
Program flashAttentionBackward(const AttentionBackwardConfig &config);
/// Whether the sm_90a backward's default is scores by query rows at 128 a
/// step (head_dim 64), given the settings a caller or a tuned record
/// already chose, by parameter name: not when they name block_m or scores,
/// nor more than two stages, which only key rows at 64 a step fit.
bool backwardQueryRowsByDefault(int64_t headDim, const std::map<std::string, std::string> &chosen);
/// grad [batch, seqlen, heads_out, dim] (output type) = the sum over each
/// group of heads_in / heads_out heads of accum (fp32).
Program flashAttentionBackwardPost(const AttentionBackwardConfig &config);

/// The backward pass's launches, in the order its three kernels declare
/// their parameters and run: preprocess (delta), the main kernel
/// (accumulating dQ, and dK/dV as `kvReduction` says), postprocess of dQ and
/// (unless direct) of dK and dV. The public call and the harness both run
/// the pass through this.
struct AttentionBackwardArgs {
  int64_t batch = 0, seqQ = 0, seqK = 0, headsQ = 0, headsKv = 0;
  double scale = 0;
  KvReduction kvReduction = KvReduction::direct;
  rt::LaunchArg q, k, v, o, dout, lse;
  /// f32 workspace: delta [batch, heads_q, seqlen_q], dQ's accumulator
  /// (Q's shape), and dK/dV's (fp32 [batch, seqlen_k, heads, head_dim] with
  /// heads_q heads when split, heads_kv when atomic; dK and dV themselves
  /// when direct).
  rt::LaunchArg delta, dqAccum, dkAccum, dvAccum;
  rt::LaunchArg dq, dk, dv;
  /// Kernels built with a query offset: the key position of query row 0.
  std::optional<int64_t> queryOffset;
  struct Packed {
    int64_t entries = 0, maxSeqlenK = 0;
    rt::LaunchArg cuSeqlensQ, cuSeqlensK;
  };
  std::optional<Packed> packed;

  /// Heads of the dK/dV accumulators: a slice per query head when split,
  /// else one per K/V head.
  static int64_t accumHeads(KvReduction r, int64_t headsQ, int64_t headsKv) {
    return r == KvReduction::split ? headsQ : headsKv;
  }
  int64_t accumHeads() const { return accumHeads(kvReduction, headsQ, headsKv); }
  std::vector<rt::LaunchArg> preArgs() const;
  std::vector<rt::LaunchArg> mainArgs() const;
  /// One launch of the postprocess kernel per gradient it finishes: dQ,
  /// then dK and dV unless they were written directly.
  std::vector<std::vector<rt::LaunchArg>> postArgs() const;
  /// The whole pass on `stream`; the accumulators the main kernel adds
  /// into (dQ's, and dK/dV's when atomic) are cleared in stream order
  /// first.
  void launch(Kernel &pre, Kernel &main, Kernel &post, CUstream stream = nullptr) const;
};

} // namespace tessel::kernels

#endif
