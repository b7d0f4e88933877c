// Integer arithmetic and conversions as the CUDA emitter prints them: the
// DSL's floored division and rounded-up division for either sign (device
// header functions), every type spelled as one identifier (a `T(x)`
// conversion to `long long` would not parse), unsigned conversions and
// shifts at the operand's width.
// RUN: tessel-opt %s --tessel-pipeline=arch=sm_80 | tessel-translate --emit-cuda | FileCheck %s

// CHECK-LABEL: void __launch_bounds__(32) integers(int *__restrict__ p0, int p0_d0, tessel::i64 *__restrict__ p1, int p1_d0, int p2)
// CHECK: int [[Q:v[0-9]+]] = tessel::floor_div([[X:v[0-9]+]], p2);
// CHECK: int [[C:v[0-9]+]] = tessel::ceil_div([[X]], p2);
// CHECK: int [[S:v[0-9]+]] = [[Q]] + [[C]];
// CHECK: tessel::i64 [[W:v[0-9]+]] = tessel::i64([[S]]);
// CHECK: bool [[B:v[0-9]+]] = [[X]] < p2;
// CHECK: tessel::i64 [[U:v[0-9]+]] = tessel::i64([[B]]);
// CHECK: tessel::i64 [[Z:v[0-9]+]] = [[W]] + [[U]];
// CHECK: tessel::i64 [[H:v[0-9]+]] = tessel::i64((unsigned long long)[[Z]] >> v{{[0-9]+}});
// CHECK: tessel::i64 [[E:v[0-9]+]] = tessel::i64((unsigned)[[X]]);
// CHECK: p1[{{.*}}] = v{{[0-9]+}};

#g = #tile.space<global>
tile.kernel @integers(%x: memref<?xi32, #g>, %y: memref<?xi64, #g>, %d: i32) grid(%bx) = affine_map<() -> (1)> threads(32) {
  %c0 = arith.constant 0 : index
  %three = arith.constant 3 : i64
  %tx = tile.region %x[%c0] [32] : memref<?xi32, #g> -> memref<32xi32, strided<[1], offset: ?>, #g>
  %ty = tile.region %y[%c0] [32] : memref<?xi64, #g> -> memref<32xi64, strided<[1], offset: ?>, #g>
  tile.parallel (%i) in [32] {
    %v = memref.load %tx[%i] : memref<32xi32, strided<[1], offset: ?>, #g>
    %q = arith.floordivsi %v, %d : i32
    %c = arith.ceildivsi %v, %d : i32
    %s = arith.addi %q, %c : i32
    %w = arith.extsi %s : i32 to i64
    %b = arith.cmpi slt, %v, %d : i32
    %u = arith.extui %b : i1 to i64
    %z = arith.addi %w, %u : i64
    %h = arith.shrui %z, %three : i64
    %e = arith.extui %v : i32 to i64
    %r = arith.addi %h, %e : i64
    memref.store %r, %ty[%i] : memref<32xi64, strided<[1], offset: ?>, #g>
  }
}
