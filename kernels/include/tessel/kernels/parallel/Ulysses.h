//===- Ulysses.h - the sequence-parallel all-to-all ---------------*- C++ -*-===//
//
// Ulysses sequence parallelism over N ranks: before attention each rank holds
// a shard of the sequence for all heads, Q [B, S/N, Hq, D] (K, V with Hkv);
// the all-to-all gives rank r the whole sequence for its heads,
// [B, S, Hq/N, D] (heads r*Hq/N ...), and the inverse brings O back.
//
// The exchange here is pulled by each rank's copy engine straight from its
// peers' inputs in symmetric memory, one 2-D copy per (source rank, batch,
// tensor) in ring order starting with itself: no packing pass. Epoch-valued
// flags written by the stream (cuStreamWriteValue32 into every peer) say when
// a rank's inputs are ready and when its peers have read them, so no host
// barrier sits between calls.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_PARALLEL_ULYSSES_H
#define TESSEL_KERNELS_PARALLEL_ULYSSES_H

#include "tessel/kernels/parallel/ExchangeFlags.h"
#include "tessel/runtime/Communicator.h"
#include "tessel/runtime/Launch.h"

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace tessel {
class Kernel;
}

namespace tessel::kernels {

struct UlyssesShape {
  int64_t batch = 1, seqlen = 0; // the whole sequence, S
  int64_t headsQ = 0, headsKV = 0, headDim = 0;
  int64_t elementBytes = 2;
  int ranks = 1;
  /// Packed batches (batch 1): the int32 prefix sums of each sequence's
  /// query rows and key/value rows (one entry more than sequences); empty
  /// for a fixed batch. Each rank holds its 1/N of every sequence, end to
  /// end, so every length must divide by N.
  std::vector<int32_t> cuSeqlensQ, cuSeqlensK;
  bool packed() const { return !cuSeqlensQ.empty(); }
  int64_t localSeq() const { return seqlen / ranks; }
  /// Tensor 0 is Q, 1 and 2 are K and V.
  int64_t heads(int tensor) const { return tensor == 0 ? headsQ : headsKV; }
  /// Rows of tensor t over the whole batch (batch * S, or the packed rows),
  /// and in one rank's shard.
  int64_t totalRows(int tensor) const;
  int64_t localRows(int tensor) const { return totalRows(tensor) / ranks; }
  /// The sequences of tensor t as runs of the whole batch's rows: each
  /// batch entry, or each packed sequence.
  struct Sequence {
    int64_t start, length;
  };
  std::vector<Sequence> sequences(int tensor) const;
  /// Heads of `tensor` each rank holds after the exchange: heads/N, or, for
  /// K/V when heads_kv does not split over the ranks, the one K/V head that
  /// all of the rank's query heads share (replicated over several ranks).
  int64_t headsPerRank(int tensor) const {
    if (tensor == 0 || headsKV % ranks == 0) return heads(tensor) / ranks;
    return 1;
  }
  /// The first of those heads, as a head index of the rank's input.
  int64_t firstHead(int tensor, int rank) const {
    if (tensor == 0 || headsKV % ranks == 0) return rank * headsPerRank(tensor);
    return rank * (headsQ / ranks) / (headsQ / headsKV);
  }
  /// Elements of one rank's input (sequence shard, all heads) and output
  /// (whole sequence, its heads) of a tensor.
  int64_t inputElements(int tensor) const { return localRows(tensor) * heads(tensor) * headDim; }
  int64_t outputElements(int tensor) const {
    return totalRows(tensor) * headsPerRank(tensor) * headDim;
  }
};

/// Throws tessel::Error naming the value when the exchange cannot run: the
/// sequence split over the ranks, heads split over them, GQA groups whole.
void validateUlysses(const UlyssesShape &s);

/// The query heads of each of `groups` equal head groups of a rank; throws
/// when they do not divide the rank's query and K/V heads.
std::vector<int64_t> evenHeadGroups(const UlyssesShape &s, int groups);
/// Throws unless `queryHeads` (query heads per group) are positive, sum to
/// the rank's query heads, and give each group a whole number of K/V heads.
void validateHeadGroups(const UlyssesShape &s, const std::vector<int64_t> &queryHeads);

/// Where element (row, h, d) of rank `rank`'s output of `tensor` comes
/// from (`row` of the whole batch's rows: b * S + t for a fixed batch): the
/// source rank and the element's offset in that rank's input. The CPU model
/// the GPU exchange is checked against.
struct UlyssesSource {
  int rank;
  int64_t offset;
};
UlyssesSource ulyssesSource(const UlyssesShape &s, int tensor, int rank, int64_t row, int64_t h,
                            int64_t d);

/// The exchange of one rank. Construction is collective (symmetric buffers).
/// Outputs are laid out in head groups, each a contiguous [B, S, heads of
/// the group, D] tensor, so that attention can run on one group while the
/// next one arrives (pipeline()). Groups may differ in size: small first and
/// last groups shorten what the pipeline cannot hide (the first group's
/// arrival and the last group's way back).
class UlyssesExchange {
public:
  /// Who moves a rank's own shard (the part that stays on its GPU): the copy
  /// engine, like the peers' shards, or a kernel (columnSlice), which
  /// leaves the copy engines to the NVLink traffic.
  enum class LocalShard { copyEngine, kernel };
  UlyssesExchange(rt::Communicator &comm, const UlyssesShape &shape, int groups = 1,
                  LocalShard local = LocalShard::copyEngine);
  /// Groups of `queryHeads[g]` query heads of the rank's heads/N (in order;
  /// each group's K/V heads in proportion, a whole number).
  UlyssesExchange(rt::Communicator &comm, const UlyssesShape &shape,
                  std::vector<int64_t> queryHeads, LocalShard local = LocalShard::copyEngine);
  ~UlyssesExchange();
  UlyssesExchange(const UlyssesExchange &) = delete;
  UlyssesExchange &operator=(const UlyssesExchange &) = delete;
  int groupCount() const { return groups; }
  /// Heads of tensor `tensor` (0: Q, 1 and 2: K/V) in group `group`, and the
  /// first of them among the rank's heads.
  int64_t groupHeads(int tensor, int group) const {
    return firstInGroup[tensor != 0][group + 1] - firstInGroup[tensor != 0][group];
  }
  int64_t groupFirst(int tensor, int group) const { return firstInGroup[tensor != 0][group]; }
  const UlyssesShape &exchangeShape() const { return shape; }
  /// This rank's inputs Q, K, V (sequence shard, all heads), to be filled
  /// before an exchange.
  CUdeviceptr input(int tensor) const { return inputs[tensor]->local(); }
  /// Every rank's address of that input, as mapped here, in rank order.
  std::vector<CUdeviceptr> inputOnEveryRank(int tensor) const {
    std::vector<CUdeviceptr> all;
    for (int r = 0; r < shape.ranks; ++r) all.push_back(inputs[tensor]->peer(r));
    return all;
  }
  /// Head group `group` of this rank's Q, K, V (whole sequence).
  CUdeviceptr output(int tensor, int group = 0) const;
  /// The all-to-all of Q, K and V on `stream`: waits (on the stream) until
  /// every rank has reached the same call, pulls, then tells each source it
  /// has been read and waits until this rank's own inputs have been read by
  /// all, so work queued after it may overwrite them.
  void forward(CUstream stream);
  /// After attention: the per-head output O' (head group g written into
  /// attentionOutput(g)) goes back to O [B, S/N, Hq, D] (result()), the
  /// inverse exchange, pulled and flagged the same way.
  CUdeviceptr attentionOutput(int group = 0) const;
  CUdeviceptr result() const { return sequenceOutput->local(); }
  void reverse(CUstream stream);
  /// Who moves the peers' pieces in forward() and reverse(): the copy
  /// engines pulling, one 2-D copy per (source, sequence); or thread blocks
  /// (peerTileCopy: every peer's tiles in flight at once, one launch per
  /// tensor and head group) pulling from the peers, or pushing to them.
  enum class PeerTransfer { copyEngine, kernelPull, kernelPush };
  /// Switches forward() and reverse() to `how`; throws tessel::Error
  /// saying why the kernel cannot take this shape (a packed batch, shards
  /// that are not whole tiles; for pushes, K/V heads replicated over the
  /// ranks). pipeline() keeps the copy engines. Pushes write a peer's
  /// outputs (result() on the way back) once that peer's stream has reached
  /// the same call: work reading them on other streams must be joined to
  /// the exchange's stream before its next call.
  /// `tile` overrides the tile (rows, columns, threads; 0 picks), which
  /// must divide the shards' rows and the groups' columns.
  /// Where a kernel transfer's handshakes run: in the transfer's own blocks
  /// (each announces the call to its peer and waits for the peer's
  /// announcement, then counts its tile into the peer's flags; the call
  /// ends with one small kernel waiting for every peer's count), or as a
  /// handshake kernel before the transfers and one after. automatic: the
  /// separate kernels, measured faster (the blocks' announcements, waits and
  /// counts cost more than the launches they save). In the blocks is
  /// refused where ranks share a GPU (a spinning block could hold the SM its
  /// peer's block needs). Every rank must choose alike.
  enum class Handshakes { automatic, inKernel, separate };
  void setPeerTransfer(PeerTransfer how, std::array<int64_t, 3> tile = {0, 0, 0},
                       Handshakes handshakes = Handshakes::automatic);
  /// Whether the kernel transfers run their handshakes in their blocks.
  bool handshakesInKernel() const { return flagsInKernel; }
  PeerTransfer peerTransfer() const { return transfer; }
  /// The measured winner for this shape: kernel pushes where they can run,
  /// else kernel pulls, else the copy engines (on 4 H100s, b2 hq32 hkv8
  /// d128: pushes 0.195 ms at 8k tokens against the copy engines' 0.273,
  /// the same at 32k; on 2, 0.200 against 0.225 and 0.736 against 0.936).
  /// Sets it and returns it; collective (the ranks take the least any of
  /// them can run, in the order copy engines, pulls, pushes).
  PeerTransfer usePreferredTransfer();
  /// A call's handshakes alone (every rank ready, every rank read), no
  /// data: the fixed cost of a call, for benchmarks.
  void handshakes(CUstream stream) {
    begin(stream);
    end(stream);
  }
  /// How attention learns that a head group's rows have arrived.
  enum class Arrival {
    /// The stream waits for the whole group before attend(g) is queued.
    stream,
    /// attend(g) is queued once the rank's own shard of the group is in;
    /// the kernel waits in itself for each peer's shard: arrivalFlags(g)[s]
    /// reaches epoch() when source s's rows of group g are in place (a
    /// kernel built with AttentionConfig::streamedShards).
    kernel,
  };
  /// All of it, overlapped: the groups' pulls on copy streams, `attend(g,
  /// s)` queued as `arrival` says, and group g's output pulled back by every
  /// rank as soon as its owner flags it. With `attentionStreams` > 1 the
  /// groups' attention takes turns over that many streams forked from
  /// `stream`, so that a group's first blocks fill the SMs its predecessor's
  /// last blocks leave idle (kernels on one stream do not overlap).
  void pipeline(CUstream stream, const std::function<void(int, CUstream)> &attend,
                Arrival arrival = Arrival::stream, int attentionStreams = 1);
  /// This rank's arrival flags of head group g, one i32 per source rank,
  /// and the value they reach in the current call (valid inside attend).
  CUdeviceptr arrivalFlags(int group) const {
    return flags->local() + 4 * (arrivalBase() + group * arrivalStride());
  }
  uint32_t currentEpoch() const { return epoch; }
  /// For tests of the flags' reset: the next call's epoch follows `e`
  /// (every rank must skip alike, before its first call).
  void skipEpochsTo(uint32_t e) { epoch = e; }

private:
  rt::Communicator &comm;
  UlyssesShape shape;
  int groups = 1;
  /// Per Q and K/V: prefix sums of the groups' heads (groups + 1 entries).
  std::array<std::vector<int64_t>, 2> firstInGroup;
  std::array<std::unique_ptr<rt::SymmetricBuffer>, 3> inputs;
  /// Symmetric, for kernel pushes to write into.
  std::array<std::unique_ptr<rt::SymmetricBuffer>, 3> outputs;
  std::unique_ptr<rt::SymmetricBuffer> headOutput;
  std::unique_ptr<rt::SymmetricBuffer> sequenceOutput;
  /// Per rank: 'ready' epochs from each peer, 'read' epochs, then per group
  /// 'output ready' epochs, then per group 'arrived' epochs (written by the
  /// rank's own copy streams).
  std::unique_ptr<rt::SymmetricBuffer> flags;
  uint32_t epoch = 0;
  /// A stream per source rank and tensor, each marking where its pulls of
  /// a head group end.
  std::unique_ptr<CopyLanes> lanes;
  /// The streams attention takes turns on (made on first use).
  std::unique_ptr<CopyLanes> attentionLanes;
  /// The own shard's copy kernel (LocalShard::kernel).
  std::unique_ptr<Kernel> localCopy;
  /// The kernel transfers: the tile copy.
  PeerTransfer transfer = PeerTransfer::copyEngine;
  std::unique_ptr<Kernel> tileCopy;
  /// In-kernel handshakes: the kernel that ends a call, the count every
  /// peer's blocks have reached in this rank's 'done' slots after it (wraps,
  /// as the waits allow), and the tile, which sets how many blocks count.
  bool flagsInKernel = false;
  std::unique_ptr<Kernel> arrivals;
  uint32_t doneCount = 0;
  int64_t tileRows = 0, tileCols = 0;
  /// One tile-copy launch (`args` of its TileMoves), with the flags'
  /// arguments where the handshakes are in the kernel.
  void launchTiles(std::vector<rt::LaunchArg> args, int64_t rows, int64_t cols, int64_t entries,
                   CUstream stream);
  /// A call of in-kernel handshakes: its epoch, before the transfers, and
  /// every peer's count awaited, after them.
  void startCounting(CUstream stream);
  void awaitCounts(CUstream stream);
  /// A call of handshake kernels: its epoch, announced and awaited.
  void startCall(CUstream stream);
  /// Every tensor's (group's) pieces as one launch each.
  void moveAllWithKernel(CUstream stream);
  void moveBackAllWithKernel(CUstream stream);
  /// Rows [rows, pitch] from column `first` of `src`, `cols` wide, into
  /// dst [rows, cols]: the copy engine or localCopy.
  void copyColumns(CUdeviceptr src, int64_t pitch, int64_t first, CUdeviceptr dst, int64_t cols,
                   int64_t rows, CUstream stream, bool local);

  int laneOf(int source, int tensor) const { return 3 * source + tensor; }
  CUstream lane(int source, int tensor) const { return (*lanes)[laneOf(source, tensor)]; }
  /// Arrival flags start, per group, at 16-byte boundaries (kernel tensor
  /// arguments must be aligned so).
  int64_t arrivalStride() const { return (shape.ranks + 3) / 4 * 4; }
  int64_t arrivalBase() const { return ((2 + groups) * shape.ranks + 3) / 4 * 4; }
  /// Per source rank, the count of its blocks done (in-kernel handshakes).
  int64_t doneBase() const { return arrivalBase() + groups * arrivalStride(); }
  CUdeviceptr flag(int owner, int slot) const { return flags->peer(owner) + 4 * slot; }
  /// Every rank's inputs ready (stream-side handshake), then the lanes fork.
  void begin(CUstream stream);
  /// Lanes join; every reader done with this rank's data.
  void end(CUstream stream);
  /// Group g of tensor t from source s, on its lane.
  void pull(int source, int tensor, int group);
  /// Group g of the attention output from source s, on its lane.
  void pullBack(int source, int group);
};

/// The same exchange through NCCL, for comparison: each rank packs its
/// inputs by destination (2-D device copies), one ncclAlltoAll moves the
/// bytes, and the received chunks are copied into the outputs' layout.
/// `packing` false times the ncclAlltoAll alone.
class NcclUlysses {
public:
  NcclUlysses(rt::Communicator &comm, const UlyssesShape &shape, UlyssesExchange &exchange);
  CUdeviceptr output(int tensor) const { return outputs[tensor]->ptr(); }
  void forward(CUstream stream, bool packing = true);
  /// Bytes every rank sends (its own chunk included).
  int64_t bytesPerRank() const { return perPeer * shape.ranks; }

private:
  rt::Communicator &comm;
  UlyssesShape shape;
  UlyssesExchange &exchange;
  int64_t perPeer = 0; // bytes to each destination
  std::unique_ptr<rt::DeviceBuffer> send, recv;
  std::array<std::unique_ptr<rt::DeviceBuffer>, 3> outputs;
};

} // namespace tessel::kernels

#endif
