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

// A tile op on tensor memory has no tcgen05 lowering yet.
tile.kernel @tmem_copy() grid(%bx) = affine_map<() -> (1)> threads(128) attributes {tmem_columns = 32 : i64} {
  %t = tile.alloc {offset = 0 : i64} : memref<128x32xf32, #tile.space<tmem>>
  %s = tile.alloc : memref<128x32xf32, #tile.space<shared>>
  // expected-error @+1 {{tile ops on tensor memory are not lowered to tcgen05 yet}}
  tile.copy %s, %t : memref<128x32xf32, #tile.space<shared>>, memref<128x32xf32, #tile.space<tmem>>
}

// -----

// Not placed: the allocation pass comes first.
// expected-error @+1 {{tensor memory is not placed; run tessel-tmem-allocation first}}
tile.kernel @unplaced() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %t = tile.alloc : memref<128x32xf32, #tile.space<tmem>>
}
