// tile.exp2 as the CUDA emitter prints it: the registers put on the FMA
// pipe call the device header's tessel::exp2_fma (a polynomial), the others
// tessel::exp2_approx (ex2.approx); bf16 computes in f32 and converts back.
// Registers one an iteration choose with a ternary on the unrolled
// register index, which the CUDA compiler folds in each copy.
// RUN: tessel-opt %s --tessel-pipeline=arch=sm_80 | tessel-translate --emit-cuda | FileCheck %s

// CHECK-LABEL: exp2_units
// CHECK: #pragma unroll
// CHECK: for (int [[R:v[0-9]+]] = {{.*}}) {
// CHECK: int [[REM:v[0-9]+]] = [[R]] % {{v[0-9]+}};
// CHECK: bool [[PICK:v[0-9]+]] = [[REM]] == {{v[0-9]+}};
// CHECK: float [[FMA:v[0-9]+]] = tessel::exp2_fma({{v[0-9]+}});
// CHECK: float [[SFU:v[0-9]+]] = tessel::exp2_approx({{v[0-9]+}});
// CHECK: float {{v[0-9]+}} = [[PICK]] ? [[FMA]] : [[SFU]];
// CHECK: tessel::bfloat16 {{v[0-9]+}} = tessel::bfloat16(tessel::exp2_fma(float({{v[0-9]+}})));

#g = #tile.space<global>
tile.kernel @exp2_units(%x: memref<?xf32, #g>, %y: memref<?xf32, #g>, %h: memref<?xbf16, #g>) grid(%bx) = affine_map<() -> (1)> threads(32) {
  %c0 = arith.constant 0 : index
  %tx = tile.region %x[%c0] [128] : memref<?xf32, #g> -> memref<128xf32, strided<[1], offset: ?>, #g>
  %ty = tile.region %y[%c0] [128] : memref<?xf32, #g> -> memref<128xf32, strided<[1], offset: ?>, #g>
  %f = tile.alloc : memref<128xf32, #tile.space<fragment>>
  tile.copy %tx, %f : memref<128xf32, strided<[1], offset: ?>, #g>, memref<128xf32, #tile.space<fragment>>
  tile.parallel (%i) in [128] {
    %v = memref.load %f[%i] : memref<128xf32, #tile.space<fragment>>
    %e = tile.exp2 %v fma_every 4 : f32
    memref.store %e, %f[%i] : memref<128xf32, #tile.space<fragment>>
  }
  tile.copy %f, %ty : memref<128xf32, #tile.space<fragment>>, memref<128xf32, strided<[1], offset: ?>, #g>
  %b = memref.load %h[%c0] : memref<?xbf16, #g>
  %eb = tile.exp2 %b fma_every 1 : bf16
  memref.store %eb, %h[%c0] : memref<?xbf16, #g>
}
