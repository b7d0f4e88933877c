// RUN: tessel-opt %s -pass-pipeline='builtin.module(tile.kernel(tessel-insert-barriers))' | FileCheck %s

#g = #tile.space<global>
#s = #tile.space<shared>

// A stage that a TMA load fills, then the threads rewrite in place (element
// code patching a few values of a staged row): the next TMA load into that
// stage writes through the async proxy, which the release of the stage does
// not order after the threads' generic writes. The writes are fenced
// (fence.proxy.async) in the writing threads, as before an async-proxy
// read.
// CHECK-LABEL: tile.kernel @tma_fill_after_thread_writes
// CHECK: tile.copy_async
// CHECK: tile.mbarrier_wait
// CHECK: tile.fill
// CHECK-NEXT: tile.fence_proxy_async
tile.kernel @tma_fill_after_thread_writes(%a: memref<?x64xf32, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %bars = tile.alloc : memref<2xi64, #s>
  tile.mbarrier_init %bars[%c0] arrivals(1) : memref<2xi64, #s>
  tile.mbarrier_init %bars[%c1] arrivals(1) : memref<2xi64, #s>
  %as = tile.alloc {stages = 2 : i64} : memref<8x64xf32, #s>
  scf.for %k = %c0 to %n step %c1 {
    %st = arith.remui %k, %c1 : index
    %view = tile.stage %as[%st] : memref<8x64xf32, #s>
    %r = tile.region %a[%k, %c0] [8, 64] : memref<?x64xf32, #g> -> memref<8x64xf32, strided<[64, 1], offset: ?>, #g>
    tile.mbarrier_expect_tx %bars[%st] bytes(2048) : memref<2xi64, #s>
    tile.copy_async %r, %view arrive %bars[%st] : memref<8x64xf32, strided<[64, 1], offset: ?>, #g>, memref<8x64xf32, #s>, memref<2xi64, #s>
    tile.mbarrier_wait %bars[%st] parity %c0 : memref<2xi64, #s>
    tile.fill %view, %zero : memref<8x64xf32, #s>, f32
  }
}
