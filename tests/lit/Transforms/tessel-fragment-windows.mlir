// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-fragment-windows))' | FileCheck %s

#s = #tile.space<shared>
#f = #tile.space<fragment>

// A loop over quarters of an accumulator's columns is unrolled (registers
// are named at compile time), and each quarter's element loop gets
// registers of its own: copied in before it, and back after it since it
// writes them. The copy to global memory reads its quarter only.
// CHECK-LABEL: tile.kernel @quarters
// CHECK-NOT: scf.for
// CHECK: %[[ACC:.*]] = tile.alloc : memref<128x128xf32
// CHECK: %[[W:.*]] = tile.region %[[ACC]][%{{.*}}, %c0{{.*}}] [128, 32]
// CHECK-NEXT: %[[R:.*]] = tile.alloc : memref<128x32xf32, #tile.space<fragment>>
// CHECK-NEXT: tile.copy %[[W]], %[[R]]
// CHECK-NEXT: tile.parallel
// CHECK: memref.store %{{.*}}, %[[R]]
// CHECK: tile.copy %[[R]], %[[W]]
// CHECK: tile.region %[[ACC]][%{{.*}}, %c32{{.*}}] [128, 32]
// CHECK: tile.region %[[ACC]][%{{.*}}, %c64{{.*}}] [128, 32]
// CHECK: tile.region %[[ACC]][%{{.*}}, %c96{{.*}}] [128, 32]
// CHECK: tile.copy %[[R3:.*]], %{{.*}} : memref<128x32xf32, #tile.space<fragment>>, memref<128x32xf32, strided
// One row block's quarter, read only: no copy back.
// CHECK: %[[LAST:.*]] = tile.region %[[ACC]][%c64{{.*}}, %c96{{.*}}] [64, 32]
// CHECK-NEXT: %[[LR:.*]] = tile.alloc : memref<64x32xf32, #tile.space<fragment>>
// CHECK-NEXT: tile.copy %[[LAST]], %[[LR]]
// CHECK-NEXT: tile.copy %[[LR]], %{{.*}} : memref<64x32xf32, #tile.space<fragment>>, memref<64x32xf32, #tile.space<global>>
// CHECK-NEXT: }
tile.kernel @quarters(%out: memref<64x32xf32, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %a = tile.alloc : memref<128x64xf16, #s>
  %b = tile.alloc : memref<64x128xf16, #s>
  %acc = tile.alloc : memref<128x128xf32, #f>
  tile.gemm %a, %b, %acc : memref<128x64xf16, #s>, memref<64x128xf16, #s>, memref<128x128xf32, #f>
  scf.for %q = %c0 to %c4 step %c1 {
    %off = arith.muli %q, %c32 : index
    %w = tile.region %acc[%c0, %off] [128, 32] : memref<128x128xf32, #f> -> memref<128x32xf32, strided<[128, 1], offset: ?>, #f>
    tile.parallel (%i, %j) in [128, 32] {
      %x = memref.load %w[%i, %j] : memref<128x32xf32, strided<[128, 1], offset: ?>, #f>
      %y = arith.addf %x, %x : f32
      memref.store %y, %w[%i, %j] : memref<128x32xf32, strided<[128, 1], offset: ?>, #f>
    }
  }
  // A window of a window: rows 64.. of the last quarter.
  %half = tile.region %acc[%c0, %c64] [128, 64] : memref<128x128xf32, #f> -> memref<128x64xf32, strided<[128, 1], offset: ?>, #f>
  %last = tile.region %half[%c64, %c32] [64, 32] : memref<128x64xf32, strided<[128, 1], offset: ?>, #f> -> memref<64x32xf32, strided<[128, 1], offset: ?>, #f>
  tile.copy %last, %out : memref<64x32xf32, strided<[128, 1], offset: ?>, #f>, memref<64x32xf32, #tile.space<global>>
}

// -----

#f = #tile.space<fragment>

// An offset read from memory cannot name registers.
tile.kernel @runtime_offset(%n: index) grid(%bx) = affine_map<()[s0] -> (s0)> threads(128) {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : f32
  %acc = tile.alloc : memref<128x128xf32, #f>
  // expected-error @+1 {{a window of a fragment needs offsets known at compile time (each thread's registers are named, not indexed at run time); this offset depends on a kernel argument or block index}}
  %w = tile.region %acc[%c0, %n] [128, 32] : memref<128x128xf32, #f> -> memref<128x32xf32, strided<[128, 1], offset: ?>, #f>
  tile.fill %w, %z : memref<128x32xf32, strided<[128, 1], offset: ?>, #f>, f32
}

// -----

#f = #tile.space<fragment>

// Too many iterations to unroll.
tile.kernel @long_loop() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %z = arith.constant 0.0 : f32
  %acc = tile.alloc : memref<128x128xf32, #f>
  // expected-note @+1 {{the loop}}
  scf.for %q = %c0 to %c64 step %c1 {
    // expected-error @+1 {{this loop runs 64 times, and windows may unroll at most 32 iterations in all (0 so far)}}
    %w = tile.region %acc[%c0, %q] [128, 1] : memref<128x128xf32, #f> -> memref<128x1xf32, strided<[128, 1], offset: ?>, #f>
    tile.fill %w, %z : memref<128x1xf32, strided<[128, 1], offset: ?>, #f>, f32
  }
}

// -----

#f = #tile.space<fragment>

// A step that is not positive gives no trip count to unroll by (the most
// negative step once wrapped the count and unrolled without end).
tile.kernel @negative_step() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %step = arith.constant -9223372036854775808 : index
  %c64 = arith.constant 64 : index
  %z = arith.constant 0.0 : f32
  %acc = tile.alloc : memref<128x128xf32, #f>
  // expected-note @+1 {{the loop}}
  scf.for %q = %c0 to %c64 step %step {
    // expected-error @+1 {{this loop's trip count is not a constant}}
    %w = tile.region %acc[%c0, %q] [128, 1] : memref<128x128xf32, #f> -> memref<128x1xf32, strided<[128, 1], offset: ?>, #f>
    tile.fill %w, %z : memref<128x1xf32, strided<[128, 1], offset: ?>, #f>, f32
  }
}

// -----

#f = #tile.space<fragment>

// A loop that never runs (its upper bound below its lower) goes whole, its
// windows with it; it once stayed, and its window with it, for ever.
// CHECK-LABEL: tile.kernel @never_runs
// CHECK-NOT: scf.for
// CHECK-NOT: tile.fill
// CHECK: }
tile.kernel @never_runs() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %end = arith.constant -1 : index
  %z = arith.constant 0.0 : f32
  %acc = tile.alloc : memref<128x128xf32, #f>
  scf.for %q = %c0 to %end step %c1 {
    %w = tile.region %acc[%c0, %q] [128, 1] : memref<128x128xf32, #f> -> memref<128x1xf32, strided<[128, 1], offset: ?>, #f>
    tile.fill %w, %z : memref<128x1xf32, strided<[128, 1], offset: ?>, #f>, f32
  }
}

// -----

#f = #tile.space<fragment>

// Two tile.region ops naming the same window in one loop share one set of
// registers: the second sees the first's write, and one copy goes back.
// CHECK-LABEL: tile.kernel @same_window_twice
// CHECK: tile.alloc : memref<128x32xf32, #tile.space<fragment>>
// CHECK-NOT: tile.alloc
// CHECK: tile.parallel
// CHECK: tile.copy
// CHECK-NOT: tile.copy
// CHECK: }
tile.kernel @same_window_twice() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %one = arith.constant 1.0 : f32
  %acc = tile.alloc : memref<128x128xf32, #f>
  %w1 = tile.region %acc[%c0, %c32] [128, 32] : memref<128x128xf32, #f> -> memref<128x32xf32, strided<[128, 1], offset: ?>, #f>
  %w2 = tile.region %acc[%c0, %c32] [128, 32] : memref<128x128xf32, #f> -> memref<128x32xf32, strided<[128, 1], offset: ?>, #f>
  tile.parallel (%i, %j) in [128, 32] {
    %x = memref.load %w1[%i, %j] : memref<128x32xf32, strided<[128, 1], offset: ?>, #f>
    %y = arith.addf %x, %x : f32
    memref.store %y, %w1[%i, %j] : memref<128x32xf32, strided<[128, 1], offset: ?>, #f>
    %u = memref.load %w2[%i, %j] : memref<128x32xf32, strided<[128, 1], offset: ?>, #f>
    %v = arith.addf %u, %one : f32
    memref.store %v, %w2[%i, %j] : memref<128x32xf32, strided<[128, 1], offset: ?>, #f>
  }
}

// -----

#f = #tile.space<fragment>

// Overlapping windows written in one op would each copy back over the
// other's writes.
tile.kernel @overlapping_windows() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %one = arith.constant 1.0 : f32
  %acc = tile.alloc : memref<128x128xf32, #f>
  // expected-note @+1 {{the other window}}
  %w1 = tile.region %acc[%c0, %c32] [128, 32] : memref<128x128xf32, #f> -> memref<128x32xf32, strided<[128, 1], offset: ?>, #f>
  // expected-error @+1 {{this window of a fragment overlaps another used by the same op, and one of them is written}}
  %w2 = tile.region %acc[%c0, %c0] [128, 64] : memref<128x128xf32, #f> -> memref<128x64xf32, strided<[128, 1], offset: ?>, #f>
  tile.parallel (%i, %j) in [128, 32] {
    %x = memref.load %w2[%i, %j] : memref<128x64xf32, strided<[128, 1], offset: ?>, #f>
    memref.store %x, %w1[%i, %j] : memref<128x32xf32, strided<[128, 1], offset: ?>, #f>
  }
}

// -----

#f = #tile.space<fragment>

// The fragment whole and a window of it, one of them written, in one op.
tile.kernel @window_and_whole() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %acc = tile.alloc : memref<128x128xf32, #f>
  // expected-error @+1 {{this op uses a fragment both whole and through this window, and writes one of them}}
  %w = tile.region %acc[%c0, %c0] [128, 32] : memref<128x128xf32, #f> -> memref<128x32xf32, strided<[128, 1], offset: ?>, #f>
  tile.parallel (%i, %j) in [128, 32] {
    %x = memref.load %w[%i, %j] : memref<128x32xf32, strided<[128, 1], offset: ?>, #f>
    memref.store %x, %acc[%i, %j] : memref<128x128xf32, #f>
  }
}
