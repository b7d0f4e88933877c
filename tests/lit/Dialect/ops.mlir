// RUN: tessel-opt %s | tessel-opt | FileCheck %s
// RUN: tessel-opt %s --mlir-print-op-generic | tessel-opt | FileCheck %s

#g = #tile.space<global>
// CHECK-DAG: affine_map<(d0, d1) -> (d0 * 72 + d1)>
// CHECK-LABEL: tile.kernel @all_ops
// CHECK-SAME: grid(%{{.*}}, %{{.*}}) = #{{.*}} threads(128)
tile.kernel @all_ops(%a: memref<?x64xf16, #g>, %c: memref<?x64xf32, #g>, %m: index)
    grid(%bx, %by) = affine_map<()[s0] -> (s0 ceildiv 32, 2)> threads(128) {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %row = arith.muli %bx, %c32 : index
  // CHECK: tile.alloc : memref<32x64xf16, #tile.space<shared>>
  %as = tile.alloc : memref<32x64xf16, #tile.space<shared>>
  %bs = tile.alloc : memref<64x64xf16, #tile.space<shared>>
  %acc = tile.alloc : memref<32x64xf32, #tile.space<fragment>>
  %rmax = tile.alloc : memref<32xf32, #tile.space<fragment>>
  %tmp = tile.alloc : memref<4xf32, #tile.space<local>>
  // CHECK: tile.annotate_layout %{{.*}} : {{.*}} to #
  tile.annotate_layout %bs : memref<64x64xf16, #tile.space<shared>> to affine_map<(d0, d1) -> (d0 * 72 + d1)>
  // CHECK: tile.region %{{.*}}[%{{.*}}, %{{.*}}] [32, 64]
  %at = tile.region %a[%row, %c0] [32, 64] : memref<?x64xf16, #g> -> memref<32x64xf16, strided<[64, 1], offset: ?>, #g>
  // CHECK: tile.copy
  tile.copy %at, %as : memref<32x64xf16, strided<[64, 1], offset: ?>, #g>, memref<32x64xf16, #tile.space<shared>>
  %zero = arith.constant 0.0 : f32
  // CHECK: tile.fill
  tile.fill %acc, %zero : memref<32x64xf32, #tile.space<fragment>>, f32
  // CHECK: tile.pipelined %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} stages(3)
  tile.pipelined %k = %c0 to %m step %c32 stages(3) {
    // CHECK: tile.gemm {{.*}} {transpose_b}
    tile.gemm %as, %bs, %acc {transpose_b} : memref<32x64xf16, #tile.space<shared>>, memref<64x64xf16, #tile.space<shared>>, memref<32x64xf32, #tile.space<fragment>>
  }
  // CHECK: tile.reduce max {{.*}} dim = 1 clear
  tile.reduce max %acc -> %rmax dim = 1 clear : memref<32x64xf32, #tile.space<fragment>> -> memref<32xf32, #tile.space<fragment>>
  // CHECK: tile.reduce absmax {{.*}} dim = 1 :
  tile.reduce absmax %acc -> %rmax dim = 1 : memref<32x64xf32, #tile.space<fragment>> -> memref<32xf32, #tile.space<fragment>>
  // CHECK: tile.parallel (%{{.*}}, %{{.*}}) in [32, 64]
  tile.parallel (%i, %j) in [32, 64] {
    %v = memref.load %acc[%i, %j] : memref<32x64xf32, #tile.space<fragment>>
    %r = memref.load %rmax[%i] : memref<32xf32, #tile.space<fragment>>
    %d = arith.subf %v, %r : f32
    memref.store %d, %acc[%i, %j] : memref<32x64xf32, #tile.space<fragment>>
  }
  %ct = tile.region %c[%row, %c0] [32, 64] : memref<?x64xf32, #g> -> memref<32x64xf32, strided<[64, 1], offset: ?>, #g>
  // CHECK: tile.atomic_add {{.*}} order = release
  tile.atomic_add %acc, %ct order = release : memref<32x64xf32, #tile.space<fragment>>, memref<32x64xf32, strided<[64, 1], offset: ?>, #g>
  // CHECK: tile.atomic_add {{.*}}[%{{.*}}, %{{.*}}] order = relaxed
  tile.atomic_add %zero, %c[%c0, %c0] order = relaxed : f32, memref<?x64xf32, #g>
  // CHECK: tile.barrier
  tile.barrier
}
