// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_80}))' | FileCheck %s
// RUN: tessel-opt %s -split-input-file -verify-diagnostics=only-expected -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_90a}))' | FileCheck %s --check-prefix=HOPPER
// On sm_90a a gemm that gets mma.sync without asking says why it is not
// wgmma (the sm_80 run above checks that nothing else is said).
// RUN: not tessel-opt %s -split-input-file -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_90a}))' 2>&1 >/dev/null | FileCheck %s --check-prefix=SLOW
// SLOW: remark: tessel-layout-inference [tensor-cores]: this gemm runs on mma.sync, not wgmma: its [32, 128] tile cannot be split full_col over 1 warpgroups of a multiple of 64 rows and 8 to 256 columns each
// SLOW: remark: tessel-layout-inference [tensor-cores]: this gemm runs on mma.sync, not wgmma: wgmma runs on whole warpgroups and this code runs on 32 threads

#s = #tile.space<shared>
#f = #tile.space<fragment>

// mma.sync, square policy: 4 warps as 2 x 2, each a 32 x 32 tile of four
// 16-row by 8-column accumulators (registers: column pair, row half, column
// tile x2, row tile). Warp bit 0 steps the columns, bit 1 the rows. The
// shared operands get the widest swizzle their rows allow.
// CHECK-LABEL: tile.kernel @square
// CHECK: tile.alloc {layout = #tile.shared<[64, 32], elem = 2, swizzle = 64, pad = 0>}
// CHECK: tile.alloc {layout = #tile.shared<[32, 64], elem = 2, swizzle = 128, pad = 0>}
// CHECK: tile.alloc {layout = #tile.fragment<[64, 64], reg = {{\[}}[0, 1], [8, 0], [0, 8], [0, 16], [16, 0]], lane = {{\[}}[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = {{\[}}[0, 32], [32, 0]]>}
// CHECK: tile.gemm {{.*}}instruction = #tile.instr<mma_sync>, warps = array<i64: 2, 2>
// wgmma on sm_90a: one warpgroup, each warp 16 rows, 64 columns in eight
// 8-column register groups.
// HOPPER-LABEL: tile.kernel @square
// HOPPER: tile.alloc {layout = #tile.fragment<[64, 64], reg = {{\[}}[0, 1], [8, 0], [0, 8], [0, 16], [0, 32]], lane = {{\[}}[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = {{\[}}[16, 0], [32, 0]]>}
// HOPPER: tile.gemm {{.*}}instruction = #tile.instr<wgmma>, warps = array<i64: 1, 1>
tile.kernel @square() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x32xf16, #s>
  %b = tile.alloc : memref<32x64xf16, #s>
  %c = tile.alloc : memref<64x64xf32, #f>
  tile.gemm %a, %b, %c : memref<64x32xf16, #s>, memref<32x64xf16, #s>, memref<64x64xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// full_col puts all warps along N; a 32-row tile is too small for wgmma's 64
// rows, so sm_90a also uses mma.sync.
// CHECK-LABEL: tile.kernel @full_col
// CHECK: tile.alloc {layout = #tile.fragment<[32, 128], reg = {{\[}}[0, 1], [8, 0], [0, 8], [0, 16], [16, 0]], lane = {{\[}}[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = {{\[}}[0, 32], [0, 64]]>}
// CHECK: warps = array<i64: 1, 4>
// HOPPER-LABEL: tile.kernel @full_col
// HOPPER: instruction = #tile.instr<mma_sync>, policy = #tile.policy<full_col>, transpose_b, warps = array<i64: 1, 4>
tile.kernel @full_col() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<32x32xf16, #s>
  %b = tile.alloc : memref<128x32xf16, #s>
  %c = tile.alloc : memref<32x128xf32, #f>
  tile.gemm %a, %b, %c {transpose_b, policy = #tile.policy<full_col>} : memref<32x32xf16, #s>, memref<128x32xf16, #s>, memref<32x128xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// full_row: warps along M. The parallel loop inherits the accumulator's
// layout, and the row maximum gets it without the column bits: one register
// (rows +8), replicated over the two lane bits that stepped the columns.
// CHECK-LABEL: tile.kernel @full_row
// CHECK: %[[C:.*]] = tile.alloc {layout = #tile.fragment<[64, 16], reg = {{\[}}[0, 1], [8, 0], [0, 8]], lane = {{\[}}[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = {{\[}}[16, 0], [32, 0]]>}
// CHECK: tile.alloc {layout = #tile.fragment<[64], reg = {{\[}}[8]], lane = {{\[}}[0], [0], [1], [2], [4]], warp = {{\[}}[16], [32]]>}
// CHECK: warps = array<i64: 4, 1>
// CHECK: tile.parallel (%{{.*}}, %{{.*}}) in [64, 16] attributes {layout = #tile.fragment<[64, 16], reg = {{\[}}[0, 1], [8, 0], [0, 8]], lane = {{\[}}[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = {{\[}}[16, 0], [32, 0]]>}
tile.kernel @full_row() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x32xf16, #s>
  %b = tile.alloc : memref<32x16xf16, #s>
  %c = tile.alloc : memref<64x16xf32, #f>
  %m = tile.alloc : memref<64xf32, #f>
  tile.gemm %a, %b, %c {policy = #tile.policy<full_row>} : memref<64x32xf16, #s>, memref<32x16xf16, #s>, memref<64x16xf32, #f>
  tile.parallel (%i, %j) in [64, 16] {
    %x = memref.load %c[%i, %j] : memref<64x16xf32, #f>
    %y = arith.mulf %x, %x : f32
    memref.store %y, %c[%i, %j] : memref<64x16xf32, #f>
  }
  tile.reduce max %c -> %m dim = 1 clear : memref<64x16xf32, #f> -> memref<64xf32, #f>
}

// -----

#f = #tile.space<fragment>

// Free choice, shape not a power of two and not divisible by the threads:
// padded to 64 x 32 (the padding is skipped when lowering), four f32 per
// 16-byte vector, lanes along the columns then rows, the one warp bit on the
// slowest row bit, the remaining row bits in registers.
// CHECK-LABEL: tile.kernel @odd_shape
// CHECK: tile.alloc {layout = #tile.fragment<[45, 20], reg = {{\[}}[0, 1], [0, 2], [4, 0], [8, 0], [16, 0]], lane = {{\[}}[0, 4], [0, 8], [0, 16], [1, 0], [2, 0]], warp = {{\[}}[32, 0]]>}
tile.kernel @odd_shape(%x: memref<45x20xf32, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(64) {
  %t = tile.alloc : memref<45x20xf32, #f>
  tile.copy %x, %t : memref<45x20xf32, #tile.space<global>>, memref<45x20xf32, #f>
}

// -----

#f = #tile.space<fragment>

// An annotated fragment layout is a strict constraint and flows to the loop;
// a row with fewer elements than lanes replicates (zero lane bases).
// CHECK-LABEL: tile.kernel @annotated
// CHECK: tile.alloc {layout = #tile.fragment<[4, 8], reg = [], lane = {{\[}}[0, 1], [0, 2], [0, 4], [1, 0], [2, 0]], warp = []>}
// CHECK: tile.parallel {{.*}} attributes {layout = #tile.fragment<[4, 8], reg = [], lane = {{\[}}[0, 1], [0, 2], [0, 4], [1, 0], [2, 0]], warp = []>}
tile.kernel @annotated() grid(%bx) = affine_map<() -> (1)> threads(32) {
  %t = tile.alloc : memref<4x8xf32, #f>
  tile.annotate_layout %t : memref<4x8xf32, #f> to #tile.fragment<[4, 8], reg = [], lane = [[0, 1], [0, 2], [0, 4], [1, 0], [2, 0]], warp = []>
  tile.parallel (%i, %j) in [4, 8] {
    %one = arith.constant 1.0 : f32
    memref.store %one, %t[%i, %j] : memref<4x8xf32, #f>
  }
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// A conflict names both ops and both layouts.
tile.kernel @conflict() grid(%bx) = affine_map<() -> (1)> threads(32) {
  %a = tile.alloc : memref<16x16xf16, #s>
  %b = tile.alloc : memref<16x8xf16, #s>
  // expected-note @+1 {{the fragment is allocated here}}
  %c = tile.alloc : memref<16x8xf32, #f>
  // expected-note @+1 {{the other layout comes from here}}
  tile.annotate_layout %c : memref<16x8xf32, #f> to #tile.fragment<[16, 8], reg = [[0, 1], [0, 2], [0, 4], [8, 0]], lane = [[1, 0], [2, 0], [4, 0], [0, 0], [0, 0]], warp = []>
  // expected-error @+1 {{layout conflict on a fragment: 'tile.gemm' needs #tile.fragment<[16, 8], reg = [[0, 1], [8, 0]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = []> but 'tile.annotate_layout' gave it #tile.fragment<[16, 8], reg = [[0, 1], [0, 2], [0, 4], [8, 0]], lane = [[1, 0], [2, 0], [4, 0], [0, 0], [0, 0]], warp = []>}}
  tile.gemm %a, %b, %c : memref<16x16xf16, #s>, memref<16x8xf16, #s>, memref<16x8xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// A tile that the instruction and warps cannot cover names the multiple.
tile.kernel @not_a_multiple() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<16x16xf16, #s>
  %b = tile.alloc : memref<16x64xf16, #s>
  %c = tile.alloc : memref<16x64xf32, #f>
  // expected-error @+1 {{gemm tile [16, 64] cannot be split full_row over 4 warps for mma.sync m16n8k16: M must be a multiple of 64 (16 x 4 warps) and N a multiple of 8 (8 x 1 warps)}}
  tile.gemm %a, %b, %c {policy = #tile.policy<full_row>} : memref<16x16xf16, #s>, memref<16x64xf16, #s>, memref<16x64xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

tile.kernel @k_not_16() grid(%bx) = affine_map<() -> (1)> threads(32) {
  %a = tile.alloc : memref<16x8xf16, #s>
  %b = tile.alloc : memref<8x8xf16, #s>
  %c = tile.alloc : memref<16x8xf32, #f>
  // expected-error @+1 {{gemm K (8) must be a multiple of 16, the K of the tensor-core instruction}}
  tile.gemm %a, %b, %c : memref<16x8xf16, #s>, memref<8x8xf16, #s>, memref<16x8xf32, #f>
}

// -----

#f = #tile.space<fragment>

// Registers are a limit the compiler checks, not one found by a crash.
// expected-error @+1 {{fragments need 256 32-bit registers per thread; at most 224 fit}}
tile.kernel @too_many_registers() grid(%bx) = affine_map<() -> (1)> threads(32) {
  // expected-note @+1 {{256 registers for 'memref<64x128xf32, #tile.space<fragment>>'}}
  %t = tile.alloc : memref<64x128xf32, #f>
  %z = arith.constant 0.0 : f32
  tile.fill %t, %z : memref<64x128xf32, #f>, f32
}

// -----

#f = #tile.space<fragment>

// Fragments used only inside one loop iteration count from their first to
// their last use: two of 128 registers in turn fit beside a bf16 fragment
// that lives throughout, whose 16-bit elements pack in pairs (64 registers,
// not 128).
// HOPPER-LABEL: tile.kernel @registers_in_turn
tile.kernel @registers_in_turn(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  %zh = arith.constant 0.0 : bf16
  %a = tile.alloc : memref<32x128xf32, #f>
  %b = tile.alloc : memref<32x128xf32, #f>
  %h = tile.alloc : memref<32x128xbf16, #f>
  tile.fill %h, %zh : memref<32x128xbf16, #f>, bf16
  scf.for %i = %c0 to %n step %c1 {
    tile.fill %a, %z : memref<32x128xf32, #f>, f32
    tile.fill %b, %z : memref<32x128xf32, #f>, f32
  }
}

// -----

#f = #tile.space<fragment>

// The same two fragments live at once do not fit.
// expected-error @+1 {{fragments need 256 32-bit registers per thread; at most 224 fit}}
tile.kernel @registers_at_once(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  // expected-note @+1 {{128 registers for 'memref<32x128xf32, #tile.space<fragment>>'}}
  %a = tile.alloc : memref<32x128xf32, #f>
  // expected-note @+1 {{128 registers for 'memref<32x128xf32, #tile.space<fragment>>'}}
  %b = tile.alloc : memref<32x128xf32, #f>
  scf.for %i = %c0 to %n step %c1 {
    tile.fill %a, %z : memref<32x128xf32, #f>, f32
    tile.fill %b, %z : memref<32x128xf32, #f>, f32
    tile.fill %a, %z : memref<32x128xf32, #f>, f32
  }
}

// -----

#f = #tile.space<fragment>

// Scalar code outside tile.parallel cannot reach a fragment's registers;
// the message says where they are read.
tile.kernel @scalar_access() grid(%bx) = affine_map<() -> (1)> threads(32) {
  %c0 = arith.constant 0 : index
  %t = tile.alloc : memref<4xf32, #f>
  // expected-error @+1 {{a fragment is read or written outside parallel(): element code reaches a fragment's registers only inside parallel()}}
  %x = memref.load %t[%c0] : memref<4xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// P x V with P in registers: the bf16 P takes the scores' accumulator
// layout through the element-wise cast, and that is the layout the second
// gemm reads A in (the accumulator layout of [M, K] on the same warps along
// M), so nothing moves through shared memory.
// CHECK-LABEL: tile.kernel @register_a
// CHECK: %[[S:.*]] = tile.alloc {layout = #tile.fragment<[64, 32], reg = {{\[}}[0, 1], [8, 0], [0, 8], [0, 16]], lane = {{\[}}[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = {{\[}}[16, 0], [32, 0]]>}
// CHECK-NEXT: %[[P:.*]] = tile.alloc {layout = #tile.fragment<[64, 32], reg = {{\[}}[0, 1], [8, 0], [0, 8], [0, 16]], lane = {{\[}}[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = {{\[}}[16, 0], [32, 0]]>}
// CHECK: tile.gemm %[[P]], {{.*}}instruction = #tile.instr<mma_sync>, warps = array<i64: 4, 1>
// HOPPER-LABEL: tile.kernel @register_a
// HOPPER: tile.gemm %{{.*}}, {{.*}}instruction = #tile.instr<wgmma>, warps = array<i64: 1, 1>}{{.*}}memref<64x32xbf16
tile.kernel @register_a() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %q = tile.alloc : memref<64x64xbf16, #s>
  %k = tile.alloc : memref<32x64xbf16, #s>
  %v = tile.alloc : memref<32x64xbf16, #s>
  %s = tile.alloc : memref<64x32xf32, #f>
  %p = tile.alloc : memref<64x32xbf16, #f>
  %o = tile.alloc : memref<64x64xf32, #f>
  tile.gemm %q, %k, %s {transpose_b, policy = #tile.policy<full_row>} : memref<64x64xbf16, #s>, memref<32x64xbf16, #s>, memref<64x32xf32, #f>
  tile.parallel (%i, %j) in [64, 32] {
    %x = memref.load %s[%i, %j] : memref<64x32xf32, #f>
    %y = arith.truncf %x : f32 to bf16
    memref.store %y, %p[%i, %j] : memref<64x32xbf16, #f>
  }
  tile.gemm %p, %v, %o : memref<64x32xbf16, #f>, memref<32x64xbf16, #s>, memref<64x64xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

tile.kernel @register_a_transposed() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %p = tile.alloc : memref<32x64xbf16, #f>
  %v = tile.alloc : memref<32x64xbf16, #s>
  %o = tile.alloc : memref<64x64xf32, #f>
  // expected-error @+1 {{a gemm operand A in registers cannot be transposed; transpose the product that produces it instead}}
  tile.gemm %p, %v, %o {transpose_a} : memref<32x64xbf16, #f>, memref<32x64xbf16, #s>, memref<64x64xf32, #f>
}

// -----

// A fragment used inside a role is spread over the role's threads (4 warps
// here), not the kernel's 8: the other warps never run its copies.
// CHECK-LABEL: tile.kernel @role_fragment
// CHECK: tile.alloc {layout = #tile.fragment<[64, 64], {{.*}} warp = {{\[\[}}16, 0], [32, 0]]>}
tile.kernel @role_fragment(%x: memref<64x64xf32>, %y: memref<64x64xf32>) grid(%bx) = affine_map<() -> (1)> threads(256) {
  %f = tile.alloc : memref<64x64xf32, #tile.space<fragment>>
  tile.role threads(128, 128) {
    tile.copy %x, %f : memref<64x64xf32>, memref<64x64xf32, #tile.space<fragment>>
    tile.copy %f, %y : memref<64x64xf32, #tile.space<fragment>>, memref<64x64xf32>
  }
}

// -----

tile.kernel @fragment_in_two_roles(%x: memref<64x64xf32>) grid(%bx) = affine_map<() -> (1)> threads(256) {
  %f = tile.alloc : memref<64x64xf32, #tile.space<fragment>>
  // expected-note @+1 {{the other use}}
  tile.copy %x, %f : memref<64x64xf32>, memref<64x64xf32, #tile.space<fragment>>
  tile.role threads(0, 128) {
    // expected-error @+1 {{this fragment is used by 128 threads here and by 256 threads elsewhere; a fragment belongs to the threads of one role (allocate one for each)}}
    tile.copy %f, %x : memref<64x64xf32, #tile.space<fragment>>, memref<64x64xf32>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// An epilogue staged in shared memory: the accumulator's copy into %staged
// writes a few bytes of 8 rows per warp instruction, so %staged takes the
// tensor cores' swizzle (copies alone touch it). %scratch is also read
// element-wise by a parallel loop and keeps the plain layout.
// CHECK-LABEL: tile.kernel @staged_epilogue
// CHECK: tile.alloc {layout = #tile.shared<[64, 64], elem = 2, swizzle = 128, pad = 0>} : memref<64x64xf16, #tile.space<shared>>
// CHECK: tile.alloc {layout = #tile.shared<[64, 64], elem = 2, swizzle = 0, pad = 0>} : memref<64x64xf16, #tile.space<shared>>
tile.kernel @staged_epilogue(%out: memref<64x64xf16, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x32xf16, #s>
  %b = tile.alloc : memref<32x64xf16, #s>
  %c = tile.alloc : memref<64x64xf32, #f>
  tile.gemm %a, %b, %c : memref<64x32xf16, #s>, memref<32x64xf16, #s>, memref<64x64xf32, #f>
  %staged = tile.alloc : memref<64x64xf16, #s>
  tile.copy %c, %staged : memref<64x64xf32, #f>, memref<64x64xf16, #s>
  tile.copy %staged, %out : memref<64x64xf16, #s>, memref<64x64xf16, #g>
  // expected-remark @+1 {{tessel-layout-inference [swizzle]: this shared buffer is not swizzled, though registers write it (a swizzle keeps their rows out of each other's banks): 'memref.load' at}}
  %scratch = tile.alloc : memref<64x64xf16, #s>
  tile.copy %c, %scratch : memref<64x64xf32, #f>, memref<64x64xf16, #s>
  tile.parallel (%i, %j) in [64, 64] {
    %v = memref.load %scratch[%i, %j] : memref<64x64xf16, #s>
    memref.store %v, %out[%i, %j] : memref<64x64xf16, #g>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// A partial sum staged for a TMA reduce-add (FlashAttention's dQ): the
// region atomic_add reads %staged through the layout's address map, so it
// takes the swizzle as a copy's source would, 128-byte panels of 32 floats
// (rows of 512 bytes unswizzled put a warp's 8 rows in the same banks).
// CHECK-LABEL: tile.kernel @staged_reduce_add
// CHECK: tile.alloc {layout = #tile.shared<[64, 128], elem = 4, swizzle = 128, pad = 0>} : memref<64x128xf32, #tile.space<shared>>
tile.kernel @staged_reduce_add(%acc: memref<64x128xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x32xf16, #s>
  %b = tile.alloc : memref<32x128xf16, #s>
  %c = tile.alloc : memref<64x128xf32, #f>
  tile.gemm %a, %b, %c : memref<64x32xf16, #s>, memref<32x128xf16, #s>, memref<64x128xf32, #f>
  %staged = tile.alloc : memref<64x128xf32, #s>
  tile.copy %c, %staged : memref<64x128xf32, #f>, memref<64x128xf32, #s>
  tile.atomic_add %staged, %acc order = relaxed {tma} : memref<64x128xf32, #s>, memref<64x128xf32, #g>
}

// -----

#f = #tile.space<fragment>
#g = #tile.space<global>

// A window of a fragment (tessel-fragment-windows gave it registers and
// copies): free windows are placed first, element-wise for their own
// shape, and the fragment around them gets a register bit for each bit
// past the window's edge (columns 16 and 32), so every window is part of
// each thread's registers.
// CHECK-LABEL: tile.kernel @free_windows
// CHECK: tile.alloc {layout = #tile.fragment<[64, 64], reg = {{\[}}[0, 1], [0, 2], [8, 0], [0, 16], [0, 32]], lane = {{\[}}[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]], warp = {{\[}}[16, 0], [32, 0]]>}
// CHECK: tile.alloc {layout = #tile.fragment<[64, 16], reg = {{\[}}[0, 1], [0, 2], [8, 0]], lane = {{\[}}[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]], warp = {{\[}}[16, 0], [32, 0]]>}
tile.kernel @free_windows(%x: memref<64x16xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %f = tile.alloc : memref<64x64xf32, #f>
  %w = tile.region %f[%c0, %c16] [64, 16] : memref<64x64xf32, #f> -> memref<64x16xf32, strided<[64, 1], offset: ?>, #f>
  %r = tile.alloc : memref<64x16xf32, #f>
  tile.copy %w, %r : memref<64x16xf32, strided<[64, 1], offset: ?>, #f>, memref<64x16xf32, #f>
  tile.copy %x, %r : memref<64x16xf32, #g>, memref<64x16xf32, #f>
  tile.copy %r, %w : memref<64x16xf32, #f>, memref<64x16xf32, strided<[64, 1], offset: ?>, #f>
}

// -----

#f = #tile.space<fragment>

// A fragment whose lanes step its columns by 16: a window of 16 columns
// would be in other threads' registers.
tile.kernel @window_across_lanes() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %z = arith.constant 0.0 : f32
  // expected-note @+2 {{the fragment's layout}}
  %f = tile.alloc : memref<64x64xf32, #f>
  tile.annotate_layout %f : memref<64x64xf32, #f> to #tile.fragment<[64, 64], reg = [[0, 1], [0, 2], [8, 0], [16, 0], [32, 0]], lane = [[0, 4], [0, 8], [0, 16], [0, 32], [1, 0]], warp = [[2, 0], [4, 0]]>
  // expected-error @+1 {{this window of a fragment is not a part of each thread's registers: the fragment's layout gives its elements past the window's edge to other threads (lane bit 2 steps to [0, 16]), so no thread holds the window alone; windows of this fragment take dimension 1 at least 64}}
  %w = tile.region %f[%c0, %c16] [64, 16] : memref<64x64xf32, #f> -> memref<64x16xf32, strided<[64, 1], offset: ?>, #f>
  %r = tile.alloc : memref<64x16xf32, #f>
  tile.copy %w, %r : memref<64x16xf32, strided<[64, 1], offset: ?>, #f>, memref<64x16xf32, #f>
  tile.fill %r, %z : memref<64x16xf32, #f>, f32
  tile.copy %r, %w : memref<64x16xf32, #f>, memref<64x16xf32, strided<[64, 1], offset: ?>, #f>
}

// -----

// An element loop that reads a fragment runs the fragment's layout, its
// iterations unrolled per thread: more than 2^16 of them is an error at the
// loop (a lowering that walked them would not end).
tile.kernel @huge_parallel(%y: memref<32x32xf32, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(64) {
  %w = tile.alloc : memref<32x32xf32, #tile.space<shared>>
  %r = tile.alloc : memref<32xf32, #tile.space<fragment>>
  tile.reduce sum %w -> %r dim = 1 clear : memref<32x32xf32, #tile.space<shared>> -> memref<32xf32, #tile.space<fragment>>
  // expected-error @+1 {{this parallel loop gives each of its 64 threads 2^32 iterations, unrolled; at most 65536 (2^16) fit}}
  tile.parallel (%i, %j) in [32, 4294967296] {
    %a = memref.load %r[%i] : memref<32xf32, #tile.space<fragment>>
    %b = memref.load %w[%i, %j] : memref<32x32xf32, #tile.space<shared>>
    %c = arith.subf %b, %a : f32
    memref.store %c, %w[%i, %j] : memref<32x32xf32, #tile.space<shared>>
  }
  tile.copy %w, %y : memref<32x32xf32, #tile.space<shared>>, memref<32x32xf32, #tile.space<global>>
}

// -----

// A loop that writes a fragment not placed yet and reads a reduction's
// result at its row index takes the reduced fragment's layout, which holds
// s(i) wherever it holds row i: 8 registers a thread, not whole rows (the
// result's own layout extended by registers over the columns). So does one
// that reads a value computed from the result (rsqrt of a sum of squares).
// CHECK-LABEL: tile.kernel @reduced_beside
// CHECK: tile.alloc {layout = #tile.fragment<[4, 256], [[XF:.*]]>}
// CHECK: tile.alloc {layout = #tile.fragment<[4], reg = []
// CHECK-NEXT: tile.alloc {layout = #tile.fragment<[4, 256], [[XF]]>}
// CHECK: tile.parallel (%{{.*}}, %{{.*}}) in [4, 256] attributes {layout = #tile.fragment<[4, 256], [[XF]]>}
#f = #tile.space<fragment>
#s = #tile.space<shared>

tile.kernel @reduced_beside(%x: memref<4x256xf32, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %xs = tile.alloc : memref<4x256xf32, #s>
  %xf = tile.alloc : memref<4x256xf32, #f>
  %s = tile.alloc : memref<4xf32, #f>
  %yf = tile.alloc : memref<4x256xf32, #f>
  tile.copy %x, %xs : memref<4x256xf32, #tile.space<global>>, memref<4x256xf32, #s>
  tile.copy %xs, %xf : memref<4x256xf32, #s>, memref<4x256xf32, #f>
  tile.reduce sum %xf -> %s dim = 1 clear : memref<4x256xf32, #f> -> memref<4xf32, #f>
  tile.parallel (%i, %j) in [4, 256] {
    %v = memref.load %xs[%i, %j] : memref<4x256xf32, #s>
    %r = memref.load %s[%i] : memref<4xf32, #f>
    %y = arith.mulf %v, %r : f32
    memref.store %y, %yf[%i, %j] : memref<4x256xf32, #f>
  }
  tile.copy %yf, %x : memref<4x256xf32, #f>, memref<4x256xf32, #tile.space<global>>
}

// -----

// CHECK-LABEL: tile.kernel @computed_from_reduced
// CHECK: tile.alloc {layout = #tile.fragment<[4, 256], [[XF:.*]]>}
// CHECK: tile.alloc {layout = #tile.fragment<[4], reg = []
// CHECK-NEXT: tile.alloc {layout = #tile.fragment<[4], reg = []
// CHECK-NEXT: tile.alloc {layout = #tile.fragment<[4, 256], [[XF]]>}
// CHECK: tile.parallel (%{{.*}}, %{{.*}}) in [4, 256] attributes {layout = #tile.fragment<[4, 256], [[XF]]>}
#f = #tile.space<fragment>
#s = #tile.space<shared>

tile.kernel @computed_from_reduced(%x: memref<4x256xf32, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %xs = tile.alloc : memref<4x256xf32, #s>
  %xf = tile.alloc : memref<4x256xf32, #f>
  %s = tile.alloc : memref<4xf32, #f>
  %t = tile.alloc : memref<4xf32, #f>
  %yf = tile.alloc : memref<4x256xf32, #f>
  tile.copy %x, %xs : memref<4x256xf32, #tile.space<global>>, memref<4x256xf32, #s>
  tile.copy %xs, %xf : memref<4x256xf32, #s>, memref<4x256xf32, #f>
  tile.reduce sum %xf -> %s dim = 1 clear : memref<4x256xf32, #f> -> memref<4xf32, #f>
  tile.parallel (%i) in [4] {
    %r = memref.load %s[%i] : memref<4xf32, #f>
    %q = math.rsqrt %r : f32
    memref.store %q, %t[%i] : memref<4xf32, #f>
  }
  tile.parallel (%i, %j) in [4, 256] {
    %v = memref.load %xs[%i, %j] : memref<4x256xf32, #s>
    %r = memref.load %t[%i] : memref<4xf32, #f>
    %y = arith.mulf %v, %r : f32
    memref.store %y, %yf[%i, %j] : memref<4x256xf32, #f>
  }
  tile.copy %yf, %x : memref<4x256xf32, #f>, memref<4x256xf32, #tile.space<global>>
}
