// Thread counts that are not powers of two: three warpgroups (384 threads),
// FlashAttention-3's 192-row tile. A layout is the one for the next power
// of two whose last threads hold only padding: the [192, 64] accumulator is
// the [256, 64] layout of four warpgroups (wgmma) or sixteen warps
// (mma.sync), the fourth warpgroup's rows all padding. An element-wise
// fragment too small for that spreads over the power of two below, the
// last warp bit replicating. Fragments still need whole warps, and a gemm
// tile must split into power-of-two shares.
// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_90a}))' | FileCheck %s
// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_80}))' | FileCheck %s --check-prefix=AMPERE

#s = #tile.space<shared>
#f = #tile.space<fragment>

// CHECK-LABEL: tile.kernel @three_warpgroups
// CHECK: tile.alloc {layout = #tile.fragment<[192, 64], reg = {{\[\[}}0, 1], [8, 0], [0, 8], [0, 16], [0, 32]], lane = {{\[\[}}0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = {{\[\[}}16, 0], [32, 0], [64, 0], [128, 0]]>}
// CHECK: tile.alloc {layout = #tile.fragment<[64], reg = {{\[\[}}1], [8], [16], [32]], lane = {{\[\[}}2], [4], [0], [0], [0]], warp = {{\[\[}}0], [0], [0], [0]]>}
// CHECK: tile.alloc {layout = #tile.fragment<[64, 64], {{.*}} warp = {{\[\[}}8, 0], [16, 0], [32, 0], [0, 0]]>}
// CHECK: tile.alloc {layout = #tile.fragment<[192, 64], {{.*}} warp = {{\[\[}}16, 0], [32, 0], [64, 0], [128, 0]]>}
// CHECK: tile.gemm {{.*}}instruction = #tile.instr<wgmma>{{.*}}warps = array<i64: 3, 1>
// AMPERE-LABEL: tile.kernel @three_warpgroups
// AMPERE: tile.gemm {{.*}}instruction = #tile.instr<mma_sync>{{.*}}warps = array<i64: 12, 1>
tile.kernel @three_warpgroups() grid(%bx) = affine_map<() -> (1)> threads(384) {
  %a = tile.alloc : memref<192x64xbf16, #s>
  %b = tile.alloc : memref<64x64xbf16, #s>
  %acc = tile.alloc : memref<192x64xf32, #f>
  %col = tile.alloc : memref<64xf32, #f>
  %small = tile.alloc : memref<64x64xf32, #f>
  %rows = tile.alloc : memref<192x64xf32, #f>
  %z = arith.constant 0.0 : f32
  tile.gemm %a, %b, %acc {transpose_b, clear_accum, policy = #tile.policy<full_row>} : memref<192x64xbf16, #s>, memref<64x64xbf16, #s>, memref<192x64xf32, #f>
  tile.reduce sum %acc -> %col dim = 0 clear : memref<192x64xf32, #f> -> memref<64xf32, #f>
  tile.fill %small, %z : memref<64x64xf32, #f>, f32
  tile.fill %rows, %z : memref<192x64xf32, #f>, f32
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// A square split over twelve warps puts the power of two on the columns:
// [6, 2] on mma.sync (32 x 32 each); wgmma splits three warpgroups by rows.
// CHECK-LABEL: tile.kernel @square_twelve_warps
// CHECK: tile.gemm {{.*}}instruction = #tile.instr<wgmma>{{.*}}warps = array<i64: 3, 1>
// AMPERE-LABEL: tile.kernel @square_twelve_warps
// AMPERE: tile.alloc {layout = #tile.fragment<[192, 64], {{.*}} warp = {{\[\[}}0, 32], [32, 0], [64, 0], [128, 0]]>}
// AMPERE: tile.gemm {{.*}}instruction = #tile.instr<mma_sync>{{.*}}warps = array<i64: 6, 2>
tile.kernel @square_twelve_warps() grid(%bx) = affine_map<() -> (1)> threads(384) {
  %a = tile.alloc : memref<192x64xbf16, #s>
  %b = tile.alloc : memref<64x64xbf16, #s>
  %acc = tile.alloc : memref<192x64xf32, #f>
  tile.gemm %a, %b, %acc {transpose_b, clear_accum} : memref<192x64xbf16, #s>, memref<64x64xbf16, #s>, memref<192x64xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

tile.kernel @partial_warp() grid(%bx) = affine_map<() -> (1)> threads(80) {
  %x = tile.alloc : memref<64xf32, #f>
  %z = arith.constant 0.0 : f32
  // expected-error @+1 {{fragments need whole warps, at least 32 threads (layouts split threads into lanes and warps); these run on 80}}
  tile.fill %x, %z : memref<64xf32, #f>, f32
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

tile.kernel @uneven_rows() grid(%bx) = affine_map<() -> (1)> threads(384) {
  %a = tile.alloc : memref<160x64xbf16, #s>
  %b = tile.alloc : memref<64x64xbf16, #s>
  %acc = tile.alloc : memref<160x64xf32, #f>
  // expected-error @+1 {{gemm tile extents M and N must be powers of two}}
  tile.gemm %a, %b, %acc {transpose_b, clear_accum, policy = #tile.policy<full_row>} : memref<160x64xbf16, #s>, memref<64x64xbf16, #s>, memref<160x64xf32, #f>
}
