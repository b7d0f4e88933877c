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

// A u8 is read as the i8 of its bits (arith computes on signless integers)
// and zero-extended (a read past the end gives the i8 zero's bits); f32 and i32 reinterpret with __int_as_float and
// __float_as_int; the sum goes back to u8 through i8.
// CHECK-LABEL: void __launch_bounds__(32) bytes(tessel::u8 *__restrict__ p0, int p0_d0, float *__restrict__ p1, int p1_d0)
// CHECK: tessel::u8 {{v[0-9]+}} = p0[
// CHECK: tessel::u8 {{v[0-9]+}} = tessel::u8(v{{[0-9]+}});
// CHECK: tessel::i8 [[B:v[0-9]+]] = tessel::i8(v{{[0-9]+}});
// CHECK: int [[W:v[0-9]+]] = int((unsigned char)[[B]]);
// CHECK: float [[F:v[0-9]+]] = __int_as_float([[W]]);
// CHECK: int [[I:v[0-9]+]] = __float_as_int(v{{[0-9]+}});
// CHECK: int [[P:v[0-9]+]] = [[I]] + v{{[0-9]+}};
// CHECK: tessel::i8 [[N:v[0-9]+]] = tessel::i8([[P]]);
// CHECK: tessel::u8 [[U:v[0-9]+]] = tessel::u8([[N]]);
// CHECK: p0[{{.*}}] = [[U]];
tile.kernel @bytes(%q: memref<?xui8, #g>, %y: memref<?xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(32) {
  %c0 = arith.constant 0 : index
  %tq = tile.region %q[%c0] [32] : memref<?xui8, #g> -> memref<32xui8, strided<[1], offset: ?>, #g>
  %ty = tile.region %y[%c0] [32] : memref<?xf32, #g> -> memref<32xf32, strided<[1], offset: ?>, #g>
  tile.parallel (%i) in [32] {
    %v = memref.load %tq[%i] : memref<32xui8, strided<[1], offset: ?>, #g>
    %b = builtin.unrealized_conversion_cast %v : ui8 to i8
    %w = arith.extui %b : i8 to i32
    %f = arith.bitcast %w : i32 to f32
    %old = memref.load %ty[%i] : memref<32xf32, strided<[1], offset: ?>, #g>
    %back = arith.bitcast %old : f32 to i32
    %one = arith.constant 1 : i32
    %next = arith.addi %back, %one : i32
    %n = arith.trunci %next : i32 to i8
    %u = builtin.unrealized_conversion_cast %n : i8 to ui8
    memref.store %u, %tq[%i] : memref<32xui8, strided<[1], offset: ?>, #g>
    memref.store %f, %ty[%i] : memref<32xf32, strided<[1], offset: ?>, #g>
  }
}
