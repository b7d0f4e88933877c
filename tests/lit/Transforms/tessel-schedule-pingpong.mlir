// RUN: tessel-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(tile.kernel(tessel-schedule-pingpong))' | FileCheck %s

#l = #tile.space<local>
#s = #tile.space<shared>

// Each gemm of the marked loop is issued in the warpgroup's turn: wait on
// its own barrier (14 for warpgroup 0, 15 for 1) before the fence, arrive
// on the other's once committed. Warpgroup 1 lets 0 start; 0 takes 1's last
// arrival after the loop. The mark is gone.
// CHECK-LABEL: tile.kernel @turns
// CHECK: %[[TID:.*]] = tilenv.thread_id
// CHECK: %[[WG:.*]] = arith.divui %[[TID]], %c128
// CHECK: %[[FIRST:.*]] = arith.cmpi eq, %[[WG]], %c0
// CHECK: %[[SECOND:.*]] = arith.xori %[[FIRST]], %true
// CHECK: scf.if %[[SECOND]] {
// CHECK-NEXT: tilenv.named_barrier 14, 256 arrive
// CHECK: scf.for
// CHECK-NOT: tessel.pingpong
// CHECK: scf.if %[[FIRST]] {
// CHECK-NEXT: tilenv.named_barrier 14, 256{{$}}
// CHECK-NEXT: } else {
// CHECK-NEXT: tilenv.named_barrier 15, 256{{$}}
// CHECK: tilenv.wgmma_fence
// CHECK: tilenv.wgmma_commit
// CHECK-NEXT: scf.if %[[FIRST]] {
// CHECK-NEXT: tilenv.named_barrier 15, 256 arrive
// CHECK-NEXT: } else {
// CHECK-NEXT: tilenv.named_barrier 14, 256 arrive
// CHECK: tilenv.wgmma_wait 0
// CHECK: tilenv.named_barrier 14, 256{{$}}
// CHECK: tilenv.wgmma_fence
// CHECK: tilenv.wgmma_commit
// CHECK-NEXT: scf.if %[[FIRST]] {
// CHECK-NEXT: tilenv.named_barrier 15, 256 arrive
// CHECK: tilenv.mbarrier_arrive
// CHECK: }
// CHECK-NEXT: scf.if %[[FIRST]] {
// CHECK-NEXT: tilenv.named_barrier 14, 256{{$}}
tile.kernel @turns(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(384) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %a = tile.alloc {offset = 0 : i64} : memref<4096xbf16, #s>
  %bar = tile.alloc {offset = 8192 : i64} : memref<1xi64, #s>
  %acc = tile.alloc : memref<32xf32, #l>
  scf.for %i = %c0 to %n step %c1 {
    %pa = tilenv.smem_address %a : memref<4096xbf16, #s>
    %da = tilenv.wgmma_desc %pa lbo = 16 sbo = 1024 swizzle = 128
    tilenv.wgmma_fence
    tilenv.wgmma %acc[%c0], %da, %da n = 64 bf16 : memref<32xf32, #l>
    tilenv.wgmma_commit
    tilenv.wgmma_wait 0
    tilenv.wgmma_fence
    tilenv.wgmma %acc[%c0], %da, %da n = 64 bf16 : memref<32xf32, #l>
    tilenv.wgmma_commit
    tilenv.wgmma_wait 0
    %pbar = tilenv.smem_address %bar : memref<1xi64, #s>
    tilenv.mbarrier_arrive %pbar
  } {tessel.pingpong}
}

// -----

#l = #tile.space<local>
#s = #tile.space<shared>

// Gemms issued back to back (no wait between them) are one turn: the
// warpgroup issues both before letting the other go.
// CHECK-LABEL: tile.kernel @back_to_back
// CHECK: scf.for
// CHECK: tilenv.named_barrier 14, 256{{$}}
// CHECK: tilenv.wgmma_fence
// CHECK-NEXT: tilenv.wgmma
// CHECK-NEXT: tilenv.wgmma_commit
// CHECK-NEXT: tilenv.wgmma_fence
// CHECK-NEXT: tilenv.wgmma
// CHECK-NEXT: tilenv.wgmma_commit
// CHECK-NEXT: scf.if
// CHECK-NEXT: tilenv.named_barrier 15, 256 arrive
// CHECK: tilenv.wgmma_wait 1
// CHECK-NOT: tilenv.named_barrier
// CHECK: tilenv.wgmma_wait 0
// CHECK-NEXT: }
tile.kernel @back_to_back(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(384) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %a = tile.alloc {offset = 0 : i64} : memref<4096xbf16, #s>
  %acc0 = tile.alloc : memref<32xf32, #l>
  %acc1 = tile.alloc : memref<32xf32, #l>
  scf.for %i = %c0 to %n step %c1 {
    %pa = tilenv.smem_address %a : memref<4096xbf16, #s>
    %da = tilenv.wgmma_desc %pa lbo = 16 sbo = 1024 swizzle = 128
    tilenv.wgmma_fence
    tilenv.wgmma %acc0[%c0], %da, %da n = 64 bf16 : memref<32xf32, #l>
    tilenv.wgmma_commit
    tilenv.wgmma_fence
    tilenv.wgmma %acc1[%c0], %da, %da n = 64 bf16 : memref<32xf32, #l>
    tilenv.wgmma_commit
    tilenv.wgmma_wait 1
    %x = memref.load %acc0[%c0] : memref<32xf32, #l>
    tilenv.wgmma_wait 0
  } {tessel.pingpong}
}

// -----

#l = #tile.space<local>
#s = #tile.space<shared>

// Warpgroups that meet at a barrier inside the loop cannot take turns.
tile.kernel @synchronized(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(384) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %a = tile.alloc {offset = 0 : i64} : memref<4096xbf16, #s>
  %acc = tile.alloc : memref<32xf32, #l>
  // expected-error @+1 {{cannot schedule this loop's warpgroups in ping-pong turns: they synchronize inside it}}
  scf.for %i = %c0 to %n step %c1 {
    %pa = tilenv.smem_address %a : memref<4096xbf16, #s>
    %da = tilenv.wgmma_desc %pa lbo = 16 sbo = 1024 swizzle = 128
    tilenv.wgmma_fence
    tilenv.wgmma %acc[%c0], %da, %da n = 64 bf16 : memref<32xf32, #l>
    tilenv.wgmma_commit
    tilenv.wgmma_wait 0
    tilenv.named_barrier 2, 256
  } {tessel.pingpong}
}

// -----

// A marked loop without gemms has nothing to take turns at.
tile.kernel @no_gemm(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(384) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{cannot schedule this loop's warpgroups in ping-pong turns: it has no wgmma gemm}}
  scf.for %i = %c0 to %n step %c1 {
  } {tessel.pingpong}
}

// -----

#l = #tile.space<local>
#s = #tile.space<shared>

// Gemms in the branches of an scf.if whose condition every thread of the
// block computes alike (from the loop counter and a kernel argument): each
// branch takes its own turns, and both warpgroups take the same branch.
// The gemm before the scf.if is a turn of its own.
// CHECK-LABEL: tile.kernel @uniform_branch
// CHECK: scf.for %[[I:.*]] = %c0 to %[[N:[^ ]*]] step %c1 {
// CHECK: tilenv.named_barrier 14, 256{{$}}
// CHECK: tilenv.wgmma_fence
// CHECK: tilenv.wgmma_commit
// CHECK-NEXT: scf.if
// CHECK-NEXT: tilenv.named_barrier 15, 256 arrive
// CHECK: %[[MORE:.*]] = arith.cmpi ult, %[[I]], %[[N]]
// CHECK-NEXT: scf.if %[[MORE]] {
// CHECK-NEXT: scf.if
// CHECK-NEXT: tilenv.named_barrier 14, 256{{$}}
// CHECK: tilenv.wgmma_fence
// CHECK-NEXT: tilenv.wgmma %[[ACC1:[a-z0-9_]+]]
// CHECK-NEXT: tilenv.wgmma_commit
// CHECK-NEXT: tilenv.wgmma_fence
// CHECK-NEXT: tilenv.wgmma %[[ACC0:[a-z0-9_]+]]
// CHECK-NEXT: tilenv.wgmma_commit
// CHECK-NEXT: scf.if
// CHECK-NEXT: tilenv.named_barrier 15, 256 arrive
// CHECK: tilenv.wgmma_wait 0
// CHECK-NEXT: } else {
// CHECK-NEXT: scf.if
// CHECK-NEXT: tilenv.named_barrier 14, 256{{$}}
// CHECK: tilenv.wgmma_fence
// CHECK-NEXT: tilenv.wgmma %[[ACC0]]
// CHECK-NEXT: tilenv.wgmma_commit
// CHECK-NEXT: scf.if
// CHECK-NEXT: tilenv.named_barrier 15, 256 arrive
// CHECK: tilenv.wgmma_wait 0
// CHECK-NEXT: }
tile.kernel @uniform_branch(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(384) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %a = tile.alloc {offset = 0 : i64} : memref<4096xbf16, #s>
  %acc0 = tile.alloc : memref<32xf32, #l>
  %acc1 = tile.alloc : memref<32xf32, #l>
  scf.for %i = %c0 to %n step %c1 {
    %pa = tilenv.smem_address %a : memref<4096xbf16, #s>
    %da = tilenv.wgmma_desc %pa lbo = 16 sbo = 1024 swizzle = 128
    tilenv.wgmma_fence
    tilenv.wgmma %acc0[%c0], %da, %da n = 64 bf16 : memref<32xf32, #l>
    tilenv.wgmma_commit
    tilenv.wgmma_wait 0
    %next = arith.addi %i, %c1 : index
    %more = arith.cmpi ult, %i, %n : index
    scf.if %more {
      tilenv.wgmma_fence
      tilenv.wgmma %acc1[%c0], %da, %da n = 64 bf16 : memref<32xf32, #l>
      tilenv.wgmma_commit
      tilenv.wgmma_fence
      tilenv.wgmma %acc0[%c0], %da, %da n = 64 bf16 : memref<32xf32, #l>
      tilenv.wgmma_commit
      tilenv.wgmma_wait 0
    } else {
      tilenv.wgmma_fence
      tilenv.wgmma %acc0[%c0], %da, %da n = 64 bf16 : memref<32xf32, #l>
      tilenv.wgmma_commit
      tilenv.wgmma_wait 0
    }
  } {tessel.pingpong}
}

// -----

#l = #tile.space<local>
#s = #tile.space<shared>

// A condition that depends on the thread could send the two warpgroups down
// different branches, whose turns would then not meet.
tile.kernel @thread_branch(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(384) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  %a = tile.alloc {offset = 0 : i64} : memref<4096xbf16, #s>
  %acc = tile.alloc : memref<32xf32, #l>
  scf.for %i = %c0 to %n step %c1 {
    %pa = tilenv.smem_address %a : memref<4096xbf16, #s>
    %da = tilenv.wgmma_desc %pa lbo = 16 sbo = 1024 swizzle = 128
    %tid = tilenv.thread_id
    %low = arith.cmpi ult, %tid, %c128 : index
    // expected-error @+1 {{cannot schedule this loop's warpgroups in ping-pong turns: its gemms are under a condition that may differ between its threads}}
    scf.if %low {
      tilenv.wgmma_fence
      tilenv.wgmma %acc[%c0], %da, %da n = 64 bf16 : memref<32xf32, #l>
      tilenv.wgmma_commit
      tilenv.wgmma_wait 0
    }
  } {tessel.pingpong}
}

// -----

#l = #tile.space<local>
#s = #tile.space<shared>

// Shared memory read for the condition may be written by other threads
// between the two warpgroups' reads: they could take different branches.
// (A global tensor the kernel only reads, a packed batch's cu_seqlens,
// is fine.)
tile.kernel @shared_branch(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(384) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %a = tile.alloc {offset = 0 : i64} : memref<4096xbf16, #s>
  %flag = tile.alloc {offset = 8192 : i64} : memref<1xi32, #s>
  %acc = tile.alloc : memref<32xf32, #l>
  scf.for %i = %c0 to %n step %c1 {
    %pa = tilenv.smem_address %a : memref<4096xbf16, #s>
    %da = tilenv.wgmma_desc %pa lbo = 16 sbo = 1024 swizzle = 128
    %f = memref.load %flag[%c0] : memref<1xi32, #s>
    %zero = arith.constant 0 : i32
    %set = arith.cmpi ne, %f, %zero : i32
    // expected-error @+1 {{its gemms are under a condition that may differ between its threads}}
    scf.if %set {
      tilenv.wgmma_fence
      tilenv.wgmma %acc[%c0], %da, %da n = 64 bf16 : memref<32xf32, #l>
      tilenv.wgmma_commit
      tilenv.wgmma_wait 0
    }
  } {tessel.pingpong}
}

// -----

#l = #tile.space<local>
#g = #tile.space<global>
#s = #tile.space<shared>

// A bound read from a global tensor the kernel only reads is the same for
// every thread.
// CHECK-LABEL: tile.kernel @read_only_bound
// CHECK: scf.for
// CHECK: %[[MORE:.*]] = arith.cmpi ult
// CHECK-NEXT: scf.if %[[MORE]] {
// CHECK-NEXT: scf.if
// CHECK-NEXT: tilenv.named_barrier 14, 256{{$}}
tile.kernel @read_only_bound(%lens: memref<?xi32, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(384) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %a = tile.alloc {offset = 0 : i64} : memref<4096xbf16, #s>
  %acc = tile.alloc : memref<32xf32, #l>
  scf.for %i = %c0 to %n step %c1 {
    %pa = tilenv.smem_address %a : memref<4096xbf16, #s>
    %da = tilenv.wgmma_desc %pa lbo = 16 sbo = 1024 swizzle = 128
    %len = memref.load %lens[%bx] : memref<?xi32, #g>
    %end = arith.index_cast %len : i32 to index
    %more = arith.cmpi ult, %i, %end : index
    scf.if %more {
      tilenv.wgmma_fence
      tilenv.wgmma %acc[%c0], %da, %da n = 64 bf16 : memref<32xf32, #l>
      tilenv.wgmma_commit
      tilenv.wgmma_wait 0
    }
  } {tessel.pingpong}
}
