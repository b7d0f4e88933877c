//===- PeerTileCopy.cpp - an exchange's copies driven by SMs -------------===//
//
// The copy engines pull an exchange's pieces as 2-D copies, one row a
// descriptor; rows of a few KB (a rank's heads of a row) leave them far
// below NVLink's rate at four ranks. Here thread blocks move the pieces
// instead: each block copies one [blockRows, blockCols] tile from a peer's
// symmetric buffer (peer(), chosen by the block's rank) through shared
// memory into this rank's buffer (a pull), or from this rank's buffer into
// a peer's (a push: NVLink writes, which do not wait on a remote read's
// round trip), every peer's tiles in flight at once. Where a tile comes from and goes to is affine in (entry, source
// rank, tile): one kernel serves the way there (gather columns of every
// source's rows) and the way back (scatter every source's rows into
// columns).
//
//===----------------------------------------------------------------------===//
#include "tessel/kernels/parallel/PeerTileCopy.h"
#include "tessel/runtime/Error.h"

#include <fmt/format.h>
#include <optional>

using namespace tessel;
using namespace tessel::kernels;

Program tessel::kernels::peerTileCopy(const PeerTileCopyConfig &c) {
  if (c.blockRows <= 0 || c.blockCols <= 0)
    throw Error(fmt::format("peer_tile_copy: blocks of {} rows and {} columns", c.blockRows,
                            c.blockCols));
  Program p("peer_tile_copy");
  // The tiles: rows and cols per (entry, source), entries and ranks.
  Expr rows = p.sym("rows"), cols = p.sym("cols"), entries = p.sym("entries"),
       ranks = p.sym("ranks");
  // Source: rows srcEntry*e + srcRank*s + srcFirstRow, columns srcColRank*s
  // + srcFirstCol of source rank s's copy.
  Expr srcRows = p.sym("src_rows"), srcPitch = p.sym("src_pitch");
  Expr srcEntry = p.sym("src_entry"), srcRank = p.sym("src_rank"), srcFirstRow = p.sym("src_row");
  Expr srcColRank = p.sym("src_col_rank"), srcFirstCol = p.sym("src_col");
  // Destination: the same with its own strides.
  Expr dstRows = p.sym("dst_rows"), dstPitch = p.sym("dst_pitch");
  Expr dstEntry = p.sym("dst_entry"), dstRank = p.sym("dst_rank"), dstFirstRow = p.sym("dst_row");
  Expr dstColRank = p.sym("dst_col_rank"), dstFirstCol = p.sym("dst_col");
  // The rank the blocks start at (this one's): rank r's blocks visit the
  // peers in the order r, r + 1, ..., so that at any moment each rank
  // writes into (or reads from) a different peer.
  Expr firstRank = p.sym("first_rank");
  Expr me, epoch, ready, done, slots;
  if (c.flagsInKernel) {
    me = p.sym("me");
    epoch = p.sym("epoch");
    ready = p.sym("ready");
    done = p.sym("done");
    slots = p.sym("slots");
  }
  Tensor src = p.tensor("src", {srcRows, srcPitch}, c.dtype);
  Tensor dst = p.tensor("dst", {dstRows, dstPitch}, c.dtype);
  std::optional<Tensor> flags;
  if (c.flagsInKernel) flags = p.tensor("flags", {slots}, DType::i32);
  // The rank varies fastest over the blocks, which start in launch order:
  // the blocks running at any moment copy to (or from) every peer at
  // once, not all to one peer, whose NVLink port every rank would then be
  // writing into together (on 4 H100s the all-to-all went from 214 to 311
  // GB/s at 32k tokens).
  p.kernel({ranks * ceil_div(rows, c.blockRows), ceil_div(cols, c.blockCols), entries}, c.threads,
           [&](Expr bx, Expr by, Expr e) {
             Expr s = (bx % ranks + firstRank) % ranks;
             bx = bx / ranks;
             Buffer tile = alloc_shared({c.blockRows, c.blockCols}, c.dtype, "tile");
             std::vector<Expr> from = {srcEntry * e + srcRank * s + srcFirstRow + bx * c.blockRows,
                                       srcColRank * s + srcFirstCol + by * c.blockCols};
             std::vector<Expr> to = {dstEntry * e + dstRank * s + dstFirstRow + bx * c.blockRows,
                                     dstColRank * s + dstFirstCol + by * c.blockCols};
             std::vector<int64_t> sizes = {c.blockRows, c.blockCols};
             // Every block announces before it waits, so no block depends
             // on another of its own grid having started: a rank's blocks
             // wait only for blocks of other GPUs, each of which announces
             // as soon as it runs.
             if (flags) {
               signal(peer(*flags, s), {ready + me}, epoch);
               wait(*flags, {ready + s}, epoch, c.timeoutMs);
             }
             if (c.peerDestination) {
               copy(src.tile(from, sizes), tile);
               copy(tile, peer(dst, s).tile(to, sizes));
             } else {
               copy(peer(src, s).tile(from, sizes), tile);
               copy(tile, dst.tile(to, sizes));
             }
             // s may overwrite what it lent (a pull) or read what it got (a
             // push) once every block of every rank has counted.
             if (flags) signal_add(peer(*flags, s), {done + me}, Expr(1));
           });
  return p;
}

Program tessel::kernels::exchangeArrivals(int64_t timeoutMs) {
  Program p("exchange_arrivals");
  Expr slots = p.sym("slots"), ranks = p.sym("ranks"), base = p.sym("base"),
       count = p.sym("count");
  Tensor flags = p.tensor("flags", {slots}, DType::i32);
  p.kernel({ranks}, 32, [&](Expr s) { wait(flags, {base + s}, count, timeoutMs); });
  return p;
}
