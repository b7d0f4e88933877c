//===- ZigZagBackward.cpp - sp_attention::backward, zig-zag placed ---------===//
//
// Rank r holds chunks r and 2N-1-r of every sequence (q, k, v, out, dout
// and their gradients, [batch, 2 * chunk, heads, head_dim]) and its
// queries' log-sum-exp. The backward gathers K and V of the whole sequence
// as the forward does (ZigZagKvGather) and runs Tessel's attention backward
// per chunk, the queries at their key positions (attention::Options::
// queryOffset) over the keys the chunk sees. That writes the chunk's dq
// whole, and this rank's share of dK and dV for every key it saw (in the
// gradients' type, as the backward writes them). A reduce-scatter then gives
// each rank the sum of all ranks' shares for its own chunks: the copy
// engines pull the shares from the peers' symmetric memory (under a causal
// mask only the 2N - c chunks at or after chunk c saw it), and a partial-sum
// kernel per chunk adds them in f32, in rank order, rounding the sum once.
//
//===----------------------------------------------------------------------===//
#include "SpAttentionProblem.h"
#include "common/LibraryCalls.h"
#include "tessel/kernels/basic/Basic.h"
#include "tessel/kernels/parallel/ExchangeFlags.h"
#include "tessel/runtime/Communicator.h"
#include "tessel/runtime/Driver.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;
using rt::Communicator;
using rt::ScalarType;

namespace {

enum Gradient { kDk, kDv };

struct ZigZagBackwardPlan : SpPlan {
  SequenceParallelProblem problem;
  ZigZagShape z;
  int rank = 0;
  std::string arch;
  std::unique_ptr<ZigZagKvGather> gather;
  /// This rank's shares of dK and dV for the keys its chunks saw, [2 local
  /// chunks][batch][seqlen][heads_kv][head_dim]: local chunk p's backward
  /// writes the first keys of its part.
  std::array<std::unique_ptr<rt::SymmetricBuffer>, 2> shares;
  /// Every rank's shares of this rank's chunks, pulled: [batch][2 local
  /// chunks][2N shares][chunk][heads_kv][head_dim] per gradient.
  std::array<std::unique_ptr<rt::DeviceBuffer>, 2> pulled;
  /// The log-sum-exp as the chunks' backwards read it, [batch][2][heads_q]
  /// [chunk].
  std::unique_ptr<rt::DeviceBuffer> lseChunks;
  /// The reduce-scatter's 'ready' and 'read' epochs.
  std::unique_ptr<rt::SymmetricBuffer> flags;
  uint32_t epoch = 0;
  std::unique_ptr<CopyLanes> lanes;
  std::unique_ptr<rt::DeviceBuffer> workspace;
  size_t workspaceBytes = 0;
  std::shared_ptr<Kernel> sum;

  int64_t rowBytes(int64_t heads) const { return heads * z.headDim * z.elementBytes; }
  /// Key rows local chunk `part` of this rank sees.
  int64_t keysSeen(int part) const {
    return problem.config.causal ? (z.globalChunk(rank, part) + 1) * z.chunk() : z.seqlen;
  }
  /// Whether local chunk `part` of rank `source` saw the keys of global
  /// chunk `chunk`.
  bool saw(int source, int part, int chunk) const {
    return !problem.config.causal || z.globalChunk(source, part) >= chunk;
  }
};

/// The gradients' views of one chunk's backward: batch entry b, local
/// chunk `part`.
struct ChunkCall {
  TensorView q, k, v, out, lse, dout, dq, dk, dv;
  attention::BackwardOptions options;
};
ChunkCall chunkCall(const ZigZagBackwardPlan &plan, int64_t b, int part, const TensorView &q,
                    const TensorView &out, const TensorView &dout, const TensorView &dq) {
  const ZigZagShape &z = plan.z;
  int64_t chunk = z.chunk(), keys = plan.keysSeen(part), rowQ = plan.rowBytes(z.headsQ),
          rowKV = plan.rowBytes(z.headsKV);
  int device = q.device;
  ScalarType type = q.dtype;
  int64_t queriesAt = (b * 2 + part) * chunk * rowQ;
  auto queries = [&](const TensorView &whole) {
    return TensorView::contiguous(whole.data + queriesAt, type, {1, chunk, z.headsQ, z.headDim},
                                  device);
  };
  auto keysOf = [&](CUdeviceptr base) {
    return TensorView::contiguous(base, type, {1, keys, z.headsKV, z.headDim}, device);
  };
  ChunkCall c;
  c.q = queries(q);
  c.out = queries(out);
  c.dout = queries(dout);
  c.dq = queries(dq);
  c.k = keysOf(plan.gather->gathered(0) + b * z.seqlen * rowKV);
  c.v = keysOf(plan.gather->gathered(1) + b * z.seqlen * rowKV);
  int64_t shareAt = (part * z.batch + b) * z.seqlen * rowKV;
  c.dk = keysOf(plan.shares[kDk]->local() + shareAt);
  c.dv = keysOf(plan.shares[kDv]->local() + shareAt);
  c.lse = TensorView::contiguous(plan.lseChunks->ptr() + (b * 2 + part) * z.headsQ * chunk * 4,
                                 ScalarType::F32, {1, z.headsQ, chunk}, device);
  attention::BackwardOptions &o = c.options;
  o.causal = plan.problem.config.causal;
  o.scale = plan.problem.scale;
  o.arch = plan.arch;
  if (o.causal) o.queryOffset = z.globalChunk(plan.rank, part) * chunk;
  if (plan.workspace) {
    o.workspace = plan.workspace->ptr();
    o.workspaceBytes = plan.workspaceBytes;
  }
  return c;
}

std::unique_ptr<ZigZagBackwardPlan> makePlan(Communicator &comm, SequenceParallelProblem problem,
                                             const std::string &arch) {
  auto plan = std::make_unique<ZigZagBackwardPlan>();
  plan->problem = std::move(problem);
  plan->z = zigzagShape(plan->problem);
  plan->rank = comm.localRank();
  plan->arch = arch;
  const ZigZagShape &z = plan->z;
  // Compiled and loaded before the collective allocations: a rank whose
  // compile failed after them would leave its peers waiting in the gather.
  // (A module load also waits for running kernels, and a peer's handshake
  // may soon spin on this rank's.)
  PartialSumConfig add;
  add.dtype = plan->problem.config.dtype;
  bool compiled = false;
  plan->sum = cachedKernel(fmt::format("partial_sum {}", partialSumSettings().describe(add)), arch,
                           [&] { return partialSum(add); }, compiled);
  plan->sum->loadedKernel().resourceUsage();
  plan->gather = std::make_unique<ZigZagKvGather>(comm, z);
  int64_t kvRows = z.batch * z.seqlen, rowKV = plan->rowBytes(z.headsKV);
  for (int t : {kDk, kDv}) {
    plan->shares[t] = std::make_unique<rt::SymmetricBuffer>(comm, 2 * kvRows * rowKV);
    plan->pulled[t] =
        std::make_unique<rt::DeviceBuffer>(z.batch * 2 * 2 * z.ranks * z.chunk() * rowKV);
  }
  plan->lseChunks = std::make_unique<rt::DeviceBuffer>(z.batch * 2 * z.headsQ * z.chunk() * 4);
  plan->flags = exchangeFlags(comm, 4 * 2 * z.ranks);
  plan->lanes = std::make_unique<CopyLanes>(z.ranks);
  // The workspace of the chunk that sees the most keys serves every chunk.
  attention::BackwardOptions o;
  o.causal = plan->problem.config.causal;
  o.arch = arch;
  TensorView anyQ = TensorView::contiguous(16, scalarOf(plan->problem.config.dtype),
                                           {1, z.chunk(), z.headsQ, z.headDim}, comm.device());
  TensorView allK = TensorView::contiguous(16, anyQ.dtype, {1, z.seqlen, z.headsKV, z.headDim},
                                           comm.device());
  plan->workspaceBytes = attention::backwardWorkspaceBytes(anyQ, allK, o);
  plan->workspace = std::make_unique<rt::DeviceBuffer>(std::max<size_t>(plan->workspaceBytes, 16));
  return plan;
}

/// The shares of this rank's chunks from every rank that has any, pulled
/// on a lane per source into `pulled`; returns how many each of the
/// rank's two chunks got.
std::array<int64_t, 2> pullShares(ZigZagBackwardPlan &plan) {
  const ZigZagShape &z = plan.z;
  int64_t chunk = z.chunk(), rowKV = plan.rowBytes(z.headsKV), bytes = chunk * rowKV;
  int64_t slots = 2 * z.ranks;
  std::array<int64_t, 2> count = {0, 0};
  for (int mine = 0; mine < 2; ++mine) {
    int c = z.globalChunk(plan.rank, mine);
    for (int source = 0; source < z.ranks; ++source)
      for (int part = 0; part < 2; ++part) {
        if (!plan.saw(source, part, c)) continue;
        int64_t slot = count[mine]++;
        // Chunk c of each batch entry of the source's share (one copy per
        // entry: a 2-D copy's pitches, a sequence of K/V rows apart, pass
        // the driver's limit on long contexts).
        for (int t : {kDk, kDv})
          for (int64_t b = 0; b < z.batch; ++b)
            copyDevice(plan.pulled[t]->ptr() + ((b * 2 + mine) * slots + slot) * bytes,
                       plan.shares[t]->peer(source) +
                           ((part * z.batch + b) * z.seqlen + c * chunk) * rowKV,
                       bytes, (*plan.lanes)[source]);
      }
  }
  return count;
}

} // namespace

Choice tessel::kernels::zigzagBackward(Communicator &comm, SequenceParallelProblem problem,
                                       const std::string &description, const std::string &arch,
                                       const ZigZagGradientViews &x, CUstream stream) {
  ZigZagBackwardPlan &plan = planOf<ZigZagBackwardPlan>(
      comm, "backward " + description, [&] { return makePlan(comm, std::move(problem), arch); });
  const ZigZagShape &z = plan.z;
  int64_t chunk = z.chunk();
  // K and V of the whole sequence; the LSE as the chunks read it.
  copyDevice(plan.gather->input(0), x.k.data, 2 * z.batch * chunk * plan.rowBytes(z.headsKV), stream);
  copyDevice(plan.gather->input(1), x.v.data, 2 * z.batch * chunk * plan.rowBytes(z.headsKV), stream);
  plan.gather->gather(stream);
  for (int64_t b = 0; b < z.batch; ++b)
    for (int part = 0; part < 2; ++part)
      copyPitched(x.lse.data + (b * z.headsQ * 2 + part) * chunk * 4, 2 * chunk * 4,
                  plan.lseChunks->ptr() + (b * 2 + part) * z.headsQ * chunk * 4, chunk * 4,
                  chunk * 4, z.headsQ, stream);
  Choice attention;
  std::string failure;
  for (int part = 0; part < 2; ++part)
    for (int64_t b = 0; b < z.batch && failure.empty(); ++b) {
      // A failing rank still runs the reduce-scatter, so that no peer
      // waits on it for ever; the ranks learn of it below.
      try {
        ChunkCall c = chunkCall(plan, b, part, x.q, x.out, x.dout, x.dq);
        bool compiled = attention.compiled;
        attention = attention::backward(c.q, c.k, c.v, c.out, c.lse, c.dout, c.dq, c.dk, c.dv,
                                        c.options, stream);
        attention.compiled = attention.compiled || compiled;
      } catch (const Error &e) {
        failure = e.what();
      }
    }
  // Every rank's shares are written: pull this rank's chunks of them.
  plan.epoch = startExchangeCall(comm, *plan.flags, plan.epoch, stream);
  plan.lanes->fork(stream);
  std::array<int64_t, 2> shares = pullShares(plan);
  plan.lanes->join(stream);
  // The shares may be overwritten once every rank has pulled its own.
  finishExchangeCall(comm, *plan.flags, plan.epoch, stream);
  int64_t slots = 2 * z.ranks, elements = chunk * z.headsKV * z.headDim;
  int64_t bytes = elements * z.elementBytes;
  for (auto [t, grad] : {std::pair{int(kDk), &x.dk}, {int(kDv), &x.dv}})
    for (int64_t b = 0; b < z.batch; ++b)
      for (int mine = 0; mine < 2; ++mine)
        plan.sum->launch(
            {rt::LaunchArg::integer(shares[mine]), rt::LaunchArg::integer(elements),
             rt::LaunchArg::buffer(plan.pulled[t]->ptr() + ((b * 2 + mine) * slots) * bytes,
                                   {shares[mine], elements}),
             rt::LaunchArg::buffer(grad->data + (b * 2 + mine) * bytes, {elements})},
            stream);
  std::vector<std::string> failures = comm.node().allGather(failure);
  for (size_t r = 0; r < failures.size(); ++r)
    if (!failures[r].empty())
      throw Error(fmt::format("sp_attention::backward: rank {}: {}", r, failures[r]));
  Choice choice;
  choice.arch = arch;
  choice.compiled = attention.compiled;
  choice.config = fmt::format("sp_attention zigzag backward gathered ranks={} shares={},{} | {}",
                              z.ranks, shares[0], shares[1], attention.config);
  return choice;
}
