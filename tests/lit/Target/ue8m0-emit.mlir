// The ue8m0 scale type (f8E8M0FNU) as the CUDA emitter prints it: the
// device header's tessel::ue8m0 in parameters and declarations, truncf and
// extf as its conversions (rounding up, tessel_device.h). A read past the
// end yields the type's "zero", which it does not have: APFloat makes 0.0
// its smallest value, 2^-127, whose code is 0x00 (the zero bytes).
// RUN: tessel-opt %s --tessel-pipeline=arch=sm_80 | tessel-translate --emit-cuda | FileCheck %s

// CHECK-LABEL: void __launch_bounds__(32) scales(float *__restrict__ p0, int p0_d0, tessel::ue8m0 *__restrict__ p1, int p1_d0, float *__restrict__ p2, int p2_d0)
// CHECK: const tessel::ue8m0 [[PAD:v[0-9]+]] = tessel::ue8m0(5.87747175411143754e-39f);
// CHECK: tessel::ue8m0 [[E:v[0-9]+]] = tessel::ue8m0(v{{[0-9]+}});
// CHECK: p1[{{.*}}] = [[E]];
// CHECK: tessel::ue8m0 {{v[0-9]+}} = p1[
// CHECK: [[O:v[0-9]+]] = [[PAD]];
// CHECK: float [[W:v[0-9]+]] = float(float([[O]]));
// CHECK: p2[{{.*}}] = [[W]];

#g = #tile.space<global>
tile.kernel @scales(%x: memref<?xf32, #g>, %s: memref<?xf8E8M0FNU, #g>, %y: memref<?xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(32) {
  %c0 = arith.constant 0 : index
  %tx = tile.region %x[%c0] [32] : memref<?xf32, #g> -> memref<32xf32, strided<[1], offset: ?>, #g>
  %ts = tile.region %s[%c0] [32] : memref<?xf8E8M0FNU, #g> -> memref<32xf8E8M0FNU, strided<[1], offset: ?>, #g>
  %ty = tile.region %y[%c0] [32] : memref<?xf32, #g> -> memref<32xf32, strided<[1], offset: ?>, #g>
  tile.parallel (%i) in [32] {
    %v = memref.load %tx[%i] : memref<32xf32, strided<[1], offset: ?>, #g>
    %e = arith.truncf %v : f32 to f8E8M0FNU
    memref.store %e, %ts[%i] : memref<32xf8E8M0FNU, strided<[1], offset: ?>, #g>
    %o = memref.load %ts[%i] : memref<32xf8E8M0FNU, strided<[1], offset: ?>, #g>
    %w = arith.extf %o : f8E8M0FNU to f32
    memref.store %w, %ty[%i] : memref<32xf32, strided<[1], offset: ?>, #g>
  }
}
