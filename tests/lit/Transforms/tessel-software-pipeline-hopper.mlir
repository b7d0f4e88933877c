// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_90a},tessel-software-pipeline{arch=sm_90a}))' | FileCheck %s

// The cases of tessel-software-pipeline whose remarks only a target with
// TMA gives (each load TMA cannot carry says why); the rest, for sm_80 and
// sm_90a alike, are in tessel-software-pipeline.mlir.

// A TMA box starts on a 16-byte boundary of its rows: a row start known to
// be a multiple of 4 floats loads with TMA, one that may be any element
// (a packed sequence's start) falls back to cp.async.
// CHECK-LABEL: tile.kernel @row_start
// CHECK: tile.mbarrier_expect_tx %{{.*}} bytes(256)
// CHECK: %[[ALIGNED:.*]] = arith.muli %{{.*}}, %c4
// CHECK-NEXT: tile.region %arg0[%{{.*}}, %[[ALIGNED]]]
// CHECK: tile.copy_async
// CHECK: tile.cp_async_commit
// CHECK: tile.region %arg0[%[[ANY:.*]], %[[ANY]]]
// CHECK-NEXT: tile.stage
// CHECK-NEXT: tile.copy %{{.*}} {async}
#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

tile.kernel @row_start(%a: memref<?x?xf32, #g>, %out: memref<64xf32, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %s = tile.alloc : memref<64xf32, #s>
  %t = tile.alloc : memref<64xf32, #s>
  %acc = tile.alloc : memref<64xf32, #f>
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %aligned = arith.muli %k, %c4 : index
    %r = tile.region %a[%k, %aligned] [1, 64] : memref<?x?xf32, #g> -> memref<64xf32, strided<[1], offset: ?>, #g>
    tile.copy %r, %s : memref<64xf32, strided<[1], offset: ?>, #g>, memref<64xf32, #s>
    tile.copy %s, %acc : memref<64xf32, #s>, memref<64xf32, #f>
  }
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %r = tile.region %a[%k, %k] [1, 64] : memref<?x?xf32, #g> -> memref<64xf32, strided<[1], offset: ?>, #g>
    // expected-remark @+1 {{tessel-software-pipeline [tma]: this load is a cp.async copy, not TMA: the tile's start within a row is not known to be a multiple of 16 bytes}}
    tile.copy %r, %t : memref<64xf32, strided<[1], offset: ?>, #g>, memref<64xf32, #s>
    tile.copy %t, %acc : memref<64xf32, #s>, memref<64xf32, #f>
  }
  tile.copy %acc, %out : memref<64xf32, #f>, memref<64xf32, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// Copies into constant windows of one shared tile are loaded ahead: stage
// i's window is the same offset into stage i's copy of the tile. A TMA box
// fills whole rows, so windows of columns are cp.async loads, each saying
// why.
// CHECK-LABEL: tile.kernel @windows
// CHECK: tile.alloc {{.*}}stages = 3 : i64
// CHECK: scf.if
// CHECK: %[[STAGE0:.*]] = tile.stage
// CHECK: %[[WINDOW0:.*]] = tile.region %[[STAGE0]][%c0{{.*}}, %c0{{.*}}] [64, 32]
// CHECK-NEXT: tile.copy %{{.*}}, %[[WINDOW0]] {async}
// CHECK: %[[STAGE0B:.*]] = tile.stage
// CHECK: %[[WINDOW1:.*]] = tile.region %[[STAGE0B]][%c0{{.*}}, %c32{{.*}}] [64, 32]
// CHECK-NEXT: tile.copy %{{.*}}, %[[WINDOW1]] {async}
// CHECK: tile.cp_async_commit
// CHECK: scf.for
// CHECK: tile.cp_async_wait
// CHECK-NOT: tile.pipelined
tile.kernel @windows(%a: memref<?x32xf16, #g>, %b: memref<?x32xf16, #g>, %out: memref<64x64xf32, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %s = tile.alloc : memref<64x64xf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #f>
  tile.pipelined %k = %c0 to %n step %c1 stages(3) {
    %row = arith.muli %k, %c64 : index
    %ra = tile.region %a[%row, %c0] [64, 32] : memref<?x32xf16, #g> -> memref<64x32xf16, strided<[32, 1], offset: ?>, #g>
    %wa = tile.region %s[%c0, %c0] [64, 32] : memref<64x64xf16, #s> -> memref<64x32xf16, strided<[64, 1]>, #s>
    // expected-remark @+1 {{tessel-software-pipeline [tma]: this load is a cp.async copy, not TMA: the shared side is a window of some of its buffer's columns (a TMA window takes whole rows)}}
    tile.copy %ra, %wa : memref<64x32xf16, strided<[32, 1], offset: ?>, #g>, memref<64x32xf16, strided<[64, 1]>, #s>
    %rb = tile.region %b[%row, %c0] [64, 32] : memref<?x32xf16, #g> -> memref<64x32xf16, strided<[32, 1], offset: ?>, #g>
    %wb = tile.region %s[%c0, %c32] [64, 32] : memref<64x64xf16, #s> -> memref<64x32xf16, strided<[64, 1], offset: 32>, #s>
    // expected-remark @+1 {{tessel-software-pipeline [tma]: this load is a cp.async copy, not TMA: the shared side is a window of some of its buffer's columns (a TMA window takes whole rows)}}
    tile.copy %rb, %wb : memref<64x32xf16, strided<[32, 1], offset: ?>, #g>, memref<64x32xf16, strided<[64, 1], offset: 32>, #s>
    tile.copy %s, %acc : memref<64x64xf16, #s>, memref<64x64xf32, #f>
  }
  tile.copy %acc, %out : memref<64x64xf32, #f>, memref<64x64xf32, #g>
}


// -----

// Windows of whole rows are TMA boxes, from pages whose numbers the loop
// reads (a paged cache): each page lands in its window of the stage being
// filled, and the stage's bytes are both windows'. A window whose first row
// is not on the 1024-byte period of the layout (row 4 of 128-byte rows)
// stays a cp.async copy and says so; its neighbour at row 0 then does too
// (a buffer is filled one way), naming the reason.
// CHECK-LABEL: tile.kernel @row_windows
// CHECK: tile.mbarrier_expect_tx %{{.*}} bytes(4096)
// CHECK: memref.load %arg1
// CHECK: %[[STAGE0:.*]] = tile.stage
// CHECK: %[[W0:.*]] = tile.region %[[STAGE0]][%c0{{.*}}, %c0{{.*}}] [16, 64]
// CHECK-NEXT: tile.copy_async %{{.*}}, %[[W0]]
// CHECK: memref.load %arg1
// CHECK: %[[STAGE1:.*]] = tile.stage
// CHECK: %[[W1:.*]] = tile.region %[[STAGE1]][%c16{{.*}}, %c0{{.*}}] [16, 64]
// CHECK-NEXT: tile.copy_async %{{.*}}, %[[W1]]
// CHECK-NOT: bytes(512)
// CHECK: tile.region %{{.*}}[%c0{{.*}}, %c0{{.*}}] [4, 64]
// CHECK-NEXT: tile.copy %{{.*}} {async}
// CHECK: tile.region %{{.*}}[%c4{{.*}}, %c0{{.*}}] [4, 64]
// CHECK-NEXT: tile.copy %{{.*}} {async}
#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

tile.kernel @row_windows(%cache: memref<?x16x64xf16, #g>, %table: memref<?xi32, #g>, %out: memref<32x64xf32, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c16 = arith.constant 16 : index
  %s = tile.alloc : memref<32x64xf16, #s>
  %t = tile.alloc : memref<8x64xf16, #s>
  %acc = tile.alloc : memref<32x64xf32, #f>
  %small = tile.alloc : memref<8x64xf32, #f>
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %e0 = arith.muli %k, %c2 : index
    %e1 = arith.addi %e0, %c1 : index
    %p0 = memref.load %table[%e0] : memref<?xi32, #g>
    %i0 = arith.index_cast %p0 : i32 to index
    %r0 = tile.region %cache[%i0, %c0, %c0] [1, 16, 64] : memref<?x16x64xf16, #g> -> memref<16x64xf16, strided<[64, 1], offset: ?>, #g>
    %w0 = tile.region %s[%c0, %c0] [16, 64] : memref<32x64xf16, #s> -> memref<16x64xf16, strided<[64, 1]>, #s>
    tile.copy %r0, %w0 : memref<16x64xf16, strided<[64, 1], offset: ?>, #g>, memref<16x64xf16, strided<[64, 1]>, #s>
    %p1 = memref.load %table[%e1] : memref<?xi32, #g>
    %i1 = arith.index_cast %p1 : i32 to index
    %r1 = tile.region %cache[%i1, %c0, %c0] [1, 16, 64] : memref<?x16x64xf16, #g> -> memref<16x64xf16, strided<[64, 1], offset: ?>, #g>
    %w1 = tile.region %s[%c16, %c0] [16, 64] : memref<32x64xf16, #s> -> memref<16x64xf16, strided<[64, 1], offset: 1024>, #s>
    tile.copy %r1, %w1 : memref<16x64xf16, strided<[64, 1], offset: ?>, #g>, memref<16x64xf16, strided<[64, 1], offset: 1024>, #s>
    tile.copy %s, %acc : memref<32x64xf16, #s>, memref<32x64xf32, #f>
  }
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %p0 = memref.load %table[%k] : memref<?xi32, #g>
    %i0 = arith.index_cast %p0 : i32 to index
    %r0 = tile.region %cache[%i0, %c0, %c0] [1, 4, 64] : memref<?x16x64xf16, #g> -> memref<4x64xf16, strided<[64, 1], offset: ?>, #g>
    %w0 = tile.region %t[%c0, %c0] [4, 64] : memref<8x64xf16, #s> -> memref<4x64xf16, strided<[64, 1]>, #s>
    // expected-remark @+1 {{tessel-software-pipeline [tma]: this load is a cp.async copy, not TMA: another window of its buffer is a cp.async copy (the shared window starts at row 4}}
    tile.copy %r0, %w0 : memref<4x64xf16, strided<[64, 1], offset: ?>, #g>, memref<4x64xf16, strided<[64, 1]>, #s>
    %r1 = tile.region %cache[%i0, %c4, %c0] [1, 4, 64] : memref<?x16x64xf16, #g> -> memref<4x64xf16, strided<[64, 1], offset: ?>, #g>
    %w1 = tile.region %t[%c4, %c0] [4, 64] : memref<8x64xf16, #s> -> memref<4x64xf16, strided<[64, 1], offset: 256>, #s>
    // expected-remark @+1 {{tessel-software-pipeline [tma]: this load is a cp.async copy, not TMA: the shared window starts at row 4, whose address within each panel is not a multiple of 1024 bytes (the swizzle's period)}}
    tile.copy %r1, %w1 : memref<4x64xf16, strided<[64, 1], offset: ?>, #g>, memref<4x64xf16, strided<[64, 1], offset: 256>, #s>
    tile.copy %t, %small : memref<8x64xf16, #s>, memref<8x64xf32, #f>
  }
  tile.copy %acc, %out : memref<32x64xf32, #f>, memref<32x64xf32, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// Another rank's tile bounded at run time (tile.bound of a tile.peer) has
// no tensor map (a map holds fixed extents), so its load is a cp.async
// copy; the local load beside it stays a TMA copy. Each iteration waits for its
// cp.async group and the barrier, refills, then waits for the TMA bytes.
// CHECK-LABEL: tile.kernel @peer_beside_local
// CHECK: tile.mbarrier_expect_tx %{{.*}} bytes(8192)
// CHECK: tile.copy_async
// CHECK: tile.copy %{{.*}} {async}
// CHECK: tile.cp_async_commit
// CHECK: scf.for
// CHECK: tile.cp_async_wait pending(0)
// CHECK-NEXT: tile.barrier
// CHECK: tile.copy_async
// CHECK: tile.copy %{{.*}} {async}
// CHECK: tile.cp_async_commit
// CHECK: tile.mbarrier_wait
// CHECK: tile.copy %{{.*}}, %{{.*}} : memref<64x64xf16, #tile.space<shared>>
tile.kernel @peer_beside_local(%a: memref<?x64xf16, #g>, %b: memref<?x64xf16, #g>, %out: memref<64x64xf32, #g>, %rank: index, %n: index) grid(%bx) = affine_map<()[s0, s1] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %as = tile.alloc : memref<64x64xf16, #s>
  %bs = tile.alloc : memref<64x64xf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #f>
  %peer = tile.peer %b [%rank] : memref<?x64xf16, #g>
  %bounded = tile.bound %peer [%n, %c64] : memref<?x64xf16, #g>
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %row = arith.muli %k, %c64 : index
    %ra = tile.region %a[%row, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
    tile.copy %ra, %as : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    %rb = tile.region %bounded[%row, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
    // expected-remark @+1 {{tessel-software-pipeline [tma]: this load is a cp.async copy, not TMA: the tensor is bounded by run-time limits (tile.bound)}}
    tile.copy %rb, %bs : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    tile.copy %as, %acc : memref<64x64xf16, #s>, memref<64x64xf32, #f>
    tile.copy %bs, %acc : memref<64x64xf16, #s>, memref<64x64xf32, #f>
  }
  tile.copy %acc, %out : memref<64x64xf32, #f>, memref<64x64xf32, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// A gemm on wgmma reads its operands through the async proxy, and cp.async
// writes them through the generic one: each iteration fences the proxies
// after its cp.async wait, before the barrier that hands the stage over.
// CHECK-LABEL: tile.kernel @cp_async_into_wgmma
// CHECK: scf.for
// CHECK: tile.cp_async_wait pending(0)
// CHECK-NEXT: tile.fence_proxy_async
// CHECK-NEXT: tile.barrier
// CHECK: tile.gemm
tile.kernel @cp_async_into_wgmma(%a: memref<?x64xf16, #g>, %b: memref<?x64xf16, #g>, %out: memref<64x64xf32, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %as = tile.alloc : memref<64x64xf16, #s>
  %bs = tile.alloc : memref<64x64xf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #f>
  %boundA = tile.bound %a [%n, %c64] : memref<?x64xf16, #g>
  %boundB = tile.bound %b [%n, %c64] : memref<?x64xf16, #g>
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %row = arith.muli %k, %c64 : index
    %ra = tile.region %boundA[%c0, %row] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
    // expected-remark @+1 {{tessel-software-pipeline [tma]: this load is a cp.async copy, not TMA: the tensor is bounded by run-time limits (tile.bound)}}
    tile.copy %ra, %as : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    %rb = tile.region %boundB[%row, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
    // expected-remark @+1 {{tessel-software-pipeline [tma]: this load is a cp.async copy, not TMA: the tensor is bounded by run-time limits (tile.bound)}}
    tile.copy %rb, %bs : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    tile.gemm %as, %bs, %acc {instruction = #tile.instr<wgmma>} : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
  }
  tile.copy %acc, %out : memref<64x64xf32, #f>, memref<64x64xf32, #g>
}
