//===- Ulysses.cpp - the sequence-parallel all-to-all ---------------------===//
#include "Ulysses.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Error.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::rt;

void tessel::kernels::validateUlysses(const UlyssesShape &s) {
  if (s.ranks < 1) throw Error(fmt::format("Ulysses: {} ranks", s.ranks));
  for (auto [name, v] : {std::pair{"batch", s.batch}, {"seqlen", s.seqlen}, {"heads_q", s.headsQ},
                         {"heads_kv", s.headsKV}, {"head_dim", s.headDim}})
    if (v <= 0) throw Error(fmt::format("Ulysses: {}={} must be positive", name, v));
  if (s.elementBytes != 2 && s.elementBytes != 4)
    throw Error(fmt::format("Ulysses: {}-byte elements; use 16- or 32-bit types", s.elementBytes));
  if (s.seqlen % s.ranks)
    throw Error(fmt::format("Ulysses: seqlen={} does not split over {} ranks", s.seqlen, s.ranks));
  if (s.headsQ % s.headsKV)
    throw Error(fmt::format("Ulysses: heads_q={} is not a multiple of heads_kv={}", s.headsQ,
                            s.headsKV));
  if (s.headsQ % s.ranks)
    throw Error(fmt::format("Ulysses: heads_q={} does not split over {} ranks", s.headsQ, s.ranks));
  // K/V heads split over the ranks, or each rank's query heads share one
  // K/V head, which is then replicated to every rank that needs it.
  int64_t group = s.headsQ / s.headsKV, queryPerRank = s.headsQ / s.ranks;
  if (s.headsKV % s.ranks && group % queryPerRank)
    throw Error(fmt::format("Ulysses: heads_kv={} does not split over {} ranks, and the {} query "
                            "heads of a rank do not share one K/V head (group of {}) to replicate",
                            s.headsKV, s.ranks, queryPerRank, group));
}

UlyssesSource tessel::kernels::ulyssesSource(const UlyssesShape &s, int tensor, int rank,
                                             int64_t b, int64_t t, int64_t h, int64_t d) {
  int64_t local = s.localSeq();
  int source = static_cast<int>(t / local);
  int64_t row = t % local, head = s.firstHead(tensor, rank) + h;
  return {source, ((b * local + row) * s.heads(tensor) + head) * s.headDim + d};
}

UlyssesExchange::UlyssesExchange(Communicator &c, const UlyssesShape &s) : comm(c), shape(s) {
  if (c.size() != c.localSize())
    throw Error("Ulysses: the copy-engine exchange runs within one node; this job spans several");
  if (s.ranks != c.size())
    throw Error(fmt::format("Ulysses: the shape is for {} ranks, the job has {}", s.ranks, c.size()));
  validateUlysses(s);
  for (int t = 0; t < 3; ++t) {
    inputs[t] = std::make_unique<SymmetricBuffer>(c, shape.inputElements(t) * s.elementBytes);
    outputs[t] = std::make_unique<DeviceBuffer>(shape.outputElements(t) * s.elementBytes);
  }
  headOutput = std::make_unique<SymmetricBuffer>(c, shape.outputElements(0) * s.elementBytes);
  sequenceOutput = std::make_unique<DeviceBuffer>(shape.inputElements(0) * s.elementBytes);
  flags = std::make_unique<SymmetricBuffer>(c, 2 * sizeof(uint32_t) * s.ranks);
  Driver &d = Driver::get();
  TESSEL_CU(d, cuEventCreate, &forkEvent, CU_EVENT_DISABLE_TIMING);
  lanes.resize(3 * s.ranks);
  joinEvents.resize(3 * s.ranks);
  for (int i = 0; i < 3 * s.ranks; ++i) {
    TESSEL_CU(d, cuStreamCreate, &lanes[i], CU_STREAM_NON_BLOCKING);
    TESSEL_CU(d, cuEventCreate, &joinEvents[i], CU_EVENT_DISABLE_TIMING);
  }
}

UlyssesExchange::~UlyssesExchange() {
  Driver &d = Driver::get();
  for (CUstream lane : lanes) d.api().cuStreamDestroy(lane);
  for (CUevent e : joinEvents) d.api().cuEventDestroy(e);
  if (forkEvent) d.api().cuEventDestroy(forkEvent);
}

void UlyssesExchange::exchange(CUstream stream,
                               const std::function<void(int, CUstream)> &issue) {
  Driver &d = Driver::get();
  d.setDevice(comm.device());
  int n = shape.ranks, me = comm.localRank();
  ++epoch;
  auto readySlot = [&](int owner, int from) { return flags->peer(owner) + 4 * from; };
  auto readSlot = [&](int owner, int from) { return flags->peer(owner) + 4 * (n + from); };
  // Inputs ready here (the write is fenced system-wide); wait for everyone's.
  for (int s = 0; s < n; ++s) TESSEL_CU(d, cuStreamWriteValue32, stream, readySlot(s, me), epoch, 0);
  for (int s = 0; s < n; ++s)
    TESSEL_CU(d, cuStreamWaitValue32, stream, readySlot(me, s), epoch, CU_STREAM_WAIT_VALUE_GEQ);
  // Several streams, so the copy engines work on every source (and the
  // local shard) at once; ring order, own shard first.
  TESSEL_CU(d, cuEventRecord, forkEvent, stream);
  size_t lane = 0;
  for (int i = 0; i < n; ++i)
    for (int part = 0; part < int(lanes.size()) / n; ++part, ++lane) {
      TESSEL_CU(d, cuStreamWaitEvent, lanes[lane], forkEvent, 0);
      issue((me + i) % n * (int(lanes.size()) / n) + part, lanes[lane]);
      TESSEL_CU(d, cuEventRecord, joinEvents[lane], lanes[lane]);
      TESSEL_CU(d, cuStreamWaitEvent, stream, joinEvents[lane], 0);
    }
  // Sources may be overwritten once every reader has them.
  for (int s = 0; s < n; ++s) TESSEL_CU(d, cuStreamWriteValue32, stream, readSlot(s, me), epoch, 0);
  for (int s = 0; s < n; ++s)
    TESSEL_CU(d, cuStreamWaitValue32, stream, readSlot(me, s), epoch, CU_STREAM_WAIT_VALUE_GEQ);
}

/// One 2-D copy of `rows` rows of `width` bytes.
static void copyRows(CUdeviceptr src, int64_t srcPitch, CUdeviceptr dst, int64_t dstPitch,
                     int64_t width, int64_t rows, CUstream stream) {
  Driver &d = Driver::get();
  CUDA_MEMCPY2D copy{};
  copy.srcMemoryType = copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = src;
  copy.srcPitch = srcPitch;
  copy.dstDevice = dst;
  copy.dstPitch = dstPitch;
  copy.WidthInBytes = width;
  copy.Height = rows;
  TESSEL_CU(d, cuMemcpy2DAsync, &copy, stream);
}

void UlyssesExchange::forward(CUstream stream) {
  int me = comm.localRank();
  int64_t eb = shape.elementBytes, dim = shape.headDim, local = shape.localSeq();
  // Part p of source s: tensor p % 3; from Q (K, V) [B, S/N, H, D] on s, the
  // heads of this rank into rows s*S/N.. of [B, S, H/N, D].
  exchange(stream, [&](int part, CUstream lane) {
    int s = part / 3, t = part % 3;
    int64_t all = shape.heads(t), mine = shape.headsPerRank(t), first = shape.firstHead(t, me);
    for (int64_t b = 0; b < shape.batch; ++b)
      copyRows(inputs[t]->peer(s) + ((b * local * all) + first) * dim * eb, all * dim * eb,
               output(t) + ((b * shape.seqlen + s * local) * mine) * dim * eb, mine * dim * eb,
               mine * dim * eb, local, lane);
  });
}

void UlyssesExchange::reverse(CUstream stream) {
  int me = comm.localRank();
  int64_t eb = shape.elementBytes, dim = shape.headDim, local = shape.localSeq();
  int64_t all = shape.headsQ, mine = shape.headsPerRank(0);
  // From O' [B, S, Hq/N, D] on s: this rank's rows, into heads s*Hq/N.. of
  // O [B, S/N, Hq, D]. Parts beyond the first of a source have nothing.
  exchange(stream, [&](int part, CUstream lane) {
    if (part % 3) return;
    int s = part / 3;
    for (int64_t b = 0; b < shape.batch; ++b)
      copyRows(headOutput->peer(s) + ((b * shape.seqlen + me * local) * mine) * dim * eb,
               mine * dim * eb, result() + ((b * local * all) + s * mine) * dim * eb,
               all * dim * eb, mine * dim * eb, local, lane);
  });
}

NcclUlysses::NcclUlysses(Communicator &c, const UlyssesShape &s, UlyssesExchange &x)
    : comm(c), shape(s), exchange(x) {
  for (int t = 0; t < 3; ++t) {
    perPeer += shape.outputElements(t) / shape.ranks * shape.elementBytes;
    outputs[t] = std::make_unique<DeviceBuffer>(shape.outputElements(t) * s.elementBytes);
  }
  send = std::make_unique<DeviceBuffer>(perPeer * shape.ranks);
  recv = std::make_unique<DeviceBuffer>(perPeer * shape.ranks);
  comm.nccl();
}

void NcclUlysses::forward(CUstream stream, bool packing) {
  Driver &d = Driver::get();
  d.setDevice(comm.device());
  int n = shape.ranks;
  int64_t eb = shape.elementBytes, dim = shape.headDim, local = shape.localSeq();
  // Chunk for destination r: for each tensor, [B, S/N, heads/N, D].
  auto chunk = [&](CUdeviceptr base, int r, int t, int64_t b) {
    CUdeviceptr at = base + r * perPeer;
    for (int u = 0; u < t; ++u) at += shape.batch * local * shape.headsPerRank(u) * dim * eb;
    return at + b * local * shape.headsPerRank(t) * dim * eb;
  };
  if (packing)
    for (int r = 0; r < n; ++r)
      for (int t = 0; t < 3; ++t) {
        int64_t all = shape.heads(t), mine = shape.headsPerRank(t), first = shape.firstHead(t, r);
        for (int64_t b = 0; b < shape.batch; ++b) {
          CUDA_MEMCPY2D copy{};
          copy.srcMemoryType = copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
          copy.srcDevice = exchange.input(t) + (b * local * all + first) * dim * eb;
          copy.srcPitch = all * dim * eb;
          copy.dstDevice = chunk(send->ptr(), r, t, b);
          copy.dstPitch = mine * dim * eb;
          copy.WidthInBytes = mine * dim * eb;
          copy.Height = local;
          TESSEL_CU(d, cuMemcpy2DAsync, &copy, stream);
        }
      }
  Nccl &nccl = Nccl::get();
  TESSEL_NCCL(nccl, ncclAlltoAll, reinterpret_cast<void *>(send->ptr()),
              reinterpret_cast<void *>(recv->ptr()), static_cast<size_t>(perPeer), ncclChar,
              comm.nccl(), stream);
  if (!packing) return;
  // From source r: rows r*S/N .. of every batch, contiguous on both sides.
  for (int r = 0; r < n; ++r)
    for (int t = 0; t < 3; ++t) {
      int64_t mine = shape.headsPerRank(t);
      for (int64_t b = 0; b < shape.batch; ++b)
        TESSEL_CU(d, cuMemcpyAsync,
                  output(t) + (b * shape.seqlen + r * local) * mine * dim * eb,
                  chunk(recv->ptr(), r, t, b), local * mine * dim * eb, stream);
    }
}
