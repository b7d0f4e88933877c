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
// waitAtLeast(slot, value)): the exchange passes stream memory operations,
// the CPU model in the tests passes atomics and threads.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_EXCHANGEFLAGS_H
#define TESSEL_KERNELS_EXCHANGEFLAGS_H

#include <cstdint>

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

} // namespace tessel::kernels

#endif
