//===- PieceExchange.cpp - an all-to-all of pitched pieces ----------------===//
#include "tessel/kernels/parallel/PieceExchange.h"
#include "tessel/kernels/parallel/ExchangeFlags.h"
#include "tessel/kernels/Settings.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Error.h"

#include <cstdlib>
#include <cstring>
#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::rt;

void tessel::kernels::validatePlan(const ExchangePlan &plan) {
  if (plan.ranks < 1) throw Error(fmt::format("exchange: {} ranks", plan.ranks));
  if (plan.destinationBytes.size() != plan.sourceBytes.size())
    throw Error("exchange: sources and destinations differ in number");
  if (plan.parts < 1) throw Error(fmt::format("exchange: {} parts", plan.parts));
  for (int part = 0; part < plan.parts; ++part)
  for (int t = 0; t < plan.tensors(); ++t)
    for (int src = 0; src < plan.ranks; ++src)
      for (int dst = 0; dst < plan.ranks; ++dst)
        for (const Piece &p : plan.pieces(t, src, dst, part)) {
          auto where = [&] {
            return fmt::format("exchange: tensor {}, part {}, rank {} to rank {}: piece of {} rows "
                               "of {} bytes from {} (pitch {}) to {} (pitch {})",
                               t, part, src, dst, p.height, p.width, p.srcOffset, p.srcPitch,
                               p.dstOffset, p.dstPitch);
          };
          if (p.width < 0 || p.height < 0 || p.srcOffset < 0 || p.dstOffset < 0)
            throw Error(where() + " is negative");
          if (p.bytes() == 0) continue;
          if (p.srcPitch < p.width || p.dstPitch < p.width)
            throw Error(where() + " has a pitch below its width");
          int64_t srcEnd = p.srcOffset + (p.height - 1) * p.srcPitch + p.width;
          int64_t dstEnd = p.dstOffset + (p.height - 1) * p.dstPitch + p.width;
          if (srcEnd > plan.sourceBytes[t] || dstEnd > plan.destinationBytes[t])
            throw Error(where() + fmt::format(" reaches past the {}-byte source or the {}-byte "
                                              "destination",
                                              plan.sourceBytes[t], plan.destinationBytes[t]));
        }
}

int64_t tessel::kernels::messageBytes(const ExchangePlan &plan, int src, int dst, int part) {
  int64_t bytes = 0;
  for (int t = 0; t < plan.tensors(); ++t)
    for (const Piece &p : plan.pieces(t, src, dst, part)) bytes += p.bytes();
  return bytes;
}

namespace {
/// `rows` rows of `width` bytes on the host.
void copyRowsOnHost(const uint8_t *src, int64_t srcPitch, uint8_t *dst, int64_t dstPitch,
                    int64_t width, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dstPitch, src + r * srcPitch, width);
}
} // namespace

void tessel::kernels::runOnHost(const ExchangePlan &plan, const HostBuffers &sources,
                                HostBuffers &destinations, bool throughMessages) {
  validatePlan(plan);
  for (int part = 0; part < plan.parts; ++part)
  for (int src = 0; src < plan.ranks; ++src)
    for (int dst = 0; dst < plan.ranks; ++dst) {
      std::vector<uint8_t> message(throughMessages ? messageBytes(plan, src, dst, part) : 0);
      int64_t at = 0;
      for (int t = 0; t < plan.tensors(); ++t)
        for (const Piece &p : plan.pieces(t, src, dst, part)) {
          const uint8_t *from = sources[src][t].data() + p.srcOffset;
          uint8_t *to = destinations[dst][t].data() + p.dstOffset;
          if (!throughMessages) {
            copyRowsOnHost(from, p.srcPitch, to, p.dstPitch, p.width, p.height);
            continue;
          }
          // Packed row after row, then unpacked where the destination wants it.
          copyRowsOnHost(from, p.srcPitch, message.data() + at, p.width, p.width, p.height);
          copyRowsOnHost(message.data() + at, p.width, to, p.dstPitch, p.width, p.height);
          at += p.bytes();
        }
    }
}

const char *tessel::kernels::transportName(Transport t) {
  switch (t) {
  case Transport::copyEngine: return "symmetric";
  case Transport::nccl: return "nccl";
  case Transport::hierarchical: return "hierarchical";
  }
  return "?";
}

int tessel::kernels::exchangeNodeRanks(int localSize,
                                       const std::function<const char *(const char *)> &getenv) {
  const char *env = getenv("TESSEL_EXCHANGE_NODE_RANKS");
  if (!env || !*env) return localSize;
  int64_t ranks = parseInteger(env, 1, localSize, "TESSEL_EXCHANGE_NODE_RANKS");
  if (localSize % ranks)
    throw Error(fmt::format("TESSEL_EXCHANGE_NODE_RANKS={}: ranks per node are a divisor of the "
                            "{} ranks this node holds",
                            env, localSize));
  return static_cast<int>(ranks);
}

/// Whether every local rank's device reaches every other's by peer access.
static bool peersReachable(Communicator &comm, std::string &which) {
  Driver &d = Driver::get();
  for (int other : comm.localDevices()) {
    int can = 1;
    if (other != comm.device()) TESSEL_CU(d, cuDeviceCanAccessPeer, &can, comm.device(), other);
    if (!can) {
      which = fmt::format("device {} cannot reach device {} by peer access", comm.device(), other);
      return false;
    }
  }
  return true;
}

Transport tessel::kernels::chooseTransport(Communicator &comm, const std::string &asked,
                                           std::string &why, bool hierarchicalOk) {
  std::string name = asked;
  why = "asked for";
  if (name.empty()) {
    if (const char *env = std::getenv("TESSEL_EXCHANGE"); env && *env) {
      name = env;
      why = "TESSEL_EXCHANGE";
    }
  }
  std::string unreachable;
  bool oneNode = comm.size() == comm.localSize();
  bool reachable = peersReachable(comm, unreachable);
  if (name.empty()) {
    // Past one node NCCL stays the default: the hierarchical transport has
    // been measured on one machine only, where NCCL needs no help.
    why = oneNode && reachable ? "every rank on one node, peer access"
          : oneNode            ? unreachable
                               : "the job spans several nodes";
    return oneNode && reachable ? Transport::copyEngine : Transport::nccl;
  }
  if (name == "nccl") return Transport::nccl;
  if (name == "hierarchical") {
    if (!hierarchicalOk)
      throw Error(fmt::format("exchange transport hierarchical ({}): this call moves its data "
                              "by symmetric or nccl",
                              why));
    if (!reachable)
      throw Error(fmt::format("exchange transport hierarchical ({}) cannot run: {}; use nccl", why,
                              unreachable));
    exchangeNodeRanks(comm.localSize()); // a bad TESSEL_EXCHANGE_NODE_RANKS fails here
    return Transport::hierarchical;
  }
  if (name != "symmetric")
    throw Error(fmt::format("exchange transport '{}' ({}): use symmetric, nccl{}", name, why,
                            hierarchicalOk ? " or hierarchical" : ""));
  if (!oneNode || !reachable)
    throw Error(fmt::format("exchange transport symmetric ({}) cannot run: {}; use {}", why,
                            !oneNode ? "the job spans several nodes" : unreachable,
                            hierarchicalOk ? "hierarchical or nccl" : "nccl"));
  return Transport::copyEngine;
}

std::string tessel::kernels::describeTransport(Communicator &comm, Transport t) {
  if (t != Transport::hierarchical) return transportName(t);
  return fmt::format("hierarchical nodes={}", exchangeNodeRanks(comm.localSize()));
}

/// Checks that the node's ranks are consecutive, local rank l being rank
/// (rank - localRank + l), as torchrun numbers them: the hierarchical
/// transport finds a rank's copy in the node's symmetric memory so.
static void requireConsecutiveNode(Communicator &comm) {
  std::vector<std::string> ranks = comm.node().allGather(std::to_string(comm.rank()));
  int first = comm.rank() - comm.localRank();
  for (int l = 0; l < static_cast<int>(ranks.size()); ++l)
    if (ranks[l] != std::to_string(first + l))
      throw Error(fmt::format("exchange transport hierarchical: local rank {} of this node is "
                              "rank {}, not {}; it needs each node's ranks consecutive (as "
                              "torchrun numbers them): use nccl",
                              l, ranks[l], first + l));
}

PieceExchange::PieceExchange(Communicator &c, ExchangePlan p, Transport t)
    : comm(c), plan(std::move(p)), how(t) {
  if (plan.ranks != c.size())
    throw Error(fmt::format("exchange: the plan is for {} ranks, the job has {}", plan.ranks,
                            c.size()));
  validatePlan(plan);
  nodeRanks = how == Transport::copyEngine ? c.size()
              : how == Transport::nccl     ? 1
                                           : exchangeNodeRanks(c.localSize());
  if (how == Transport::hierarchical) requireConsecutiveNode(c);
  Driver::get().setDevice(c.device());
  bool pulls = how != Transport::nccl;
  for (int i = 0; i < plan.tensors(); ++i) {
    size_t in = std::max<int64_t>(plan.sourceBytes[i], 16);
    if (pulls)
      symmetricSources.push_back(std::make_unique<SymmetricBuffer>(c, in));
    else
      plainSources.push_back(std::make_unique<DeviceBuffer>(in));
    destinations.push_back(
        std::make_unique<DeviceBuffer>(std::max<int64_t>(plan.destinationBytes[i], 16)));
  }
  int n = plan.ranks, me = c.rank();
  into.resize(plan.parts);
  outOf.resize(plan.parts);
  for (int part = 0; part < plan.parts; ++part)
    for (int r = 0; r < n; ++r) {
      into[part].emplace_back();
      outOf[part].emplace_back();
      for (int t = 0; t < plan.tensors(); ++t) {
        into[part][r].push_back(plan.pieces(t, r, me, part));
        outOf[part][r].push_back(plan.pieces(t, me, r, part));
      }
    }
  if (pulls) {
    flags = exchangeFlags(c, sizeof(uint32_t) * 2 * c.localSize());
    lanes = std::make_unique<CopyLanes>(n);
    if (how == Transport::copyEngine) return;
    messageLane = std::make_unique<CopyLanes>(1);
  }
  int64_t sent = 0, received = 0;
  for (int part = 0; part < plan.parts; ++part) {
    sendAt.push_back({sent});
    receiveAt.push_back({received});
    for (int r = 0; r < n; ++r) {
      sent += viaNccl(r) ? messageBytes(plan, me, r, part) : 0;
      received += viaNccl(r) ? messageBytes(plan, r, me, part) : 0;
      sendAt.back().push_back(sent);
      receiveAt.back().push_back(received);
    }
  }
  sendBuffer = std::make_unique<DeviceBuffer>(std::max<int64_t>(sent, 16));
  receiveBuffer = std::make_unique<DeviceBuffer>(std::max<int64_t>(received, 16));
  c.nccl(); // collective on first use
}

PieceExchange::~PieceExchange() = default;

bool PieceExchange::sameNode(int r) const { return r / nodeRanks == comm.rank() / nodeRanks; }

bool PieceExchange::viaNccl(int r) const { return r != comm.rank() && !sameNode(r); }

CUdeviceptr PieceExchange::source(int t) const {
  return how != Transport::nccl ? symmetricSources[t]->local() : plainSources[t]->ptr();
}

CUdeviceptr PieceExchange::destination(int t) const { return destinations[t]->ptr(); }

void PieceExchange::run(CUstream stream, int part) {
  if (part < -1 || part >= plan.parts)
    throw Error(fmt::format("exchange: part {} of {}", part, plan.parts));
  Driver::get().setDevice(comm.device());
  for (int p = part < 0 ? 0 : part; p < (part < 0 ? plan.parts : part + 1); ++p) {
    if (how == Transport::copyEngine) runCopyEngine(stream, p);
    else if (how == Transport::nccl) runNccl(stream, p);
    else runHierarchical(stream, p);
  }
}

void PieceExchange::pullFromNode(CUstream stream, int part, const std::function<bool(int)> &from) {
  epoch = startExchangeCall(comm, *flags, epoch, stream);
  lanes->fork(stream);
  int n = plan.ranks, me = comm.rank();
  for (int i = 0; i < n; ++i) { // ring order, own pieces first
    int src = (me + i) % n;
    if (!from(src)) continue;
    // Symmetric memory is the node's, whose ranks are consecutive: a
    // rank's copy by its place there.
    int local = comm.localRank() + (src - me);
    for (int t = 0; t < plan.tensors(); ++t)
      for (const Piece &p : into[part][src][t])
        copyPitched(symmetricSources[t]->peer(local) + p.srcOffset, p.srcPitch,
                    destination(t) + p.dstOffset, p.dstPitch, p.width, p.height, (*lanes)[src]);
  }
  lanes->join(stream);
  finishExchangeCall(comm, *flags, epoch, stream);
}

void PieceExchange::runCopyEngine(CUstream stream, int part) {
  pullFromNode(stream, part, [](int) { return true; });
}

void PieceExchange::packMessages(CUstream stream, int part) {
  int n = plan.ranks;
  const std::vector<int64_t> &sends = sendAt[part];
  for (int dst = 0; dst < n; ++dst) {
    if (!viaNccl(dst)) continue;
    int64_t at = sends[dst];
    for (int t = 0; t < plan.tensors(); ++t)
      for (const Piece &p : outOf[part][dst][t]) {
        copyPitched(source(t) + p.srcOffset, p.srcPitch, sendBuffer->ptr() + at, p.width, p.width,
                    p.height, stream);
        at += p.bytes();
      }
  }
}

void PieceExchange::sendAndReceive(CUstream stream, int part) {
  const std::vector<int64_t> &sends = sendAt[part], &receives = receiveAt[part];
  Nccl &nccl = Nccl::get();
  ncclComm_t nc = comm.nccl();
  nccl.check(nccl.api().ncclGroupStart(), "ncclGroupStart", nc);
  for (int r = 0; r < plan.ranks; ++r) {
    if (!viaNccl(r)) continue;
    if (int64_t bytes = sends[r + 1] - sends[r])
      nccl.check(nccl.api().ncclSend(reinterpret_cast<void *>(sendBuffer->ptr() + sends[r]),
                                     size_t(bytes), ncclChar, r, nc, stream),
                 "ncclSend", nc);
    if (int64_t bytes = receives[r + 1] - receives[r])
      nccl.check(nccl.api().ncclRecv(reinterpret_cast<void *>(receiveBuffer->ptr() + receives[r]),
                                     size_t(bytes), ncclChar, r, nc, stream),
                 "ncclRecv", nc);
  }
  nccl.check(nccl.api().ncclGroupEnd(), "ncclGroupEnd", nc);
}

void PieceExchange::unpackMessages(CUstream stream, int part) {
  const std::vector<int64_t> &receives = receiveAt[part];
  for (int src = 0; src < plan.ranks; ++src) {
    if (!viaNccl(src)) continue;
    int64_t at = receives[src];
    for (int t = 0; t < plan.tensors(); ++t)
      for (const Piece &p : into[part][src][t]) {
        copyPitched(receiveBuffer->ptr() + at, p.width, destination(t) + p.dstOffset, p.dstPitch,
                    p.width, p.height, stream);
        at += p.bytes();
      }
  }
}

void PieceExchange::runNccl(CUstream stream, int part) {
  int me = comm.rank();
  for (int t = 0; t < plan.tensors(); ++t) // own pieces, directly
    for (const Piece &p : into[part][me][t])
      copyPitched(source(t) + p.srcOffset, p.srcPitch, destination(t) + p.dstOffset, p.dstPitch,
                  p.width, p.height, stream);
  packMessages(stream, part);
  sendAndReceive(stream, part);
  unpackMessages(stream, part);
}

void PieceExchange::runHierarchical(CUstream stream, int part) {
  // NCCL's messages move on a lane of their own, from before the node's
  // handshake to after it, while the node's pulls run on theirs: both only
  // read the sources (the messages are packed from this rank's own), and
  // they write disjoint places of the destinations. The node's finishing
  // handshake waits for its pulls only, not for the other nodes.
  messageLane->fork(stream);
  CUstream lane = (*messageLane)[0];
  packMessages(lane, part);
  sendAndReceive(lane, part);
  unpackMessages(lane, part);
  pullFromNode(stream, part, [&](int r) { return sameNode(r); });
  messageLane->join(stream);
}

PartPipeline::PartPipeline(int count, int streams)
    : parts(count), workStreams(std::max(1, std::min(streams, count))),
      lanes(std::make_unique<CopyLanes>(workStreams > 1 ? 2 + workStreams : 2, count)),
      workDone(count) {
  Driver &d = Driver::get();
  for (CUevent &e : workDone) TESSEL_CU(d, cuEventCreate, &e, CU_EVENT_DISABLE_TIMING);
}

PartPipeline::~PartPipeline() {
  Driver &d = Driver::get();
  for (CUevent e : workDone) d.api().cuEventDestroy(e);
}

void PartPipeline::run(CUstream stream, PieceExchange &in, PieceExchange &out,
                       const std::function<void(int, CUstream)> &work) {
  if (in.parts() != parts || out.parts() != parts)
    throw Error(fmt::format("pipeline of {} parts over exchanges of {} and {}", parts, in.parts(),
                            out.parts()));
  Driver &d = Driver::get();
  lanes->fork(stream);
  // Every part's way in, one after another on the in lane.
  for (int g = 0; g < parts; ++g) {
    in.run((*lanes)[0], g);
    lanes->mark(0, g);
  }
  for (int g = 0; g < parts; ++g) {
    CUstream on = workStreams > 1 ? (*lanes)[2 + g % workStreams] : stream;
    lanes->waitForMark(on, 0, g);
    work(g, on);
    TESSEL_CU(d, cuEventRecord, workDone[g], on);
    TESSEL_CU(d, cuStreamWaitEvent, (*lanes)[1], workDone[g], 0);
    out.run((*lanes)[1], g);
  }
  lanes->join(stream);
}
