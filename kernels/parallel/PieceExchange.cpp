//===- PieceExchange.cpp - an all-to-all of pitched pieces ----------------===//
#include "tessel/kernels/parallel/PieceExchange.h"
#include "tessel/kernels/parallel/ExchangeFlags.h"
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
  for (int t = 0; t < plan.tensors(); ++t)
    for (int src = 0; src < plan.ranks; ++src)
      for (int dst = 0; dst < plan.ranks; ++dst)
        for (const Piece &p : plan.pieces(t, src, dst)) {
          auto where = [&] {
            return fmt::format("exchange: tensor {}, rank {} to rank {}: piece of {} rows of {} "
                               "bytes from {} (pitch {}) to {} (pitch {})",
                               t, src, dst, p.height, p.width, p.srcOffset, p.srcPitch,
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

int64_t tessel::kernels::messageBytes(const ExchangePlan &plan, int src, int dst) {
  int64_t bytes = 0;
  for (int t = 0; t < plan.tensors(); ++t)
    for (const Piece &p : plan.pieces(t, src, dst)) bytes += p.bytes();
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
  for (int src = 0; src < plan.ranks; ++src)
    for (int dst = 0; dst < plan.ranks; ++dst) {
      std::vector<uint8_t> message(throughMessages ? messageBytes(plan, src, dst) : 0);
      int64_t at = 0;
      for (int t = 0; t < plan.tensors(); ++t)
        for (const Piece &p : plan.pieces(t, src, dst)) {
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
  return t == Transport::copyEngine ? "symmetric" : "nccl";
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
                                           std::string &why) {
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
  bool reachable = oneNode && peersReachable(comm, unreachable);
  if (!oneNode) unreachable = "the job spans several nodes";
  if (name.empty()) {
    why = reachable ? "every rank on one node, peer access" : unreachable;
    return reachable ? Transport::copyEngine : Transport::nccl;
  }
  if (name == "nccl") return Transport::nccl;
  if (name != "symmetric")
    throw Error(fmt::format("exchange transport '{}' ({}): use symmetric or nccl", name, why));
  if (!reachable)
    throw Error(fmt::format("exchange transport symmetric ({}) cannot run: {}; use nccl", why,
                            unreachable));
  return Transport::copyEngine;
}

PieceExchange::PieceExchange(Communicator &c, ExchangePlan p, Transport t)
    : comm(c), plan(std::move(p)), how(t) {
  if (plan.ranks != c.size())
    throw Error(fmt::format("exchange: the plan is for {} ranks, the job has {}", plan.ranks,
                            c.size()));
  validatePlan(plan);
  Driver::get().setDevice(c.device());
  for (int i = 0; i < plan.tensors(); ++i) {
    size_t in = std::max<int64_t>(plan.sourceBytes[i], 16);
    if (how == Transport::copyEngine)
      symmetricSources.push_back(std::make_unique<SymmetricBuffer>(c, in));
    else
      plainSources.push_back(std::make_unique<DeviceBuffer>(in));
    destinations.push_back(
        std::make_unique<DeviceBuffer>(std::max<int64_t>(plan.destinationBytes[i], 16)));
  }
  int n = plan.ranks, me = c.rank();
  into.resize(n);
  outOf.resize(n);
  for (int r = 0; r < n; ++r)
    for (int t = 0; t < plan.tensors(); ++t) {
      into[r].push_back(plan.pieces(t, r, me));
      outOf[r].push_back(plan.pieces(t, me, r));
    }
  if (how == Transport::copyEngine) {
    flags = std::make_unique<SymmetricBuffer>(c, sizeof(uint32_t) * 2 * n);
    lanes = std::make_unique<CopyLanes>(n);
    return;
  }
  sendAt = receiveAt = {0};
  for (int r = 0; r < n; ++r) {
    sendAt.push_back(sendAt.back() + (r == me ? 0 : messageBytes(plan, me, r)));
    receiveAt.push_back(receiveAt.back() + (r == me ? 0 : messageBytes(plan, r, me)));
  }
  sendBuffer = std::make_unique<DeviceBuffer>(std::max<int64_t>(sendAt.back(), 16));
  receiveBuffer = std::make_unique<DeviceBuffer>(std::max<int64_t>(receiveAt.back(), 16));
  c.nccl(); // collective on first use
}

PieceExchange::~PieceExchange() = default;

CUdeviceptr PieceExchange::source(int t) const {
  return how == Transport::copyEngine ? symmetricSources[t]->local() : plainSources[t]->ptr();
}

CUdeviceptr PieceExchange::destination(int t) const { return destinations[t]->ptr(); }

/// One 2-D device copy of a piece, skipped when empty.
static void copyPiece(CUdeviceptr src, int64_t srcPitch, CUdeviceptr dst, int64_t dstPitch,
                      int64_t width, int64_t height, CUstream stream) {
  if (width == 0 || height == 0) return;
  Driver &d = Driver::get();
  CUDA_MEMCPY2D copy{};
  copy.srcMemoryType = copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = src;
  copy.srcPitch = srcPitch;
  copy.dstDevice = dst;
  copy.dstPitch = dstPitch;
  copy.WidthInBytes = width;
  copy.Height = height;
  TESSEL_CU(d, cuMemcpy2DAsync, &copy, stream);
}

void PieceExchange::run(CUstream stream) {
  Driver::get().setDevice(comm.device());
  if (how == Transport::copyEngine) return runCopyEngine(stream);
  runNccl(stream);
}

void PieceExchange::runCopyEngine(CUstream stream) {
  epoch = startExchangeCall(comm, *flags, epoch, stream);
  lanes->fork(stream);
  int n = plan.ranks, me = comm.rank();
  for (int i = 0; i < n; ++i) { // ring order, own pieces first
    int src = (me + i) % n;
    for (int t = 0; t < plan.tensors(); ++t)
      for (const Piece &p : into[src][t])
        copyPiece(symmetricSources[t]->peer(src) + p.srcOffset, p.srcPitch,
                  destination(t) + p.dstOffset, p.dstPitch, p.width, p.height, (*lanes)[src]);
  }
  lanes->join(stream);
  finishExchangeCall(comm, *flags, epoch, stream);
}

void PieceExchange::runNccl(CUstream stream) {
  int n = plan.ranks, me = comm.rank();
  for (int t = 0; t < plan.tensors(); ++t) // own pieces, directly
    for (const Piece &p : into[me][t])
      copyPiece(source(t) + p.srcOffset, p.srcPitch, destination(t) + p.dstOffset, p.dstPitch,
                p.width, p.height, stream);
  for (int dst = 0; dst < n; ++dst) {
    if (dst == me) continue;
    int64_t at = sendAt[dst];
    for (int t = 0; t < plan.tensors(); ++t)
      for (const Piece &p : outOf[dst][t]) {
        copyPiece(source(t) + p.srcOffset, p.srcPitch, sendBuffer->ptr() + at, p.width, p.width,
                  p.height, stream);
        at += p.bytes();
      }
  }
  Nccl &nccl = Nccl::get();
  ncclComm_t nc = comm.nccl();
  nccl.check(nccl.api().ncclGroupStart(), "ncclGroupStart", nc);
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    if (int64_t bytes = sendAt[r + 1] - sendAt[r])
      nccl.check(nccl.api().ncclSend(reinterpret_cast<void *>(sendBuffer->ptr() + sendAt[r]),
                                     size_t(bytes), ncclChar, r, nc, stream),
                 "ncclSend", nc);
    if (int64_t bytes = receiveAt[r + 1] - receiveAt[r])
      nccl.check(nccl.api().ncclRecv(reinterpret_cast<void *>(receiveBuffer->ptr() + receiveAt[r]),
                                     size_t(bytes), ncclChar, r, nc, stream),
                 "ncclRecv", nc);
  }
  nccl.check(nccl.api().ncclGroupEnd(), "ncclGroupEnd", nc);
  for (int src = 0; src < n; ++src) {
    if (src == me) continue;
    int64_t at = receiveAt[src];
    for (int t = 0; t < plan.tensors(); ++t)
      for (const Piece &p : into[src][t]) {
        copyPiece(receiveBuffer->ptr() + at, p.width, destination(t) + p.dstOffset, p.dstPitch,
                  p.width, p.height, stream);
        at += p.bytes();
      }
  }
}
