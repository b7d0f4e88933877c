// A tensor reached on other ranks: its parameter list gains the table of
// every rank's address, and tile.peer picks one; a copy from it outside a
// pipelined loop is plain 16-byte loads (loads the pipeline plans take a
// tensor map per rank: tests/unit/CompileMatrixTests.cpp).
// RUN: tessel-opt %s --tessel-pipeline=arch=sm_90a | tessel-translate --emit-cuda | FileCheck %s

// CHECK: peer_read(int p0, int p1, tessel::half *__restrict__ p2, int p2_d0, const tessel::PeerTable p2_peers, tessel::half *__restrict__ p3, int p3_d0
// CHECK: tessel::half *__restrict__ [[PEER:v[0-9]+]] = reinterpret_cast<tessel::half *>(p2_peers.at[p1]);
// CHECK-NOT: cp.async.bulk.tensor
// CHECK: [[PEER]][
#g = #tile.space<global>
tile.kernel @peer_read(%n: index, %from: index, %in: memref<?x64xf16, #g>, %out: memref<?x64xf16, #g>) grid(%bx) = affine_map<()[s0, s1] -> (s0 ceildiv 64)> threads(128) {
  %c0 = arith.constant 0 : index
  %c64 = arith.constant 64 : index
  %row = arith.muli %bx, %c64 : index
  %tile = tile.alloc : memref<64x64xf16, #tile.space<shared>>
  %peer = tile.peer %in [%from] : memref<?x64xf16, #g>
  %src = tile.region %peer[%row, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
  tile.copy %src, %tile : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #tile.space<shared>>
  %dst = tile.region %out[%row, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
  tile.copy %tile, %dst : memref<64x64xf16, #tile.space<shared>>, memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
}
