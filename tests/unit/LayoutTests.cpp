//===- LayoutTests.cpp - the layout algebra -------------------------------===//
//
// Linear maps over GF(2), fragment layouts of the tensor-core instructions
// checked element by element against the PTX ISA's tables, swizzles checked
// against their bank pattern, and the layout attributes' text round trip.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "tessel/Dialect/Tile/TileDialect.h"
#include "tessel/Layout/FragmentLayout.h"
#include "tessel/Layout/SharedLayout.h"

#include "mlir/AsmParser/AsmParser.h"
#include <set>

using namespace tessel::layout;

TEST_CASE("linear maps compose, invert and solve") {
  LinearMap swap(2, {0b10, 0b01});
  CHECK(swap.compose(swap) == LinearMap::identity(2));
  CHECK(swap.inverse() == swap);
  LinearMap xorMap(3, {0b001, 0b011, 0b100}); // bit 1 also flips bit 0
  auto inv = xorMap.inverse();
  REQUIRE(inv);
  for (uint64_t x = 0; x < 8; ++x) CHECK(inv->apply(xorMap.apply(x)) == x);
  CHECK(xorMap.compose(*inv) == LinearMap::identity(3));
  LinearMap replicated(2, {0b01, 0b00, 0b10});
  CHECK(replicated.rank() == 2);
  CHECK_FALSE(replicated.inverse());
  CHECK(replicated.isSurjective());
  CHECK_FALSE(replicated.isInjective());
  CHECK(replicated.solve(0b11) == std::optional<uint64_t>(0b101));
  CHECK_FALSE(LinearMap(2, {0b01}).solve(0b10));
}

TEST_CASE("the mma.sync accumulator layout is the PTX ISA's m16n8 table") {
  FragmentLayout l = FragmentLayout::mmaAccumulator(16, 8, 1, 1);
  REQUIRE(l.getNumRegisters() == 4);
  REQUIRE(l.getNumThreads() == 32);
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 4; ++r) {
      int row = lane / 4 + (r >= 2 ? 8 : 0), col = 2 * (lane % 4) + (r & 1);
      CHECK(l.apply(r, lane) == llvm::SmallVector<int64_t>{row, col});
    }
  CHECK(l.getMap().inverse().has_value()); // every element exactly once
}

TEST_CASE("the wgmma accumulator layout is the PTX ISA's m64nN table") {
  FragmentLayout l = FragmentLayout::wgmmaAccumulator(64, 32, 1, 1);
  REQUIRE(l.getNumRegisters() == 16);
  REQUIRE(l.getNumThreads() == 128);
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < 16; ++i) {
      int warp = t / 32, lane = t % 32;
      int row = 16 * warp + lane / 4 + ((i % 4) >= 2 ? 8 : 0);
      int col = (i / 4) * 8 + 2 * (lane % 4) + (i % 2);
      CHECK(l.apply(i, t) == llvm::SmallVector<int64_t>{row, col});
    }
}

TEST_CASE("warp policies split the accumulator tile") {
  FragmentLayout l = FragmentLayout::mmaAccumulator(64, 64, 2, 2);
  // Warp 1 (wm = 0, wn = 1) starts at column 32, warp 2 at row 32.
  CHECK(l.apply(0, 32) == llvm::SmallVector<int64_t>{0, 32});
  CHECK(l.apply(0, 64) == llvm::SmallVector<int64_t>{32, 0});
  CHECK(l.getNumRegisters() == 32);
  CHECK(l.isSurjective());
  // (33, 41): warp 3 (rows 32+, columns 32+); in its tile (1, 9): lane
  // 4 * 1 + 0, register 1 (odd column) + 4 (second 8-column tile).
  CHECK(l.locate({33, 41}) == std::optional<std::pair<int64_t, int64_t>>({5, 100}));
}

TEST_CASE("mma.sync splits M in fours as wgmma's warpgroups do") {
  // Warps along M only, in fours: the layouts agree element for element,
  // so a program whose gemms take different instructions has one layout.
  for (int64_t n : {8, 64, 128}) {
    CHECK(FragmentLayout::mmaAccumulator(128, n, 4, 1) == FragmentLayout::wgmmaAccumulator(128, n, 1, 1));
    CHECK(FragmentLayout::mmaAccumulator(64, n, 4, 1) == FragmentLayout::wgmmaAccumulator(64, n, 1, 1));
    CHECK(FragmentLayout::mmaAccumulator(256, n, 8, 1) == FragmentLayout::wgmmaAccumulator(256, n, 2, 1));
    CHECK(FragmentLayout::mmaAccumulator(192, n, 12, 1) == FragmentLayout::wgmmaAccumulator(192, n, 3, 1));
  }
  // Warp 1 of four holds rows 16-23 and 80-87 of a [128, 8] tile.
  FragmentLayout l = FragmentLayout::mmaAccumulator(128, 8, 4, 1);
  std::set<int64_t> rows;
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < l.getNumRegisters(); ++r) rows.insert(l.apply(r, 32 + lane)[0]);
  CHECK(*rows.begin() == 16);
  CHECK(rows.count(31));
  CHECK(rows.count(80));
  CHECK_FALSE(rows.count(32));
  CHECK(rows.size() == 32);
  // Two warps along M keep contiguous rows.
  CHECK(FragmentLayout::mmaAccumulator(64, 8, 2, 1).apply(0, 32)[0] == 32);
}

TEST_CASE("element-wise layouts pad, vectorize and replicate") {
  FragmentLayout l = FragmentLayout::elementwise({45, 20}, 64, 4);
  CHECK(l.getContiguousRegisters() == 4);
  // Every element of the real shape has exactly one owner.
  std::set<std::pair<int64_t, int64_t>> seen;
  for (int t = 0; t < 64; ++t)
    for (int r = 0; r < l.getNumRegisters(); ++r) {
      auto c = l.apply(r, t);
      if (l.contains(c)) CHECK(seen.insert({c[0], c[1]}).second);
    }
  CHECK(seen.size() == 45 * 20);
  // Fewer elements than threads: the extra threads are replicas.
  FragmentLayout tiny = FragmentLayout::elementwise({1, 8}, 128, 4);
  CHECK(tiny.getNumRegisters() == 1);
  CHECK(tiny.isOwner(0));
  CHECK_FALSE(tiny.isOwner(8));
  CHECK(tiny.apply(0, 8) == tiny.apply(0, 0));
}

/// The owners among threads 0..threads-1 of every element of the real
/// shape: each element exactly once.
static void checkOwnedOnce(const FragmentLayout &l, int64_t threads, int64_t elements) {
  std::set<llvm::SmallVector<int64_t>> seen;
  for (int64_t t = 0; t < threads; ++t) {
    if (!l.isOwner(t)) continue;
    for (int64_t r = 0; r < l.getNumRegisters(); ++r) {
      auto c = l.apply(r, t);
      if (l.contains(c)) CHECK(seen.insert(c).second);
    }
  }
  CHECK(int64_t(seen.size()) == elements);
}

TEST_CASE("three warpgroups use four's layouts, the fourth holding padding") {
  // wgmma over [192, 64] on three warpgroups: thread t of warpgroup g holds
  // the m64n64 table's elements shifted down 64 g rows.
  FragmentLayout acc = FragmentLayout::wgmmaAccumulator(192, 64, 3, 1);
  CHECK(acc.getNumThreads() == 512);
  CHECK(acc.isOwnedWithin(384));
  CHECK_FALSE(acc.isOwnedWithin(256));
  FragmentLayout one = FragmentLayout::wgmmaAccumulator(64, 64, 1, 1);
  for (int64_t t = 0; t < 384; ++t)
    for (int64_t r = 0; r < acc.getNumRegisters(); ++r) {
      auto expected = one.apply(r, t % 128);
      expected[0] += 64 * (t / 128);
      CHECK(acc.apply(r, t) == expected);
    }
  checkOwnedOnce(acc, 384, 192 * 64);
  // mma.sync: twelve warps split [6, 2] (the power of two on the columns).
  FragmentLayout square = FragmentLayout::mmaAccumulator(192, 64, 6, 2);
  CHECK(square.isOwnedWithin(384));
  CHECK(square.apply(0, 32) == llvm::SmallVector<int64_t>{0, 32}); // warp 1: wm 0, wn 1
  CHECK(square.apply(0, 64) == llvm::SmallVector<int64_t>{32, 0}); // warp 2: wm 1, wn 0
  checkOwnedOnce(square, 384, 192 * 64);
  // Element-wise: rows a multiple of the warps spread over all sixteen
  // (the last four hold padding); a smaller tile over eight, the next
  // four warps replicating.
  FragmentLayout rows = FragmentLayout::elementwise({192, 64}, 384, 4);
  CHECK(rows.getNumThreads() == 512);
  CHECK(rows.isOwnedWithin(384));
  checkOwnedOnce(rows, 384, 192 * 64);
  FragmentLayout small = FragmentLayout::elementwise({64, 64}, 384, 4);
  CHECK(small.getNumThreads() == 512);
  CHECK(small.isOwnedWithin(384));
  CHECK_FALSE(small.isOwner(256));
  CHECK(small.apply(0, 256) == small.apply(0, 0));
  checkOwnedOnce(small, 384, 64 * 64);
}

TEST_CASE("projection and register maps follow the accumulator's rows") {
  FragmentLayout acc = FragmentLayout::mmaAccumulator(64, 16, 4, 1);
  FragmentLayout rows = acc.project({0});
  CHECK(rows.getNumRegisters() == 2); // rows g and g + 8
  auto map = acc.registerMapTo(rows, {0});
  REQUIRE(map);
  for (int t = 0; t < 128; ++t)
    for (int r = 0; r < acc.getNumRegisters(); ++r)
      CHECK(rows.apply(map->apply(r), t)[0] == acc.apply(r, t)[0]);
  // The columns would need other threads' registers.
  CHECK_FALSE(acc.registerMapTo(acc.project({1}), {0}));
}

TEST_CASE("windows of a fragment are registers of the same threads") {
  // A [128, 128] wgmma accumulator on one warpgroup (two m64 halves):
  // every window of 8 or more aligned columns, and of 64 rows, is held in
  // each thread's registers.
  FragmentLayout acc = FragmentLayout::wgmmaAccumulator(128, 128, 1, 1);
  auto checkWindow = [&](llvm::SmallVector<int64_t> offsets, llvm::SmallVector<int64_t> sizes,
                         llvm::SmallVector<unsigned> kept) {
    std::string why;
    auto w = acc.window(offsets, sizes, kept, &why);
    INFO(why);
    REQUIRE(w);
    CHECK(w->layout.getNumThreads() == acc.getNumThreads());
    int64_t elements = 1;
    for (unsigned d : kept) elements *= sizes[d];
    CHECK(w->layout.getNumRegisters() * w->layout.getNumThreads() == elements);
    for (int t = 0; t < 128; ++t)
      for (int r = 0; r < w->layout.getNumRegisters(); ++r) {
        auto parent = acc.apply(int64_t(w->registers.apply(r) ^ w->base), t);
        auto inWindow = w->layout.apply(r, t);
        llvm::SmallVector<int64_t> expected(offsets);
        for (auto [i, d] : llvm::enumerate(kept)) expected[d] += inWindow[i];
        CHECK(parent == expected);
      }
    // The layout around the window gives it back.
    FragmentLayout around = FragmentLayout::aroundWindow(w->layout, acc.getShape(), sizes, kept);
    auto again = around.window(offsets, sizes, kept);
    REQUIRE(again);
    CHECK(again->layout == w->layout);
    CHECK(around.isSurjective());
  };
  checkWindow({0, 32}, {128, 32}, {0, 1});
  checkWindow({0, 96}, {128, 32}, {0, 1});
  checkWindow({64, 8}, {64, 8}, {0, 1});
  checkWindow({64, 0}, {64, 128}, {0, 1});
  checkWindow({0, 16}, {128, 8}, {0, 1});
  // Rank-reducing: rows in registers, columns in lanes; one row is a 1-D
  // window every lane holds one element of.
  FragmentLayout rows({4, 32}, {uint64_t{1} << 5, uint64_t{2} << 5}, {1, 2, 4, 8, 16}, {});
  auto row = rows.window({2, 0}, {1, 32}, {1});
  REQUIRE(row);
  CHECK(row->layout.getShape() == llvm::ArrayRef<int64_t>{32});
  CHECK(row->layout.getNumRegisters() == 1);
  CHECK(row->base == 0b10);
  for (int t = 0; t < 32; ++t)
    CHECK(rows.apply(int64_t(row->registers.apply(0) ^ row->base), t) ==
          llvm::SmallVector<int64_t>{2, t});

  std::string why;
  // Two columns: lane bits step columns 2 and 4.
  CHECK_FALSE(acc.window({0, 2}, {128, 2}, {0, 1}, &why));
  CHECK(why.find("other threads") != std::string::npos);
  CHECK(why.find("dimension 1 at least 8") != std::string::npos);
  // 32 rows: warps step rows 16 and 32.
  CHECK_FALSE(acc.window({32, 0}, {32, 128}, {0, 1}, &why));
  CHECK(why.find("dimension 0 at least 64") != std::string::npos);
  // Not a power of two, or not at a multiple of it.
  CHECK_FALSE(acc.window({0, 16}, {128, 24}, {0, 1}, &why));
  CHECK(why.find("power of two") != std::string::npos);
  CHECK_FALSE(acc.window({0, 16}, {128, 32}, {0, 1}, &why));
  CHECK(why.find("16") != std::string::npos);
  CHECK_FALSE(acc.window({0, 112}, {128, 32}, {0, 1}, &why));
  // mma.sync with warps along the columns: a column window of 32 is one
  // warp's.
  FragmentLayout square = FragmentLayout::mmaAccumulator(64, 64, 2, 2);
  CHECK_FALSE(square.window({0, 32}, {64, 32}, {0, 1}, &why));
  CHECK(why.find("warp bit 0") != std::string::npos);
}

TEST_CASE("shared swizzles keep 16-byte chunks and spread rows over banks") {
  SharedLayout l({64, 64}, 2, 128, 0);
  // Eight rows of one 16-byte column chunk land in eight bank groups
  // (what ldmatrix reads in one phase).
  for (int chunk = 0; chunk < 8; ++chunk) {
    std::set<int64_t> groups;
    for (int row = 0; row < 8; ++row) groups.insert(l.bank({row, chunk * 8}) / 4);
    CHECK(groups.size() == 8);
  }
  // A chunk stays contiguous, and every offset inverts.
  CHECK(l.apply({5, 17}) + 1 == l.apply({5, 18}));
  for (int64_t off = 0; off < l.getStorageElements(); off += 37) {
    auto c = l.invert(off);
    REQUIRE(c);
    CHECK(l.apply(*c) == off);
  }
  // Wider rows are cut into panels; the swizzle matches the hardware's XOR
  // of address bits [4, 7) with [7, 10).
  SharedLayout panels({16, 128}, 2, 128, 0);
  CHECK(panels.unswizzledOffset({0, 64}) == 16 * 64);
  CHECK(SharedLayout::swizzleByteOffset(3 * 128 + 16, 128) == 3 * 128 + (16 ^ (3 << 4)));
  CHECK(SharedLayout::swizzleByteOffset(2 * 128 + 16, 32) == 2 * 128 + 16);
  CHECK(SharedLayout::swizzleByteOffset(1 * 128 + 16, 32) == 128);
  // As a linear map the layout composes with a fragment's: which offset bits
  // each (register, lane, warp) bit moves.
  auto linear = l.toLinear();
  REQUIRE(linear);
  CHECK(linear->inverse().has_value());
  // Padded rows: offsets in the padding map back to nothing.
  SharedLayout padded({4, 32}, 4, 0, 8);
  CHECK(padded.apply({1, 0}) == 40);
  CHECK_FALSE(padded.invert(35));
  CHECK_FALSE(SharedLayout::check({64, 20}, 2, 128, 0).empty());
}

TEST_CASE("layout attributes print and parse") {
  mlir::MLIRContext ctx;
  ctx.loadDialect<tessel::tile::TileDialect>();
  FragmentLayout l = FragmentLayout::mmaAccumulator(32, 16, 2, 1);
  auto attr = tessel::tile::FragmentLayoutAttr::get(&ctx, l);
  std::string text;
  llvm::raw_string_ostream os(text);
  mlir::Attribute(attr).print(os);
  CHECK(text == "#tile.fragment<" + l.str() + ">");
  mlir::Attribute parsed = mlir::parseAttribute(text, &ctx);
  REQUIRE(parsed);
  CHECK(llvm::cast<tessel::tile::FragmentLayoutAttr>(parsed).getLayout() == l);
  mlir::Attribute shared = mlir::parseAttribute("#tile.shared<[64, 32], elem = 2, swizzle = 64, pad = 0>", &ctx);
  REQUIRE(shared);
  CHECK(llvm::cast<tessel::tile::SharedLayoutAttr>(shared).getLayout() == SharedLayout({64, 32}, 2, 64, 0));
}
