// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_90a},tessel-warp-specialize{arch=sm_90a}))' | FileCheck %s
// RUN: tessel-opt %s -split-input-file -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_80},tessel-warp-specialize{arch=sm_80}))' 2>&1 | FileCheck %s --check-prefix=SM80

// A TMA-fed loop: the kernel grows a producer warpgroup after its 128
// threads, which waits for each stage to be released (`empty`, inverted
// parity so that the first round passes), arms `full` with the stage's
// bytes and issues the TMA copies. The consumers (the kernel's own threads)
// wait on `full`, compute on the stage and arrive on `empty` per warp; the
// store after the loop is theirs too. One consumer warpgroup starts with
// registers enough, so neither role moves any.
// CHECK-LABEL: tile.kernel @gemm
// CHECK-SAME: threads(256)
// CHECK: %[[EMPTY:.*]] = tile.alloc {name = "empty"} : memref<3xi64
// CHECK-COUNT-3: tile.mbarrier_init %[[EMPTY]][%{{.*}}] arrivals(4)
// CHECK: %[[FULL:.*]] = tile.alloc {name = "full"} : memref<3xi64
// CHECK-COUNT-3: tile.mbarrier_init %[[FULL]][%{{.*}}] arrivals(1)
// CHECK: %[[AS:.*]] = tile.alloc {layout = {{.*}}, stages = 3 : i64, tessel.pipeline_staged}
// CHECK: tile.role threads(128, 128) {
// CHECK-NEXT: scf.for
// CHECK: %[[K:.*]] = arith.divui
// CHECK: %[[S:.*]] = arith.remui %[[K]]
// CHECK: %[[ROUND:.*]] = arith.divui %[[K]]
// CHECK: %[[PARITY:.*]] = arith.remui %[[ROUND]]
// CHECK: %[[FREED:.*]] = arith.xori %[[PARITY]]
// CHECK: tile.mbarrier_wait %[[EMPTY]][%[[S]]] parity %[[FREED]]
// CHECK-NEXT: tile.mbarrier_expect_tx %[[FULL]][%[[S]]] bytes(16384)
// CHECK: tile.copy_async %{{.*}}, %{{.*}} arrive %[[FULL]][%[[S]]]
// CHECK: tile.copy_async %{{.*}}, %{{.*}} arrive %[[FULL]][%[[S]]]
// CHECK: tile.role threads(0, 128) {
// CHECK-NEXT: scf.for
// CHECK: tile.mbarrier_wait %[[FULL]][%[[CS:.*]]] parity
// CHECK: tile.stage %[[AS]][%[[CS]]]
// CHECK-NOT: tile.copy_async
// CHECK: tile.gemm
// CHECK-NEXT: tile.mbarrier_arrive %[[EMPTY]][%[[CS]]]
// CHECK: tile.copy %{{.*}}, %{{.*}} : memref<64x64xf32, #tile.space<fragment>>
// SM80-LABEL: tile.kernel @gemm
// SM80-SAME: threads(128)
// SM80-NOT: tile.role
// SM80: tile.pipelined
#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

tile.kernel @gemm(%a: memref<?x?xf16, #g>, %b: memref<?x?xf16, #g>, %c: memref<?x?xf32, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %as = tile.alloc : memref<64x64xf16, #s>
  %bs = tile.alloc : memref<64x64xf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #f>
  tile.pipelined %k = %c0 to %n step %c1 stages(3) {
    %k0 = arith.muli %k, %c64 : index
    %ar = tile.region %a[%c0, %k0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
    %br = tile.region %b[%k0, %c0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
    tile.copy %ar, %as : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    tile.copy %br, %bs : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    tile.gemm %as, %bs, %acc : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
  }
  %cr = tile.region %c[%c0, %c0] [64, 64] : memref<?x?xf32, #g> -> memref<64x64xf32, strided<[?, 1], offset: ?>, #g>
  tile.copy %acc, %cr : memref<64x64xf32, #f>, memref<64x64xf32, strided<[?, 1], offset: ?>, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// overlap_mma: the consumer loop carries its ring size, for
// tessel-release-stages-late to move each release an iteration later.
// CHECK-LABEL: tile.kernel @overlapped
// CHECK: tile.role threads(0, 128) {
// CHECK: tile.gemm
// CHECK-NEXT: tile.mbarrier_arrive
// CHECK-NEXT: } {tessel.stage_ring = 3 : i64}
// SM80-LABEL: tile.kernel @overlapped
// SM80-NOT: tessel.stage_ring
// SM80: tile.pipelined
tile.kernel @overlapped(%a: memref<?x?xf16, #g>, %b: memref<?x?xf16, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %as = tile.alloc : memref<64x64xf16, #s>
  %bs = tile.alloc : memref<64x64xf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #f>
  tile.pipelined %k = %c0 to %n step %c1 stages(3) attributes {overlap_mma} {
    %k0 = arith.muli %k, %c64 : index
    %ar = tile.region %a[%c0, %k0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
    %br = tile.region %b[%k0, %c0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
    tile.copy %ar, %as : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    tile.copy %br, %bs : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    tile.gemm %as, %bs, %acc : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// A multicast load in a kernel launched in clusters of 2: its copy_async is
// multicast and, since the peer's producer writes this block's stages too,
// each consumer warp arrives on `empty` in both blocks: 4 warps x 2 blocks.
// CHECK-LABEL: tile.kernel @multicast
// CHECK: %[[EMPTY:.*]] = tile.alloc {name = "empty"}
// CHECK-COUNT-2: tile.mbarrier_init %[[EMPTY]][%{{.*}}] arrivals(8)
// CHECK: tile.role threads(128, 128) {
// CHECK: tile.copy_async %{{.*}}, %{{.*}} arrive %{{.*}}[%{{.*}}] :
// CHECK: tile.copy_async %{{.*}}, %{{.*}} arrive %{{.*}}[%{{.*}}] {multicast}
// CHECK: tile.role threads(0, 128) {
// CHECK: tile.gemm
// CHECK-NEXT: tile.mbarrier_arrive %[[EMPTY]][%{{.*}}] {cluster}
tile.kernel @multicast(%a: memref<?x?xf16, #g>, %b: memref<?x?xf16, #g>, %n: index) grid(%bx, %by) = affine_map<()[s0] -> (2, 1)> threads(128) attributes {cluster = array<i64: 2, 1>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %as = tile.alloc : memref<64x64xf16, #s>
  %bs = tile.alloc : memref<64x64xf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #f>
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %k0 = arith.muli %k, %c64 : index
    %row = arith.muli %bx, %c64 : index
    %ar = tile.region %a[%row, %k0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
    %br = tile.region %b[%k0, %c0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
    tile.copy %ar, %as : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    tile.copy %br, %bs {multicast} : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    tile.gemm %as, %bs, %acc : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// A persistent kernel: the pipelined loop sits in the walk over the work
// tiles (stepping by tile.num_blocks). The buffers move out of the walk,
// each role walks the tiles itself (the producer recomputing the tile's
// address), and both carry the pipeline's iteration count from tile to tile
// so that stages and phases run on: iteration = count + k, and each tile
// adds its trip count.
// CHECK-LABEL: tile.kernel @persistent
// CHECK: %[[BLOCKS:.*]] = tile.num_blocks
// CHECK: %[[AS:.*]] = tile.alloc {layout = {{.*}}, stages = 3 : i64, tessel.pipeline_staged} : memref<64x64xf16
// CHECK: tile.role threads(128, 128) {
// CHECK: scf.for %[[T:.*]] = %{{.*}} to %{{.*}} step %[[BLOCKS]] iter_args(%[[BASE:.*]] = %{{.*}}) -> (index) {
// CHECK: %[[ROW:.*]] = arith.muli %[[T]], %c64
// CHECK: scf.for %[[K:.*]] = %{{.*}} to %[[N:[^ ]*]] step
// CHECK: %[[LOCAL:.*]] = arith.divui
// CHECK: %[[ITER:.*]] = arith.addi %[[BASE]], %[[LOCAL]]
// CHECK: arith.remui %[[ITER]]
// CHECK: tile.copy_async
// CHECK: %[[TRIP:.*]] = arith.ceildivui
// CHECK: %[[NEXT:.*]] = arith.addi %[[BASE]], %[[TRIP]]
// CHECK: scf.yield %[[NEXT]]
// CHECK: tile.role threads(0, 128) {
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[BLOCKS]] iter_args(%[[CBASE:.*]] = %{{.*}}) -> (index) {
// CHECK: scf.for
// CHECK: %[[CITER:.*]] = arith.addi %[[CBASE]],
// CHECK: tile.mbarrier_wait %{{.*}}[%{{.*}}] parity
// CHECK: tile.gemm
// CHECK: tile.copy %{{.*}}, %{{.*}} : memref<64x64xf32, #tile.space<fragment>>
// CHECK: scf.yield
tile.kernel @persistent(%a: memref<?x?xf16, #g>, %b: memref<?x?xf16, #g>, %c: memref<?x?xf32, #g>, %tiles: index, %n: index) grid(%bx) = affine_map<()[s0, s1] -> (s0)> threads(128) attributes {persistent} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %blocks = tile.num_blocks
  scf.for %t = %bx to %tiles step %blocks {
    %c64 = arith.constant 64 : index
    %row = arith.muli %t, %c64 : index
    %as = tile.alloc : memref<64x64xf16, #s>
    %bs = tile.alloc : memref<64x64xf16, #s>
    %acc = tile.alloc : memref<64x64xf32, #f>
    tile.pipelined %k = %c0 to %n step %c1 stages(3) {
      %k0 = arith.muli %k, %c64 : index
      %ar = tile.region %a[%row, %k0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
      %br = tile.region %b[%k0, %c0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
      tile.copy %ar, %as : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
      tile.copy %br, %bs : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
      tile.gemm %as, %bs, %acc : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
    }
    %cr = tile.region %c[%row, %c0] [64, 64] : memref<?x?xf32, #g> -> memref<64x64xf32, strided<[?, 1], offset: ?>, #g>
    tile.copy %acc, %cr : memref<64x64xf32, #f>, memref<64x64xf32, strided<[?, 1], offset: ?>, #g>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// A tile's coordinates read from a table the kernel never writes (a packed
// batch's offsets): the producer's walk loads them again. Had the kernel
// stored into the table, the reload could see another value: an error.
// CHECK-LABEL: tile.kernel @persistent_table
// CHECK: tile.role threads(128, 128) {
// CHECK: scf.for %[[T:.*]] = {{.*}} iter_args
// CHECK: memref.load %arg1[%[[T]]]
// CHECK: tile.copy_async
tile.kernel @persistent_table(%a: memref<?x64xf16, #g>, %rows: memref<?xindex, #g>, %c: memref<?x64xf32, #g>, %tiles: index, %n: index) grid(%bx) = affine_map<()[s0, s1] -> (s0)> threads(128) attributes {persistent} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %blocks = tile.num_blocks
  scf.for %t = %bx to %tiles step %blocks {
    %row = memref.load %rows[%t] : memref<?xindex, #g>
    %as = tile.alloc : memref<64x64xf16, #s>
    %acc = tile.alloc : memref<64x64xf32, #f>
    tile.pipelined %k = %c0 to %n step %c1 stages(2) {
      %ar = tile.region %a[%row, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
      tile.copy %ar, %as : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
      tile.gemm %as, %as, %acc : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
    }
    %cr = tile.region %c[%row, %c0] [64, 64] : memref<?x64xf32, #g> -> memref<64x64xf32, strided<[64, 1], offset: ?>, #g>
    tile.copy %acc, %cr : memref<64x64xf32, #f>, memref<64x64xf32, strided<[64, 1], offset: ?>, #g>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

tile.kernel @persistent_written_table(%a: memref<?x64xf16, #g>, %rows: memref<?xindex, #g>, %tiles: index, %n: index) grid(%bx) = affine_map<()[s0, s1] -> (s0)> threads(128) attributes {persistent} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %blocks = tile.num_blocks
  scf.for %t = %bx to %tiles step %blocks {
    %row = memref.load %rows[%t] : memref<?xindex, #g>
    %as = tile.alloc : memref<64x64xf16, #s>
    // expected-warning@+1 {{which the producer's own walk over the tiles would run again, and it has side effects or reads memory the kernel writes}}
    tile.pipelined %k = %c0 to %n step %c1 stages(2) attributes {warp_specialize = true} {
      %ar = tile.region %a[%row, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
      tile.copy %ar, %as : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    }
    memref.store %c0, %rows[%t] : memref<?xindex, #g>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// warp_specialize = false keeps the loop for tessel-software-pipeline.
// CHECK-LABEL: tile.kernel @declined
// CHECK-SAME: threads(128)
// CHECK-NOT: tile.role
// CHECK: tile.pipelined
tile.kernel @declined(%a: memref<?x64xf16, #g>, %b: memref<64x64xf16, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc : memref<64x64xf16, #s>
  tile.pipelined %k = %c0 to %n step %c1 stages(2) attributes {warp_specialize = false} {
    %r = tile.region %a[%k, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
    tile.copy %r, %s : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// Asked for, but the load converts f32 to f16 on the way, which TMA cannot:
// a warning, and the loop is left to tessel-software-pipeline.
// CHECK-LABEL: tile.kernel @impossible
// CHECK-SAME: threads(128)
// CHECK-NOT: tile.role
// CHECK: tile.pipelined
tile.kernel @impossible(%a: memref<?x64xf32, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc : memref<64x64xf16, #s>
  // expected-warning @+1 {{tessel-warp-specialize [warp-specialization]: cannot warp-specialize this pipelined loop, which asks for it (it runs without a TMA producer warpgroup): its loads are not all TMA: the copy converts its element type}}
  tile.pipelined %k = %c0 to %n step %c1 stages(2) attributes {warp_specialize = true} {
    %r = tile.region %a[%k, %c0] [64, 64] : memref<?x64xf32, #g> -> memref<64x64xf32, strided<[64, 1], offset: ?>, #g>
    tile.copy %r, %s : memref<64x64xf32, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// Ping-pong turns take two consumer warpgroups; the consumer loop carries
// the mark for tessel-schedule-pingpong. Two consumer warpgroups get 240
// registers each, the most the producer's floor of 24 leaves.
// CHECK-LABEL: tile.kernel @pingpong
// CHECK-SAME: threads(384)
// CHECK: tile.role threads(256, 128) max_registers(24)
// CHECK: tile.role threads(0, 256) max_registers(240)
// CHECK: scf.for
// CHECK: } {tessel.pingpong}
tile.kernel @pingpong(%a: memref<?x64xf16, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(256) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc : memref<64x64xf16, #s>
  tile.pipelined %k = %c0 to %n step %c1 stages(2) attributes {pingpong} {
    %r = tile.region %a[%k, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
    tile.copy %r, %s : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

tile.kernel @pingpong_one_warpgroup(%a: memref<?x64xf16, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc : memref<64x64xf16, #s>
  // expected-error @+1 {{cannot schedule this loop's warpgroups in ping-pong turns: it takes exactly two consumer warpgroups (256 threads), not 128 threads}}
  tile.pipelined %k = %c0 to %n step %c1 stages(2) attributes {pingpong} {
    %r = tile.region %a[%k, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
    tile.copy %r, %s : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

tile.kernel @pingpong_one_stage(%a: memref<?x64xf16, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(256) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc : memref<64x64xf16, #s>
  // expected-error @+1 {{cannot schedule this loop's warpgroups in ping-pong turns: it needs at least 2 stages}}
  tile.pipelined %k = %c0 to %n step %c1 stages(1) attributes {pingpong} {
    %r = tile.region %a[%k, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
    tile.copy %r, %s : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

tile.kernel @pingpong_unsplit(%a: memref<?x64xf16, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(256) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc : memref<64x64xf16, #s>
  // expected-error @+1 {{ping-pong turns need a warp-specialized loop, and this one has warp_specialize off}}
  tile.pipelined %k = %c0 to %n step %c1 stages(2) attributes {pingpong, warp_specialize = false} {
    %r = tile.region %a[%k, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
    tile.copy %r, %s : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
  }
}

// -----

// The first row comes from a serial scan into per-thread memory before the
// loop. The producer's TMA addresses need it, so the scan, the read and the
// cast stay before the roles, where every thread runs them; the consumers
// keep the rest.
// CHECK-LABEL: tile.kernel @local_scan_address
// CHECK-SAME: threads(256)
// CHECK: %[[BASE:.*]] = tile.alloc {name = "base"}
// CHECK: scf.for
// CHECK: memref.store {{.*}}, %[[BASE]]
// CHECK: %[[SUM:.*]] = memref.load %[[BASE]]
// CHECK: %[[ROW0:.*]] = arith.index_cast %[[SUM]]
// CHECK: tile.role threads(128, 128)
// CHECK: arith.addi %[[ROW0]]
// CHECK: tile.copy_async
// CHECK: tile.role threads(0, 128)
// CHECK: tile.fill
#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>
#l = #tile.space<local>
tile.kernel @local_scan_address(%x: memref<?x64xbf16, #g>, %off: memref<4xi32, #g>, %y: memref<64x64xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %base = tile.alloc {name = "base"} : memref<1xi32, #l>
  %zero = arith.constant 0 : i32
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c64 = arith.constant 64 : index
  memref.store %zero, %base[%c0] : memref<1xi32, #l>
  scf.for %i = %c0 to %c4 step %c1 {
    %o = memref.load %off[%i] : memref<4xi32, #g>
    %b = memref.load %base[%c0] : memref<1xi32, #l>
    %sum = arith.addi %b, %o : i32
    memref.store %sum, %base[%c0] : memref<1xi32, #l>
  }
  %total = memref.load %base[%c0] : memref<1xi32, #l>
  %row0 = arith.index_cast %total : i32 to index
  %s = tile.alloc : memref<64x64xbf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #f>
  %fzero = arith.constant 0.0 : f32
  tile.fill %acc, %fzero : memref<64x64xf32, #f>, f32
  tile.pipelined %k = %c0 to %c4 step %c1 stages(2) {
    %k64 = arith.muli %k, %c64 : index
    %row = arith.addi %row0, %k64 : index
    %r = tile.region %x[%row, %c0] [64, 64] : memref<?x64xbf16, #g> -> memref<64x64xbf16, strided<[64, 1], offset: ?>, #g>
    tile.copy %r, %s : memref<64x64xbf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xbf16, #s>
    tile.parallel (%i, %j) in [64, 64] {
      %v = memref.load %s[%i, %j] : memref<64x64xbf16, #s>
      %w = arith.extf %v : bf16 to f32
      %a = memref.load %acc[%i, %j] : memref<64x64xf32, #f>
      %t = arith.addf %a, %w : f32
      memref.store %t, %acc[%i, %j] : memref<64x64xf32, #f>
    }
  }
  %yr = tile.region %y[%c0, %c0] [64, 64] : memref<64x64xf32, #g> -> memref<64x64xf32, strided<[64, 1], offset: ?>, #g>
  tile.copy %acc, %yr : memref<64x64xf32, #f>, memref<64x64xf32, strided<[64, 1], offset: ?>, #g>
}

// -----

// An address that only the consumers can compute (it passes through a
// fragment): asked for, warp specialization says why it cannot happen.
#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>
tile.kernel @address_from_fragment(%x: memref<?x64xbf16, #g>, %o: memref<64xi32, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %frag = tile.alloc : memref<64xi32, #f>
  %sh = tile.alloc : memref<64xi32, #s>
  %or = tile.region %o[%c0] [64] : memref<64xi32, #g> -> memref<64xi32, strided<[1], offset: ?>, #g>
  tile.copy %or, %frag : memref<64xi32, strided<[1], offset: ?>, #g>, memref<64xi32, #f>
  tile.copy %frag, %sh : memref<64xi32, #f>, memref<64xi32, #s>
  %v = memref.load %sh[%c0] : memref<64xi32, #s>
  %row0 = arith.index_cast %v : i32 to index
  %s = tile.alloc : memref<64x64xbf16, #s>
  // expected-warning @+1 {{cannot warp-specialize this pipelined loop, which asks for it (it runs without a TMA producer warpgroup): the loads' addresses depend on 'tile.copy'}}
  tile.pipelined %k = %c0 to %c4 step %c1 stages(2) attributes {warp_specialize = true} {
    %row = arith.addi %row0, %k : index
    %r = tile.region %x[%row, %c0] [64, 64] : memref<?x64xbf16, #g> -> memref<64x64xbf16, strided<[64, 1], offset: ?>, #g>
    tile.copy %r, %s : memref<64x64xbf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xbf16, #s>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// A flag wait before the loads guards them: the producer waits for block
// k's flag (index recomputed from its own induction variable) before it
// waits for the stage and issues the TMA copy; the consumers, who see the
// data through `full`, no longer wait on the flag.
// CHECK-LABEL: tile.kernel @guarded
// CHECK: tile.role threads(128, 128) {
// CHECK-NEXT: scf.for %[[IV:[^ ]*]] =
// CHECK: %[[PART:.*]] = arith.divui %[[IV]], %c4
// CHECK-NEXT: tile.wait %{{.*}}[%[[PART]]], %{{.*}} timeout_ms(500)
// CHECK-NEXT: tile.mbarrier_wait
// CHECK: tile.copy_async
// CHECK: tile.role threads(0, 128) {
// CHECK-NOT: tile.wait
// CHECK: tile.gemm
tile.kernel @guarded(%x: memref<?x64xf16, #g>, %flags: memref<?xi32, #g>, %epoch: i32, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c64 = arith.constant 64 : index
  %xs = tile.alloc : memref<64x64xf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #tile.space<fragment>>
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %part = arith.divui %k, %c4 : index
    tile.wait %flags[%part], %epoch timeout_ms(500) : memref<?xi32, #g>, i32
    %r0 = arith.muli %k, %c64 : index
    %xr = tile.region %x[%r0, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
    tile.copy %xr, %xs : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    tile.gemm %xs, %xs, %acc : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #tile.space<fragment>>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// A conditional wait (only where a new part begins) guards the loads too:
// the producer runs the scf.if, its condition recomputed from its own
// induction variable.
// CHECK-LABEL: tile.kernel @guarded_if
// CHECK: tile.role threads(128, 128) {
// CHECK-NEXT: scf.for %[[IV:[^ ]*]] =
// CHECK: %[[REM:.*]] = arith.remui %[[IV]], %c4
// CHECK: %[[START:.*]] = arith.cmpi eq, %[[REM]]
// CHECK: scf.if %[[START]] {
// CHECK: tile.wait
// CHECK: tile.mbarrier_wait
// CHECK: tile.copy_async
// CHECK: tile.role threads(0, 128) {
// CHECK-NOT: tile.wait
// CHECK: tile.gemm
tile.kernel @guarded_if(%x: memref<?x64xf16, #g>, %flags: memref<?xi32, #g>, %epoch: i32, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c64 = arith.constant 64 : index
  %xs = tile.alloc : memref<64x64xf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #tile.space<fragment>>
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %rem = arith.remui %k, %c4 : index
    %start = arith.cmpi eq, %rem, %c0 : index
    scf.if %start {
      %part = arith.divui %k, %c4 : index
      tile.wait %flags[%part], %epoch timeout_ms(500) : memref<?xi32, #g>, i32
    }
    %r0 = arith.muli %k, %c64 : index
    %xr = tile.region %x[%r0, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
    tile.copy %xr, %xs : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    tile.gemm %xs, %xs, %acc : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #tile.space<fragment>>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// A copy before the loop into a buffer the kernel only reads after it (the
// attention forward's Q tile) is the producer's too, ahead of the tile's
// stages. In a walk over tiles, the producer waits until the consumers have
// released the previous tile's (`prologue_empty`, inverted parity of the
// tile's ordinal), arms `prologue_full` with the buffer's bytes and issues
// the TMA copy; the consumers wait where the copy was and release the
// buffer right after its last reader, the loop.
// CHECK-LABEL: tile.kernel @prologue_walk
// CHECK: %[[PEMPTY:.*]] = tile.alloc {name = "prologue_empty"} : memref<1xi64
// CHECK: tile.mbarrier_init %[[PEMPTY]][%{{.*}}] arrivals(4)
// CHECK: %[[PFULL:.*]] = tile.alloc {name = "prologue_full"} : memref<1xi64
// CHECK: tile.mbarrier_init %[[PFULL]][%{{.*}}] arrivals(1)
// CHECK: %[[BLOCKS:.*]] = tile.num_blocks
// CHECK: %[[AS:.*]] = tile.alloc {layout = {{.*}}} : memref<64x64xf16
// CHECK: tile.role threads(128, 128) {
// CHECK: scf.for %[[T:.*]] = %[[BX:[^ ]*]] to %{{.*}} step %[[BLOCKS]]
// CHECK: %[[SRC:.*]] = tile.region %arg0
// CHECK: %[[DELTA:.*]] = arith.subi %[[T]], %[[BX]]
// CHECK: %[[ORD:.*]] = arith.divui %[[DELTA]], %[[BLOCKS]]
// CHECK: %[[PAR:.*]] = arith.remui %[[ORD]]
// CHECK: %[[FREED:.*]] = arith.xori %[[PAR]]
// CHECK: tile.mbarrier_wait %[[PEMPTY]][%[[I:.*]]] parity %[[FREED]]
// CHECK-NEXT: tile.mbarrier_expect_tx %[[PFULL]][%[[I]]] bytes(8192)
// CHECK-NEXT: tile.copy_async %[[SRC]], %[[AS]] arrive %[[PFULL]][%[[I]]]
// CHECK-NEXT: scf.for
// CHECK: tile.role threads(0, 128) {
// CHECK: scf.for %[[CT:.*]] = %{{.*}} to %{{.*}} step %[[BLOCKS]]
// CHECK-NOT: tile.copy %{{.*}}, %[[AS]]
// CHECK: %[[CDELTA:.*]] = arith.subi %[[CT]]
// CHECK: %[[CORD:.*]] = arith.divui %[[CDELTA]], %[[BLOCKS]]
// CHECK: %[[CPAR:.*]] = arith.remui %[[CORD]]
// CHECK: tile.mbarrier_wait %[[PFULL]][%{{.*}}] parity %[[CPAR]]
// CHECK-NEXT: scf.for
// CHECK: tile.gemm %[[AS]]
// CHECK-NEXT: tile.mbarrier_arrive
// CHECK-NEXT: }
// CHECK-NEXT: tile.mbarrier_arrive %[[PEMPTY]]
// CHECK: tile.copy %{{.*}}, %{{.*}} : memref<64x64xf32, #tile.space<fragment>>
tile.kernel @prologue_walk(%a: memref<?x?xf16, #g>, %b: memref<?x?xf16, #g>, %c: memref<?x?xf32, #g>, %tiles: index, %n: index) grid(%bx) = affine_map<()[s0, s1] -> (s0)> threads(128) attributes {persistent} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %blocks = tile.num_blocks
  scf.for %t = %bx to %tiles step %blocks {
    %c64 = arith.constant 64 : index
    %row = arith.muli %t, %c64 : index
    %as = tile.alloc : memref<64x64xf16, #s>
    %bs = tile.alloc : memref<64x64xf16, #s>
    %acc = tile.alloc : memref<64x64xf32, #f>
    %ar = tile.region %a[%row, %c0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
    tile.copy %ar, %as : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    tile.pipelined %k = %c0 to %n step %c1 stages(2) {
      %k0 = arith.muli %k, %c64 : index
      %br = tile.region %b[%k0, %c0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
      tile.copy %br, %bs : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
      tile.gemm %as, %bs, %acc : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
    }
    %cr = tile.region %c[%row, %c0] [64, 64] : memref<?x?xf32, #g> -> memref<64x64xf32, strided<[?, 1], offset: ?>, #g>
    tile.copy %acc, %cr : memref<64x64xf32, #f>, memref<64x64xf32, strided<[?, 1], offset: ?>, #g>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// With two consumer warpgroups the register budget holds one block per SM,
// and shared memory has room: the prologue buffer gets two copies that
// alternate between tiles, so that the producer loads the next tile's while
// the consumers still read this one's. Tile n uses copy n mod 2 and the
// mbarriers [copy]; their phase is (n / 2) mod 2.
// CHECK-LABEL: tile.kernel @prologue_walk_two_copies
// CHECK: %[[PEMPTY:.*]] = tile.alloc {name = "prologue_empty"} : memref<2xi64
// CHECK: tile.mbarrier_init %[[PEMPTY]][%{{.*}}] arrivals(8)
// CHECK: %[[PFULL:.*]] = tile.alloc {name = "prologue_full"} : memref<2xi64
// CHECK: %[[AS:.*]] = tile.alloc {layout = {{.*}}, stages = 2 : i64} : memref<128x64xf16
// CHECK: tile.role threads(256, 128) max_registers(24) {
// CHECK: scf.for %[[T:.*]] = %[[BX:[^ ]*]] to %{{.*}} step %[[BLOCKS:[^ ]*]]
// CHECK: %[[ORD:.*]] = arith.divui %{{.*}}, %[[BLOCKS]]
// CHECK: %[[SLOT:.*]] = arith.remui %[[ORD]], %c2
// CHECK: %[[ROUND:.*]] = arith.divui %[[ORD]], %c2
// CHECK: %[[PAR:.*]] = arith.remui %[[ROUND]], %c2
// CHECK: %[[I:.*]] = arith.addi %{{.*}}, %[[SLOT]]
// CHECK: %[[FREED:.*]] = arith.xori %[[PAR]]
// CHECK: tile.mbarrier_wait %[[PEMPTY]][%[[I]]] parity %[[FREED]]
// CHECK-NEXT: tile.mbarrier_expect_tx %[[PFULL]][%[[I]]] bytes(16384)
// CHECK-NEXT: %[[COPY:.*]] = tile.stage %[[AS]][%[[SLOT]]]
// CHECK-NEXT: tile.copy_async %{{.*}}, %[[COPY]] arrive %[[PFULL]][%[[I]]]
// CHECK: tile.role threads(0, 256) max_registers(240) {
// CHECK: scf.for
// CHECK: %[[CSLOT:.*]] = arith.remui
// CHECK: %[[CPAR:.*]] = arith.remui
// CHECK: %[[VIEW:.*]] = tile.stage %[[AS]][%[[CSLOT]]]
// CHECK: %[[CI:.*]] = arith.addi %{{.*}}, %[[CSLOT]]
// CHECK: tile.mbarrier_wait %[[PFULL]][%[[CI]]] parity %[[CPAR]]
// CHECK: tile.gemm %[[VIEW]]
// CHECK: tile.mbarrier_arrive %[[PEMPTY]][%[[CI]]]
tile.kernel @prologue_walk_two_copies(%a: memref<?x?xf16, #g>, %b: memref<?x?xf16, #g>, %c: memref<?x?xf32, #g>, %tiles: index, %n: index) grid(%bx) = affine_map<()[s0, s1] -> (s0)> threads(256) attributes {persistent} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %blocks = tile.num_blocks
  scf.for %t = %bx to %tiles step %blocks {
    %c128 = arith.constant 128 : index
    %c64 = arith.constant 64 : index
    %row = arith.muli %t, %c128 : index
    %as = tile.alloc : memref<128x64xf16, #s>
    %bs = tile.alloc : memref<64x64xf16, #s>
    %acc = tile.alloc : memref<128x64xf32, #f>
    %ar = tile.region %a[%row, %c0] [128, 64] : memref<?x?xf16, #g> -> memref<128x64xf16, strided<[?, 1], offset: ?>, #g>
    tile.copy %ar, %as : memref<128x64xf16, strided<[?, 1], offset: ?>, #g>, memref<128x64xf16, #s>
    tile.pipelined %k = %c0 to %n step %c1 stages(2) {
      %k0 = arith.muli %k, %c64 : index
      %br = tile.region %b[%k0, %c0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
      tile.copy %br, %bs : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
      tile.gemm %as, %bs, %acc : memref<128x64xf16, #s>, memref<64x64xf16, #s>, memref<128x64xf32, #f>
    }
    %cr = tile.region %c[%row, %c0] [128, 64] : memref<?x?xf32, #g> -> memref<128x64xf32, strided<[?, 1], offset: ?>, #g>
    tile.copy %acc, %cr : memref<128x64xf32, #f>, memref<128x64xf32, strided<[?, 1], offset: ?>, #g>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// One tile per block: the consumers' own copy (cp.async once lowered) is as
// quick as waiting for the producer's, so it stays theirs.
// CHECK-LABEL: tile.kernel @prologue_grid
// CHECK-NOT: prologue_full
// CHECK: tile.role threads(0, 128) {
// CHECK-NEXT: tile.copy %{{.*}}, %{{.*}} : memref<64x64xf16, strided<[?, 1], offset: ?>, #tile.space<global>>, memref<64x64xf16, #tile.space<shared>>
tile.kernel @prologue_grid(%a: memref<?x?xf16, #g>, %b: memref<?x?xf16, #g>, %c: memref<?x?xf32, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (4)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %row = arith.muli %bx, %c64 : index
  %as = tile.alloc : memref<64x64xf16, #s>
  %bs = tile.alloc : memref<64x64xf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #f>
  %ar = tile.region %a[%row, %c0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
  tile.copy %ar, %as : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %k0 = arith.muli %k, %c64 : index
    %br = tile.region %b[%k0, %c0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
    tile.copy %br, %bs : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    tile.gemm %as, %bs, %acc : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
  }
  %cr = tile.region %c[%row, %c0] [64, 64] : memref<?x?xf32, #g> -> memref<64x64xf32, strided<[?, 1], offset: ?>, #g>
  tile.copy %acc, %cr : memref<64x64xf32, #f>, memref<64x64xf32, strided<[?, 1], offset: ?>, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// In a walk, a buffer filled again after the loop keeps its copy with the
// consumers.
// CHECK-LABEL: tile.kernel @prologue_walk_written
// CHECK-NOT: prologue_full
// CHECK: tile.role threads(0, 128) {
// CHECK: scf.for
// CHECK: tile.copy %{{.*}}, %{{.*}} : memref<64x64xf16, strided<[?, 1], offset: ?>, #tile.space<global>>, memref<64x64xf16, #tile.space<shared>>
tile.kernel @prologue_walk_written(%a: memref<?x?xf16, #g>, %b: memref<?x?xf16, #g>, %c: memref<?x?xf32, #g>, %tiles: index, %n: index) grid(%bx) = affine_map<()[s0, s1] -> (s0)> threads(128) attributes {persistent} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %blocks = tile.num_blocks
  scf.for %t = %bx to %tiles step %blocks {
    %c64 = arith.constant 64 : index
    %row = arith.muli %t, %c64 : index
    %as = tile.alloc : memref<64x64xf16, #s>
    %bs = tile.alloc : memref<64x64xf16, #s>
    %acc = tile.alloc : memref<64x64xf32, #f>
    %ar = tile.region %a[%row, %c0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
    tile.copy %ar, %as : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    tile.pipelined %k = %c0 to %n step %c1 stages(2) {
      %k0 = arith.muli %k, %c64 : index
      %br = tile.region %b[%k0, %c0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
      tile.copy %br, %bs : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
      tile.gemm %as, %bs, %acc : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
    }
    %z = arith.constant 0.0 : f16
    tile.fill %as, %z : memref<64x64xf16, #s>, f16
    %cr = tile.region %c[%row, %c0] [64, 64] : memref<?x?xf32, #g> -> memref<64x64xf32, strided<[?, 1], offset: ?>, #g>
    tile.copy %acc, %cr : memref<64x64xf32, #f>, memref<64x64xf32, strided<[?, 1], offset: ?>, #g>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// A flag wait before the copy says its rows arrive from elsewhere: the
// producer would not wait for them, so the copy stays the consumers', after
// their wait.
// CHECK-LABEL: tile.kernel @prologue_walk_flagged
// CHECK-NOT: prologue_full
// CHECK: tile.role threads(0, 128) {
// CHECK: tile.wait
// CHECK: tile.copy %{{.*}}, %{{.*}} : memref<64x64xf16, strided<[?, 1], offset: ?>, #tile.space<global>>, memref<64x64xf16, #tile.space<shared>>
tile.kernel @prologue_walk_flagged(%a: memref<?x?xf16, #g>, %b: memref<?x?xf16, #g>, %c: memref<?x?xf32, #g>, %tiles: index, %n: index, %flags: memref<?xi32, #g>, %epoch: i32) grid(%bx) = affine_map<()[s0, s1] -> (s0)> threads(128) attributes {persistent} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %blocks = tile.num_blocks
  scf.for %t = %bx to %tiles step %blocks {
    %c64 = arith.constant 64 : index
    %row = arith.muli %t, %c64 : index
    %as = tile.alloc : memref<64x64xf16, #s>
    %bs = tile.alloc : memref<64x64xf16, #s>
    %acc = tile.alloc : memref<64x64xf32, #f>
    tile.wait %flags[%t], %epoch timeout_ms(500) : memref<?xi32, #g>, i32
    %ar = tile.region %a[%row, %c0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
    tile.copy %ar, %as : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    tile.pipelined %k = %c0 to %n step %c1 stages(2) {
      %k0 = arith.muli %k, %c64 : index
      %br = tile.region %b[%k0, %c0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
      tile.copy %br, %bs : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
      tile.gemm %as, %bs, %acc : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
    }
    %cr = tile.region %c[%row, %c0] [64, 64] : memref<?x?xf32, #g> -> memref<64x64xf32, strided<[?, 1], offset: ?>, #g>
    tile.copy %acc, %cr : memref<64x64xf32, #f>, memref<64x64xf32, strided<[?, 1], offset: ?>, #g>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// Another rank's tile loads by TMA through the tensor's map for that rank,
// so a loop reading an operand from a peer is warp-specialized like any
// other: the producer issues both loads, the peer's from its tile.peer.
// CHECK-LABEL: tile.kernel @peer_operand
// CHECK-SAME: threads(256)
// CHECK: %[[PEER:.*]] = tile.peer %arg1[%arg3]
// CHECK: tile.role threads(128, 128) {
// CHECK: tile.mbarrier_expect_tx %{{.*}} bytes(16384)
// CHECK: tile.copy_async %{{.*}}, %{{.*}} arrive
// CHECK: tile.region %[[PEER]]
// CHECK: tile.copy_async %{{.*}}, %{{.*}} arrive
// CHECK: tile.role threads(0, 128) {
tile.kernel @peer_operand(%a: memref<?x64xf16, #g>, %b: memref<?x64xf16, #g>, %out: memref<64x64xf32, #g>, %rank: index, %n: index) grid(%bx) = affine_map<()[s0, s1] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %as = tile.alloc : memref<64x64xf16, #s>
  %bs = tile.alloc : memref<64x64xf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #f>
  %peer = tile.peer %b [%rank] : memref<?x64xf16, #g>
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %row = arith.muli %k, %c64 : index
    %ra = tile.region %a[%row, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
    tile.copy %ra, %as : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    %rb = tile.region %peer[%row, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
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

// A flag wait written before the pipelined loop (the natural place) orders
// every load of the loop in program order: the producer runs it before its
// first load, and the consumers keep it where it was.
// CHECK-LABEL: tile.kernel @wait_before_loop
// CHECK: tile.role threads(128, 128) {
// CHECK-NEXT: tile.wait %arg1[%arg4], %arg2 timeout_ms(500)
// CHECK-NEXT: scf.for
// CHECK: tile.copy_async
// CHECK: tile.role threads(0, 128) {
// CHECK-NEXT: tile.wait %arg1[%arg4], %arg2 timeout_ms(500)
// CHECK-NEXT: scf.for
tile.kernel @wait_before_loop(%x: memref<?x64xf16, #g>, %flags: memref<?xi32, #g>, %epoch: i32, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %xs = tile.alloc : memref<64x64xf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #f>
  tile.wait %flags[%bx], %epoch timeout_ms(500) : memref<?xi32, #g>, i32
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %r0 = arith.muli %k, %c64 : index
    %xr = tile.region %x[%r0, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
    tile.copy %xr, %xs : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    tile.gemm %xs, %xs, %acc : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// In a persistent kernel, a wait at the top of the tile's body: the
// producer's own walk over the tiles waits for each tile's flag (its index
// from the producer's tile index) before that tile's loads.
// CHECK-LABEL: tile.kernel @wait_in_walk
// CHECK: tile.role threads(128, 128) {
// CHECK: scf.for %[[T:[^ ]*]] =
// CHECK-NOT: tile.copy_async
// CHECK: tile.wait %arg3[%[[T]]], %arg4 timeout_ms(500)
// CHECK-NEXT: scf.for
// CHECK: tile.copy_async
// CHECK: tile.role threads(0, 128) {
// CHECK: tile.wait
// CHECK-NEXT: scf.for
tile.kernel @wait_in_walk(%a: memref<?x?xf16, #g>, %b: memref<?x?xf16, #g>, %c: memref<?x?xf32, #g>, %flags: memref<?xi32, #g>, %epoch: i32, %tiles: index, %n: index) grid(%bx) = affine_map<()[s0, s1] -> (s0)> threads(128) attributes {persistent} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %blocks = tile.num_blocks
  scf.for %t = %bx to %tiles step %blocks {
    %c64 = arith.constant 64 : index
    %row = arith.muli %t, %c64 : index
    %as = tile.alloc : memref<64x64xf16, #s>
    %bs = tile.alloc : memref<64x64xf16, #s>
    %acc = tile.alloc : memref<64x64xf32, #f>
    tile.wait %flags[%t], %epoch timeout_ms(500) : memref<?xi32, #g>, i32
    tile.pipelined %k = %c0 to %n step %c1 stages(3) {
      %k0 = arith.muli %k, %c64 : index
      %ar = tile.region %a[%row, %k0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
      %br = tile.region %b[%k0, %c0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
      tile.copy %ar, %as : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
      tile.copy %br, %bs : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
      tile.gemm %as, %bs, %acc : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
    }
    %cr = tile.region %c[%row, %c0] [64, 64] : memref<?x?xf32, #g> -> memref<64x64xf32, strided<[?, 1], offset: ?>, #g>
    tile.copy %acc, %cr : memref<64x64xf32, #f>, memref<64x64xf32, strided<[?, 1], offset: ?>, #g>
  }
}

// -----

// A paged source: each stage is two pages whose numbers the loop reads,
// copied by TMA into windows of rows of the stage. The producer reads the
// page numbers itself and fills each window of the stage it waits for,
// arming `full` with both windows' bytes.
// CHECK-LABEL: tile.kernel @paged_windows
// CHECK-SAME: threads(256)
// CHECK: tile.role threads(128, 128) {
// CHECK: tile.mbarrier_expect_tx %{{.*}}[%[[S:.*]]] bytes(4096)
// CHECK: memref.load %arg1
// CHECK: %[[STAGE0:.*]] = tile.stage %{{.*}}[%[[S]]]
// CHECK: %[[W0:.*]] = tile.region %[[STAGE0]][%c0{{.*}}, %c0{{.*}}] [16, 64]
// CHECK-NEXT: tile.copy_async %{{.*}}, %[[W0]]
// CHECK: memref.load %arg1
// CHECK: %[[STAGE1:.*]] = tile.stage %{{.*}}[%[[S]]]
// CHECK: %[[W1:.*]] = tile.region %[[STAGE1]][%c16{{.*}}, %c0{{.*}}] [16, 64]
// CHECK-NEXT: tile.copy_async %{{.*}}, %[[W1]]
// CHECK: tile.role threads(0, 128) {
// CHECK-NOT: tile.copy_async
// CHECK: tile.mbarrier_arrive
#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

tile.kernel @paged_windows(%cache: memref<?x16x64xf16, #g>, %table: memref<?xi32, #g>, %out: memref<32x64xf32, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %ks = tile.alloc : memref<32x64xf16, #s>
  %acc = tile.alloc : memref<32x64xf32, #f>
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %e0 = arith.muli %k, %c2 : index
    %e1 = arith.addi %e0, %c1 : index
    %p0 = memref.load %table[%e0] : memref<?xi32, #g>
    %i0 = arith.index_cast %p0 : i32 to index
    %r0 = tile.region %cache[%i0, %c0, %c0] [1, 16, 64] : memref<?x16x64xf16, #g> -> memref<16x64xf16, strided<[64, 1], offset: ?>, #g>
    %w0 = tile.region %ks[%c0, %c0] [16, 64] : memref<32x64xf16, #s> -> memref<16x64xf16, strided<[64, 1]>, #s>
    tile.copy %r0, %w0 : memref<16x64xf16, strided<[64, 1], offset: ?>, #g>, memref<16x64xf16, strided<[64, 1]>, #s>
    %p1 = memref.load %table[%e1] : memref<?xi32, #g>
    %i1 = arith.index_cast %p1 : i32 to index
    %r1 = tile.region %cache[%i1, %c0, %c0] [1, 16, 64] : memref<?x16x64xf16, #g> -> memref<16x64xf16, strided<[64, 1], offset: ?>, #g>
    %w1 = tile.region %ks[%c16, %c0] [16, 64] : memref<32x64xf16, #s> -> memref<16x64xf16, strided<[64, 1], offset: 1024>, #s>
    tile.copy %r1, %w1 : memref<16x64xf16, strided<[64, 1], offset: ?>, #g>, memref<16x64xf16, strided<[64, 1], offset: 1024>, #s>
    tile.copy %ks, %acc : memref<32x64xf16, #s>, memref<32x64xf32, #f>
  }
  tile.copy %acc, %out : memref<32x64xf32, #f>, memref<32x64xf32, #g>
}
