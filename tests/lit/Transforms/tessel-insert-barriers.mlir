// RUN: tessel-opt %s -split-input-file -pass-pipeline='builtin.module(tile.kernel(tessel-insert-barriers))' | FileCheck %s

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// A shared tile written by a copy and read by the gemm needs a barrier
// between them; the loop's next copy overwrites what this iteration's gemm
// reads, so the body also starts with one. The accumulator is a fragment,
// private to each thread: storing it needs no barrier.
// CHECK-LABEL: tile.kernel @copy_then_gemm
// CHECK: tile.pipelined
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.copy
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.gemm
// CHECK-NEXT: }
// CHECK-NEXT: tile.copy %{{.*}}, %arg1
tile.kernel @copy_then_gemm(%a: memref<16x16xf16, #g>, %c: memref<16x16xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  %as = tile.alloc : memref<16x16xf16, #s>
  %acc = tile.alloc : memref<16x16xf32, #f>
  tile.pipelined %k = %c0 to %c4 step %c1 stages(2) {
    tile.copy %a, %as : memref<16x16xf16, #g>, memref<16x16xf16, #s>
    tile.gemm %as, %as, %acc : memref<16x16xf16, #s>, memref<16x16xf16, #s>, memref<16x16xf32, #f>
  }
  tile.copy %acc, %c : memref<16x16xf32, #f>, memref<16x16xf32, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// Two readers of the same buffer need no barrier between them.
// CHECK-LABEL: tile.kernel @two_readers
// CHECK: tile.copy %arg0
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.copy %{{.*}}, %arg1
// CHECK-NEXT: tile.copy %{{.*}}, %arg2
// CHECK-NOT: tile.barrier
tile.kernel @two_readers(%a: memref<64xf32, #g>, %b: memref<64xf32, #g>, %c: memref<64xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(64) {
  %s = tile.alloc : memref<64xf32, #s>
  tile.copy %a, %s : memref<64xf32, #g>, memref<64xf32, #s>
  tile.copy %s, %b : memref<64xf32, #s>, memref<64xf32, #g>
  tile.copy %s, %c : memref<64xf32, #s>, memref<64xf32, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// Fragments live in registers: a reduction that writes one and element code
// that reads it on the same threads need no barrier (the reduction's own
// exchange across warps synchronizes inside its lowering).
// CHECK-LABEL: tile.kernel @reduce_then_parallel
// CHECK: tile.reduce
// CHECK-NEXT: tile.parallel
// CHECK-NOT: tile.barrier
// CHECK: }
tile.kernel @reduce_then_parallel() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %t = tile.alloc : memref<4x32xf32, #f>
  %m = tile.alloc : memref<4xf32, #f>
  tile.reduce max %t -> %m dim = 1 clear : memref<4x32xf32, #f> -> memref<4xf32, #f>
  tile.parallel (%i, %j) in [4, 32] {
    %x = memref.load %t[%i, %j] : memref<4x32xf32, #f>
    %y = memref.load %m[%i] : memref<4xf32, #f>
    %d = arith.subf %x, %y : f32
    memref.store %d, %t[%i, %j] : memref<4x32xf32, #f>
  }
}
