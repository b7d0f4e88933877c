//===- SpAttentionBackward.cpp - tessel::sp_attention::backward ------------===//
//
// The Ulysses backward: q, k, v, out, dout and the log-sum-exp go from the
// ranks' shards to the head layout in one exchange (one message per peer
// under NCCL), Tessel's attention backward runs over the whole sequences
// for the rank's heads, writing dq, dk and dv straight into the sources of
// the exchange back, and the way back returns them to the shards. A K/V
// head replicated over several ranks comes back once per replica; the
// replicas' gradients are summed in f32 (scaled_add), as one GPU's backward
// sums the query heads that share a K/V head.
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
  /// y += x for the replicas of a K/V head's gradient.
  std::shared_ptr<Kernel> sumReplicas;
};

BackwardPlan &planFor(Communicator &comm, SequenceParallelProblem problem, Transport transport,
                      const std::string &arch, const std::string &description) {
  CommunicatorPlans &plans = plansOf(comm);
  std::lock_guard<std::mutex> lock(plans.mutex);
  std::unique_ptr<SpPlan> &slot = plans.byProblem["backward " + description];
  if (slot) return static_cast<BackwardPlan &>(*slot);
  auto made = std::make_unique<BackwardPlan>();
  made->problem = std::move(problem);
  made->transport = transport;
  const UlyssesShape &s = made->problem.shape;
  made->cu = std::make_unique<DeviceSeqlens>(s);
  using K = UlyssesTensor;
  HeadGroups all = {s.headsPerRank(0)};
  made->toHeads = std::make_unique<PieceExchange>(
      comm,
      toHeadsPlan(s, {K::queryRows, K::keyValueRows, K::keyValueRows, K::queryRows, K::queryRows,
                      K::logSumExp},
                  all),
      transport);
  made->toShards = std::make_unique<PieceExchange>(
      comm, toShardsPlan(s, {K::queryRows, K::keyValueRows, K::keyValueRows}, all), transport);
  if (kvReplicas(s) > 1) {
    ScaledAddConfig add;
    add.dtype = made->problem.config.dtype;
    bool compiled = false;
    made->sumReplicas =
        cachedKernel(fmt::format("scaled_add {}", scaledAddSettings().describe(add)), arch,
                     [&] { return scaledAdd(add); }, compiled);
    made->sumReplicas->loadedKernel().resourceUsage();
  }
  slot = std::move(made);
  return static_cast<BackwardPlan &>(*slot);
}

void copyDevice(CUdeviceptr to, CUdeviceptr from, int64_t bytes, CUstream stream) {
  rt::Driver &d = rt::Driver::get();
  TESSEL_CU(d, cuMemcpyAsync, to, from, size_t(bytes), stream);
}

/// The attention backward over the head layout: the whole sequences (one
/// packed entry for a packed batch) for the rank's heads.
Choice attentionOverHeads(const BackwardPlan &plan, int device, const std::string &arch,
                          CUstream stream) {
  const UlyssesShape &s = plan.problem.shape;
  const PieceExchange &in = *plan.toHeads, &back = *plan.toShards;
  int64_t entries = s.packed() ? 1 : s.batch, rows = s.totalRows(0) / entries;
  int64_t hq = s.headsPerRank(0), hkv = s.headsPerRank(1), dim = s.headDim;
  ScalarType type = scalarOf(plan.problem.config.dtype);
  auto rowsView = [&](CUdeviceptr at, int64_t heads) {
    return TensorView::contiguous(at, type, {entries, rows, heads, dim}, device);
  };
  attention::BackwardOptions o;
  o.causal = plan.problem.config.causal;
  o.scale = plan.problem.scale;
  o.arch = arch;
  if (s.packed()) {
    int64_t count = int64_t(s.cuSeqlensQ.size()), longest = 0;
    for (const UlyssesShape::Sequence &q : s.sequences(0)) longest = std::max(longest, q.length);
    o.cuSeqlensQ = TensorView::contiguous(plan.cu->q->ptr(), ScalarType::I32, {count}, device);
    o.cuSeqlensK = TensorView::contiguous(plan.cu->k->ptr(), ScalarType::I32, {count}, device);
    o.maxSeqlenQ = o.maxSeqlenK = longest;
    for (const UlyssesShape::Sequence &k : s.sequences(1))
      o.maxSeqlenK = std::max(o.maxSeqlenK, k.length);
  }
  return attention::backward(
      rowsView(in.destination(kQ), hq), rowsView(in.destination(kK), hkv),
      rowsView(in.destination(kV), hkv), rowsView(in.destination(kOut), hq),
      TensorView::contiguous(in.destination(kLse), ScalarType::F32, {entries, hq, rows}, device),
      rowsView(in.destination(kDout), hq), rowsView(back.source(kDq), hq),
      rowsView(back.source(kDk), hkv), rowsView(back.source(kDv), hkv), o, stream);
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
  std::string description = agreeOnProblem(comm, "sp_attention::backward", [&] {
    if (o.placement != Placement::ulysses)
      throw Error("the backward takes placement ulysses (zig-zag has a forward only)");
    problem = spProblemOf(comm, q, k, v, out, o, choice.arch);
    requireShardLse(lse, "lse", problem.shape);
    for (auto [view, name, like] : {std::tuple{&dout, "dout", &q}, {&dq, "dq", &q},
                                    {&dk, "dk", &k}, {&dv, "dv", &v}}) {
      requireView(*view, name, 4, {q.dtype});
      requireShape(*view, name, like->shape);
    }
    if (commonDevice({&q, &lse, &dout, &dq, &dk, &dv}) != comm.device())
      throw Error(fmt::format("the gradients are not all on this rank's device {}", comm.device()));
    transport = spTransport(comm, o, why);
    return fmt::format("{} transport={}", describeSpProblem(problem, false, choice.arch),
                       transportName(transport));
  });
  BackwardPlan &plan = planFor(comm, std::move(problem), transport, choice.arch, description);
  const UlyssesShape &s = plan.problem.shape;
  const TensorView *inputs[6] = {&q, &k, &v, &out, &dout, &lse};
  for (int t = 0; t < 6; ++t)
    copyDevice(plan.toHeads->source(t), inputs[t]->data,
               t == kLse ? shardBytes(s, UlyssesTensor::logSumExp)
                         : s.inputElements(t == kK || t == kV ? 1 : 0) * s.elementBytes,
               stream);
  plan.toHeads->run(stream);
  Choice attention = attentionOverHeads(plan, comm.device(), choice.arch, stream);
  plan.toShards->run(stream);
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
  choice.config = fmt::format("sp_attention ulysses backward exchanged transport={} ({}) "
                              "ranks={} kv_replicas={} | {}",
                              transportName(plan.transport), why, s.ranks, replicas,
                              attention.config);
  return choice;
}
