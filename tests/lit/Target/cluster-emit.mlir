// A kernel launched in clusters of 2 with a multicast TMA load: the CUDA
// names the cluster rank, the multicast loads with their block mask, the
// arrivals on each block's barrier and the cluster barriers. Clusters do
// not exist before sm_90a.
// RUN: tessel-opt %s --tessel-pipeline=arch=sm_90a | tessel-translate --emit-cuda | FileCheck %s
// RUN: not tessel-opt %s --tessel-pipeline=arch=sm_80 2>&1 | FileCheck %s --check-prefix=SM80

// CHECK: tessel::mbarrier_init({{.*}}, 8);
// CHECK: fence.mbarrier_init.release.cluster
// CHECK-NEXT: tessel::cluster_sync();
// CHECK: = tessel::cluster_rank();
// CHECK: tessel::tma_load_multicast(&tma0, {{.*}}, 3, {{.*}});
// CHECK: tessel::mbarrier_arrive_cluster([[BAR:v[0-9]+]], {{v[0-9]+}});
// CHECK-NEXT: tessel::mbarrier_arrive_cluster([[BAR]], {{v[0-9]+}});
// CHECK: tessel::cluster_sync();
// CHECK-NEXT: }
// SM80: error: thread block clusters need sm_90a; the target is sm_80
#g = #tile.space<global>
#s = #tile.space<shared>
tile.kernel @multicast(%b: memref<?x?xf16, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (2)> threads(128) attributes {cluster = array<i64: 2>} {
  %c0 = arith.constant 0 : index
  %bars = tile.alloc : memref<1xi64, #s>
  tile.mbarrier_init %bars[%c0] arrivals(8) : memref<1xi64, #s>
  %bs = tile.alloc : memref<64x256xf16, #s>
  %r = tile.region %b[%n, %c0] [64, 256] : memref<?x?xf16, #g> -> memref<64x256xf16, strided<[?, 1], offset: ?>, #g>
  tile.mbarrier_expect_tx %bars[%c0] bytes(32768) : memref<1xi64, #s>
  tile.copy_async %r, %bs arrive %bars[%c0] {multicast} : memref<64x256xf16, strided<[?, 1], offset: ?>, #g>, memref<64x256xf16, #s>, memref<1xi64, #s>
  tile.mbarrier_wait %bars[%c0] parity %c0 : memref<1xi64, #s>
  tile.mbarrier_arrive %bars[%c0] {cluster} : memref<1xi64, #s>
}
