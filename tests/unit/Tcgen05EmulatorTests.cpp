//===- Tcgen05EmulatorTests.cpp - the emulation's tables on the host ------===//
//
// tessel_tcgen05_emu.h's tables (data-movement shapes, descriptor fields,
// canonical shared-memory layouts) compiled for the host: checked against
// entries of the PTX ISA's tables, and against the compiler's own
// transcription (TmemLayout, SharedLayout, the descriptor encoders), which
// was written separately, so a slip in either shows as a disagreement.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "tessel/Layout/SharedLayout.h"
#include "tessel/Layout/TmemLayout.h"

#define TESSEL_EMU_HD
#define TESSEL_EMU_TABLES_ONLY
#include "tessel_tcgen05_emu.h"

using namespace tessel;

TEST_CASE("the emulator's tcgen05.ld/st cells are the PTX ISA's") {
  namespace emu = tessel::emu;
  // .32x32b: thread t is lane t, register r column r.
  emu::Cell c = emu::cell(emu::s32x32b, 5, 3, 32, 8, 0);
  CHECK((c.lane == 37 && c.column == 11));
  // .16x256b is the mma.sync m16n8 accumulator: thread 5 holds rows 1 and 9,
  // columns 2 and 3; .x2 repeats 8 columns on.
  c = emu::cell(emu::s16x256b, 5, 0, 0, 0, 0);
  CHECK((c.lane == 1 && c.column == 2));
  c = emu::cell(emu::s16x256b, 5, 3, 0, 0, 0);
  CHECK((c.lane == 9 && c.column == 3));
  c = emu::cell(emu::s16x256b, 5, 5, 0, 0, 0);
  CHECK((c.lane == 1 && c.column == 11));
  // .16x128b: thread 6, register 1: lane 1 + 8, column 6 % 4.
  c = emu::cell(emu::s16x128b, 6, 1, 0, 0, 0);
  CHECK((c.lane == 9 && c.column == 2));
  // .16x64b: thread 5: lane 5 / 4 + 8 (odd thread), column (5 / 2) % 2.
  c = emu::cell(emu::s16x64b, 5, 0, 0, 0, 0);
  CHECK((c.lane == 9 && c.column == 0));
  // .16x32bx2: the upper half-warp at the immediate's column.
  c = emu::cell(emu::s16x32bx2, 20, 0, 16, 4, 16);
  CHECK((c.lane == 20 && c.column == 20));
}

TEST_CASE("the emulator's cells agree with the compiler's for every shape, thread and register") {
  namespace emu = tessel::emu;
  const std::pair<emu::Shape, layout::TmemShape> shapes[] = {
      {emu::s32x32b, layout::TmemShape::s32x32b},   {emu::s16x64b, layout::TmemShape::s16x64b},
      {emu::s16x128b, layout::TmemShape::s16x128b}, {emu::s16x256b, layout::TmemShape::s16x256b},
      {emu::s16x32bx2, layout::TmemShape::s16x32bx2}};
  for (auto [e, l] : shapes)
    for (int num : {1, 2, 8}) {
      int regs = *layout::registersPerThread(l, num);
      CHECK(regs == emu::registers_per_repetition(e) * num);
      for (int t = 0; t < 32; ++t)
        for (int r = 0; r < regs; ++r) {
          emu::Cell mine = emu::cell(e, t, r, 64, 40, 8);
          layout::TmemCell theirs = layout::tmemCell(l, t, r, {64, 40}, 8);
          INFO(layout::name(l) << " x" << num << " thread " << t << " register " << r);
          CHECK((mine.lane == theirs.lane && mine.column == theirs.column));
        }
    }
}

TEST_CASE("the emulator decodes the compiler's tcgen05 descriptors") {
  namespace emu = tessel::emu;
  emu::InstrDesc d = emu::decode_instr_desc(layout::tcgen05InstrDescriptor(128, 256, true, true, false, true));
  CHECK((d.m == 128 && d.n == 256 && d.d_type == 1 && d.a_type == 1 && d.b_type == 1));
  CHECK((!d.a_mn_major && d.b_mn_major));
  d = emu::decode_instr_desc(layout::tcgen05InstrDescriptor(64, 8, false, false, true, false));
  CHECK((d.m == 64 && d.n == 8 && d.d_type == 0 && d.a_type == 0 && d.a_mn_major && !d.b_mn_major));
  // kind::f8f6f4 e5m2 into f32 and kind::i8 s8 into s32.
  d = emu::decode_instr_desc(layout::tcgen05InstrDescriptor(
      128, 128, {layout::Tcgen05Kind::f8f6f4, 1, 1, 1}, true, false));
  CHECK((d.m == 128 && d.n == 128 && d.d_type == 1 && d.a_type == 1 && d.b_type == 1));
  CHECK((d.a_mn_major && !d.b_mn_major));
  d = emu::decode_instr_desc(layout::tcgen05InstrDescriptor(
      128, 64, {layout::Tcgen05Kind::i8, 1, 1, 2}, false, false));
  CHECK((d.n == 64 && d.d_type == 2 && d.a_type == 1 && d.b_type == 1));
  CHECK((emu::instruction_k(emu::kind_f16) == 16 && emu::instruction_k(emu::kind_i8) == 32));
  for (int swizzle : {0, 32, 64, 128}) {
    emu::SmemDesc s = emu::decode_smem_desc(*layout::tcgen05SmemDescriptor(0x4400, 8192, 1024, swizzle));
    CHECK((s.start == 0x4400 && s.lbo == 8192 && s.sbo == 1024 && s.version == 1));
    CHECK(s.mode == (swizzle == 128 ? 2 : swizzle == 64 ? 4 : swizzle == 32 ? 6 : 0));
  }
}

// What the emulated MMA reads through a descriptor the lowering builds
// (LowerGemm.cpp's operandDescriptor: start at the k-step's unswizzled
// offset, LBO one panel along MN, SBO eight rows) must be the element the
// shared layout stored there.
TEST_CASE("the emulator's canonical layouts find every element the shared layout stored") {
  namespace emu = tessel::emu;
  // 16-bit operands (kind::f16) and 8-bit ones (kind::f8f6f4, i8): one
  // instruction reads 32 bytes of K either way.
  for (int bytes : {2, 1})
    for (int64_t swizzle : {32, 64, 128}) {
      // K-major A [128 rows, K] and MN-major B [K, 256 columns].
      const int64_t kTile = 128 / bytes, kStep = 32 / bytes;
      for (bool mnMajor : {false, true}) {
        llvm::SmallVector<int64_t> shape = mnMajor ? llvm::SmallVector<int64_t>{kTile, 256}
                                                   : llvm::SmallVector<int64_t>{128, kTile};
        layout::SharedLayout l(shape, bytes, swizzle, 0);
        const unsigned base = 2048; // 1024-byte aligned, as swizzled buffers are
        int64_t w = l.getPanelWidth();
        unsigned lbo = mnMajor ? static_cast<unsigned>(l.getRows() * swizzle) : 16;
        unsigned sbo = static_cast<unsigned>(8 * swizzle);
        int mode = swizzle == 128 ? 2 : swizzle == 64 ? 4 : 6;
        int64_t mnExtent = mnMajor ? shape[1] : shape[0], kExtent = mnMajor ? shape[0] : shape[1];
        int mismatches = 0;
        for (int64_t k0 = 0; k0 < kExtent; k0 += kStep) {
          // The k-step's start: element (k0, 0) MN-major, (0, k0) K-major.
          int64_t row = mnMajor ? k0 : 0, col = mnMajor ? 0 : k0;
          unsigned start =
              base + static_cast<unsigned>(((col / w * l.getRows() + row) * w + col % w) * bytes);
          for (int64_t mn = 0; mn < mnExtent; ++mn)
            for (int k = 0; k < kStep; ++k) {
              unsigned got = emu::operand_address(start, lbo, sbo, mode, mnMajor,
                                                  static_cast<int>(mn), k, bytes);
              llvm::SmallVector<int64_t> coord = mnMajor ? llvm::SmallVector<int64_t>{k0 + k, mn}
                                                         : llvm::SmallVector<int64_t>{mn, k0 + k};
              unsigned want = base + static_cast<unsigned>(l.apply(coord) * bytes);
              mismatches += got != want;
            }
        }
        INFO(bytes << "-byte elements, swizzle " << swizzle
                   << (mnMajor ? " MN-major" : " K-major"));
        CHECK(mismatches == 0);
      }
    }
}
