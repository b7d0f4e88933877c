// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-verify-kernel{arch=sm_80}))'

// A kernel within the limits passes unchanged.
tile.kernel @fits() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<128x128xf32, #tile.space<shared>>
}

// -----

// expected-error @+1 {{threads must be a multiple of 32 and at most 1024, got 100}}
tile.kernel @odd_threads() grid(%bx) = affine_map<() -> (1)> threads(100) {
}

// -----

tile.kernel @collective_in_parallel() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<8xf32, #tile.space<shared>>
  %z = arith.constant 0.0 : f32
  tile.parallel (%i) in [8] {
    // expected-error @+1 {{'tile.fill' is a whole-block operation and cannot appear inside tile.parallel}}
    tile.fill %a, %z : memref<8xf32, #tile.space<shared>>, f32
  }
}

// -----

// 2 x 96 KB of f32 is over sm_80's 163 KB per block.
// expected-error @+1 {{kernel needs 196608 bytes of shared memory; sm_80 allows 166912 per block}}
tile.kernel @too_much_shared() grid(%bx) = affine_map<() -> (1)> threads(128) {
  // expected-note @+1 {{98304 bytes for 'memref<192x128xf32, #tile.space<shared>>'}}
  %a = tile.alloc : memref<192x128xf32, #tile.space<shared>>
  // expected-note @+1 {{98304 bytes for 'memref<128x192xf32, #tile.space<shared>>'}}
  %b = tile.alloc : memref<128x192xf32, #tile.space<shared>>
}
