// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-tmem-accumulators{arch=sm_100a}))' | FileCheck %s
// RUN: tessel-opt %s -split-input-file -pass-pipeline='builtin.module(tile.kernel(tessel-tmem-accumulators{arch=sm_90a}))' 2>/dev/null | FileCheck %s --check-prefix=HOPPER
// On sm_90a nothing changes: wgmma accumulates in registers.
// HOPPER-LABEL: tile.kernel @cleared
// HOPPER-NOT: #tile.space<tmem>
// HOPPER: tile.gemm {{.*}} memref<128x64xf32, #tile.space<fragment>>
// HOPPER-NOT: tile.copy
// HOPPER-LABEL: tile.kernel @accumulating

#s = #tile.space<shared>
#f = #tile.space<fragment>

// A register accumulator of [128, 64] f32 that a gemm clears: the gemm
// writes a tensor-memory buffer of its own (allocated at the kernel's top,
// named after the fragment) and the fragment is copied out after it.
// CHECK-LABEL: tile.kernel @cleared
// CHECK-NEXT: %[[T:.*]] = tile.alloc {name = "s_tmem"} : memref<128x64xf32, #tile.space<tmem>>
// CHECK: %[[S:.*]] = tile.alloc {name = "s"} : memref<128x64xf32, #tile.space<fragment>>
// CHECK-NOT: tile.copy %[[S]], %[[T]]
// CHECK: tile.gemm %{{.*}}, %{{.*}}, %[[T]] {clear_accum, transpose_b}
// CHECK-NEXT: tile.copy %[[T]], %[[S]]
tile.kernel @cleared() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<128x64xbf16, #s>
  %b = tile.alloc : memref<64x64xbf16, #s>
  %acc = tile.alloc {name = "s"} : memref<128x64xf32, #f>
  // expected-remark @+1 {{tessel-tmem-accumulators [tensor-cores]: the accumulator moves through tensor memory for tcgen05.mma (copied out after the gemm); an accumulator allocated with alloc_tmem stays there}}
  tile.gemm %a, %b, %acc {transpose_b, clear_accum} : memref<128x64xbf16, #s>, memref<64x64xbf16, #s>, memref<128x64xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// Two gemms accumulating into one fragment share one buffer; each copies
// the fragment in before it and out after it.
// CHECK-LABEL: tile.kernel @accumulating
// CHECK-COUNT-1: #tile.space<tmem>>
// CHECK: tile.copy %[[S:.*]], %[[T:.*]] :
// CHECK-NEXT: tile.gemm %{{.*}}, %{{.*}}, %[[T]] :
// CHECK-NEXT: tile.copy %[[T]], %[[S]] :
// CHECK-NEXT: tile.copy %[[S]], %[[T]] :
// CHECK-NEXT: tile.gemm %{{.*}}, %{{.*}}, %[[T]] :
// CHECK-NEXT: tile.copy %[[T]], %[[S]] :
tile.kernel @accumulating() grid(%bx) = affine_map<() -> (1)> threads(256) {
  %a = tile.alloc : memref<128x64xf16, #s>
  %b = tile.alloc : memref<64x128xf16, #s>
  %acc = tile.alloc : memref<128x128xf32, #f>
  // expected-remark @+1 {{copied in before and out after the gemm}}
  tile.gemm %a, %b, %acc : memref<128x64xf16, #s>, memref<64x128xf16, #s>, memref<128x128xf32, #f>
  // expected-remark @+1 {{copied in before and out after the gemm}}
  tile.gemm %a, %b, %acc : memref<128x64xf16, #s>, memref<64x128xf16, #s>, memref<128x128xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// What tcgen05 cannot take stays on mma.sync, and a remark says why.
// CHECK-LABEL: tile.kernel @stays
// CHECK-NOT: #tile.space<tmem>
tile.kernel @stays() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x64xbf16, #s>
  %b = tile.alloc : memref<64x64xbf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #f>
  // expected-remark @+1 {{this gemm runs on mma.sync on sm_100a, not tcgen05.mma: tcgen05.mma computes 128 rows (all tensor-memory lanes) and the accumulator has 64; an accumulator in tensor memory (alloc_tmem) runs on tcgen05}}
  tile.gemm %a, %b, %acc {clear_accum} : memref<64x64xbf16, #s>, memref<64x64xbf16, #s>, memref<64x64xf32, #f>
  %a2 = tile.alloc : memref<128x64xbf16, #s>
  %wide = tile.alloc : memref<128x64xf32, #f>
  // expected-remark @+1 {{not tcgen05.mma: the gemm asks for mma_sync}}
  tile.gemm %a2, %b, %wide {clear_accum, instruction = #tile.instr<mma_sync>} : memref<128x64xbf16, #s>, memref<64x64xbf16, #s>, memref<128x64xf32, #f>
  %p = tile.alloc : memref<128x64xbf16, #f>
  // expected-remark @+1 {{not tcgen05.mma: tcgen05.mma reads A and B from shared memory here, and an operand is a fragment}}
  tile.gemm %p, %b, %wide : memref<128x64xbf16, #f>, memref<64x64xbf16, #s>, memref<128x64xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// Tensor memory the kernel already fills leaves too little: the gemm stays.
// CHECK-LABEL: tile.kernel @full
// CHECK-COUNT-1: #tile.space<tmem>>
tile.kernel @full() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %own = tile.alloc : memref<128x512xf32, #tile.space<tmem>>
  %a = tile.alloc : memref<128x64xbf16, #s>
  %b = tile.alloc : memref<64x64xbf16, #s>
  %acc = tile.alloc : memref<128x64xf32, #f>
  // expected-remark @+1 {{tensor memory has 0 columns left and the accumulator needs 64}}
  tile.gemm %a, %b, %acc {clear_accum} : memref<128x64xbf16, #s>, memref<64x64xbf16, #s>, memref<128x64xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// 8-bit operands move too: FP8 into f32 (kind::f8f6f4) and i8 into i32
// (kind::i8), each accumulator through a tensor-memory buffer of its type.
// CHECK-LABEL: tile.kernel @eight_bit
// CHECK-DAG: tile.alloc {name = "fp8_tmem"} : memref<128x64xf32, #tile.space<tmem>>
// CHECK-DAG: tile.alloc {name = "int8_tmem"} : memref<128x32xi32, #tile.space<tmem>>
// CHECK: tile.gemm %{{.*}}, %{{.*}}, %{{.*}} {clear_accum, transpose_b} : memref<128x64xf8E4M3FN, #tile.space<shared>>, memref<64x64xf8E4M3FN, #tile.space<shared>>, memref<128x64xf32, #tile.space<tmem>>
// CHECK: tile.gemm %{{.*}}, %{{.*}}, %{{.*}} {clear_accum, transpose_b} : memref<128x64xi8, #tile.space<shared>>, memref<32x64xi8, #tile.space<shared>>, memref<128x32xi32, #tile.space<tmem>>
tile.kernel @eight_bit() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<128x64xf8E4M3FN, #s>
  %b = tile.alloc : memref<64x64xf8E4M3FN, #s>
  %acc = tile.alloc {name = "fp8"} : memref<128x64xf32, #f>
  // expected-remark @+1 {{the accumulator moves through tensor memory for tcgen05.mma (copied out after the gemm)}}
  tile.gemm %a, %b, %acc {transpose_b, clear_accum} : memref<128x64xf8E4M3FN, #s>, memref<64x64xf8E4M3FN, #s>, memref<128x64xf32, #f>
  %ai = tile.alloc : memref<128x64xi8, #s>
  %bi = tile.alloc : memref<32x64xi8, #s>
  %sums = tile.alloc {name = "int8"} : memref<128x32xi32, #f>
  // expected-remark @+1 {{the accumulator moves through tensor memory for tcgen05.mma (copied out after the gemm)}}
  tile.gemm %ai, %bi, %sums {transpose_b, clear_accum} : memref<128x64xi8, #s>, memref<32x64xi8, #s>, memref<128x32xi32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// Tensor memory holds 32-bit accumulators: an FP8 gemm into f16 stays on
// mma.sync (its .f16 form), and says so.
// CHECK-LABEL: tile.kernel @eight_bit_into_16_bits
// CHECK-NOT: #tile.space<tmem>
tile.kernel @eight_bit_into_16_bits() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<128x64xf8E4M3FN, #s>
  %b = tile.alloc : memref<64x64xf8E4M3FN, #s>
  %half = tile.alloc : memref<128x64xf16, #f>
  // expected-remark @+1 {{this gemm runs on mma.sync on sm_100a, not tcgen05.mma: its accumulator is not f32 (s32 for 8-bit integers)}}
  tile.gemm %a, %b, %half {transpose_b, clear_accum} : memref<128x64xf8E4M3FN, #s>, memref<64x64xf8E4M3FN, #s>, memref<128x64xf16, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// The trial placement runs what the pipeline runs after this pass: an FP8
// gemm left in registers with B stored [K, N] gets its K-major copy there
// too, and the other gemm still moves.
// CHECK-LABEL: tile.kernel @beside_an_mn_major_eight_bit_gemm
// CHECK: #tile.space<tmem>
tile.kernel @beside_an_mn_major_eight_bit_gemm() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<128x64xbf16, #s>
  %b = tile.alloc : memref<64x64xbf16, #s>
  %acc = tile.alloc : memref<128x64xf32, #f>
  // expected-remark @+1 {{the accumulator moves through tensor memory for tcgen05.mma}}
  tile.gemm %a, %b, %acc {clear_accum} : memref<128x64xbf16, #s>, memref<64x64xbf16, #s>, memref<128x64xf32, #f>
  %a8 = tile.alloc : memref<64x64xf8E4M3FN, #s>
  %b8 = tile.alloc : memref<64x64xf8E4M3FN, #s>
  %acc8 = tile.alloc : memref<64x64xf32, #f>
  // expected-remark @+1 {{tcgen05.mma computes 128 rows (all tensor-memory lanes) and the accumulator has 64}}
  tile.gemm %a8, %b8, %acc8 {clear_accum} : memref<64x64xf8E4M3FN, #s>, memref<64x64xf8E4M3FN, #s>, memref<64x64xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// bf16 products have no f16 form: no remark that the gemm runs on
// mma.sync (layout inference reports the error).
// CHECK-LABEL: tile.kernel @bf16_into_f16
tile.kernel @bf16_into_f16() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<128x64xbf16, #s>
  %b = tile.alloc : memref<64x64xbf16, #s>
  %half = tile.alloc : memref<128x64xf16, #f>
  tile.gemm %a, %b, %half {clear_accum} : memref<128x64xbf16, #s>, memref<64x64xbf16, #s>, memref<128x64xf16, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// A register accumulator of a K loop moves through tensor memory in every
// iteration, and the remark says so.
// CHECK-LABEL: tile.kernel @accumulating_loop
// CHECK: scf.for
// CHECK: tile.copy %{{.*}}, %{{.*}} : memref<128x64xf32, #tile.space<fragment>>, memref<128x64xf32, #tile.space<tmem>>
// CHECK: tile.gemm
// CHECK: tile.copy %{{.*}}, %{{.*}} : memref<128x64xf32, #tile.space<tmem>>, memref<128x64xf32, #tile.space<fragment>>
tile.kernel @accumulating_loop(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %a = tile.alloc : memref<128x64xbf16, #s>
  %b = tile.alloc : memref<64x64xbf16, #s>
  %acc = tile.alloc : memref<128x64xf32, #f>
  scf.for %k = %c0 to %n step %c1 {
    // expected-remark @+1 {{(copied in before and out after the gemm, in every iteration of its loop); an accumulator allocated with alloc_tmem stays there}}
    tile.gemm %a, %b, %acc : memref<128x64xbf16, #s>, memref<64x64xbf16, #s>, memref<128x64xf32, #f>
  }
}
