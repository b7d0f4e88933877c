// sm_100a parts of tessel-layout-inference: gemms into tensor memory and
// the fragments copied to and from it.
// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_100a}))' | FileCheck %s
// RUN: not tessel-opt %s -split-input-file -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_90a}))' 2>&1 | FileCheck %s --check-prefix=HOPPER

#s = #tile.space<shared>
#f = #tile.space<fragment>
#t = #tile.space<tmem>

// An accumulator in tensor memory makes the gemm tcgen05.mma, its operands
// swizzled for descriptors; a fragment copied out of tensor memory by two
// warpgroups takes the .32x32b layout: lanes and warps 0-3 (mod 4) on rows,
// registers on the warpgroup's 32 columns, the warpgroup on the column half.
// CHECK-LABEL: tile.kernel @tcgen05_gemm
// CHECK: tile.alloc {layout = #tile.shared<[128, 64], elem = 2, swizzle = 128, pad = 0>}
// CHECK: tile.alloc {layout = #tile.shared<[64, 128], elem = 2, swizzle = 128, pad = 0>}
// CHECK: tile.alloc {layout = #tile.fragment<[128, 64], reg = {{\[\[}}0, 1], [0, 2], [0, 4], [0, 8], [0, 16]], lane = {{\[\[}}1, 0], [2, 0], [4, 0], [8, 0], [16, 0]], warp = {{\[\[}}32, 0], [64, 0], [0, 32]]>}
// CHECK: tile.gemm {{.*}} {instruction = #tile.instr<tcgen05>, warps = array<i64: 1, 1>}
// HOPPER: error: a gemm into tensor memory is tcgen05.mma, sm_100a's; the target is sm_90a
tile.kernel @tcgen05_gemm() grid(%bx) = affine_map<() -> (1)> threads(256) {
  %a = tile.alloc : memref<128x64xf16, #s>
  %b = tile.alloc : memref<64x128xf16, #s>
  %acc = tile.alloc : memref<128x128xf32, #t>
  %part = tile.alloc : memref<128x64xf32, #f>
  tile.gemm %a, %b, %acc : memref<128x64xf16, #s>, memref<64x128xf16, #s>, memref<128x128xf32, #t>
  %c0 = arith.constant 0 : index
  %view = tile.region %acc[%c0, %c0] [128, 64] : memref<128x128xf32, #t> -> memref<128x64xf32, strided<[128, 1], offset: ?>, #t>
  tile.copy %view, %part : memref<128x64xf32, strided<[128, 1], offset: ?>, #t>, memref<128x64xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>
#t = #tile.space<tmem>

// tcgen05 computes all 128 lanes.
tile.kernel @short_tile() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x64xf16, #s>
  %b = tile.alloc : memref<64x128xf16, #s>
  %acc = tile.alloc : memref<64x128xf32, #t>
  // expected-error @+1 {{tcgen05 gemm computes all 128 lanes (M = 128); got M = 64}}
  tile.gemm %a, %b, %acc : memref<64x64xf16, #s>, memref<64x128xf16, #s>, memref<64x128xf32, #t>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>
#t = #tile.space<tmem>

// N is 16 to 256 in steps of 16 for M = 128.
tile.kernel @wide_tile() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<128x16xf16, #s>
  %b = tile.alloc : memref<16x512xf16, #s>
  %acc = tile.alloc : memref<128x512xf32, #t>
  // expected-error @+1 {{tcgen05.mma with M = 128 takes N from 16 to 256 in steps of 16; got N = 512}}
  tile.gemm %a, %b, %acc : memref<128x16xf16, #s>, memref<16x512xf16, #s>, memref<128x512xf32, #t>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>
#t = #tile.space<tmem>

// A from registers has no tcgen05 form (the ts form reads tensor memory).
tile.kernel @a_in_registers() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<128x16xf16, #f>
  %b = tile.alloc : memref<16x64xf16, #s>
  %acc = tile.alloc : memref<128x64xf32, #t>
  // expected-error @+1 {{tcgen05 gemm takes A from shared or tensor memory, not registers}}
  tile.gemm %a, %b, %acc : memref<128x16xf16, #f>, memref<16x64xf16, #s>, memref<128x64xf32, #t>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>
#t = #tile.space<tmem>

// Forcing another instruction onto a tensor-memory accumulator is an error.
tile.kernel @forced_wgmma() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<128x16xf16, #s>
  %b = tile.alloc : memref<16x64xf16, #s>
  %acc = tile.alloc : memref<128x64xf32, #t>
  // expected-error @+1 {{a gemm into tensor memory is tcgen05.mma, not wgmma}}
  tile.gemm %a, %b, %acc {instruction = #tile.instr<wgmma>} : memref<128x16xf16, #s>, memref<16x64xf16, #s>, memref<128x64xf32, #t>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>
#t = #tile.space<tmem>

// Tensor memory moves to and from fragments, shared or global memory.
tile.kernel @tmem_to_tmem() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %s = tile.alloc : memref<128x32xf32, #t>
  %t = tile.alloc : memref<128x32xf32, #t>
  // expected-error @+1 {{tensor memory is copied to and from fragments, shared or global memory, not tmem memory}}
  tile.copy %s, %t : memref<128x32xf32, #t>, memref<128x32xf32, #t>
}

// -----

#s = #tile.space<shared>
#t = #tile.space<tmem>

// The ts form: A [128, K] packed in tensor memory.
// CHECK-LABEL: tile.kernel @a_in_tmem
// CHECK: tile.gemm {{.*}} {instruction = #tile.instr<tcgen05>, warps = array<i64: 1, 1>}
tile.kernel @a_in_tmem() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<128x32xbf16, #t>
  %b = tile.alloc : memref<32x64xbf16, #s>
  %acc = tile.alloc : memref<128x64xf32, #t>
  tile.gemm %a, %b, %acc : memref<128x32xbf16, #t>, memref<32x64xbf16, #s>, memref<128x64xf32, #t>
}

// -----

#s = #tile.space<shared>
#t = #tile.space<tmem>

// Unpacked (one value a column) is the accumulator format, not A's.
tile.kernel @a_unpacked() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc {unpacked} : memref<128x32xbf16, #t>
  %b = tile.alloc : memref<32x64xbf16, #s>
  %acc = tile.alloc : memref<128x64xf32, #t>
  // expected-error @+1 {{a tcgen05 operand A in tensor memory is [128, K], K-major and packed (two 16-bit values a column), got 'memref<128x32xbf16, #tile.space<tmem>>' unpacked}}
  tile.gemm %a, %b, %acc : memref<128x32xbf16, #t>, memref<32x64xbf16, #s>, memref<128x64xf32, #t>
}
