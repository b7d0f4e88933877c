// The tcgen05 ops print as one inline-PTX statement each (ptxas accepts
// them for sm_100a: tests/unit/Tcgen05Tests.cpp compiles this kind of
// kernel through NVRTC).
// RUN: tessel-translate --emit-cuda %s | FileCheck %s

// CHECK: asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;"
// CHECK-NEXT: :
// CHECK-NEXT: : "r"([[SLOT:v[0-9]+]]), "r"(128) : "memory");
// CHECK: asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
// CHECK: asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
// bf16 x bf16 -> f32, M 128, N 256, both K-major: the PTX ISA's example value.
// CHECK: const int [[ID:v[0-9]+]] = int(0x08400490u);
// CHECK: const int {{v[0-9]+}} = int(0x08210490u);
// 128-byte swizzle, SBO 1024: version 1 at bit 46, swizzle 2 at bit 61.
// CHECK: tessel::i64 [[A:v[0-9]+]] = (long long)((((unsigned long long)(unsigned){{v[0-9]+}} & 0x3FFFFull) >> 4) | 0x4000404000010000ull);
// CHECK: tessel::i64 [[B:v[0-9]+]] = (long long)(
// CHECK: tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;
// CHECK-NEXT: :
// CHECK-NEXT: : "r"({{.*}}), "l"([[A]]), "l"([[B]]), "r"([[ID]]), "r"(int({{.*}})) : "memory");
// CHECK: tcgen05.mma.cta_group::1.kind::f16 [%0], [%1], %2, %3, p;
// CHECK-NEXT: :
// CHECK-NEXT: : "r"({{.*}}), "r"({{.*}}), "l"([[B]])
// CHECK: "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
// CHECK: "tcgen05.cp.cta_group::1.128x256b [%0], %1;"
// CHECK: "tcgen05.ld.sync.aligned.32x32b.x4.b32 {%0, %1, %2, %3}, [%4];"
// CHECK-NEXT: : "=f"([[R:v[0-9]+]][{{v[0-9]+}} + 0]), "=f"([[R]][{{v[0-9]+}} + 1]), "=f"([[R]][{{v[0-9]+}} + 2]), "=f"([[R]][{{v[0-9]+}} + 3])
// CHECK: "tcgen05.ld.sync.aligned.16x32bx2.x2.pack::16b.b32 {%0, %1}, [%2], 16;"
// CHECK: asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
// CHECK: "tcgen05.st.sync.aligned.16x256b.x1.unpack::16b.b32 [%0], {%1, %2, %3, %4};"
// CHECK-NEXT: :
// CHECK-NEXT: : "r"({{.*}}), "f"([[R]][{{v[0-9]+}} + 0])
// CHECK: asm volatile("tcgen05.wait::st.sync.aligned;" ::: "memory");
// CHECK: "tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;"
// CHECK: asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
tile.kernel @tcgen05(%out: memref<?xf32, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(128) attributes {smem_bytes = 0 : i64} {
  %regs = tile.alloc : memref<8xf32, #tile.space<local>>
  %c0 = arith.constant 0 : index
  %slot = arith.constant 0 : i32
  %taddr = arith.constant 0 : i32
  %true = arith.constant true
  tilenv.tcgen05_alloc %slot columns = 128
  tilenv.tcgen05_fence_before
  tilenv.tcgen05_fence_after
  %id = tilenv.tcgen05_idesc m = 128 n = 256 bf16 -> f32
  %id2 = tilenv.tcgen05_idesc m = 128 n = 128 bf16 -> f32 trans_b
  %a = tilenv.tcgen05_smem_desc %slot lbo = 16 sbo = 1024 swizzle = 128
  %b = tilenv.tcgen05_smem_desc %slot lbo = 16 sbo = 1024 swizzle = 128
  tilenv.tcgen05_mma %taddr, %a, %b, %id accumulate(%true) : i64
  tilenv.tcgen05_mma %taddr, %taddr, %b, %id2 accumulate(%true) : i32
  tilenv.tcgen05_commit %slot
  tilenv.tcgen05_cp %a -> %taddr s128x256b
  tilenv.tcgen05_ld %taddr -> %regs[%c0] s32x32b x 4 : memref<8xf32, #tile.space<local>>
  tilenv.tcgen05_ld %taddr -> %regs[%c0] s16x32bx2 x 2 pack offset 16 : memref<8xf32, #tile.space<local>>
  tilenv.tcgen05_wait_ld
  tilenv.tcgen05_st %regs[%c0] -> %taddr s16x256b x 1 unpack : memref<8xf32, #tile.space<local>>
  tilenv.tcgen05_wait_st
  tilenv.tcgen05_dealloc %taddr columns = 128
  tilenv.tcgen05_relinquish
}
