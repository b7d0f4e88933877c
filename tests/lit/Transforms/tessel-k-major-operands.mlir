// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-k-major-operands))' | FileCheck %s

#s = #tile.space<shared>
#f = #tile.space<fragment>

// An FP8 B stored [K, N]: a [N, K] copy at the kernel's top, filled by a
// parallel loop (element (n, k) from (k, n)) just before the gemm, which
// then reads it with transpose_b.
// CHECK-LABEL: tile.kernel @b_mn_major
// CHECK-NEXT: %[[T:.*]] = tile.alloc {name = "b_k_major"} : memref<128x64xf8E4M3FN, #tile.space<shared>>
// CHECK: %[[B:.*]] = tile.alloc : memref<64x128xf8E4M3FN, #tile.space<shared>>
// CHECK: tile.parallel (%[[N:.*]], %[[K:.*]]) in [128, 64] {
// CHECK-NEXT: %[[E:.*]] = memref.load %[[B]][%[[K]], %[[N]]]
// CHECK-NEXT: memref.store %[[E]], %[[T]][%[[N]], %[[K]]]
// CHECK: tile.gemm %{{.*}}, %[[T]], %{{.*}} {transpose_b}
tile.kernel @b_mn_major() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x64xf8E4M3FN, #s>
  %b = tile.alloc : memref<64x128xf8E4M3FN, #s>
  %acc = tile.alloc : memref<64x128xf32, #f>
  // expected-remark @+1 {{tessel-k-major-operands [tensor-cores]: operand B is stored [K, N] and 8-bit tensor-core instructions read it K-major only: element code copies it into a 128 x 64 shared tile before each gemm (8192 bytes); store it [N, K] (transpose_b) to skip the copy}}
  tile.gemm %a, %b, %acc : memref<64x64xf8E4M3FN, #s>, memref<64x128xf8E4M3FN, #s>, memref<64x128xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// An i8 A stored [K, M]: its [M, K] copy, and transpose_a dropped.
// CHECK-LABEL: tile.kernel @a_mn_major
// CHECK-NEXT: tile.alloc {name = "a_k_major"} : memref<64x32xi8, #tile.space<shared>>
// CHECK: tile.gemm {{.*}} {transpose_b} :
tile.kernel @a_mn_major() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<32x64xi8, #s>
  %b = tile.alloc : memref<64x32xi8, #s>
  %acc = tile.alloc : memref<64x64xi32, #f>
  // expected-remark @+1 {{operand A is stored [K, M]}}
  tile.gemm %a, %b, %acc {transpose_a, transpose_b} : memref<32x64xi8, #s>, memref<64x32xi8, #s>, memref<64x64xi32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// K-major operands, and 16-bit ones either way, are left alone.
// CHECK-LABEL: tile.kernel @unchanged
// CHECK-NOT: k_major
// CHECK-NOT: tile.parallel
tile.kernel @unchanged() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x64xf8E5M2, #s>
  %b = tile.alloc : memref<64x64xf8E5M2, #s>
  %acc = tile.alloc : memref<64x64xf32, #f>
  tile.gemm %a, %b, %acc {transpose_b} : memref<64x64xf8E5M2, #s>, memref<64x64xf8E5M2, #s>, memref<64x64xf32, #f>
  %h = tile.alloc : memref<64x64xbf16, #s>
  tile.gemm %h, %h, %acc {transpose_a} : memref<64x64xbf16, #s>, memref<64x64xbf16, #s>, memref<64x64xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// An FP8 A in registers (P of FP8 attention) with V stored [K, N]: B's copy
// is transposed and K is permuted to the registers' order (position p of
// each 16 holds key (p & ~15) | (p & 1) | ((p >> 1) & 1) << 3 | ((p >> 2) &
// 3) << 1), and the gemm says so.
// CHECK-LABEL: tile.kernel @register_a
// CHECK-NEXT: %[[T:.*]] = tile.alloc {name = "b_k_major"} : memref<64x64xf8E4M3FN, #tile.space<shared>>
// CHECK: %[[V:.*]] = tile.alloc : memref<64x64xf8E4M3FN, #tile.space<shared>>
// CHECK: tile.parallel (%[[N:.*]], %[[P:.*]]) in [64, 64] {
// CHECK: arith.andi %[[P]], %c-16
// CHECK: arith.ori
// CHECK: arith.ori
// CHECK: %[[K:.*]] = arith.ori
// CHECK-NEXT: %[[E:.*]] = memref.load %[[V]][%[[K]], %[[N]]]
// CHECK-NEXT: memref.store %[[E]], %[[T]][%[[N]], %[[P]]]
// CHECK: tile.gemm %{{.*}}, %[[T]], %{{.*}} {b_register_k_order, transpose_b}
tile.kernel @register_a() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %p = tile.alloc : memref<64x64xf8E4M3FN, #f>
  %v = tile.alloc : memref<64x64xf8E4M3FN, #s>
  %acc = tile.alloc : memref<64x64xf32, #f>
  // expected-remark @+1 {{operand B is stored [K, N] and 8-bit tensor-core instructions read it K-major only: element code copies it into a 64 x 64 shared tile with K in register order before each gemm (4096 bytes); store B [N, K] in that order (register_k_position) and set b_register_k_order to skip the copy}}
  tile.gemm %p, %v, %acc : memref<64x64xf8E4M3FN, #f>, memref<64x64xf8E4M3FN, #s>, memref<64x64xf32, #f>
}

// -----

#s = #tile.space<shared>
#f = #tile.space<fragment>

// B stored [N, K] but in plain K order: a permuted copy, not transposed;
// B already in register order: nothing.
// CHECK-LABEL: tile.kernel @register_a_k_major
// CHECK: tile.parallel
// CHECK: tile.gemm {{.*}} {b_register_k_order, transpose_b}
// CHECK-NOT: tile.parallel
// CHECK: tile.gemm {{.*}} {b_register_k_order, transpose_b}
tile.kernel @register_a_k_major() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %p = tile.alloc : memref<64x32xi8, #f>
  %v = tile.alloc : memref<64x32xi8, #s>
  %acc = tile.alloc : memref<64x64xi32, #f>
  // expected-remark @+1 {{operand A is 8-bit in registers, read four consecutive K values a register where a thread holds pairs 8 apart: element code copies B into a 64 x 32 shared tile with K in register order}}
  tile.gemm %p, %v, %acc {transpose_b} : memref<64x32xi8, #f>, memref<64x32xi8, #s>, memref<64x64xi32, #f>
  tile.gemm %p, %v, %acc {transpose_b, b_register_k_order} : memref<64x32xi8, #f>, memref<64x32xi8, #s>, memref<64x64xi32, #f>
}

// -----

#s = #tile.space<shared>
#t = #tile.space<tmem>

// Into tensor memory (tcgen05.mma) an MN-major 8-bit operand is read as
// stored, unless its rows are narrower than the smallest swizzled
// descriptor's 32 bytes: a B of 16 columns gets its K-major copy, one of
// 64 does not.
// CHECK-LABEL: tile.kernel @tcgen05_operands
// CHECK-NEXT: tile.alloc {name = "b_k_major"} : memref<16x32xf8E4M3FN, #tile.space<shared>>
// CHECK-NOT: k_major
// CHECK: tile.gemm %{{.*}}, %{{.*}}, %{{.*}} {transpose_b} : memref<128x32xf8E4M3FN, #tile.space<shared>>, memref<16x32xf8E4M3FN, #tile.space<shared>>
// CHECK: tile.gemm %{{.*}}, %{{.*}}, %{{.*}} : memref<128x32xf8E4M3FN, #tile.space<shared>>, memref<32x64xf8E4M3FN, #tile.space<shared>>
tile.kernel @tcgen05_operands() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<128x32xf8E4M3FN, #s>
  %narrow = tile.alloc : memref<32x16xf8E4M3FN, #s>
  %acc = tile.alloc : memref<128x16xf32, #t>
  // expected-remark @+1 {{operand B is stored [K, N] in rows of 16 bytes, too narrow for the swizzled descriptor tcgen05.mma reads an MN-major operand through (32 bytes the least): element code copies it into a 16 x 32 shared tile before each gemm (512 bytes); store it [N, K] (transpose_b) to skip the copy}}
  tile.gemm %a, %narrow, %acc : memref<128x32xf8E4M3FN, #s>, memref<32x16xf8E4M3FN, #s>, memref<128x16xf32, #t>
  %wide = tile.alloc : memref<32x64xf8E4M3FN, #s>
  %acc2 = tile.alloc : memref<128x64xf32, #t>
  tile.gemm %a, %wide, %acc2 : memref<128x32xf8E4M3FN, #s>, memref<32x64xf8E4M3FN, #s>, memref<128x64xf32, #t>
}
