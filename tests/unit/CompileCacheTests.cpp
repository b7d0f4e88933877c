//===- CompileCacheTests.cpp - compiles that skip the passes --------------===//
#include <catch2/catch.hpp>

#include "tessel/dsl/Compile.h"
#include "tessel/runtime/Cache.h"

#include <cstdlib>
#include <filesystem>
#include <unistd.h>
#include <fmt/format.h>

using namespace tessel;
namespace fs = std::filesystem;

namespace {
/// A kernel with a fragment, so that it has a layout to record; `factor`
/// makes programs that differ only in a constant.
Program scaleRows(double factor) {
  Program p("scale_rows");
  Expr m = p.sym("M");
  Tensor x = p.tensor("x", {m, 64}, DType::f32);
  p.kernel({ceil_div(m, 32)}, 128, [&](Expr bx) {
    Buffer f = alloc_fragment({32, 64}, DType::f32, "rows");
    Buffer t = x.tile({bx * 32, 0}, {32, 64});
    copy(t, f);
    parallel(32, 64, [&](Expr i, Expr j) { f(i, j) = f(i, j) * factor; });
    copy(f, t);
  });
  return p;
}
} // namespace

TEST_CASE("a program compiled before skips the passes and gives the same kernel", "[cache]") {
  fs::path dir = fs::temp_directory_path() / fmt::format("tessel-compile-cache-test-{}", ::getpid());
  fs::remove_all(dir);
  setenv("TESSEL_CACHE_DIR", dir.c_str(), 1);
  unsetenv("TESSEL_CACHE");
  Program p = scaleRows(3.0);
  Kernel first = compile(p, {.arch = "sm_80"});
  CHECK_FALSE(first.times().irCacheHit);
  CHECK_FALSE(first.times().passMs.empty());
  Kernel again = compile(p, {.arch = "sm_80"});
  CHECK(again.times().irCacheHit);
  CHECK(again.times().passMs.empty());
  CHECK(again.cuda() == first.cuda());
  CHECK(again.loweredIr() == first.loweredIr());
  CHECK(again.cubin() == first.cubin());
  CHECK(rt::encodeSpec(again.spec()) == rt::encodeSpec(first.spec()));
  REQUIRE(again.layouts().size() == first.layouts().size());
  for (size_t i = 0; i < first.layouts().size(); ++i) {
    CHECK(again.layouts()[i].layout == first.layouts()[i].layout);
    CHECK(again.layouts()[i].svg() == first.layouts()[i].svg());
  }
  // The entry is on disk for later processes.
  int entries = 0;
  for (auto &e : fs::directory_iterator(dir)) entries += e.path().extension() == ".tir";
  CHECK(entries == 1);

  // Another constant, another target, no TMA: each its own entry.
  Program q = scaleRows(4.0);
  CHECK_FALSE(compile(q, {.arch = "sm_80"}).times().irCacheHit);
  CHECK_FALSE(compile(p, {.arch = "sm_90a"}).times().irCacheHit);
  CHECK_FALSE(compile(p, {.arch = "sm_90a", .tma = false}).times().irCacheHit);
  CHECK(compile(p, {.arch = "sm_90a"}).times().irCacheHit);

  // IR dumps and per-pass hooks need the passes to run.
  fs::path dump = dir / "dump";
  Kernel dumped = compile(p, {.arch = "sm_80", .dumpIrDir = dump.string()});
  CHECK_FALSE(dumped.times().irCacheHit);
  CHECK(fs::exists(dump / "kernel.cu"));
  int hooked = 0;
  compile(p, {.arch = "sm_80", .afterPass = [&](const std::string &, mlir::Operation *) { ++hooked; }});
  CHECK(hooked > 5);

  // A new process's view: nothing in memory. The lowered IR and the PTX
  // are read from the entries when asked for, and given again (by the
  // passes, by NVRTC) when the entries went away in between.
  clearCompileCacheMemory();
  Kernel fromDisk = compile(p, {.arch = "sm_80"});
  CHECK(fromDisk.times().irCacheHit);
  CHECK_FALSE(fromDisk.times().nvrtcCalled);
  CHECK(fromDisk.cubin() == first.cubin());
  CHECK(fromDisk.loweredIr() == first.loweredIr());
  CHECK(fromDisk.ptx() == first.ptx());
  CHECK(fromDisk.layouts()[0].svg() == first.layouts()[0].svg());
  clearCompileCacheMemory();
  Kernel orphan = compile(p, {.arch = "sm_80"});
  REQUIRE(orphan.times().irCacheHit);
  for (auto &e : fs::directory_iterator(dir))
    if (e.path().extension() == ".tir" || e.path().extension() == ".tbin") fs::remove(e.path());
  CHECK(orphan.loweredIr() == first.loweredIr());
  CHECK(orphan.ptx() == first.ptx());

  // TESSEL_CACHE=none: every compile runs the passes.
  setenv("TESSEL_CACHE", "none", 1);
  CHECK_FALSE(compile(p, {.arch = "sm_80"}).times().irCacheHit);
  unsetenv("TESSEL_CACHE");
  fs::remove_all(dir);
}
