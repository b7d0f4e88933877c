// The sm_90a machinery of tessel-lower-tile-ops: TMA copies, mbarriers,
// roles with setmaxnreg, named barriers and pipeline stages.
// RUN: tessel-opt %s -split-input-file -pass-pipeline='builtin.module(tile.kernel(tessel-lower-tile-ops{arch=sm_90a},canonicalize,cse))' | FileCheck %s
// RUN: tessel-opt %s -split-input-file -pass-pipeline='builtin.module(tile.kernel(tessel-lower-tile-ops{arch=sm_90a tma=false},canonicalize,cse))' | FileCheck %s --check-prefix=NOTMA

// Stage 1 of a two-stage 64x256 f16 buffer starts 32 KB in; its rows are
// four 128-byte swizzle panels, so the copy is four TMA boxes of 64x64, 8 KB
// apart, at column offsets 0, 64, 128 and 192, all issued by the role's
// first thread against one tensor map. One thread inits the mbarrier and
// arms it; each consumer warp's lane 0 arrives after __syncwarp. Roles are
// thread-range conditionals that set their register budget first. The
// swizzled tile takes the first 64 KB (1024-byte aligned buffers go first,
// so no padding sits before them) and the barriers follow.
// CHECK-LABEL: tile.kernel @tma
// CHECK-SAME: tma_descriptors = [{box = array<i64: 64, 64>, param = 0 : i64, swizzle = 128 : i64}]
// CHECK: %[[TID:.*]] = tilenv.thread_id
// CHECK: %[[BARS:.*]] = tile.alloc {offset = 65536 : i64} : memref<2xi64
// CHECK: tilenv.mbarrier_init %{{.*}} arrivals = 4
// CHECK: %[[BS:.*]] = tile.alloc {offset = 0 : i64} : memref<16384xf16
// CHECK: scf.if
// CHECK-NEXT: tilenv.setmaxnreg 40
// CHECK-NEXT: %[[LOCAL:.*]] = arith.subi %[[TID]], %c128
// CHECK-NEXT: %[[FIRST:.*]] = arith.cmpi eq, %[[LOCAL]], %c0
// CHECK: tilenv.mbarrier_arrive %[[BAR1:.*]] expect_tx = 32768
// CHECK: scf.if %[[FIRST]]
// CHECK: %[[BASE:.*]] = tilenv.smem_address %[[BS]]
// CHECK: %[[P0:.*]] = arith.addi %[[BASE]], %c32768_i32
// CHECK-NEXT: tilenv.tma_load 0[%arg1, %c0] -> %[[P0]] arrive
// CHECK: tilenv.tma_load 0[%arg1, %c64] -> %{{.*}} arrive
// CHECK: tilenv.tma_load 0[%arg1, %c128] -> %{{.*}} arrive
// CHECK: %[[P3:.*]] = arith.addi %[[BASE]], %c57344_i32
// CHECK-NEXT: tilenv.tma_load 0[%arg1, %c192] -> %[[P3]] arrive
// CHECK: scf.if
// CHECK-NEXT: tilenv.setmaxnreg 232
// CHECK: tilenv.mbarrier_wait %{{.*}} parity %c0
// CHECK-NEXT: tilenv.named_barrier 2, 128
// CHECK-NEXT: tilenv.sync_warp
// CHECK-NEXT: %[[LANE:.*]] = arith.andi %[[TID]], %c31
// CHECK-NEXT: %[[LANE0:.*]] = arith.cmpi eq, %[[LANE]], %c0
// CHECK-NEXT: scf.if %[[LANE0]]
// CHECK-NEXT: tilenv.mbarrier_arrive %{{[0-9]+}}{{$}}
// With each_thread, every thread arrives, without the warp's sync:
// CHECK-NEXT: }
// CHECK-NEXT: tilenv.mbarrier_arrive %{{[0-9]+}}{{$}}
#g = #tile.space<global>
#s = #tile.space<shared>

tile.kernel @tma(%b: memref<?x?xf16, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(256) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %bars = tile.alloc : memref<2xi64, #s>
  tile.mbarrier_init %bars[%c0] arrivals(4) : memref<2xi64, #s>
  tile.fence_mbarrier_init
  tile.barrier
  %bs = tile.alloc {layout = #tile.shared<[64, 256], elem = 2, swizzle = 128, pad = 0>, stages = 2 : i64} : memref<64x256xf16, #s>
  tile.role threads(128, 128) max_registers(40) {
    %view = tile.stage %bs[%c1] : memref<64x256xf16, #s>
    %r = tile.region %b[%n, %c0] [64, 256] : memref<?x?xf16, #g> -> memref<64x256xf16, strided<[?, 1], offset: ?>, #g>
    tile.mbarrier_expect_tx %bars[%c1] bytes(32768) : memref<2xi64, #s>
    tile.copy_async %r, %view arrive %bars[%c1] : memref<64x256xf16, strided<[?, 1], offset: ?>, #g>, memref<64x256xf16, #s>, memref<2xi64, #s>
  }
  tile.role threads(0, 128) max_registers(232) {
    tile.mbarrier_wait %bars[%c1] parity %c0 : memref<2xi64, #s>
    tile.barrier named(2, 128)
    tile.mbarrier_arrive %bars[%c0] : memref<2xi64, #s>
    tile.mbarrier_arrive %bars[%c1] each_thread : memref<2xi64, #s>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// A whole unpadded shared buffer stored to a global window is a TMA store;
// a region atomic_add asked to use TMA is a TMA reduce-add. One thread
// issues the boxes and waits for its bulk group: in full, since the
// kernel's atomic_add touches the stored tensor again, and for the
// reduce-add only until the shared source has been read.
// CHECK-LABEL: tile.kernel @tma_out
// CHECK-SAME: tma_descriptors = [{box = array<i64: 32, 64>, param = 0 : i64, swizzle = 0 : i64}]
// CHECK: scf.if
// CHECK-NEXT: %[[SRC:.*]] = tilenv.smem_address
// CHECK-NEXT: tilenv.tma_store %[[SRC]] -> 0[%arg1, %c0]{{$}}
// CHECK-NEXT: tilenv.bulk_commit
// CHECK-NEXT: tilenv.bulk_wait{{$}}
// CHECK: tilenv.tma_store %{{.*}} -> 0[%arg1, %c0] reduce_add
// CHECK-NEXT: tilenv.bulk_commit
// CHECK-NEXT: tilenv.bulk_wait read
// The build without TMA (arguments a tensor map cannot hold) runs the same
// kernel with thread atomics for the reduce-add and no tensor map.
// NOTMA-LABEL: tile.kernel @tma_out
// NOTMA-NOT: tma_descriptors
// NOTMA: tilenv.atomic_add
// NOTMA-NOT: tilenv.tma_store
// NOTMA-LABEL: tile.kernel @tma_store_only
tile.kernel @tma_out(%y: memref<?x64xf32, #g>, %m: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %s = tile.alloc {layout = #tile.shared<[32, 64], elem = 4, swizzle = 0, pad = 0>} : memref<32x64xf32, #s>
  %r = tile.region %y[%m, %c0] [32, 64] : memref<?x64xf32, #g> -> memref<32x64xf32, strided<[64, 1], offset: ?>, #g>
  tile.copy %s, %r : memref<32x64xf32, #s>, memref<32x64xf32, strided<[64, 1], offset: ?>, #g>
  tile.atomic_add %s, %r order = relaxed {tma} : memref<32x64xf32, #s>, memref<32x64xf32, strided<[64, 1], offset: ?>, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// A tensor the kernel only stores into (copies are its only uses): nothing
// reads back what the TMA store writes, so its thread waits only until the
// shared source has been read, which tessel-defer-bulk-waits can then move.
// CHECK-LABEL: tile.kernel @tma_store_only
// CHECK: tilenv.tma_store %{{.*}} -> 0[%arg1, %c0]{{$}}
// CHECK-NEXT: tilenv.bulk_commit
// CHECK-NEXT: tilenv.bulk_wait read
tile.kernel @tma_store_only(%y: memref<?x64xf32, #g>, %m: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %s = tile.alloc {layout = #tile.shared<[32, 64], elem = 4, swizzle = 0, pad = 0>} : memref<32x64xf32, #s>
  %r = tile.region %y[%m, %c0] [32, 64] : memref<?x64xf32, #g> -> memref<32x64xf32, strided<[64, 1], offset: ?>, #g>
  tile.copy %s, %r : memref<32x64xf32, #s>, memref<32x64xf32, strided<[64, 1], offset: ?>, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// A rank-reducing window of a [batch, seq, heads, dim] tensor: the TMA box
// spans all four dimensions, one deep in batch and heads, and starts at the
// window's origin.
// CHECK-LABEL: tile.kernel @tma_bshd
// CHECK-SAME: tma_descriptors = [{box = array<i64: 1, 64, 1, 64>, param = 0 : i64, swizzle = 128 : i64}]
// CHECK: tilenv.tma_load 0[%arg1, %arg2, %arg3, %c0] -> %{{.*}} arrive
tile.kernel @tma_bshd(%q: memref<?x?x?x64xf16, #g>, %b: index, %row: index, %h: index) grid(%bx) = affine_map<()[s0, s1, s2] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %bars = tile.alloc : memref<1xi64, #s>
  tile.mbarrier_init %bars[%c0] arrivals(4) : memref<1xi64, #s>
  tile.fence_mbarrier_init
  tile.barrier
  %qs = tile.alloc {layout = #tile.shared<[64, 64], elem = 2, swizzle = 128, pad = 0>} : memref<64x64xf16, #s>
  %r = tile.region %q[%b, %row, %h, %c0] [1, 64, 1, 64] : memref<?x?x?x64xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
  tile.mbarrier_expect_tx %bars[%c0] bytes(8192) : memref<1xi64, #s>
  tile.copy_async %r, %qs arrive %bars[%c0] : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>, memref<1xi64, #s>
  tile.mbarrier_wait %bars[%c0] parity %c0 : memref<1xi64, #s>
}

// -----

#g = #tile.space<global>
#f = #tile.space<fragment>

// A region atomic_add of an f32 wgmma accumulator adds each register pair
// (two adjacent columns) with one red.global.add.v2.f32, falling back to
// per-element atomics where a pair is cut by the tensor's edge or
// misaligned.
// CHECK-LABEL: tile.kernel @vector_atomics
// CHECK: scf.if
// CHECK-NEXT: tilenv.red_add_vector %{{.*}}[%{{.*}}], %arg0[%{{.*}}, %{{.*}}] count = 2 release
// CHECK-NEXT: } else {
// CHECK: tilenv.atomic_add {{.*}} release
tile.kernel @vector_atomics(%dq: memref<?x128xf32, #g>, %row: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %acc = tile.alloc {layout = #tile.fragment<[64, 128], reg = [[0, 1], [8, 0], [0, 8], [0, 16], [0, 32], [0, 64]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = [[16, 0], [32, 0]]>} : memref<64x128xf32, #f>
  %r = tile.region %dq[%row, %row] [64, 128] : memref<?x128xf32, #g> -> memref<64x128xf32, strided<[128, 1], offset: ?>, #g>
  tile.atomic_add %acc, %r order = release : memref<64x128xf32, #f>, memref<64x128xf32, strided<[128, 1], offset: ?>, #g>
}

// -----

// A row reduction across warps inside the consumer role (warps split the
// columns) exchanges partials through shared scratch. The threads of the
// other role never reach it, so the exchange waits on the role's named
// barrier (role 2 of the kernel, its 128 threads), never on __syncthreads.
// CHECK-LABEL: tile.kernel @reduce_in_role
// CHECK: tilenv.setmaxnreg
// CHECK-NOT: tilenv.sync_threads
// CHECK: tilenv.named_barrier 2, 128
// CHECK: memref.store {{.*}} #tile.space<shared>>
// CHECK: tilenv.named_barrier 2, 128
// CHECK-NOT: tilenv.sync_threads
#s = #tile.space<shared>
#f = #tile.space<fragment>
tile.kernel @reduce_in_role() grid(%bx) = affine_map<() -> (1)> threads(256) {
  %acc = tile.alloc {layout = #tile.fragment<[16, 64], reg = [[0, 1], [8, 0], [0, 8]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = [[0, 16], [0, 32]]>} : memref<16x64xf32, #f>
  %max = tile.alloc {layout = #tile.fragment<[16], reg = [[8]], lane = [[0], [0], [1], [2], [4]], warp = [[0], [0]]>} : memref<16xf32, #f>
  %one = arith.constant 1.0 : f32
  tile.role threads(128, 128) max_registers(24) {
  }
  tile.role threads(0, 128) max_registers(240) {
    tile.fill %acc, %one : memref<16x64xf32, #f>, f32
    tile.reduce max %acc -> %max dim = 1 : memref<16x64xf32, #f> -> memref<16xf32, #f>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// A kernel in clusters of 2: a cluster barrier follows the mbarrier inits'
// fence (peers arrive on and multicast into them); the multicast copy's four
// boxes alternate between the blocks (rank 0 issues boxes 0 and 2, rank 1
// boxes 1 and 3), each to both blocks (mask 3); an arrival with `cluster`
// goes to the barrier in each block; and a last cluster barrier keeps every
// block until its peers are done with its shared memory.
// CHECK-LABEL: tile.kernel @multicast
// CHECK: tilenv.fence_mbarrier_init
// CHECK-NEXT: tilenv.cluster_barrier
// CHECK: %[[RANK:.*]] = tilenv.cluster_rank
// CHECK: %[[IS0:.*]] = arith.cmpi eq, %[[RANK]], %c0
// CHECK: scf.if %[[IS0]] {
// CHECK-NEXT: tilenv.tma_load 0[%arg1, %c0] -> %{{.*}} arrive %{{.*}} multicast(3)
// CHECK: %[[IS1:.*]] = arith.cmpi eq, %[[RANK]], %c1
// CHECK: scf.if %[[IS1]] {
// CHECK-NEXT: tilenv.tma_load 0[%arg1, %c64] -> %{{.*}} arrive %{{.*}} multicast(3)
// CHECK: scf.if %[[IS0]] {
// CHECK-NEXT: tilenv.tma_load 0[%arg1, %c128] -> %{{.*}} arrive %{{.*}} multicast(3)
// CHECK: scf.if %[[IS1]] {
// CHECK-NEXT: tilenv.tma_load 0[%arg1, %c192] -> %{{.*}} arrive %{{.*}} multicast(3)
// CHECK: tilenv.mbarrier_arrive_remote %[[BAR:.*]] in %c0
// CHECK-NEXT: tilenv.mbarrier_arrive_remote %[[BAR]] in %c1
// CHECK: tilenv.cluster_barrier
// CHECK-NEXT: }
tile.kernel @multicast(%b: memref<?x?xf16, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (2)> threads(128) attributes {cluster = array<i64: 2>} {
  %c0 = arith.constant 0 : index
  %bars = tile.alloc : memref<2xi64, #s>
  tile.mbarrier_init %bars[%c0] arrivals(8) : memref<2xi64, #s>
  tile.fence_mbarrier_init
  tile.barrier
  %bs = tile.alloc {layout = #tile.shared<[64, 256], elem = 2, swizzle = 128, pad = 0>} : memref<64x256xf16, #s>
  %r = tile.region %b[%n, %c0] [64, 256] : memref<?x?xf16, #g> -> memref<64x256xf16, strided<[?, 1], offset: ?>, #g>
  tile.mbarrier_expect_tx %bars[%c0] bytes(32768) : memref<2xi64, #s>
  tile.copy_async %r, %bs arrive %bars[%c0] {multicast} : memref<64x256xf16, strided<[?, 1], offset: ?>, #g>, memref<64x256xf16, #s>, memref<2xi64, #s>
  tile.mbarrier_arrive %bars[%c0] {cluster} : memref<2xi64, #s>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// A TMA load from another rank's tile (tile.peer): the tensor's maps are
// one per rank (`peers` in tma_descriptors) and the load names the rank.
// CHECK-LABEL: tile.kernel @peer_load
// CHECK-SAME: tma_descriptors = [{box = array<i64: 64, 64>, param = 0 : i64, peers, swizzle = 128 : i64}]
// CHECK: tilenv.tma_load 0 of rank %arg1[%arg2, %c0] -> %{{.*}} arrive %{{.*}}
tile.kernel @peer_load(%b: memref<?x64xf16, #g>, %rank: index, %n: index) grid(%bx) = affine_map<()[s0, s1] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %bars = tile.alloc : memref<1xi64, #s>
  tile.mbarrier_init %bars[%c0] arrivals(1) : memref<1xi64, #s>
  tile.fence_mbarrier_init
  tile.barrier
  %bs = tile.alloc {layout = #tile.shared<[64, 64], elem = 2, swizzle = 128, pad = 0>} : memref<64x64xf16, #s>
  %peer = tile.peer %b [%rank] : memref<?x64xf16, #g>
  %r = tile.region %peer[%n, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
  tile.mbarrier_expect_tx %bars[%c0] bytes(8192) : memref<1xi64, #s>
  tile.copy_async %r, %bs arrive %bars[%c0] : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>, memref<1xi64, #s>
}

// -----

// A window of whole rows of a swizzled tile is one box per panel, each
// starting the window's first row into its panel: rows 16-31 of a 32x128
// f16 tile (two 128-byte panels of 32 rows, 4 KB apart) land 2 KB into
// each (a paged cache's page in its step's tile).
// CHECK-LABEL: tile.kernel @tma_window
// CHECK-SAME: tma_descriptors = [{box = array<i64: 1, 16, 64>, param = 0 : i64, swizzle = 128 : i64}]
// CHECK: tilenv.mbarrier_arrive %{{.*}} expect_tx = 4096
// CHECK: %[[BASE:.*]] = tilenv.smem_address %{{.*}} : memref<4096xf16
// CHECK-NEXT: %[[P0:.*]] = arith.addi %[[BASE]], %c2048_i32
// CHECK-NEXT: tilenv.tma_load 0[%arg1, %c0, %c0] -> %[[P0]]
// CHECK-NEXT: %[[P1:.*]] = arith.addi %[[BASE]], %c6144_i32
// CHECK-NEXT: tilenv.tma_load 0[%arg1, %c0, %c64] -> %[[P1]]
#g = #tile.space<global>
#s = #tile.space<shared>

tile.kernel @tma_window(%cache: memref<?x16x128xf16, #g>, %page: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(256) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %bars = tile.alloc : memref<1xi64, #s>
  tile.mbarrier_init %bars[%c0] arrivals(1) : memref<1xi64, #s>
  tile.fence_mbarrier_init
  tile.barrier
  %ks = tile.alloc {layout = #tile.shared<[32, 128], elem = 2, swizzle = 128, pad = 0>} : memref<32x128xf16, #s>
  %r = tile.region %cache[%page, %c0, %c0] [1, 16, 128] : memref<?x16x128xf16, #g> -> memref<16x128xf16, strided<[128, 1], offset: ?>, #g>
  %w = tile.region %ks[%c16, %c0] [16, 128] : memref<32x128xf16, #s> -> memref<16x128xf16, strided<[128, 1], offset: 2048>, #s>
  tile.mbarrier_expect_tx %bars[%c0] bytes(4096) : memref<1xi64, #s>
  tile.copy_async %r, %w arrive %bars[%c0] : memref<16x128xf16, strided<[128, 1], offset: ?>, #g>, memref<16x128xf16, strided<[128, 1], offset: 2048>, #s>, memref<1xi64, #s>
  tile.mbarrier_wait %bars[%c0] parity %c0 : memref<1xi64, #s>
}
