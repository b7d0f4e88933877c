// RUN: tessel-opt %s -split-input-file -pass-pipeline='builtin.module(tile.kernel(tessel-defer-bulk-waits))' | FileCheck %s

#l = #tile.space<local>
#s = #tile.space<shared>
#g = #tile.space<global>

// A reduce-add per iteration: the issuing thread no longer waits after the
// store. The next iteration waits before it writes the tile again (reads
// of shared memory and global stores go first), and the loop's exit waits
// for the last iteration.
// CHECK-LABEL: tile.kernel @loop
// CHECK: scf.for
// CHECK-NEXT: memref.load %{{.*}} : memref<64xf32, #tile.space<shared>>
// CHECK-NEXT: memref.store %{{.*}} : memref<?xf32, #tile.space<global>>
// CHECK-NEXT: scf.if %[[ELECTED:.*]] {
// CHECK-NEXT: tilenv.bulk_wait read
// CHECK-NEXT: }
// CHECK-NEXT: memref.store %{{.*}} : memref<64xf32, #tile.space<shared>>
// CHECK-NEXT: tilenv.fence_proxy_async
// CHECK-NEXT: tilenv.named_barrier 2, 256
// CHECK-NEXT: scf.if %[[ELECTED]] {
// CHECK-NEXT: tilenv.smem_address
// CHECK-NEXT: tilenv.tma_store
// CHECK-NEXT: tilenv.bulk_commit
// CHECK-NEXT: }
// CHECK-NEXT: }
// CHECK-NEXT: scf.if %[[ELECTED]] {
// CHECK-NEXT: tilenv.bulk_wait read
// CHECK-NEXT: }
tile.kernel @loop(%out: memref<?xf32, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(256) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %tid = tilenv.thread_id
  %elected = arith.cmpi eq, %tid, %c0 : index
  %tile = tile.alloc {offset = 0 : i64} : memref<64xf32, #s>
  %f = arith.constant 1.0 : f32
  scf.for %i = %c0 to %n step %c1 {
    %x = memref.load %tile[%c0] : memref<64xf32, #s>
    memref.store %x, %out[%i] : memref<?xf32, #g>
    memref.store %f, %tile[%c0] : memref<64xf32, #s>
    tilenv.fence_proxy_async
    tilenv.named_barrier 2, 256
    scf.if %elected {
      %a = tilenv.smem_address %tile : memref<64xf32, #s>
      tilenv.tma_store %a -> 0[%i] reduce_add
      tilenv.bulk_commit
      tilenv.bulk_wait read
    }
  }
}

// -----

#l = #tile.space<local>
#s = #tile.space<shared>
#g = #tile.space<global>

// A barrier later in the same block may order other threads' writes of the
// tile after this thread: the wait goes before it, after the register work.
// CHECK-LABEL: tile.kernel @barrier_after
// CHECK: tilenv.bulk_commit
// CHECK-NEXT: }
// CHECK-NEXT: memref.store %{{.*}} : memref<4xf32, #tile.space<local>>
// CHECK-NEXT: scf.if
// CHECK-NEXT: tilenv.bulk_wait read
// CHECK-NEXT: }
// CHECK-NEXT: tilenv.sync_threads
// CHECK-NOT: tilenv.bulk_wait
tile.kernel @barrier_after(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %tid = tilenv.thread_id
  %elected = arith.cmpi eq, %tid, %c0 : index
  %tile = tile.alloc {offset = 0 : i64} : memref<64xf32, #s>
  %regs = tile.alloc : memref<4xf32, #l>
  %f = arith.constant 1.0 : f32
  scf.if %elected {
    %a = tilenv.smem_address %tile : memref<64xf32, #s>
    tilenv.tma_store %a -> 0[%c0]
    tilenv.bulk_commit
    tilenv.bulk_wait read
  }
  memref.store %f, %regs[%c0] : memref<4xf32, #l>
  tilenv.sync_threads
  memref.store %f, %tile[%c0] : memref<64xf32, #s>
}

// -----

#s = #tile.space<shared>

// A condition computed inside the loop cannot guard a wait at the top of
// the body: the wait stays in the iteration, at its end.
// CHECK-LABEL: tile.kernel @condition_inside
// CHECK: tilenv.bulk_commit
// CHECK-NEXT: }
// CHECK-NEXT: arith.addi
// CHECK-NEXT: scf.if
// CHECK-NEXT: tilenv.bulk_wait read
// CHECK-NEXT: }
// CHECK-NEXT: }
// CHECK-NOT: tilenv.bulk_wait
tile.kernel @condition_inside(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %tid = tilenv.thread_id
  %tile = tile.alloc {offset = 0 : i64} : memref<64xf32, #s>
  scf.for %i = %c0 to %n step %c1 {
    %elected = arith.cmpi eq, %tid, %i : index
    scf.if %elected {
      %a = tilenv.smem_address %tile : memref<64xf32, #s>
      tilenv.tma_store %a -> 0[%i]
      tilenv.bulk_commit
      tilenv.bulk_wait read
    }
    %j = arith.addi %i, %c1 : index
  }
}
