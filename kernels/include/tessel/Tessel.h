//===- Tessel.h - the kernel library as functions of tensors ----*- C++ -*-===//
//
// Attention, GEMM and FP8 quantisation on TensorViews, for programs that
// use Tessel as a library. Each call picks the configuration for the device
// the tensors live on, compiles it on first use (through the kernel cache,
// so a later process finds the binary on disk) and reuses it for every
// shape: extents are run-time symbols, so a new sequence length or batch
// never recompiles. Calls are asynchronous on `stream` (a CUstream of the
// tensors' device; 0 is the legacy default stream) and may come from
// several threads at once.
//
//   tessel::attention::Options o;
//   o.causal = true;
//   tessel::attention::forward(q, k, v, out, lse, o, stream);
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TESSEL_H
#define TESSEL_TESSEL_H

#include "tessel/kernels/Kernels.h"
#include "tessel/runtime/TensorView.h"

#include <cuda.h>
#include <optional>
#include <string>
#include <vector>

namespace tessel {

namespace rt {
class Communicator;
}

/// Tessel's version ("0.1.0"), as libtessel.so was built (defined in the
/// shared library only).
const char *version();

/// What a library call ran: the target and the configuration of each kernel
/// (as `tessel compile` names its parameters), and whether this call
/// compiled them.
struct Choice {
  std::string arch;
  std::string config;
  bool compiled = false;
};

namespace attention {

/// Tensors are BSHD: q, out, dout, dq [batch, seqlen_q, heads_q, head_dim];
/// k, v, dk, dv [batch, seqlen_k, heads_kv, head_dim]; lse [batch, heads_q,
/// seqlen_q] f32. heads_q must be a multiple of heads_kv (GQA).
struct Options {
  bool causal = false;
  /// Softmax scale; 0 means 1 / sqrt(head_dim).
  double scale = 0;
  /// The target to compile for; "" picks the device's (sm_90a on Hopper,
  /// sm_100a on Blackwell, sm_80 otherwise).
  std::string arch;
  /// Packed sequences: batch 1, cu_seqlens_q/k int32 [sequences + 1] on the
  /// device, and the longest sequence of each side.
  std::optional<TensorView> cuSeqlensQ, cuSeqlensK;
  int64_t maxSeqlenQ = 0, maxSeqlenK = 0;
  /// Causal, fixed-length batches: query row i sits at key position
  /// queryOffset + i, so a chunk of a sequence's queries (a context-parallel
  /// shard, a chunk of a prefill) attends to the keys up to its own place.
  /// 0 is the usual top-left mask; seqlen_k - seqlen_q aligns the mask to
  /// the bottom right. The forward runs it on the register kernels (wgmma,
  /// mma.sync; on sm_100a too).
  int64_t queryOffset = 0;
};

/// Overrides of the configuration the library picks (tile sizes, threads,
/// stages); dtype, head_dim, causal and varlen always follow the tensors.
struct ForwardOptions : Options {
  std::optional<kernels::AttentionConfig> config;
  /// Without `config`: the stages, persistent walk and K/V overlap that
  /// `tessel tune flash_attention_fwd` recorded for this device (else for
  /// the target) and shape bucket, when there is one; else the rule of
  /// kernels::chooseForwardSchedule (the query tile, and K ahead of V, turns
  /// or the persistent walk at 8k keys and more on sm_90a).
  bool tuned = true;
  /// FP8 inputs (f8e4m3, f8e5m2; out is bf16): per-tensor scales, q ~=
  /// qScale x the FP8 values and so on. qScale and kScale multiply the
  /// softmax scale, vScale the output.
  double qScale = 1, kScale = 1, vScale = 1;
  /// FP8 inputs: scales on the device, read by the kernel (FlashAttention-
  /// 3's descale tensors): f32 [sequences, heads_kv] each (sequences = the
  /// batch, or a packed batch's), any strides (0 broadcasts: a per-tensor
  /// scale expanded), or [1], one scale for every head. All three or none;
  /// they multiply beside qScale, kScale and vScale, and need no trip to
  /// the host, so scales a quantisation kernel computes can feed the
  /// forward inside a CUDA graph.
  std::optional<TensorView> qDescale, kDescale, vDescale;
  /// FP8 on sm_89 and sm_90a, fixed-length batches: device memory for V
  /// rearranged as the kernel reads it (forwardWorkspaceBytes; the keys of
  /// each 16 permuted, V^T); without it the call allocates and frees it on
  /// `stream` (cuMemAllocAsync).
  uint64_t workspace = 0;
  size_t workspaceBytes = 0;
};
struct BackwardOptions : Options {
  std::optional<kernels::AttentionBackwardConfig> config;
  /// Without `config`: the score orientation, query rows a step, dQ path
  /// and stages that `tessel tune flash_attention_bwd` recorded for this
  /// device (else for the target) and shape bucket, when there is one;
  /// else the defaults.
  bool tuned = true;
  /// Device memory the backward pass may use for its fp32 accumulators
  /// (backwardWorkspaceBytes); without it the pass allocates and frees on
  /// `stream` (stream-ordered, cuMemAllocAsync).
  uint64_t workspace = 0;
  size_t workspaceBytes = 0;
};

/// out = softmax(scale * q k^T) v, lse its natural log-sum-exp per row.
/// f16, bf16 (out the same) or FP8 (f8e4m3, f8e5m2: out bf16, with the
/// options' per-tensor scales) inputs.
Choice forward(const TensorView &q, const TensorView &k, const TensorView &v,
               const TensorView &out, const TensorView &lse, const ForwardOptions &options = {},
               CUstream stream = nullptr);

/// Bytes of workspace forward() may need for these shapes: FP8 inputs of a
/// fixed-length batch, V rearranged (0 otherwise; sm_100a uses none).
size_t forwardWorkspaceBytes(const TensorView &q, const TensorView &k,
                             const ForwardOptions &options = {});

/// dq, dk, dv (in q's dtype) from the forward's inputs, its out and lse,
/// and the upstream gradient dout.
Choice backward(const TensorView &q, const TensorView &k, const TensorView &v,
                const TensorView &out, const TensorView &lse, const TensorView &dout,
                const TensorView &dq, const TensorView &dk, const TensorView &dv,
                const BackwardOptions &options = {}, CUstream stream = nullptr);

/// Bytes of workspace backward() needs for these shapes.
size_t backwardWorkspaceBytes(const TensorView &q, const TensorView &k,
                              const BackwardOptions &options = {});

} // namespace attention

/// C = op(A) op(B): A [M, K] (or [K, M] with transposeA), B [K, N] (or
/// [N, K] with transposeB), C [M, N]. f16 or bf16 inputs accumulate in
/// f32 into C in f16, bf16 or f32; FP8 inputs (f8e4m3, f8e5m2) too, with
/// optional scales; i8 inputs accumulate exactly into an i32 C. 8-bit
/// inputs are K-major: A [M, K] and B [N, K] (transposeB), as the tensor
/// cores read them (sm_90a).
struct GemmCallOptions {
  bool transposeA = false, transposeB = false;
  /// f32 scales the product is multiplied by before it is stored (FP8's
  /// dequantisation): one element each (per tensor), scaleA [M] and
  /// scaleB [N] (per row of A and column of B), or DeepSeek-V3's block
  /// scales: scaleA [ceil(K / 128), M] (1 x 128 blocks, K-block-major) and
  /// scaleB [ceil(N / 128), ceil(K / 128)] (128 x 128 blocks), each K
  /// block's product promoted into f32 with its scales; or MX scales (ue8m0,
  /// one per 32 of K, sm_100a): scaleA [ceil(M / 128), ceil(K / 128), 32,
  /// 16] and scaleB the same over N, cuBLAS's (and torch's to_blocked)
  /// layout. Both or neither.
  std::optional<TensorView> scaleA, scaleB;
  std::string arch;
  /// Tile sizes, stages, threads; types and transposes follow the tensors
  /// and the flags above.
  std::optional<kernels::GemmConfig> config;
  /// Without `config`: the configuration `tessel tune gemm` recorded for
  /// this device (else for the target) and shape bucket, when there is one
  /// (read once per process and bucket); else the target's default.
  bool tuned = true;
};
Choice gemm(const TensorView &a, const TensorView &b, const TensorView &c,
            const GemmCallOptions &options = {}, CUstream stream = nullptr);

/// FP8 quantisation before an FP8 gemm: x [M, cols] (f32, f16 or bf16) into
/// q [M, cols] (f8e4m3 or f8e5m2) and f32 scales with x ~= q * scale, by
/// the arithmetic kernels::QuantizeConfig describes (scale = amax / FP8_MAX
/// with a floor that gives an all-zero row or block zero codes and a normal
/// scale; x times FP8_MAX / amax, rounded to nearest even and saturated).
/// The scales' shape says what each covers: [M] a row (per token, what
/// tessel::gemm's per-row scaleA takes), [M, cols / 128] each 128
/// consecutive elements of a row (cols a multiple of 128). ue8m0 scales
/// make MXFP8 (OCP MX v1.0): a power-of-two scale per 32 elements of a row
/// (cols a multiple of 32), rounded up so that no element saturates,
/// stored [M, cols / 32] or, 4-D, in cuBLAS's blocked layout [ceil(M /
/// 128), ceil(cols / 128), 32, 16] that tessel::gemm's MX scaleA and scaleB
/// take (its padding is set to 1.0).
struct QuantizeOptions {
  std::string arch;
  /// Block scales as [cols / 128, M] (K-block-major: what GemmCallOptions'
  /// block-scaled scaleA is) instead of [M, cols / 128].
  bool kMajorScales = false;
  /// Rows per thread block and threads; dtype, out, granularity and cols
  /// always follow the tensors. Without it: whole rows of up to 8192
  /// elements per 256 threads.
  std::optional<kernels::QuantizeConfig> config;
};
Choice quantize(const TensorView &x, const TensorView &q, const TensorView &scales,
                const QuantizeOptions &options = {}, CUstream stream = nullptr);

/// Weight-only quantised GEMM: y [M, N] = x [M, K] w^T, x f16 or bf16, y
/// f16, bf16 or f32, and w stored as integer codes: u8 [N, K / 2] holds
/// two int4 codes a byte (k even in the low nibble, codes 0-15, zero point
/// 8), i8 [N, K] int8 codes (zero point 0). scales [K / group, N] (x's
/// type, group 32, 64 or 128) and optional zeros of the same shape: weight
/// (n, k) is (c - z) * s with s and z of group k / group, computed in f32
/// and rounded to x's type (GPTQ's and AWQ's layout of scales and zeros;
/// kernels::WeightGemmConfig says exactly what is computed).
struct WeightGemmOptions {
  std::optional<TensorView> zeros;
  std::string arch;
  /// The fused kernel's tiles and K split (format, types, group and zeros
  /// follow the tensors; split_k > 1 sums in f32). Without it: from 256
  /// tokens the weights are dequantised into a dense [N, K] matrix and
  /// multiplied by tessel::gemm; below, the fused kernel with tiles and a
  /// K split chosen for the GPU.
  std::optional<kernels::WeightGemmConfig> config;
  /// Device scratch (weightGemmWorkspaceBytes()); without it a call that
  /// needs some allocates and frees on its stream.
  uint64_t workspace = 0;
  size_t workspaceBytes = 0;
};
Choice weight_gemm(const TensorView &x, const TensorView &w, const TensorView &scales,
                   const TensorView &y, const WeightGemmOptions &options = {},
                   CUstream stream = nullptr);
/// Bytes of scratch weight_gemm() needs for these tensors: the dense
/// weights on the many-token path, f32 sums where K is split for a 16-bit
/// y, else 0.
size_t weightGemmWorkspaceBytes(const TensorView &x, const TensorView &w, const TensorView &scales,
                                const TensorView &y, const WeightGemmOptions &options = {});

namespace decode {

/// Decode attention: one query token per sequence against a paged KV cache.
/// block_table i32 [batch, max_pages] maps a sequence's n-th page of keys to
/// a page of the cache; lengths i32 [batch] (on the device) counts each
/// sequence's keys, which fill its pages in order (max_pages * page_size at
/// most: the kernels read a table entry only for pages below the length).
/// A sequence of no keys gets zeros.
struct Options {
  /// Softmax scale; 0 means 1 / sqrt(the score's head_dim).
  double scale = 0;
  std::string arch;
  /// Key splits per sequence, each merged by a combine kernel; 0 picks
  /// them from the grid and the GPU's multiprocessors (1, no combine, when
  /// batch x heads fill the GPU twice), given the longest sequence
  /// (`maxSeqlen`; 0 means max_pages * page_size).
  int64_t splits = 0;
  int64_t maxSeqlen = 0;
  /// Device memory for the splits' partial outputs (workspaceBytes); without
  /// it a split call allocates and frees on `stream` (stream-ordered).
  uint64_t workspace = 0;
  size_t workspaceBytes = 0;
  /// Without a config: the record `tessel tune` wrote for this device, when
  /// there is one; else the defaults.
  bool tuned = true;
};

struct PagedOptions : Options {
  /// Keys a step, stages, threads; dtype, head_dim, group, page_size and
  /// the cache's type follow the tensors.
  std::optional<kernels::PagedDecodeConfig> config;
  /// An f8e4m3 cache's scales (key = kScale * code, value = vScale *
  /// code); ignored for a cache of q's type.
  double kScale = 1, vScale = 1;
};
/// GQA decode: q, out [batch, heads_q, head_dim] (f16 or bf16); k_cache,
/// v_cache [pages, page_size, heads_kv, head_dim] in q's type or f8e4m3
/// (with PagedOptions' scales), heads_q a multiple of heads_kv; page_size
/// 16 to 256, a power of two.
Choice paged(const TensorView &q, const TensorView &kCache, const TensorView &vCache,
             const TensorView &blockTable, const TensorView &lengths, const TensorView &out,
             const PagedOptions &options = {}, CUstream stream = nullptr);

struct MlaOptions : Options {
  /// The value columns: the first `latent` of each cache row (the rest are
  /// the rope key).
  int64_t latent = 512;
  std::optional<kernels::MlaDecodeConfig> config;
};
/// MLA decode: q [batch, heads, latent + rope] (the absorbed query and its
/// rope part), cache [pages, page_size, latent + rope] (one row per token,
/// shared by all heads), out [batch, heads, latent].
Choice mla(const TensorView &q, const TensorView &cache, const TensorView &blockTable,
           const TensorView &lengths, const TensorView &out, const MlaOptions &options = {},
           CUstream stream = nullptr);

/// Bytes of workspace a call with these tensors needs (0 unsplit).
size_t pagedWorkspaceBytes(const TensorView &q, const TensorView &kCache,
                           const TensorView &blockTable, const PagedOptions &options = {});
size_t mlaWorkspaceBytes(const TensorView &q, const TensorView &cache,
                         const TensorView &blockTable, const MlaOptions &options = {});

} // namespace decode

namespace sp_attention {

/// Sequence-parallel attention over the ranks of one node, one process per
/// GPU (Ulysses): every rank holds 1/N of every sequence for all heads,
/// q and out [batch, seqlen / N, heads_q, head_dim], k and v [batch,
/// seqlen / N, heads_kv, head_dim] (f16 or bf16, contiguous, on the
/// communicator's device). The all-to-all gives each rank the whole
/// sequences for heads_q / N heads (K/V heads replicated where heads_kv <
/// N), Tessel's attention runs over them, and the inverse all-to-all brings
/// O back to the rank's shard. The call is collective: every rank calls
/// with the same shapes and options, in the same order; every rank's checks
/// run, and a failure on any rank is an error on all, before anything
/// moves. The exchange's copy engines pull from the peers' copies in
/// symmetric memory: the shards are copied in, and O out, on `stream`.
/// Where each rank's rows come from: `ulysses`, 1/N of every sequence end
/// to end; `zigzag`, the sequence cut into 2N chunks and rank r holding
/// chunks r and 2N-1-r (which balances causal work), as [batch, 2 * chunk,
/// heads, head_dim]. Zig-zag keeps the queries where they are and gathers K
/// and V (no exchange back); its chunks are whole attention tiles (128
/// rows) and its batch fixed.
enum class Placement { ulysses, zigzag };
struct Options {
  bool causal = false;
  /// Softmax scale; 0 means 1 / sqrt(head_dim).
  double scale = 0;
  Placement placement = Placement::ulysses;
  /// Packed sequences (batch 1, Ulysses): the whole sequences' prefix sums of query
  /// and key rows (int32, sequences + 1 entries, on the host; each length a
  /// multiple of the ranks). Each rank's shard holds 1/N of every sequence,
  /// end to end. Empty: a fixed batch.
  std::vector<int32_t> cuSeqlensQ, cuSeqlensK;
  /// Head groups per rank whose exchange overlaps the attention of the
  /// group before (the pipelined forms, forward and backward); 1 runs
  /// exchange, attention and exchange back in turn; 0 picks 4, 2 or 1: in
  /// the forward the most the rank's heads divide into, in the backward the
  /// most that still give each group's kernel 1.5 waves of key blocks.
  int groups = 0;
  /// Streams the forward's head groups take turns on (1 to 8; the
  /// backward's run on one: its kernels fill the SMs).
  int attentionStreams = 2;
  /// How the shards move: "symmetric" (the copy engines pull from peers'
  /// symmetric memory: one node, peer access), "nccl" (grouped
  /// ncclSend/ncclRecv of packed messages: any topology NCCL reaches),
  /// "hierarchical" (the copy engines inside each node, NCCL between
  /// nodes, at once; $TESSEL_EXCHANGE_NODE_RANKS splits one machine into
  /// smaller nodes), or "" for $TESSEL_EXCHANGE when set, else symmetric
  /// where every rank shares the node and reaches every peer, hierarchical
  /// where nodes of several ranks do, NCCL otherwise. All put the same
  /// bytes in the same places: the results are identical bit for bit.
  std::string transport;
};
/// Returns the form (unfused or pipelined, its groups and streams, the
/// transport) and the attention kernel's configuration.
Choice forward(rt::Communicator &comm, const TensorView &q, const TensorView &k,
               const TensorView &v, const TensorView &out, const Options &options = {},
               CUstream stream = nullptr);
/// The same, also writing the rank's shard of the log-sum-exp, lse f32
/// [batch, heads_q, seqlen / N] (a packed batch: [1, heads_q, its rows /
/// N], each sequence's 1/N at its start / N; zig-zag, each head's rows of
/// chunk r, then of chunk 2N-1-r): what backward() takes.
Choice forward(rt::Communicator &comm, const TensorView &q, const TensorView &k,
               const TensorView &v, const TensorView &out, const TensorView &lse,
               const Options &options = {}, CUstream stream = nullptr);
/// The gradients dq, dk, dv of the rank's shards (shaped as q, k and v)
/// from the forward's q, k, v, out and lse shards and the upstream
/// gradient dout (shaped as q), with the same options. Ulysses: the shards
/// go to the head layout as in the forward (q, k, v, out, dout and lse in
/// one exchange), Tessel's attention backward runs over the whole
/// sequences for the rank's heads, and dq, dk, dv come back; a K/V head
/// replicated over several ranks (heads_kv < N) gets the sum of its
/// replicas' gradients (added in f32, rounded after each addition).
/// Zig-zag: K and V are gathered as in the forward, the attention backward
/// runs per chunk with its queries at their place in the sequence (each
/// share of dk and dv in the gradients' type), and a reduce-scatter sums
/// every rank's shares of the rank's dk and dv in f32, rounding the sum
/// once.
/// Collective, checked on every rank before anything moves, like
/// forward(); a failure on one rank once the exchanges have started (the
/// attention backward's compile, say) lets the exchanges finish and is then
/// an error on every rank (the ranks meet on the host once per call).
Choice backward(rt::Communicator &comm, const TensorView &q, const TensorView &k,
                const TensorView &v, const TensorView &out, const TensorView &lse,
                const TensorView &dout, const TensorView &dq, const TensorView &dk,
                const TensorView &dv, const Options &options = {}, CUstream stream = nullptr);
/// The communicator of this process's rank in the job its launcher
/// (torchrun, tessel's own) describes in the environment
/// (rt::Communicator::fromEnvironment), made on first use and kept for the
/// process: for callers that hold none of their own, such as PyTorch's
/// operators. Its rank, world size and device without Communicator.h.
rt::Communicator &processCommunicator();
struct RankPlace {
  int rank, size, device;
};
RankPlace placeOf(const rt::Communicator &comm);
/// Frees processCommunicator()'s plans and the communicator (collective),
/// when there is one.
void releaseProcessCommunicator();
/// Frees what the calls made for `comm` (their exchanges' symmetric
/// memory, forward's and backward's), collectively: every rank calls it,
/// before destroying the communicator. Without it they live until the
/// process ends. A communicator keeps the plans of its 16 most recently
/// used problems (sp_attention's and tp's together,
/// kernels::kPlansKept); a new problem beyond them waits for the device
/// and frees the least recently used plan first, at the same call on every
/// rank, so shapes that change from call to call cost a new plan each
/// time but never accumulate memory.
void release(rt::Communicator &comm);

} // namespace sp_attention

namespace tp {

/// Tensor-parallel linear layers over the ranks of a job, each GEMM's
/// communication overlapped with its compute. With N ranks:
///  - allgather_gemm (a column-parallel layer): every rank holds m rows of
///    the activations, a [m, K]; c [N * m, n] = gather(a) op(b), the
///    gathered rows in rank order (rank r's at rows r * m);
///  - gemm_reducescatter (a row-parallel layer): every rank holds a [M, K]
///    (its slice of the inner dimension) and b [K, n] (op(b)); c [M / N, n]
///    is rank r's rows, [r * M / N, (r + 1) * M / N), of the sum over ranks
///    of a op(b).
/// a and c are contiguous; a f16 or bf16, b a's type (op(b) as tessel::gemm
/// takes it), c a's type or f32; or a and b FP8 (f8e4m3, f8e5m2; b [n, K]
/// with transposeB), c bf16, f16 or f32, with tessel::gemm's optional
/// scales (the rank's a's rows' and op(b)'s columns', or one each; each
/// rank's own). The calls are collective: every rank calls
/// with the same shapes and options, in the same order; every rank's checks
/// run, and a failure on any rank is an error on all, before anything
/// moves. A rank's calls follow each other on its device (one at a time per
/// communicator), on any streams.
///
/// The symmetric transport (one node, peer access) works in N steps of m
/// rows. allgather_gemm multiplies its own rows at once while the copy
/// engines pull the peers' rows from symmetric memory, each step's GEMM
/// starting when its rows have arrived. gemm_reducescatter computes the
/// partial rows of the next rank first and its own last; the copy engines
/// push each finished partial into its rank's symmetric memory while the
/// next is computed, and once every rank's have arrived, partial_sum adds
/// them (each partial rounded to c's type, then summed in f32 in rank order
/// and rounded once more; an f32 c keeps f32 partials). The nccl transport runs the
/// collective and the whole GEMM one after the other.
struct Options {
  bool transposeB = false;
  std::string arch;
  /// The GEMM's tiles; without it each step's GEMM is tessel::gemm's
  /// choice for its shape.
  std::optional<kernels::GemmConfig> config;
  /// f32 scales of 8-bit inputs, as GemmCallOptions takes them: scaleA
  /// [rows of a] and scaleB [n], or [1] each. allgather_gemm gathers every
  /// rank's scaleA with its rows.
  std::optional<TensorView> scaleA, scaleB;
  /// "symmetric", "nccl" or "" ($TESSEL_EXCHANGE, else symmetric where
  /// every rank shares the node and reaches every peer, else nccl).
  std::string transport;
};
/// Returns the transport, why it was chosen, and the GEMM's configuration.
Choice allgather_gemm(rt::Communicator &comm, const TensorView &a, const TensorView &b,
                      const TensorView &c, const Options &options = {}, CUstream stream = nullptr);
Choice gemm_reducescatter(rt::Communicator &comm, const TensorView &a, const TensorView &b,
                          const TensorView &c, const Options &options = {},
                          CUstream stream = nullptr);
/// Frees what the calls made for `comm` (symmetric memory), collectively,
/// as sp_attention::release does (the two share the communicator's plans).
void release(rt::Communicator &comm);

} // namespace tp

} // namespace tessel

#endif
