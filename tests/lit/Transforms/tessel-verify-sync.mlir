// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-verify-sync{arch=sm_90a}))' | FileCheck %s

// Each case is tile-level IR as it stands after tessel-insert-barriers; the
// verifier either proves every cross-thread order or names what is missing
// at the later access.

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// A copy into shared memory and a copy out of it by other threads: a
// barrier between them is proved, its absence is an error at the reader.
// CHECK-LABEL: tile.kernel @with_barrier
tile.kernel @with_barrier(%a: memref<64xf32, #g>, %b: memref<64xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(64) {
  %s = tile.alloc {name = "bounce"} : memref<64xf32, #s>
  tile.copy %a, %s : memref<64xf32, #g>, memref<64xf32, #s>
  tile.barrier
  tile.copy %s, %b : memref<64xf32, #s>, memref<64xf32, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

tile.kernel @missing_barrier(%a: memref<64xf32, #g>, %b: memref<64xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(64) {
  %s = tile.alloc {name = "bounce"} : memref<64xf32, #s>
  tile.copy %a, %s : memref<64xf32, #g>, memref<64xf32, #s>
  // expected-error @+1 {{missing barrier: 'bounce' is written at}}
  tile.copy %s, %b : memref<64xf32, #s>, memref<64xf32, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// Disjoint constant windows of one tile need no barrier between them.
// CHECK-LABEL: tile.kernel @disjoint_windows
tile.kernel @disjoint_windows(%a: memref<64x32xf16, #g>, %b: memref<64x32xf16, #g>, %o: memref<64x64xf16, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %s = tile.alloc : memref<64x64xf16, #s>
  %w0 = tile.region %s[%c0, %c0] [64, 32] : memref<64x64xf16, #s> -> memref<64x32xf16, strided<[64, 1]>, #s>
  %w1 = tile.region %s[%c0, %c32] [64, 32] : memref<64x64xf16, #s> -> memref<64x32xf16, strided<[64, 1], offset: 32>, #s>
  tile.copy %a, %w0 : memref<64x32xf16, #g>, memref<64x32xf16, strided<[64, 1]>, #s>
  tile.copy %b, %w1 : memref<64x32xf16, #g>, memref<64x32xf16, strided<[64, 1], offset: 32>, #s>
  tile.barrier
  tile.copy %s, %o : memref<64x64xf16, #s>, memref<64x64xf16, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// Overlapping ones do.
tile.kernel @overlapping_windows(%a: memref<64x32xf16, #g>, %b: memref<64x32xf16, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %s = tile.alloc {name = "halves"} : memref<64x64xf16, #s>
  %w0 = tile.region %s[%c0, %c0] [64, 32] : memref<64x64xf16, #s> -> memref<64x32xf16, strided<[64, 1]>, #s>
  %w1 = tile.region %s[%c0, %c16] [64, 32] : memref<64x64xf16, #s> -> memref<64x32xf16, strided<[64, 1], offset: 16>, #s>
  tile.copy %a, %w0 : memref<64x32xf16, #g>, memref<64x32xf16, strided<[64, 1]>, #s>
  // expected-error @+1 {{missing barrier: 'halves' is written at}}
  tile.copy %b, %w1 : memref<64x32xf16, #g>, memref<64x32xf16, strided<[64, 1], offset: 16>, #s>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// A TMA load is complete for the threads that wait on its mbarrier, with no
// barrier besides; a barrier alone does not complete it.
// CHECK-LABEL: tile.kernel @tma_waited
tile.kernel @tma_waited(%x: memref<?x64xf16, #g>, %y: memref<64x64xf16, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %bar = tile.alloc {name = "landed"} : memref<1xi64, #s>
  %t = tile.alloc {name = "x_tile"} : memref<64x64xf16, #s>
  tile.mbarrier_init %bar[%c0] arrivals(1) : memref<1xi64, #s>
  tile.fence_mbarrier_init
  tile.barrier
  %xr = tile.region %x[%c0, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
  tile.mbarrier_expect_tx %bar[%c0] bytes(8192) : memref<1xi64, #s>
  tile.copy_async %xr, %t arrive %bar[%c0] : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>, memref<1xi64, #s>
  tile.mbarrier_wait %bar[%c0] parity %c0 : memref<1xi64, #s>
  tile.copy %t, %y : memref<64x64xf16, #s>, memref<64x64xf16, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

tile.kernel @missing_mbarrier_wait(%x: memref<?x64xf16, #g>, %y: memref<64x64xf16, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %bar = tile.alloc {name = "landed"} : memref<1xi64, #s>
  %t = tile.alloc {name = "x_tile"} : memref<64x64xf16, #s>
  tile.mbarrier_init %bar[%c0] arrivals(1) : memref<1xi64, #s>
  tile.fence_mbarrier_init
  tile.barrier
  %xr = tile.region %x[%c0, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
  tile.mbarrier_expect_tx %bar[%c0] bytes(8192) : memref<1xi64, #s>
  tile.copy_async %xr, %t arrive %bar[%c0] : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>, memref<1xi64, #s>
  tile.barrier
  // expected-error @+1 {{missing mbarrier wait: 'x_tile' is still being loaded by the TMA copy at}}
  tile.copy %t, %y : memref<64x64xf16, #s>, memref<64x64xf16, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

tile.kernel @init_unpublished(%x: memref<?x64xf16, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %bar = tile.alloc : memref<1xi64, #s>
  tile.mbarrier_init %bar[%c0] arrivals(1) : memref<1xi64, #s>
  tile.fence_mbarrier_init
  // expected-error @+1 {{this mbarrier is used before a barrier orders it after its initialisation}}
  tile.mbarrier_expect_tx %bar[%c0] bytes(8192) : memref<1xi64, #s>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

tile.kernel @init_unfenced(%x: memref<?x64xf16, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %bar = tile.alloc : memref<1xi64, #s>
  %t = tile.alloc : memref<64x64xf16, #s>
  tile.mbarrier_init %bar[%c0] arrivals(1) : memref<1xi64, #s>
  tile.barrier
  %xr = tile.region %x[%c0, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
  // expected-error @+1 {{no fence.mbarrier_init}}
  tile.copy_async %xr, %t arrive %bar[%c0] : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>, memref<1xi64, #s>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// Threads write a tile that wgmma (the async proxy) then reads: the barrier
// orders the threads, fence.proxy.async the proxies.
// CHECK-LABEL: tile.kernel @proxy_fenced
tile.kernel @proxy_fenced() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %acc = tile.alloc : memref<64x64xf32, #f>
  %t = tile.alloc {name = "a_tile"} : memref<64x64xf16, #s>
  %zero = arith.constant 0.0 : f16
  tile.fill %t, %zero : memref<64x64xf16, #s>, f16
  tile.fence_proxy_async
  tile.barrier
  tile.gemm %t, %t, %acc {instruction = #tile.instr<wgmma>, warps = array<i64: 1, 1>} : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

tile.kernel @missing_proxy_fence() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %acc = tile.alloc : memref<64x64xf32, #f>
  %t = tile.alloc {name = "a_tile"} : memref<64x64xf16, #s>
  %zero = arith.constant 0.0 : f16
  tile.fill %t, %zero : memref<64x64xf16, #s>, f16
  tile.barrier
  // expected-error @+1 {{missing proxy fence: 'a_tile' is written by threads at}}
  tile.gemm %t, %t, %acc {instruction = #tile.instr<wgmma>, warps = array<i64: 1, 1>} : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// cp.async writes through the generic proxy: once its group is waited for
// and a barrier publishes it, wgmma still needs fence.proxy.async first.
tile.kernel @cp_async_missing_proxy_fence(%x: memref<?x64xf16, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %acc = tile.alloc : memref<64x64xf32, #f>
  %t = tile.alloc {name = "a_tile"} : memref<64x64xf16, #s>
  %xr = tile.region %x[%c0, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
  tile.copy %xr, %t {async} : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>
  tile.cp_async_commit
  tile.cp_async_wait pending(0)
  tile.barrier
  // expected-error @+1 {{missing proxy fence: 'a_tile' is written by threads at}}
  tile.gemm %t, %t, %acc {instruction = #tile.instr<wgmma>, warps = array<i64: 1, 1>} : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
}

// -----

// A warp-specialized pipeline as tessel-warp-specialize builds it: the
// consumers wait on `full` at the stage they read and release it on
// `empty`, which the producer waits on before refilling.
// CHECK-LABEL: tile.kernel @pipeline
#map = affine_map<()[s0] -> (1)>
  tile.kernel @pipeline(%arg0: memref<?x64xf16, #tile.space<global>>, %arg1: memref<?xi32, #tile.space<global>>, %arg2: i32, %arg3: index) grid(%arg4) = #map threads(256) {
    %0 = tile.alloc {name = "empty"} : memref<2xi64, #tile.space<shared>>
    %c0 = arith.constant 0 : index
    tile.mbarrier_init %0[%c0] arrivals(4) : memref<2xi64, #tile.space<shared>>
    %c1 = arith.constant 1 : index
    tile.mbarrier_init %0[%c1] arrivals(4) : memref<2xi64, #tile.space<shared>>
    tile.fence_mbarrier_init
    %1 = tile.alloc {name = "full"} : memref<2xi64, #tile.space<shared>>
    %c0_0 = arith.constant 0 : index
    tile.mbarrier_init %1[%c0_0] arrivals(1) : memref<2xi64, #tile.space<shared>>
    %c1_1 = arith.constant 1 : index
    tile.mbarrier_init %1[%c1_1] arrivals(1) : memref<2xi64, #tile.space<shared>>
    tile.fence_mbarrier_init
    %c0_2 = arith.constant 0 : index
    %c1_3 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %2 = tile.alloc {layout = #tile.shared<[64, 64], elem = 2, swizzle = 128, pad = 0>, stages = 2 : i64} : memref<64x64xf16, #tile.space<shared>>
    %3 = tile.alloc {layout = #tile.fragment<[64, 64], reg = [[0, 1], [8, 0], [0, 8], [0, 16], [0, 32]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = [[16, 0], [32, 0]]>} : memref<64x64xf32, #tile.space<fragment>>
    tile.barrier
    tile.role threads(128, 128) {
      scf.for %arg5 = %c0_2 to %arg3 step %c1_3 {
        %4 = arith.subi %arg5, %c0_2 : index
        %5 = arith.divui %4, %c1_3 : index
        %c2 = arith.constant 2 : index
        %6 = arith.remui %5, %c2 : index
        %c2_4 = arith.constant 2 : index
        %7 = arith.divui %5, %c2_4 : index
        %c2_5 = arith.constant 2 : index
        %8 = arith.remui %7, %c2_5 : index
        %c1_6 = arith.constant 1 : index
        %9 = arith.xori %8, %c1_6 : index
        tile.mbarrier_wait %0[%6] parity %9 : memref<2xi64, #tile.space<shared>>
        tile.mbarrier_expect_tx %1[%6] bytes(8192) : memref<2xi64, #tile.space<shared>>
        %10 = arith.muli %arg5, %c64 : index
        %11 = tile.region %arg0[%10, %c0_2] [64, 64] : memref<?x64xf16, #tile.space<global>> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>
        %12 = tile.stage %2[%6] : memref<64x64xf16, #tile.space<shared>>
        tile.copy_async %11, %12 arrive %1[%6] : memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>, memref<64x64xf16, #tile.space<shared>>, memref<2xi64, #tile.space<shared>>
      }
    }
    tile.role threads(0, 128) {
      scf.for %arg5 = %c0_2 to %arg3 step %c1_3 {
        %4 = arith.subi %arg5, %c0_2 : index
        %5 = arith.divui %4, %c1_3 : index
        %c2 = arith.constant 2 : index
        %6 = arith.remui %5, %c2 : index
        %c2_4 = arith.constant 2 : index
        %7 = arith.divui %5, %c2_4 : index
        %c2_5 = arith.constant 2 : index
        %8 = arith.remui %7, %c2_5 : index
        tile.mbarrier_wait %1[%6] parity %8 : memref<2xi64, #tile.space<shared>>
        %9 = tile.stage %2[%6] : memref<64x64xf16, #tile.space<shared>>
        %10 = arith.muli %arg5, %c64 : index
        %11 = tile.region %arg0[%10, %c0_2] [64, 64] : memref<?x64xf16, #tile.space<global>> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>
        tile.gemm %9, %9, %3 {instruction = #tile.instr<wgmma>, warps = array<i64: 1, 1>} : memref<64x64xf16, #tile.space<shared>>, memref<64x64xf16, #tile.space<shared>>, memref<64x64xf32, #tile.space<fragment>>
        tile.mbarrier_arrive %0[%6] : memref<2xi64, #tile.space<shared>>
      }
    }
  }

// -----

// The consumers wait for stage k % 2 and read stage (k + 1) % 2.
#map = affine_map<()[s0] -> (1)>
  tile.kernel @stage_mixup(%arg0: memref<?x64xf16, #tile.space<global>>, %arg1: memref<?xi32, #tile.space<global>>, %arg2: i32, %arg3: index) grid(%arg4) = #map threads(256) {
    %0 = tile.alloc {name = "empty"} : memref<2xi64, #tile.space<shared>>
    %c0 = arith.constant 0 : index
    tile.mbarrier_init %0[%c0] arrivals(4) : memref<2xi64, #tile.space<shared>>
    %c1 = arith.constant 1 : index
    tile.mbarrier_init %0[%c1] arrivals(4) : memref<2xi64, #tile.space<shared>>
    tile.fence_mbarrier_init
    %1 = tile.alloc {name = "full"} : memref<2xi64, #tile.space<shared>>
    %c0_0 = arith.constant 0 : index
    tile.mbarrier_init %1[%c0_0] arrivals(1) : memref<2xi64, #tile.space<shared>>
    %c1_1 = arith.constant 1 : index
    tile.mbarrier_init %1[%c1_1] arrivals(1) : memref<2xi64, #tile.space<shared>>
    tile.fence_mbarrier_init
    %c0_2 = arith.constant 0 : index
    %c1_3 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %2 = tile.alloc {layout = #tile.shared<[64, 64], elem = 2, swizzle = 128, pad = 0>, stages = 2 : i64} : memref<64x64xf16, #tile.space<shared>>
    %3 = tile.alloc {layout = #tile.fragment<[64, 64], reg = [[0, 1], [8, 0], [0, 8], [0, 16], [0, 32]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = [[16, 0], [32, 0]]>} : memref<64x64xf32, #tile.space<fragment>>
    tile.barrier
    tile.role threads(128, 128) {
      scf.for %arg5 = %c0_2 to %arg3 step %c1_3 {
        %4 = arith.subi %arg5, %c0_2 : index
        %5 = arith.divui %4, %c1_3 : index
        %c2 = arith.constant 2 : index
        %6 = arith.remui %5, %c2 : index
        %c2_4 = arith.constant 2 : index
        %7 = arith.divui %5, %c2_4 : index
        %c2_5 = arith.constant 2 : index
        %8 = arith.remui %7, %c2_5 : index
        %c1_6 = arith.constant 1 : index
        %9 = arith.xori %8, %c1_6 : index
        tile.mbarrier_wait %0[%6] parity %9 : memref<2xi64, #tile.space<shared>>
        tile.mbarrier_expect_tx %1[%6] bytes(8192) : memref<2xi64, #tile.space<shared>>
        %10 = arith.muli %arg5, %c64 : index
        %11 = tile.region %arg0[%10, %c0_2] [64, 64] : memref<?x64xf16, #tile.space<global>> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>
        %12 = tile.stage %2[%6] : memref<64x64xf16, #tile.space<shared>>
        tile.copy_async %11, %12 arrive %1[%6] : memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>, memref<64x64xf16, #tile.space<shared>>, memref<2xi64, #tile.space<shared>>
      }
    }
    tile.role threads(0, 128) {
      scf.for %arg5 = %c0_2 to %arg3 step %c1_3 {
        %4 = arith.subi %arg5, %c0_2 : index
        %5 = arith.divui %4, %c1_3 : index
        %c2 = arith.constant 2 : index
        %6 = arith.remui %5, %c2 : index
        %c2_4 = arith.constant 2 : index
        %7 = arith.divui %5, %c2_4 : index
        %c2_5 = arith.constant 2 : index
        %8 = arith.remui %7, %c2_5 : index
        tile.mbarrier_wait %1[%6] parity %8 : memref<2xi64, #tile.space<shared>>
        %next = arith.addi %5, %c1_3 : index
        %other = arith.remui %next, %c2 : index
        %9 = tile.stage %2[%other] : memref<64x64xf16, #tile.space<shared>>
        %10 = arith.muli %arg5, %c64 : index
        %11 = tile.region %arg0[%10, %c0_2] [64, 64] : memref<?x64xf16, #tile.space<global>> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>
        // expected-error @+1 {{stage mix-up: the buffer allocated at}}
        tile.gemm %9, %9, %3 {instruction = #tile.instr<wgmma>, warps = array<i64: 1, 1>} : memref<64x64xf16, #tile.space<shared>>, memref<64x64xf16, #tile.space<shared>>, memref<64x64xf32, #tile.space<fragment>>
        tile.mbarrier_arrive %0[%6] : memref<2xi64, #tile.space<shared>>
      }
    }
  }

// -----

// The producer fills stage (k + 1) % 2 but completes on full[k % 2].
#map = affine_map<()[s0] -> (1)>
  tile.kernel @fill_mixup(%arg0: memref<?x64xf16, #tile.space<global>>, %arg1: memref<?xi32, #tile.space<global>>, %arg2: i32, %arg3: index) grid(%arg4) = #map threads(256) {
    %0 = tile.alloc {name = "empty"} : memref<2xi64, #tile.space<shared>>
    %c0 = arith.constant 0 : index
    tile.mbarrier_init %0[%c0] arrivals(4) : memref<2xi64, #tile.space<shared>>
    %c1 = arith.constant 1 : index
    tile.mbarrier_init %0[%c1] arrivals(4) : memref<2xi64, #tile.space<shared>>
    tile.fence_mbarrier_init
    %1 = tile.alloc {name = "full"} : memref<2xi64, #tile.space<shared>>
    %c0_0 = arith.constant 0 : index
    tile.mbarrier_init %1[%c0_0] arrivals(1) : memref<2xi64, #tile.space<shared>>
    %c1_1 = arith.constant 1 : index
    tile.mbarrier_init %1[%c1_1] arrivals(1) : memref<2xi64, #tile.space<shared>>
    tile.fence_mbarrier_init
    %c0_2 = arith.constant 0 : index
    %c1_3 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %2 = tile.alloc {layout = #tile.shared<[64, 64], elem = 2, swizzle = 128, pad = 0>, stages = 2 : i64} : memref<64x64xf16, #tile.space<shared>>
    %3 = tile.alloc {layout = #tile.fragment<[64, 64], reg = [[0, 1], [8, 0], [0, 8], [0, 16], [0, 32]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = [[16, 0], [32, 0]]>} : memref<64x64xf32, #tile.space<fragment>>
    tile.barrier
    tile.role threads(128, 128) {
      scf.for %arg5 = %c0_2 to %arg3 step %c1_3 {
        %4 = arith.subi %arg5, %c0_2 : index
        %5 = arith.divui %4, %c1_3 : index
        %c2 = arith.constant 2 : index
        %6 = arith.remui %5, %c2 : index
        %c2_4 = arith.constant 2 : index
        %7 = arith.divui %5, %c2_4 : index
        %c2_5 = arith.constant 2 : index
        %8 = arith.remui %7, %c2_5 : index
        %c1_6 = arith.constant 1 : index
        %9 = arith.xori %8, %c1_6 : index
        tile.mbarrier_wait %0[%6] parity %9 : memref<2xi64, #tile.space<shared>>
        tile.mbarrier_expect_tx %1[%6] bytes(8192) : memref<2xi64, #tile.space<shared>>
        %10 = arith.muli %arg5, %c64 : index
        %11 = tile.region %arg0[%10, %c0_2] [64, 64] : memref<?x64xf16, #tile.space<global>> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>
        %next = arith.addi %5, %c1_3 : index
        %other = arith.remui %next, %c2 : index
        %12 = tile.stage %2[%other] : memref<64x64xf16, #tile.space<shared>>
        // expected-error @+1 {{stage mix-up: this TMA copy fills stage}}
        tile.copy_async %11, %12 arrive %1[%6] : memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>, memref<64x64xf16, #tile.space<shared>>, memref<2xi64, #tile.space<shared>>
      }
    }
    tile.role threads(0, 128) {
      scf.for %arg5 = %c0_2 to %arg3 step %c1_3 {
        %4 = arith.subi %arg5, %c0_2 : index
        %5 = arith.divui %4, %c1_3 : index
        %c2 = arith.constant 2 : index
        %6 = arith.remui %5, %c2 : index
        %c2_4 = arith.constant 2 : index
        %7 = arith.divui %5, %c2_4 : index
        %c2_5 = arith.constant 2 : index
        %8 = arith.remui %7, %c2_5 : index
        tile.mbarrier_wait %1[%6] parity %8 : memref<2xi64, #tile.space<shared>>
        %9 = tile.stage %2[%6] : memref<64x64xf16, #tile.space<shared>>
        %10 = arith.muli %arg5, %c64 : index
        %11 = tile.region %arg0[%10, %c0_2] [64, 64] : memref<?x64xf16, #tile.space<global>> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>
        tile.gemm %9, %9, %3 {instruction = #tile.instr<wgmma>, warps = array<i64: 1, 1>} : memref<64x64xf16, #tile.space<shared>>, memref<64x64xf16, #tile.space<shared>>, memref<64x64xf32, #tile.space<fragment>>
        tile.mbarrier_arrive %0[%6] : memref<2xi64, #tile.space<shared>>
      }
    }
  }

// -----

// The consumers read a stage without waiting for its loads.
#map = affine_map<()[s0] -> (1)>
  tile.kernel @no_full_wait(%arg0: memref<?x64xf16, #tile.space<global>>, %arg1: memref<?xi32, #tile.space<global>>, %arg2: i32, %arg3: index) grid(%arg4) = #map threads(256) {
    %0 = tile.alloc {name = "empty"} : memref<2xi64, #tile.space<shared>>
    %c0 = arith.constant 0 : index
    tile.mbarrier_init %0[%c0] arrivals(4) : memref<2xi64, #tile.space<shared>>
    %c1 = arith.constant 1 : index
    tile.mbarrier_init %0[%c1] arrivals(4) : memref<2xi64, #tile.space<shared>>
    tile.fence_mbarrier_init
    %1 = tile.alloc {name = "full"} : memref<2xi64, #tile.space<shared>>
    %c0_0 = arith.constant 0 : index
    tile.mbarrier_init %1[%c0_0] arrivals(1) : memref<2xi64, #tile.space<shared>>
    %c1_1 = arith.constant 1 : index
    tile.mbarrier_init %1[%c1_1] arrivals(1) : memref<2xi64, #tile.space<shared>>
    tile.fence_mbarrier_init
    %c0_2 = arith.constant 0 : index
    %c1_3 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %2 = tile.alloc {layout = #tile.shared<[64, 64], elem = 2, swizzle = 128, pad = 0>, stages = 2 : i64} : memref<64x64xf16, #tile.space<shared>>
    %3 = tile.alloc {layout = #tile.fragment<[64, 64], reg = [[0, 1], [8, 0], [0, 8], [0, 16], [0, 32]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = [[16, 0], [32, 0]]>} : memref<64x64xf32, #tile.space<fragment>>
    tile.barrier
    tile.role threads(128, 128) {
      scf.for %arg5 = %c0_2 to %arg3 step %c1_3 {
        %4 = arith.subi %arg5, %c0_2 : index
        %5 = arith.divui %4, %c1_3 : index
        %c2 = arith.constant 2 : index
        %6 = arith.remui %5, %c2 : index
        %c2_4 = arith.constant 2 : index
        %7 = arith.divui %5, %c2_4 : index
        %c2_5 = arith.constant 2 : index
        %8 = arith.remui %7, %c2_5 : index
        %c1_6 = arith.constant 1 : index
        %9 = arith.xori %8, %c1_6 : index
        tile.mbarrier_wait %0[%6] parity %9 : memref<2xi64, #tile.space<shared>>
        tile.mbarrier_expect_tx %1[%6] bytes(8192) : memref<2xi64, #tile.space<shared>>
        %10 = arith.muli %arg5, %c64 : index
        %11 = tile.region %arg0[%10, %c0_2] [64, 64] : memref<?x64xf16, #tile.space<global>> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>
        %12 = tile.stage %2[%6] : memref<64x64xf16, #tile.space<shared>>
        tile.copy_async %11, %12 arrive %1[%6] : memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>, memref<64x64xf16, #tile.space<shared>>, memref<2xi64, #tile.space<shared>>
      }
    }
    tile.role threads(0, 128) {
      scf.for %arg5 = %c0_2 to %arg3 step %c1_3 {
        %4 = arith.subi %arg5, %c0_2 : index
        %5 = arith.divui %4, %c1_3 : index
        %c2 = arith.constant 2 : index
        %6 = arith.remui %5, %c2 : index
        %c2_4 = arith.constant 2 : index
        %7 = arith.divui %5, %c2_4 : index
        %c2_5 = arith.constant 2 : index
        %8 = arith.remui %7, %c2_5 : index
        %9 = tile.stage %2[%6] : memref<64x64xf16, #tile.space<shared>>
        %10 = arith.muli %arg5, %c64 : index
        %11 = tile.region %arg0[%10, %c0_2] [64, 64] : memref<?x64xf16, #tile.space<global>> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>
        // expected-error @+1 {{missing mbarrier wait: the buffer allocated at}}
        tile.gemm %9, %9, %3 {instruction = #tile.instr<wgmma>, warps = array<i64: 1, 1>} : memref<64x64xf16, #tile.space<shared>>, memref<64x64xf16, #tile.space<shared>>, memref<64x64xf32, #tile.space<fragment>>
        tile.mbarrier_arrive %0[%6] : memref<2xi64, #tile.space<shared>>
      }
    }
  }

// -----

// The consumers never release their stage: the producer may refill it
// while it is read.
#map = affine_map<()[s0] -> (1)>
  tile.kernel @no_release(%arg0: memref<?x64xf16, #tile.space<global>>, %arg1: memref<?xi32, #tile.space<global>>, %arg2: i32, %arg3: index) grid(%arg4) = #map threads(256) {
    %0 = tile.alloc {name = "empty"} : memref<2xi64, #tile.space<shared>>
    %c0 = arith.constant 0 : index
    tile.mbarrier_init %0[%c0] arrivals(4) : memref<2xi64, #tile.space<shared>>
    %c1 = arith.constant 1 : index
    tile.mbarrier_init %0[%c1] arrivals(4) : memref<2xi64, #tile.space<shared>>
    tile.fence_mbarrier_init
    %1 = tile.alloc {name = "full"} : memref<2xi64, #tile.space<shared>>
    %c0_0 = arith.constant 0 : index
    tile.mbarrier_init %1[%c0_0] arrivals(1) : memref<2xi64, #tile.space<shared>>
    %c1_1 = arith.constant 1 : index
    tile.mbarrier_init %1[%c1_1] arrivals(1) : memref<2xi64, #tile.space<shared>>
    tile.fence_mbarrier_init
    %c0_2 = arith.constant 0 : index
    %c1_3 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %2 = tile.alloc {layout = #tile.shared<[64, 64], elem = 2, swizzle = 128, pad = 0>, stages = 2 : i64} : memref<64x64xf16, #tile.space<shared>>
    %3 = tile.alloc {layout = #tile.fragment<[64, 64], reg = [[0, 1], [8, 0], [0, 8], [0, 16], [0, 32]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = [[16, 0], [32, 0]]>} : memref<64x64xf32, #tile.space<fragment>>
    tile.barrier
    tile.role threads(128, 128) {
      scf.for %arg5 = %c0_2 to %arg3 step %c1_3 {
        %4 = arith.subi %arg5, %c0_2 : index
        %5 = arith.divui %4, %c1_3 : index
        %c2 = arith.constant 2 : index
        %6 = arith.remui %5, %c2 : index
        %c2_4 = arith.constant 2 : index
        %7 = arith.divui %5, %c2_4 : index
        %c2_5 = arith.constant 2 : index
        %8 = arith.remui %7, %c2_5 : index
        %c1_6 = arith.constant 1 : index
        %9 = arith.xori %8, %c1_6 : index
        tile.mbarrier_wait %0[%6] parity %9 : memref<2xi64, #tile.space<shared>>
        tile.mbarrier_expect_tx %1[%6] bytes(8192) : memref<2xi64, #tile.space<shared>>
        %10 = arith.muli %arg5, %c64 : index
        %11 = tile.region %arg0[%10, %c0_2] [64, 64] : memref<?x64xf16, #tile.space<global>> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>
        %12 = tile.stage %2[%6] : memref<64x64xf16, #tile.space<shared>>
        tile.copy_async %11, %12 arrive %1[%6] : memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>, memref<64x64xf16, #tile.space<shared>>, memref<2xi64, #tile.space<shared>>
      }
    }
    tile.role threads(0, 128) {
      scf.for %arg5 = %c0_2 to %arg3 step %c1_3 {
        %4 = arith.subi %arg5, %c0_2 : index
        %5 = arith.divui %4, %c1_3 : index
        %c2 = arith.constant 2 : index
        %6 = arith.remui %5, %c2 : index
        %c2_4 = arith.constant 2 : index
        %7 = arith.divui %5, %c2_4 : index
        %c2_5 = arith.constant 2 : index
        %8 = arith.remui %7, %c2_5 : index
        tile.mbarrier_wait %1[%6] parity %8 : memref<2xi64, #tile.space<shared>>
        %9 = tile.stage %2[%6] : memref<64x64xf16, #tile.space<shared>>
        %10 = arith.muli %arg5, %c64 : index
        %11 = tile.region %arg0[%10, %c0_2] [64, 64] : memref<?x64xf16, #tile.space<global>> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>
        // expected-error @+1 {{no mbarrier orders two roles' accesses}}
        tile.gemm %9, %9, %3 {instruction = #tile.instr<wgmma>, warps = array<i64: 1, 1>} : memref<64x64xf16, #tile.space<shared>>, memref<64x64xf16, #tile.space<shared>>, memref<64x64xf32, #tile.space<fragment>>
      }
    }
  }

// -----

// What tessel-warp-specialize made of a flag wait written before a
// pipelined loop (the natural place): only the consumers waited, and the
// producer issued the loads the wait was to guard.
#map = affine_map<()[s0] -> (1)>
  tile.kernel @wait_before_loop(%arg0: memref<?x64xf16, #tile.space<global>>, %arg1: memref<?xi32, #tile.space<global>>, %arg2: i32, %arg3: index) grid(%arg4) = #map threads(256) {
    %0 = tile.alloc {name = "empty"} : memref<2xi64, #tile.space<shared>>
    %c0 = arith.constant 0 : index
    tile.mbarrier_init %0[%c0] arrivals(4) : memref<2xi64, #tile.space<shared>>
    %c1 = arith.constant 1 : index
    tile.mbarrier_init %0[%c1] arrivals(4) : memref<2xi64, #tile.space<shared>>
    tile.fence_mbarrier_init
    %1 = tile.alloc {name = "full"} : memref<2xi64, #tile.space<shared>>
    %c0_0 = arith.constant 0 : index
    tile.mbarrier_init %1[%c0_0] arrivals(1) : memref<2xi64, #tile.space<shared>>
    %c1_1 = arith.constant 1 : index
    tile.mbarrier_init %1[%c1_1] arrivals(1) : memref<2xi64, #tile.space<shared>>
    tile.fence_mbarrier_init
    %c0_2 = arith.constant 0 : index
    %c1_3 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %2 = tile.alloc {layout = #tile.shared<[64, 64], elem = 2, swizzle = 128, pad = 0>, stages = 2 : i64} : memref<64x64xf16, #tile.space<shared>>
    %3 = tile.alloc {layout = #tile.fragment<[64, 64], reg = [[0, 1], [8, 0], [0, 8], [0, 16], [0, 32]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = [[16, 0], [32, 0]]>} : memref<64x64xf32, #tile.space<fragment>>
    tile.barrier
    tile.role threads(128, 128) {
      scf.for %arg5 = %c0_2 to %arg3 step %c1_3 {
        %4 = arith.subi %arg5, %c0_2 : index
        %5 = arith.divui %4, %c1_3 : index
        %c2 = arith.constant 2 : index
        %6 = arith.remui %5, %c2 : index
        %c2_4 = arith.constant 2 : index
        %7 = arith.divui %5, %c2_4 : index
        %c2_5 = arith.constant 2 : index
        %8 = arith.remui %7, %c2_5 : index
        %c1_6 = arith.constant 1 : index
        %9 = arith.xori %8, %c1_6 : index
        tile.mbarrier_wait %0[%6] parity %9 : memref<2xi64, #tile.space<shared>>
        tile.mbarrier_expect_tx %1[%6] bytes(8192) : memref<2xi64, #tile.space<shared>>
        %10 = arith.muli %arg5, %c64 : index
        %11 = tile.region %arg0[%10, %c0_2] [64, 64] : memref<?x64xf16, #tile.space<global>> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>
        %12 = tile.stage %2[%6] : memref<64x64xf16, #tile.space<shared>>
        tile.copy_async %11, %12 arrive %1[%6] : memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>, memref<64x64xf16, #tile.space<shared>>, memref<2xi64, #tile.space<shared>>
      }
    }
    tile.role threads(0, 128) {
      // expected-error @+1 {{wait in the wrong role: this flag wait comes before the TMA loads at}}
      tile.wait %arg1[%arg4], %arg2 timeout_ms(500) : memref<?xi32, #tile.space<global>>, i32
      scf.for %arg5 = %c0_2 to %arg3 step %c1_3 {
        %4 = arith.subi %arg5, %c0_2 : index
        %5 = arith.divui %4, %c1_3 : index
        %c2 = arith.constant 2 : index
        %6 = arith.remui %5, %c2 : index
        %c2_4 = arith.constant 2 : index
        %7 = arith.divui %5, %c2_4 : index
        %c2_5 = arith.constant 2 : index
        %8 = arith.remui %7, %c2_5 : index
        tile.mbarrier_wait %1[%6] parity %8 : memref<2xi64, #tile.space<shared>>
        %9 = tile.stage %2[%6] : memref<64x64xf16, #tile.space<shared>>
        %10 = arith.muli %arg5, %c64 : index
        %11 = tile.region %arg0[%10, %c0_2] [64, 64] : memref<?x64xf16, #tile.space<global>> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>
        tile.gemm %9, %9, %3 {instruction = #tile.instr<wgmma>, warps = array<i64: 1, 1>} : memref<64x64xf16, #tile.space<shared>>, memref<64x64xf16, #tile.space<shared>>, memref<64x64xf32, #tile.space<fragment>>
        tile.mbarrier_arrive %0[%6] : memref<2xi64, #tile.space<shared>>
      }
    }
  }

// -----

// As tessel-warp-specialize now places it: both roles wait.
// CHECK-LABEL: tile.kernel @wait_in_both_roles
#map = affine_map<()[s0] -> (1)>
  tile.kernel @wait_in_both_roles(%arg0: memref<?x64xf16, #tile.space<global>>, %arg1: memref<?xi32, #tile.space<global>>, %arg2: i32, %arg3: index) grid(%arg4) = #map threads(256) {
    %0 = tile.alloc {name = "empty"} : memref<2xi64, #tile.space<shared>>
    %c0 = arith.constant 0 : index
    tile.mbarrier_init %0[%c0] arrivals(4) : memref<2xi64, #tile.space<shared>>
    %c1 = arith.constant 1 : index
    tile.mbarrier_init %0[%c1] arrivals(4) : memref<2xi64, #tile.space<shared>>
    tile.fence_mbarrier_init
    %1 = tile.alloc {name = "full"} : memref<2xi64, #tile.space<shared>>
    %c0_0 = arith.constant 0 : index
    tile.mbarrier_init %1[%c0_0] arrivals(1) : memref<2xi64, #tile.space<shared>>
    %c1_1 = arith.constant 1 : index
    tile.mbarrier_init %1[%c1_1] arrivals(1) : memref<2xi64, #tile.space<shared>>
    tile.fence_mbarrier_init
    %c0_2 = arith.constant 0 : index
    %c1_3 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %2 = tile.alloc {layout = #tile.shared<[64, 64], elem = 2, swizzle = 128, pad = 0>, stages = 2 : i64} : memref<64x64xf16, #tile.space<shared>>
    %3 = tile.alloc {layout = #tile.fragment<[64, 64], reg = [[0, 1], [8, 0], [0, 8], [0, 16], [0, 32]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = [[16, 0], [32, 0]]>} : memref<64x64xf32, #tile.space<fragment>>
    tile.barrier
    tile.role threads(128, 128) {
      tile.wait %arg1[%arg4], %arg2 timeout_ms(500) : memref<?xi32, #tile.space<global>>, i32
      scf.for %arg5 = %c0_2 to %arg3 step %c1_3 {
        %4 = arith.subi %arg5, %c0_2 : index
        %5 = arith.divui %4, %c1_3 : index
        %c2 = arith.constant 2 : index
        %6 = arith.remui %5, %c2 : index
        %c2_4 = arith.constant 2 : index
        %7 = arith.divui %5, %c2_4 : index
        %c2_5 = arith.constant 2 : index
        %8 = arith.remui %7, %c2_5 : index
        %c1_6 = arith.constant 1 : index
        %9 = arith.xori %8, %c1_6 : index
        tile.mbarrier_wait %0[%6] parity %9 : memref<2xi64, #tile.space<shared>>
        tile.mbarrier_expect_tx %1[%6] bytes(8192) : memref<2xi64, #tile.space<shared>>
        %10 = arith.muli %arg5, %c64 : index
        %11 = tile.region %arg0[%10, %c0_2] [64, 64] : memref<?x64xf16, #tile.space<global>> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>
        %12 = tile.stage %2[%6] : memref<64x64xf16, #tile.space<shared>>
        tile.copy_async %11, %12 arrive %1[%6] : memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>, memref<64x64xf16, #tile.space<shared>>, memref<2xi64, #tile.space<shared>>
      }
    }
    tile.role threads(0, 128) {
      tile.wait %arg1[%arg4], %arg2 timeout_ms(500) : memref<?xi32, #tile.space<global>>, i32
      scf.for %arg5 = %c0_2 to %arg3 step %c1_3 {
        %4 = arith.subi %arg5, %c0_2 : index
        %5 = arith.divui %4, %c1_3 : index
        %c2 = arith.constant 2 : index
        %6 = arith.remui %5, %c2 : index
        %c2_4 = arith.constant 2 : index
        %7 = arith.divui %5, %c2_4 : index
        %c2_5 = arith.constant 2 : index
        %8 = arith.remui %7, %c2_5 : index
        tile.mbarrier_wait %1[%6] parity %8 : memref<2xi64, #tile.space<shared>>
        %9 = tile.stage %2[%6] : memref<64x64xf16, #tile.space<shared>>
        %10 = arith.muli %arg5, %c64 : index
        %11 = tile.region %arg0[%10, %c0_2] [64, 64] : memref<?x64xf16, #tile.space<global>> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>
        tile.gemm %9, %9, %3 {instruction = #tile.instr<wgmma>, warps = array<i64: 1, 1>} : memref<64x64xf16, #tile.space<shared>>, memref<64x64xf16, #tile.space<shared>>, memref<64x64xf32, #tile.space<fragment>>
        tile.mbarrier_arrive %0[%6] : memref<2xi64, #tile.space<shared>>
      }
    }
  }

// -----

// What tessel-insert-barriers made of element code masking a pipelined
// tile before a gemm: no barrier between the stores and the gemm's reads.
#map = affine_map<()[s0] -> (1)>
  tile.kernel @masked_stage(%arg0: memref<16x64xbf16, #tile.space<global>>, %arg1: memref<?x64xbf16, #tile.space<global>>, %arg2: memref<16x64xf32, #tile.space<global>>, %arg3: index) grid(%arg4) = #map threads(256) {
    %0 = tile.alloc {name = "empty"} : memref<3xi64, #tile.space<shared>>
    %c0 = arith.constant 0 : index
    tile.mbarrier_init %0[%c0] arrivals(4) : memref<3xi64, #tile.space<shared>>
    %c1 = arith.constant 1 : index
    tile.mbarrier_init %0[%c1] arrivals(4) : memref<3xi64, #tile.space<shared>>
    %c2 = arith.constant 2 : index
    tile.mbarrier_init %0[%c2] arrivals(4) : memref<3xi64, #tile.space<shared>>
    tile.fence_mbarrier_init
    %1 = tile.alloc {name = "full"} : memref<3xi64, #tile.space<shared>>
    %c0_0 = arith.constant 0 : index
    tile.mbarrier_init %1[%c0_0] arrivals(1) : memref<3xi64, #tile.space<shared>>
    %c1_1 = arith.constant 1 : index
    tile.mbarrier_init %1[%c1_1] arrivals(1) : memref<3xi64, #tile.space<shared>>
    %c2_2 = arith.constant 2 : index
    tile.mbarrier_init %1[%c2_2] arrivals(1) : memref<3xi64, #tile.space<shared>>
    tile.fence_mbarrier_init
    %c0_3 = arith.constant 0 : index
    %c1_4 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %c63 = arith.constant 63 : index
    %cst = arith.constant 0.000000e+00 : bf16
    %2 = tile.alloc {layout = #tile.shared<[16, 64], elem = 2, swizzle = 128, pad = 0>} : memref<16x64xbf16, #tile.space<shared>>
    %3 = tile.alloc {layout = #tile.shared<[64, 64], elem = 2, swizzle = 128, pad = 0>, stages = 3 : i64} : memref<64x64xbf16, #tile.space<shared>>
    %4 = tile.alloc {layout = #tile.fragment<[16, 64], reg = [[0, 1], [8, 0], [0, 8]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = [[0, 16], [0, 32]]>} : memref<16x64xf32, #tile.space<fragment>>
    %5 = arith.addi %arg3, %c63 : index
    %6 = arith.divui %5, %c64 : index
    tile.barrier
    tile.role threads(128, 128) {
      scf.for %arg5 = %c0_3 to %6 step %c1_4 {
        %7 = arith.subi %arg5, %c0_3 : index
        %8 = arith.divui %7, %c1_4 : index
        %c3 = arith.constant 3 : index
        %9 = arith.remui %8, %c3 : index
        %c3_5 = arith.constant 3 : index
        %10 = arith.divui %8, %c3_5 : index
        %c2_6 = arith.constant 2 : index
        %11 = arith.remui %10, %c2_6 : index
        %c1_7 = arith.constant 1 : index
        %12 = arith.xori %11, %c1_7 : index
        tile.mbarrier_wait %0[%9] parity %12 : memref<3xi64, #tile.space<shared>>
        tile.mbarrier_expect_tx %1[%9] bytes(8192) : memref<3xi64, #tile.space<shared>>
        %13 = arith.muli %arg5, %c64 : index
        %14 = tile.region %arg1[%13, %c0_3] [64, 64] : memref<?x64xbf16, #tile.space<global>> -> memref<64x64xbf16, strided<[64, 1], offset: ?>, #tile.space<global>>
        %15 = tile.stage %3[%9] : memref<64x64xbf16, #tile.space<shared>>
        tile.copy_async %14, %15 arrive %1[%9] : memref<64x64xbf16, strided<[64, 1], offset: ?>, #tile.space<global>>, memref<64x64xbf16, #tile.space<shared>>, memref<3xi64, #tile.space<shared>>
      }
    }
    tile.role threads(0, 128) {
      tile.copy %arg0, %2 : memref<16x64xbf16, #tile.space<global>>, memref<16x64xbf16, #tile.space<shared>>
      tile.barrier named(2, 128)
      scf.for %arg5 = %c0_3 to %6 step %c1_4 {
        %7 = arith.subi %arg5, %c0_3 : index
        %8 = arith.divui %7, %c1_4 : index
        %c3 = arith.constant 3 : index
        %9 = arith.remui %8, %c3 : index
        %c3_5 = arith.constant 3 : index
        %10 = arith.divui %8, %c3_5 : index
        %c2_6 = arith.constant 2 : index
        %11 = arith.remui %10, %c2_6 : index
        tile.mbarrier_wait %1[%9] parity %11 : memref<3xi64, #tile.space<shared>>
        %12 = tile.stage %3[%9] : memref<64x64xbf16, #tile.space<shared>>
        %13 = arith.muli %arg5, %c64 : index
        %14 = tile.region %arg1[%13, %c0_3] [64, 64] : memref<?x64xbf16, #tile.space<global>> -> memref<64x64xbf16, strided<[64, 1], offset: ?>, #tile.space<global>>
        tile.parallel (%arg6, %arg7) in [64, 64] {
          %15 = memref.load %12[%arg6, %arg7] : memref<64x64xbf16, #tile.space<shared>>
          %16 = arith.addi %13, %arg6 : index
          %17 = arith.cmpi slt, %16, %arg3 : index
          %18 = arith.select %17, %15, %cst : bf16
          memref.store %18, %12[%arg6, %arg7] : memref<64x64xbf16, #tile.space<shared>>
        }
        // expected-error @+1 {{missing barrier: the buffer allocated at}}
        tile.gemm %2, %12, %4 {instruction = #tile.instr<mma_sync>, policy = #tile.policy<full_col>, warps = array<i64: 1, 4>} : memref<16x64xbf16, #tile.space<shared>>, memref<64x64xbf16, #tile.space<shared>>, memref<16x64xf32, #tile.space<fragment>>
        tile.mbarrier_arrive %0[%9] : memref<3xi64, #tile.space<shared>>
      }
      tile.copy %4, %arg2 : memref<16x64xf32, #tile.space<fragment>>, memref<16x64xf32, #tile.space<global>>
    }
  }

// -----

// Hand-scheduled: the consumers wait for stage 0 before the loop and, at
// the end of each iteration, for the next one's stage when a next iteration
// follows; each iteration reads its own stage.
// CHECK-LABEL: tile.kernel @wait_ahead
#map = affine_map<()[s0] -> (1)>
  tile.kernel @wait_ahead(%arg0: memref<?x64xf16, #tile.space<global>>, %arg1: memref<?xi32, #tile.space<global>>, %arg2: i32, %arg3: index) grid(%arg4) = #map threads(256) {
    %0 = tile.alloc {name = "empty"} : memref<2xi64, #tile.space<shared>>
    %c0 = arith.constant 0 : index
    tile.mbarrier_init %0[%c0] arrivals(4) : memref<2xi64, #tile.space<shared>>
    %c1 = arith.constant 1 : index
    tile.mbarrier_init %0[%c1] arrivals(4) : memref<2xi64, #tile.space<shared>>
    tile.fence_mbarrier_init
    %1 = tile.alloc {name = "full"} : memref<2xi64, #tile.space<shared>>
    %c0_0 = arith.constant 0 : index
    tile.mbarrier_init %1[%c0_0] arrivals(1) : memref<2xi64, #tile.space<shared>>
    %c1_1 = arith.constant 1 : index
    tile.mbarrier_init %1[%c1_1] arrivals(1) : memref<2xi64, #tile.space<shared>>
    tile.fence_mbarrier_init
    %c0_2 = arith.constant 0 : index
    %c1_3 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %2 = tile.alloc {layout = #tile.shared<[64, 64], elem = 2, swizzle = 128, pad = 0>, stages = 2 : i64} : memref<64x64xf16, #tile.space<shared>>
    %3 = tile.alloc {layout = #tile.fragment<[64, 64], reg = [[0, 1], [8, 0], [0, 8], [0, 16], [0, 32]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = [[16, 0], [32, 0]]>} : memref<64x64xf32, #tile.space<fragment>>
    tile.barrier
    tile.role threads(128, 128) {
      scf.for %arg5 = %c0_2 to %arg3 step %c1_3 {
        %4 = arith.subi %arg5, %c0_2 : index
        %5 = arith.divui %4, %c1_3 : index
        %c2 = arith.constant 2 : index
        %6 = arith.remui %5, %c2 : index
        %c2_4 = arith.constant 2 : index
        %7 = arith.divui %5, %c2_4 : index
        %c2_5 = arith.constant 2 : index
        %8 = arith.remui %7, %c2_5 : index
        %c1_6 = arith.constant 1 : index
        %9 = arith.xori %8, %c1_6 : index
        tile.mbarrier_wait %0[%6] parity %9 : memref<2xi64, #tile.space<shared>>
        tile.mbarrier_expect_tx %1[%6] bytes(8192) : memref<2xi64, #tile.space<shared>>
        %10 = arith.muli %arg5, %c64 : index
        %11 = tile.region %arg0[%10, %c0_2] [64, 64] : memref<?x64xf16, #tile.space<global>> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>
        %12 = tile.stage %2[%6] : memref<64x64xf16, #tile.space<shared>>
        tile.copy_async %11, %12 arrive %1[%6] : memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>, memref<64x64xf16, #tile.space<shared>>, memref<2xi64, #tile.space<shared>>
      }
    }
    tile.role threads(0, 128) {
      %z = arith.constant 0 : index
      tile.mbarrier_wait %1[%z] parity %z : memref<2xi64, #tile.space<shared>>
      scf.for %arg5 = %c0_2 to %arg3 step %c1_3 {
        %c2 = arith.constant 2 : index
        %6 = arith.remui %arg5, %c2 : index
        %next = arith.addi %arg5, %c1_3 : index
        %nextStage = arith.remui %next, %c2 : index
        %more = arith.cmpi slt, %next, %arg3 : index
        %9 = tile.stage %2[%6] : memref<64x64xf16, #tile.space<shared>>
        %10 = arith.muli %arg5, %c64 : index
        %11 = tile.region %arg0[%10, %c0_2] [64, 64] : memref<?x64xf16, #tile.space<global>> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>
        tile.gemm %9, %9, %3 {instruction = #tile.instr<wgmma>, warps = array<i64: 1, 1>} : memref<64x64xf16, #tile.space<shared>>, memref<64x64xf16, #tile.space<shared>>, memref<64x64xf32, #tile.space<fragment>>
        tile.mbarrier_arrive %0[%6] : memref<2xi64, #tile.space<shared>>
        scf.if %more {
          %p = arith.constant 0 : index
          tile.mbarrier_wait %1[%nextStage] parity %p : memref<2xi64, #tile.space<shared>>
        }
      }
    }
  }

// -----

// The same, reading the next iteration's stage instead.
#map = affine_map<()[s0] -> (1)>
  tile.kernel @wait_ahead_wrong_stage(%arg0: memref<?x64xf16, #tile.space<global>>, %arg1: memref<?xi32, #tile.space<global>>, %arg2: i32, %arg3: index) grid(%arg4) = #map threads(256) {
    %0 = tile.alloc {name = "empty"} : memref<2xi64, #tile.space<shared>>
    %c0 = arith.constant 0 : index
    tile.mbarrier_init %0[%c0] arrivals(4) : memref<2xi64, #tile.space<shared>>
    %c1 = arith.constant 1 : index
    tile.mbarrier_init %0[%c1] arrivals(4) : memref<2xi64, #tile.space<shared>>
    tile.fence_mbarrier_init
    %1 = tile.alloc {name = "full"} : memref<2xi64, #tile.space<shared>>
    %c0_0 = arith.constant 0 : index
    tile.mbarrier_init %1[%c0_0] arrivals(1) : memref<2xi64, #tile.space<shared>>
    %c1_1 = arith.constant 1 : index
    tile.mbarrier_init %1[%c1_1] arrivals(1) : memref<2xi64, #tile.space<shared>>
    tile.fence_mbarrier_init
    %c0_2 = arith.constant 0 : index
    %c1_3 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %2 = tile.alloc {layout = #tile.shared<[64, 64], elem = 2, swizzle = 128, pad = 0>, stages = 2 : i64} : memref<64x64xf16, #tile.space<shared>>
    %3 = tile.alloc {layout = #tile.fragment<[64, 64], reg = [[0, 1], [8, 0], [0, 8], [0, 16], [0, 32]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = [[16, 0], [32, 0]]>} : memref<64x64xf32, #tile.space<fragment>>
    tile.barrier
    tile.role threads(128, 128) {
      scf.for %arg5 = %c0_2 to %arg3 step %c1_3 {
        %4 = arith.subi %arg5, %c0_2 : index
        %5 = arith.divui %4, %c1_3 : index
        %c2 = arith.constant 2 : index
        %6 = arith.remui %5, %c2 : index
        %c2_4 = arith.constant 2 : index
        %7 = arith.divui %5, %c2_4 : index
        %c2_5 = arith.constant 2 : index
        %8 = arith.remui %7, %c2_5 : index
        %c1_6 = arith.constant 1 : index
        %9 = arith.xori %8, %c1_6 : index
        tile.mbarrier_wait %0[%6] parity %9 : memref<2xi64, #tile.space<shared>>
        tile.mbarrier_expect_tx %1[%6] bytes(8192) : memref<2xi64, #tile.space<shared>>
        %10 = arith.muli %arg5, %c64 : index
        %11 = tile.region %arg0[%10, %c0_2] [64, 64] : memref<?x64xf16, #tile.space<global>> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>
        %12 = tile.stage %2[%6] : memref<64x64xf16, #tile.space<shared>>
        tile.copy_async %11, %12 arrive %1[%6] : memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>, memref<64x64xf16, #tile.space<shared>>, memref<2xi64, #tile.space<shared>>
      }
    }
    tile.role threads(0, 128) {
      %z = arith.constant 0 : index
      tile.mbarrier_wait %1[%z] parity %z : memref<2xi64, #tile.space<shared>>
      scf.for %arg5 = %c0_2 to %arg3 step %c1_3 {
        %c2 = arith.constant 2 : index
        %6 = arith.remui %arg5, %c2 : index
        %next = arith.addi %arg5, %c1_3 : index
        %nextStage = arith.remui %next, %c2 : index
        %more = arith.cmpi slt, %next, %arg3 : index
        %9 = tile.stage %2[%nextStage] : memref<64x64xf16, #tile.space<shared>>
        %10 = arith.muli %arg5, %c64 : index
        %11 = tile.region %arg0[%10, %c0_2] [64, 64] : memref<?x64xf16, #tile.space<global>> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>
        // expected-error @+1 {{stage mix-up}}
        tile.gemm %9, %9, %3 {instruction = #tile.instr<wgmma>, warps = array<i64: 1, 1>} : memref<64x64xf16, #tile.space<shared>>, memref<64x64xf16, #tile.space<shared>>, memref<64x64xf32, #tile.space<fragment>>
        tile.mbarrier_arrive %0[%6] : memref<2xi64, #tile.space<shared>>
        scf.if %more {
          %p = arith.constant 0 : index
          tile.mbarrier_wait %1[%nextStage] parity %p : memref<2xi64, #tile.space<shared>>
        }
      }
    }
  }
// -----

// Two loops staging through one buffer, each with its own mbarriers: the
// first loop's loads ahead are issued only for iterations that run
// (`iv + 1 < n`, and `0 < n` in its prologue), each of which waits for
// them, so none is in flight when the second loop loads the buffer and
// reads it after waits on its own mbarriers.
// CHECK-LABEL: tile.kernel @two_loops_one_buffer
tile.kernel @two_loops_one_buffer(%a: memref<?x256xf32, #tile.space<global>>, %b: memref<256xf32, #tile.space<global>>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %first = tile.alloc {name = "first"} : memref<2xi64, #tile.space<shared>>
  tile.mbarrier_init %first[%c0] arrivals(1) : memref<2xi64, #tile.space<shared>>
  tile.mbarrier_init %first[%c1] arrivals(1) : memref<2xi64, #tile.space<shared>>
  %second = tile.alloc {name = "second"} : memref<2xi64, #tile.space<shared>>
  tile.mbarrier_init %second[%c0] arrivals(1) : memref<2xi64, #tile.space<shared>>
  tile.mbarrier_init %second[%c1] arrivals(1) : memref<2xi64, #tile.space<shared>>
  tile.fence_mbarrier_init
  tile.barrier
  %x = tile.alloc {name = "x", stages = 2 : i64} : memref<2x256xf32, #tile.space<shared>>
  %go = arith.cmpi slt, %c0, %n : index
  scf.if %go {
    tile.mbarrier_expect_tx %first[%c0] bytes(2048) : memref<2xi64, #tile.space<shared>>
    %src = tile.region %a[%c0, %c0] [2, 256] : memref<?x256xf32, #tile.space<global>> -> memref<2x256xf32, strided<[256, 1], offset: ?>, #tile.space<global>>
    %dst = tile.stage %x[%c0] : memref<2x256xf32, #tile.space<shared>>
    tile.copy_async %src, %dst arrive %first[%c0] : memref<2x256xf32, strided<[256, 1], offset: ?>, #tile.space<global>>, memref<2x256xf32, #tile.space<shared>>, memref<2xi64, #tile.space<shared>>
  }
  scf.for %k = %c0 to %n step %c1 {
    %stage = arith.remui %k, %c2 : index
    %ahead = arith.addi %k, %c1 : index
    %aheadStage = arith.remui %ahead, %c2 : index
    %more = arith.cmpi slt, %ahead, %n : index
    scf.if %more {
      tile.barrier
      tile.mbarrier_expect_tx %first[%aheadStage] bytes(2048) : memref<2xi64, #tile.space<shared>>
      %src = tile.region %a[%ahead, %c0] [2, 256] : memref<?x256xf32, #tile.space<global>> -> memref<2x256xf32, strided<[256, 1], offset: ?>, #tile.space<global>>
      %dst = tile.stage %x[%aheadStage] : memref<2x256xf32, #tile.space<shared>>
      tile.copy_async %src, %dst arrive %first[%aheadStage] : memref<2x256xf32, strided<[256, 1], offset: ?>, #tile.space<global>>, memref<2x256xf32, #tile.space<shared>>, memref<2xi64, #tile.space<shared>>
    }
    %round = arith.divui %k, %c2 : index
    %parity = arith.remui %round, %c2 : index
    tile.mbarrier_wait %first[%stage] parity %parity : memref<2xi64, #tile.space<shared>>
    %view = tile.stage %x[%stage] : memref<2x256xf32, #tile.space<shared>>
    %row = tile.region %view[%c0, %c0] [1, 256] : memref<2x256xf32, #tile.space<shared>> -> memref<256xf32, strided<[1], offset: ?>, #tile.space<shared>>
    tile.copy %row, %b : memref<256xf32, strided<[1], offset: ?>, #tile.space<shared>>, memref<256xf32, #tile.space<global>>
  }
  tile.barrier
  scf.if %go {
    tile.mbarrier_expect_tx %second[%c0] bytes(2048) : memref<2xi64, #tile.space<shared>>
    %src = tile.region %a[%c0, %c0] [2, 256] : memref<?x256xf32, #tile.space<global>> -> memref<2x256xf32, strided<[256, 1], offset: ?>, #tile.space<global>>
    %dst = tile.stage %x[%c0] : memref<2x256xf32, #tile.space<shared>>
    tile.copy_async %src, %dst arrive %second[%c0] : memref<2x256xf32, strided<[256, 1], offset: ?>, #tile.space<global>>, memref<2x256xf32, #tile.space<shared>>, memref<2xi64, #tile.space<shared>>
  }
  scf.for %k = %c0 to %n step %c1 {
    %stage = arith.remui %k, %c2 : index
    %ahead = arith.addi %k, %c1 : index
    %aheadStage = arith.remui %ahead, %c2 : index
    %more = arith.cmpi slt, %ahead, %n : index
    scf.if %more {
      tile.barrier
      tile.mbarrier_expect_tx %second[%aheadStage] bytes(2048) : memref<2xi64, #tile.space<shared>>
      %src = tile.region %a[%ahead, %c0] [2, 256] : memref<?x256xf32, #tile.space<global>> -> memref<2x256xf32, strided<[256, 1], offset: ?>, #tile.space<global>>
      %dst = tile.stage %x[%aheadStage] : memref<2x256xf32, #tile.space<shared>>
      tile.copy_async %src, %dst arrive %second[%aheadStage] : memref<2x256xf32, strided<[256, 1], offset: ?>, #tile.space<global>>, memref<2x256xf32, #tile.space<shared>>, memref<2xi64, #tile.space<shared>>
    }
    %round = arith.divui %k, %c2 : index
    %parity = arith.remui %round, %c2 : index
    tile.mbarrier_wait %second[%stage] parity %parity : memref<2xi64, #tile.space<shared>>
    %view = tile.stage %x[%stage] : memref<2x256xf32, #tile.space<shared>>
    %row = tile.region %view[%c1, %c0] [1, 256] : memref<2x256xf32, #tile.space<shared>> -> memref<256xf32, strided<[1], offset: ?>, #tile.space<shared>>
    tile.copy %row, %b : memref<256xf32, strided<[1], offset: ?>, #tile.space<shared>>, memref<256xf32, #tile.space<global>>
  }
}

// -----

// The same with the first loop's loads ahead guarded by `iv + 1 < 2`, not
// by its trip count: a load for an iteration that never runs may be in
// flight when the second loop reads the buffer.
tile.kernel @ahead_not_bounded(%a: memref<?x256xf32, #tile.space<global>>, %b: memref<256xf32, #tile.space<global>>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %first = tile.alloc {name = "first"} : memref<2xi64, #tile.space<shared>>
  tile.mbarrier_init %first[%c0] arrivals(1) : memref<2xi64, #tile.space<shared>>
  tile.mbarrier_init %first[%c1] arrivals(1) : memref<2xi64, #tile.space<shared>>
  %second = tile.alloc {name = "second"} : memref<2xi64, #tile.space<shared>>
  tile.mbarrier_init %second[%c0] arrivals(1) : memref<2xi64, #tile.space<shared>>
  tile.mbarrier_init %second[%c1] arrivals(1) : memref<2xi64, #tile.space<shared>>
  tile.fence_mbarrier_init
  tile.barrier
  %x = tile.alloc {name = "x", stages = 2 : i64} : memref<2x256xf32, #tile.space<shared>>
  %go = arith.cmpi slt, %c0, %n : index
  scf.if %go {
    tile.mbarrier_expect_tx %first[%c0] bytes(2048) : memref<2xi64, #tile.space<shared>>
    %src = tile.region %a[%c0, %c0] [2, 256] : memref<?x256xf32, #tile.space<global>> -> memref<2x256xf32, strided<[256, 1], offset: ?>, #tile.space<global>>
    %dst = tile.stage %x[%c0] : memref<2x256xf32, #tile.space<shared>>
    tile.copy_async %src, %dst arrive %first[%c0] : memref<2x256xf32, strided<[256, 1], offset: ?>, #tile.space<global>>, memref<2x256xf32, #tile.space<shared>>, memref<2xi64, #tile.space<shared>>
  }
  scf.for %k = %c0 to %n step %c1 {
    %stage = arith.remui %k, %c2 : index
    %ahead = arith.addi %k, %c1 : index
    %aheadStage = arith.remui %ahead, %c2 : index
    %more = arith.cmpi slt, %ahead, %c2 : index
    scf.if %more {
      tile.barrier
      tile.mbarrier_expect_tx %first[%aheadStage] bytes(2048) : memref<2xi64, #tile.space<shared>>
      %src = tile.region %a[%ahead, %c0] [2, 256] : memref<?x256xf32, #tile.space<global>> -> memref<2x256xf32, strided<[256, 1], offset: ?>, #tile.space<global>>
      %dst = tile.stage %x[%aheadStage] : memref<2x256xf32, #tile.space<shared>>
      tile.copy_async %src, %dst arrive %first[%aheadStage] : memref<2x256xf32, strided<[256, 1], offset: ?>, #tile.space<global>>, memref<2x256xf32, #tile.space<shared>>, memref<2xi64, #tile.space<shared>>
    }
    %round = arith.divui %k, %c2 : index
    %parity = arith.remui %round, %c2 : index
    tile.mbarrier_wait %first[%stage] parity %parity : memref<2xi64, #tile.space<shared>>
    %view = tile.stage %x[%stage] : memref<2x256xf32, #tile.space<shared>>
    %row = tile.region %view[%c0, %c0] [1, 256] : memref<2x256xf32, #tile.space<shared>> -> memref<256xf32, strided<[1], offset: ?>, #tile.space<shared>>
    tile.copy %row, %b : memref<256xf32, strided<[1], offset: ?>, #tile.space<shared>>, memref<256xf32, #tile.space<global>>
  }
  tile.barrier
  scf.if %go {
    tile.mbarrier_expect_tx %second[%c0] bytes(2048) : memref<2xi64, #tile.space<shared>>
    %src = tile.region %a[%c0, %c0] [2, 256] : memref<?x256xf32, #tile.space<global>> -> memref<2x256xf32, strided<[256, 1], offset: ?>, #tile.space<global>>
    %dst = tile.stage %x[%c0] : memref<2x256xf32, #tile.space<shared>>
    tile.copy_async %src, %dst arrive %second[%c0] : memref<2x256xf32, strided<[256, 1], offset: ?>, #tile.space<global>>, memref<2x256xf32, #tile.space<shared>>, memref<2xi64, #tile.space<shared>>
  }
  scf.for %k = %c0 to %n step %c1 {
    %stage = arith.remui %k, %c2 : index
    %ahead = arith.addi %k, %c1 : index
    %aheadStage = arith.remui %ahead, %c2 : index
    %more = arith.cmpi slt, %ahead, %n : index
    scf.if %more {
      tile.barrier
      tile.mbarrier_expect_tx %second[%aheadStage] bytes(2048) : memref<2xi64, #tile.space<shared>>
      %src = tile.region %a[%ahead, %c0] [2, 256] : memref<?x256xf32, #tile.space<global>> -> memref<2x256xf32, strided<[256, 1], offset: ?>, #tile.space<global>>
      %dst = tile.stage %x[%aheadStage] : memref<2x256xf32, #tile.space<shared>>
      tile.copy_async %src, %dst arrive %second[%aheadStage] : memref<2x256xf32, strided<[256, 1], offset: ?>, #tile.space<global>>, memref<2x256xf32, #tile.space<shared>>, memref<2xi64, #tile.space<shared>>
    }
    %round = arith.divui %k, %c2 : index
    %parity = arith.remui %round, %c2 : index
    tile.mbarrier_wait %second[%stage] parity %parity : memref<2xi64, #tile.space<shared>>
    %view = tile.stage %x[%stage] : memref<2x256xf32, #tile.space<shared>>
    %row = tile.region %view[%c1, %c0] [1, 256] : memref<2x256xf32, #tile.space<shared>> -> memref<256xf32, strided<[1], offset: ?>, #tile.space<shared>>
    // expected-error @+1 {{missing mbarrier wait: 'x' is still being loaded by the TMA copy at}}
    tile.copy %row, %b : memref<256xf32, strided<[1], offset: ?>, #tile.space<shared>>, memref<256xf32, #tile.space<global>>
  }
}

// -----

// The stage rule holds for an access nested in an inner loop of the
// pipeline's own loop: with no wait on the stage's mbarrier first, the
// read is rejected (the fills belong to the loop around it).
tile.kernel @inner_loop_no_wait(%a: memref<?x256xf32, #tile.space<global>>, %b: memref<256xf32, #tile.space<global>>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %full = tile.alloc {name = "full"} : memref<2xi64, #tile.space<shared>>
  tile.mbarrier_init %full[%c0] arrivals(1) : memref<2xi64, #tile.space<shared>>
  tile.mbarrier_init %full[%c1] arrivals(1) : memref<2xi64, #tile.space<shared>>
  tile.fence_mbarrier_init
  tile.barrier
  %x = tile.alloc {name = "x", stages = 2 : i64} : memref<2x256xf32, #tile.space<shared>>
  scf.for %k = %c0 to %n step %c1 {
    %stage = arith.remui %k, %c2 : index
    %ahead = arith.addi %k, %c1 : index
    %aheadStage = arith.remui %ahead, %c2 : index
    %more = arith.cmpi slt, %ahead, %n : index
    scf.if %more {
      tile.barrier
      tile.mbarrier_expect_tx %full[%aheadStage] bytes(2048) : memref<2xi64, #tile.space<shared>>
      %src = tile.region %a[%ahead, %c0] [2, 256] : memref<?x256xf32, #tile.space<global>> -> memref<2x256xf32, strided<[256, 1], offset: ?>, #tile.space<global>>
      %dst = tile.stage %x[%aheadStage] : memref<2x256xf32, #tile.space<shared>>
      tile.copy_async %src, %dst arrive %full[%aheadStage] : memref<2x256xf32, strided<[256, 1], offset: ?>, #tile.space<global>>, memref<2x256xf32, #tile.space<shared>>, memref<2xi64, #tile.space<shared>>
    }
    scf.for %j = %c0 to %c2 step %c1 {
      %view = tile.stage %x[%stage] : memref<2x256xf32, #tile.space<shared>>
      %row = tile.region %view[%j, %c0] [1, 256] : memref<2x256xf32, #tile.space<shared>> -> memref<256xf32, strided<[1], offset: ?>, #tile.space<shared>>
      // expected-error @+1 {{missing mbarrier wait: 'x' is filled by TMA loads, but this iteration accesses its stage with no wait}}
      tile.copy %row, %b : memref<256xf32, strided<[1], offset: ?>, #tile.space<shared>>, memref<256xf32, #tile.space<global>>
    }
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// Atomic adds commute: two of them into one shared buffer need no order,
// but a plain read of what they added does.
tile.kernel @atomic_adds(%a: memref<64xi32, #g>, %out: memref<64xi32, #g>) grid(%bx) = affine_map<() -> (1)> threads(64) {
  %one = arith.constant 1 : i32
  %zero = arith.constant 0 : i32
  %h = tile.alloc {name = "counts"} : memref<64xi32, #s>
  tile.fill %h, %zero : memref<64xi32, #s>, i32
  tile.barrier
  tile.parallel (%i) in [64] {
    tile.atomic_add %one, %h[%i] order = relaxed : i32, memref<64xi32, #s>
  }
  %c63 = arith.constant 63 : index
  tile.parallel (%i) in [64] {
    %j = arith.subi %c63, %i : index
    tile.atomic_add %one, %h[%j] order = relaxed : i32, memref<64xi32, #s>
  }
  // expected-error @+1 {{missing barrier: 'counts' is written at}}
  tile.copy %h, %out : memref<64xi32, #s>, memref<64xi32, #g>
}
