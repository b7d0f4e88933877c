// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_90a},tessel-software-pipeline{arch=sm_90a}))' | FileCheck %s --check-prefixes=CHECK,TMA
// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_80},tessel-software-pipeline{arch=sm_80}))' | FileCheck %s --check-prefixes=CHECK,CPASYNC

// Three stages: the load buffers get three copies, a prologue issues
// iterations 0 and 1 (each predicated on the trip count, so a loop shorter
// than its stages still works), and iteration k issues k + 2 before
// computing on stage k % 3. On sm_90a the loads are TMA copies on a `full`
// mbarrier per stage whose phase parity (k / 3) % 2 compute waits for; the
// barrier before a refill retires the previous iteration's reads. On sm_80
// they are cp.async copies in one commit group per iteration.
// CHECK-LABEL: tile.kernel @gemm
// TMA: %[[FULL:.*]] = tile.alloc {name = "full"} : memref<3xi64
// TMA-COUNT-3: tile.mbarrier_init %[[FULL]][%{{.*}}] arrivals(1)
// CHECK: %[[AS:.*]] = tile.alloc {layout = {{.*}}, stages = 3 : i64, tessel.pipeline_staged} : memref<64x64xf16
// CHECK: %[[BS:.*]] = tile.alloc {layout = {{.*}}, stages = 3 : i64, tessel.pipeline_staged} : memref<64x64xf16
// CHECK: scf.if
// TMA: tile.mbarrier_expect_tx %[[FULL]][%[[S0:.*]]] bytes(16384)
// TMA: %[[V0:.*]] = tile.stage %[[AS]][%[[S0]]]
// TMA: tile.copy_async %{{.*}}, %[[V0]] arrive %[[FULL]][%[[S0]]]
// CPASYNC: %[[V0:.*]] = tile.stage %[[AS]][%{{.*}}]
// CPASYNC: tile.copy %{{.*}}, %[[V0]] {async}
// CPASYNC: tile.cp_async_commit
// CHECK: scf.if
// CPASYNC: tile.cp_async_commit
// CHECK: scf.for %[[IV:.*]] =
// CHECK: %[[K:.*]] = arith.divui
// CHECK: %[[STAGE:.*]] = arith.remui %[[K]], %{{.*}}
// CPASYNC: tile.cp_async_wait pending(1)
// CPASYNC-NEXT: tile.barrier
// CHECK: scf.if
// TMA-NEXT: tile.barrier
// TMA-NEXT: tile.mbarrier_expect_tx
// CHECK: tile.stage %[[AS]]
// TMA: tile.copy_async
// CPASYNC: tile.copy {{.*}} {async}
// CHECK: tile.stage %[[BS]]
// CPASYNC: tile.cp_async_commit
// TMA: %[[ROUND:.*]] = arith.divui %[[K]]
// TMA: %[[PARITY:.*]] = arith.remui %[[ROUND]]
// TMA: tile.mbarrier_wait %[[FULL]][%[[STAGE]]] parity %[[PARITY]]
// CHECK: %[[A:.*]] = tile.stage %[[AS]][%[[STAGE]]]
// CHECK: %[[B:.*]] = tile.stage %[[BS]][%[[STAGE]]]
// CHECK-NOT: tile.copy
// CHECK: tile.gemm %[[A]], %[[B]]
// CHECK-NOT: tile.pipelined
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

// One stage: nothing to overlap; the loop stays as it is. A buffer that is
// read after the loop cannot be multi-buffered either: the loop of two
// stages is then not pipelined, a warning at the loop with a remark at the
// copy.
// CHECK-LABEL: tile.kernel @untouched
// CHECK: tile.pipelined {{.*}} stages(1)
// CHECK: tile.pipelined {{.*}} stages(2)
// CHECK-NOT: stages = 2
// CHECK-NOT: tile.copy_async
tile.kernel @untouched(%a: memref<?xf32, #g>, %b: memref<64xf32, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc : memref<64xf32, #s>
  tile.pipelined %k = %c0 to %n step %c1 stages(1) {
    %r = tile.region %a[%k] [64] : memref<?xf32, #g> -> memref<64xf32, strided<[1], offset: ?>, #g>
    tile.copy %r, %s : memref<64xf32, strided<[1], offset: ?>, #g>, memref<64xf32, #s>
  }
  // expected-warning @+1 {{tessel-software-pipeline [pipelining]: this loop of 2 stages is not pipelined: the copy at}}
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %r = tile.region %a[%k] [64] : memref<?xf32, #g> -> memref<64xf32, strided<[1], offset: ?>, #g>
    // expected-remark @+1 {{tessel-software-pipeline [pipelining]: this copy is not loaded ahead in the pipelined loop at}}
    tile.copy %r, %s : memref<64xf32, strided<[1], offset: ?>, #g>, memref<64xf32, #s>
  }
  tile.copy %s, %b : memref<64xf32, #s>, memref<64xf32, #g>
}

// -----

// Two loops staging through one buffer, each writing all of it before
// reading it (the second through two row windows): neither can see a stage
// of the other's, so both are pipelined over one allocation with the
// deeper loop's stages, and the second loop's first loads wait at a
// barrier for every thread to be done with the first loop's stages (the
// first, with nothing before it, needs none).
#g = #tile.space<global>
#s = #tile.space<shared>
// CHECK-LABEL: tile.kernel @shared_staging
// CHECK: tile.alloc {{.*}}stages = 3 : i64, tessel.pipeline_staged} : memref<2x256xf32
// CHECK-NOT: tile.barrier
// CHECK: scf.for
// CHECK: tile.copy %{{.*}}, %arg1
// CHECK-NEXT: }
// CHECK-NEXT: tile.barrier
// CHECK: scf.for
// CHECK-NOT: tile.alloc {{.*}}memref<2x256xf32
tile.kernel @shared_staging(%a: memref<?x256xf32, #g>, %b: memref<256xf32, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc : memref<2x256xf32, #s>
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %r = tile.region %a[%k, %c0] [2, 256] : memref<?x256xf32, #g> -> memref<2x256xf32, strided<[256, 1], offset: ?>, #g>
    tile.copy %r, %s : memref<2x256xf32, strided<[256, 1], offset: ?>, #g>, memref<2x256xf32, #s>
    %row = tile.region %s[%c0, %c0] [1, 256] : memref<2x256xf32, #s> -> memref<256xf32, strided<[1], offset: ?>, #s>
    tile.copy %row, %b : memref<256xf32, strided<[1], offset: ?>, #s>, memref<256xf32, #g>
  }
  tile.pipelined %k = %c0 to %n step %c1 stages(3) {
    %r0 = tile.region %a[%k, %c0] [1, 256] : memref<?x256xf32, #g> -> memref<1x256xf32, strided<[256, 1], offset: ?>, #g>
    %w0 = tile.region %s[%c0, %c0] [1, 256] : memref<2x256xf32, #s> -> memref<1x256xf32, strided<[256, 1], offset: ?>, #s>
    tile.copy %r0, %w0 : memref<1x256xf32, strided<[256, 1], offset: ?>, #g>, memref<1x256xf32, strided<[256, 1], offset: ?>, #s>
    %r1 = tile.region %a[%k, %c0] [1, 256] : memref<?x256xf32, #g> -> memref<1x256xf32, strided<[256, 1], offset: ?>, #g>
    %w1 = tile.region %s[%c1, %c0] [1, 256] : memref<2x256xf32, #s> -> memref<1x256xf32, strided<[256, 1], offset: ?>, #s>
    tile.copy %r1, %w1 : memref<1x256xf32, strided<[256, 1], offset: ?>, #g>, memref<1x256xf32, strided<[256, 1], offset: ?>, #s>
    %row = tile.region %s[%c1, %c0] [1, 256] : memref<2x256xf32, #s> -> memref<256xf32, strided<[1], offset: ?>, #s>
    tile.copy %row, %b : memref<256xf32, strided<[1], offset: ?>, #s>, memref<256xf32, #g>
  }
}

// -----

// The second loop writes only row 0 before reading row 1: row 1 would be
// whatever stage the first loop loaded last, so the first loop is not
// pipelined, and its remark names the read.
#g = #tile.space<global>
#s = #tile.space<shared>
tile.kernel @partly_rewritten(%a: memref<?x64xf32, #g>, %b: memref<64xf32, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc : memref<2x64xf32, #s>
  // expected-warning @+1 {{this loop of 2 stages is not pipelined}}
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %r = tile.region %a[%k, %c0] [2, 64] : memref<?x64xf32, #g> -> memref<2x64xf32, strided<[64, 1], offset: ?>, #g>
    // expected-remark @+1 {{its buffer is read after the loop by the copy at}}
    tile.copy %r, %s : memref<2x64xf32, strided<[64, 1], offset: ?>, #g>, memref<2x64xf32, #s>
  }
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %r0 = tile.region %a[%k, %c0] [1, 64] : memref<?x64xf32, #g> -> memref<1x64xf32, strided<[64, 1], offset: ?>, #g>
    %w0 = tile.region %s[%c0, %c0] [1, 64] : memref<2x64xf32, #s> -> memref<1x64xf32, strided<[64, 1], offset: ?>, #s>
    tile.copy %r0, %w0 : memref<1x64xf32, strided<[64, 1], offset: ?>, #g>, memref<1x64xf32, strided<[64, 1], offset: ?>, #s>
    %row = tile.region %s[%c1, %c0] [1, 64] : memref<2x64xf32, #s> -> memref<64xf32, strided<[1], offset: ?>, #s>
    tile.copy %row, %b : memref<64xf32, strided<[1], offset: ?>, #s>, memref<64xf32, #g>
  }
}

// -----

// A stage count no shared memory can hold is an error before any prologue
// is unrolled (2^32 stages used to run out of time and memory).
#g = #tile.space<global>
#s = #tile.space<shared>
tile.kernel @absurd_stages(%a: memref<?x64xf16, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc : memref<64x64xf16, #s>
  // expected-error @+1 {{pipeline of 4294967296 stages of 8192 bytes each needs more than the}}
  tile.pipelined %k = %c0 to %n step %c1 stages(4294967296) {
    %r = tile.region %a[%k, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
    tile.copy %r, %s : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// A flag wait before the loads guards them: the data of block k arrives
// from elsewhere, announced by flags[k / 4]. The wait is issued with the
// loads of the same iteration (prologue and steady state, with its index
// recomputed for that iteration) and no longer sits in the body.
// CHECK-LABEL: tile.kernel @guarded
// CHECK: scf.if
// CHECK: %[[P:.*]] = arith.divui %{{.*}}, %c4
// CHECK: tile.wait %{{.*}}[%[[P]]], %{{.*}} timeout_ms(500)
// TMA: tile.mbarrier_expect_tx
// CHECK: tile.stage
// CHECK: scf.for %[[IV:.*]] =
// CHECK: %[[AHEAD:.*]] = arith.addi %[[IV]]
// CHECK: scf.if
// TMA-NEXT: tile.barrier
// CHECK: %[[Q:.*]] = arith.divui %[[AHEAD]], %c4
// CHECK-NEXT: tile.wait %{{.*}}[%[[Q]]], %{{.*}} timeout_ms(500)
// TMA-NEXT: tile.mbarrier_expect_tx
// CHECK: tile.stage
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

// A guard whose index is read inside the loop from memory the kernel writes
// cannot be issued ahead with the loads (one the kernel only reads can: see
// @paged below).
tile.kernel @guard_from_memory(%x: memref<?x64xf16, #g>, %flags: memref<?xi32, #g>, %parts: memref<?xi32, #g>, %epoch: i32, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %xs = tile.alloc : memref<64x64xf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #tile.space<fragment>>
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %p32 = memref.load %parts[%k] : memref<?xi32, #g>
    %part = arith.index_cast %p32 : i32 to index
    // expected-error @+1 {{this wait guards the pipelined loop's loads, which are issued ahead of the body, so its flag, index and value must be computed from the induction variable, values from before the loop and tensors the kernel only reads; here they depend on 'memref.load' at}}
    tile.wait %flags[%part], %epoch timeout_ms(500) : memref<?xi32, #g>, i32
    %r0 = arith.muli %k, %c64 : index
    %xr = tile.region %x[%r0, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
    tile.copy %xr, %xs : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    tile.gemm %xs, %xs, %acc : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #tile.space<fragment>>
  }
  %zero = arith.constant 0 : i32
  memref.store %zero, %parts[%c0] : memref<?xi32, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// A pipelined loop that runs again, nested in another loop: a barrier
// before its prologue (the last run's final iterations read the stages it
// refills). With TMA, the stages' mbarriers go on from the phases the last
// run left: a local counter, zero at the kernel's start, holds the
// iterations of all runs so far; stages (prologue included) and parities
// follow count + k, and each run adds its trip count.
// CHECK-LABEL: tile.kernel @nested
// TMA: %[[RUNS:.*]] = tile.alloc {name = "pipeline_runs"} : memref<1xi32, #tile.space<local>>
// TMA: memref.store %{{.*}}, %[[RUNS]][%{{.*}}]
// CHECK: scf.for %[[ROW:.*]] =
// CHECK-NEXT: arith.muli
// CHECK-NEXT: tile.barrier
// TMA: %[[LOADED:.*]] = memref.load %[[RUNS]]
// TMA-NEXT: %[[BASE:.*]] = arith.index_cast %[[LOADED]] : i32 to index
// TMA: %[[FIRST:.*]] = arith.addi %[[BASE]], %c0
// TMA: %[[S0:.*]] = arith.remui %[[FIRST]]
// TMA: tile.mbarrier_expect_tx %{{.*}}[%[[S0]]]
// CHECK: scf.for %{{.*}} =
// CHECK: %[[LOCAL:.*]] = arith.divui
// TMA: %[[K:.*]] = arith.addi %[[BASE]], %[[LOCAL]]
// TMA: %[[STAGE:.*]] = arith.remui %[[K]]
// TMA: tile.mbarrier_wait %{{.*}}[%[[STAGE]]] parity
// CHECK: tile.gemm
// TMA: %[[TRIP:.*]] = arith.ceildivui
// TMA: %[[NEXT:.*]] = arith.addi %[[BASE]], %[[TRIP]]
// TMA: %[[NEXT32:.*]] = arith.index_cast %[[NEXT]] : index to i32
// TMA: memref.store %[[NEXT32]], %[[RUNS]]
// CPASYNC-NOT: pipeline_runs
tile.kernel @nested(%a: memref<?x?xf16, #g>, %b: memref<?x?xf16, #g>, %n: index, %rows: index) grid(%bx) = affine_map<()[s0, s1] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %as = tile.alloc : memref<64x64xf16, #s>
  %bs = tile.alloc : memref<64x64xf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #f>
  scf.for %r = %c0 to %rows step %c1 {
    %row = arith.muli %r, %c64 : index
    tile.pipelined %k = %c0 to %n step %c1 stages(3) {
      %k0 = arith.muli %k, %c64 : index
      %ar = tile.region %a[%row, %k0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
      %br = tile.region %b[%k0, %c0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
      tile.copy %ar, %as : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
      tile.copy %br, %bs : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
      tile.gemm %as, %bs, %acc : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
    }
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// A paged cache: the page of each iteration is read from a table the
// kernel only reads, so the load is address arithmetic like any other and
// is issued ahead with the page read for its own iteration (prologue and
// ahead, in the predicated issue). A table the kernel writes keeps the copy
// in place, with a warning naming the read.
// CHECK-LABEL: tile.kernel @paged
// CHECK: scf.if
// CHECK: memref.load %arg1
// CHECK: arith.index_cast
// CHECK: tile.region %arg0
// CHECK: scf.for
// CHECK: scf.if
// CHECK: memref.load %arg1
// CHECK: tile.region %arg0
tile.kernel @paged(%cache: memref<?x64x128xf16, #g>, %table: memref<?xi32, #g>, %out: memref<64x128xf32, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %ks = tile.alloc : memref<64x128xf16, #s>
  %acc = tile.alloc : memref<64x128xf32, #f>
  tile.pipelined %k = %c0 to %n step %c1 stages(3) {
    %p32 = memref.load %table[%k] : memref<?xi32, #g>
    %page = arith.index_cast %p32 : i32 to index
    %r = tile.region %cache[%page, %c0, %c0] [1, 64, 128] : memref<?x64x128xf16, #g> -> memref<64x128xf16, strided<[128, 1], offset: ?>, #g>
    tile.copy %r, %ks : memref<64x128xf16, strided<[128, 1], offset: ?>, #g>, memref<64x128xf16, #s>
    tile.copy %ks, %acc : memref<64x128xf16, #s>, memref<64x128xf32, #f>
  }
  tile.copy %acc, %out : memref<64x128xf32, #f>, memref<64x128xf32, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// CHECK-LABEL: tile.kernel @paged_table_written
// CHECK: tile.pipelined
tile.kernel @paged_table_written(%cache: memref<?x64x128xf16, #g>, %table: memref<?xi32, #g>, %out: memref<64x128xf32, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %ks = tile.alloc : memref<64x128xf16, #s>
  %acc = tile.alloc : memref<64x128xf32, #f>
  // expected-warning @+1 {{tessel-software-pipeline [pipelining]: this loop of 3 stages is not pipelined: the copy at}}
  tile.pipelined %k = %c0 to %n step %c1 stages(3) {
    %p32 = memref.load %table[%k] : memref<?xi32, #g>
    %page = arith.index_cast %p32 : i32 to index
    %r = tile.region %cache[%page, %c0, %c0] [1, 64, 128] : memref<?x64x128xf16, #g> -> memref<64x128xf16, strided<[128, 1], offset: ?>, #g>
    // expected-remark @+1 {{its source address depends on 'memref.load' at}}
    tile.copy %r, %ks : memref<64x128xf16, strided<[128, 1], offset: ?>, #g>, memref<64x128xf16, #s>
    tile.copy %ks, %acc : memref<64x128xf16, #s>, memref<64x128xf32, #f>
    %one = arith.constant 1 : i32
    memref.store %one, %table[%k] : memref<?xi32, #g>
  }
  tile.copy %acc, %out : memref<64x128xf32, #f>, memref<64x128xf32, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// A copy into a window whose offset is only known at run time is not
// loaded ahead: which part of a later stage it fills is not known.
// CHECK-LABEL: tile.kernel @window_dynamic
tile.kernel @window_dynamic(%a: memref<?x64xf32, #g>, %n: index, %at: index) grid(%bx) = affine_map<()[s0, s1] -> (1)> threads(64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc : memref<64x64xf32, #s>
  // expected-warning @+1 {{this loop of 2 stages is not pipelined}}
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %r = tile.region %a[%k, %c0] [64, 32] : memref<?x64xf32, #g> -> memref<64x32xf32, strided<[64, 1], offset: ?>, #g>
    %w = tile.region %s[%c0, %at] [64, 32] : memref<64x64xf32, #s> -> memref<64x32xf32, strided<[64, 1], offset: ?>, #s>
    // expected-remark @+1 {{it writes a window of its buffer whose offsets are not constants}}
    tile.copy %r, %w : memref<64x32xf32, strided<[64, 1], offset: ?>, #g>, memref<64x32xf32, strided<[64, 1], offset: ?>, #s>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// A flag wait after the loop's load would order the next iteration's load
// in program order, but pipelining issues it ahead: an error, not a wait
// that silently guards nothing.
tile.kernel @wait_after_load(%x: memref<?x64xf16, #g>, %flags: memref<?xi32, #g>, %epoch: i32, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %xs = tile.alloc : memref<64x64xf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #tile.space<fragment>>
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %r0 = arith.muli %k, %c64 : index
    %xr = tile.region %x[%r0, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
    tile.copy %xr, %xs : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    // expected-error @+1 {{this flag wait comes after a load of the pipelined loop}}
    tile.wait %flags[%k], %epoch timeout_ms(500) : memref<?xi32, #g>, i32
    tile.gemm %xs, %xs, %acc : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #tile.space<fragment>>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// A buffer allocated in the body (a shared tile declared inside the loop's
// lambda) is one buffer for every iteration: it moves before the loop,
// where its stages are filled ahead.
// CHECK-LABEL: tile.kernel @alloc_in_body
// CHECK: tile.alloc {{.*}}stages = 2 : i64
// CHECK: scf.for
// CHECK-NOT: tile.alloc
// CHECK: tile.stage
tile.kernel @alloc_in_body(%a: memref<?x64xf16, #g>, %out: memref<64x64xf32, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %acc = tile.alloc : memref<64x64xf32, #f>
  tile.pipelined %k = %c0 to %n step %c1 stages(2) {
    %as = tile.alloc : memref<64x64xf16, #s>
    %row = arith.muli %k, %c64 : index
    %ra = tile.region %a[%row, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
    tile.copy %ra, %as : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
    tile.copy %as, %acc : memref<64x64xf16, #s>, memref<64x64xf32, #f>
  }
  tile.copy %acc, %out : memref<64x64xf32, #f>, memref<64x64xf32, #g>
}
