// tessel-layout-inference on 8-bit operands (FP8, i8): wgmma m64nNk32 on
// sm_90a with both operands K-major and f32 (FP8) or i32 (integer)
// accumulators, mma.sync m16n8k32 before it (i8 from sm_80, FP8 from
// sm_89) and on sm_100a where the accumulator stayed in registers
// (tessel-tmem-accumulators says why); everything else is an error at the
// gemm, never a silent fallback to another instruction.
// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_90a}))' | FileCheck %s
// RUN: not tessel-opt %s -split-input-file -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_80}))' 2>&1 | FileCheck %s --check-prefix=AMPERE
// RUN: not tessel-opt %s -split-input-file -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_89}))' 2>&1 | FileCheck %s --check-prefix=ADA
// RUN: not tessel-opt %s -split-input-file -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_100a}))' 2>&1 | FileCheck %s --check-prefix=BLACKWELL
// RUN: not tessel-opt %s -split-input-file -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_100a}))' 2>&1 >/dev/null | FileCheck %s --check-prefix=BLACKWELL-ERR

#s = #tile.space<shared>
#f = #tile.space<fragment>

// Two warpgroups split a [128, 128] tile by rows; the accumulator takes
// wgmma's layout as for 16-bit operands.
// CHECK-LABEL: tile.kernel @fp8
// CHECK: tile.alloc {layout = #tile.shared<[128, 64], elem = 1, swizzle = 64, pad = 0>}
// CHECK: tile.alloc {layout = #tile.shared<[128, 64], elem = 1, swizzle = 64, pad = 0>}
// CHECK: tile.gemm {{.*}}instruction = #tile.instr<wgmma>{{.*}}warps = array<i64: 2, 1>
// AMPERE: error: a gemm of 'f8E4M3FN' operands runs on mma.sync from sm_89 and on wgmma on sm_90a; target sm_80
// ADA-LABEL: tile.kernel @fp8
// ADA: tile.alloc {layout = #tile.fragment<[128, 128]
// ADA: tile.gemm {{.*}}instruction = #tile.instr<mma_sync>{{.*}}warps = array<i64: 8, 1>
// BLACKWELL-LABEL: tile.kernel @fp8
// BLACKWELL: tile.gemm {{.*}}instruction = #tile.instr<mma_sync>{{.*}}warps = array<i64: 8, 1>
tile.kernel @fp8() grid(%bx) = affine_map<() -> (1)> threads(256) {
  %a = tile.alloc : memref<128x64xf8E4M3FN, #s>
  %b = tile.alloc : memref<128x64xf8E4M3FN, #s>
  %c = tile.alloc : memref<128x128xf32, #f>
  tile.gemm %a, %b, %c {transpose_b, policy = #tile.policy<full_row>} : memref<128x64xf8E4M3FN, #s>, memref<128x64xf8E4M3FN, #s>, memref<128x128xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// CHECK-LABEL: tile.kernel @int8
// CHECK: tile.alloc {layout = #tile.shared<[64, 128], elem = 1, swizzle = 128, pad = 0>}
// CHECK: tile.gemm {{.*}}instruction = #tile.instr<wgmma>{{.*}}warps = array<i64: 1, 1>
tile.kernel @int8() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x128xi8, #s>
  %b = tile.alloc : memref<64x128xi8, #s>
  %c = tile.alloc : memref<64x64xi32, #f>
  tile.gemm %a, %b, %c {transpose_b} : memref<64x128xi8, #s>, memref<64x128xi8, #s>, memref<64x64xi32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

tile.kernel @int8_float_accumulator() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x32xi8, #s>
  %b = tile.alloc : memref<64x32xi8, #s>
  %c = tile.alloc : memref<64x64xf32, #f>
  // expected-error @+1 {{an 8-bit integer product accumulates in i32, got 'f32'}}
  tile.gemm %a, %b, %c {transpose_b} : memref<64x32xi8, #s>, memref<64x32xi8, #s>, memref<64x64xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// FP8 wgmma has no transposed form: B stored [K, N] (MN-major) is refused
// with the layout that works.
tile.kernel @fp8_mn_major() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x32xf8E5M2, #s>
  %b = tile.alloc : memref<32x64xf8E5M2, #s>
  %c = tile.alloc : memref<64x64xf32, #f>
  // expected-error @+1 {{a gemm of 'f8E5M2' operands reads both operands K-major (8-bit wgmma has no transposed form): A as [M, K] without transpose_a, B as [N, K] with transpose_b}}
  tile.gemm %a, %b, %c : memref<64x32xf8E5M2, #s>, memref<32x64xf8E5M2, #s>, memref<64x64xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

tile.kernel @fp8_short_k() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x16xf8E4M3FN, #s>
  %b = tile.alloc : memref<64x16xf8E4M3FN, #s>
  %c = tile.alloc : memref<64x64xf32, #f>
  // expected-error @+1 {{gemm K (16) must be a multiple of 32, the K of the tensor-core instruction for 'f8E4M3FN' operands}}
  tile.gemm %a, %b, %c {transpose_b} : memref<64x16xf8E4M3FN, #s>, memref<64x16xf8E4M3FN, #s>, memref<64x64xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// tcgen05 asked for by name with a register accumulator: the error says
// where its accumulator goes.
// BLACKWELL-ERR: error: a gemm on tcgen05.mma accumulates in tensor memory: allocate its accumulator with alloc_tmem
tile.kernel @forced_tcgen05() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<128x64xf8E4M3FN, #s>
  %b = tile.alloc : memref<64x64xf8E4M3FN, #s>
  %c = tile.alloc : memref<128x64xf32, #f>
  // expected-error @+1 {{a gemm on tcgen05.mma accumulates in tensor memory: allocate its accumulator with alloc_tmem}}
  tile.gemm %a, %b, %c {transpose_b, instruction = #tile.instr<tcgen05>} : memref<128x64xf8E4M3FN, #s>, memref<64x64xf8E4M3FN, #s>, memref<128x64xf32, #f>
}
