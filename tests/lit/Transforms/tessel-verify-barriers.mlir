// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-verify-barriers))' | FileCheck %s

// Block barriers in code every thread runs pass, as do named barriers in a
// role and conditions on kernel parameters (the same for every thread).
// CHECK-LABEL: tile.kernel @uniform
// CHECK-COUNT-2: tilenv.sync_threads
// CHECK: tilenv.named_barrier 1, 128
tile.kernel @uniform(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(256) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %big = arith.cmpi sgt, %n, %c1 : index
  tilenv.sync_threads
  scf.if %big {
    scf.for %i = %c0 to %n step %c1 {
      tilenv.sync_threads
    }
  }
  tile.role threads(0, 128) {
    tilenv.named_barrier 1, 128
  }
}

// -----

// What the consumer reduction lowered to before it used the role's barrier:
// the producer threads never arrive.
tile.kernel @in_role() grid(%bx) = affine_map<() -> (1)> threads(256) {
  // expected-note @+1 {{inside this role}}
  tile.role threads(0, 128) {
    // expected-error @+1 {{block-wide barrier (__syncthreads) in code that only some threads run}}
    tilenv.sync_threads
  }
}

// -----

// Roles after lowering: a conditional on the thread index.
tile.kernel @lowered_role() grid(%bx) = affine_map<() -> (1)> threads(256) {
  %tid = tilenv.thread_id
  %c128 = arith.constant 128 : index
  %consumer = arith.cmpi ult, %tid, %c128 : index
  // expected-note @+1 {{whose condition depends on the thread index}}
  scf.if %consumer {
    // expected-error @+1 {{block-wide barrier}}
    tilenv.sync_threads
  }
}

// -----

// A loop whose trip count differs between threads, through a load indexed
// by the thread.
tile.kernel @per_thread_trips(%counts: memref<256xi32, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(256) {
  %tid = tilenv.thread_id
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %count = memref.load %counts[%tid] : memref<256xi32, #tile.space<global>>
  %n = arith.index_cast %count : i32 to index
  // expected-note @+1 {{whose condition depends on the thread index}}
  scf.for %i = %c0 to %n step %c1 {
    // expected-error @+1 {{block-wide barrier}}
    tilenv.sync_threads
  }
}

// -----

// Divergence carried around a loop: the flag becomes thread-dependent in
// the first iteration and guards the barrier in the next.
tile.kernel @carried(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %tid = tilenv.thread_id
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %false = arith.constant false
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%flag = %false) -> (i1) {
    // expected-note @+1 {{whose condition depends on the thread index}}
    scf.if %flag {
      // expected-error @+1 {{block-wide barrier}}
      tilenv.sync_threads
    }
    %odd = arith.cmpi eq, %tid, %c1 : index
    scf.yield %odd : i1
  }
}
