//===- SequenceParallelAttention.h - attention over sequence shards -*- C++ -*-===//
//
// FlashAttention forward over a sequence spread across the N ranks of a
// node, one process per GPU, in the forms the exchanges allow:
//  - Ulysses (Ulysses.h): the all-to-all gives each rank the whole sequence
//    for heads/N heads, attention runs over it, and the inverse all-to-all
//    brings O back to the rank's sequence shard. Unfused (exchange,
//    attention, exchange back in turn), pipelined (head groups whose
//    exchange overlaps the attention of the group before) and fused (the
//    same with attention waiting in the kernel for each source's shard).
//  - Zig-zag chunked queries (ZigZag.h): each rank keeps its two query
//    chunks, gathers K and V of the whole sequence and runs causal
//    attention per chunk with the queries at their key positions. Unfused
//    (gather, then attention) and fused (attention waits per chunk).
// Every launch's arguments come from AttentionForwardArgs, so that they
// stay in the order the kernels declare them. Construction is collective
// (the exchanges allocate symmetric memory). Inputs come as the whole
// problem's host bytes, [rows of the whole batch, heads, head_dim] per
// tensor; each rank takes its own shard of them.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_PARALLEL_SEQUENCEPARALLELATTENTION_H
#define TESSEL_KERNELS_PARALLEL_SEQUENCEPARALLELATTENTION_H

#include "tessel/kernels/attention/Attention.h"
#include "tessel/kernels/parallel/Ulysses.h"
#include "tessel/kernels/parallel/ZigZag.h"

#include <array>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tessel {
class Kernel;
}

namespace tessel::kernels {

/// The whole problem, the kernel's configuration, and how the forms spread
/// it over the ranks.
struct SequenceParallelProblem {
  /// The whole problem (batch, seqlen, heads, head_dim) and the ranks.
  UlyssesShape shape;
  AttentionConfig config;
  double scale = 0;
  /// Query heads of each head group of a rank (pipelined and fused forms).
  std::vector<int64_t> groupHeads;
  /// Streams the head groups' attention takes turns on (pipelined and
  /// fused forms).
  int attentionStreams = 2;
  UlyssesExchange::LocalShard localShard = UlyssesExchange::LocalShard::kernel;
};

/// The problem as the zig-zag gather sees it (a fixed batch).
ZigZagShape zigzagShape(const SequenceParallelProblem &p);

/// The whole problem's Q, K and V as host bytes (each rank holds the same).
using WholeInputs = std::array<std::span<const char>, 3>;

/// A packed batch's prefix sums on the device (no buffers for a fixed
/// batch).
struct DeviceSeqlens {
  std::unique_ptr<rt::DeviceBuffer> q, k;
  explicit DeviceSeqlens(const UlyssesShape &s);
};

/// The forward kernel's arguments over the whole sequences of `p`'s batch
/// with `headsQ` and `headsKV` heads (a packed batch's sequences from
/// `cu`): what each head group's attention takes, and single-GPU attention
/// over the whole problem.
AttentionForwardArgs wholeSequenceArgs(const SequenceParallelProblem &p, const DeviceSeqlens &cu,
                                       int64_t headsQ, int64_t headsKV, CUdeviceptr q,
                                       CUdeviceptr k, CUdeviceptr v, CUdeviceptr o,
                                       CUdeviceptr lse);

/// Rows of the whole problem's tensor `tensor` to and from rank `rank`'s
/// shard: `copy(localRow, wholeRow, rows)` for each sequence's 1/N.
void forEachShardRun(const UlyssesShape &s, int tensor, int rank,
                     const std::function<void(int64_t, int64_t, int64_t)> &copy);

/// One way of running the Ulysses forward: its exchange (head groups), how
/// attention learns of arrivals, and its kernel. The head groups' LSE go to
/// `lseHeads` in the head layout of UlyssesPieces.h (logSumExp) when given,
/// for an exchange to bring back; else to buffers of the form's own.
class UlyssesAttentionForm {
public:
  UlyssesAttentionForm(std::string name, rt::Communicator &comm,
                       const SequenceParallelProblem &p, const DeviceSeqlens &cu,
                       std::vector<int64_t> groupHeads, UlyssesExchange::Arrival arrival,
                       Kernel &kernel, CUdeviceptr lseHeads = 0);
  ~UlyssesAttentionForm();
  const std::string &name() const { return formName; }
  UlyssesExchange &exchange() { return *x; }
  /// This rank's shard of the whole problem's Q, K and V into the
  /// exchange's inputs.
  void upload(const WholeInputs &whole);
  /// Exchange, attention and the exchange back on `stream`; O lands in
  /// exchange().result().
  void run(CUstream stream);
  /// The head groups' attention launches alone, over whatever the outputs
  /// hold: what overlapping the exchanges could at best reach.
  void attentionAlone(CUstream stream);

private:
  std::string formName;
  int rank;
  std::unique_ptr<UlyssesExchange> x;
  UlyssesExchange::Arrival arrival;
  Kernel *kernel;
  int attentionStreams;
  /// Per head group: its LSE, [heads of the group, rows], unless the
  /// caller gave a head layout for them.
  std::vector<std::unique_ptr<rt::DeviceBuffer>> lse;
  /// Per head group, without the streamed shards' arguments (those carry
  /// the epoch of the call), and the same as launch lists.
  std::vector<AttentionForwardArgs> groupArgs;
  std::vector<std::vector<rt::LaunchArg>> groupLists;
};

/// The Ulysses forms of one rank with their kernels: unfused and pipelined
/// always, fused where the shards are whole tiles of a fixed batch.
class UlyssesAttention {
public:
  UlyssesAttention(rt::Communicator &comm, const SequenceParallelProblem &p);
  ~UlyssesAttention();
  /// Unfused, pipelined, then fused when there is one.
  std::vector<std::unique_ptr<UlyssesAttentionForm>> &forms() { return all; }
  UlyssesAttentionForm &pipelined() { return *all[1]; }
  /// Why there is no fused form ("" when there is one).
  const std::string &noFused() const { return whyNoFused; }
  /// The forward kernel the unfused and pipelined forms launch, built for
  /// the whole sequences (so single-GPU attention over the whole problem
  /// can run with it too), and the packed batch's sequences on the device.
  Kernel &kernel() { return *plain; }
  const DeviceSeqlens &seqlens() const { return cu; }
  /// Every form's inputs from the whole problem's.
  void upload(const WholeInputs &whole);

private:
  // The kernels before the forms that point at them, so that they outlive
  // the forms.
  std::unique_ptr<Kernel> plain, streamed;
  DeviceSeqlens cu;
  std::vector<std::unique_ptr<UlyssesAttentionForm>> all;
  std::string whyNoFused;
};

/// The zig-zag forms of one rank: its queries, outputs, the K/V gather and
/// the attention launches over the rank's two chunks.
class ZigZagAttention {
public:
  ZigZagAttention(rt::Communicator &comm, const SequenceParallelProblem &p);
  ~ZigZagAttention();
  const ZigZagShape &shape() const { return z; }
  /// Bytes of the rank's two chunks of a tensor with `heads` heads.
  int64_t chunksBytes(int64_t heads) const;
  /// The rank's two chunks of a whole-sequence host tensor with `heads`
  /// heads into `local`, [batch, 2 * chunk, heads, head_dim].
  void uploadChunks(std::span<const char> whole, CUdeviceptr local, int64_t heads) const;
  /// The rank's Q and its K and V inputs of the gather.
  void upload(const WholeInputs &whole);
  /// The same from the rank's chunks on the device, each [batch, 2 * chunk,
  /// heads, head_dim], copied on `stream`.
  void load(CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, CUstream stream);
  /// O of the rank's two chunks, [batch, 2 * chunk, heads_q, head_dim].
  CUdeviceptr output() const { return o.ptr(); }
  /// The log-sum-exp of the rank's chunks into `to`, f32 [batch, heads_q,
  /// 2 * chunk] (each head's rows of chunk r, then of chunk 2N-1-r), on
  /// `stream`.
  void copyLogSumExp(CUdeviceptr to, CUstream stream) const;
  /// K/V gathered, then attention.
  void unfused(CUstream stream);
  /// Attention queued once the rank's own chunks are in, waiting in the
  /// kernel for each peer's.
  void fused(CUstream stream);
  /// The rank's attention over the gathered K/V, no gather: the balance
  /// zig-zag placement gives.
  void attentionAlone(CUstream stream);

private:
  SequenceParallelProblem problem;
  ZigZagShape z;
  int rank;
  std::unique_ptr<Kernel> chunked, streamed;
  std::unique_ptr<ZigZagKvGather> gather;
  rt::DeviceBuffer q, o, lse;

  /// Attention of every chunk and batch over `keys` and `values`; `arrivals`
  /// set: the streamed kernel's shards.
  void attend(Kernel &kernel, CUdeviceptr keys, CUdeviceptr values, CUstream stream,
              CUdeviceptr arrivals = 0, uint32_t epoch = 0);
};

} // namespace tessel::kernels

#endif
