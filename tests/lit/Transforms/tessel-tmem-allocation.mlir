// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-tmem-allocation{arch=sm_100a}))' | FileCheck %s
// RUN: not tessel-opt %s -split-input-file -pass-pipeline='builtin.module(tile.kernel(tessel-tmem-allocation{arch=sm_90a}))' 2>&1 | FileCheck %s --check-prefix=HOPPER
// RUN: not tessel-opt %s -split-input-file -pass-pipeline='builtin.module(tile.kernel(tessel-tmem-allocation{arch=sm_100a-emu}))' 2>/dev/null | FileCheck %s --check-prefix=EMU
// The emulation target marks the kernels whose tcgen05 ops it emulates.
// EMU: tile.kernel @attention_like() {{.*}}tcgen05_emulated

// Widest first, each a power of two of at least 32 columns: the f32
// accumulator (256 columns) at 0, packed bf16 P [128, 128] (64 columns) at
// 256, the unpacked f16 [128, 48] (48 -> 64) at 320, a 16-column row
// vector (-> 32) at 384. 416 columns in all: tcgen05.alloc takes 512.
// CHECK-LABEL: tile.kernel @attention_like
// CHECK-SAME: tmem_columns = 512
// CHECK: tile.alloc {name = "p", offset = 256 : i64} : memref<128x128xbf16, #tile.space<tmem>>
// CHECK: tile.alloc {name = "o16", offset = 320 : i64, unpacked} : memref<128x48xf16, #tile.space<tmem>>
// CHECK: tile.alloc {name = "s", offset = 0 : i64} : memref<128x256xf32, #tile.space<tmem>>
// CHECK: tile.alloc {name = "stats", offset = 384 : i64} : memref<128x16xf32, #tile.space<tmem>>
// HOPPER: error: tensor memory is sm_100a's; this kernel compiles for sm_90a
tile.kernel @attention_like() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %p = tile.alloc {name = "p"} : memref<128x128xbf16, #tile.space<tmem>>
  %o16 = tile.alloc {name = "o16", unpacked} : memref<128x48xf16, #tile.space<tmem>>
  %s = tile.alloc {name = "s"} : memref<128x256xf32, #tile.space<tmem>>
  %stats = tile.alloc {name = "stats"} : memref<128x16xf32, #tile.space<tmem>>
}

// -----

// One 64-row accumulator of 24 columns: 32 columns, tcgen05.alloc's minimum.
// CHECK-LABEL: tile.kernel @small
// CHECK-SAME: tmem_columns = 32
// CHECK: tile.alloc {offset = 0 : i64} : memref<64x24xf32, #tile.space<tmem>>
tile.kernel @small() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %acc = tile.alloc : memref<64x24xf32, #tile.space<tmem>>
}

// -----

// No tensor memory: nothing changes, on any target.
// CHECK-LABEL: tile.kernel @none
// CHECK-NOT: tmem_columns
tile.kernel @none() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %x = tile.alloc : memref<128x64xf32, #tile.space<shared>>
}

// -----

// Two 256-column accumulators and one more buffer do not fit: the error
// lists every buffer with its columns.
// expected-error @+1 {{tensor-memory buffers need 544 columns; a block has 512}}
tile.kernel @too_many() grid(%bx) = affine_map<() -> (1)> threads(128) {
  // expected-note @+1 {{'s0' 'memref<128x256xf32, #tile.space<tmem>>': 256 columns, allocated as 256}}
  %s0 = tile.alloc {name = "s0"} : memref<128x256xf32, #tile.space<tmem>>
  // expected-note @+1 {{'s1' 'memref<128x256xf32, #tile.space<tmem>>': 256 columns, allocated as 256}}
  %s1 = tile.alloc {name = "s1"} : memref<128x256xf32, #tile.space<tmem>>
  // expected-note @+1 {{a buffer 'memref<128x40xbf16, #tile.space<tmem>>': 20 columns, allocated as 32}}
  %p = tile.alloc : memref<128x40xbf16, #tile.space<tmem>>
}

// -----

// Every copy and fill of tensor memory records the step between warpgroups'
// column shares, in 32-bit columns: two warpgroups split a packed bf16
// [128, 128] P into 64 values each, which is 32 columns (the seed's bug
// stepped by 64); an f32 [128, 64] view splits into 32 columns each.
// CHECK-LABEL: tile.kernel @group_steps
// CHECK: tile.fill %{{.*}} {tmem_group_columns = 64 : i64}
// CHECK: tile.copy %{{.*}} {tmem_group_columns = 32 : i64} : memref<128x128xbf16, #tile.space<fragment>>
// CHECK: tile.copy %{{.*}} {tmem_group_columns = 32 : i64} : memref<128x64xf32, strided
// CHECK: tile.copy %{{.*}} {tmem_group_columns = 64 : i64} : memref<128x128xf16, #tile.space<fragment>>
tile.kernel @group_steps() grid(%bx) = affine_map<() -> (1)> threads(256) {
  %acc = tile.alloc : memref<128x128xf32, #tile.space<tmem>>
  %p = tile.alloc : memref<128x128xbf16, #tile.space<tmem>>
  %o16 = tile.alloc {unpacked} : memref<128x128xf16, #tile.space<tmem>>
  %pf = tile.alloc : memref<128x128xbf16, #tile.space<fragment>>
  %of = tile.alloc : memref<128x128xf16, #tile.space<fragment>>
  %part = tile.alloc : memref<128x64xf32, #tile.space<fragment>>
  %zero = arith.constant 0.0 : f32
  tile.fill %acc, %zero : memref<128x128xf32, #tile.space<tmem>>, f32
  tile.copy %pf, %p : memref<128x128xbf16, #tile.space<fragment>>, memref<128x128xbf16, #tile.space<tmem>>
  %c0 = arith.constant 0 : index
  %c64 = arith.constant 64 : index
  %view = tile.region %acc[%c0, %c64] [128, 64] : memref<128x128xf32, #tile.space<tmem>> -> memref<128x64xf32, strided<[128, 1], offset: ?>, #tile.space<tmem>>
  tile.copy %view, %part : memref<128x64xf32, strided<[128, 1], offset: ?>, #tile.space<tmem>>, memref<128x64xf32, #tile.space<fragment>>
  // Unpacked 16-bit values take a column each.
  tile.copy %of, %o16 : memref<128x128xf16, #tile.space<fragment>>, memref<128x128xf16, #tile.space<tmem>>
}

// -----

// Warpgroups move whole tiles: a thread count that is not one is refused.
tile.kernel @partial_warpgroup() grid(%bx) = affine_map<() -> (1)> threads(64) {
  %acc = tile.alloc : memref<128x32xf32, #tile.space<tmem>>
  %zero = arith.constant 0.0 : f32
  // expected-error @+1 {{tensor memory is copied by whole warpgroups (warp w reaches lanes 32 * (w % 4) onwards); this code runs on 64 threads}}
  tile.fill %acc, %zero : memref<128x32xf32, #tile.space<tmem>>, f32
}

// -----

// A share of columns that is not a power of two is refused.
tile.kernel @uneven_shares() grid(%bx) = affine_map<() -> (1)> threads(256) {
  %acc = tile.alloc : memref<128x96xf32, #tile.space<tmem>>
  %zero = arith.constant 0.0 : f32
  // expected-error @+1 {{the 2 warpgroups split the tile's 96 columns into equal power-of-two shares; they cannot}}
  tile.fill %acc, %zero : memref<128x96xf32, #tile.space<tmem>>, f32
}

// -----

// P over S: an alias takes no columns of its own (S's 128 columns and
// O's 128: 256 in all), and its copies step by its own packing (64 bf16
// values a warpgroup are 32 columns).
// CHECK-LABEL: tile.kernel @p_over_s
// CHECK-SAME: tmem_columns = 256
// CHECK: tile.copy %{{.*}} {tmem_group_columns = 32 : i64} : memref<128x128xbf16, #tile.space<fragment>>
tile.kernel @p_over_s() grid(%bx) = affine_map<() -> (1)> threads(256) {
  %s = tile.alloc : memref<128x128xf32, #tile.space<tmem>>
  %o = tile.alloc : memref<128x128xf32, #tile.space<tmem>>
  %p = tile.tmem_alias %s : memref<128x128xf32, #tile.space<tmem>> -> memref<128x128xbf16, #tile.space<tmem>>
  %pf = tile.alloc : memref<128x128xbf16, #tile.space<fragment>>
  tile.copy %pf, %p : memref<128x128xbf16, #tile.space<fragment>>, memref<128x128xbf16, #tile.space<tmem>>
}

// -----

// An alias must fit in its source's columns.
tile.kernel @alias_too_wide() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %s = tile.alloc : memref<128x64xf32, #tile.space<tmem>>
  // expected-error @+1 {{the alias needs 128 columns; its source has 64}}
  %p = tile.tmem_alias %s : memref<128x64xf32, #tile.space<tmem>> -> memref<128x128xf32, #tile.space<tmem>>
}

// -----

// A block-scaled gemm (K 256: two groups of 4 scale blocks, N 256: two
// 128-column atoms of B's) gets scale buffers of its own: A's 2 x 4 columns
// and B's 2 x 2 x 4 (each -> 32), placed after the accumulator, their
// columns recorded on the gemm.
// CHECK-LABEL: tile.kernel @block_scaled
// CHECK-SAME: tmem_columns = 512
// CHECK: tile.alloc {name = "scale_a_tmem", offset = 256 : i64} : memref<128x8xi32, #tile.space<tmem>>
// CHECK: tile.alloc {name = "scale_b_tmem", offset = 288 : i64} : memref<128x16xi32, #tile.space<tmem>>
// CHECK: tile.gemm {{.*}} scales({{.*}}) {{{.*}}scale_a_column = 256 : i64, scale_b_column = 288 : i64
tile.kernel @block_scaled() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<128x256xf8E4M3FN, #tile.space<shared>>
  %b = tile.alloc : memref<256x256xf8E4M3FN, #tile.space<shared>>
  %sa = tile.alloc : memref<2x512xf8E8M0FNU, #tile.space<shared>>
  %sb = tile.alloc : memref<2x1024xf8E8M0FNU, #tile.space<shared>>
  %acc = tile.alloc : memref<128x256xf32, #tile.space<tmem>>
  tile.gemm %a, %b, %acc scales(%sa, %sb : memref<2x512xf8E8M0FNU, #tile.space<shared>>, memref<2x1024xf8E8M0FNU, #tile.space<shared>>) {transpose_b} : memref<128x256xf8E4M3FN, #tile.space<shared>>, memref<256x256xf8E4M3FN, #tile.space<shared>>, memref<128x256xf32, #tile.space<tmem>>
}
