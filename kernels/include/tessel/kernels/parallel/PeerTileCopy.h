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
};
Program peerTileCopy(const PeerTileCopyConfig &config);

} // namespace tessel::kernels

#endif
