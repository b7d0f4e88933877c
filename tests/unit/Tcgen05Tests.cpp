//===- Tcgen05Tests.cpp - tcgen05 descriptors and their PTX ---------------===//
//
// The instruction and shared-memory descriptors against the values the PTX
// ISA's tables give (worked examples in ../shared/research/BLACKWELL.md),
// and every tcgen05 op printed by the CUDA emitter, compiled by NVRTC and
// ptxas for sm_100a (and refused for sm_90a, which has no tcgen05).
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "tessel/Dialect/TileNV/TileNVDialect.h"
#include "tessel/Layout/TmemLayout.h"
#include "tessel/Target/CudaEmitter.h"
#include "tessel/runtime/Error.h"
#include "tessel/runtime/Nvrtc.h"

#include "mlir/Parser/Parser.h"

using namespace tessel;
using namespace tessel::layout;

TEST_CASE("tcgen05 instruction descriptors follow the PTX ISA's table") {
  // bf16 x bf16 -> f32, M 128, N 256, both K-major.
  CHECK(tcgen05InstrDescriptor(128, 256, true, true, false, false) == 0x08400490u);
  // P x V with V row-major (B MN-major), N 128.
  CHECK(tcgen05InstrDescriptor(128, 128, true, true, false, true) == 0x08210490u);
  // f16 -> f16, M 64, N 8, both MN-major: D type 0, A/B types 0, bits 15
  // and 16, N>>3 = 1 at bit 17, M>>4 = 4 at bit 24.
  CHECK(tcgen05InstrDescriptor(64, 8, false, false, true, true) ==
        ((1u << 15) | (1u << 16) | (1u << 17) | (4u << 24)));
  // kind::f8f6f4 e4m3 x e5m2 -> f32, M 128, N 256 (the PTX ISA's table:
  // A format 0 in bits 7-9, B format 1 at bit 10); kind::i8 s8 -> s32, D
  // format 2 in bits 4-5, both operands 1 (signed).
  CHECK(tcgen05InstrDescriptor(128, 256, {Tcgen05Kind::f8f6f4, 0, 1, 1}, false, false) ==
        ((1u << 4) | (1u << 10) | (32u << 17) | (8u << 24)));
  CHECK(tcgen05InstrDescriptor(128, 64, {Tcgen05Kind::i8, 1, 1, 2}, false, true) ==
        ((2u << 4) | (1u << 7) | (1u << 10) | (1u << 16) | (8u << 17) | (8u << 24)));
  CHECK(tcgen05ShapeError(128, 256).empty());
  CHECK(tcgen05ShapeError(64, 8).empty());
  CHECK(tcgen05ShapeError(256, 128) == "m=256: cta_group::1 MMAs are 64 or 128 rows");
  CHECK(tcgen05ShapeError(128, 260) == "n=260: cta_group::1 MMAs are 8 to 256 columns in steps of 8");
  CHECK(tcgen05ShapeError(128, 4) != "");
}

TEST_CASE("tcgen05 shared-memory descriptors are Hopper's with version 1 and a 3-bit swizzle") {
  // bf16, 128-byte swizzle, K-major: SBO 1024 (8 rows of 128 bytes), LBO 16.
  CHECK(tcgen05SmemDescriptor(0, 16, 1024, 128) == 0x4000404000010000ull);
  // The start address is in 16-byte units in bits 0-13.
  CHECK(*tcgen05SmemDescriptor(0x400, 16, 1024, 128) == (0x4000404000010000ull | 0x40));
  // Swizzle codes: none 0, 32 B 6, 64 B 4 (bits 61-63); version bit 46.
  CHECK(*tcgen05SmemDescriptor(0, 0, 0, 0) == (1ull << 46));
  CHECK(*tcgen05SmemDescriptor(0, 0, 0, 32) == ((1ull << 46) | (6ull << 61)));
  CHECK(*tcgen05SmemDescriptor(0, 0, 0, 64) == ((1ull << 46) | (4ull << 61)));
  CHECK_FALSE(tcgen05SmemDescriptor(0, 0, 0, 96));
}

static const char *kTcgen05Kernel = R"mlir(
tile.kernel @tcgen05(%out: memref<?xf32, #tile.space<global>>) grid(%bx) = affine_map<() -> (1)> threads(128) attributes {smem_bytes = 0 : i64} {
  %regs = tile.alloc : memref<128xf32, #tile.space<local>>
  %c0 = arith.constant 0 : index
  %slot = arith.constant 0 : i32
  %taddr = arith.constant 0 : i32
  %true = arith.constant true
  tilenv.tcgen05_alloc %slot columns = 256
  tilenv.tcgen05_fence_before
  tilenv.tcgen05_fence_after
  %id = tilenv.tcgen05_idesc m = 128 n = 256 bf16 -> f32
  %a = tilenv.tcgen05_smem_desc %slot lbo = 16 sbo = 1024 swizzle = 128
  %b = tilenv.tcgen05_smem_desc %slot lbo = 16 sbo = 1024 swizzle = 64
  tilenv.tcgen05_mma %taddr, %a, %b, %id accumulate(%true) : i64
  tilenv.tcgen05_mma %taddr, %taddr, %b, %id accumulate(%true) : i32
  %id8 = tilenv.tcgen05_idesc m = 128 n = 256 f8E4M3FN -> f32
  tilenv.tcgen05_mma %taddr, %a, %b, %id8 accumulate(%true) kind f8f6f4 : i64
  %idi = tilenv.tcgen05_idesc m = 128 n = 64 i8 -> i32 trans_b
  tilenv.tcgen05_mma %taddr, %a, %b, %idi accumulate(%true) kind i8 : i64
  tilenv.tcgen05_commit %slot
  tilenv.tcgen05_cp %a -> %taddr s128x256b
  tilenv.tcgen05_cp %a -> %taddr s4x256b
  tilenv.tcgen05_cp %a -> %taddr s128x128b
  tilenv.tcgen05_ld %taddr -> %regs[%c0] s32x32b x 128 : memref<128xf32, #tile.space<local>>
  tilenv.tcgen05_ld %taddr -> %regs[%c0] s16x64b x 4 pack : memref<128xf32, #tile.space<local>>
  tilenv.tcgen05_ld %taddr -> %regs[%c0] s16x128b x 2 : memref<128xf32, #tile.space<local>>
  tilenv.tcgen05_ld %taddr -> %regs[%c0] s16x256b x 8 : memref<128xf32, #tile.space<local>>
  tilenv.tcgen05_ld %taddr -> %regs[%c0] s16x32bx2 x 2 offset 16 : memref<128xf32, #tile.space<local>>
  tilenv.tcgen05_wait_ld
  tilenv.tcgen05_st %regs[%c0] -> %taddr s32x32b x 16 unpack : memref<128xf32, #tile.space<local>>
  tilenv.tcgen05_st %regs[%c0] -> %taddr s16x256b x 1 : memref<128xf32, #tile.space<local>>
  tilenv.tcgen05_st %regs[%c0] -> %taddr s16x32bx2 x 4 offset 8 : memref<128xf32, #tile.space<local>>
  tilenv.tcgen05_wait_st
  tilenv.tcgen05_dealloc %taddr columns = 256
  tilenv.tcgen05_relinquish
}
)mlir";

TEST_CASE("every tcgen05 op prints as PTX that ptxas accepts for sm_100a") {
  mlir::DialectRegistry registry;
  registry.insert<tile::TileDialect, tilenv::TileNVDialect, mlir::arith::ArithDialect,
                  mlir::math::MathDialect, mlir::memref::MemRefDialect, mlir::scf::SCFDialect>();
  mlir::MLIRContext context(registry);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(kTcgen05Kernel, &context);
  REQUIRE(module);
  auto kernel = *module->getOps<tile::KernelOp>().begin();
  std::string source;
  llvm::raw_string_ostream os(source);
  REQUIRE(mlir::succeeded(emitCuda(kernel, os)));
  INFO(source);
  rt::Binary binary = rt::compileCuda(source, "sm_100a");
  CHECK(binary.cubin.size() > 0);
  CHECK(binary.ptx.find("tcgen05.mma.cta_group::1.kind::f16") != std::string::npos);
  CHECK(binary.ptx.find("tcgen05.mma.cta_group::1.kind::f8f6f4") != std::string::npos);
  CHECK(binary.ptx.find("tcgen05.mma.cta_group::1.kind::i8") != std::string::npos);
  CHECK(binary.ptx.find("tcgen05.ld.sync.aligned.32x32b.x128.b32") != std::string::npos);
  // Hopper has no tcgen05: the same source is an error there, naming it.
  CHECK_THROWS_WITH(rt::compileCuda(source, "sm_90a"), Catch::Contains("tcgen05"));
}
