//===- ZigZag.h - chunked-query context parallelism, zig-zag placed -*- C++ -*-===//
//
// The other way to spread attention over the N ranks of a node: every rank
// keeps its own query rows for all heads and gathers the keys and values of
// the whole sequence. The sequence is cut into 2N chunks of C rows and rank
// r holds chunks r and 2N-1-r (SequenceShards.h), so under a causal mask
// every rank has the same work: its early chunk sees r+1 chunks of keys,
// its late one 2N-r. The K/V all-gather is pulled by the copy engines from
// the peers' inputs in symmetric memory, with the same epoch flags as the
// Ulysses exchange; attention over chunk c is the causal forward kernel
// with queries at key position c*C (AttentionConfig::queryOffset) over the
// first (c+1)*C gathered keys. O stays where its queries are: no exchange
// back.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_PARALLEL_ZIGZAG_H
#define TESSEL_KERNELS_PARALLEL_ZIGZAG_H

#include "tessel/kernels/parallel/ExchangeFlags.h"
#include "tessel/runtime/Communicator.h"
#include "tessel/runtime/Launch.h"

#include <array>
#include <functional>
#include <memory>

namespace tessel::kernels {

struct ZigZagShape {
  int64_t batch = 1, seqlen = 0; // the whole sequence, S = 2 * ranks * C
  int64_t headsQ = 0, headsKV = 0, headDim = 0;
  int64_t elementBytes = 2;
  int ranks = 1;
  int64_t chunk() const { return seqlen / (2 * ranks); }
  /// The global chunk index of local chunk 0 or 1 of `rank`.
  int globalChunk(int rank, int local) const { return local ? 2 * ranks - 1 - rank : rank; }
};

/// Throws tessel::Error naming the value: positive extents, heads_q a
/// multiple of heads_kv, the sequence in 2N chunks of whole query and key
/// tiles (block_m, block_n).
void validateZigZag(const ZigZagShape &s, int64_t blockM, int64_t blockN);

/// One rank's K/V all-gather. Construction is collective.
class ZigZagKvGather {
public:
  ZigZagKvGather(rt::Communicator &comm, const ZigZagShape &shape);
  ZigZagKvGather(const ZigZagKvGather &) = delete;
  ZigZagKvGather &operator=(const ZigZagKvGather &) = delete;
  /// This rank's K (0) or V (1), [B, 2C, Hkv, D]: chunk r, then chunk
  /// 2N-1-r; to be filled before a gather.
  CUdeviceptr input(int tensor) const { return inputs[tensor]->local(); }
  /// The whole sequence's K or V, [B, S, Hkv, D].
  CUdeviceptr gathered(int tensor) const { return outputs[tensor]->ptr(); }
  /// The all-gather on `stream`: waits until every rank has reached the
  /// same call, pulls every rank's chunks into place (its own included),
  /// and waits until its own inputs have been read by all.
  void gather(CUstream stream);
  /// The same with attention in between, queued as soon as it may start:
  /// `attend(stream, arrivals, epoch)` goes on `stream` once this rank's own
  /// chunks are in place; arrivals[c] (2N i32 flags) reaches epoch when
  /// chunk c is (a kernel built with streamedShards waits for each).
  void gatherStreamed(CUstream stream,
                      const std::function<void(CUstream, CUdeviceptr, uint32_t)> &attend);

private:
  rt::Communicator &comm;
  ZigZagShape shape;
  std::array<std::unique_ptr<rt::SymmetricBuffer>, 2> inputs;
  std::array<std::unique_ptr<rt::DeviceBuffer>, 2> outputs;
  /// Per rank: 'ready' and 'read' epochs from each rank, then 2N arrival
  /// epochs (16-byte aligned) written by its own copy streams.
  std::unique_ptr<rt::SymmetricBuffer> flags;
  uint32_t epoch = 0;
  /// A copy stream per source rank (one mark: its pulls are done).
  std::unique_ptr<CopyLanes> lanes;

  CUdeviceptr flag(int owner, int slot) const { return flags->peer(owner) + 4 * slot; }
  int64_t arrivalBase() const { return (2 * shape.ranks + 3) / 4 * 4; }
  void begin(CUstream stream);
  void end(CUstream stream);
  /// Source s's two chunks of K and V, on its lane.
  void pull(int source);
};

} // namespace tessel::kernels

#endif
