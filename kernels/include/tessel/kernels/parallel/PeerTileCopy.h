//===- PeerTileCopy.h - an exchange's copies driven by SMs --------*- C++ -*-===//
//
// A kernel that moves, for every entry e and rank s, a [rows, cols] block
// from rank s's copy of a symmetric buffer into this rank's buffer (or,
// with peerDestination, from this rank's buffer into rank s's copy), tile
// by tile, each tile's place affine in (e, s): the SM-driven transfers of
// the Ulysses exchange (UlyssesExchange::PeerTransfer). Launch arguments
// in order: the symbols rows, cols, entries, ranks, src_rows, src_pitch,
// src_entry, src_rank, src_row, src_col_rank, src_col, dst_rows,
// dst_pitch, dst_entry, dst_rank, dst_row, dst_col_rank, dst_col,
// first_rank (the peer this rank's blocks start at); then src
// and dst (the peer side as LaunchArg::symmetric). rows and cols must be
// whole tiles.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_PARALLEL_PEERTILECOPY_H
#define TESSEL_KERNELS_PARALLEL_PEERTILECOPY_H

#include "tessel/dsl/Program.h"

namespace tessel::kernels {

struct PeerTileCopyConfig {
  /// f16 moves any 16-bit elements, f32 any 32-bit ones (bits unchanged).
  DType dtype = DType::f16;
  int64_t blockRows = 64, blockCols = 128;
  int threads = 128;
  /// The peer's copy is the destination (a push), not the source.
  bool peerDestination = false;
  /// The call's handshakes inside the copy (no handshake kernels): each
  /// block announces the epoch to its peer s (slot ready + me of s's
  /// flags), waits for s's announcement (slot ready + s of its own), moves
  /// its tile, and adds 1 to slot done + me of s's flags. The call ends once
  /// every slot done + s of a rank's flags has reached its count
  /// (exchangeArrivals). Extra arguments after first_rank: the symbols me,
  /// epoch, ready, done, slots; after dst: the flags [slots] (i32,
  /// LaunchArg::symmetric). Blocks wait for peers that run on other GPUs:
  /// ranks that share a GPU must not use it (a block that spins may hold
  /// the SM its peer's block needs).
  bool flagsInKernel = false;
  int64_t timeoutMs = 10000;
};
Program peerTileCopy(const PeerTileCopyConfig &config);

/// The end of a call of in-kernel handshakes: block s waits until slot
/// base + s of this rank's flags reaches `count` (wrap-safe), the blocks
/// rank s's copies have added so far. Symbols slots, ranks, base, count;
/// then the flags [slots] (i32).
Program exchangeArrivals(int64_t timeoutMs);

} // namespace tessel::kernels

#endif
