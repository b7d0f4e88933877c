//===- SpAttentionProblem.cpp - what sp_attention's calls share -----------===//
#include "SpAttentionProblem.h"
#include "common/LibraryCalls.h"
#include "tessel/runtime/Communicator.h"
#include "tessel/runtime/Driver.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;
using rt::Communicator;
using rt::ScalarType;

namespace {
/// Never destroyed at exit: freeing a plan's symmetric memory is
/// collective, and the other ranks may be gone by then
/// (sp_attention::release frees them while they are not).
std::mutex registryMutex;
auto &registry = *new std::map<const Communicator *, std::unique_ptr<CommunicatorPlans>>;
} // namespace

CommunicatorPlans &tessel::kernels::plansOf(const Communicator &comm) {
  std::lock_guard<std::mutex> lock(registryMutex);
  std::unique_ptr<CommunicatorPlans> &plans = registry[&comm];
  if (!plans) plans = std::make_unique<CommunicatorPlans>();
  return *plans;
}

void tessel::kernels::copyDevice(CUdeviceptr to, CUdeviceptr from, int64_t bytes,
                                 CUstream stream) {
  rt::Driver &d = rt::Driver::get();
  TESSEL_CU(d, cuMemcpyAsync, to, from, size_t(bytes), stream);
}

void tessel::kernels::quiesce(const Communicator &comm) {
  rt::Driver &d = rt::Driver::get();
  d.setDevice(comm.device());
  TESSEL_CU(d, cuCtxSynchronize);
}

void tessel::kernels::releasePlans(const Communicator &comm) {
  std::unique_ptr<CommunicatorPlans> plans;
  {
    std::lock_guard<std::mutex> lock(registryMutex);
    auto it = registry.find(&comm);
    if (it == registry.end()) return;
    plans = std::move(it->second);
    registry.erase(it);
  }
  // Freed one by one, least recently used first: the same order on every
  // rank.
  std::lock_guard<std::mutex> lock(plans->mutex);
  if (plans->plans.size()) quiesce(comm);
  plans->plans.clear();
}

/// 4, 2 or 1 head groups: the most the rank's query and K/V heads divide
/// into (equal groups of whole K/V heads).
static std::vector<int64_t> pickHeadGroups(const UlyssesShape &s, int asked) {
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
SequenceParallelProblem tessel::kernels::spProblemOf(Communicator &comm, const TensorView &q, const TensorView &k,
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
  if (zigzag && o.groups)
    throw Error(fmt::format("groups = {} splits the heads of placement ulysses; zig-zag keeps every "
                            "head on every rank (use 0)",
                            o.groups));
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
std::string tessel::kernels::describeSpProblem(const SequenceParallelProblem &p, bool zigzag,
                                              const std::string &arch) {
  const UlyssesShape &s = p.shape;
  return fmt::format("{} batch={} seqlen={} heads={}/{} head_dim={} cu_seqlens_q=[{}] "
                     "cu_seqlens_k=[{}] group_heads=[{}] streams={} scale={} {} {}",
                     zigzag ? "zigzag" : "ulysses", s.batch, s.seqlen, s.headsQ, s.headsKV,
                     s.headDim,
                     fmt::join(s.cuSeqlensQ, ","), fmt::join(s.cuSeqlensK, ","),
                     fmt::join(p.groupHeads, ","), p.attentionStreams, p.scale, arch,
                     attentionSettings().describe(p.config));
}

void tessel::kernels::requireShardLse(const TensorView &lse, const char *what,
                                      const UlyssesShape &s) {
  requireView(lse, what, 3, {ScalarType::F32});
  int64_t entries = s.packed() ? 1 : s.batch;
  requireShape(lse, what, {entries, s.headsQ, s.totalRows(0) / entries / s.ranks});
}

/// Past one node the node channel reaches only this node's ranks: every
/// rank's verdict (ok, and a hash of its problem) goes round through NCCL,
/// so that a rank elsewhere that failed, or disagrees, is an error here too
/// before any exchange starts.
static void agreeAcrossNodes(Communicator &comm, const char *call, bool ok,
                             const std::string &description) {
  rt::Driver &d = rt::Driver::get();
  d.setDevice(comm.device());
  int64_t mine[2] = {ok ? 1 : 0, int64_t(std::hash<std::string>{}(description))};
  std::vector<int64_t> all(2 * comm.size());
  rt::DeviceBuffer send(sizeof mine), receive(all.size() * sizeof(int64_t));
  send.upload(mine, sizeof mine);
  rt::Nccl &nccl = rt::Nccl::get();
  TESSEL_NCCL(nccl, ncclAllGather, reinterpret_cast<void *>(send.ptr()),
              reinterpret_cast<void *>(receive.ptr()), 2, ncclInt64, comm.nccl(), comm.stream());
  TESSEL_CU(d, cuStreamSynchronize, comm.stream());
  TESSEL_CU(d, cuMemcpyDtoH, all.data(), receive.ptr(), all.size() * sizeof(int64_t));
  for (int r = 0; r < comm.size(); ++r) {
    if (!all[2 * r])
      throw Error(fmt::format("{}: rank {} (of another node) refused the problem; its own error "
                              "says why",
                              call, r));
    if (all[2 * r + 1] != all[1])
      throw Error(fmt::format("{}: the ranks call with different problems: rank {} differs from "
                              "rank 0 (this rank's: {})",
                              call, r, description));
  }
}

std::string tessel::kernels::agreeOnProblem(Communicator &comm, const char *call,
                                            const std::function<std::string()> &check) {
  std::string mine, description;
  try {
    description = check();
    mine = "ok " + description;
  } catch (const Error &e) {
    mine = std::string("error ") + e.what();
  }
  std::vector<std::string> all = comm.node().allGather(mine);
  std::string local; // this node's verdict: "" when every rank agrees
  for (size_t r = 0; r < all.size() && local.empty(); ++r)
    if (all[r].rfind("error ", 0) == 0)
      local = fmt::format("{}: rank {}: {}", call, r, all[r].substr(6));
  for (size_t r = 0; r < all.size() && local.empty(); ++r)
    if (all[r] != all[0])
      local = fmt::format("{}: the ranks call with different problems: rank 0 with {}, rank {} "
                          "with {}",
                          call, all[0].substr(3), r, all[r].substr(3));
  // Every rank of the job joins the round across nodes, failing or not.
  if (comm.size() != comm.localSize()) {
    try {
      agreeAcrossNodes(comm, call, local.empty(), description);
    } catch (const Error &e) {
      if (local.empty()) throw;
    }
  }
  if (!local.empty()) throw Error(local);
  return description;
}

Transport tessel::kernels::spTransport(Communicator &comm, const sp_attention::Options &o,
                                       std::string &why) {
  Transport t = chooseTransport(comm, o.transport, why);
  if (t != Transport::copyEngine && o.placement == sp_attention::Placement::zigzag)
    throw Error(fmt::format("placement zigzag gathers K and V through symmetric memory; the {} "
                            "transport ({}) runs placement ulysses",
                            transportName(t), why));
  return t;
}
