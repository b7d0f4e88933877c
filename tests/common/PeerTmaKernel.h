//===- PeerTmaKernel.h - a pipelined read of another rank's tiles -*- C++ -*-===//
//
// Kernels that move another rank's tiles by TMA (a tensor map per rank):
// peerTmaRead, out = rank `from`'s copy of `in`, [n, 128] f16, 256 rows a
// block in a two-stage pipelined loop of 64-row tiles (on sm_90a and sm_100a
// the pipeline's loads are TMA boxes); peerReduceAdd, a TMA reduce-add into
// a peer's tile.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TESTS_COMMON_PEERTMAKERNEL_H
#define TESSEL_TESTS_COMMON_PEERTMAKERNEL_H

#include "tessel/dsl/Program.h"

namespace tessel::test {

inline Program peerTmaRead() {
  Program p("peer_tma_read");
  Expr n = p.sym("n"), from = p.sym("from");
  Tensor in = p.tensor("in", {n, 128}, DType::f16);
  Tensor out = p.tensor("out", {n, 128}, DType::f16);
  p.kernel({ceil_div(n, 256)}, 128, [&](Expr bx) {
    Buffer tile = alloc_shared({64, 128}, DType::f16, "tile");
    pipelined(4, 2, [&](Expr i) {
      Expr row = bx * 256 + i * 64;
      copy(peer(in, from).tile({row, 0}, {64, 128}), tile);
      copy(tile, out.tile({row, 0}, {64, 128}));
    });
  });
  return p;
}

/// partial [128, 64] f32 of rank `rank` += 0.5 everywhere, by one TMA
/// reduce-add of a shared tile into that rank's copy.
inline Program peerReduceAdd() {
  Program p("peer_reduce_add");
  Expr rank = p.sym("rank");
  Tensor partial = p.tensor("partial", {128, 64}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer s = alloc_shared({128, 64}, DType::f32);
    fill(s, 0.5);
    atomic_add(peer(partial, rank).tile({0, 0}, {128, 64}), s, MemoryOrder::relaxed,
               AtomicPath::tma);
  });
  return p;
}

} // namespace tessel::test

#endif
