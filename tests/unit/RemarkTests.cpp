//===- RemarkTests.cpp - what the compiler declines says why, at the line -===//
//
// The performance cliffs outside kernels ran into: each either goes away or
// leaves a remark naming its reason at the author's own file:line, in the
// Kernel (and a warning where the program asked for what was declined), the
// same on a compile served from the cache.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "tessel/dsl/Compile.h"
#include "UserKernels.h"

#include <algorithm>
#include <string>

using namespace tessel;

static std::string here(int line) { return std::string(__FILE__) + ":" + std::to_string(line); }

/// The kernel's remarks of `category` whose message contains `text`.
static std::vector<Remark> remarksOf(const Kernel &k, const std::string &category,
                                     const std::string &text = "") {
  std::vector<Remark> out;
  for (const Remark &r : k.remarks())
    if (r.category == category && r.message.find(text) != std::string::npos) out.push_back(r);
  return out;
}

static std::string allRemarks(const Kernel &k) {
  std::string out;
  for (const Remark &r : k.remarks()) out += r.str() + "\n";
  return out;
}

static CompileOptions quiet(const std::string &arch = "sm_90a") {
  CompileOptions options{arch};
  options.printWarnings = false;
  return options;
}

TEST_CASE("a paged cache's loads are issued ahead with the page they read") {
  // The page of each iteration is read from a table the kernel only reads:
  // that read is address arithmetic the producer runs ahead, so the loop
  // gets TMA and warp specialization as with `page = kt`.
  Program p = test::pagedCacheSum();
  Kernel k = compile(p, quiet());
  INFO(allRemarks(k));
  CHECK(remarksOf(k, "pipelining").empty());
  CHECK(remarksOf(k, "warp-specialization").empty());
  CHECK(remarksOf(k, "tma").empty());
  CHECK(k.spec().threads == 256); // the consumers and the TMA producer
}

TEST_CASE("a load whose address reads memory the kernel writes says which read blocks it") {
  Program p("paged_written");
  Expr n = p.sym("N");
  Tensor cache = p.tensor("cache", {n, 64, 128}, DType::f16);
  Tensor table = p.tensor("table", {n}, DType::i32);
  int loopLine = 0, readLine = 0;
  p.kernel({1}, 128, [&](Expr) {
    Buffer ks = alloc_shared({64, 128}, DType::f16);
    Buffer acc = alloc_fragment({64, 128}, DType::f32);
    Buffer pages = alloc_shared({64}, DType::i32);
    fill(pages, 0);
    loopLine = __LINE__ + 1;
    pipelined(n, 3, [&](Expr kt) {
      readLine = __LINE__ + 1;
      Expr page = cast(table(kt), DType::index);
      copy(cache.tile({page, 0, 0}, {drop, 64, 128}), ks);
      copy(ks, acc);
    });
    copy(pages, table.tile({0}, {64})); // the kernel writes the table
  });
  Kernel k = compile(p, quiet());
  INFO(allRemarks(k));
  std::vector<Remark> warnings = remarksOf(k, "pipelining", "this loop of 3 stages is not pipelined");
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].isWarning);
  CHECK(warnings[0].pass == "tessel-software-pipeline");
  CHECK(warnings[0].location == here(loopLine));
  CHECK(warnings[0].message.find("its source address depends on 'memref.load' at " +
                                 here(readLine) + " reads a tensor the kernel also writes") !=
        std::string::npos);
}

TEST_CASE("copies into constant windows of a staged tile are pipelined") {
  Program p("windows");
  Expr n = p.sym("N");
  Tensor a = p.tensor("a", {n * 64, 32}, DType::f16), b = p.tensor("b", {n * 64, 32}, DType::f16);
  Tensor out = p.tensor("out", {64, 64}, DType::f32);
  int firstCopy = 0;
  p.kernel({1}, 128, [&](Expr) {
    Buffer s = alloc_shared({64, 64}, DType::f16);
    Buffer acc = alloc_fragment({64, 64}, DType::f32);
    fill(acc, 0.0);
    pipelined(n, 3, [&](Expr kt) {
      firstCopy = __LINE__ + 1;
      copy(a.tile({kt * 64, 0}, {64, 32}), s.tile({0, 0}, {64, 32}));
      copy(b.tile({kt * 64, 0}, {64, 32}), s.tile({0, 32}, {64, 32}));
      copy(s, acc);
    });
    copy(acc, out.tile({0, 0}, {64, 64}));
  });
  for (const char *arch : {"sm_80", "sm_90a"}) {
    Kernel k = compile(p, quiet(arch));
    INFO(arch << "\n" << allRemarks(k));
    CHECK(remarksOf(k, "pipelining").empty());
    CHECK(k.loweredIr().find("cp_async_commit") != std::string::npos);
    if (std::string(arch) == "sm_90a") {
      // A TMA box fills whole rows: each window of columns says so at its
      // line.
      std::vector<Remark> tma = remarksOf(k, "tma", "a window of some of its buffer's columns");
      REQUIRE(tma.size() == 2);
      CHECK(tma[0].location == here(firstCopy));
      CHECK(tma[1].location == here(firstCopy + 1));
    }
  }
}

TEST_CASE("copies into windows of rows of a staged tile are TMA boxes, read from a page table") {
  // A paged cache: each step's two pages are named by a table the loop
  // reads, and each lands in its window of rows of the staged tile. On
  // sm_90a they are TMA boxes and the loop is warp-specialized (the
  // producer reads the page numbers); 4-row pages of 128-byte rows start
  // off the layout's 1024-byte period and stay cp.async, saying so (the
  // first page too: a buffer is filled one way).
  auto paged = [](int64_t pageRows) {
    Program p("paged_rows");
    Expr n = p.sym("N"), pages = p.sym("P");
    Tensor cache = p.tensor("cache", {pages, pageRows, 64}, DType::f16);
    Tensor table = p.tensor("table", {n * 2}, DType::i32);
    Tensor out = p.tensor("out", {2 * pageRows, 64}, DType::f32);
    p.kernel({1}, 128, [&](Expr) {
      Buffer s = alloc_shared({2 * pageRows, 64}, DType::f16);
      Buffer acc = alloc_fragment({2 * pageRows, 64}, DType::f32);
      fill(acc, 0.0);
      pipelined(n, 3, [&](Expr kt) {
        for (int64_t q = 0; q < 2; ++q)
          copy(cache.tile({table(kt * 2 + q), 0, 0}, {drop, pageRows, 64}),
               s.tile({q * pageRows, 0}, {pageRows, 64}));
        parallel(2 * pageRows, 64, [&](Expr i, Expr j) { acc(i, j) = acc(i, j) + cast(s(i, j), DType::f32); });
      });
      copy(acc, out.tile({0, 0}, {2 * pageRows, 64}));
    });
    return p;
  };
  Program wholePages = paged(16), smallPages = paged(4);
  Kernel whole = compile(wholePages, quiet("sm_90a"));
  INFO(allRemarks(whole));
  CHECK(remarksOf(whole, "tma").empty());
  CHECK(remarksOf(whole, "warp-specialization").empty());
  CHECK(remarksOf(whole, "pipelining").empty());
  CHECK(whole.cuda().find("tma_load") != std::string::npos);
  Kernel small = compile(smallPages, quiet("sm_90a"));
  INFO(allRemarks(small));
  CHECK(remarksOf(small, "tma", "starts at row 4").size() == 2);
  CHECK(remarksOf(small, "tma", "another window of its buffer").size() == 1);
  CHECK(remarksOf(small, "pipelining").empty());
  for (const char *arch : {"sm_80", "sm_100a"}) CHECK_NOTHROW(compile(wholePages, quiet(arch)));
}

TEST_CASE("a peer operand keeps TMA and warp specialization in its loop") {
  // Another rank's tile loads through the tensor's map for that rank: the
  // loop is split into a TMA producer and consumers as with local operands,
  // and nothing is said about the peer's load.
  Program p("peer_loop");
  Expr n = p.sym("N"), rank = p.sym("rank");
  Tensor a = p.tensor("a", {n * 64, 64}, DType::f16), b = p.tensor("b", {n * 64, 64}, DType::f16);
  Tensor out = p.tensor("out", {64, 64}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer as = alloc_shared({64, 64}, DType::f16), bs = alloc_shared({64, 64}, DType::f16);
    Buffer acc = alloc_fragment({64, 64}, DType::f32);
    fill(acc, 0.0);
    Buffer remote = peer(b, rank);
    pipelined(n, 2, [&](Expr kt) {
      copy(a.tile({kt * 64, 0}, {64, 64}), as);
      copy(remote.tile({kt * 64, 0}, {64, 64}), bs);
      gemm(as, bs, acc);
    });
    copy(acc, out.tile({0, 0}, {64, 64}));
  });
  Kernel k = compile(p, quiet());
  INFO(allRemarks(k));
  CHECK(remarksOf(k, "warp-specialization", "tile.peer").empty());
  CHECK(remarksOf(k, "tma").empty());
  CHECK(k.spec().threads == 256); // a producer warpgroup beside the 128 threads
  CHECK(k.cuda().find("tessel::PeerTensorMaps") != std::string::npos);
  CHECK(k.cuda().find(".at[p1]") != std::string::npos);
  CHECK(k.cuda().find("cp_async<") == std::string::npos);
}

TEST_CASE("warp specialization asked for and impossible is a warning at the loop") {
  // The load converts f32 to f16, which TMA cannot: the loop runs as a
  // cp.async pipeline, and the warning says why.
  Program p("asked");
  Expr n = p.sym("N");
  Tensor x = p.tensor("x", {n, 64}, DType::f32);
  int line = 0;
  p.kernel({1}, 128, [&](Expr) {
    Buffer s = alloc_shared({64, 64}, DType::f16);
    line = __LINE__ + 1;
    pipelined(ceil_div(n, 64), 2, {.warp_specialize = WarpSpecialize::on}, [&](Expr k) {
      copy(x.tile({k * 64, 0}, {64, 64}), s);
    });
  });
  Kernel k = compile(p, quiet());
  INFO(allRemarks(k));
  std::vector<Remark> ws = remarksOf(k, "warp-specialization");
  REQUIRE(ws.size() == 1);
  CHECK(ws[0].isWarning);
  CHECK(ws[0].location == here(line));
  CHECK(ws[0].message.find("cannot warp-specialize this pipelined loop, which asks for it") == 0);
  CHECK(ws[0].message.find("its loads are not all TMA: the copy converts its element type") !=
        std::string::npos);
  CHECK(k.spec().threads == 128);
  CHECK(remarksOf(k, "pipelining").empty());
}

TEST_CASE("a shared tile declared inside a pipelined body is loaded ahead") {
  Program p("tile_in_body");
  Expr n = p.sym("N");
  Tensor a = p.tensor("a", {n * 64, 64}, DType::f16);
  Tensor out = p.tensor("out", {64, 64}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer acc = alloc_fragment({64, 64}, DType::f32);
    fill(acc, 0.0);
    pipelined(n, 2, [&](Expr kt) {
      Buffer s = alloc_shared({64, 64}, DType::f16);
      copy(a.tile({kt * 64, 0}, {64, 64}), s);
      copy(s, acc);
    });
    copy(acc, out.tile({0, 0}, {64, 64}));
  });
  for (const char *arch : {"sm_80", "sm_90a"}) {
    Kernel k = compile(p, quiet(arch));
    INFO(arch << "\n" << allRemarks(k));
    CHECK(k.remarks().empty());
    CHECK(k.spec().threads == (std::string(arch) == "sm_90a" ? 256 : 128));
  }
}

/// A loop of two stages whose buffer is read after it, its ops built at
/// the caller's line: the same tile IR from two lines.
static void unpipelinable(Program &p, SrcLoc loc = SrcLoc::current()) {
  Expr n = p.sym("N");
  Tensor x = p.tensor("x", {n * 64}, DType::f32), y = p.tensor("y", {64}, DType::f32);
  p.kernel({1}, 64, [&](Expr) {
    Buffer s = alloc_shared({64}, DType::f32);
    pipelined(n, 2, [&](Expr kt) { copy(x.tile({kt * 64}, {64}), s, loc); }, loc);
    copy(s, y.tile({0}, {64}), loc);
  });
}

TEST_CASE("a compile served from the cache gives the remarks at its own program's lines") {
  Program first("cached_remarks");
  int firstLine = __LINE__ + 1;
  unpipelinable(first);
  Kernel cold = compile(first, quiet("sm_80"));
  Program second("cached_remarks");
  int secondLine = __LINE__ + 1;
  unpipelinable(second);
  Kernel warm = compile(second, quiet("sm_80"));
  CHECK(warm.times().irCacheHit);
  REQUIRE(cold.remarks().size() == warm.remarks().size());
  std::vector<Remark> coldWarnings = remarksOf(cold, "pipelining", "not pipelined");
  std::vector<Remark> warmWarnings = remarksOf(warm, "pipelining", "not pipelined");
  REQUIRE(coldWarnings.size() == 1);
  REQUIRE(warmWarnings.size() == 1);
  CHECK(coldWarnings[0].location == here(firstLine));
  CHECK(warmWarnings[0].location == here(secondLine));
  // The copies the reason names are the warm program's own.
  CHECK(coldWarnings[0].message.find(here(firstLine)) != std::string::npos);
  CHECK(warmWarnings[0].message.find(here(secondLine)) != std::string::npos);
  CHECK(warmWarnings[0].message.find(here(firstLine)) == std::string::npos);
  CHECK(warmWarnings[0].isWarning);
}
