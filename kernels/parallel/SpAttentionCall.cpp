//===- SpAttentionCall.cpp - tessel::sp_attention::forward -----------------===//
//
// Sequence-parallel attention as a call on each rank's views: the ranks
// agree on the problem (every rank's checks, exchanged over the node
// channel, before anything moves), each makes the form the rule picks once
// (its exchange allocates symmetric memory, collectively), and every call
// copies the rank's shards into the exchange's inputs, runs the form and
// copies O (and the log-sum-exp) out.
//
//===----------------------------------------------------------------------===//
#include "SpAttentionProblem.h"
#include "common/LibraryCalls.h"
#include "tessel/kernels/parallel/UlyssesPieces.h"
#include "tessel/runtime/Communicator.h"
#include "tessel/runtime/Driver.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;
using rt::Communicator;

namespace {

/// One rank's form for one problem: the attention kernel and the exchanges
/// of the form the rule picked.
struct ForwardPlan : SpPlan {
  SequenceParallelProblem problem;
  std::string arch, form;
  Transport transport = Transport::copyEngine;
  std::shared_ptr<Kernel> kernel;
  std::unique_ptr<DeviceSeqlens> cu;
  /// One of three: the Ulysses forms over the copy engines (with the LSE's
  /// way back when asked for), the exchanged form (any transport: shards to
  /// heads, attention, back), or the zig-zag gather and chunks.
  std::unique_ptr<PieceExchange> lseHeads;
  std::unique_ptr<UlyssesAttentionForm> run;
  std::unique_ptr<PieceExchange> toHeads, toShards;
  std::unique_ptr<PartPipeline> pipeline;
  /// Per head group of the exchanged form: its attention launch.
  std::vector<std::vector<rt::LaunchArg>> groupArgs;
  std::unique_ptr<ZigZagAttention> zigzag;
};

/// The exchanged form: q, k, v to the head layout, attention, O and the
/// LSE back, by head groups that pipeline (PartPipeline): group g + 1
/// arrives and group g - 1 returns while group g is attended.
void makeExchangedForm(ForwardPlan &plan, Communicator &comm) {
  const UlyssesShape &s = plan.problem.shape;
  const HeadGroups &groups = plan.problem.groupHeads;
  using K = UlyssesTensor;
  plan.toHeads = std::make_unique<PieceExchange>(
      comm, toHeadsPlan(s, {K::queryRows, K::keyValueRows, K::keyValueRows}, groups, true),
      plan.transport);
  plan.toShards = std::make_unique<PieceExchange>(
      comm, toShardsPlan(s, {K::queryRows, K::logSumExp}, groups, true), plan.transport);
  plan.pipeline = std::make_unique<PartPipeline>(static_cast<int>(groups.size()),
                                                 plan.problem.attentionStreams);
  PieceExchange &in = *plan.toHeads, &out = *plan.toShards;
  for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
    auto at = [&](CUdeviceptr base, K kind) { return base + headGroupOffset(s, kind, groups, g); };
    plan.groupArgs.push_back(
        wholeSequenceArgs(plan.problem, *plan.cu, groups[g],
                          groups[g] * s.headsPerRank(1) / s.headsPerRank(0),
                          at(in.destination(0), K::queryRows), at(in.destination(1), K::keyValueRows),
                          at(in.destination(2), K::keyValueRows), at(out.source(0), K::queryRows),
                          at(out.source(1), K::logSumExp))
            .list());
  }
  plan.form = groups.size() > 1 ? "pipelined" : "unfused";
}

std::unique_ptr<ForwardPlan> makeForwardPlan(Communicator &comm, SequenceParallelProblem problem,
                                             Transport transport, bool zigzag, bool withLse,
                                             const std::string &arch, bool &compiled) {
  auto made = std::make_unique<ForwardPlan>();
  made->problem = std::move(problem);
  made->arch = arch;
  made->transport = transport;
  if (zigzag) {
    // The gather, then attention per chunk: the fused form (attention
    // waiting in the kernel per chunk) measured the same on two H200s.
    made->form = "gathered";
    made->zigzag = std::make_unique<ZigZagAttention>(comm, made->problem);
    compiled = true;
    return made;
  }
  const AttentionConfig &c = made->problem.config;
  made->kernel = cachedKernel(
      fmt::format("flash_attention_fwd variant=registers {}", attentionSettings().describe(c)),
      arch, [&] { return flashAttentionForward(c); }, compiled);
  made->cu = std::make_unique<DeviceSeqlens>(made->problem.shape);
  if (transport != Transport::copyEngine) {
    makeExchangedForm(*made, comm);
  } else {
    const UlyssesShape &s = made->problem.shape;
    const HeadGroups &groups = made->problem.groupHeads;
    CUdeviceptr lseAt = 0;
    if (withLse) {
      made->lseHeads = std::make_unique<PieceExchange>(
          comm, toShardsPlan(s, {UlyssesTensor::logSumExp}, groups), transport);
      lseAt = made->lseHeads->source(0);
    }
    bool pipelined = groups.size() > 1;
    made->form = pipelined ? "pipelined" : "unfused";
    made->run = std::make_unique<UlyssesAttentionForm>(made->form, comm, made->problem, *made->cu,
                                                       groups, UlyssesExchange::Arrival::stream,
                                                       *made->kernel, lseAt);
  }
  // Loaded now: a module load waits for running kernels, which may spin on
  // flags that this rank's streams have yet to write.
  made->kernel->loadedKernel().resourceUsage();
  return made;
}

Choice runForward(Communicator &comm, const TensorView &q, const TensorView &k,
                  const TensorView &v, const TensorView &out, const TensorView *lse,
                  const sp_attention::Options &o, CUstream stream) {
  Choice choice;
  choice.arch = targetFor("", comm.device());
  bool zigzag = o.placement == sp_attention::Placement::zigzag;
  SequenceParallelProblem problem;
  Transport transport = Transport::copyEngine;
  std::string why;
  std::string description = agreeOnProblem(comm, "sp_attention::forward", [&] {
    problem = spProblemOf(comm, q, k, v, out, o, choice.arch);
    if (lse) requireShardLse(*lse, "lse", problem.shape);
    transport = spTransport(comm, o, why);
    return fmt::format("{} transport={}{}", describeSpProblem(problem, zigzag, choice.arch),
                       describeTransport(comm, transport), lse ? " lse" : "");
  });
  ForwardPlan &plan = planOf<ForwardPlan>(comm, "forward " + description, [&] {
    return makeForwardPlan(comm, std::move(problem), transport, zigzag, lse != nullptr,
                           choice.arch, choice.compiled);
  });
  const UlyssesShape &s = plan.problem.shape;
  std::string kernelConfig = fmt::format("flash_attention_fwd variant=registers {}",
                                         attentionSettings().describe(plan.problem.config));
  int64_t outBytes = s.inputElements(0) * s.elementBytes;
  if (zigzag) {
    choice.config = fmt::format("sp_attention zigzag {} ranks={} | {} query_offset={}", plan.form,
                                s.ranks, kernelConfig, plan.problem.config.causal ? 1 : 0);
    plan.zigzag->load(q.data, k.data, v.data, stream);
    plan.zigzag->unfused(stream);
    copyDevice(out.data, plan.zigzag->output(), outBytes, stream);
    if (lse) plan.zigzag->copyLogSumExp(lse->data, stream);
    return choice;
  }
  const TensorView *inputs[3] = {&q, &k, &v};
  if (plan.toHeads) {
    choice.config = fmt::format("sp_attention ulysses {} exchanged group_heads={} transport={} ({}) "
                                "ranks={} | {}",
                                plan.form, fmt::join(plan.problem.groupHeads, ","),
                                transportName(plan.transport), why, s.ranks, kernelConfig);
    for (int t = 0; t < 3; ++t)
      copyDevice(plan.toHeads->source(t), inputs[t]->data, s.inputElements(t) * s.elementBytes,
                 stream);
    plan.pipeline->run(stream, *plan.toHeads, *plan.toShards,
                       [&](int g, CUstream on) { plan.kernel->launch(plan.groupArgs[g], on); });
    copyDevice(out.data, plan.toShards->destination(0), outBytes, stream);
    if (lse)
      copyDevice(lse->data, plan.toShards->destination(1),
                 shardBytes(s, UlyssesTensor::logSumExp), stream);
    return choice;
  }
  choice.config = fmt::format("sp_attention ulysses {} group_heads={} attention_streams={} "
                              "transport={} ({}) ranks={} | {}",
                              plan.form, fmt::join(plan.problem.groupHeads, ","),
                              plan.problem.attentionStreams, transportName(plan.transport), why,
                              s.ranks, kernelConfig);
  UlyssesExchange &x = plan.run->exchange();
  for (int t = 0; t < 3; ++t)
    copyDevice(x.input(t), inputs[t]->data, s.inputElements(t) * s.elementBytes, stream);
  plan.run->run(stream);
  copyDevice(out.data, x.result(), outBytes, stream);
  if (lse) {
    plan.lseHeads->run(stream);
    copyDevice(lse->data, plan.lseHeads->destination(0), shardBytes(s, UlyssesTensor::logSumExp),
               stream);
  }
  return choice;
}

} // namespace

Choice sp_attention::forward(Communicator &comm, const TensorView &q, const TensorView &k,
                             const TensorView &v, const TensorView &out, const Options &o,
                             CUstream stream) {
  return runForward(comm, q, k, v, out, nullptr, o, stream);
}

Choice sp_attention::forward(Communicator &comm, const TensorView &q, const TensorView &k,
                             const TensorView &v, const TensorView &out, const TensorView &lse,
                             const Options &o, CUstream stream) {
  return runForward(comm, q, k, v, out, &lse, o, stream);
}

void sp_attention::release(Communicator &comm) { releasePlans(comm); }

namespace {
std::mutex processMutex;
std::unique_ptr<Communicator> processComm;
} // namespace

Communicator &sp_attention::processCommunicator() {
  std::lock_guard<std::mutex> lock(processMutex);
  if (!processComm) processComm = Communicator::fromEnvironment();
  return *processComm;
}

sp_attention::RankPlace sp_attention::placeOf(const Communicator &comm) {
  return {comm.rank(), comm.size(), comm.device()};
}

void sp_attention::releaseProcessCommunicator() {
  std::lock_guard<std::mutex> lock(processMutex);
  if (!processComm) return;
  releasePlans(*processComm);
  processComm.reset();
}
