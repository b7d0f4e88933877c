//===- SpAttentionBackward.cpp - tessel::sp_attention::backward ------------===//
//
// The Ulysses backward: q, k, v, out, dout and the log-sum-exp go from the
// ranks' shards to the head layout in one exchange (one message per peer
// and head group under NCCL), Tessel's attention backward runs over the
// whole sequences for each head group of the rank's heads, writing dq, dk
// and dv straight into the sources of the exchange back, and the way back
// returns them to the shards. Head groups pipeline (PartPipeline): group
// g + 1 arrives and group g - 1 returns while group g's backward runs. A K/V
// head replicated over several ranks comes back once per replica; the
// replicas' gradients are added in f32 and rounded to the gradient's type
// after each addition (scaled_add): one rounding for two replicas, R - 1
// for R.
//
//===----------------------------------------------------------------------===//
#include "SpAttentionProblem.h"
#include "common/LibraryCalls.h"
#include "tessel/kernels/basic/Basic.h"
#include "tessel/kernels/parallel/UlyssesPieces.h"
#include "tessel/runtime/Communicator.h"
#include "tessel/runtime/Driver.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;
using rt::Communicator;
using rt::ScalarType;

namespace {

/// Positions of the exchanges' tensors.
enum In { kQ, kK, kV, kOut, kDout, kLse };
enum Back { kDq, kDk, kDv };

struct BackwardPlan : SpPlan {
  SequenceParallelProblem problem;
  Transport transport = Transport::copyEngine;
  std::unique_ptr<DeviceSeqlens> cu;
  std::unique_ptr<PieceExchange> toHeads, toShards;
  std::unique_ptr<PartPipeline> pipeline;
  /// The attention backward's f32 accumulators, made with the plan (the
  /// largest group's), so that no call allocates between its exchanges.
  std::unique_ptr<rt::DeviceBuffer> workspace;
  size_t workspaceBytes = 0;
  /// y += x for the replicas of a K/V head's gradient.
  std::shared_ptr<Kernel> sumReplicas;
};

/// The backward's head groups where the caller leaves them to the rule:
/// the most of 4, 2 and 1 that divide the rank's heads and still give each
/// group's backward 1.5 waves of 128-key blocks over the SMs. Fewer blocks
/// leave SMs idle in every group's tail (4 H100s at 8k tokens, 8 heads a
/// rank: 4 groups ran 1.2-1.5x slower than 2); more groups hide more of
/// the exchanges (at 32k, 4 groups were the fastest or within 2%).
HeadGroups backwardHeadGroups(const UlyssesShape &s, int sms) {
  int64_t keyBlocks = 0;
  for (const UlyssesShape::Sequence &k : s.sequences(1)) keyBlocks += (k.length + 127) / 128;
  for (int groups : {4, 2}) {
    if (s.headsPerRank(0) % groups || s.headsPerRank(1) % groups) continue;
    if (2 * (s.headsPerRank(0) / groups) * keyBlocks >= 3 * int64_t(sms))
      return evenHeadGroups(s, groups);
  }
  return evenHeadGroups(s, 1);
}

/// The attention backward's views and options over head group g of the
/// head layout: the whole sequences (one packed entry for a packed batch)
/// for the group's heads.
struct GroupCall {
  TensorView q, k, v, out, lse, dout, dq, dk, dv;
  attention::BackwardOptions options;
};
GroupCall groupCall(const BackwardPlan &plan, int g, int device, const std::string &arch) {
  const UlyssesShape &s = plan.problem.shape;
  const HeadGroups &groups = plan.problem.groupHeads;
  const PieceExchange &in = *plan.toHeads, &back = *plan.toShards;
  int64_t entries = s.packed() ? 1 : s.batch;
  int64_t hq = groups[g], hkv = groups[g] * s.headsPerRank(1) / s.headsPerRank(0);
  ScalarType type = scalarOf(plan.problem.config.dtype);
  using K = UlyssesTensor;
  auto rowsView = [&](CUdeviceptr base, K kind) {
    bool query = kind == K::queryRows;
    return TensorView::contiguous(base + headGroupOffset(s, kind, groups, g), type,
                                  {entries, s.totalRows(query ? 0 : 1) / entries,
                                   query ? hq : hkv, s.headDim},
                                  device);
  };
  GroupCall call;
  attention::BackwardOptions &o = call.options;
  o.causal = plan.problem.config.causal;
  o.scale = plan.problem.scale;
  o.arch = arch;
  if (s.packed()) {
    int64_t count = int64_t(s.cuSeqlensQ.size());
    o.cuSeqlensQ = TensorView::contiguous(plan.cu->q->ptr(), ScalarType::I32, {count}, device);
    o.cuSeqlensK = TensorView::contiguous(plan.cu->k->ptr(), ScalarType::I32, {count}, device);
    for (const UlyssesShape::Sequence &q : s.sequences(0))
      o.maxSeqlenQ = std::max(o.maxSeqlenQ, q.length);
    for (const UlyssesShape::Sequence &k : s.sequences(1))
      o.maxSeqlenK = std::max(o.maxSeqlenK, k.length);
  }
  if (plan.workspace) {
    o.workspace = plan.workspace->ptr();
    o.workspaceBytes = plan.workspaceBytes;
  }
  call.q = rowsView(in.destination(kQ), K::queryRows);
  call.k = rowsView(in.destination(kK), K::keyValueRows);
  call.v = rowsView(in.destination(kV), K::keyValueRows);
  call.out = rowsView(in.destination(kOut), K::queryRows);
  call.dout = rowsView(in.destination(kDout), K::queryRows);
  call.lse = TensorView::contiguous(
      in.destination(kLse) + headGroupOffset(s, K::logSumExp, groups, g), ScalarType::F32,
      {entries, hq, s.totalRows(0) / entries}, device);
  call.dq = rowsView(back.source(kDq), K::queryRows);
  call.dk = rowsView(back.source(kDk), K::keyValueRows);
  call.dv = rowsView(back.source(kDv), K::keyValueRows);
  return call;
}

Choice attentionOverGroup(const BackwardPlan &plan, int g, int device, const std::string &arch,
                          CUstream stream) {
  GroupCall c = groupCall(plan, g, device, arch);
  return attention::backward(c.q, c.k, c.v, c.out, c.lse, c.dout, c.dq, c.dk, c.dv, c.options,
                             stream);
}

std::unique_ptr<BackwardPlan> makeBackwardPlan(Communicator &comm,
                                               SequenceParallelProblem problem,
                                               Transport transport, const std::string &arch) {
  auto made = std::make_unique<BackwardPlan>();
  made->problem = std::move(problem);
  made->transport = transport;
  const UlyssesShape &s = made->problem.shape;
  using K = UlyssesTensor;
  const HeadGroups &groups = made->problem.groupHeads;
  made->toHeads = std::make_unique<PieceExchange>(
      comm,
      toHeadsPlan(s, {K::queryRows, K::keyValueRows, K::keyValueRows, K::queryRows, K::queryRows,
                      K::logSumExp},
                  groups, /*partPerGroup=*/true),
      transport);
  made->toShards = std::make_unique<PieceExchange>(
      comm,
      toShardsPlan(s, {K::queryRows, K::keyValueRows, K::keyValueRows}, groups,
                   /*partPerGroup=*/true),
      transport);
  // One stream: the backward's kernels fill the SMs, and on 4 H100s at 8k
  // tokens two streams taking turns ran 1.07-1.17x slower causal (mixed,
  // within 5%, full).
  made->pipeline = std::make_unique<PartPipeline>(static_cast<int>(groups.size()), 1);
  made->cu = std::make_unique<DeviceSeqlens>(s);
  for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
    GroupCall c = groupCall(*made, g, comm.device(), arch);
    made->workspaceBytes =
        std::max(made->workspaceBytes, attention::backwardWorkspaceBytes(c.q, c.k, c.options));
  }
  made->workspace = std::make_unique<rt::DeviceBuffer>(std::max<size_t>(made->workspaceBytes, 16));
  if (kvReplicas(s) > 1) {
    ScaledAddConfig add;
    add.dtype = made->problem.config.dtype;
    bool compiled = false;
    made->sumReplicas =
        cachedKernel(fmt::format("scaled_add {}", scaledAddSettings().describe(add)), arch,
                     [&] { return scaledAdd(add); }, compiled);
    made->sumReplicas->loadedKernel().resourceUsage();
  }
  return made;
}

} // namespace

Choice sp_attention::backward(Communicator &comm, const TensorView &q, const TensorView &k,
                              const TensorView &v, const TensorView &out, const TensorView &lse,
                              const TensorView &dout, const TensorView &dq, const TensorView &dk,
                              const TensorView &dv, const Options &o, CUstream stream) {
  Choice choice;
  choice.arch = targetFor("", comm.device());
  SequenceParallelProblem problem;
  Transport transport = Transport::copyEngine;
  std::string why;
  bool zigzag = o.placement == Placement::zigzag;
  std::string description = agreeOnProblem(comm, "sp_attention::backward", [&] {
    problem = spProblemOf(comm, q, k, v, out, o, choice.arch);
    // Refused here, before any exchange, rather than by the attention
    // backward once the shards have moved.
    if (problem.shape.headDim != 64 && problem.shape.headDim != 128)
      throw Error(fmt::format("head_dim = {}: the attention backward takes 64 and 128",
                              problem.shape.headDim));
    if (o.groups == 0 && !zigzag)
      problem.groupHeads = backwardHeadGroups(
          problem.shape, rt::Driver::get().multiprocessors(comm.device()));
    requireShardLse(lse, "lse", problem.shape);
    for (auto [view, name, like] : {std::tuple{&dout, "dout", &q}, {&dq, "dq", &q},
                                    {&dk, "dk", &k}, {&dv, "dv", &v}}) {
      requireView(*view, name, 4, {q.dtype});
      requireShape(*view, name, like->shape);
    }
    if (commonDevice({&q, &lse, &dout, &dq, &dk, &dv}) != comm.device())
      throw Error(fmt::format("the gradients are not all on this rank's device {}", comm.device()));
    transport = spTransport(comm, o, why);
    return fmt::format("{} transport={}", describeSpProblem(problem, zigzag, choice.arch),
                       describeTransport(comm, transport));
  });
  if (zigzag)
    return zigzagBackward(comm, std::move(problem), description, choice.arch,
                          {q, k, v, out, lse, dout, dq, dk, dv}, stream);
  BackwardPlan &plan = planOf<BackwardPlan>(comm, "backward " + description, [&] {
    return makeBackwardPlan(comm, std::move(problem), transport, choice.arch);
  });
  const UlyssesShape &s = plan.problem.shape;
  const TensorView *inputs[6] = {&q, &k, &v, &out, &dout, &lse};
  for (int t = 0; t < 6; ++t)
    copyDevice(plan.toHeads->source(t), inputs[t]->data,
               t == kLse ? shardBytes(s, UlyssesTensor::logSumExp)
                         : s.inputElements(t == kK || t == kV ? 1 : 0) * s.elementBytes,
               stream);
  Choice attention;
  std::string failure;
  plan.pipeline->run(stream, *plan.toHeads, *plan.toShards, [&](int g, CUstream on) {
    // A failing group's rank still runs every exchange, so that no peer
    // waits on it for ever; the ranks learn of it below.
    if (!failure.empty()) return;
    try {
      bool compiled = attention.compiled;
      attention = attentionOverGroup(plan, g, comm.device(), choice.arch, on);
      attention.compiled = attention.compiled || compiled;
    } catch (const Error &e) {
      failure = e.what();
    }
  });
  std::vector<std::string> failures = comm.node().allGather(failure);
  for (size_t r = 0; r < failures.size(); ++r)
    if (!failures[r].empty())
      throw Error(fmt::format("sp_attention::backward: rank {}: {}", r, failures[r]));
  int64_t qBytes = s.inputElements(0) * s.elementBytes, kvBytes = s.inputElements(1) * s.elementBytes;
  copyDevice(dq.data, plan.toShards->destination(kDq), qBytes, stream);
  int64_t replicas = kvReplicas(s);
  for (auto [t, grad] : {std::pair{int(kDk), &dk}, {int(kDv), &dv}}) {
    CUdeviceptr copies = plan.toShards->destination(t);
    copyDevice(grad->data, copies, kvBytes, stream);
    for (int64_t i = 1; i < replicas; ++i)
      plan.sumReplicas->launch({rt::LaunchArg::integer(s.inputElements(1)), rt::LaunchArg::real(1),
                                rt::LaunchArg::buffer(copies + i * kvBytes, {s.inputElements(1)}),
                                rt::LaunchArg::buffer(grad->data, {s.inputElements(1)})},
                               stream);
  }
  choice.compiled = attention.compiled;
  choice.config = fmt::format("sp_attention ulysses backward pipelined group_heads={} "
                              "transport={} ({}) ranks={} kv_replicas={} | {}",
                              fmt::join(plan.problem.groupHeads, ","),
                              transportName(plan.transport), why, s.ranks, replicas,
                              attention.config);
  return choice;
}
