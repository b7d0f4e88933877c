// Fragments need layouts, so each case runs layout inference first; the
// checks are on what tessel-lower-tile-ops makes of them.
// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_80},tessel-lower-tile-ops{arch=sm_80}))' | FileCheck %s
// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_90a},tessel-lower-tile-ops{arch=sm_90a}))' | FileCheck %s --check-prefix=HOPPER

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// A copy of a dynamically sized global window into shared memory: 16-byte
// cp.async moves when in bounds and aligned (all of a thread's in flight at
// once), a guarded element path otherwise (zero outside the tensor), and one
// wait for them after the loop (the last op of the kernel, then the closing
// braces of the kernel and the module). The shared buffer becomes 1-D at offset 0.
// CHECK-LABEL: tile.kernel @copy_in
// CHECK-SAME: smem_bytes = 2048
// CHECK: %[[TID:.*]] = tilenv.thread_id
// CHECK: %[[S:.*]] = tile.alloc {offset = 0 : i64} : memref<1024xf16, #tile.space<shared>>
// CHECK: scf.for %{{.*}} = %[[TID]] to %{{.*}} step %{{.*}} {
// CHECK: memref.dim %arg0
// CHECK: arith.cmpi slt
// CHECK: scf.if
// CHECK: tilenv.cp_async %arg0[{{.*}}], %[[S]][{{.*}}] bytes = 16
// CHECK: } else {
// CHECK: scf.if %{{.*}} -> (f16)
// CHECK: memref.load %arg0
// CHECK: arith.constant 0.000000e+00 : f16
// CHECK-NOT: tilenv.cp_async_wait
// CHECK: tilenv.cp_async_wait{{$}}
// CHECK-NEXT: }
// CHECK-NEXT: }
// CHECK-EMPTY:
// CHECK-NEXT: {{//[ ]-{5}$}}
// CHECK-NOT: tile.copy
// CHECK-NOT: tile.region
tile.kernel @copy_in(%a: memref<?x64xf16, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %row = arith.muli %bx, %c16 : index
  %s = tile.alloc : memref<16x64xf16, #s>
  %t = tile.region %a[%row, %c0] [16, 64] : memref<?x64xf16, #g> -> memref<16x64xf16, strided<[64, 1], offset: ?>, #g>
  tile.copy %t, %s : memref<16x64xf16, strided<[64, 1], offset: ?>, #g>, memref<16x64xf16, #s>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// Two copies in a row, with address arithmetic and a proxy fence between
// them: one wait, after the second, covers both; the fence after it orders
// both for the async proxy.
// (sm_80 has no async proxy: its fences lower to nothing.)
// CHECK-LABEL: tile.kernel @copy_pair
// CHECK: tilenv.cp_async
// CHECK-NOT: tilenv.cp_async_wait
// CHECK: tilenv.cp_async
// CHECK: tilenv.cp_async_wait
// CHECK-NOT: tilenv.cp_async_wait
// HOPPER-LABEL: tile.kernel @copy_pair
// HOPPER: tilenv.cp_async
// HOPPER-NOT: tilenv.cp_async_wait
// HOPPER: tilenv.fence_proxy_async
// HOPPER-NOT: tilenv.cp_async_wait
// HOPPER: tilenv.cp_async
// HOPPER: tilenv.cp_async_wait
// HOPPER: tilenv.fence_proxy_async
// HOPPER-NOT: tilenv.cp_async_wait
tile.kernel @copy_pair(%a: memref<?x64xf16, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %row = arith.muli %bx, %c16 : index
  %s = tile.alloc : memref<16x64xf16, #s>
  %s2 = tile.alloc : memref<16x64xf16, #s>
  %t = tile.region %a[%row, %c0] [16, 64] : memref<?x64xf16, #g> -> memref<16x64xf16, strided<[64, 1], offset: ?>, #g>
  tile.copy %t, %s : memref<16x64xf16, strided<[64, 1], offset: ?>, #g>, memref<16x64xf16, #s>
  tile.fence_proxy_async
  %next = arith.addi %row, %c16 : index
  %t2 = tile.region %a[%next, %c0] [16, 64] : memref<?x64xf16, #g> -> memref<16x64xf16, strided<[64, 1], offset: ?>, #g>
  tile.copy %t2, %s2 : memref<16x64xf16, strided<[64, 1], offset: ?>, #g>, memref<16x64xf16, #s>
  tile.fence_proxy_async
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// Shared to global: plain 16-byte moves (stores do not hold a thread up), no
// cp.async and nothing to wait for.
// CHECK-LABEL: tile.kernel @copy_out
// CHECK: scf.for
// CHECK: tilenv.copy_vector %{{.*}}[{{.*}}], %arg0[{{.*}}] bytes = 16
// CHECK-NOT: tilenv.cp_async
tile.kernel @copy_out(%a: memref<?x64xf16, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %row = arith.muli %bx, %c16 : index
  %s = tile.alloc : memref<16x64xf16, #s>
  %t = tile.region %a[%row, %c0] [16, 64] : memref<?x64xf16, #g> -> memref<16x64xf16, strided<[64, 1], offset: ?>, #g>
  tile.copy %s, %t : memref<16x64xf16, #s>, memref<16x64xf16, strided<[64, 1], offset: ?>, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// gemm on sm_80: per k-step of 16, ldmatrix.x4 for A (16 rows), ldmatrix.x4
// .trans for the row-major B (two 8-column tiles), then mma.sync m16n8k16.
// On sm_90a the same tile goes to one warpgroup's wgmma through swizzled
// shared-memory descriptors, fenced, committed and waited for.
// CHECK-LABEL: tile.kernel @gemm_tensor_cores
// CHECK: tilenv.ldmatrix %{{.*}}[%{{.*}}] -> %{{.*}}[%{{.*}}] x 4 :
// CHECK: tilenv.ldmatrix %{{.*}}[%{{.*}}] -> %{{.*}}[%{{.*}}] x 4 trans
// CHECK: tilenv.mma_sync %{{.*}}[%{{.*}}], %{{.*}}[%{{.*}}], %{{.*}}[%{{.*}}] f16
// CHECK-NOT: tile.gemm
// HOPPER-LABEL: tile.kernel @gemm_tensor_cores
// HOPPER: tilenv.wgmma_fence
// HOPPER: tilenv.smem_address
// HOPPER: tilenv.wgmma_desc %{{.*}} lbo = 16 sbo = 1024 swizzle = 128
// HOPPER: tilenv.wgmma_desc %{{.*}} lbo = 8192 sbo = 1024 swizzle = 128
// HOPPER: tilenv.wgmma %{{.*}}[%{{.*}}], %{{.*}}, %{{.*}} n = 64 f16 trans_b
// HOPPER: tilenv.wgmma_commit
// HOPPER: tilenv.wgmma_wait 0
tile.kernel @gemm_tensor_cores() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x64xf16, #s>
  %b = tile.alloc : memref<64x64xf16, #s>
  %c = tile.alloc : memref<64x64xf32, #f>
  tile.gemm %a, %b, %c : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
}

// A cleared accumulator (sm_90a): the first k-step is peeled off the
// k-loop with a constant scale-d of 0 (it overwrites the registers), the
// rest accumulate; no k-step compares the induction variable at run time.
// HOPPER-LABEL: tile.kernel @gemm_cleared
// HOPPER: tilenv.wgmma_fence
// HOPPER-NEXT: %[[FALSE:.*]] = arith.constant false
// HOPPER-NOT: scf.for
// HOPPER: tilenv.wgmma %{{.*}}[%{{.*}}], %{{.*}}, %{{.*}} n = 64 f16 trans_b accumulate(%[[FALSE]])
// HOPPER: scf.for
// HOPPER-NOT: arith.cmpi
// HOPPER: tilenv.wgmma %{{.*}}[%{{.*}}], %{{.*}}, %{{.*}} n = 64 f16 trans_b :
// HOPPER: tilenv.wgmma_commit
tile.kernel @gemm_cleared() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x64xf16, #s>
  %b = tile.alloc : memref<64x64xf16, #s>
  %c = tile.alloc : memref<64x64xf32, #f>
  tile.gemm %a, %b, %c {clear_accum} : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// With A in registers (sm_90a), each wgmma reads its 16-bit A elements in
// pairs, packed as it takes them. A gemm that stays in flight while the
// block reads an earlier gemm's result (here %c1, after %c2's gemm) packs
// all of its A into 32-bit words before the fence instead: the wait for the
// earlier gemm must not take this one's wgmmas with it.
// HOPPER-LABEL: tile.kernel @gemm_registers_a
// HOPPER: tilenv.wgmma_fence
// HOPPER: tilenv.wgmma %{{.*}}, %{{.*}}, %{{.*}} n = 64 f16 trans_b
// HOPPER: tilenv.wgmma_commit
// HOPPER: %[[WORDS:.*]] = tile.alloc : memref<16xi32, #tile.space<local>>
// HOPPER: scf.for
// HOPPER: %[[PAIR:.*]] = tilenv.pack_pair %{{.*}}, %{{.*}} : f16
// HOPPER-NEXT: memref.store %[[PAIR]], %[[WORDS]][
// HOPPER: tilenv.wgmma_fence
// HOPPER-NOT: tilenv.pack_pair
// HOPPER: tilenv.wgmma_reg_a %{{.*}}[%{{.*}}], %[[WORDS]][%{{.*}}], %{{.*}} n = 64 f16 trans_b
// HOPPER: tilenv.wgmma_commit
// HOPPER-LABEL: tile.kernel @gemm_registers_a_last
// HOPPER-NOT: tilenv.pack_pair
// HOPPER: tilenv.wgmma_reg_a %{{.*}}[%{{.*}}], %{{.*}}[%{{.*}}], %{{.*}} n = 64 f16 trans_b : memref<32xf32, #tile.space<local>>, memref<32xf16, #tile.space<local>>
// The earlier gemm may sit under a condition (the attention forward's next
// scores): its wait still comes after this gemm's issue, so this one packs
// first too.
// HOPPER-LABEL: tile.kernel @gemm_registers_a_after_branch
// HOPPER: scf.if
// HOPPER: tilenv.wgmma_commit
// HOPPER: }
// HOPPER: %[[WORDS:.*]] = tile.alloc : memref<16xi32, #tile.space<local>>
// HOPPER: tilenv.pack_pair
// HOPPER: tilenv.wgmma_fence
// HOPPER-NOT: tilenv.pack_pair
// HOPPER: tilenv.wgmma_reg_a %{{.*}}[%{{.*}}], %[[WORDS]][%{{.*}}]
tile.kernel @gemm_registers_a(%out: memref<64x64xf32, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x64xf16, #f>
  %b = tile.alloc : memref<64x64xf16, #s>
  %c1 = tile.alloc : memref<64x64xf32, #f>
  %c2 = tile.alloc : memref<64x64xf32, #f>
  tile.gemm %b, %b, %c1 : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
  tile.gemm %a, %b, %c2 : memref<64x64xf16, #f>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
  tile.copy %c1, %out : memref<64x64xf32, #f>, memref<64x64xf32, #tile.space<global>>
}
tile.kernel @gemm_registers_a_last() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x64xf16, #f>
  %b = tile.alloc : memref<64x64xf16, #s>
  %c = tile.alloc : memref<64x64xf32, #f>
  tile.gemm %a, %b, %c : memref<64x64xf16, #f>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
}
tile.kernel @gemm_registers_a_after_branch(%out: memref<64x64xf32, #tile.space<global>>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c1 = arith.constant 1 : index
  %a = tile.alloc : memref<64x64xf16, #f>
  %b = tile.alloc : memref<64x64xf16, #s>
  %s = tile.alloc : memref<64x64xf32, #f>
  %o = tile.alloc : memref<64x64xf32, #f>
  %more = arith.cmpi ult, %c1, %n : index
  scf.if %more {
    tile.gemm %b, %b, %s : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
  }
  tile.gemm %a, %b, %o : memref<64x64xf16, #f>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
  tile.copy %s, %out : memref<64x64xf32, #f>, memref<64x64xf32, #tile.space<global>>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// A row reduction of a fragment: its registers fold in the thread (padding
// columns 100..127 replaced by the identity), then butterflies over the lane
// bits that step the columns; the warps hold whole rows, so no shared memory.
// CHECK-LABEL: tile.kernel @row_max
// CHECK: arith.select %{{.*}}, %{{.*}}, %cst
// CHECK: arith.maxnumf
// CHECK: tilenv.shfl_xor %{{.*}}, 1, 32
// CHECK: tilenv.shfl_xor %{{.*}}, 16, 32
// CHECK-NOT: tilenv.sync_threads
// CHECK: memref.store
tile.kernel @row_max() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %t = tile.alloc : memref<4x100xf32, #f>
  %m = tile.alloc : memref<4xf32, #f>
  tile.reduce max %t -> %m dim = 1 clear : memref<4x100xf32, #f> -> memref<4xf32, #f>
}

// -----

#f = #tile.space<fragment>

// An i32 reduction stays in i32 (an index is exact at any size, where f32
// rounds past 2^24): its identity is INT32_MAX for min, it folds with
// arith.minsi and shuffles i32, and its partials cross the warps through
// the f32 scratch as their bits.
// CHECK-LABEL: tile.kernel @argmin_i32
// CHECK: arith.constant 2147483647 : i32
// CHECK: arith.minsi
// CHECK: tilenv.shfl_xor %{{.*}} : i32
// CHECK: arith.bitcast %{{.*}} : i32 to f32
// CHECK: arith.bitcast %{{.*}} : f32 to i32
// CHECK-NOT: arith.minnumf
// CHECK-NOT: arith.sitofp
tile.kernel @argmin_i32() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %t = tile.alloc : memref<1000xi32, #f>
  %m = tile.alloc : memref<1xi32, #f>
  tile.reduce min %t -> %m dim = 0 clear : memref<1000xi32, #f> -> memref<1xi32, #f>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// Region atomics keep their memory order, one per register the thread owns;
// barriers become __syncthreads.
// CHECK-LABEL: tile.kernel @atomics
// CHECK: tilenv.sync_threads
// CHECK: tilenv.atomic_add %{{.*}}, %arg0[%{{.*}}] release
tile.kernel @atomics(%out: memref<?xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(32) {
  %c0 = arith.constant 0 : index
  %s = tile.alloc : memref<32xf32, #f>
  tile.barrier
  %r = tile.region %out[%c0] [32] : memref<?xf32, #g> -> memref<32xf32, strided<[1], offset: ?>, #g>
  tile.atomic_add %s, %r order = release : memref<32xf32, #f>, memref<32xf32, strided<[1], offset: ?>, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// An annotated layout (padded rows) sizes the storage and addresses it.
// CHECK-LABEL: tile.kernel @padded
// CHECK: tile.alloc {offset = 0 : i64} : memref<152xf32, #tile.space<shared>>
// CHECK: arith.muli %{{.*}}, %c40
tile.kernel @padded() grid(%bx) = affine_map<() -> (1)> threads(32) {
  %s = tile.alloc : memref<4x32xf32, #s>
  tile.annotate_layout %s : memref<4x32xf32, #s> to affine_map<(d0, d1) -> (d0 * 40 + d1)>
  %z = arith.constant 1.0 : f32
  tile.fill %s, %z : memref<4x32xf32, #s>, f32
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// Rows padded by an affine layout that steps by one element along them keep
// 16-byte vectors (each vector's alignment checked where it is addressed);
// a layout that transposes the tile moves one element at a time.
// CHECK-LABEL: tile.kernel @padded_vectors
// CHECK: tilenv.cp_async %arg0[{{.*}}], %{{.*}}[{{.*}}] bytes = 16
// CHECK-LABEL: tile.kernel @transposed_scalars
// CHECK-NOT: tilenv.cp_async
// CHECK: memref.store
tile.kernel @padded_vectors(%in: memref<?x?xf16, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %s = tile.alloc : memref<64x64xf16, #s>
  tile.annotate_layout %s : memref<64x64xf16, #s> to affine_map<(d0, d1) -> (d0 * 72 + d1)>
  %w = tile.region %in[%c0, %c0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
  tile.copy %w, %s : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
}
tile.kernel @transposed_scalars(%in: memref<?x?xf16, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %s = tile.alloc : memref<64x64xf16, #s>
  tile.annotate_layout %s : memref<64x64xf16, #s> to affine_map<(d0, d1) -> (d1 * 64 + d0)>
  %w = tile.region %in[%c0, %c0] [64, 64] : memref<?x?xf16, #g> -> memref<64x64xf16, strided<[?, 1], offset: ?>, #g>
  // expected-remark @+1 {{its affine layout does not step by one element along it}}
  tile.copy %w, %s : memref<64x64xf16, strided<[?, 1], offset: ?>, #g>, memref<64x64xf16, #s>
}

// -----

// A signal waits for every thread's writes (a block barrier), then thread 0
// stores the epoch with release semantics. A wait spins in thread 0, then
// the block meets at a barrier.
// CHECK-LABEL: tile.kernel @flags
// CHECK: tilenv.sync_threads
// CHECK: scf.if
// CHECK: tilenv.flag_store %{{.*}}, %{{.*}}[%{{.*}}] : i32, memref<8xi32, #tile.space<global>>
// CHECK: scf.if
// CHECK: tilenv.flag_wait %{{.*}}[%{{.*}}], %{{.*}} timeout_ms(250) name("the flags of kernel parameter #0")
// CHECK: tilenv.sync_threads
// A counting signal is the same with an atomic add: a barrier, then thread 0.
// CHECK: tilenv.sync_threads
// CHECK: scf.if
// CHECK: tilenv.flag_store %{{.*}}, %{{.*}}[%{{.*}}] {add} : i32, memref<8xi32, #tile.space<global>>
tile.kernel @flags(%f: memref<8xi32, #tile.space<global>>, %e: i32) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  tile.signal %e, %f[%c1] : i32, memref<8xi32, #tile.space<global>>
  tile.wait %f[%c2], %e timeout_ms(250) : memref<8xi32, #tile.space<global>>, i32
  tile.signal %e, %f[%c2] {add} : i32, memref<8xi32, #tile.space<global>>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// An accumulator stored to shared memory: each register run's element
// offset is this thread's offset combined with a constant per register
// (checked for every thread and register at compile time), so the unrolled
// stores have no run-time bounds or alignment checks. XOR for the swizzled
// staging tile, where thread and register both flip the chunk bits; + for
// the plain tile, where their bits never meet (and fold into the store's
// immediate offset).
// CHECK-LABEL: tile.kernel @split_offsets
// CHECK: %[[STAGED:.*]] = tile.alloc {{.*}} : memref<8192xf32, #tile.space<shared>>
// CHECK: %[[THREAD:.*]] = arith.xori
// CHECK: scf.for
// CHECK-NOT: scf.if
// CHECK: %[[I:.*]] = arith.xori %[[THREAD]], %{{.*}} : index
// CHECK-NEXT: tilenv.copy_vector %{{.*}}[%{{.*}}], %[[STAGED]][%[[I]]] bytes = 8
// CHECK: %[[PLAIN:.*]] = tile.alloc {{.*}} : memref<8192xf32, #tile.space<shared>>
// CHECK: scf.for
// CHECK-NOT: scf.if
// CHECK: %[[J:.*]] = arith.addi %{{.*}}, %{{.*}} : index
// CHECK-NEXT: tilenv.copy_vector %{{.*}}[%{{.*}}], %[[PLAIN]][%[[J]]] bytes = 8
// HOPPER-LABEL: tile.kernel @split_offsets
// HOPPER: %[[STAGED:.*]] = tile.alloc {{.*}} : memref<8192xf32, #tile.space<shared>>
// HOPPER: %[[THREAD:.*]] = arith.xori
// HOPPER: scf.for
// HOPPER-NOT: scf.if
// HOPPER: %[[I:.*]] = arith.xori %[[THREAD]], %{{.*}} : index
// HOPPER-NEXT: tilenv.copy_vector %{{.*}}[%{{.*}}], %[[STAGED]][%[[I]]] bytes = 8
// HOPPER: %[[PLAIN:.*]] = tile.alloc {{.*}} : memref<8192xf32, #tile.space<shared>>
// HOPPER: scf.for
// HOPPER-NOT: scf.if
// HOPPER: %[[J:.*]] = arith.addi %{{.*}}, %{{.*}} : index
// HOPPER-NEXT: tilenv.copy_vector %{{.*}}[%{{.*}}], %[[PLAIN]][%[[J]]] bytes = 8
tile.kernel @split_offsets(%out: memref<64x128xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x32xf16, #s>
  %b = tile.alloc : memref<32x128xf16, #s>
  %c = tile.alloc : memref<64x128xf32, #f>
  tile.gemm %a, %b, %c : memref<64x32xf16, #s>, memref<32x128xf16, #s>, memref<64x128xf32, #f>
  %staged = tile.alloc : memref<64x128xf32, #s>
  tile.copy %c, %staged : memref<64x128xf32, #f>, memref<64x128xf32, #s>
  tile.copy %staged, %out : memref<64x128xf32, #s>, memref<64x128xf32, #g>
  // expected-remark @+1 {{tessel-layout-inference [swizzle]: this shared buffer is not swizzled, though registers write it (a swizzle keeps their rows out of each other's banks): 'memref.load' at}}
  %plain = tile.alloc : memref<64x128xf32, #s>
  tile.copy %c, %plain : memref<64x128xf32, #f>, memref<64x128xf32, #s>
  tile.parallel (%i, %j) in [64, 128] {
    %v = memref.load %plain[%i, %j] : memref<64x128xf32, #s>
    memref.store %v, %out[%i, %j] : memref<64x128xf32, #g>
  }
}

// -----

#g = #tile.space<global>
#f = #tile.space<fragment>

// A reduction of every dimension is held whole by every thread; a parallel
// body reads it at a fixed index after reading another fragment, and twice.
// Each read is the one register of that element, its index computed where
// the read was (not at the erased access before it).
// CHECK-LABEL: tile.kernel @broadcast_reads
// CHECK: %[[L:.*]] = tile.alloc : memref<2xf32, #tile.space<local>>
// CHECK: %[[MX:.*]] = tile.alloc : memref<1xf32, #tile.space<local>>
// CHECK: scf.for
// CHECK: %[[V:.*]] = memref.load %[[L]]
// CHECK: %[[M:.*]] = memref.load %[[MX]]
// CHECK: %[[D:.*]] = arith.subf %[[V]], %[[M]]
// CHECK: %[[M2:.*]] = memref.load %[[MX]]
// CHECK: %[[P:.*]] = arith.mulf %[[D]], %[[M2]]
// CHECK: memref.store %[[P]], %[[L]]
// CHECK: } {tessel.unroll}
// HOPPER-LABEL: tile.kernel @broadcast_reads
// HOPPER: arith.mulf
tile.kernel @broadcast_reads(%x: memref<256xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %l = tile.alloc : memref<256xf32, #f>
  %mx = tile.alloc : memref<1xf32, #f>
  %t = tile.region %x[%c0] [256] : memref<256xf32, #g> -> memref<256xf32, strided<[1], offset: ?>, #g>
  tile.copy %t, %l : memref<256xf32, strided<[1], offset: ?>, #g>, memref<256xf32, #f>
  tile.reduce max %l -> %mx dim = 0 clear : memref<256xf32, #f> -> memref<1xf32, #f>
  tile.parallel (%j) in [256] {
    %v = memref.load %l[%j] : memref<256xf32, #f>
    %z = arith.constant 0 : index
    %m = memref.load %mx[%z] : memref<1xf32, #f>
    %d = arith.subf %v, %m : f32
    %m2 = memref.load %mx[%z] : memref<1xf32, #f>
    %p = arith.mulf %d, %m2 : f32
    memref.store %p, %l[%j] : memref<256xf32, #f>
  }
  tile.copy %l, %t : memref<256xf32, #f>, memref<256xf32, strided<[1], offset: ?>, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// A copy moves 16 bytes at a time only where both sides hold the same type
// contiguously in rows of whole vectors; otherwise a remark says why.
// CHECK-LABEL: tile.kernel @narrow_copies
// CHECK: tilenv.cp_async {{.*}} bytes = 8
// HOPPER-LABEL: tile.kernel @narrow_copies
tile.kernel @narrow_copies(%a: memref<?x64xf32, #g>, %b: memref<?x4xf16, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %s = tile.alloc : memref<16x64xf16, #s>
  %t = tile.alloc : memref<16x4xf16, #s>
  %ra = tile.region %a[%c0, %c0] [16, 64] : memref<?x64xf32, #g> -> memref<16x64xf32, strided<[64, 1], offset: ?>, #g>
  // expected-remark @+1 {{tessel-lower-tile-ops [vectorization]: this copy is not moved in 16-byte vectors: the copy converts its element type, so it moves one element at a time}}
  tile.copy %ra, %s : memref<16x64xf32, strided<[64, 1], offset: ?>, #g>, memref<16x64xf16, #s>
  %rb = tile.region %b[%c0, %c0] [16, 4] : memref<?x4xf16, #g> -> memref<16x4xf16, strided<[4, 1], offset: ?>, #g>
  // expected-remark @+1 {{tessel-lower-tile-ops [vectorization]: this copy is not moved in 16-byte vectors: the tile's rows of 4 elements are not a multiple of 16 bytes, so it moves 8 bytes at a time}}
  tile.copy %rb, %t : memref<16x4xf16, strided<[4, 1], offset: ?>, #g>, memref<16x4xf16, #s>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// A shared tile reduced into a fragment: the fragment's layout gives row i
// to lane i of both warps, so each thread reduces its own row and keeps it
// in its register (a group of lanes and a shuffle left the sum in one lane
// of the group, written to a register index past the fragment).
// CHECK-LABEL: tile.kernel @reduce_shared_into_fragment
// CHECK: %[[R:.*]] = tile.alloc {name = "r"} : memref<1xf32, #tile.space<local>>
// CHECK-NOT: tilenv.shfl
// CHECK: %[[SUM:.*]] = scf.for {{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (f32)
// CHECK: arith.addf %[[ACC]]
// CHECK: memref.store %[[SUM]], %[[R]][%c0] : memref<1xf32, #tile.space<local>>
tile.kernel @reduce_shared_into_fragment(%x: memref<32x32xf32, #g>, %y: memref<32x32xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(64) {
  %w = tile.alloc {name = "w"} : memref<32x32xf32, #s>
  tile.copy %x, %w : memref<32x32xf32, #g>, memref<32x32xf32, #s>
  %r = tile.alloc {name = "r"} : memref<32xf32, #f>
  tile.reduce sum %w -> %r dim = 1 clear : memref<32x32xf32, #s> -> memref<32xf32, #f>
  tile.parallel (%i, %j) in [32, 32] {
    %a = memref.load %r[%i] : memref<32xf32, #f>
    %b = memref.load %w[%i, %j] : memref<32x32xf32, #s>
    %c = arith.subf %b, %a : f32
    memref.store %c, %w[%i, %j] : memref<32x32xf32, #s>
  }
  tile.copy %w, %y : memref<32x32xf32, #s>, memref<32x32xf32, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// Three warpgroups: the accumulator's layout is four warpgroups' (sixteen
// warps), the last four warps of which do not exist. A column sum crosses
// every warp through the scratch buffer; a partial of a warp past the
// twelfth is that of the warp with its replicating bits cleared (none here:
// every warp bit steps the rows, so it stays past the twelfth) or else the
// identity (and its slot, past the scratch, is not read).
// CHECK-LABEL: tile.kernel @column_sum_three_warpgroups
// CHECK: tilenv.sync_threads
// CHECK: arith.cmpi slt, %{{.*}}, %c12{{(_[0-9]+)?}} : index
// CHECK: %[[EXISTS:.*]] = arith.cmpi slt, %{{.*}}, %c12{{(_[0-9]+)?}} : index
// CHECK: %[[WARP:.*]] = arith.select %[[EXISTS]], %{{.*}}, %{{.*}} : index
// CHECK: %[[PARTIAL:.*]] = memref.load
// CHECK: arith.select %[[EXISTS]], %[[PARTIAL]], %{{.*}} : f32
// HOPPER-LABEL: tile.kernel @column_sum_three_warpgroups
// HOPPER: tilenv.wgmma
// HOPPER: arith.cmpi slt, %{{.*}}, %c12{{(_[0-9]+)?}} : index
tile.kernel @column_sum_three_warpgroups(%out: memref<64xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(384) {
  %a = tile.alloc : memref<192x64xbf16, #s>
  %b = tile.alloc : memref<64x64xbf16, #s>
  %acc = tile.alloc : memref<192x64xf32, #f>
  %col = tile.alloc : memref<64xf32, #f>
  tile.gemm %a, %b, %acc {transpose_b, clear_accum, policy = #tile.policy<full_row>} : memref<192x64xbf16, #s>, memref<64x64xbf16, #s>, memref<192x64xf32, #f>
  tile.reduce sum %acc -> %col dim = 0 clear : memref<192x64xf32, #f> -> memref<64xf32, #f>
  tile.copy %col, %out : memref<64xf32, #f>, memref<64xf32, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// FP8 conversions of an element loop that touches fragments only go in
// pairs: two registers an iteration, their ops interleaved, one
// tilenv.convert_pair for both conversions. A loop that also writes shared
// memory converts one register at a time.
// CHECK-LABEL: tile.kernel @fp8_conversions_in_pairs
// CHECK: scf.for %[[P:.*]] = %c0{{.*}} to %c16{{.*}} step %c1
// CHECK: arith.muli %[[P]], %c2
// CHECK: %[[LO:.*]] = memref.load %{{.*}} : memref<32xf32, #tile.space<local>>
// CHECK: %[[HI:.*]] = memref.load %{{.*}} : memref<32xf32, #tile.space<local>>
// CHECK: %[[A:.*]], %[[B:.*]] = tilenv.convert_pair %[[LO]], %[[HI]] : f8E4M3FN
// CHECK: memref.store %[[A]], %{{.*}} : memref<32xf8E4M3FN, #tile.space<local>>
// CHECK: memref.store %[[B]], %{{.*}} : memref<32xf8E4M3FN, #tile.space<local>>
// CHECK-NOT: tilenv.convert_pair
// CHECK: arith.truncf %{{.*}} : f32 to f8E5M2
// CHECK-NOT: tilenv.convert_pair
tile.kernel @fp8_conversions_in_pairs(%x: memref<64x64xf8E4M3FN, #g>, %y: memref<64x64xf8E5M2, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x64xbf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #f>
  tile.gemm %a, %a, %acc {transpose_b, clear_accum} : memref<64x64xbf16, #s>, memref<64x64xbf16, #s>, memref<64x64xf32, #f>
  %p = tile.alloc : memref<64x64xf8E4M3FN, #f>
  tile.parallel (%i, %j) in [64, 64] {
    %v = memref.load %acc[%i, %j] : memref<64x64xf32, #f>
    %c = arith.truncf %v : f32 to f8E4M3FN
    memref.store %c, %p[%i, %j] : memref<64x64xf8E4M3FN, #f>
  }
  tile.copy %p, %x : memref<64x64xf8E4M3FN, #f>, memref<64x64xf8E4M3FN, #g>
  %t = tile.alloc : memref<64x64xf8E5M2, #s>
  tile.parallel (%i, %j) in [64, 64] {
    %v = memref.load %acc[%i, %j] : memref<64x64xf32, #f>
    %c = arith.truncf %v : f32 to f8E5M2
    memref.store %c, %t[%i, %j] : memref<64x64xf8E5M2, #s>
  }
  tile.copy %t, %y : memref<64x64xf8E5M2, #s>, memref<64x64xf8E5M2, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// bf16 and f16 conversions pair as FP8's do (cvt.rn.bf16x2.f32): in an
// element loop that reads shared memory besides fragments (reads give the
// same values in either order), and in a converting copy of a fragment to
// global memory, two registers a vector. A loop that writes shared memory
// still converts one register at a time.
// CHECK-LABEL: tile.kernel @sixteen_bit_conversions_in_pairs
// CHECK: memref.load %{{.*}} : memref<64xf32, #tile.space<shared>>
// CHECK: memref.load %{{.*}} : memref<64xf32, #tile.space<shared>>
// CHECK: tilenv.convert_pair %{{.*}}, %{{.*}} : bf16
// CHECK: tilenv.convert_pair %{{.*}}, %{{.*}} : f16
// CHECK: tilenv.copy_vector
// CHECK-NOT: tilenv.convert_pair
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK-NOT: tilenv.convert_pair
tile.kernel @sixteen_bit_conversions_in_pairs(%y: memref<64x64xf16, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x64xbf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #f>
  tile.gemm %a, %a, %acc {transpose_b, clear_accum} : memref<64x64xbf16, #s>, memref<64x64xbf16, #s>, memref<64x64xf32, #f>
  %row = tile.alloc : memref<64xf32, #s>
  %p = tile.alloc : memref<64x64xbf16, #f>
  tile.parallel (%i, %j) in [64, 64] {
    %v = memref.load %acc[%i, %j] : memref<64x64xf32, #f>
    %m = memref.load %row[%i] : memref<64xf32, #s>
    %d = arith.subf %v, %m : f32
    %c = arith.truncf %d : f32 to bf16
    memref.store %c, %p[%i, %j] : memref<64x64xbf16, #f>
  }
  %h = tile.alloc : memref<64x64xf32, #f>
  tile.copy %acc, %h : memref<64x64xf32, #f>, memref<64x64xf32, #f>
  tile.copy %h, %y : memref<64x64xf32, #f>, memref<64x64xf16, #g>
  %t = tile.alloc : memref<64x64xbf16, #s>
  tile.parallel (%i, %j) in [64, 64] {
    %v = memref.load %acc[%i, %j] : memref<64x64xf32, #f>
    %c = arith.truncf %v : f32 to bf16
    memref.store %c, %t[%i, %j] : memref<64x64xbf16, #s>
  }
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// A 16-bit fragment that a wgmma reads as its register A operand converts
// one register at a time on sm_90a: a pair is one 32-bit register, which
// ptxas hands to the wgmma as it is, and one defined while a group runs
// makes ptxas serialize the kernel's wgmmas (C7513). mma.sync (sm_80) has
// no groups in flight: there the conversions pair.
// CHECK-LABEL: tile.kernel @wgmma_operand_converts_singly
// CHECK: tilenv.convert_pair %{{.*}}, %{{.*}} : bf16
// HOPPER-LABEL: tile.kernel @wgmma_operand_converts_singly
// HOPPER-NOT: tilenv.convert_pair
// HOPPER: arith.truncf %{{.*}} : f32 to bf16
// HOPPER-NOT: tilenv.convert_pair
// HOPPER: tilenv.wgmma_reg_a
tile.kernel @wgmma_operand_converts_singly() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x64xbf16, #s>
  %scores = tile.alloc : memref<64x64xf32, #f>
  tile.gemm %a, %a, %scores {transpose_b, clear_accum, policy = #tile.policy<full_row>} : memref<64x64xbf16, #s>, memref<64x64xbf16, #s>, memref<64x64xf32, #f>
  %p = tile.alloc : memref<64x64xbf16, #f>
  tile.parallel (%i, %j) in [64, 64] {
    %v = memref.load %scores[%i, %j] : memref<64x64xf32, #f>
    %c = arith.truncf %v : f32 to bf16
    memref.store %c, %p[%i, %j] : memref<64x64xbf16, #f>
  }
  %o = tile.alloc : memref<64x64xf32, #f>
  tile.gemm %p, %a, %o {clear_accum} : memref<64x64xbf16, #f>, memref<64x64xbf16, #s>, memref<64x64xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// The same when the converted fragment reaches the wgmma through a copy
// into another fragment.
// HOPPER-LABEL: tile.kernel @wgmma_operand_through_a_copy
// HOPPER-NOT: tilenv.convert_pair
// HOPPER: tilenv.wgmma_reg_a
tile.kernel @wgmma_operand_through_a_copy() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x64xbf16, #s>
  %scores = tile.alloc : memref<64x64xf32, #f>
  tile.gemm %a, %a, %scores {transpose_b, clear_accum, policy = #tile.policy<full_row>} : memref<64x64xbf16, #s>, memref<64x64xbf16, #s>, memref<64x64xf32, #f>
  %p = tile.alloc : memref<64x64xbf16, #f>
  tile.parallel (%i, %j) in [64, 64] {
    %v = memref.load %scores[%i, %j] : memref<64x64xf32, #f>
    %c = arith.truncf %v : f32 to bf16
    memref.store %c, %p[%i, %j] : memref<64x64xbf16, #f>
  }
  %q = tile.alloc : memref<64x64xbf16, #f>
  tile.copy %p, %q : memref<64x64xbf16, #f>, memref<64x64xbf16, #f>
  %o = tile.alloc : memref<64x64xf32, #f>
  tile.gemm %q, %a, %o {clear_accum} : memref<64x64xbf16, #f>, memref<64x64xbf16, #s>, memref<64x64xf32, #f>
}

// -----

#f = #tile.space<fragment>
#g = #tile.space<global>

// A window of a fragment moves registers inside each thread: row 2 of a
// fragment whose register bits step the rows is register 2 (0 ^ 2, the
// window's register 0 and the bits its offset fixes), in every lane.
// CHECK-LABEL: tile.kernel @window_registers
// CHECK: %[[F:.*]] = tile.alloc : memref<4xf32, #tile.space<local>>
// CHECK-NEXT: %[[R:.*]] = tile.alloc : memref<1xf32, #tile.space<local>>
// CHECK: %[[TWO:.*]] = arith.constant 2 : index
// CHECK: %[[REG:.*]] = arith.xori %{{.*}}, %[[TWO]]
// CHECK-NEXT: %[[V:.*]] = memref.load %[[F]][%[[REG]]]
// CHECK-NEXT: memref.store %[[V]], %[[R]]
tile.kernel @window_registers(%x: memref<32xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(32) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %f = tile.alloc : memref<4x32xf32, #f>
  tile.annotate_layout %f : memref<4x32xf32, #f> to #tile.fragment<[4, 32], reg = [[1, 0], [2, 0]], lane = [[0, 1], [0, 2], [0, 4], [0, 8], [0, 16]], warp = []>
  %w = tile.region %f[%c2, %c0] [1, 32] : memref<4x32xf32, #f> -> memref<32xf32, strided<[1], offset: ?>, #f>
  %r = tile.alloc : memref<32xf32, #f>
  tile.copy %w, %r : memref<32xf32, strided<[1], offset: ?>, #f>, memref<32xf32, #f>
  tile.copy %r, %x : memref<32xf32, #f>, memref<32xf32, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// tile.exp2 chooses its unit by register: in an element loop that runs two
// registers an iteration (FP8 conversions in pairs), fma_every 2 puts the
// second register of each pair (2 p + 1) on the FMA pipe and the first on
// the special-function unit, with no select. A loop one register an iteration
// (it writes shared memory) chooses by the unrolled register index, which
// the CUDA compiler folds in each unrolled copy. Outside element loops over
// fragments only fma_every 1 takes the polynomial.
// CHECK-LABEL: tile.kernel @exp2_units_by_register
// CHECK: scf.for %[[P:.*]] = %c0{{.*}} to %c16{{.*}} step %c1
// CHECK: %[[E0:.*]] = math.exp2 %{{.*}} : f32
// CHECK: %[[E1:.*]] = tilenv.exp2_fma %{{.*}} : f32
// CHECK: tilenv.convert_pair %[[E0]], %[[E1]] : f8E4M3FN
// CHECK: scf.for %[[R:.*]] = %c0{{.*}} to %c32{{.*}} step %c1
// CHECK: %[[REM:.*]] = arith.remui %[[R]], %c4{{.*}} : index
// CHECK: %[[PICK:.*]] = arith.cmpi eq, %[[REM]], %c3{{.*}} : index
// CHECK: %[[FMA:.*]] = tilenv.exp2_fma %{{.*}} : f32
// CHECK: %[[SFU:.*]] = math.exp2 %{{.*}} : f32
// CHECK: arith.select %[[PICK]], %[[FMA]], %[[SFU]] : f32
// CHECK: tilenv.exp2_fma %{{.*}} : f32
// CHECK-NOT: tilenv.exp2_fma
// CHECK: math.exp2 %{{.*}} : f32
// CHECK-NOT: tile.exp2
tile.kernel @exp2_units_by_register(%x: memref<64x64xf8E4M3FN, #g>, %y: memref<64x64xf32, #g>, %z: memref<2xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x64xbf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #f>
  tile.gemm %a, %a, %acc {transpose_b, clear_accum} : memref<64x64xbf16, #s>, memref<64x64xbf16, #s>, memref<64x64xf32, #f>
  %p = tile.alloc : memref<64x64xf8E4M3FN, #f>
  tile.parallel (%i, %j) in [64, 64] {
    %v = memref.load %acc[%i, %j] : memref<64x64xf32, #f>
    %e = tile.exp2 %v fma_every 2 : f32
    %c = arith.truncf %e : f32 to f8E4M3FN
    memref.store %c, %p[%i, %j] : memref<64x64xf8E4M3FN, #f>
  }
  tile.copy %p, %x : memref<64x64xf8E4M3FN, #f>, memref<64x64xf8E4M3FN, #g>
  %t = tile.alloc : memref<64x64xf32, #s>
  tile.parallel (%i, %j) in [64, 64] {
    %v = memref.load %acc[%i, %j] : memref<64x64xf32, #f>
    %e = tile.exp2 %v fma_every 4 : f32
    memref.store %e, %t[%i, %j] : memref<64x64xf32, #s>
  }
  tile.copy %t, %y : memref<64x64xf32, #s>, memref<64x64xf32, #g>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %h = arith.constant 0.5 : f32
  %all = tile.exp2 %h fma_every 1 : f32
  %some = tile.exp2 %h fma_every 3 : f32
  memref.store %all, %z[%c0] : memref<2xf32, #g>
  memref.store %some, %z[%c1] : memref<2xf32, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// Element code's indices are checked where they may leave their buffer: a
// stencil's i + 1 reads past a 256-element tensor at i = 255 (0 there, as
// past any tensor's end), and an index read from memory may fall outside a
// shared buffer. i itself, bounded by the loop, gets no check.
// CHECK-LABEL: tile.kernel @element_indices_past_the_buffer
// CHECK: scf.for %[[I:.*]] = %{{.*}} to %c256{{.*}} step %c128
// CHECK-NOT: scf.if
// CHECK: %[[AT:.*]] = arith.addi %{{.*}}, %[[I]] : index
// CHECK: memref.load %arg0[%[[AT]]] : memref<256xf32, #tile.space<global>>
// CHECK: %[[N:.*]] = arith.addi %[[I]], %c1
// CHECK: %[[NEXT:.*]] = arith.addi %{{.*}}, %[[N]] : index
// CHECK: %[[IN:.*]] = arith.cmpi slt, %[[NEXT]], %c256
// CHECK: scf.if %[[IN]] -> (f32)
// CHECK: memref.load %arg0[%[[NEXT]]]
// CHECK: %[[K:.*]] = arith.index_cast %{{.*}} : i32 to index
// CHECK: %[[J:.*]] = arith.addi %{{.*}}, %[[K]] : index
// CHECK: %[[LOW:.*]] = arith.cmpi sge, %[[J]], %c0
// CHECK: %[[HIGH:.*]] = arith.cmpi slt, %[[J]], %c64
// CHECK: %[[BOTH:.*]] = arith.andi %[[LOW]], %[[HIGH]]
// CHECK: scf.if %[[BOTH]] -> (f32)
tile.kernel @element_indices_past_the_buffer(%x: memref<256xf32, #g>, %o: memref<256xi32, #g>, %y: memref<256xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %tx = tile.region %x[%c0] [256] : memref<256xf32, #g> -> memref<256xf32, strided<[1], offset: ?>, #g>
  %t = tile.alloc : memref<64xf32, #s>
  tile.parallel (%i) in [256] {
    %a = memref.load %tx[%i] : memref<256xf32, strided<[1], offset: ?>, #g>
    %n = arith.addi %i, %c1 : index
    %b = memref.load %tx[%n] : memref<256xf32, strided<[1], offset: ?>, #g>
    %k = memref.load %o[%i] : memref<256xi32, #g>
    %j = arith.index_cast %k : i32 to index
    %c = memref.load %t[%j] : memref<64xf32, #s>
    %s = arith.addf %a, %b : f32
    %r = arith.addf %s, %c : f32
    memref.store %r, %y[%i] : memref<256xf32, #g>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// Indices bounded from their definitions keep no check: a row plus a
// remainder written out (x - floor(x / 4) * 4, in [0, 4)) inside a buffer
// of 128 + 4 rows, and a masked value (x & -16 is at most x).
// CHECK-LABEL: tile.kernel @bounded_element_indices
// CHECK: scf.for
// CHECK-NOT: scf.if
// CHECK: memref.store
// CHECK-NEXT: }
tile.kernel @bounded_element_indices(%y: memref<128xf32, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c4 = arith.constant 4 : index
  %m16 = arith.constant -16 : index
  %c127 = arith.constant 127 : index
  %t = tile.alloc : memref<132xf32, #s>
  %q = arith.floordivsi %n, %c4 : index
  %r = arith.muli %q, %c4 : index
  %shift = arith.subi %n, %r : index
  tile.parallel (%i) in [128] {
    %j = arith.addi %i, %shift : index
    %a = memref.load %t[%j] : memref<132xf32, #s>
    %k = arith.andi %i, %m16 : index
    %b = memref.load %t[%k] : memref<132xf32, #s>
    %c = arith.addf %a, %b : f32
    memref.store %c, %t[%i] : memref<132xf32, #s>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// A window of a shared buffer at a run-time offset that may leave the
// buffer (a block index times 64 in 128 elements) traps there, with a
// report; one whose offset is bounded (a loop of two steps of 64) does not.
// CHECK-LABEL: tile.kernel @shared_window_offsets
// CHECK: %[[OFF:.*]] = arith.muli %arg1, %c64
// CHECK: %[[IN:.*]] = arith.cmpi sle, %[[OFF]], %c64
// CHECK: tilenv.trap_unless %[[IN]], %[[OFF]], %c64{{.*}} {what = "{{.*}}a shared window leaves its buffer in dim 0 (offset, last start)"}
// CHECK-NOT: tilenv.trap_unless
tile.kernel @shared_window_offsets(%x: memref<128xf32, #g>) grid(%bx) = affine_map<() -> (4)> threads(64) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %t = tile.alloc : memref<128xf32, #s>
  %o = arith.muli %bx, %c64 : index
  %w = tile.region %t[%o] [64] : memref<128xf32, #s> -> memref<64xf32, strided<[1], offset: ?>, #s>
  %tx = tile.region %x[%c0] [64] : memref<128xf32, #g> -> memref<64xf32, strided<[1], offset: ?>, #g>
  tile.copy %tx, %w : memref<64xf32, strided<[1], offset: ?>, #g>, memref<64xf32, strided<[1], offset: ?>, #s>
  scf.for %k = %c0 to %c2 step %c1 {
    %ok = arith.muli %k, %c64 : index
    %v = tile.region %t[%ok] [64] : memref<128xf32, #s> -> memref<64xf32, strided<[1], offset: ?>, #s>
    tile.copy %tx, %v : memref<64xf32, strided<[1], offset: ?>, #g>, memref<64xf32, strided<[1], offset: ?>, #s>
  }
}
