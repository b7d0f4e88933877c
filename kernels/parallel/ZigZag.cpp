//===- ZigZag.cpp - chunked-query context parallelism, zig-zag placed -----===//
#include "tessel/kernels/parallel/ZigZag.h"
#include "tessel/kernels/parallel/ExchangeFlags.h"
#include "tessel/kernels/parallel/SequenceShards.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Error.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::rt;

void tessel::kernels::validateZigZag(const ZigZagShape &s, int64_t blockM, int64_t blockN) {
  if (s.ranks < 1) throw Error(fmt::format("zig-zag: {} ranks", s.ranks));
  for (auto [name, v] : {std::pair{"batch", s.batch}, {"seqlen", s.seqlen}, {"heads_q", s.headsQ},
                         {"heads_kv", s.headsKV}, {"head_dim", s.headDim}})
    if (v <= 0) throw Error(fmt::format("zig-zag: {}={} must be positive", name, v));
  if (s.headsQ % s.headsKV)
    throw Error(fmt::format("zig-zag: heads_q={} is not a multiple of heads_kv={}", s.headsQ,
                            s.headsKV));
  if (s.seqlen % (2 * s.ranks))
    throw Error(fmt::format("zig-zag: seqlen={} does not split into 2 * {} chunks", s.seqlen,
                            s.ranks));
  // Each rank's queries (two chunks) and the whole key sequence.
  validateZigzag(std::vector<int64_t>(s.batch, 2 * s.chunk()),
                 std::vector<int64_t>(s.batch, s.seqlen), s.ranks, blockM, blockN);
}

ZigZagKvGather::ZigZagKvGather(Communicator &c, const ZigZagShape &s) : comm(c), shape(s) {
  if (c.size() != c.localSize())
    throw Error("zig-zag: the copy-engine all-gather runs within one node; this job spans several");
  if (s.ranks != c.size())
    throw Error(fmt::format("zig-zag: the shape is for {} ranks, the job has {}", s.ranks, c.size()));
  int64_t row = s.headsKV * s.headDim * s.elementBytes;
  for (int t = 0; t < 2; ++t) {
    inputs[t] = std::make_unique<SymmetricBuffer>(c, s.batch * 2 * s.chunk() * row);
    outputs[t] = std::make_unique<DeviceBuffer>(s.batch * s.seqlen * row);
  }
  flags = exchangeFlags(c, 4 * (arrivalBase() + 2 * s.ranks));
  lanes = std::make_unique<CopyLanes>(s.ranks, 1);
}

void ZigZagKvGather::begin(CUstream stream) {
  epoch = startExchangeCall(comm, *flags, epoch, stream);
  lanes->fork(stream);
}

void ZigZagKvGather::end(CUstream stream) {
  lanes->join(stream);
  // Sources may be overwritten once every reader has them.
  finishExchangeCall(comm, *flags, epoch, stream);
}

void ZigZagKvGather::pull(int source) {
  int64_t chunk = shape.chunk(), row = shape.headsKV * shape.headDim * shape.elementBytes;
  for (int t = 0; t < 2; ++t)
    for (int local = 0; local < 2; ++local) {
      // Rows local*C .. of every batch of the source's input, to rows
      // c*C .. of every batch of the whole sequence: one 2-D copy.
      copyPitched(inputs[t]->peer(source) + local * chunk * row, 2 * chunk * row,
                  gathered(t) + shape.globalChunk(source, local) * chunk * row,
                  shape.seqlen * row, chunk * row, shape.batch, (*lanes)[source]);
    }
}

void ZigZagKvGather::gather(CUstream stream) {
  begin(stream);
  for (int s = 0; s < shape.ranks; ++s) pull(s);
  end(stream);
}

void ZigZagKvGather::gatherStreamed(
    CUstream stream, const std::function<void(CUstream, CUdeviceptr, uint32_t)> &attend) {
  Driver &d = Driver::get();
  begin(stream);
  int me = comm.localRank(), n = shape.ranks;
  CUdeviceptr arrivals = flags->local() + 4 * arrivalBase();
  for (int i = 0; i < n; ++i) {
    int s = (me + i) % n;
    pull(s);
    // The copies before it on the lane are done: both chunks of s are in.
    for (int local = 0; local < 2; ++local)
      TESSEL_CU(d, cuStreamWriteValue32, (*lanes)[s], arrivals + 4 * shape.globalChunk(s, local),
                epoch, 0);
  }
  // The rank's own chunks are in before attention starts, so that no
  // spinning block waits for a copy that might need its SM.
  lanes->mark(me, 0);
  lanes->waitForMark(stream, me, 0);
  attend(stream, arrivals, epoch);
  end(stream);
}
