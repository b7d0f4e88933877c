// sm_100a parts of tessel-warp-specialize.
// RUN: tessel-opt %s -split-input-file -pass-pipeline='builtin.module(tile.kernel(tessel-tmem-allocation{arch=sm_100a},tessel-layout-inference{arch=sm_100a},tessel-warp-specialize{arch=sm_100a}))' | FileCheck %s

// A loop whose stages only tcgen05 gemms read: the consumers' first thread
// issues the MMAs (issue_only) and one tcgen05.commit per iteration frees
// the stage, so `empty` takes one arrival, not one per consumer warp; the
// consumers wait for the MMAs once, after the loop, before reading the
// accumulator. The producer is as on sm_90a.
// CHECK-LABEL: tile.kernel @tcgen05_gemm
// CHECK-SAME: threads(256)
// CHECK: %[[EMPTY:.*]] = tile.alloc {name = "empty"} : memref<2xi64
// CHECK-COUNT-2: tile.mbarrier_init %[[EMPTY]][%{{.*}}] arrivals(1)
// CHECK: tile.role threads(128, 128) {
// CHECK: tile.mbarrier_wait %[[EMPTY]]
// CHECK: tile.copy_async
// CHECK: tile.role threads(0, 128) {
// CHECK: scf.for
// CHECK: tile.gemm {{.*}}issue_only
// CHECK-NEXT: tile.mma_commit %[[EMPTY]][%{{.*}}]
// CHECK-NEXT: }
// CHECK-NEXT: tile.mma_wait
// CHECK: tile.copy %{{.*}}, %{{.*}} {tmem_group_columns = 64 : i64}
tile.kernel @tcgen05_gemm(%a: memref<?x?xf16>, %b: memref<?x?xf16>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %as = tile.alloc : memref<128x64xf16, #tile.space<shared>>
  %bs = tile.alloc : memref<64x64xf16, #tile.space<shared>>
  %acc = tile.alloc : memref<128x64xf32, #tile.space<tmem>>
  %out = tile.alloc : memref<128x64xf32, #tile.space<fragment>>
  %zero = arith.constant 0.0 : f32
  tile.fill %acc, %zero : memref<128x64xf32, #tile.space<tmem>>, f32
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %k0 = arith.muli %k, %c64 : index
    %ar = tile.region %a[%c0, %k0] [128, 64] : memref<?x?xf16> -> memref<128x64xf16, strided<[?, 1], offset: ?>>
    %br = tile.region %b[%k0, %c0] [64, 64] : memref<?x?xf16> -> memref<64x64xf16, strided<[?, 1], offset: ?>>
    tile.copy %ar, %as : memref<128x64xf16, strided<[?, 1], offset: ?>>, memref<128x64xf16, #tile.space<shared>>
    tile.copy %br, %bs : memref<64x64xf16, strided<[?, 1], offset: ?>>, memref<64x64xf16, #tile.space<shared>>
    tile.gemm %as, %bs, %acc : memref<128x64xf16, #tile.space<shared>>, memref<64x64xf16, #tile.space<shared>>, memref<128x64xf32, #tile.space<tmem>>
  }
  tile.copy %acc, %out : memref<128x64xf32, #tile.space<tmem>>, memref<128x64xf32, #tile.space<fragment>>
}

// -----

// The accumulator is read inside the loop: its MMAs must complete there,
// so the consumers release the stage per warp, after the gemm completed.
// CHECK-LABEL: tile.kernel @read_in_loop
// CHECK: %[[EMPTY:.*]] = tile.alloc {name = "empty"} : memref<2xi64
// CHECK-COUNT-2: tile.mbarrier_init %[[EMPTY]][%{{.*}}] arrivals(4)
// CHECK: tile.role threads(0, 128) {
// CHECK-NOT: issue_only
// CHECK: tile.mbarrier_arrive %[[EMPTY]]
// CHECK-NOT: tile.mma_wait
tile.kernel @read_in_loop(%a: memref<?x?xf16>, %b: memref<?x?xf16>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %as = tile.alloc : memref<128x64xf16, #tile.space<shared>>
  %bs = tile.alloc : memref<64x64xf16, #tile.space<shared>>
  %acc = tile.alloc : memref<128x64xf32, #tile.space<tmem>>
  %out = tile.alloc : memref<128x64xf32, #tile.space<fragment>>
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %k0 = arith.muli %k, %c64 : index
    %ar = tile.region %a[%c0, %k0] [128, 64] : memref<?x?xf16> -> memref<128x64xf16, strided<[?, 1], offset: ?>>
    %br = tile.region %b[%k0, %c0] [64, 64] : memref<?x?xf16> -> memref<64x64xf16, strided<[?, 1], offset: ?>>
    tile.copy %ar, %as : memref<128x64xf16, strided<[?, 1], offset: ?>>, memref<128x64xf16, #tile.space<shared>>
    tile.copy %br, %bs : memref<64x64xf16, strided<[?, 1], offset: ?>>, memref<64x64xf16, #tile.space<shared>>
    tile.gemm %as, %bs, %acc {clear_accum} : memref<128x64xf16, #tile.space<shared>>, memref<64x64xf16, #tile.space<shared>>, memref<128x64xf32, #tile.space<tmem>>
    tile.copy %acc, %out : memref<128x64xf32, #tile.space<tmem>>, memref<128x64xf32, #tile.space<fragment>>
  }
}

// -----

// A persistent walk whose tile loads A once (the producer's, as on sm_90a)
// and whose MMAs only issue in the loop: A is free for the next tile only
// once those MMAs are done, so the consumers release it after their
// tile.mma_wait, not right after the loop.
// CHECK-LABEL: tile.kernel @tcgen05_prologue_walk
// CHECK: %[[PEMPTY:.*]] = tile.alloc {name = "prologue_empty"}
// CHECK: tile.role threads(128, 128) {
// CHECK: tile.mbarrier_wait %[[PEMPTY]]
// CHECK: tile.copy_async
// CHECK: tile.role threads(0, 128) {
// CHECK: tile.gemm {{.*}}issue_only
// CHECK-NEXT: tile.mma_commit
// CHECK-NEXT: }
// CHECK-NEXT: tile.mma_wait
// CHECK-NEXT: tile.mbarrier_arrive %[[PEMPTY]]
tile.kernel @tcgen05_prologue_walk(%a: memref<?x?xf16>, %b: memref<?x?xf16>, %tiles: index, %n: index) grid(%bx) = affine_map<()[s0, s1] -> (s0)> threads(128) attributes {persistent} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %blocks = tile.num_blocks
  scf.for %t = %bx to %tiles step %blocks {
    %row = arith.muli %t, %c128 : index
    %as = tile.alloc : memref<128x64xf16, #tile.space<shared>>
    %bs = tile.alloc : memref<64x64xf16, #tile.space<shared>>
    %acc = tile.alloc : memref<128x64xf32, #tile.space<tmem>>
    %out = tile.alloc : memref<128x64xf32, #tile.space<fragment>>
    %ar = tile.region %a[%row, %c0] [128, 64] : memref<?x?xf16> -> memref<128x64xf16, strided<[?, 1], offset: ?>>
    tile.copy %ar, %as : memref<128x64xf16, strided<[?, 1], offset: ?>>, memref<128x64xf16, #tile.space<shared>>
    %zero = arith.constant 0.0 : f32
    tile.fill %acc, %zero : memref<128x64xf32, #tile.space<tmem>>, f32
    tile.pipelined %k = %c0 to %n step %c1 stages(2) {
      %k0 = arith.muli %k, %c64 : index
      %br = tile.region %b[%k0, %c0] [64, 64] : memref<?x?xf16> -> memref<64x64xf16, strided<[?, 1], offset: ?>>
      tile.copy %br, %bs : memref<64x64xf16, strided<[?, 1], offset: ?>>, memref<64x64xf16, #tile.space<shared>>
      tile.gemm %as, %bs, %acc : memref<128x64xf16, #tile.space<shared>>, memref<64x64xf16, #tile.space<shared>>, memref<128x64xf32, #tile.space<tmem>>
    }
    tile.copy %acc, %out : memref<128x64xf32, #tile.space<tmem>>, memref<128x64xf32, #tile.space<fragment>>
  }
}

// -----

// overlap_mma is for wgmma groups (sm_90a) and ignored here, as
// PipelineOptions says: a register accumulator's gemm (copied through
// tensor memory, or on mma.sync) leaves no group running into the next
// iteration, and a ring size on the loop would make
// tessel-release-stages-late fail the compile.
// CHECK-LABEL: tile.kernel @overlap_ignored
// CHECK: tile.role threads(0, 128) {
// CHECK: tile.mbarrier_arrive
// CHECK-NOT: tessel.stage_ring
// CHECK: tile.copy
tile.kernel @overlap_ignored(%a: memref<?x?xf16>, %b: memref<?x?xf16>, %c: memref<64x64xf32>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %as = tile.alloc : memref<64x64xf16, #tile.space<shared>>
  %bs = tile.alloc : memref<64x64xf16, #tile.space<shared>>
  %acc = tile.alloc : memref<64x64xf32, #tile.space<fragment>>
  tile.pipelined %k = %c0 to %n step %c1 stages(3) attributes {overlap_mma} {
    %k0 = arith.muli %k, %c64 : index
    %ar = tile.region %a[%c0, %k0] [64, 64] : memref<?x?xf16> -> memref<64x64xf16, strided<[?, 1], offset: ?>>
    %br = tile.region %b[%k0, %c0] [64, 64] : memref<?x?xf16> -> memref<64x64xf16, strided<[?, 1], offset: ?>>
    tile.copy %ar, %as : memref<64x64xf16, strided<[?, 1], offset: ?>>, memref<64x64xf16, #tile.space<shared>>
    tile.copy %br, %bs : memref<64x64xf16, strided<[?, 1], offset: ?>>, memref<64x64xf16, #tile.space<shared>>
    tile.gemm %as, %bs, %acc : memref<64x64xf16, #tile.space<shared>>, memref<64x64xf16, #tile.space<shared>>, memref<64x64xf32, #tile.space<fragment>>
  }
  tile.copy %acc, %c : memref<64x64xf32, #tile.space<fragment>>, memref<64x64xf32>
}
