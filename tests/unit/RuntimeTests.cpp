//===- RuntimeTests.cpp - cache, grid evaluation, driver loading ----------===//
#include <catch2/catch.hpp>

#include "tessel/runtime/Cache.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Error.h"
#include "tessel/runtime/Launch.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <fmt/format.h>

using namespace tessel;
using namespace tessel::rt;
namespace fs = std::filesystem;

TEST_CASE("cache entries round-trip and corrupt ones are rejected") {
  Binary bin{"cubin-bytes\x01\x02", ".version 9.0", "(C7512) Potential Performance Loss\n"};
  std::string bytes = KernelCache::encode(bin);
  Binary out;
  REQUIRE(KernelCache::decode(bytes, out));
  CHECK(out.cubin == bin.cubin);
  CHECK(out.ptx == bin.ptx);
  CHECK(out.performanceWarnings == bin.performanceWarnings);
  std::string flipped = bytes;
  flipped[flipped.size() - 3] ^= 0x20;
  CHECK_FALSE(KernelCache::decode(flipped, out));
  CHECK_FALSE(KernelCache::decode(bytes.substr(0, bytes.size() - 1), out));
  CHECK_FALSE(KernelCache::decode("garbage", out));
}

TEST_CASE("cache keys depend on source, arch and options") {
  std::string k = KernelCache::key("src", "sm_90a", {});
  CHECK(k == KernelCache::key("src", "sm_90a", {}));
  CHECK(k != KernelCache::key("src2", "sm_90a", {}));
  CHECK(k != KernelCache::key("src", "sm_80", {}));
  CHECK(k != KernelCache::key("src", "sm_90a", {"-G"}));
}

TEST_CASE("the disk cache is found by a new cache, and a truncated entry is rebuilt") {
  fs::path dir = fs::temp_directory_path() / fmt::format("tessel-cache-test-{}", ::getpid());
  fs::remove_all(dir);
  setenv("TESSEL_CACHE_DIR", dir.c_str(), 1);
  unsetenv("TESSEL_CACHE");
  const std::string src = "extern \"C\" __global__ void k(float *p) { p[threadIdx.x] = 1.0f; }\n";
  KernelCache &cache = KernelCache::global();
  cache.clearMemory();
  int compiles = cache.stats().nvrtcCompiles;
  auto first = cache.getOrCompile(src, "sm_80");
  CHECK(cache.stats().nvrtcCompiles == compiles + 1);
  cache.clearMemory(); // as a new process would
  int diskHits = cache.stats().diskHits;
  auto second = cache.getOrCompile(src, "sm_80");
  CHECK(cache.stats().diskHits == diskHits + 1);
  CHECK(second->cubin == first->cubin);
  // Truncate the entry: it must be rejected and rebuilt, never loaded.
  fs::path entry = dir / (KernelCache::key(src, "sm_80", {}) + ".tbin");
  REQUIRE(fs::exists(entry));
  fs::resize_file(entry, fs::file_size(entry) / 2);
  cache.clearMemory();
  int rejected = cache.stats().diskRejected;
  auto third = cache.getOrCompile(src, "sm_80");
  CHECK(cache.stats().diskRejected == rejected + 1);
  CHECK(third->cubin == first->cubin);
  unsetenv("TESSEL_CACHE_DIR");
  fs::remove_all(dir);
}

TEST_CASE("an unusable disk cache is skipped, with a warning, never a crash") {
  fs::path dir = fs::temp_directory_path() / fmt::format("tessel-cache-unusable-{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  setenv("TESSEL_CACHE_DIR", dir.c_str(), 1);
  unsetenv("TESSEL_CACHE");
  KernelCache &cache = KernelCache::global();
  // An entry's path taken by a directory: compiled, and the directory left.
  const std::string src = "extern \"C\" __global__ void k(int *p) { p[threadIdx.x] = 2; }\n";
  fs::path entry = dir / (KernelCache::key(src, "sm_80", {}) + ".tbin");
  fs::create_directories(entry / "inside");
  cache.clearMemory();
  int compiles = cache.stats().nvrtcCompiles;
  auto bin = cache.getOrCompile(src, "sm_80");
  CHECK(bin->cubin.size() > 0);
  CHECK(cache.stats().nvrtcCompiles == compiles + 1);
  CHECK(fs::is_directory(entry / "inside"));
  // A cache "directory" that is a file: compiles go on without the cache.
  fs::path file = dir / "plain-file";
  std::ofstream(file) << "x";
  setenv("TESSEL_CACHE_DIR", (file / "sub").c_str(), 1);
  cache.clearMemory();
  const std::string src2 = "extern \"C\" __global__ void k(int *p) { p[threadIdx.x] = 3; }\n";
  CHECK(cache.getOrCompile(src2, "sm_80")->cubin.size() > 0);
  CHECK(fs::is_regular_file(file));
  unsetenv("TESSEL_CACHE_DIR");
  fs::remove_all(dir);
}

TEST_CASE("NVRTC errors show the generated line") {
  try {
    compileCuda("extern \"C\" __global__ void k() {\n  int x = undefined_name;\n}\n", "sm_80");
    FAIL("expected an error");
  } catch (const Error &e) {
    std::string msg = e.what();
    CHECK(msg.find("nvrtcCompileProgram failed for sm_80") != std::string::npos);
    CHECK(msg.find("generated line 2:   int x = undefined_name;") != std::string::npos);
  }
}

// ptxas ignores setmaxnreg unless the kernel promises one block per SM; the
// note it prints is kept with the binary.
TEST_CASE("ptxas performance warnings reach the binary") {
  auto kernel = [](const std::string &bounds) {
    return "extern \"C\" __global__ void __launch_bounds__(" + bounds +
           ") k(float *p) {\n  asm volatile(\"setmaxnreg.dec.sync.aligned.u32 40;\");\n"
           "  p[threadIdx.x] = 1.0f;\n}\n";
  };
  Binary ignored = compileCuda(kernel("384"), "sm_90a");
  CHECK(ignored.performanceWarnings.rfind("(C7508) Potential Performance Loss: 'setmaxnreg' ignored", 0) == 0);
  CHECK(compileCuda(kernel("384, 1"), "sm_90a").performanceWarnings.empty());
}

// Two register-A wgmmas in one group: the second's A pairs are packed
// after the first is issued, so ptxas injects a warpgroup.arrive before it
// (info C7519), which the binary reports; packing the array before the
// fence (what the emitter does) leaves nothing to inject.
TEST_CASE("an A register written inside a wgmma group is a performance warning") {
  auto kernel = [](const std::string &beforeFence) {
    std::string product =
        "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %9, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, %8, p, 1, 1, 0;\\n}\"\n"
        "    : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
        "    : \"r\"(tessel::pack_pair(A[0], A[1])), \"r\"(tessel::pack_pair(A[2], A[3])),\n"
        "      \"r\"(tessel::pack_pair(A[4], A[5])), \"r\"(tessel::pack_pair(A[6], A[7])),\n"
        "      \"l\"(desc), \"r\"(1) : \"memory\");\n";
    auto issue = [&](const std::string &a) {
      std::string text = product;
      for (size_t at; (at = text.find("A[")) != std::string::npos;) text.replace(at, 2, a);
      return text;
    };
    return "#include \"tessel_device.h\"\n"
           "extern \"C\" __global__ void __launch_bounds__(128, 1) k(float *out, const float *in,\n"
           "                                                       unsigned long long desc) {\n"
           "  tessel::bfloat16 a[16];\n"
           "  for (int i = 0; i < 16; ++i) a[i] = tessel::bfloat16(in[threadIdx.x * 16 + i]);\n"
           "  float c[4] = {0.f, 0.f, 0.f, 0.f};\n" +
           beforeFence + "  asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");\n" +
           issue("a[") + issue("a[8 + ") +
           "  asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\");\n"
           "  asm volatile(\"wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");\n"
           "  for (int i = 0; i < 4; ++i) out[threadIdx.x * 4 + i] = c[i];\n}\n";
  };
  std::string injected = compileCuda(kernel(""), "sm_90a").performanceWarnings;
  CHECK(injected.find("(C7519) warpgroup.arrive is injected") != std::string::npos);
  CHECK(compileCuda(kernel("  tessel::fence_pairs(a);\n"), "sm_90a").performanceWarnings.empty());
}

TEST_CASE("grid extents evaluate from symbols") {
  KernelSpec spec;
  spec.name = "k";
  // (s0 ceildiv 64, s1 * 2 + 1)
  spec.grid = {{{GridToken::Symbol, 0}, {GridToken::Const, 64}, {GridToken::CeilDiv, 0}},
               {{GridToken::Symbol, 1}, {GridToken::Const, 2}, {GridToken::Mul, 0},
                {GridToken::Const, 1}, {GridToken::Add, 0}}};
  auto g = spec.evaluateGrid({129, 3});
  CHECK(g[0] == 3);
  CHECK(g[1] == 7);
  CHECK(g[2] == 1);
  CHECK_THROWS_WITH(spec.evaluateGrid({0, 3}), Catch::Contains("grid dimension 0 evaluates to 0"));
  // Semi-affine extents: symbols times and over symbols (s0 * s1, s0
  // ceildiv s1); a zero divisor is an error, not a crash.
  KernelSpec products;
  products.name = "p";
  products.grid = {{{GridToken::Symbol, 0}, {GridToken::Symbol, 1}, {GridToken::Mul, 0}},
                   {{GridToken::Symbol, 0}, {GridToken::Symbol, 1}, {GridToken::CeilDiv, 0}}};
  auto p = products.evaluateGrid({10, 4});
  CHECK(p[0] == 40);
  CHECK(p[1] == 3);
  CHECK_THROWS_WITH(products.evaluateGrid({10, 0}),
                    Catch::Contains("grid dimension 0 evaluates to 0"));
  KernelSpec quotient;
  quotient.name = "q";
  quotient.grid = {{{GridToken::Symbol, 0}, {GridToken::Symbol, 1}, {GridToken::FloorDiv, 0}}};
  CHECK_THROWS_WITH(quotient.evaluateGrid({10, 0}),
                    Catch::Contains("grid dimension 0 divides by 0"));
}

TEST_CASE("arch compatibility is checked with a clear message") {
  std::string why;
  CHECK(archRunsOn("sm_90a", 90));
  CHECK(archRunsOn("sm_80", 86));
  CHECK_FALSE(archRunsOn("sm_90a", 80, &why));
  CHECK(why == "this kernel needs sm_90a, the device is sm_80");
  CHECK_FALSE(archRunsOn("sm_80", 75, &why));
  CHECK(why == "this kernel needs sm_80, the device is sm_75");
  // Later GPUs run an sm_80 build from its PTX, 8.x parts from its cubin.
  CHECK(archRunsOn("sm_80", 90));
  CHECK(runsThroughPtx("sm_80", 90));
  CHECK_FALSE(runsThroughPtx("sm_80", 86));
  CHECK_FALSE(runsThroughPtx("sm_90a", 90));
}

TEST_CASE("without a driver, Tessel says so instead of crashing") {
  std::string why;
  if (Driver::available(&why)) {
    WARN("a CUDA driver is present; the no-driver path is not exercised here");
    return;
  }
  CHECK(why.rfind("no CUDA driver", 0) == 0);
  CHECK_THROWS_WITH(Driver::get(), Catch::StartsWith("no CUDA driver"));
  CHECK_THROWS_WITH(DeviceBuffer(16), Catch::StartsWith("no CUDA driver"));
}

namespace {
/// A map whose bytes name the key it was made for.
CUtensorMap mapFor(CUdeviceptr address, int64_t rows) {
  CUtensorMap m;
  std::memset(&m, 0, sizeof(m));
  std::memcpy(&m, &address, sizeof(address));
  std::memcpy(reinterpret_cast<char *>(&m) + 8, &rows, sizeof(rows));
  return m;
}
bool sameMap(const CUtensorMap &a, const CUtensorMap &b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}
} // namespace

TEST_CASE("tensor maps are found by buffer and shape, and the oldest entry gives way") {
  TensorMapCache cache;
  CUtensorMap out;
  CHECK_FALSE(cache.find(0, 0x1000, {64, 32}, &out));
  cache.insert(0, 0x1000, {64, 32}, mapFor(0x1000, 64));
  REQUIRE(cache.find(0, 0x1000, {64, 32}, &out));
  CHECK(sameMap(out, mapFor(0x1000, 64)));
  // Another shape, another address, another map of the kernel, another
  // rank: each its own entry.
  CHECK_FALSE(cache.find(0, 0x1000, {32, 32}, &out));
  CHECK_FALSE(cache.find(0, 0x2000, {64, 32}, &out));
  CHECK_FALSE(cache.find(1, 0x1000, {64, 32}, &out));
  CHECK_FALSE(cache.find(0, 0x1000, {64, 32, 1}, &out));
  cache.insert(0, 0x1000, {32, 32}, mapFor(0x1000, 32));
  REQUIRE(cache.find(0, 0x1000, {32, 32}, &out));
  CHECK(sameMap(out, mapFor(0x1000, 32)));
  REQUIRE(cache.find(0, 0x1000, {64, 32}, &out));
  CHECK(sameMap(out, mapFor(0x1000, 64)));
  // Filling every entry of map 0 evicts the oldest (the first insert).
  for (int i = 0; i < TensorMapCache::kEntriesPerMap - 1; ++i)
    cache.insert(0, 0x10000 + 0x100 * i, {8}, mapFor(0x10000 + 0x100 * i, 8));
  CHECK_FALSE(cache.find(0, 0x1000, {64, 32}, &out));
  CHECK(cache.find(0, 0x1000, {32, 32}, &out));
  CHECK(cache.find(0, 0x10000, {8}, &out));
  // More extents than TMA takes are never kept.
  cache.insert(2, 0x3000, {1, 2, 3, 4, 5, 6}, mapFor(0x3000, 1));
  CHECK_FALSE(cache.find(2, 0x3000, {1, 2, 3, 4, 5, 6}, &out));
  CHECK(cache.insertions() == 2 + TensorMapCache::kEntriesPerMap - 1);
}
