//===- ExchangeFlags.h - the epoch flag protocol of an exchange -*- C++ -*-===//
//
// Ranks that pull each other's buffers agree through epoch-valued flags:
// each call has an epoch one above the last, a rank announces a state
// (inputs ready, peers' data read) by storing the epoch into a slot of every
// rank's flags, and waits until its own slots of every rank reach it. Flags
// only grow, so no call resets them, except when epochs would wrap: the
// stream waits compare unsigned (CU_STREAM_WAIT_VALUE_GEQ), so before
// kEpochLimit the ranks meet on the host, zero the flags and start over at 1.
//
// The protocol is written once over `Ops` (store(owner, slot, value) and
// waitAtLeast(slot, value)) for the CPU model in the tests (atomics and
// threads); on the GPUs one small kernel runs it (exchangeHandshake), each
// of its blocks storing to one peer and waiting for that peer, all at once.
// Stream memory operations did the same one after another: 4N of them a
// call, 0.043 ms of a 0.19 ms exchange at four H100s.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_PARALLEL_EXCHANGEFLAGS_H
#define TESSEL_KERNELS_PARALLEL_EXCHANGEFLAGS_H

#include "tessel/dsl/Program.h"
#include "tessel/runtime/Communicator.h"
#include "tessel/runtime/Driver.h"

#include <cstdint>
#include <functional>
#include <memory>

namespace tessel::kernels {

inline constexpr uint32_t kEpochLimit = 0x7fffffffu;

/// The epoch after `epoch`, and whether the flags must be reset first
/// (the next epoch is then 1).
struct NextEpoch {
  uint32_t epoch;
  bool reset;
};
inline NextEpoch nextEpoch(uint32_t epoch) {
  if (epoch >= kEpochLimit) return {1, true};
  return {epoch + 1, false};
}

/// This rank (`me` of `ranks`) announces `epoch` in slot base + me of every
/// rank's flags, then waits until slots base .. base + ranks - 1 of its own
/// reach it.
template <class Ops>
void announceAndAwait(Ops &ops, int ranks, int me, int base, uint32_t epoch) {
  for (int r = 0; r < ranks; ++r) ops.store(r, base + me, epoch);
  for (int r = 0; r < ranks; ++r) ops.waitAtLeast(base + r, epoch);
}

/// One 2-D device copy on `stream`: `rows` rows of `width` bytes, `srcPitch`
/// and `dstPitch` bytes apart (skipped when empty). The exchanges' pieces
/// are such copies.
void copyPitched(CUdeviceptr src, int64_t srcPitch, CUdeviceptr dst, int64_t dstPitch,
                 int64_t width, int64_t rows, CUstream stream);

/// Streams for an exchange's copies (one per source, or per source and
/// tensor, so that the copy engines work on all at once), forked from the
/// caller's stream when a call begins and joined to it when it ends, with
/// an event per lane to mark points in them.
class CopyLanes {
public:
  /// `urgent` lanes have the device's highest stream priority: a kernel on
  /// one (a handshake) starts as soon as an SM frees, ahead of the blocks
  /// that default-priority streams (a GEMM's) still have queued.
  explicit CopyLanes(int count, int marksPerLane = 0, bool urgent = false);
  ~CopyLanes();
  CopyLanes(const CopyLanes &) = delete;
  CopyLanes &operator=(const CopyLanes &) = delete;
  int size() const { return static_cast<int>(lanes.size()); }
  CUstream operator[](int lane) const { return lanes[lane]; }
  /// Every lane starts after the work queued on `stream` so far.
  void fork(CUstream stream);
  /// Work queued on `stream` from now on starts after every lane's.
  void join(CUstream stream);
  /// Event `mark` of `lane`, recorded there now; and `stream` made to wait
  /// for it.
  void mark(int lane, int mark);
  void waitForMark(CUstream stream, int lane, int mark);

private:
  std::vector<CUstream> lanes;
  CUevent forkEvent = nullptr;
  std::vector<CUevent> joinEvents, marks;
  int marksPerLane;
};

/// How long a handshake waits for a peer before its kernel traps (a rank
/// that never came): $TESSEL_EXCHANGE_TIMEOUT_S seconds (1 to 3600), else
/// 600, as long as torch's NCCL watchdog waits by default, since a healthy
/// rank may be busy on the host (a checkpoint, an evaluation) while its
/// peers' next call already waits. Throws on a malformed value.
int64_t exchangeTimeoutMs();

/// The handshake kernel: symbols slots, ranks, me, base, epoch, then the
/// flags [slots] (i32, LaunchArg::symmetric). Block r stores `epoch` into
/// slot base + me of rank r's flags (release, system scope, after the
/// stream's earlier work) and waits until slot base + r of this rank's
/// reaches it (trapping after `timeoutMs`).
Program exchangeHandshake(int64_t timeoutMs = exchangeTimeoutMs());

/// An exchange's flags: a zeroed symmetric buffer of `bytes`, allocated by
/// every rank together once this process has the handshake kernel loaded
/// for the communicator's device (a module load waits for running
/// kernels, and a peer's handshake may already be spinning).
std::unique_ptr<rt::SymmetricBuffer> exchangeFlags(rt::Communicator &comm, size_t bytes);

/// The next epoch after `lastEpoch`; where epochs would wrap, the ranks
/// first meet on the host and zero every rank's flags (reset is then true:
/// counts kept beside the epochs start over too). Collective then.
NextEpoch advanceEpoch(rt::Communicator &comm, rt::SymmetricBuffer &flags, uint32_t lastEpoch,
                       CUstream stream);

/// The start of an exchange's call on `stream`, with `flags` (symmetric)
/// holding 'ready' epochs in slots [0, N) and 'read' epochs in [N, 2N):
/// the next epoch (after zeroing every rank's flags on the host when epochs
/// would wrap), announced ready, and every rank's readiness awaited.
/// Returns the call's epoch.
uint32_t startExchangeCall(rt::Communicator &comm, rt::SymmetricBuffer &flags, uint32_t lastEpoch,
                           CUstream stream);
/// The end: this rank has read its peers' data; once every rank has read
/// this rank's, work queued after may overwrite it.
void finishExchangeCall(rt::Communicator &comm, rt::SymmetricBuffer &flags, uint32_t epoch,
                        CUstream stream);

} // namespace tessel::kernels

#endif
