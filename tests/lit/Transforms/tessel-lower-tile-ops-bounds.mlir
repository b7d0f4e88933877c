// Windows of global tensors read 0 and drop writes outside the tensor on
// both sides: a window whose offset may be negative at run time (a causal
// convolution's halo before the first step) checks each index against 0 as
// well as against the extent; one whose offset the compiler proves
// non-negative checks only the extent.
// RUN: tessel-opt %s -split-input-file -pass-pipeline='builtin.module(tile.kernel(tessel-layout-inference{arch=sm_80},tessel-lower-tile-ops{arch=sm_80}))' | FileCheck %s

#g = #tile.space<global>
#s = #tile.space<shared>

// The halo `x[t0 - 8 : t0 + 8]` into shared memory. A 16-byte cp.async
// moves a vector only when its first element is at 0 or after (and its
// last before the end); a vector that straddles 0 goes element by element,
// each read guarded on both sides and 0 outside.
// CHECK-LABEL: tile.kernel @halo_load
// CHECK: %[[START:.*]] = arith.subi %arg1, %c8
// CHECK: scf.for
// CHECK: %[[I:.*]] = arith.addi %[[START]], %{{.*}} : index
// CHECK: %[[AFTER0:.*]] = arith.cmpi sge, %[[I]], %c0
// CHECK: %[[LAST:.*]] = arith.addi %[[I]], %c3
// CHECK: %[[BEFORE_END:.*]] = arith.cmpi slt, %[[LAST]], %{{.*}}
// CHECK: arith.andi %[[AFTER0]], %[[BEFORE_END]]
// CHECK: scf.if
// CHECK: tilenv.cp_async %arg0
// CHECK: } else {
// CHECK: %[[E:.*]] = arith.addi %[[START]], %{{.*}} : index
// CHECK: %[[E_AFTER0:.*]] = arith.cmpi sge, %[[E]], %c0
// CHECK: %[[E_BEFORE_END:.*]] = arith.cmpi slt, %[[E]], %{{.*}}
// CHECK: %[[E_IN:.*]] = arith.andi %[[E_AFTER0]], %[[E_BEFORE_END]]
// CHECK: scf.if %[[E_IN]] -> (f32)
// CHECK: memref.load %arg0[%[[E]]]
// CHECK: arith.constant 0.000000e+00 : f32
tile.kernel @halo_load(%x: memref<?xf32, #g>, %t0: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(32) {
  %c8 = arith.constant 8 : index
  %start = arith.subi %t0, %c8 : index
  %s = tile.alloc : memref<16xf32, #s>
  %t = tile.region %x[%start] [16] : memref<?xf32, #g> -> memref<16xf32, strided<[1], offset: ?>, #g>
  tile.copy %t, %s : memref<16xf32, strided<[1], offset: ?>, #g>, memref<16xf32, #s>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// Writes through such a window are dropped before 0: vector stores need the
// first element at 0 or after, element stores and atomics check their own.
// CHECK-LABEL: tile.kernel @halo_store
// CHECK: %[[START:.*]] = arith.subi %arg1, %c8
// CHECK: arith.cmpi sge
// CHECK: scf.if
// CHECK: tilenv.copy_vector %{{.*}}[{{.*}}], %arg0[{{.*}}] bytes = 16
// CHECK: } else {
// CHECK: %[[E:.*]] = arith.addi %[[START]], %{{.*}} : index
// CHECK: %[[E_AFTER0:.*]] = arith.cmpi sge, %[[E]], %c0
// CHECK: %[[E_IN:.*]] = arith.andi %[[E_AFTER0]]
// CHECK: scf.if %[[E_IN]] {
// CHECK: memref.store %{{.*}}, %arg0[%[[E]]]
// CHECK: scf.for %{{.*}} = %{{.*}} to %c16
// CHECK: %[[A:.*]] = arith.addi %[[START]], %{{.*}} : index
// CHECK: %[[A_AFTER0:.*]] = arith.cmpi sge, %[[A]], %c0
// CHECK: %[[A_IN:.*]] = arith.andi %[[A_AFTER0]]
// CHECK: scf.if %[[A_IN]] {
// CHECK: tilenv.atomic_add %{{.*}}, %arg0[%[[A]]] relaxed
tile.kernel @halo_store(%x: memref<?xf32, #g>, %t0: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(32) {
  %c8 = arith.constant 8 : index
  %start = arith.subi %t0, %c8 : index
  %s = tile.alloc : memref<16xf32, #s>
  %t = tile.region %x[%start] [16] : memref<?xf32, #g> -> memref<16xf32, strided<[1], offset: ?>, #g>
  tile.copy %s, %t : memref<16xf32, #s>, memref<16xf32, strided<[1], offset: ?>, #g>
  tile.atomic_add %s, %t order = relaxed : memref<16xf32, #s>, memref<16xf32, strided<[1], offset: ?>, #g>
}

// -----

#g = #tile.space<global>

// Element code over a window of a static tensor (no extent check needed
// for an offset the compiler cannot bound, either way) and a bounded
// tensor: each read checks 0, the extent and the limit; each write 0 and
// the limit.
// CHECK-LABEL: tile.kernel @halo_elements
// CHECK: %[[START:.*]] = arith.subi %arg2, %c8
// CHECK: %[[I:.*]] = arith.addi %[[START]], %{{.*}} : index
// CHECK: %[[AFTER0:.*]] = arith.cmpi sge, %[[I]], %c0
// CHECK: %[[BEFORE_END:.*]] = arith.cmpi slt, %[[I]], %c64
// CHECK: %[[IN:.*]] = arith.andi %[[AFTER0]], %[[BEFORE_END]]
// CHECK: scf.if %[[IN]] -> (f32)
// CHECK: memref.load %arg0[%[[I]]]
// CHECK: %[[J:.*]] = arith.addi %[[START]], %{{.*}} : index
// CHECK: %[[J_AFTER0:.*]] = arith.cmpi sge, %[[J]], %c0
// CHECK: %[[J_BELOW_LIMIT:.*]] = arith.cmpi slt, %[[J]], %arg3
// CHECK: arith.andi %[[J_AFTER0]], %[[J_BELOW_LIMIT]]
// CHECK: scf.if %{{.*}} {
// CHECK: memref.store %{{.*}}, %arg1[%[[J]]]
tile.kernel @halo_elements(%x: memref<64xf32, #g>, %y: memref<?xf32, #g>, %t0: index, %len: index) grid(%bx) = affine_map<()[s0, s1] -> (1)> threads(32) {
  %c8 = arith.constant 8 : index
  %start = arith.subi %t0, %c8 : index
  %xt = tile.region %x[%start] [16] : memref<64xf32, #g> -> memref<16xf32, strided<[1], offset: ?>, #g>
  %yb = tile.bound %y [%len] : memref<?xf32, #g>
  %yt = tile.region %yb[%start] [16] : memref<?xf32, #g> -> memref<16xf32, strided<[1], offset: ?>, #g>
  tile.parallel (%i) in [16] {
    %v = memref.load %xt[%i] : memref<16xf32, strided<[1], offset: ?>, #g>
    memref.store %v, %yt[%i] : memref<16xf32, strided<[1], offset: ?>, #g>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// Offsets built from block indices, index parameters (symbols, which a
// launch keeps at 0 or above), positive constants and loop counters that
// start at 0 are never negative: no check against 0, only the extent.
// CHECK-LABEL: tile.kernel @provably_non_negative
// CHECK-NOT: arith.cmpi sge
// CHECK: arith.cmpi slt
// CHECK: tilenv.cp_async
// CHECK-NOT: arith.cmpi sge
tile.kernel @provably_non_negative(%x: memref<?x?xf16, #g>, %k: index) grid(%bx, %by) = affine_map<()[s0] -> (4, 4)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %s = tile.alloc : memref<64x32xf16, #s>
  %row = arith.muli %by, %c64 : index
  tile.pipelined %kt = %c0 to %k step %c1 stages(1) {
    %col = arith.muli %kt, %c32 : index
    %block = arith.addi %col, %bx : index
    %shifted = arith.addi %block, %k : index
    %t = tile.region %x[%row, %shifted] [64, 32] : memref<?x?xf16, #g> -> memref<64x32xf16, strided<[?, 1], offset: ?>, #g>
    tile.copy %t, %s : memref<64x32xf16, strided<[?, 1], offset: ?>, #g>, memref<64x32xf16, #s>
  }
}
