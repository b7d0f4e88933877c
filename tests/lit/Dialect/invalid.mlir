// RUN: tessel-opt %s -split-input-file -verify-diagnostics
// One case per verifier branch of the tile dialect.

// expected-error @+1 {{grid must have 1 to 3 dimensions, got 4}}
tile.kernel @k() grid(%a, %b, %c, %d) = affine_map<() -> (1, 1, 1, 1)> threads(128) {

}

// -----

// expected-error @+1 {{grid map must have no dimensions}}
tile.kernel @k() grid(%bx) = affine_map<(d0) -> (d0)> threads(128) {

}

// -----

// expected-error @+1 {{has 2 block indices but the grid has 1 dimensions}}
tile.kernel @k() grid(%a, %b) = affine_map<() -> (1)> threads(128) {

}

// -----

// expected-error @+1 {{grid map has 1 symbols but the kernel has 0 index parameters}}
tile.kernel @k() grid(%bx) = affine_map<()[s0] -> (s0)> threads(128) {

}

// -----

// expected-error @+1 {{threads must be positive and at most 1024 (a CUDA block's limit), got 0}}
tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(0) {

}

// -----

// More threads than a block holds (2^32 + 128: passes walk every warp).
// expected-error @+1 {{threads must be positive and at most 1024 (a CUDA block's limit), got 4294967424}}
tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(4294967424) {

}

// -----

// expected-error @+1 {{buffer parameter #0 must be in global memory}}
tile.kernel @k(%a: memref<4xf32, #tile.space<shared>>) grid(%bx) = affine_map<() -> (1)> threads(128) {

}

// -----

// expected-error @+1 {{buffer parameter #0 must be row-major}}
tile.kernel @k(%a: memref<4x4xf32, strided<[1, 4]>, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(128) {

}

// -----

// expected-error @+1 {{parameter #0 must be a global memref or a scalar}}
tile.kernel @k(%a: vector<4xf32>) grid(%bx) = affine_map<() -> (1)> threads(128) {

}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
// expected-error @+1 {{cannot allocate global memory}}
%a = tile.alloc : memref<4xf32, #tile.space<global>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
// expected-error @+1 {{buffer dimensions must be positive, got [4, 0]}}
%a = tile.alloc : memref<4x0xf32, #tile.space<shared>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
// expected-error @+1 {{allocations are row-major}}
%a = tile.alloc : memref<4x4xf32, strided<[1, 4]>, #tile.space<shared>>
}

// -----

tile.kernel @k(%a: memref<?x64xf32, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(128) {
%c0 = arith.constant 0 : index
// expected-error @+1 {{needs 2 offsets and sizes, got 1 and 1}}
%r = tile.region %a[%c0] [4] : memref<?x64xf32, #tile.space<global>> -> memref<4xf32, #tile.space<global>>
}

// -----

tile.kernel @k(%a: memref<?x64xf32, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(128) {
%c0 = arith.constant 0 : index
// expected-error @+1 {{region [4, 128] is larger than its buffer [?, 64] in dimension 1}}
%r = tile.region %a[%c0, %c0] [4, 128] : memref<?x64xf32, #tile.space<global>> -> memref<4x128xf32, strided<[64, 1], offset: ?>, #tile.space<global>>
}

// -----

tile.kernel @k(%a: memref<?x64xf32, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(128) {
%c0 = arith.constant 0 : index
%c40 = arith.constant 40 : index
// expected-error @+1 {{region at offset 40 of size 32 lies outside dimension 1 of buffer [?, 64]}}
%r = tile.region %a[%c0, %c40] [4, 32] : memref<?x64xf32, #tile.space<global>> -> memref<4x32xf32, strided<[64, 1], offset: ?>, #tile.space<global>>
}

// -----

tile.kernel @k(%a: memref<?x64xf32, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(128) {
%c0 = arith.constant 0 : index
// expected-error @+1 {{region sizes must be positive, got [0, 32]}}
%r = tile.region %a[%c0, %c0] [0, 32] : memref<?x64xf32, #tile.space<global>> -> memref<0x32xf32, strided<[64, 1], offset: ?>, #tile.space<global>>
}

// -----

tile.kernel @k(%a: memref<?x64xf32, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(128) {
%c0 = arith.constant 0 : index
// expected-error @+1 {{result shape [4, 16] is not the region sizes [4, 32] less some dimensions of size 1}}
%r = tile.region %a[%c0, %c0] [4, 32] : memref<?x64xf32, #tile.space<global>> -> memref<4x16xf32, strided<[64, 1], offset: ?>, #tile.space<global>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%a = tile.alloc : memref<4x8xf32, #tile.space<shared>>
%b = tile.alloc : memref<8x4xf32, #tile.space<shared>>
// expected-error @+1 {{source shape [4, 8] differs from destination shape [8, 4]}}
tile.copy %a, %b : memref<4x8xf32, #tile.space<shared>>, memref<8x4xf32, #tile.space<shared>>
}

// -----

tile.kernel @k(%a: memref<?xf32, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(128) {
%b = tile.alloc : memref<4xf32, #tile.space<shared>>
// expected-error @+1 {{copy needs static tile shapes}}
tile.copy %a, %a : memref<?xf32, #tile.space<global>>, memref<?xf32, #tile.space<global>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%a = tile.alloc : memref<4xf32, #tile.space<local>>
%b = tile.alloc : memref<4xf32, #tile.space<shared>>
// expected-error @+1 {{local buffers are private to a thread}}
tile.copy %a, %b : memref<4xf32, #tile.space<local>>, memref<4xf32, #tile.space<shared>>
}

// -----

tile.kernel @k(%a: memref<?xf32, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(128) {
%z = arith.constant 0.0 : f32
// expected-error @+1 {{fill needs a static tile shape}}
tile.fill %a, %z : memref<?xf32, #tile.space<global>>, f32
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%a = tile.alloc : memref<4xf32, #tile.space<shared>>
%z = arith.constant 0.0 : f16
// expected-error @+1 {{value type 'f16' differs from the buffer element type 'f32'}}
tile.fill %a, %z : memref<4xf32, #tile.space<shared>>, f16
}

// -----

tile.kernel @k(%a: memref<16x16xf16, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(128) {
%b = tile.alloc : memref<16x16xf16, #tile.space<shared>>
%c = tile.alloc : memref<16x16xf32, #tile.space<fragment>>
// expected-error @+1 {{operand A is in global memory; gemm needs shared, fragment or tensor memory}}
tile.gemm %a, %b, %c : memref<16x16xf16, #tile.space<global>>, memref<16x16xf16, #tile.space<shared>>, memref<16x16xf32, #tile.space<fragment>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%a = tile.alloc : memref<16x16xf16, #tile.space<shared>>
%b = tile.alloc : memref<16x16xf16, #tile.space<shared>>
%c = tile.alloc : memref<16x16xf32, #tile.space<shared>>
// expected-error @+1 {{operand C is in shared memory; gemm needs a fragment or tensor memory}}
tile.gemm %a, %b, %c : memref<16x16xf16, #tile.space<shared>>, memref<16x16xf16, #tile.space<shared>>, memref<16x16xf32, #tile.space<shared>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%a = tile.alloc : memref<16x16x2xf16, #tile.space<shared>>
%b = tile.alloc : memref<16x16xf16, #tile.space<shared>>
%c = tile.alloc : memref<16x16xf32, #tile.space<fragment>>
// expected-error @+1 {{operands must be 2-D}}
tile.gemm %a, %b, %c : memref<16x16x2xf16, #tile.space<shared>>, memref<16x16xf16, #tile.space<shared>>, memref<16x16xf32, #tile.space<fragment>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%a = tile.alloc : memref<16x32xf16, #tile.space<shared>>
%b = tile.alloc : memref<16x16xf16, #tile.space<shared>>
%c = tile.alloc : memref<16x16xf32, #tile.space<fragment>>
// expected-error @+1 {{K of operand A [16, 32] is 32 but K of operand B [16, 16] is 16}}
tile.gemm %a, %b, %c : memref<16x32xf16, #tile.space<shared>>, memref<16x16xf16, #tile.space<shared>>, memref<16x16xf32, #tile.space<fragment>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%a = tile.alloc : memref<16x32xf16, #tile.space<shared>>
%b = tile.alloc : memref<32x16xf16, #tile.space<shared>>
%c = tile.alloc : memref<16x8xf32, #tile.space<fragment>>
// expected-error @+1 {{accumulator C [16, 8] must be [16, 16] for A [16, 32] and B [32, 16]}}
tile.gemm %a, %b, %c : memref<16x32xf16, #tile.space<shared>>, memref<32x16xf16, #tile.space<shared>>, memref<16x8xf32, #tile.space<fragment>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%a = tile.alloc : memref<32x16xf16, #tile.space<shared>>
%b = tile.alloc : memref<16x16xf16, #tile.space<shared>>
%c = tile.alloc : memref<16x16xf32, #tile.space<fragment>>
// expected-error @+1 {{K of operand A [32, 16] is 32 but K of operand B [16, 16] is 16}}
tile.gemm %a, %b, %c {transpose_a, transpose_b} : memref<32x16xf16, #tile.space<shared>>, memref<16x16xf16, #tile.space<shared>>, memref<16x16xf32, #tile.space<fragment>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%a = tile.alloc : memref<16x16xf16, #tile.space<shared>>
%b = tile.alloc : memref<16x16xf16, #tile.space<shared>>
%c = tile.alloc : memref<16x16xi32, #tile.space<fragment>>
// expected-error @+1 {{accumulator C must be f32 or f16, got 'i32'}}
tile.gemm %a, %b, %c : memref<16x16xf16, #tile.space<shared>>, memref<16x16xf16, #tile.space<shared>>, memref<16x16xi32, #tile.space<fragment>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%a = tile.alloc : memref<16x16xf16, #tile.space<shared>>
%b = tile.alloc : memref<16x16xbf16, #tile.space<shared>>
%c = tile.alloc : memref<16x16xf32, #tile.space<fragment>>
// expected-error @+1 {{operand A element type 'f16' differs from operand B element type 'bf16'}}
tile.gemm %a, %b, %c : memref<16x16xf16, #tile.space<shared>>, memref<16x16xbf16, #tile.space<shared>>, memref<16x16xf32, #tile.space<fragment>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%s = tile.alloc : memref<8x4xf32, #tile.space<fragment>>
%d = tile.alloc : memref<8xf32, #tile.space<fragment>>
// expected-error @+1 {{dim 2 is out of range for source [8, 4]}}
tile.reduce sum %s -> %d dim = 2 : memref<8x4xf32, #tile.space<fragment>> -> memref<8xf32, #tile.space<fragment>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%s = tile.alloc : memref<8x4xf32, #tile.space<local>>
%d = tile.alloc : memref<8xf32, #tile.space<fragment>>
// expected-error @+1 {{reduce operands must be shared or fragment buffers, source is in local memory}}
tile.reduce sum %s -> %d dim = 1 : memref<8x4xf32, #tile.space<local>> -> memref<8xf32, #tile.space<fragment>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%s = tile.alloc : memref<8x4xf32, #tile.space<fragment>>
%d = tile.alloc : memref<4xf32, #tile.space<fragment>>
// expected-error @+1 {{destination [4] must be [8] to reduce source [8, 4] along dim 1}}
tile.reduce sum %s -> %d dim = 1 : memref<8x4xf32, #tile.space<fragment>> -> memref<4xf32, #tile.space<fragment>>
}

// -----

// Integers reduce (in i32), but not into a float, and not past 32 bits.
tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%s = tile.alloc : memref<8x4xi32, #tile.space<fragment>>
%d = tile.alloc : memref<8xf32, #tile.space<fragment>>
// expected-error @+1 {{reduce works on floating-point buffers, or on signed integer buffers of 8 to 32 bits on both sides; got 'i32' into 'f32'}}
tile.reduce sum %s -> %d dim = 1 : memref<8x4xi32, #tile.space<fragment>> -> memref<8xf32, #tile.space<fragment>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%s = tile.alloc : memref<8x4xi64, #tile.space<fragment>>
%d = tile.alloc : memref<8xi64, #tile.space<fragment>>
// expected-error @+1 {{got 'i64' into 'i64'}}
tile.reduce max %s -> %d dim = 1 : memref<8x4xi64, #tile.space<fragment>> -> memref<8xi64, #tile.space<fragment>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%a = tile.alloc : memref<4xf32, #tile.space<fragment>>
%z = arith.constant 0.0 : f32
%c0 = arith.constant 0 : index
// expected-error @+1 {{atomic_add destination must be global or shared, got fragment}}
tile.atomic_add %z, %a[%c0] order = relaxed : f32, memref<4xf32, #tile.space<fragment>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%a = tile.alloc : memref<4xi8, #tile.space<shared>>
%z = arith.constant 0 : i8
%c0 = arith.constant 0 : index
// expected-error @+1 {{atomic_add supports f32, f16, bf16, f64 and i32, got 'i8'}}
tile.atomic_add %z, %a[%c0] order = relaxed : i8, memref<4xi8, #tile.space<shared>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%a = tile.alloc : memref<4xf32, #tile.space<shared>>
%b = tile.alloc : memref<4xf32, #tile.space<fragment>>
%c0 = arith.constant 0 : index
// expected-error @+1 {{the region form takes no indices}}
tile.atomic_add %b, %a[%c0] order = relaxed : memref<4xf32, #tile.space<fragment>>, memref<4xf32, #tile.space<shared>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%a = tile.alloc : memref<4xf32, #tile.space<shared>>
%b = tile.alloc : memref<8xf32, #tile.space<fragment>>
// expected-error @+1 {{source tile [8] differs from destination tile [4]}}
tile.atomic_add %b, %a order = relaxed : memref<8xf32, #tile.space<fragment>>, memref<4xf32, #tile.space<shared>>
}

// -----

tile.kernel @k(%a: memref<?xf32, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(128) {
%b = tile.alloc : memref<4xf32, #tile.space<fragment>>
// expected-error @+1 {{region atomic_add needs static tile shapes}}
tile.atomic_add %a, %a order = relaxed : memref<?xf32, #tile.space<global>>, memref<?xf32, #tile.space<global>>
}

// -----

tile.kernel @k(%a: memref<?x4xf32, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(128) {
%z = arith.constant 0.0 : f32
%c0 = arith.constant 0 : index
// expected-error @+1 {{scalar atomic_add into a rank-2 buffer needs 2 indices, got 1}}
tile.atomic_add %z, %a[%c0] order = relaxed : f32, memref<?x4xf32, #tile.space<global>>
}

// -----

tile.kernel @k(%a: memref<?xf32, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(128) {
%z = arith.constant 0.0 : f16
%c0 = arith.constant 0 : index
// expected-error @+1 {{value type 'f16' differs from destination element type 'f32'}}
tile.atomic_add %z, %a[%c0] order = relaxed : f16, memref<?xf32, #tile.space<global>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%a = tile.alloc : memref<4x4xf32, #tile.space<local>>
// expected-error @+1 {{layouts are annotated on shared or fragment buffers, not local}}
tile.annotate_layout %a : memref<4x4xf32, #tile.space<local>> to affine_map<(d0, d1) -> (d0 * 4 + d1)>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%a = tile.alloc : memref<4x4xf32, #tile.space<shared>>
%c0 = arith.constant 0 : index
%r = tile.region %a[%c0, %c0] [2, 2] : memref<4x4xf32, #tile.space<shared>> -> memref<2x2xf32, strided<[4, 1], offset: ?>, #tile.space<shared>>
// expected-error @+1 {{annotate the buffer returned by tile.alloc}}
tile.annotate_layout %r : memref<2x2xf32, strided<[4, 1], offset: ?>, #tile.space<shared>> to affine_map<(d0, d1) -> (d0 * 4 + d1)>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%a = tile.alloc : memref<4x4xf32, #tile.space<shared>>
// expected-error @+1 {{layout must map the 2 logical indices to one offset}}
tile.annotate_layout %a : memref<4x4xf32, #tile.space<shared>> to affine_map<(d0) -> (d0)>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%a = tile.alloc : memref<4x4xf32, #tile.space<shared>>
// expected-error @+1 {{layout offsets must start at 0 and grow with every index}}
tile.annotate_layout %a : memref<4x4xf32, #tile.space<shared>> to affine_map<(d0, d1) -> (d0 * 4 - d1 + 3)>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
// expected-error @+1 {{extents must be positive, got [0]}}
tile.parallel (%i) in [0] {
}
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%c0 = arith.constant 0 : index
%c4 = arith.constant 4 : index
// expected-error @+1 {{num_stages must be at least 1, got 0}}
tile.pipelined %k = %c0 to %c4 step %c4 stages(0) {
}
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%c0 = arith.constant 0 : index
%c4 = arith.constant 4 : index
// expected-error @+1 {{step must be positive, got 0}}
tile.pipelined %k = %c0 to %c4 step %c0 stages(2) {
}
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
%c0 = arith.constant 0 : index
%c1 = arith.constant 1 : index
%c4 = arith.constant 4 : index
// expected-error @+1 {{overlap_mma releases each stage an iteration late, which needs at least 2 stages}}
tile.pipelined %k = %c0 to %c4 step %c1 stages(1) attributes {overlap_mma} {
}
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
  // expected-error @+1 {{threads [64, 192) are outside the kernel's 128}}
  tile.role threads(64, 128) {
  }
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(256) {
  // expected-error @+1 {{setmaxnreg applies to whole warpgroups}}
  tile.role threads(0, 64) max_registers(40) {
  }
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
  // expected-error @+1 {{named barrier ids are 1 to 15 (0 is __syncthreads), got 0}}
  tile.barrier named(0, 128)
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %s = tile.alloc : memref<64xf32, #tile.space<shared>>
  // expected-error @+1 {{needs a shared alloc with `stages`}}
  %v = tile.stage %s[%c0] : memref<64xf32, #tile.space<shared>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c2 = arith.constant 2 : index
  %s = tile.alloc {stages = 2 : i64} : memref<64xf32, #tile.space<shared>>
  // expected-error @+1 {{stage 2 is outside the buffer's 2 stages}}
  %v = tile.stage %s[%c2] : memref<64xf32, #tile.space<shared>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %s = tile.alloc : memref<2xi32, #tile.space<shared>>
  // expected-error @+1 {{mbarriers must be a rank-1 shared buffer of i64}}
  tile.mbarrier_init %s[%c0] arrivals(1) : memref<2xi32, #tile.space<shared>>
}

// -----

tile.kernel @k(%a: memref<64xf32, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %bars = tile.alloc : memref<1xi64, #tile.space<shared>>
  %s = tile.alloc : memref<64xf16, #tile.space<shared>>
  // expected-error @+1 {{cannot convert element types asynchronously}}
  tile.copy_async %a, %s arrive %bars[%c0] : memref<64xf32, #tile.space<global>>, memref<64xf16, #tile.space<shared>>, memref<1xi64, #tile.space<shared>>
}

// -----

// Signed attributes: a negative count is caught, not read as 2^64 - 32.
// expected-error @+1 {{threads must be positive and at most 1024 (a CUDA block's limit), got -32}}
tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(-32) {
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{stages must be at least 1, got -1}}
  %s = tile.alloc {stages = -1 : i64} : memref<64xf32, #tile.space<shared>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %b = tile.alloc : memref<2xi64, #tile.space<shared>>
  // expected-error @+1 {{arrival count must be in [1, 2^20 - 1], got 1048576}}
  tile.mbarrier_init %b[%c0] arrivals(1048576) : memref<2xi64, #tile.space<shared>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(256) {
  tile.role threads(0, 128) {
    // expected-error @+1 {{a block-wide barrier inside a role would wait for threads that never reach it}}
    tile.barrier
  }
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(256) {
  // expected-error @+1 {{a role is whole warps: first thread -32 and count 128}}
  tile.role threads(-32, 128) {
  }
}

// -----

tile.kernel @k(%t: memref<?x64xf16, #tile.space<global>>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  // expected-error @+1 {{needs one limit per dimension: 1 for a rank-2 tensor}}
  %b = tile.bound %t [%n] : memref<?x64xf16, #tile.space<global>>
}

// -----

tile.kernel @k(%t: memref<?x64xf16, #tile.space<global>>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %r = tile.region %t[%c0, %c0] [64, 64] : memref<?x64xf16, #tile.space<global>> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>
  // expected-error @+1 {{bounds a kernel tensor parameter or a tile.peer of one, not a window or another buffer}}
  %b = tile.bound %r [%n, %n] : memref<64x64xf16, strided<[64, 1], offset: ?>, #tile.space<global>>
}

// -----

tile.kernel @k(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{num_stages must be at least 1, got -1}}
  tile.pipelined %k = %c0 to %n step %c1 stages(-1) {
  }
}

// -----

tile.kernel @k(%f: memref<8xf32, #tile.space<global>>, %e: i32) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{flags are i32 elements of a global buffer}}
  tile.signal %e, %f[%c0] : i32, memref<8xf32, #tile.space<global>>
}

// -----

tile.kernel @k(%f: memref<8xi32, #tile.space<global>>, %e: i32) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{timeout_ms must be in (0, 3600000], got 0}}
  tile.wait %f[%c0], %e timeout_ms(0) : memref<8xi32, #tile.space<global>>, i32
}

// -----

tile.kernel @tmem_rows() grid(%bx) = affine_map<() -> (1)> threads(128) {
  // expected-error @+1 {{a tensor-memory buffer is [64 or 128 rows (TMEM lanes), columns], got [32, 64]}}
  %t = tile.alloc : memref<32x64xf32, #tile.space<tmem>>
}

// -----

tile.kernel @tmem_type() grid(%bx) = affine_map<() -> (1)> threads(128) {
  // expected-error @+1 {{tensor memory holds 32-bit (f32, i32) or 16-bit (f16, bf16) values, not 'f64'}}
  %t = tile.alloc : memref<128x64xf64, #tile.space<tmem>>
}

// -----

tile.kernel @tmem_too_wide() grid(%bx) = affine_map<() -> (1)> threads(128) {
  // expected-error @+1 {{spans 1024 32-bit columns; tensor memory has 512 per block}}
  %t = tile.alloc {unpacked} : memref<128x1024xbf16, #tile.space<tmem>>
}

// -----

tile.kernel @tmem_placed_past_end() grid(%bx) = affine_map<() -> (1)> threads(128) {
  // expected-error @+1 {{placed at column 384, its 256 columns pass the 512 there are}}
  %t = tile.alloc {offset = 384 : i64} : memref<128x512xbf16, #tile.space<tmem>>
}

// -----

tile.kernel @unpacked_shared() grid(%bx) = affine_map<() -> (1)> threads(128) {
  // expected-error @+1 {{only tensor-memory buffers are packed or unpacked}}
  %t = tile.alloc {unpacked} : memref<128x64xbf16, #tile.space<shared>>
}

// -----

tile.kernel @alloc_columns(%s: i32) grid(%bx) = affine_map<() -> (1)> threads(128) {
  // expected-error @+1 {{allocates 48 columns; tensor memory is allocated in powers of two from 32 to 512}}
  tilenv.tcgen05_alloc %s columns = 48
}

// -----

tile.kernel @mma_shape() grid(%bx) = affine_map<() -> (1)> threads(128) {
  // expected-error @+1 {{n=12: cta_group::1 MMAs are 8 to 256 columns in steps of 8}}
  %id = tilenv.tcgen05_idesc m = 128 n = 12 bf16 -> f32
}

// -----

tile.kernel @mma_types() grid(%bx) = affine_map<() -> (1)> threads(128) {
  // expected-error @+1 {{kind::f16 accumulates in f32 or f16, not 'bf16'}}
  %id = tilenv.tcgen05_idesc m = 64 n = 64 f16 -> bf16
}

// -----

tile.kernel @smem_desc_swizzle(%a: i32) grid(%bx) = affine_map<() -> (1)> threads(128) {
  // expected-error @+1 {{swizzle of 96 bytes; tcgen05 takes none, 32, 64 or 128}}
  %d = tilenv.tcgen05_smem_desc %a lbo = 16 sbo = 1024 swizzle = 96
}

// -----

tile.kernel @ld_num(%a: i32) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %r = tile.alloc : memref<256xf32, #tile.space<local>>
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{registers}}
  tilenv.tcgen05_ld %a -> %r[%c0] s16x256b x 64 : memref<256xf32, #tile.space<local>>
}

// -----

tile.kernel @ld_offset(%a: i32) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %r = tile.alloc : memref<8xf32, #tile.space<local>>
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{the column immediate belongs to the 16x32bx2 shape, and it needs one}}
  tilenv.tcgen05_ld %a -> %r[%c0] s16x32bx2 x 2 : memref<8xf32, #tile.space<local>>
}

// -----

tile.kernel @st_registers(%a: i32) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %r = tile.alloc : memref<8xf32, #tile.space<shared>>
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{moves a thread's registers (local or fragment storage)}}
  tilenv.tcgen05_st %r[%c0] -> %a s32x32b x 8 : memref<8xf32, #tile.space<shared>>
}

// -----

#g = #tile.space<global>
tile.kernel @peer_of_view(%x: memref<?x64xf16, #g>, %r: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %w = tile.region %x[%c0, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
  // expected-error @+1 {{takes a tensor parameter of the kernel, whose every rank's address the launch passes}}
  %p = tile.peer %w [%r] : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
}

// -----

// expected-error @+1 {{cluster has 2 extents but the grid has 1 dimensions}}
tile.kernel @k() grid(%bx) = affine_map<() -> (4)> threads(128) attributes {cluster = array<i64: 2, 1>} {
}

// -----

// expected-error @+1 {{a cluster holds at most 8 blocks, got 16}}
tile.kernel @k() grid(%bx, %by) = affine_map<() -> (4, 4)> threads(128) attributes {cluster = array<i64: 4, 4>} {
}

// -----

tile.kernel @k(%a: memref<64x64xf16, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %s = tile.alloc : memref<64x64xf16, #tile.space<shared>>
  // expected-error @+1 {{a multicast copy needs a kernel launched in clusters of several blocks (cluster)}}
  tile.copy %a, %s {multicast} : memref<64x64xf16, #tile.space<global>>, memref<64x64xf16, #tile.space<shared>>
}

// -----

tile.kernel @k(%a: memref<64x64xf16, #tile.space<global>>) grid(%bx) = affine_map<() -> (2)> threads(128) attributes {cluster = array<i64: 2>} {
  %s = tile.alloc : memref<64x64xf16, #tile.space<shared>>
  // expected-error @+1 {{multicast copies a global tile into shared memory}}
  tile.copy %s, %a {multicast} : memref<64x64xf16, #tile.space<shared>>, memref<64x64xf16, #tile.space<global>>
}

// -----

tile.kernel @k() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %bars = tile.alloc : memref<1xi64, #tile.space<shared>>
  // expected-error @+1 {{an arrival on every block's barrier needs a kernel launched in clusters of several blocks (cluster)}}
  tile.mbarrier_arrive %bars[%c0] {cluster} : memref<1xi64, #tile.space<shared>>
}

// -----

tile.kernel @mma_kind(%d: i32, %a: i64) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %true = arith.constant true
  %id = tilenv.tcgen05_idesc m = 128 n = 64 f8E4M3FN -> f32
  // expected-error @+1 {{is kind::f16 but its descriptor's 'f8E4M3FN' operands are kind::f8f6f4}}
  tilenv.tcgen05_mma %d, %a, %a, %id accumulate(%true) : i64
}

// -----

tile.kernel @mma_i8_acc() grid(%bx) = affine_map<() -> (1)> threads(128) {
  // expected-error @+1 {{kind::i8 accumulates in i32 (s32), not 'f32'}}
  %id = tilenv.tcgen05_idesc m = 128 n = 64 i8 -> f32
}

// -----

tile.kernel @mx_scale_size() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<128x256xf8E4M3FN, #tile.space<shared>>
  %b = tile.alloc : memref<128x256xf8E4M3FN, #tile.space<shared>>
  %sa = tile.alloc : memref<32x16xf8E8M0FNU, #tile.space<shared>>
  %sb = tile.alloc : memref<32x16xf8E8M0FNU, #tile.space<shared>>
  %acc = tile.alloc : memref<128x128xf32, #tile.space<tmem>>
  // expected-error @+1 {{scale_a is [32, 16], 512 scales; for 128 rows and K = 256 it holds 1024 (K / 128 groups of 512-byte atoms, one per 128)}}
  tile.gemm %a, %b, %acc scales(%sa, %sb : memref<32x16xf8E8M0FNU, #tile.space<shared>>, memref<32x16xf8E8M0FNU, #tile.space<shared>>) {transpose_b} : memref<128x256xf8E4M3FN, #tile.space<shared>>, memref<128x256xf8E4M3FN, #tile.space<shared>>, memref<128x128xf32, #tile.space<tmem>>
}

// -----

tile.kernel @mx_operands() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<128x128xbf16, #tile.space<shared>>
  %b = tile.alloc : memref<128x128xbf16, #tile.space<shared>>
  %sa = tile.alloc : memref<32x16xf8E8M0FNU, #tile.space<shared>>
  %acc = tile.alloc : memref<128x128xf32, #tile.space<tmem>>
  // expected-error @+1 {{block scales (kind::mxf8f6f4) multiply e4m3 or e5m2 operands, not 'bf16'}}
  tile.gemm %a, %b, %acc scales(%sa, %sa : memref<32x16xf8E8M0FNU, #tile.space<shared>>, memref<32x16xf8E8M0FNU, #tile.space<shared>>) {transpose_b} : memref<128x128xbf16, #tile.space<shared>>, memref<128x128xbf16, #tile.space<shared>>, memref<128x128xf32, #tile.space<tmem>>
}

// -----

tile.kernel @register_order_b_of_shared_a() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<64x64xf8E4M3FN, #tile.space<shared>>
  %acc = tile.alloc : memref<64x64xf32, #tile.space<fragment>>
  // expected-error @+1 {{b_register_k_order matches B's K to an 8-bit A in registers; A is 'f8E4M3FN' in shared memory}}
  tile.gemm %a, %a, %acc {transpose_b, b_register_k_order} : memref<64x64xf8E4M3FN, #tile.space<shared>>, memref<64x64xf8E4M3FN, #tile.space<shared>>, memref<64x64xf32, #tile.space<fragment>>
}
