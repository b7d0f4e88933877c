// RUN: tessel-opt %s -split-input-file -pass-pipeline='builtin.module(tile.kernel(tessel-insert-barriers))' | FileCheck %s

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// A shared tile written by a copy and read by the gemm needs a barrier
// between them; the loop's next copy overwrites what this iteration's gemm
// reads, so the body also starts with one. The accumulator is a fragment,
// private to each thread: storing it needs no barrier.
// CHECK-LABEL: tile.kernel @copy_then_gemm
// CHECK: tile.pipelined
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.copy
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.gemm
// CHECK-NEXT: }
// CHECK-NEXT: tile.copy %{{.*}}, %arg1
tile.kernel @copy_then_gemm(%a: memref<16x16xf16, #g>, %c: memref<16x16xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  %as = tile.alloc : memref<16x16xf16, #s>
  %acc = tile.alloc : memref<16x16xf32, #f>
  tile.pipelined %k = %c0 to %c4 step %c1 stages(2) {
    tile.copy %a, %as : memref<16x16xf16, #g>, memref<16x16xf16, #s>
    tile.gemm %as, %as, %acc : memref<16x16xf16, #s>, memref<16x16xf16, #s>, memref<16x16xf32, #f>
  }
  tile.copy %acc, %c : memref<16x16xf32, #f>, memref<16x16xf32, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// Two readers of the same buffer need no barrier between them.
// CHECK-LABEL: tile.kernel @two_readers
// CHECK: tile.copy %arg0
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.copy %{{.*}}, %arg1
// CHECK-NEXT: tile.copy %{{.*}}, %arg2
// CHECK-NOT: tile.barrier
tile.kernel @two_readers(%a: memref<64xf32, #g>, %b: memref<64xf32, #g>, %c: memref<64xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(64) {
  %s = tile.alloc : memref<64xf32, #s>
  tile.copy %a, %s : memref<64xf32, #g>, memref<64xf32, #s>
  tile.copy %s, %b : memref<64xf32, #s>, memref<64xf32, #g>
  tile.copy %s, %c : memref<64xf32, #s>, memref<64xf32, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// Fragments live in registers: a reduction that writes one and element code
// that reads it on the same threads need no barrier (the reduction's own
// exchange across warps synchronizes inside its lowering).
// CHECK-LABEL: tile.kernel @reduce_then_parallel
// CHECK: tile.reduce
// CHECK-NEXT: tile.parallel
// CHECK-NOT: tile.barrier
// CHECK: }
tile.kernel @reduce_then_parallel() grid(%bx) = affine_map<() -> (1)> threads(128) {
  %t = tile.alloc : memref<4x32xf32, #f>
  %m = tile.alloc : memref<4xf32, #f>
  tile.reduce max %t -> %m dim = 1 clear : memref<4x32xf32, #f> -> memref<4xf32, #f>
  tile.parallel (%i, %j) in [4, 32] {
    %x = memref.load %t[%i, %j] : memref<4x32xf32, #f>
    %y = memref.load %m[%i] : memref<4xf32, #f>
    %d = arith.subf %x, %y : f32
    memref.store %d, %t[%i, %j] : memref<4x32xf32, #f>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// Threads diverge at a role: a conflict with code before it is ordered by a
// block barrier before the role (where every thread still is); a conflict
// inside it by a named barrier over the role's threads only, since the
// other role never reaches it. Roles are numbered from 1 in program order.
// CHECK-LABEL: tile.kernel @roles
// CHECK: tile.fill
// CHECK-NEXT: tile.barrier
// CHECK-NOT: named
// CHECK-NEXT: tile.role threads(0, 128)
// CHECK: tile.role threads(128, 128)
// CHECK-NEXT: tile.copy %arg0
// CHECK-NEXT: tile.barrier named(2, 128)
// CHECK-NEXT: tile.copy %{{.*}}, %arg1
tile.kernel @roles(%a: memref<64xf32, #g>, %b: memref<64xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(256) {
  %c0 = arith.constant 0.0 : f32
  %s = tile.alloc : memref<64xf32, #s>
  %t = tile.alloc : memref<64xf32, #s>
  tile.fill %t, %c0 : memref<64xf32, #s>, f32
  tile.role threads(0, 128) {
    tile.copy %t, %b : memref<64xf32, #s>, memref<64xf32, #g>
  }
  tile.role threads(128, 128) {
    tile.copy %a, %s : memref<64xf32, #g>, memref<64xf32, #s>
    tile.copy %s, %b : memref<64xf32, #s>, memref<64xf32, #g>
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// wgmma reads shared memory through the async proxy: the threads' generic
// write is fenced (fence.proxy.async) before the barrier that publishes it;
// so does a TMA store of a whole unpadded buffer. mma.sync reads through the
// generic proxy and needs no fence.
// CHECK-LABEL: tile.kernel @proxy_fence
// CHECK: tile.fill %[[AS:.*]], %{{.*}}
// CHECK-NEXT: tile.fence_proxy_async
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.gemm %[[AS]]
// CHECK: tile.fill %[[BS:.*]], %{{.*}}
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.gemm %[[BS]]
// CHECK: tile.fill %[[OS:.*]], %{{.*}}
// CHECK-NEXT: tile.fence_proxy_async
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.copy %[[OS]], %arg0
tile.kernel @proxy_fence(%c: memref<64x64xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %zero = arith.constant 0.0 : f16
  %as = tile.alloc : memref<64x64xf16, #s>
  %bs = tile.alloc : memref<64x64xf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #f>
  tile.fill %as, %zero : memref<64x64xf16, #s>, f16
  tile.gemm %as, %as, %acc {instruction = #tile.instr<wgmma>, warps = array<i64: 1, 1>} : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
  tile.fill %bs, %zero : memref<64x64xf16, #s>, f16
  tile.gemm %bs, %bs, %acc {instruction = #tile.instr<mma_sync>, warps = array<i64: 2, 2>} : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
  %out = tile.alloc {layout = #tile.shared<[64, 64], elem = 4, swizzle = 0, pad = 0>} : memref<64x64xf32, #s>
  %fzero = arith.constant 0.0 : f32
  tile.fill %out, %fzero : memref<64x64xf32, #s>, f32
  tile.copy %out, %c : memref<64x64xf32, #s>, memref<64x64xf32, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// A reduction's threads write shared memory through the generic proxy as
// element code does: before a TMA store of its result they fence too
// (without it the TMA store could read stale sums).
// CHECK-LABEL: tile.kernel @reduce_then_tma_store
// CHECK: tile.reduce sum
// CHECK-NEXT: tile.fence_proxy_async
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.copy
tile.kernel @reduce_then_tma_store(%out: memref<64xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %x = tile.alloc : memref<64x64xf32, #s>
  %sums = tile.alloc {layout = #tile.shared<[64], elem = 4, swizzle = 0, pad = 0>} : memref<64xf32, #s>
  tile.reduce sum %x -> %sums dim = 1 clear : memref<64x64xf32, #s> -> memref<64xf32, #s>
  tile.copy %sums, %out : memref<64xf32, #s>, memref<64xf32, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// mbarrier inits (thread 0 runs them all, so they need nothing between
// them) are followed by fence.mbarrier_init and ordered before the first
// use by a barrier. A multi-buffered pipeline buffer is ordered by its
// mbarriers: no barrier goes between the wait and the gemm that reads the
// TMA'd stage, nor in front of the next TMA copy.
// CHECK-LABEL: tile.kernel @mbarriers
// CHECK: tile.mbarrier_init
// CHECK-NEXT: arith.constant
// CHECK-NEXT: tile.mbarrier_init
// CHECK-NEXT: tile.fence_mbarrier_init
// CHECK: tile.barrier
// CHECK-NEXT: scf.for
// CHECK-NOT: tile.barrier
// CHECK: tile.mbarrier_wait
// CHECK-NOT: tile.barrier
// CHECK: tile.gemm
// CHECK-NOT: tile.barrier
// CHECK: }
tile.kernel @mbarriers(%a: memref<?x64xf16, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %bars = tile.alloc : memref<2xi64, #s>
  tile.mbarrier_init %bars[%c0] arrivals(1) : memref<2xi64, #s>
  %c1 = arith.constant 1 : index
  tile.mbarrier_init %bars[%c1] arrivals(1) : memref<2xi64, #s>
  %as = tile.alloc {stages = 2 : i64} : memref<64x64xf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #f>
  scf.for %k = %c0 to %n step %c1 {
    %st = arith.remui %k, %c1 : index
    %view = tile.stage %as[%st] : memref<64x64xf16, #s>
    %r = tile.region %a[%k, %c0] [64, 64] : memref<?x64xf16, #g> -> memref<64x64xf16, strided<[64, 1], offset: ?>, #g>
    tile.mbarrier_expect_tx %bars[%st] bytes(8192) : memref<2xi64, #s>
    tile.copy_async %r, %view arrive %bars[%st] : memref<64x64xf16, strided<[64, 1], offset: ?>, #g>, memref<64x64xf16, #s>, memref<2xi64, #s>
    tile.mbarrier_wait %bars[%st] parity %c0 : memref<2xi64, #s>
    tile.gemm %view, %view, %acc {instruction = #tile.instr<wgmma>, warps = array<i64: 1, 1>} : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
  }
}

// -----

// Tensor memory is shared by the block like shared memory: the fill's
// stores (every warp) come before the MMA that accumulates on them, with a
// barrier. The MMA completes in place (every thread waits for its commit),
// so the warps load its result without one. A generic-proxy write of a
// tcgen05 operand is fenced for the async proxy.
// CHECK-LABEL: tile.kernel @tensor_memory
// CHECK: tile.copy
// CHECK-NEXT: tile.fence_proxy_async
// CHECK: tile.fill
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.gemm
// CHECK-NEXT: tile.copy
tile.kernel @tensor_memory(%g: memref<128x16xf16>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %a = tile.alloc : memref<128x16xf16, #tile.space<shared>>
  %b = tile.alloc : memref<16x64xf16, #tile.space<shared>>
  %acc = tile.alloc : memref<128x64xf32, #tile.space<tmem>>
  %out = tile.alloc : memref<128x64xf32, #tile.space<fragment>>
  tile.copy %g, %a : memref<128x16xf16>, memref<128x16xf16, #tile.space<shared>>
  %zero = arith.constant 0.0 : f32
  tile.fill %acc, %zero : memref<128x64xf32, #tile.space<tmem>>, f32
  tile.gemm %a, %b, %acc {instruction = #tile.instr<tcgen05>, warps = array<i64: 1, 1>} : memref<128x16xf16, #tile.space<shared>>, memref<16x64xf16, #tile.space<shared>>, memref<128x64xf32, #tile.space<tmem>>
  tile.copy %acc, %out : memref<128x64xf32, #tile.space<tmem>>, memref<128x64xf32, #tile.space<fragment>>
}

// -----

// The attention forward's correction step: each thread loads its row of a
// 64-column chunk of O (its warpgroup's 32 columns), scales it and stores it
// back, chunk after chunk. No thread touches another's cells, so none of
// that needs a barrier; S's MMA completes in place before it. Only P x V,
// issued by one thread over every row, waits for all the stores.
// CHECK-LABEL: tile.kernel @correction
// CHECK: scf.for
// CHECK-NEXT: tile.gemm
// CHECK-NOT: tile.barrier
// CHECK: tile.copy %[[LO:[0-9]+]], %[[PART:[0-9]+]] {tmem_group_columns
// CHECK-NEXT: tile.copy %[[PART]], %[[LO]]
// CHECK-NOT: tile.barrier
// CHECK: tile.copy %[[HI:[0-9]+]], %[[PART]] {tmem_group_columns
// CHECK-NEXT: tile.copy %[[PART]], %[[HI]]
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.gemm
// CHECK-NEXT: {{^ *}}}{{$}}
#s = #tile.space<shared>
#f = #tile.space<fragment>
tile.kernel @correction(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(256) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %q = tile.alloc : memref<128x64xbf16, #s>
  %k = tile.alloc : memref<128x64xbf16, #s>
  %v = tile.alloc : memref<128x128xbf16, #s>
  %p = tile.alloc : memref<128x128xbf16, #s>
  %scores = tile.alloc : memref<128x128xf32, #tile.space<tmem>>
  %o = tile.alloc : memref<128x128xf32, #tile.space<tmem>>
  %part = tile.alloc : memref<128x64xf32, #f>
  scf.for %i = %c0 to %n step %c1 {
    tile.gemm %q, %k, %scores {instruction = #tile.instr<tcgen05>, warps = array<i64: 1, 1>, transpose_b, clear_accum} : memref<128x64xbf16, #s>, memref<128x64xbf16, #s>, memref<128x128xf32, #tile.space<tmem>>
    %lo = tile.region %o[%c0, %c0] [128, 64] : memref<128x128xf32, #tile.space<tmem>> -> memref<128x64xf32, strided<[128, 1], offset: ?>, #tile.space<tmem>>
    tile.copy %lo, %part {tmem_group_columns = 32 : i64} : memref<128x64xf32, strided<[128, 1], offset: ?>, #tile.space<tmem>>, memref<128x64xf32, #f>
    tile.copy %part, %lo {tmem_group_columns = 32 : i64} : memref<128x64xf32, #f>, memref<128x64xf32, strided<[128, 1], offset: ?>, #tile.space<tmem>>
    %hi = tile.region %o[%c0, %c64] [128, 64] : memref<128x128xf32, #tile.space<tmem>> -> memref<128x64xf32, strided<[128, 1], offset: ?>, #tile.space<tmem>>
    tile.copy %hi, %part {tmem_group_columns = 32 : i64} : memref<128x64xf32, strided<[128, 1], offset: ?>, #tile.space<tmem>>, memref<128x64xf32, #f>
    tile.copy %part, %hi {tmem_group_columns = 32 : i64} : memref<128x64xf32, #f>, memref<128x64xf32, strided<[128, 1], offset: ?>, #tile.space<tmem>>
    tile.gemm %p, %v, %o {instruction = #tile.instr<tcgen05>, warps = array<i64: 1, 1>} : memref<128x128xbf16, #s>, memref<128x128xbf16, #s>, memref<128x128xf32, #tile.space<tmem>>
  }
}

// -----

// P over S (the ts form): two warpgroups read S's 128 columns (64 each) and
// write P packed over the first 64 (32 each), so the second warpgroup's P
// lands on columns the first read: a barrier between them. A chunk that
// is not a constant column range is taken as the whole buffer.
// CHECK-LABEL: tile.kernel @p_over_s
// CHECK: tile.copy %{{[0-9]+}}, %{{[0-9]+}} {tmem_group_columns = 64
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.copy %{{[0-9]+}}, %{{[0-9]+}} {tmem_group_columns = 32
// CHECK-NEXT: tile.region
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.copy
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.copy
#f = #tile.space<fragment>
tile.kernel @p_over_s(%col: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(256) {
  %c0 = arith.constant 0 : index
  %s = tile.alloc : memref<128x128xf32, #tile.space<tmem>>
  %p = tile.tmem_alias %s : memref<128x128xf32, #tile.space<tmem>> -> memref<128x128xbf16, #tile.space<tmem>>
  %sf = tile.alloc : memref<128x128xf32, #f>
  %pf = tile.alloc : memref<128x128xbf16, #f>
  %part = tile.alloc : memref<128x64xf32, #f>
  tile.copy %s, %sf {tmem_group_columns = 64 : i64} : memref<128x128xf32, #tile.space<tmem>>, memref<128x128xf32, #f>
  tile.copy %pf, %p {tmem_group_columns = 32 : i64} : memref<128x128xbf16, #f>, memref<128x128xbf16, #tile.space<tmem>>
  %any = tile.region %s[%c0, %col] [128, 64] : memref<128x128xf32, #tile.space<tmem>> -> memref<128x64xf32, strided<[128, 1], offset: ?>, #tile.space<tmem>>
  tile.copy %part, %any {tmem_group_columns = 32 : i64} : memref<128x64xf32, #f>, memref<128x64xf32, strided<[128, 1], offset: ?>, #tile.space<tmem>>
  tile.copy %any, %part {tmem_group_columns = 32 : i64} : memref<128x64xf32, strided<[128, 1], offset: ?>, #tile.space<tmem>>, memref<128x64xf32, #f>
}

// -----

// Sibling roles run at the same time on their own threads: a producer role
// writing a shared buffer that a consumer role reads is ordered by their
// mbarriers, never by a block barrier between the roles (the producer would
// wait there for a consumer that waits for it). Code after the roles, which
// every thread runs, is ordered after both.
// CHECK-LABEL: tile.kernel @sibling_roles
// CHECK: tile.role threads(0, 128)
// CHECK-NOT: tile.barrier{{$}}
// CHECK: tile.role threads(128, 128)
// CHECK: }
// CHECK-NEXT: tile.barrier{{$}}
// CHECK-NEXT: tile.copy
#g = #tile.space<global>
#s = #tile.space<shared>
tile.kernel @sibling_roles(%a: memref<64xf32, #g>, %b: memref<64xf32, #g>) grid(%bx) = affine_map<() -> (1)> threads(256) {
  %c0 = arith.constant 0 : index
  %s = tile.alloc : memref<64xf32, #s>
  %full = tile.alloc : memref<1xi64, #s>
  tile.mbarrier_init %full[%c0] arrivals(4) : memref<1xi64, #s>
  tile.role threads(0, 128) {
    tile.copy %a, %s : memref<64xf32, #g>, memref<64xf32, #s>
    tile.mbarrier_arrive %full[%c0] each_thread : memref<1xi64, #s>
  }
  tile.role threads(128, 128) {
    tile.mbarrier_wait %full[%c0] parity %c0 : memref<1xi64, #s>
    tile.copy %s, %b : memref<64xf32, #s>, memref<64xf32, #g>
  }
  tile.copy %a, %s : memref<64xf32, #g>, memref<64xf32, #s>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>
#f = #tile.space<fragment>

// Element code that masks a loaded pipeline stage before a gemm reads it:
// the stage's loads are the pipeline's (full mbarrier), but the masking
// stores and the gemm's reads are threads of one role: a named barrier
// between them, and a proxy fence for wgmma. None at the top of the body:
// the next iteration works on another stage.
// CHECK-LABEL: tile.kernel @masked_stage
// CHECK: tile.role threads(0, 128)
// CHECK: scf.for
// CHECK-NOT: tile.barrier
// CHECK: tile.mbarrier_wait
// CHECK-NEXT: tile.stage
// CHECK-NEXT: tile.parallel
// CHECK: tile.fence_proxy_async
// CHECK-NEXT: tile.barrier named(1, 128)
// CHECK-NEXT: tile.gemm
// CHECK-NEXT: tile.mbarrier_arrive
tile.kernel @masked_stage(%n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(256) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %zero = arith.constant 0.0 : f16
  %empty = tile.alloc {name = "empty"} : memref<3xi64, #s>
  %full = tile.alloc {name = "full"} : memref<3xi64, #s>
  %as = tile.alloc : memref<64x64xf16, #s>
  %vs = tile.alloc {stages = 3 : i64} : memref<64x64xf16, #s>
  %acc = tile.alloc : memref<64x64xf32, #f>
  tile.role threads(0, 128) {
    scf.for %k = %c0 to %n step %c1 {
      %st = arith.remui %k, %c3 : index
      tile.mbarrier_wait %full[%st] parity %c0 : memref<3xi64, #s>
      %v = tile.stage %vs[%st] : memref<64x64xf16, #s>
      tile.parallel (%j, %e) in [64, 64] {
        %in = arith.cmpi slt, %j, %n : index
        %x = memref.load %v[%j, %e] : memref<64x64xf16, #s>
        %y = arith.select %in, %x, %zero : f16
        memref.store %y, %v[%j, %e] : memref<64x64xf16, #s>
      }
      tile.gemm %as, %v, %acc {instruction = #tile.instr<wgmma>, warps = array<i64: 1, 1>} : memref<64x64xf16, #s>, memref<64x64xf16, #s>, memref<64x64xf32, #f>
      tile.mbarrier_arrive %empty[%st] : memref<3xi64, #s>
    }
  }
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// Copies into disjoint constant windows of one tile need no barrier
// between them; the read of the whole tile does.
// CHECK-LABEL: tile.kernel @disjoint_windows
// CHECK: tile.copy %arg0
// CHECK-NEXT: tile.copy %arg1
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.copy %{{.*}}, %arg2
tile.kernel @disjoint_windows(%a: memref<64x32xf16, #g>, %b: memref<64x32xf16, #g>, %o: memref<64x64xf16, #g>) grid(%bx) = affine_map<() -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %s = tile.alloc : memref<64x64xf16, #s>
  %w0 = tile.region %s[%c0, %c0] [64, 32] : memref<64x64xf16, #s> -> memref<64x32xf16, strided<[64, 1]>, #s>
  %w1 = tile.region %s[%c0, %c32] [64, 32] : memref<64x64xf16, #s> -> memref<64x32xf16, strided<[64, 1], offset: 32>, #s>
  tile.copy %a, %w0 : memref<64x32xf16, #g>, memref<64x32xf16, strided<[64, 1]>, #s>
  tile.copy %b, %w1 : memref<64x32xf16, #g>, memref<64x32xf16, strided<[64, 1], offset: 32>, #s>
  tile.copy %s, %o : memref<64x64xf16, #s>, memref<64x64xf16, #g>
}

// -----

#g = #tile.space<global>
#s = #tile.space<shared>

// Atomic adds commute: a loop's adds into a shared histogram need no
// barrier between iterations, only one after the fill before them and one
// before the copy that reads the counts.
// CHECK-LABEL: tile.kernel @histogram
// CHECK: tile.fill
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: scf.for
// CHECK-NOT: tile.barrier
// CHECK: tile.atomic_add
// CHECK-NOT: tile.barrier
// CHECK: tile.region
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.copy
tile.kernel @histogram(%v: memref<?xi32, #g>, %out: memref<64xi32, #g>, %n: index) grid(%bx) = affine_map<()[s0] -> (1)> threads(128) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c63 = arith.constant 63 : i32
  %one = arith.constant 1 : i32
  %zero = arith.constant 0 : i32
  %h = tile.alloc : memref<64xi32, #s>
  tile.fill %h, %zero : memref<64xi32, #s>, i32
  scf.for %k = %c0 to %n step %c1 {
    %r = tile.region %v[%k] [128] : memref<?xi32, #g> -> memref<128xi32, strided<[1], offset: ?>, #g>
    tile.parallel (%i) in [128] {
      %x = memref.load %r[%i] : memref<128xi32, strided<[1], offset: ?>, #g>
      %b = arith.andi %x, %c63 : i32
      %bi = arith.index_cast %b : i32 to index
      tile.atomic_add %one, %h[%bi] order = relaxed : i32, memref<64xi32, #s>
    }
  }
  %o = tile.region %out[%c0] [64] : memref<64xi32, #g> -> memref<64xi32, strided<[1], offset: ?>, #g>
  tile.copy %h, %o : memref<64xi32, #s>, memref<64xi32, strided<[1], offset: ?>, #g>
}
