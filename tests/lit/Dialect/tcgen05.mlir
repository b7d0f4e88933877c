// RUN: tessel-opt %s | tessel-opt | FileCheck %s
// RUN: tessel-opt %s --mlir-print-op-generic | tessel-opt | FileCheck %s

// Tensor-memory buffers and the tcgen05 ops round-trip.
// CHECK-LABEL: tile.kernel @tcgen05
tile.kernel @tcgen05(%flag: i1) grid(%bx) = affine_map<() -> (1)> threads(128) {
  // CHECK: tile.alloc {name = "acc", offset = 0 : i64} : memref<128x256xf32, #tile.space<tmem>>
  %acc = tile.alloc {name = "acc", offset = 0 : i64} : memref<128x256xf32, #tile.space<tmem>>
  // CHECK: tile.alloc {unpacked} : memref<64x64xf16, #tile.space<tmem>>
  %half = tile.alloc {unpacked} : memref<64x64xf16, #tile.space<tmem>>
  %regs = tile.alloc : memref<64xf32, #tile.space<local>>
  %c0 = arith.constant 0 : index
  %slot = arith.constant 1024 : i32
  %taddr = arith.constant 0 : i32
  %a = arith.constant 4611756388245389312 : i64
  // CHECK: tilenv.tcgen05_alloc %{{.*}} columns = 256
  tilenv.tcgen05_alloc %slot columns = 256
  // CHECK: tilenv.tcgen05_fence_before
  tilenv.tcgen05_fence_before
  // CHECK: tilenv.tcgen05_fence_after
  tilenv.tcgen05_fence_after
  // CHECK: %[[ID:.*]] = tilenv.tcgen05_idesc m = 128 n = 256 bf16 -> f32
  %id = tilenv.tcgen05_idesc m = 128 n = 256 bf16 -> f32
  // CHECK: tilenv.tcgen05_idesc m = 64 n = 8 f16 -> f16 trans_a trans_b
  %id2 = tilenv.tcgen05_idesc m = 64 n = 8 f16 -> f16 trans_a trans_b
  // CHECK: %[[B:.*]] = tilenv.tcgen05_smem_desc %{{.*}} lbo = 16 sbo = 1024 swizzle = 128
  %b = tilenv.tcgen05_smem_desc %slot lbo = 16 sbo = 1024 swizzle = 128
  // CHECK: tilenv.tcgen05_mma %{{.*}}, %{{.*}}, %[[B]], %[[ID]] accumulate(%{{.*}}) : i64
  tilenv.tcgen05_mma %taddr, %a, %b, %id accumulate(%flag) : i64
  // The A operand in tensor memory (the "ts" form).
  // CHECK: tilenv.tcgen05_mma %{{.*}}, %{{.*}}, %[[B]], %[[ID]] accumulate(%{{.*}}) : i32
  tilenv.tcgen05_mma %taddr, %taddr, %b, %id accumulate(%flag) : i32
  // CHECK: tilenv.tcgen05_commit
  tilenv.tcgen05_commit %slot
  // CHECK: tilenv.tcgen05_cp %{{.*}} -> %{{.*}} s128x256b
  tilenv.tcgen05_cp %a -> %taddr s128x256b
  // CHECK: tilenv.tcgen05_ld %{{.*}} -> %{{.*}}[%{{.*}}] s32x32b x 64 :
  tilenv.tcgen05_ld %taddr -> %regs[%c0] s32x32b x 64 : memref<64xf32, #tile.space<local>>
  // CHECK: tilenv.tcgen05_ld %{{.*}} -> %{{.*}}[%{{.*}}] s16x32bx2 x 2 pack offset 16 :
  tilenv.tcgen05_ld %taddr -> %regs[%c0] s16x32bx2 x 2 pack offset 16 : memref<64xf32, #tile.space<local>>
  // CHECK: tilenv.tcgen05_wait_ld
  tilenv.tcgen05_wait_ld
  // CHECK: tilenv.tcgen05_st %{{.*}}[%{{.*}}] -> %{{.*}} s16x256b x 4 unpack :
  tilenv.tcgen05_st %regs[%c0] -> %taddr s16x256b x 4 unpack : memref<64xf32, #tile.space<local>>
  // CHECK: tilenv.tcgen05_wait_st
  tilenv.tcgen05_wait_st
  // CHECK: tilenv.tcgen05_dealloc %{{.*}} columns = 256
  tilenv.tcgen05_dealloc %taddr columns = 256
  // CHECK: tilenv.tcgen05_relinquish
  tilenv.tcgen05_relinquish
}
