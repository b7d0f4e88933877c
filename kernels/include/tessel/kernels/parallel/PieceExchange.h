//===- PieceExchange.h - an all-to-all of pitched pieces ----------*- C++ -*-===//
//
// An exchange between the ranks of a job described as data: for every
// tensor it moves, every rank holds a source buffer and a destination
// buffer of the same sizes, and `pieces(t, src, dst)` lists the pitched 2-D
// blocks rank `dst` takes from rank `src`'s source of tensor t. The layouts
// of sequence-parallel attention (rows by heads, the log-sum-exp by heads,
// head groups, replicated K/V heads) are such lists (UlyssesPieces.h).
//
// Two transports move the same pieces, with the same bytes landing in the
// same places (bit for bit):
//  - copyEngine: each rank pulls its pieces from its peers' sources in
//    symmetric memory, one 2-D copy each, on a copy lane per source, between
//    the epoch handshakes of ExchangeFlags.h (one node, peer access);
//  - nccl: each rank packs the pieces every peer takes from it into one
//    message per peer, grouped ncclSend/ncclRecv move the messages, and
//    each rank unpacks what it received (any topology NCCL reaches). A
//    rank's own pieces are copied directly.
//  - hierarchical: the copy engines between the ranks of a node (the
//    pieces of the rank's own node pulled from symmetric memory), NCCL's
//    messages between nodes, both in flight at once. A node is a run of
//    consecutive ranks (as torchrun numbers them); TESSEL_EXCHANGE_NODE_RANKS
//    splits one node into smaller ones, so that one machine runs the
//    transport as several nodes would.
// runOnHost() applies a plan to host buffers, through messages or directly:
// the model the tests check layouts and packing against, without a GPU.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_PARALLEL_PIECEEXCHANGE_H
#define TESSEL_KERNELS_PARALLEL_PIECEEXCHANGE_H

#include "tessel/runtime/Communicator.h"
#include "tessel/runtime/Launch.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tessel::kernels {

class CopyLanes;

/// `height` rows of `width` bytes, from `srcOffset` of the source (rows
/// `srcPitch` bytes apart) to `dstOffset` of the destination (rows
/// `dstPitch` apart).
struct Piece {
  int64_t srcOffset, srcPitch, dstOffset, dstPitch, width, height;
  int64_t bytes() const { return width * height; }
};

struct ExchangePlan {
  int ranks = 1;
  /// Per tensor: bytes of every rank's source and destination buffers.
  std::vector<int64_t> sourceBytes, destinationBytes;
  /// Parts that can move on their own (head groups, so that work on one
  /// overlaps the next one's exchange).
  int parts = 1;
  /// What rank `dst` takes from rank `src`'s source of tensor t in part
  /// `part` (the same answer on every rank).
  std::function<std::vector<Piece>(int t, int src, int dst, int part)> pieces;
  int tensors() const { return static_cast<int>(sourceBytes.size()); }
};

/// Throws tessel::Error naming the tensor, ranks and piece when a piece
/// reaches past a buffer, has a pitch below its width, or is negative.
void validatePlan(const ExchangePlan &plan);

/// Bytes of the message rank `src` sends rank `dst` in part `part` (the
/// pieces of every tensor, in tensor order, each packed row after row).
int64_t messageBytes(const ExchangePlan &plan, int src, int dst, int part = 0);

/// The plan on host buffers: buffers[rank][tensor] (sources as given,
/// destinations written). With `throughMessages` the pieces are packed per
/// (source, destination) and unpacked, as the nccl transport does.
using HostBuffers = std::vector<std::vector<std::vector<uint8_t>>>;
void runOnHost(const ExchangePlan &plan, const HostBuffers &sources, HostBuffers &destinations,
               bool throughMessages);

enum class Transport { copyEngine, nccl, hierarchical };
const char *transportName(Transport t);

/// Ranks of a node as the exchange sees them: the communicator's local
/// size, or $TESSEL_EXCHANGE_NODE_RANKS (read through `getenv`) where it
/// names a divisor of it; anything else there is an error naming it.
int exchangeNodeRanks(int localSize,
                      const std::function<const char *(const char *)> &getenv = ::getenv);

/// The transport for `comm`: `asked` when it is "symmetric" (copyEngine),
/// "nccl" or "hierarchical" (where `hierarchicalOk`), else $TESSEL_EXCHANGE
/// when set, else the copy engines where every rank shares the node and
/// reaches every peer's device, NCCL otherwise (hierarchical is asked for:
/// it has not been measured across nodes). `why` says which of these
/// decided. Throws on an unknown name, and when a transport is asked for
/// where it cannot run.
Transport chooseTransport(rt::Communicator &comm, const std::string &asked, std::string &why,
                          bool hierarchicalOk = true);
/// The transport's name, with the node size for hierarchical: what ranks
/// compare before they exchange (ranks that split nodes differently would
/// pair a pull with a message).
std::string describeTransport(rt::Communicator &comm, Transport t);

/// One rank's exchange. Construction is collective (symmetric buffers, or
/// NCCL's communicator on its first use).
class PieceExchange {
public:
  PieceExchange(rt::Communicator &comm, ExchangePlan plan, Transport transport);
  ~PieceExchange();
  PieceExchange(const PieceExchange &) = delete;
  PieceExchange &operator=(const PieceExchange &) = delete;

  /// This rank's source of tensor t, filled before run().
  CUdeviceptr source(int t) const;
  /// This rank's destination of tensor t, written by run().
  CUdeviceptr destination(int t) const;
  Transport transport() const { return how; }
  int parts() const { return plan.parts; }
  /// Moves the pieces of part `part` (-1: of every part), on `stream`
  /// (collective: every rank queues the same runs in the same order, on
  /// one stream or streams ordered between them). The part's sources may
  /// be overwritten by work queued after it.
  void run(CUstream stream, int part = -1);

private:
  rt::Communicator &comm;
  ExchangePlan plan;
  Transport how;
  std::vector<std::unique_ptr<rt::SymmetricBuffer>> symmetricSources;
  std::vector<std::unique_ptr<rt::DeviceBuffer>> plainSources, destinations;
  /// copyEngine: the handshake flags, the epoch and a lane per source.
  std::unique_ptr<rt::SymmetricBuffer> flags;
  uint32_t epoch = 0;
  std::unique_ptr<CopyLanes> lanes;
  /// nccl and hierarchical: the packed messages to and from the peers NCCL
  /// reaches, each part's and peer's at its own offset (sendAt[part][peer],
  /// ranks + 1 entries a part), so parts in flight at once use separate
  /// bytes.
  std::unique_ptr<rt::DeviceBuffer> sendBuffer, receiveBuffer;
  std::vector<std::vector<int64_t>> sendAt, receiveAt;
  /// The plan's pieces of this rank, made once: into[part][src][t] what it
  /// takes from `src`, outOf[part][dst][t] what `dst` takes from it.
  std::vector<std::vector<std::vector<std::vector<Piece>>>> into, outOf;

  /// hierarchical: ranks per node, and whether rank r shares this rank's.
  int nodeRanks = 1;
  bool sameNode(int r) const;
  /// Whether this rank's pieces to and from `r` travel as NCCL messages.
  bool viaNccl(int r) const;
  void runCopyEngine(CUstream stream, int part);
  void runNccl(CUstream stream, int part);
  void runHierarchical(CUstream stream, int part);
  /// Pulls of `part` from the symmetric sources of the ranks `from` takes,
  /// one lane per source, between the node's handshakes.
  void pullFromNode(CUstream stream, int part, const std::function<bool(int)> &from);
  /// hierarchical: the lane NCCL's messages move on.
  std::unique_ptr<CopyLanes> messageLane;
  /// Packs the messages NCCL moves, moves them, and unpacks them.
  void packMessages(CUstream stream, int part);
  void sendAndReceive(CUstream stream, int part);
  void unpackMessages(CUstream stream, int part);
};

/// Work in parts between two exchanges, overlapped: part g of `in` moves
/// on a lane of its own, `work(g, s)` is queued once it has arrived, and
/// part g of `out` moves on another lane once that work is done, while
/// part g + 1 is worked on. The parts' work takes turns over `workStreams`
/// streams (1: `stream` itself), so that a part's first blocks fill the
/// SMs its predecessor's last blocks leave idle. Queued on `stream`: work
/// queued after run() follows all of it.
class PartPipeline {
public:
  PartPipeline(int parts, int workStreams = 1);
  ~PartPipeline();
  PartPipeline(const PartPipeline &) = delete;
  PartPipeline &operator=(const PartPipeline &) = delete;
  void run(CUstream stream, PieceExchange &in, PieceExchange &out,
           const std::function<void(int, CUstream)> &work);

private:
  int parts, workStreams;
  std::unique_ptr<CopyLanes> lanes; // 0: in, 1: out, then the work streams
  std::vector<CUevent> workDone;
};

} // namespace tessel::kernels

#endif
