// RUN: tessel-opt %s -split-input-file -pass-pipeline='builtin.module(tile.kernel(tessel-defer-wgmma-waits))' | FileCheck %s

#l = #tile.space<local>
#s = #tile.space<shared>
#g = #tile.space<global>

// Two independent gemms issue back to back. The first one's result is read
// while the second may still run (wait 1), the second's at its first read
// (wait 0); each wait names the registers it makes safe.
// CHECK-LABEL: tile.kernel @independent
// CHECK: tilenv.wgmma %[[ACC0:[^\[]*]]
// CHECK-NEXT: tilenv.wgmma_commit
// CHECK-NEXT: tilenv.wgmma_fence
// CHECK-NEXT: tilenv.wgmma %[[ACC1:[^\[]*]]
// CHECK-NEXT: tilenv.wgmma_commit
// CHECK-NEXT: tilenv.wgmma_wait 1 ready(%[[ACC0]] : memref<32xf32, #tile.space<local>>)
// CHECK-NEXT: memref.load %[[ACC0]]
// CHECK: tilenv.wgmma_wait 0 ready(%[[ACC1]] : memref<32xf32, #tile.space<local>>)
// CHECK-NEXT: memref.load %[[ACC1]]
// CHECK-NOT: tilenv.wgmma_wait
tile.kernel @independent(%out: memref<?xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %a = tile.alloc {offset = 0 : i64} : memref<4096xbf16, #s>
  %b = tile.alloc {offset = 8192 : i64} : memref<4096xbf16, #s>
  %acc0 = tile.alloc : memref<32xf32, #l>
  %acc1 = tile.alloc : memref<32xf32, #l>
  %pa = tilenv.smem_address %a : memref<4096xbf16, #s>
  %pb = tilenv.smem_address %b : memref<4096xbf16, #s>
  %da = tilenv.wgmma_desc %pa lbo = 16 sbo = 1024 swizzle = 128
  %db = tilenv.wgmma_desc %pb lbo = 16 sbo = 1024 swizzle = 128
  tilenv.wgmma_fence
  tilenv.wgmma %acc0[%c0], %da, %db n = 64 bf16 : memref<32xf32, #l>
  tilenv.wgmma_commit
  tilenv.wgmma_wait 0
  tilenv.wgmma_fence
  tilenv.wgmma %acc1[%c0], %db, %da n = 64 bf16 : memref<32xf32, #l>
  tilenv.wgmma_commit
  tilenv.wgmma_wait 0
  %x = memref.load %acc0[%c0] : memref<32xf32, #l>
  memref.store %x, %out[%c0] : memref<?xf32, #g>
  %y = memref.load %acc1[%c0] : memref<32xf32, #l>
  memref.store %y, %out[%c0] : memref<?xf32, #g>
}

// -----

#l = #tile.space<local>
#s = #tile.space<shared>

// Writing a shared buffer a pending gemm reads waits for it, also when the
// write comes after a barrier (another warpgroup may get there first);
// writing other shared buffers does not. A loop body waits for everything
// before it ends, and an mbarrier arrive (which may free a stage) waits too.
// CHECK-LABEL: tile.kernel @shared_operands
// CHECK: scf.for
// CHECK: tilenv.wgmma_commit
// CHECK-NEXT: memref.store %{{.*}}, %[[OTHER:.*]][
// CHECK-NEXT: tilenv.wgmma_wait 0
// CHECK-NEXT: tilenv.named_barrier 2, 256
// CHECK-NEXT: memref.store
// CHECK: tilenv.wgmma_commit
// CHECK: tilenv.wgmma_wait 0
// CHECK-NEXT: tilenv.mbarrier_arrive
// CHECK: tilenv.wgmma_commit
// CHECK-NEXT: tilenv.wgmma_wait 0
// CHECK-NEXT: }
tile.kernel @shared_operands(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(256) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : bf16
  %a = tile.alloc {offset = 0 : i64} : memref<4096xbf16, #s>
  %b = tile.alloc {offset = 8192 : i64} : memref<4096xbf16, #s>
  %other = tile.alloc {offset = 16384 : i64} : memref<4096xbf16, #s>
  %bar = tile.alloc {offset = 24576 : i64} : memref<1xi64, #s>
  %acc = tile.alloc : memref<32xf32, #l>
  scf.for %i = %c0 to %n step %c1 {
    %pa = tilenv.smem_address %a : memref<4096xbf16, #s>
    %pb = tilenv.smem_address %b : memref<4096xbf16, #s>
    %da = tilenv.wgmma_desc %pa lbo = 16 sbo = 1024 swizzle = 128
    %db = tilenv.wgmma_desc %pb lbo = 16 sbo = 1024 swizzle = 128
    tilenv.wgmma_fence
    tilenv.wgmma %acc[%c0], %da, %db n = 64 bf16 : memref<32xf32, #l>
    tilenv.wgmma_commit
    tilenv.wgmma_wait 0
    memref.store %z, %other[%c0] : memref<4096xbf16, #s>
    tilenv.named_barrier 2, 256
    memref.store %z, %b[%c0] : memref<4096xbf16, #s>
    tilenv.wgmma_fence
    tilenv.wgmma %acc[%c0], %da, %db n = 64 bf16 : memref<32xf32, #l>
    tilenv.wgmma_commit
    tilenv.wgmma_wait 0
    %pbar = tilenv.smem_address %bar : memref<1xi64, #s>
    tilenv.mbarrier_arrive %pbar
    tilenv.wgmma_fence
    tilenv.wgmma %acc[%c0], %da, %db n = 64 bf16 : memref<32xf32, #l>
    tilenv.wgmma_commit
    tilenv.wgmma_wait 0
  }
}

// -----

#l = #tile.space<local>
#s = #tile.space<shared>
#g = #tile.space<global>

// An A fragment in registers is busy until its gemm completes: writing it
// waits, and reads of registers the gemm does not use do not. Control flow
// that reads the accumulator waits before it.
// CHECK-LABEL: tile.kernel @register_a
// CHECK: tilenv.wgmma_reg_a
// CHECK-NEXT: tilenv.wgmma_commit
// CHECK-NEXT: memref.load %[[FREE:.*]][
// CHECK-NEXT: tilenv.wgmma_wait 0 ready(%{{.*}}, %{{.*}} : memref<32xf32, #tile.space<local>>, memref<8xbf16, #tile.space<local>>)
// CHECK-NEXT: memref.store
// CHECK: tilenv.wgmma_commit
// CHECK-NEXT: tilenv.wgmma_wait 0
// CHECK-NEXT: scf.if
tile.kernel @register_a(%out: memref<?xf32, #g>, %p: i1) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : bf16
  %b = tile.alloc {offset = 0 : i64} : memref<4096xbf16, #s>
  %acc = tile.alloc : memref<32xf32, #l>
  %areg = tile.alloc : memref<8xbf16, #l>
  %free = tile.alloc : memref<4xf32, #l>
  %pb = tilenv.smem_address %b : memref<4096xbf16, #s>
  %db = tilenv.wgmma_desc %pb lbo = 16 sbo = 1024 swizzle = 128
  tilenv.wgmma_fence
  tilenv.wgmma_reg_a %acc[%c0], %areg[%c0], %db n = 64 bf16 : memref<32xf32, #l>, memref<8xbf16, #l>
  tilenv.wgmma_commit
  tilenv.wgmma_wait 0
  %f = memref.load %free[%c0] : memref<4xf32, #l>
  memref.store %z, %areg[%c0] : memref<8xbf16, #l>
  tilenv.wgmma_fence
  tilenv.wgmma_reg_a %acc[%c0], %areg[%c0], %db n = 64 bf16 : memref<32xf32, #l>, memref<8xbf16, #l>
  tilenv.wgmma_commit
  tilenv.wgmma_wait 0
  scf.if %p {
    %x = memref.load %acc[%c0] : memref<32xf32, #l>
    memref.store %x, %out[%c0] : memref<?xf32, #g>
  }
}

// -----

#l = #tile.space<local>
#s = #tile.space<shared>
#g = #tile.space<global>

// Reading a tensor's extent (bounds of a masked store) touches no buffer:
// writing the first gemm's result waits only for it (wait 1), not for the
// gemm issued after it. The kernel body has no terminator; the second gemm
// completes at its end.
// CHECK-LABEL: tile.kernel @extent_reads
// CHECK: tilenv.wgmma_commit
// CHECK: tilenv.wgmma_commit
// CHECK-NEXT: tilenv.wgmma_wait 1
// CHECK-NEXT: scf.for
// CHECK: memref.dim
// CHECK: tilenv.atomic_add
// CHECK: }
// CHECK-NEXT: }
// CHECK-NEXT: tilenv.wgmma_wait 0 ready(%{{.*}} : memref<32xf32, #tile.space<local>>)
// CHECK-NEXT: }
tile.kernel @extent_reads(%out: memref<?xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %a = tile.alloc {offset = 0 : i64} : memref<4096xbf16, #s>
  %acc0 = tile.alloc : memref<32xf32, #l>
  %acc1 = tile.alloc : memref<32xf32, #l>
  %pa = tilenv.smem_address %a : memref<4096xbf16, #s>
  %da = tilenv.wgmma_desc %pa lbo = 16 sbo = 1024 swizzle = 128
  tilenv.wgmma_fence
  tilenv.wgmma %acc0[%c0], %da, %da n = 64 bf16 : memref<32xf32, #l>
  tilenv.wgmma_commit
  tilenv.wgmma_wait 0
  tilenv.wgmma_fence
  tilenv.wgmma %acc1[%c0], %da, %da n = 64 bf16 : memref<32xf32, #l>
  tilenv.wgmma_commit
  tilenv.wgmma_wait 0
  scf.for %i = %c0 to %c4 step %c1 {
    %n = memref.dim %out, %c0 : memref<?xf32, #g>
    %inside = arith.cmpi slt, %i, %n : index
    scf.if %inside {
      %x = memref.load %acc0[%i] : memref<32xf32, #l>
      tilenv.atomic_add %x, %out[%i] relaxed : f32, memref<?xf32, #g>
    }
  }
}

// -----

#l = #tile.space<local>
#s = #tile.space<shared>
#g = #tile.space<global>

// Packing the next gemm's A into a fresh register buffer overlaps the
// pending gemm: allocating a buffer touches nothing in flight. Neither does
// a warp shuffle (a row reduction of other registers).
// CHECK-LABEL: tile.kernel @fresh_buffer
// CHECK: tilenv.wgmma_commit
// CHECK-NEXT: tile.alloc
// CHECK-NEXT: memref.store
// CHECK-NEXT: tilenv.wgmma_fence
// CHECK-NEXT: tilenv.wgmma_reg_a
// CHECK-NEXT: tilenv.wgmma_commit
// CHECK-NEXT: tilenv.shfl_xor
// CHECK-NEXT: tilenv.wgmma_wait 1 ready(%{{.*}} : memref<32xf32, #tile.space<local>>)
// CHECK-NEXT: memref.load
tile.kernel @fresh_buffer(%out: memref<?xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %one = arith.constant 1.0 : f32
  %z = arith.constant 0 : i32
  %a = tile.alloc {offset = 0 : i64} : memref<4096xbf16, #s>
  %acc0 = tile.alloc : memref<32xf32, #l>
  %acc1 = tile.alloc : memref<32xf32, #l>
  %pa = tilenv.smem_address %a : memref<4096xbf16, #s>
  %da = tilenv.wgmma_desc %pa lbo = 16 sbo = 1024 swizzle = 128
  tilenv.wgmma_fence
  tilenv.wgmma %acc0[%c0], %da, %da n = 64 bf16 : memref<32xf32, #l>
  tilenv.wgmma_commit
  tilenv.wgmma_wait 0
  %packed = tile.alloc : memref<4xi32, #l>
  memref.store %z, %packed[%c0] : memref<4xi32, #l>
  tilenv.wgmma_fence
  tilenv.wgmma_reg_a %acc1[%c0], %packed[%c0], %da n = 64 bf16 : memref<32xf32, #l>, memref<4xi32, #l>
  tilenv.wgmma_commit
  tilenv.wgmma_wait 0
  %other = tilenv.shfl_xor %one, 1, 32 : f32
  %x = memref.load %acc0[%c0] : memref<32xf32, #l>
  memref.store %x, %out[%c0] : memref<?xf32, #g>
}
