// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-release-stages-late))' | FileCheck %s

#l = #tile.space<local>
#s = #tile.space<shared>
#g = #tile.space<global>

// A consumer mainloop over a ring of 4 stages: the group of iteration k
// stays in flight (wait 1) and the arrival frees stage k-1 from the second
// iteration on; after the loop the last group completes (its accumulator
// ready) and the last iteration's stage is freed.
// The accumulator's zero fill goes: the first product overwrites it
// (accumulate only after the first iteration), and the fill stays for a
// loop that does not run.
// CHECK-LABEL: tile.kernel @mainloop
// CHECK-NOT: memref.store
// CHECK: scf.for %[[K:.*]] = %[[LB:.*]] to %[[UB:.*]] step %[[STEP:[^ ]*]] {
// CHECK: tilenv.mbarrier_wait
// CHECK: %[[LATER_K:.*]] = arith.cmpi ne, %[[K]], %[[LB]]
// CHECK: tilenv.wgmma {{.*}} accumulate(%[[LATER_K]])
// CHECK: tilenv.wgmma_commit
// CHECK: tilenv.wgmma_wait 1{{$}}
// CHECK: %[[PREV:.*]] = arith.subi %[[K]], %[[STEP]]
// CHECK: %[[LATER:.*]] = arith.cmpi ne, %[[K]], %[[LB]]
// CHECK: scf.if %[[LATER]] {
// CHECK: arith.remui %[[PREV]]
// CHECK: scf.if
// CHECK: tilenv.mbarrier_arrive
// CHECK-NOT: tilenv.mbarrier_arrive
// CHECK: } {tessel.unroll_hint}
// CHECK-NOT: tessel.stage_ring
// CHECK-NEXT: tilenv.wgmma_wait 0 ready(%[[ACC:.*]] : memref<64xf32, #tile.space<local>>)
// CHECK: %[[LAST:.*]] = arith.addi %[[LB]]
// CHECK: %[[RAN:.*]] = arith.cmpi slt, %[[LB]], %[[UB]]
// CHECK: scf.if %[[RAN]] {
// CHECK: arith.remui %[[LAST]]
// CHECK: tilenv.mbarrier_arrive
// CHECK: %[[NONE:.*]] = arith.cmpi sge, %[[LB]], %[[UB]]
// CHECK: scf.if %[[NONE]] {
// CHECK-NEXT: scf.for
// CHECK-NEXT: memref.store %{{.*}}, %[[ACC]]
// CHECK: memref.load %[[ACC]]
tile.kernel @mainloop(%n: index, %out: memref<?xf32, #g>) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c31 = arith.constant 31 : index
  %c4096 = arith.constant 4096 : index
  %full = tile.alloc {offset = 0 : i64} : memref<4xi64, #s>
  %empty = tile.alloc {offset = 32 : i64} : memref<4xi64, #s>
  %a = tile.alloc {offset = 1024 : i64} : memref<16384xbf16, #s>
  %acc = tile.alloc : memref<64xf32, #l>
  %tid = tilenv.thread_id
  %zero = arith.constant 0.0 : f32
  %c64 = arith.constant 64 : index
  scf.for %i = %c0 to %c64 step %c1 {
    memref.store %zero, %acc[%i] : memref<64xf32, #l>
  } {tessel.unroll}
  scf.for %k = %c0 to %n step %c1 {
    %stage = arith.remui %k, %c4 : index
    %round = arith.divui %k, %c4 : index
    %parity = arith.remui %round, %c1 : index
    %offset = arith.muli %stage, %c8 : index
    %offset32 = arith.index_cast %offset : index to i32
    %fullBase = tilenv.smem_address %full : memref<4xi64, #s>
    %fullAt = arith.addi %fullBase, %offset32 : i32
    tilenv.mbarrier_wait %fullAt parity %parity
    %elems = arith.muli %stage, %c4096 : index
    %bytes = arith.index_cast %elems : index to i32
    %aBase = tilenv.smem_address %a : memref<16384xbf16, #s>
    %aAt = arith.addi %aBase, %bytes : i32
    %desc = tilenv.wgmma_desc %aAt lbo = 16 sbo = 1024 swizzle = 128
    tilenv.wgmma_fence
    tilenv.wgmma %acc[%c0], %desc, %desc n = 128 bf16 : memref<64xf32, #l>
    tilenv.wgmma_commit
    tilenv.sync_warp
    %lane = arith.andi %tid, %c31 : index
    %first = arith.cmpi eq, %lane, %c0 : index
    tilenv.wgmma_wait 0 ready(%acc : memref<64xf32, #l>)
    scf.if %first {
      %emptyBase = tilenv.smem_address %empty : memref<4xi64, #s>
      %emptyAt = arith.addi %emptyBase, %offset32 : i32
      tilenv.mbarrier_arrive %emptyAt
    }
  } {tessel.stage_ring = 4 : i64, tessel.unroll_hint}
  %x = memref.load %acc[%c0] : memref<64xf32, #l>
  memref.store %x, %out[%c0] : memref<?xf32, #g>
}

// -----

#l = #tile.space<local>
#s = #tile.space<shared>

// One stage: releasing it late would deadlock the producer.
tile.kernel @one_stage(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c31 = arith.constant 31 : index
  %empty = tile.alloc {offset = 0 : i64} : memref<1xi64, #s>
  %a = tile.alloc {offset = 1024 : i64} : memref<4096xbf16, #s>
  %acc = tile.alloc : memref<64xf32, #l>
  %tid = tilenv.thread_id
  // expected-error @+1 {{overlap_mma: this loop cannot keep its wgmmas running into the next iteration: a stage released an iteration late needs a ring of at least 2 stages}}
  scf.for %k = %c0 to %n step %c1 {
    %aAt = tilenv.smem_address %a : memref<4096xbf16, #s>
    %desc = tilenv.wgmma_desc %aAt lbo = 16 sbo = 1024 swizzle = 128
    tilenv.wgmma_fence
    tilenv.wgmma %acc[%c0], %desc, %desc n = 128 bf16 : memref<64xf32, #l>
    tilenv.wgmma_commit
    %lane = arith.andi %tid, %c31 : index
    %first = arith.cmpi eq, %lane, %c0 : index
    tilenv.wgmma_wait 0 ready(%acc : memref<64xf32, #l>)
    scf.if %first {
      %at = tilenv.smem_address %empty : memref<1xi64, #s>
      tilenv.mbarrier_arrive %at
    }
  } {tessel.stage_ring = 1 : i64}
}

// -----

#l = #tile.space<local>
#s = #tile.space<shared>

// The loop reads the accumulator (a rescale, as attention does): a pending
// group would race with it.
tile.kernel @reads_accumulator(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c31 = arith.constant 31 : index
  %empty = tile.alloc {offset = 0 : i64} : memref<2xi64, #s>
  %a = tile.alloc {offset = 1024 : i64} : memref<4096xbf16, #s>
  %acc = tile.alloc : memref<64xf32, #l>
  %tid = tilenv.thread_id
  // expected-error @+1 {{its body does more than wgmmas from shared memory}}
  scf.for %k = %c0 to %n step %c1 {
    %x = memref.load %acc[%c0] : memref<64xf32, #l>
    %y = arith.addf %x, %x : f32
    memref.store %y, %acc[%c0] : memref<64xf32, #l>
    %aAt = tilenv.smem_address %a : memref<4096xbf16, #s>
    %desc = tilenv.wgmma_desc %aAt lbo = 16 sbo = 1024 swizzle = 128
    tilenv.wgmma_fence
    tilenv.wgmma %acc[%c0], %desc, %desc n = 128 bf16 : memref<64xf32, #l>
    tilenv.wgmma_commit
    %lane = arith.andi %tid, %c31 : index
    %first = arith.cmpi eq, %lane, %c0 : index
    tilenv.wgmma_wait 0 ready(%acc : memref<64xf32, #l>)
    scf.if %first {
      %at = tilenv.smem_address %empty : memref<2xi64, #s>
      tilenv.mbarrier_arrive %at
    }
  } {tessel.stage_ring = 2 : i64}
}

// -----

#l = #tile.space<local>
#s = #tile.space<shared>

// The accumulator enters the loop with values of its own (a gemm adding to
// C): no wgmma may overwrite it, and ptxas would serialize the loop.
tile.kernel @accumulates_into_input(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c31 = arith.constant 31 : index
  %c64 = arith.constant 64 : index
  %one = arith.constant 1.0 : f32
  %c = tile.alloc : memref<64xf32, #l>
  scf.for %i = %c0 to %c64 step %c1 {
    memref.store %one, %c[%i] : memref<64xf32, #l>
  } {tessel.unroll}
  %empty = tile.alloc {offset = 0 : i64} : memref<2xi64, #s>
  %a = tile.alloc {offset = 1024 : i64} : memref<4096xbf16, #s>
  %tid = tilenv.thread_id
  // expected-error @+1 {{its accumulator is not cleared right before it by one fill}}
  scf.for %k = %c0 to %n step %c1 {
    %aAt = tilenv.smem_address %a : memref<4096xbf16, #s>
    %desc = tilenv.wgmma_desc %aAt lbo = 16 sbo = 1024 swizzle = 128
    tilenv.wgmma_fence
    tilenv.wgmma %c[%c0], %desc, %desc n = 128 bf16 : memref<64xf32, #l>
    tilenv.wgmma_commit
    %lane = arith.andi %tid, %c31 : index
    %first = arith.cmpi eq, %lane, %c0 : index
    tilenv.wgmma_wait 0 ready(%c : memref<64xf32, #l>)
    scf.if %first {
      %at = tilenv.smem_address %empty : memref<2xi64, #s>
      tilenv.mbarrier_arrive %at
    }
  } {tessel.stage_ring = 2 : i64}
}
