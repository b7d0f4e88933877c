//===- TmemLayoutTests.cpp - tensor memory against the PTX ISA's tables ---===//
#include <catch2/catch.hpp>

#include "tessel/Layout/FragmentLayout.h"
#include "tessel/Layout/TmemLayout.h"

#include <set>

using namespace tessel::layout;

namespace {
const TmemCell base{32, 64};
TmemCell at(TmemShape shape, int t, int r, int offset = 0) {
  return tmemCell(shape, t, r, base, offset);
}
} // namespace

TEST_CASE("tcgen05.ld/st shapes follow the PTX ISA's data-movement tables") {
  // .32x32b: thread t is lane t, register r column r.
  CHECK(at(TmemShape::s32x32b, 5, 3) == TmemCell{37, 67});
  // .16x256b: r0, r1 at lane t/4, columns 2(t%4) and +1; r2, r3 eight lanes
  // below; x2 continues 8 columns on.
  CHECK(at(TmemShape::s16x256b, 6, 0) == TmemCell{33, 68});
  CHECK(at(TmemShape::s16x256b, 6, 1) == TmemCell{33, 69});
  CHECK(at(TmemShape::s16x256b, 6, 2) == TmemCell{41, 68});
  CHECK(at(TmemShape::s16x256b, 6, 3) == TmemCell{41, 69});
  CHECK(at(TmemShape::s16x256b, 6, 4) == TmemCell{33, 76});
  // .16x128b: r0 at (t/4, t%4), r1 eight lanes below.
  CHECK(at(TmemShape::s16x128b, 7, 0) == TmemCell{33, 67});
  CHECK(at(TmemShape::s16x128b, 7, 1) == TmemCell{41, 67});
  // .16x64b: lane 8(t%2) + t/4, column (t/2)%2.
  CHECK(at(TmemShape::s16x64b, 5, 0) == TmemCell{41, 64});
  CHECK(at(TmemShape::s16x64b, 2, 0) == TmemCell{32, 65});
  // .16x32bx2: the upper half-warp at the immediate's column.
  CHECK(at(TmemShape::s16x32bx2, 20, 0, 16) == TmemCell{36, 80});
  CHECK(at(TmemShape::s16x32bx2, 3, 0, 16) == TmemCell{35, 64});
  CHECK(TmemCell{33, 68}.address() == ((33u << 16) | 68u));
}

TEST_CASE("every register of a warp lands on its own cell, filling the shape") {
  for (TmemShape shape : {TmemShape::s32x32b, TmemShape::s16x64b, TmemShape::s16x128b,
                          TmemShape::s16x256b, TmemShape::s16x32bx2})
    for (int num : {1, 2, 4, 8}) {
      int regs = *registersPerThread(shape, num);
      int columns = num * columnsPerRepetition(shape);
      std::set<std::pair<int, int>> cells;
      for (int t = 0; t < 32; ++t)
        for (int r = 0; r < regs; ++r) {
          TmemCell c = tmemCell(shape, t, r, {0, 0}, /*offset=*/columns);
          CHECK(c.lane < lanesOf(shape));
          cells.insert({c.lane, c.column});
        }
      INFO(name(shape) << ".x" << num);
      CHECK(cells.size() == size_t(32 * regs));
    }
}

TEST_CASE(".16x256b is the mma.sync m16n8 accumulator fragment") {
  FragmentLayout mma = FragmentLayout::mmaAccumulator(16, 8, 1, 1);
  for (int t = 0; t < 32; ++t)
    for (int r = 0; r < 4; ++r) {
      auto rc = mma.apply(r, t);
      CHECK(tmemCell(TmemShape::s16x256b, t, r, {0, 0}) == TmemCell{int(rc[0]), int(rc[1])});
    }
}

TEST_CASE("instruction limits, allocation sizes and lane ownership") {
  CHECK(registersPerThread(TmemShape::s32x32b, 128) == 128);
  CHECK(registersPerThread(TmemShape::s16x256b, 32) == 128);
  std::string why;
  CHECK_FALSE(registersPerThread(TmemShape::s16x128b, 128, &why));
  CHECK(why == ".16x128b.x128 would take 256 registers per thread; at most 128");
  CHECK_FALSE(registersPerThread(TmemShape::s32x32b, 3, &why));
  CHECK(why == "`.num` is x1 to x128, a power of two; got x3");

  CHECK(tmemAllocationColumns(1) == 32);
  CHECK(tmemAllocationColumns(33) == 64);
  CHECK(tmemAllocationColumns(200) == 256);
  CHECK(tmemAllocationColumns(512) == 512);
  CHECK_FALSE(tmemAllocationColumns(513, &why));
  CHECK(why == "tensor memory holds 512 columns per CTA; 513 were asked for");

  CHECK(warpReachesLane(5, 32));
  CHECK(warpReachesLane(5, 63));
  CHECK_FALSE(warpReachesLane(5, 64));
  CHECK(warpReachesLane(3, 127));
}

TEST_CASE("warpgroups splitting a tile by columns start at 32-bit columns") {
  // P [128, 128] bf16 packed, two warpgroups: each owns 64 values = 32
  // columns, so the second starts at column 32 (writing at 64 was the bug).
  CHECK(warpgroupColumnOffset(1, 2, 128, 16, /*packed=*/true) == 32);
  CHECK(warpgroupColumnOffset(1, 2, 128, 32, false) == 64);
  CHECK(warpgroupColumnOffset(1, 2, 128, 16, /*packed=*/false) == 64); // accumulator format
  CHECK(warpgroupColumnOffset(3, 4, 256, 16, true) == 96);
}

TEST_CASE("column runs that are not a power of two split into issues") {
  // 48 columns of .32x32b: x32 then x16, the second from register 32.
  std::vector<TmemIssue> issues = splitColumnRun(TmemShape::s32x32b, 48);
  REQUIRE(issues.size() == 2);
  CHECK((issues[0].num == 32 && issues[0].column == 0 && issues[0].firstRegister == 0));
  CHECK((issues[1].num == 16 && issues[1].column == 32 && issues[1].firstRegister == 32));
  // .16x256b covers 8 columns per repetition with 4 registers: 48 columns
  // are x4 (32 columns, 16 registers) then x2.
  issues = splitColumnRun(TmemShape::s16x256b, 48);
  REQUIRE(issues.size() == 2);
  CHECK((issues[0].num == 4 && issues[1].num == 2));
  CHECK((issues[1].column == 32 && issues[1].firstRegister == 16));
  CHECK(splitColumnRun(TmemShape::s32x32b, 512).size() == 4); // x128 four times
}
