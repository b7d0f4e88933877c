// f16 accumulators as the CUDA emitter prints them: wgmma's and mma.sync's
// .f16 forms with each 32-bit register of two elements bound in place
// (tessel::word_at), n/4 registers for wgmma and two for mma.sync, and the
// wait's fence over the same registers.
// RUN: tessel-opt %s --tessel-pipeline=arch=sm_90a | tessel-translate --emit-cuda | FileCheck %s --check-prefix=WGMMA
// RUN: tessel-opt %s --tessel-pipeline=arch=sm_89 | tessel-translate --emit-cuda | FileCheck %s --check-prefix=MMA

// WGMMA-LABEL: half_accumulator(
// WGMMA: wgmma.mma_async.sync.aligned.m64n64k32.f16.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1;
// WGMMA-NEXT: : "=r"(tessel::word_at([[ACC:v[0-9]+]], {{v[0-9]+}} + 0)), "=r"(tessel::word_at([[ACC]], {{v[0-9]+}} + 2))
// WGMMA: wgmma.wait_group.sync.aligned 0
// WGMMA: tessel::fence_registers([[ACC]]);
// MMA-LABEL: half_accumulator(
// MMA: mma.sync.aligned.m16n8k32.row.col.f16.e4m3.e4m3.f16 {%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%0, %1};
// MMA-NEXT: : "+r"(tessel::word_at([[ACC:v[0-9]+]], {{v[0-9]+}} + 0)), "+r"(tessel::word_at([[ACC]], {{v[0-9]+}} + 2))

#s = #tile.space<shared>
#f = #tile.space<fragment>
#g = #tile.space<global>
tile.kernel @half_accumulator(%c: memref<128x64xf16, #g>) grid(%bx) = affine_map<() -> (1)> threads(256) {
  %c0 = arith.constant 0 : index
  %a = tile.alloc : memref<128x32xf8E4M3FN, #s>
  %b = tile.alloc : memref<64x32xf8E4M3FN, #s>
  %acc = tile.alloc : memref<128x64xf16, #f>
  tile.gemm %a, %b, %acc {transpose_b, clear_accum} : memref<128x32xf8E4M3FN, #s>, memref<64x32xf8E4M3FN, #s>, memref<128x64xf16, #f>
  %out = tile.region %c[%c0, %c0] [128, 64] : memref<128x64xf16, #g> -> memref<128x64xf16, strided<[64, 1], offset: ?>, #g>
  tile.copy %acc, %out : memref<128x64xf16, #f>, memref<128x64xf16, strided<[64, 1], offset: ?>, #g>
}
