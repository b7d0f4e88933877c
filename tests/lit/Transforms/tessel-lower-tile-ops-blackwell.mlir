// sm_100a parts of tessel-lower-tile-ops.
// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-lower-tile-ops{arch=sm_100a}))' | FileCheck %s --check-prefix=SM100

// Tensor memory placed by tessel-tmem-allocation: warp 0 allocates the
// block's 256 columns into a shared word; fences around a barrier publish
// the base; at the end, after the same fences and barrier, warp 0 frees
// them and gives up the permit. The buffers themselves leave no op.
// SM100-LABEL: tile.kernel @tmem_protocol
// SM100: %[[WORD:.*]] = tile.alloc {name = "tmem_base", offset = {{.*}}} : memref<1xi32, #tile.space<shared>>
// SM100: %[[ADDR:.*]] = tilenv.smem_address %[[WORD]]
// SM100: scf.if
// SM100-NEXT: tilenv.tcgen05_alloc %[[ADDR]] columns = 256
// SM100: tilenv.tcgen05_fence_before
// SM100-NEXT: tilenv.sync_threads
// SM100-NEXT: tilenv.tcgen05_fence_after
// SM100: %[[BASE:.*]] = memref.load %[[WORD]]
// SM100-NOT: #tile.space<tmem>
// SM100: tilenv.tcgen05_fence_before
// SM100-NEXT: tilenv.sync_threads
// SM100-NEXT: scf.if
// SM100-NEXT: tilenv.tcgen05_dealloc %[[BASE]] columns = 256
// SM100-NEXT: tilenv.tcgen05_relinquish
tile.kernel @tmem_protocol() grid(%bx) = affine_map<() -> (1)> threads(128) attributes {tmem_columns = 256 : i64} {
  %acc = tile.alloc {offset = 0 : i64} : memref<128x256xf32, #tile.space<tmem>>
}

// -----

// Tile ops on tensor memory, 2 warpgroups. The fill: every warp stores a
// run of zero registers at its lane quarter (warp % 4) << 16 and its
// warpgroup's 64-column share (the recorded step), in .x32 issues, then
// waits and fences before the barrier. The gemm: fenced after that barrier,
// thread 0 issues one tcgen05.mma per K step of 16 from shared-memory
// descriptors (A K-major, B MN-major: trans_b) and commits to the gemm's
// mbarrier; every thread waits for its phase, flips it and fences. The copy
// out: .x32 loads at column 64 of the buffer plus the warpgroup's step of
// 32, waited for.
// SM100-LABEL: tile.kernel @tmem_ops
// SM100: %[[WORD:.*]] = tile.alloc {name = "tmem_base"
// SM100: %[[DONE:.*]] = tile.alloc {name = "tcgen05_done"{{.*}} : memref<1xi64, #tile.space<shared>>
// SM100: %[[PHASE:.*]] = tile.alloc : memref<1xi32, #tile.space<local>>
// SM100: tilenv.tcgen05_alloc {{.*}} columns = 128
// SM100: tilenv.mbarrier_init {{.*}} arrivals = 1
// SM100-NEXT: tilenv.fence_mbarrier_init
// SM100: memref.store %{{.*}}, %[[PHASE]]
// SM100: %[[BASE:.*]] = memref.load %[[WORD]]
// SM100: tilenv.tcgen05_st %{{.*}} -> %{{.*}} s32x32b x 32
// SM100: tilenv.tcgen05_st %{{.*}} -> %{{.*}} s32x32b x 32
// SM100-NEXT: tilenv.tcgen05_wait_st
// SM100-NEXT: tilenv.tcgen05_fence_before
// SM100: tilenv.sync_threads
// SM100: tilenv.tcgen05_fence_after
// SM100: scf.if
// SM100: tilenv.tcgen05_idesc m = 128 n = 128 f16 -> f32 trans_b
// SM100: tilenv.tcgen05_smem_desc %{{.*}} lbo = 16 sbo = 1024 swizzle = 128
// SM100: tilenv.tcgen05_smem_desc %{{.*}} lbo = 8192 sbo = 1024 swizzle = 128
// SM100: tilenv.tcgen05_mma %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} accumulate(%{{.*}}) : i64
// SM100: tilenv.tcgen05_commit %[[BAR:.*]]
// SM100: %[[P:.*]] = memref.load %[[PHASE]]
// SM100: tilenv.mbarrier_wait %[[BAR]] parity
// SM100: arith.xori %[[P]]
// SM100: tilenv.tcgen05_fence_after
// SM100: tilenv.sync_threads
// SM100: tilenv.tcgen05_ld %{{.*}} -> %{{.*}}[%{{.*}}] s32x32b x 32
// SM100-NEXT: tilenv.tcgen05_wait_ld
// SM100-NEXT: tilenv.tcgen05_fence_before
// SM100: tilenv.tcgen05_dealloc %[[BASE]] columns = 128
tile.kernel @tmem_ops() grid(%bx) = affine_map<() -> (1)> threads(256) attributes {tmem_columns = 128 : i64} {
  %a = tile.alloc {layout = #tile.shared<[128, 64], elem = 2, swizzle = 128, pad = 0>} : memref<128x64xf16, #tile.space<shared>>
  %b = tile.alloc {layout = #tile.shared<[64, 128], elem = 2, swizzle = 128, pad = 0>} : memref<64x128xf16, #tile.space<shared>>
  %acc = tile.alloc {offset = 0 : i64} : memref<128x128xf32, #tile.space<tmem>>
  %part = tile.alloc {layout = #tile.fragment<[128, 64], reg = [[0, 1], [0, 2], [0, 4], [0, 8], [0, 16]], lane = [[1, 0], [2, 0], [4, 0], [8, 0], [16, 0]], warp = [[32, 0], [64, 0], [0, 32]]>} : memref<128x64xf32, #tile.space<fragment>>
  %zero = arith.constant 0.000000e+00 : f32
  tile.fill %acc, %zero {tmem_group_columns = 64 : i64} : memref<128x128xf32, #tile.space<tmem>>, f32
  tile.barrier
  tile.gemm %a, %b, %acc {instruction = #tile.instr<tcgen05>, warps = array<i64: 1, 1>} : memref<128x64xf16, #tile.space<shared>>, memref<64x128xf16, #tile.space<shared>>, memref<128x128xf32, #tile.space<tmem>>
  %c0 = arith.constant 0 : index
  %c64 = arith.constant 64 : index
  %view = tile.region %acc[%c0, %c64] [128, 64] : memref<128x128xf32, #tile.space<tmem>> -> memref<128x64xf32, strided<[128, 1], offset: ?>, #tile.space<tmem>>
  tile.barrier
  tile.copy %view, %part {tmem_group_columns = 32 : i64} : memref<128x64xf32, strided<[128, 1], offset: ?>, #tile.space<tmem>>, memref<128x64xf32, #tile.space<fragment>>
}

// -----

// The step between warpgroups comes from tessel-tmem-allocation.
tile.kernel @no_step() grid(%bx) = affine_map<() -> (1)> threads(128) attributes {tmem_columns = 32 : i64} {
  %t = tile.alloc {offset = 0 : i64} : memref<128x32xf32, #tile.space<tmem>>
  %zero = arith.constant 0.000000e+00 : f32
  // expected-error @+1 {{tensor-memory fill has no column step; run tessel-tmem-allocation}}
  tile.fill %t, %zero : memref<128x32xf32, #tile.space<tmem>>, f32
}

// -----

// Not placed: the allocation pass comes first.
// expected-error @+1 {{tensor memory is not placed; run tessel-tmem-allocation first}}
tile.kernel @unplaced() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %t = tile.alloc : memref<128x32xf32, #tile.space<tmem>>
}

// -----

// An issue_only gemm stops after its MMAs; tile.mma_commit is the issuing
// thread's tcgen05.commit on the given barrier; tile.mma_wait commits to a
// barrier of its own that every thread waits on, then fences.
// SM100-LABEL: tile.kernel @async_mmas
// SM100: %[[DONE:.*]] = tile.alloc {name = "tcgen05_done"{{.*}} : memref<1xi64, #tile.space<shared>>
// SM100: tilenv.tcgen05_mma
// SM100-NOT: tilenv.mbarrier_wait
// SM100: scf.if
// SM100-NEXT: tilenv.tcgen05_commit
// SM100-NOT: tilenv.mbarrier_wait
// SM100: tilenv.smem_address %[[DONE]]
// SM100: scf.if
// SM100-NEXT: tilenv.tcgen05_commit %[[ADDR:.*]]
// SM100: tilenv.mbarrier_wait %[[ADDR]] parity
// SM100: tilenv.tcgen05_fence_after
tile.kernel @async_mmas() grid(%bx) = affine_map<() -> (1)> threads(128) attributes {tmem_columns = 64 : i64} {
  %a = tile.alloc {layout = #tile.shared<[128, 64], elem = 2, swizzle = 128, pad = 0>} : memref<128x64xf16, #tile.space<shared>>
  %b = tile.alloc {layout = #tile.shared<[64, 64], elem = 2, swizzle = 128, pad = 0>} : memref<64x64xf16, #tile.space<shared>>
  %acc = tile.alloc {offset = 0 : i64} : memref<128x64xf32, #tile.space<tmem>>
  %empty = tile.alloc : memref<2xi64, #tile.space<shared>>
  %c1 = arith.constant 1 : index
  tile.gemm %a, %b, %acc {instruction = #tile.instr<tcgen05>, warps = array<i64: 1, 1>, issue_only} : memref<128x64xf16, #tile.space<shared>>, memref<64x64xf16, #tile.space<shared>>, memref<128x64xf32, #tile.space<tmem>>
  tile.mma_commit %empty[%c1] : memref<2xi64, #tile.space<shared>>
  tile.mma_wait
}

// -----

// The ts form: A's operand is its tensor-memory address, K = 16 a step
// being 8 packed columns on.
// SM100-LABEL: tile.kernel @ts_gemm
// SM100: tilenv.tcgen05_idesc m = 128 n = 64 bf16 -> f32 trans_b
// SM100: tilenv.tcgen05_mma %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} accumulate(%{{.*}}) : i32
tile.kernel @ts_gemm() grid(%bx) = affine_map<() -> (1)> threads(128) attributes {tmem_columns = 128 : i64} {
  %a = tile.alloc {offset = 64 : i64} : memref<128x32xbf16, #tile.space<tmem>>
  %b = tile.alloc {layout = #tile.shared<[32, 64], elem = 2, swizzle = 128, pad = 0>} : memref<32x64xbf16, #tile.space<shared>>
  %acc = tile.alloc {offset = 0 : i64} : memref<128x64xf32, #tile.space<tmem>>
  tile.gemm %a, %b, %acc {instruction = #tile.instr<tcgen05>, warps = array<i64: 1, 1>, clear_accum} : memref<128x32xbf16, #tile.space<tmem>>, memref<32x64xbf16, #tile.space<shared>>, memref<128x64xf32, #tile.space<tmem>>
}

// -----

// Tensor memory to shared memory goes through registers: a .x32 load of
// the thread's row, waited for, then the stores.
// SM100-LABEL: tile.kernel @tmem_to_shared
// SM100: tilenv.tcgen05_ld %{{.*}} -> %{{.*}} s32x32b x 32
// SM100-NEXT: tilenv.tcgen05_wait_ld
// SM100-NEXT: tilenv.tcgen05_fence_before
// SM100: memref.store
tile.kernel @tmem_to_shared() grid(%bx) = affine_map<() -> (1)> threads(128) attributes {tmem_columns = 32 : i64} {
  %t = tile.alloc {offset = 0 : i64} : memref<128x32xf32, #tile.space<tmem>>
  %s = tile.alloc : memref<128x32xf32, #tile.space<shared>>
  tile.copy %t, %s {tmem_group_columns = 32 : i64} : memref<128x32xf32, #tile.space<tmem>>, memref<128x32xf32, #tile.space<shared>>
}

// -----

// P over S: the alias's address is S's first column (S at column 128 here),
// its 128 packed bf16 values 64 columns, stored as 32-bit pairs.
// SM100-LABEL: tile.kernel @p_over_s
// SM100: %[[BASE:.*]] = memref.load %{{.*}} : memref<1xi32, #tile.space<shared>>
// SM100: tilenv.pack_pair
// SM100: tilenv.tcgen05_st %{{.*}}[%{{.*}}] -> %{{.*}} s32x32b x 64
tile.kernel @p_over_s() grid(%bx) = affine_map<() -> (1)> threads(128) attributes {tmem_columns = 256 : i64} {
  %o = tile.alloc {offset = 0 : i64} : memref<128x128xf32, #tile.space<tmem>>
  %s = tile.alloc {offset = 128 : i64} : memref<128x128xf32, #tile.space<tmem>>
  %p = tile.tmem_alias %s : memref<128x128xf32, #tile.space<tmem>> -> memref<128x128xbf16, #tile.space<tmem>>
  %pf = tile.alloc {layout = #tile.fragment<[128, 128], reg = [[0, 1], [0, 2], [0, 4], [0, 8], [0, 16], [0, 32], [0, 64]], lane = [[1, 0], [2, 0], [4, 0], [8, 0], [16, 0]], warp = [[32, 0], [64, 0]]>} : memref<128x128xbf16, #tile.space<fragment>>
  tile.copy %pf, %p {tmem_group_columns = 64 : i64} : memref<128x128xbf16, #tile.space<fragment>>, memref<128x128xbf16, #tile.space<tmem>>
}

// -----

// A wait on an mbarrier in a kernel with tensor memory may hand columns
// over (an MMA's commit, another role's tcgen05.st): the tcgen05 accesses
// after it are ordered by tcgen05.fence::after_thread_sync.
// SM100-LABEL: tile.kernel @wait_then_tmem
// SM100: tilenv.mbarrier_wait
// SM100-NEXT: tilenv.tcgen05_fence_after
tile.kernel @wait_then_tmem() grid(%bx) = affine_map<() -> (1)> threads(128) attributes {tmem_columns = 32 : i64} {
  %c0 = arith.constant 0 : index
  %t = tile.alloc {offset = 0 : i64} : memref<128x32xf32, #tile.space<tmem>>
  %bars = tile.alloc : memref<1xi64, #tile.space<shared>>
  tile.mbarrier_wait %bars[%c0] parity %c0 : memref<1xi64, #tile.space<shared>>
}

// -----

// A block-scaled gemm (kind::mxf8f6f4), K 256 = two groups of 4 scale
// blocks, N 256 = two atoms of B's scales: thread 0 copies each 512-byte
// atom (no swizzle, rows 16 B apart, 8-row core matrices 128 B apart) into
// its 4 scale columns by tcgen05.cp .32x128b.warpx4 (group 0: A's at 256, B's
// at 288 and 292; group 1: 260, 296 and 300), then one MMA per 32 of K,
// its descriptor carrying the step's scale-factor ids (bits 29-30 and 4-5)
// and its scale addresses the group's columns.
// SM100-LABEL: tile.kernel @block_scaled
// SM100: scf.if
// SM100: tilenv.tcgen05_idesc m = 128 n = 256 f8E4M3FN -> f32 block_scaled
// SM100: %[[A0:.*]] = tilenv.tcgen05_smem_desc %{{.*}} lbo = 16 sbo = 128 swizzle = 0
// SM100-NEXT: %[[C256:.*]] = arith.constant 256 : index
// SM100: tilenv.tcgen05_cp %[[A0]] -> %{{.*}} s32x128b_warpx4
// SM100-COUNT-5: tilenv.tcgen05_cp
// SM100: scf.for
// SM100: arith.ori
// SM100: tilenv.tcgen05_mma {{.*}} scales({{.*}}) kind mxf8f6f4 : i64
// SM100: tilenv.tcgen05_commit
tile.kernel @block_scaled() grid(%bx) = affine_map<() -> (1)> threads(128) attributes {tmem_columns = 512 : i64} {
  %a = tile.alloc {layout = #tile.shared<[128, 256], elem = 1, swizzle = 128, pad = 0>} : memref<128x256xf8E4M3FN, #tile.space<shared>>
  %b = tile.alloc {layout = #tile.shared<[256, 256], elem = 1, swizzle = 128, pad = 0>} : memref<256x256xf8E4M3FN, #tile.space<shared>>
  %sa = tile.alloc {layout = #tile.shared<[2, 512], elem = 1, swizzle = 0, pad = 0>} : memref<2x512xf8E8M0FNU, #tile.space<shared>>
  %sb = tile.alloc {layout = #tile.shared<[2, 1024], elem = 1, swizzle = 0, pad = 0>} : memref<2x1024xf8E8M0FNU, #tile.space<shared>>
  %acc = tile.alloc {offset = 0 : i64} : memref<128x256xf32, #tile.space<tmem>>
  tile.gemm %a, %b, %acc scales(%sa, %sb : memref<2x512xf8E8M0FNU, #tile.space<shared>>, memref<2x1024xf8E8M0FNU, #tile.space<shared>>) {instruction = #tile.instr<tcgen05>, warps = array<i64: 1, 1>, scale_a_column = 256 : i64, scale_b_column = 288 : i64, transpose_b, clear_accum} : memref<128x256xf8E4M3FN, #tile.space<shared>>, memref<256x256xf8E4M3FN, #tile.space<shared>>, memref<128x256xf32, #tile.space<tmem>>
}

// -----

// Each warp of a warpgroup reaches its quarter of tensor memory's lanes:
// fewer threads than a warpgroup is an error, not a division by zero.
tile.kernel @tmem_copy_on_one_thread() grid(%bx) = affine_map<() -> (1)> threads(1) attributes {tmem_columns = 128 : i64} {
  %t = tile.alloc {offset = 0 : i64} : memref<128x128xf32, #tile.space<tmem>>
  %f = tile.alloc {layout = #tile.fragment<[128, 128], reg = [[0, 1], [0, 2], [0, 4], [0, 8], [0, 16], [0, 32], [0, 64]], lane = [[1, 0], [2, 0], [4, 0], [8, 0], [16, 0]], warp = [[32, 0], [64, 0]]>} : memref<128x128xf32, #tile.space<fragment>>
  // expected-error @+1 {{tensor memory is reached by whole warpgroups (each warp its quarter of the 128 lanes); this code runs on 1 threads}}
  tile.copy %f, %t {tmem_group_columns = 128 : i64} : memref<128x128xf32, #tile.space<fragment>>, memref<128x128xf32, #tile.space<tmem>>
}
