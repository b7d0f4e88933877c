// wgmma's N in steps of 8: an accumulator of 96 columns on one warpgroup
// takes wgmma, its register layout padded to 128 columns (a remark counts
// the registers that hold nothing); mma.sync keeps powers of two, with an
// error that names the rule.
// RUN: tessel-opt %s -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_90a}))' | FileCheck %s
// RUN: not tessel-opt %s -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_80}))' 2>&1 | FileCheck %s --check-prefix=AMPERE

#s = #tile.space<shared>
#f = #tile.space<fragment>

// CHECK-LABEL: tile.kernel @wide
// CHECK: tile.alloc {layout = #tile.fragment<[128, 96], reg = {{\[\[}}0, 1], [8, 0], [0, 8], [0, 16], [0, 32], [0, 64], [64, 0]]
// CHECK: tile.gemm {{.*}} {clear_accum, instruction = #tile.instr<wgmma>, transpose_b, warps = array<i64: 1, 1>}
// AMPERE: error: gemm tile extents M and N must be powers of two (the accumulator's register layout maps index bits; N may be a multiple of 8 up to 256 on sm_90a's wgmma), got N = 96 on 4 warps
tile.kernel @wide() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<128x64xbf16, #s>
  %b = tile.alloc : memref<96x64xbf16, #s>
  %acc = tile.alloc : memref<128x96xf32, #f>
  // expected-remark @+1 {{the accumulator's register layout pads N = 96 to 128: 32 of its registers a thread hold no value}}
  tile.gemm %a, %b, %acc {transpose_b, clear_accum} : memref<128x64xbf16, #s>, memref<96x64xbf16, #s>, memref<128x96xf32, #f>
}
