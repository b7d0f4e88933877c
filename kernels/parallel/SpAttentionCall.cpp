//===- SpAttentionCall.cpp - tessel::sp_attention::forward -----------------===//
//
// Sequence-parallel attention as a call on each rank's views: the ranks
// agree on the problem (every rank's checks, exchanged over the node
// channel, before anything moves), each makes the form the rule picks once
// (its exchange allocates symmetric memory, collectively), and every call
// copies the rank's shards into the exchange's inputs, runs the form and
// copies O out.
//
//===----------------------------------------------------------------------===//
#include "common/LibraryCalls.h"
#include "tessel/kernels/parallel/SequenceParallelAttention.h"
#include "tessel/runtime/Communicator.h"
#include "tessel/runtime/Driver.h"

#include <fmt/format.h>
#include <map>
#include <mutex>

using namespace tessel;
using namespace tessel::kernels;
using rt::Communicator;
using rt::ScalarType;

namespace {

/// One rank's form for one problem: the attention kernel and the exchange
/// of the form the rule picked (its symmetric buffers).
struct Plan {
  SequenceParallelProblem problem;
  std::string arch, form;
  std::shared_ptr<Kernel> kernel;
  std::unique_ptr<DeviceSeqlens> cu;
  /// One of the two: the Ulysses form, or the zig-zag gather and chunks.
  std::unique_ptr<UlyssesAttentionForm> run;
  std::unique_ptr<ZigZagAttention> zigzag;
};

/// One communicator's plans by problem, under a lock of their own: making
/// a plan is collective, so one held across communicators could deadlock
/// two processes whose threads reach them in different orders.
struct CommunicatorPlans {
  std::mutex mutex;
  std::map<std::string, std::unique_ptr<Plan>> byProblem;
};

/// Never destroyed at exit: freeing a plan's symmetric memory is
/// collective, and the other ranks may be gone by then
/// (sp_attention::release frees them while they are not).
std::mutex registryMutex;
auto &registry = *new std::map<const Communicator *, std::unique_ptr<CommunicatorPlans>>;

CommunicatorPlans &plansOf(const Communicator &comm) {
  std::lock_guard<std::mutex> lock(registryMutex);
  std::unique_ptr<CommunicatorPlans> &plans = registry[&comm];
  if (!plans) plans = std::make_unique<CommunicatorPlans>();
  return *plans;
}

/// 4, 2 or 1 head groups: the most the rank's query and K/V heads divide
/// into (equal groups of whole K/V heads).
std::vector<int64_t> pickHeadGroups(const UlyssesShape &s, int asked) {
  if (asked > 0) return evenHeadGroups(s, asked);
  for (int groups : {4, 2}) {
    try {
      return evenHeadGroups(s, groups);
    } catch (const Error &) {
    }
  }
  return evenHeadGroups(s, 1);
}

/// The whole problem this rank's views make on `comm`'s ranks; throws
/// tessel::Error naming the value that cannot run.
SequenceParallelProblem problemOf(Communicator &comm, const TensorView &q, const TensorView &k,
                                  const TensorView &v, const TensorView &out,
                                  const sp_attention::Options &o, const std::string &arch) {
  requireView(q, "q", 4, {ScalarType::F16, ScalarType::BF16});
  requireView(k, "k", 4, {q.dtype});
  requireView(v, "v", 4, {q.dtype});
  requireView(out, "out", 4, {q.dtype});
  requireShape(out, "out", q.shape);
  requireShape(v, "v", k.shape);
  int device = commonDevice({&q, &k, &v, &out});
  if (device != comm.device())
    throw Error(fmt::format("the tensors are on device {}; this rank's communicator is on device {}",
                            device, comm.device()));
  if (k.shape[0] != q.shape[0] || k.shape[3] != q.shape[3])
    throw Error(fmt::format("k {} must have q's batch and head_dim (q {})", k.str(), q.str()));
  if (o.attentionStreams < 1 || o.attentionStreams > 8)
    throw Error(fmt::format("attentionStreams = {}; use 1 to 8", o.attentionStreams));
  if (o.groups < 0) throw Error(fmt::format("groups = {}; use 0 (the rule's) or more", o.groups));
  if (!(o.scale >= 0) || std::isinf(o.scale))
    throw Error(fmt::format("scale = {}: use a positive softmax scale, or 0 for 1/sqrt(head_dim)",
                            o.scale));
  SequenceParallelProblem p;
  UlyssesShape &s = p.shape;
  s.ranks = comm.size();
  s.batch = q.shape[0];
  s.seqlen = q.shape[1] * s.ranks;
  s.headsQ = q.shape[2];
  s.headsKV = k.shape[2];
  s.headDim = q.shape[3];
  s.elementBytes = 2;
  s.cuSeqlensQ = o.cuSeqlensQ;
  s.cuSeqlensK = o.cuSeqlensK.empty() ? o.cuSeqlensQ : o.cuSeqlensK;
  if (!s.packed() && !o.cuSeqlensK.empty())
    throw Error("cuSeqlensK needs cuSeqlensQ (the packed batch's query rows)");
  if (s.headDim != 64 && s.headDim != 128 && s.headDim != 256)
    throw Error(fmt::format("head_dim = {}; the attention kernels take 64, 128 and 256", s.headDim));
  bool zigzag = o.placement == sp_attention::Placement::zigzag;
  if (zigzag && s.packed())
    throw Error("placement zigzag takes a fixed batch (batch, seqlen), not cuSeqlensQ");
  if (!zigzag) validateUlysses(s);
  // Each rank's shard is 1/N of every sequence.
  for (int t : {0, 1}) {
    const TensorView &view = t == 0 ? q : k;
    if (view.shape[1] * s.ranks != s.totalRows(t) / s.batch)
      throw Error(fmt::format("{} {} holds {} rows of each sequence; 1/{} of {} is {}",
                              t == 0 ? "q" : "k", view.str(), view.shape[1], s.ranks,
                              s.totalRows(t) / s.batch, s.totalRows(t) / s.batch / s.ranks));
  }
  p.attentionStreams = o.attentionStreams;
  p.localShard = UlyssesExchange::LocalShard::kernel;
  p.scale = o.scale > 0 ? o.scale : 1.0 / std::sqrt(double(s.headDim));
  AttentionConfig &c = p.config;
  c.dtype = dtypeOf(q.dtype);
  c.headDim = s.headDim;
  c.causal = o.causal;
  c.varlen = s.packed();
  if (zigzag) {
    // Chunks of whole tiles of the kernel's defaults.
    validateZigZag(zigzagShape(p), c.blockM, forwardKeyBlock(c));
    return p;
  }
  p.groupHeads = pickHeadGroups(s, o.groups);
  int64_t longest = 0;
  for (const UlyssesShape::Sequence &seq : s.sequences(0)) longest = std::max(longest, seq.length);
  chooseForwardRows(c, arch, longest);
  return p;
}

/// What every rank must agree on.
std::string describe(const SequenceParallelProblem &p, bool zigzag, const std::string &arch) {
  const UlyssesShape &s = p.shape;
  return fmt::format("{} batch={} seqlen={} heads={}/{} head_dim={} cu_seqlens_q=[{}] "
                     "cu_seqlens_k=[{}] group_heads=[{}] streams={} scale={} {} {}",
                     zigzag ? "zigzag" : "ulysses", s.batch, s.seqlen, s.headsQ, s.headsKV,
                     s.headDim,
                     fmt::join(s.cuSeqlensQ, ","), fmt::join(s.cuSeqlensK, ","),
                     fmt::join(p.groupHeads, ","), p.attentionStreams, p.scale, arch,
                     attentionSettings().describe(p.config));
}

/// The problem, checked on every rank: a rank's failure, or ranks that
/// call with different problems, are an error on all of them.
SequenceParallelProblem agreedProblem(Communicator &comm, const TensorView &q,
                                      const TensorView &k, const TensorView &v,
                                      const TensorView &out, const sp_attention::Options &o,
                                      const std::string &arch, std::string &description) {
  SequenceParallelProblem p;
  std::string mine;
  try {
    p = problemOf(comm, q, k, v, out, o, arch);
    description = describe(p, o.placement == sp_attention::Placement::zigzag, arch);
    mine = "ok " + description;
  } catch (const Error &e) {
    mine = std::string("error ") + e.what();
  }
  std::vector<std::string> all = comm.node().allGather(mine);
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r].rfind("error ", 0) == 0)
      throw Error(fmt::format("sp_attention::forward: rank {}: {}", r, all[r].substr(6)));
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r] != all[0])
      throw Error(fmt::format("sp_attention::forward: the ranks call with different problems: "
                              "rank 0 with {}, rank {} with {}",
                              all[0].substr(3), r, all[r].substr(3)));
  return p;
}

Plan &planFor(Communicator &comm, SequenceParallelProblem problem, bool zigzag,
              const std::string &arch, const std::string &description, bool &compiled) {
  CommunicatorPlans &plans = plansOf(comm);
  std::lock_guard<std::mutex> lock(plans.mutex);
  std::unique_ptr<Plan> &plan = plans.byProblem[description];
  if (plan) return *plan;
  auto made = std::make_unique<Plan>();
  made->problem = std::move(problem);
  made->arch = arch;
  if (zigzag) {
    // The gather, then attention per chunk: the fused form (attention
    // waiting in the kernel per chunk) measured the same on two H200s.
    made->form = "gathered";
    made->zigzag = std::make_unique<ZigZagAttention>(comm, made->problem);
    compiled = true;
    plan = std::move(made);
    return *plan;
  }
  const AttentionConfig &c = made->problem.config;
  made->kernel = cachedKernel(
      fmt::format("flash_attention_fwd variant=registers {}", attentionSettings().describe(c)),
      arch, [&] { return flashAttentionForward(c); }, compiled);
  made->cu = std::make_unique<DeviceSeqlens>(made->problem.shape);
  bool pipelined = made->problem.groupHeads.size() > 1;
  made->form = pipelined ? "pipelined" : "unfused";
  made->run = std::make_unique<UlyssesAttentionForm>(
      made->form, comm, made->problem, *made->cu, made->problem.groupHeads,
      UlyssesExchange::Arrival::stream, *made->kernel);
  // Loaded now: a module load waits for running kernels, which may spin on
  // flags that this rank's streams have yet to write.
  made->kernel->loadedKernel().resourceUsage();
  plan = std::move(made);
  return *plan;
}

} // namespace

Choice sp_attention::forward(Communicator &comm, const TensorView &q, const TensorView &k,
                             const TensorView &v, const TensorView &out, const Options &o,
                             CUstream stream) {
  Choice choice;
  choice.arch = targetFor("", comm.device());
  std::string description;
  SequenceParallelProblem problem =
      agreedProblem(comm, q, k, v, out, o, choice.arch, description);
  bool zigzag = o.placement == Placement::zigzag;
  Plan &plan = planFor(comm, std::move(problem), zigzag, choice.arch, description, choice.compiled);
  const UlyssesShape &s = plan.problem.shape;
  rt::Driver &d = rt::Driver::get();
  if (zigzag) {
    choice.config = fmt::format("sp_attention zigzag {} ranks={} | flash_attention_fwd "
                                "variant=registers {} query_offset={}",
                                plan.form, s.ranks,
                                attentionSettings().describe(plan.problem.config),
                                plan.problem.config.causal ? 1 : 0);
    plan.zigzag->load(q.data, k.data, v.data, stream);
    plan.zigzag->unfused(stream);
    TESSEL_CU(d, cuMemcpyAsync, out.data, plan.zigzag->output(),
              size_t(s.inputElements(0) * s.elementBytes), stream);
    return choice;
  }
  choice.config = fmt::format("sp_attention ulysses {} group_heads={} attention_streams={} ranks={} | "
                              "flash_attention_fwd variant=registers {}",
                              plan.form, fmt::join(plan.problem.groupHeads, ","),
                              plan.problem.attentionStreams, s.ranks,
                              attentionSettings().describe(plan.problem.config));
  UlyssesExchange &x = plan.run->exchange();
  const TensorView *inputs[3] = {&q, &k, &v};
  for (int t = 0; t < 3; ++t)
    TESSEL_CU(d, cuMemcpyAsync, x.input(t), inputs[t]->data,
              size_t(s.inputElements(t) * s.elementBytes), stream);
  plan.run->run(stream);
  TESSEL_CU(d, cuMemcpyAsync, out.data, x.result(),
            size_t(s.inputElements(0) * s.elementBytes), stream);
  return choice;
}

void sp_attention::release(Communicator &comm) {
  std::unique_ptr<CommunicatorPlans> plans;
  {
    std::lock_guard<std::mutex> lock(registryMutex);
    auto it = registry.find(&comm);
    if (it == registry.end()) return;
    plans = std::move(it->second);
    registry.erase(it);
  }
  // Freed one by one in the map's order (by description), the same on
  // every rank.
  std::lock_guard<std::mutex> lock(plans->mutex);
  while (!plans->byProblem.empty()) plans->byProblem.erase(plans->byProblem.begin());
}
