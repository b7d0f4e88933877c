//===- CompileMatrixTests.cpp - every library kernel to cubin -------------===//
//
// Each library kernel at several configurations goes through the pipeline
// and NVRTC to a cubin for sm_80, sm_90a and sm_100a, and ptxas assembles the
// PTX. No GPU is needed.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "tessel/kernels/Kernels.h"
#include "tessel/runtime/KernelSpec.h"
#include "tessel/harness/Library.h"
#include "UserKernels.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>

#include <regex>
#include <sstream>
#include <unistd.h>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::harness;

static void compileEverywhere(const std::string &name, const Params &overrides) {
  const LibraryKernel &entry = findKernel(name);
  for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
    // The target's own defaults, as `tessel run --arch` takes them.
    Program program = entry.build(withDefaults(entry, overrides, arch));
    Kernel k = compile(program, {arch, ""});
    INFO(name << " on " << arch);
    CHECK(k.cubin().size() > 0);
    // Every sm_100a build fits its registers.
    if (arch == "sm_100a") CHECK(k.spillBytes() == 0);
    CHECK(k.ptx().find(".target " + arch) != std::string::npos);
    auto ptx = std::filesystem::temp_directory_path() / fmt::format("tessel-{}-{}-{}.ptx", name, arch, ::getpid());
    std::ofstream(ptx) << k.ptx();
    std::string cmd = fmt::format("{} -arch={} {} -o /dev/null", TESSEL_PTXAS, arch, ptx.string());
    CHECK(std::system(cmd.c_str()) == 0);
    std::filesystem::remove(ptx);
  }
}

TEST_CASE("scaled_add compiles for every target") {
  compileEverywhere("scaled_add", {});
  compileEverywhere("scaled_add", {{"dtype", "bf16"}, {"block", "512"}, {"threads", "64"}});
  compileEverywhere("scaled_add", {{"dtype", "f16"}, {"block", "100"}});
}

TEST_CASE("partial_sum compiles for every target") {
  compileEverywhere("partial_sum", {});
  compileEverywhere("partial_sum", {{"dtype", "f32"}, {"block", "960"}, {"threads", "96"}});
  compileEverywhere("partial_sum", {{"dtype", "f16"}, {"block", "512"}, {"threads", "64"}});
}

// MX quantisation: ue8m0 scales by cvt.rp.satfinite on sm_100a, the
// software encoder below; scales stored through element code into the
// blocked layout.
TEST_CASE("quantize at MX granularity compiles for every target") {
  compileEverywhere("quantize", {{"granularity", "mx"}, {"blocked_scales", "1"}});
  compileEverywhere("quantize", {{"granularity", "mx"}, {"cols", "64"}, {"rows", "256"},
                                 {"out", "e5m2"}, {"dtype", "f32"}});
  const LibraryKernel &entry = findKernel("quantize");
  Program program =
      entry.build(withDefaults(entry, {{"granularity", "mx"}, {"blocked_scales", "1"}}, "sm_100a"));
  Kernel k = compile(program, {"sm_100a", ""});
  CHECK(k.ptx().find("cvt.rp.satfinite.ue8m0x2.f32") != std::string::npos);
  CHECK(k.ptx().find("cvt.rn.satfinite.e4m3x2.f32") != std::string::npos);
  CHECK(k.ptx().find(".local") == std::string::npos);
}

TEST_CASE("column_slice compiles for every target") {
  compileEverywhere("column_slice", {});
  compileEverywhere("column_slice", {{"dtype", "f32"}, {"block_cols", "64"}, {"block_rows", "8"}});
}

TEST_CASE("row_softmax compiles for every target") {
  compileEverywhere("row_softmax", {});
  compileEverywhere("row_softmax", {{"dtype", "f16"}, {"cols", "1000"}, {"rows", "1"}, {"threads", "256"}});
  compileEverywhere("row_softmax", {{"dtype", "bf16"}, {"cols", "20"}, {"rows", "16"}, {"threads", "64"}});
}

TEST_CASE("gemm compiles for every target") {
  compileEverywhere("gemm", {});
  compileEverywhere("gemm", {{"in", "bf16"}, {"transpose_a", "1"}, {"transpose_b", "1"}});
  compileEverywhere("gemm", {{"out", "f16"}, {"block_m", "128"}, {"block_n", "128"}, {"threads", "256"}});
  compileEverywhere("gemm", {{"in", "bf16"}, {"block_m", "128"}, {"block_n", "256"}, {"block_k", "64"},
                             {"threads", "256"}, {"policy", "full_row"}, {"transpose_a", "1"}});
  compileEverywhere("gemm", {{"instruction", "mma_sync"}, {"policy", "full_col"}, {"transpose_b", "1"}});
}

static Kernel compileForHopper(const std::string &name, const Params &overrides) {
  const LibraryKernel &entry = findKernel(name);
  Program program = entry.build(withDefaults(entry, overrides));
  return compile(program, {"sm_90a", ""});
}

// cluster_m=2: the grid launches in clusters of two blocks that share each
// B tile through TMA multicast (sm_90a, and sm_100a's TMA); the launch
// contract carries the cluster shape through the compile cache's text form.
TEST_CASE("gemm in clusters of two multicasts its B tiles") {
  Params p = {{"in", "bf16"}, {"out", "f16"}, {"block_m", "128"}, {"block_n", "256"},
              {"block_k", "64"}, {"threads", "256"}, {"stages", "4"}, {"swizzle", "8"},
              {"cluster_m", "2"}};
  for (std::string arch : {"sm_90a", "sm_100a"}) {
    const LibraryKernel &entry = findKernel("gemm");
    Program program = entry.build(withDefaults(entry, p));
    Kernel k = compile(program, {arch, ""});
    INFO(arch << "\n" << k.performanceWarnings());
    CHECK(k.spec().cluster == std::array<unsigned, 3>{2, 1, 1});
    CHECK(k.cuda().find("tessel::tma_load_multicast(") != std::string::npos);
    CHECK(k.cuda().find("tessel::mbarrier_arrive_cluster(") != std::string::npos);
    CHECK(k.cuda().find("tessel::cluster_sync();") != std::string::npos);
    if (arch == "sm_90a") CHECK(k.performanceWarnings() == "");
    rt::KernelSpec decoded;
    REQUIRE(rt::decodeSpec(rt::encodeSpec(k.spec()), decoded));
    CHECK(decoded.cluster == k.spec().cluster);
  }
  const LibraryKernel &entry = findKernel("gemm");
  try {
    Program program = entry.build(withDefaults(entry, p));
    compile(program, {"sm_80", ""});
    FAIL("no error");
  } catch (const Error &e) {
    CHECK(std::string(e.what()).find("thread block clusters need sm_90a; the target is sm_80") !=
          std::string::npos);
  }
  // A damaged cache entry with a cluster of 0 blocks is not a launch contract.
  rt::KernelSpec spec;
  spec.name = "k";
  spec.cluster = {2, 1, 1};
  std::string text = rt::encodeSpec(spec);
  rt::KernelSpec out;
  CHECK(rt::decodeSpec(text, out));
  text.replace(text.size() - 5, 1, "0");
  CHECK_FALSE(rt::decodeSpec(text, out));
}

// persistent=1: one-dimensional launch of resident blocks walking the tiles
// (gridDim.x steps); warp-specialized on sm_90a and sm_100a, cp.async
// pipelined on sm_80 and in sm_90a's build without TMA.
TEST_CASE("a persistent gemm walks its tiles on every target") {
  Params p = {{"in", "bf16"}, {"out", "f16"}, {"block_m", "128"}, {"block_n", "128"},
              {"block_k", "64"}, {"threads", "256"}, {"stages", "3"}, {"swizzle", "8"},
              {"persistent", "1"}};
  const LibraryKernel &entry = findKernel("gemm");
  for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
    Program program = entry.build(withDefaults(entry, p));
    Kernel k = compile(program, {arch, ""});
    INFO(arch << "\n" << k.performanceWarnings());
    CHECK(k.spec().persistent);
    CHECK(k.cuda().find("gridDim.x") != std::string::npos);
    if (arch == "sm_90a") {
      CHECK(k.performanceWarnings() == "");
      CHECK(k.cuda().find("setmaxnreg") != std::string::npos);
      Program again = entry.build(withDefaults(entry, p));
      CHECK(compile(again, {arch, "", /*tma=*/false}).spec().persistent);
    }
    rt::KernelSpec decoded;
    REQUIRE(rt::decodeSpec(rt::encodeSpec(k.spec()), decoded));
    CHECK(decoded.persistent);
  }
}

// tma_store=1: the accumulator goes to a 128-byte-swizzled shared tile (no
// bank conflicts for the 8 rows a warp writes) and out by TMA boxes, and
// the storing thread's wait (only for the shared reads: C is never read
// back) moves to just before the next tile's epilogue writes the buffer
// again, so the store runs under the next mainloop. On sm_80 it is a plain
// copy out of shared memory; a tcgen05 gemm stages each column chunk of its
// tensor-memory accumulator.
TEST_CASE("gemm with tma_store overlaps its epilogue store with the next tile") {
  Params p = {{"in", "bf16"}, {"out", "f16"}, {"block_m", "128"}, {"block_n", "256"},
              {"block_k", "64"}, {"threads", "256"}, {"stages", "3"}, {"swizzle", "8"},
              {"warp_specialize", "on"}, {"persistent", "1"}, {"tma_store", "1"}};
  Kernel k = compileForHopper("gemm", p);
  INFO(k.performanceWarnings());
  CHECK(k.performanceWarnings() == "");
  const std::string &cuda = k.cuda();
  CHECK(k.spec().tensorMaps.size() == 3);
  size_t store = cuda.find("tessel::tma_store(");
  REQUIRE(store != std::string::npos);
  CHECK(cuda.find("cp.async.bulk.wait_group 0;") == std::string::npos);
  // One wait before the epilogue's barrier, inside the tile walk, and one
  // after the walk for the last tile's store.
  size_t firstWait = cuda.find("cp.async.bulk.wait_group.read 0;");
  REQUIRE(firstWait != std::string::npos);
  CHECK(firstWait < store);
  CHECK(cuda.find("cp.async.bulk.wait_group.read 0;", store) != std::string::npos);
  compileEverywhere("gemm", {{"out", "f16"}, {"block_m", "128"}, {"block_n", "128"},
                             {"threads", "256"}, {"tma_store", "1"}});
  // Out of shared memory: a diagnostic that names the staged tile.
  p["stages"] = "4";
  try {
    compileForHopper("gemm", p);
    FAIL("no error");
  } catch (const Error &e) {
    CHECK(std::string(e.what()).find("memref<128x256xf16, #tile.space<shared>>") != std::string::npos);
  }
}

// split_k: the K slices are the grid's third dimension, each adding its
// partial product into C (thread atomics, or a TMA reduce-add from the
// staged tile); a bf16 C and the persistent walk are errors that say why.
TEST_CASE("a split-K gemm adds its K slices into C") {
  Params p = {{"in", "bf16"}, {"out", "f16"}, {"block_m", "64"}, {"block_n", "64"},
              {"block_k", "64"}, {"threads", "128"}, {"stages", "6"}, {"split_k", "4"}};
  Kernel k = compileForHopper("gemm", p);
  INFO(k.performanceWarnings());
  CHECK(k.performanceWarnings() == "");
  CHECK(k.cuda().find("blockIdx.z") != std::string::npos);
  CHECK(k.cuda().find("tessel::atomic_add<tessel::order_relaxed>(&p5[") != std::string::npos);
  p["tma_store"] = "1";
  CHECK(compileForHopper("gemm", p).cuda().find("tessel::tma_reduce_add(") != std::string::npos);
  compileEverywhere("gemm", {{"split_k", "3"}, {"instruction", "mma_sync"}});
  auto error = [&](Params q) {
    try {
      compileForHopper("gemm", q);
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Params bf16 = p;
  bf16["out"] = "bf16";
  CHECK_THAT(error(bf16), Catch::Contains("so split-K takes an f32 or f16 C"));
  Params walk = p;
  walk["persistent"] = "1";
  CHECK_THAT(error(walk), Catch::Contains("no clusters, not persistent"));
  // tcgen05: each column chunk of the tensor-memory accumulator is added
  // from registers (or by TMA reduce-add from its staged chunk).
  const LibraryKernel &entry = findKernel("gemm");
  for (const char *tma : {"0", "1"}) {
    Params tcgen05 = p;
    tcgen05["instruction"] = "tcgen05";
    tcgen05["block_m"] = "128";
    tcgen05["tma_store"] = tma;
    Program program = entry.build(withDefaults(entry, tcgen05, "sm_100a"));
    Kernel k = compile(program, {"sm_100a", ""});
    CHECK(k.cuda().find("blockIdx.z") != std::string::npos);
    CHECK(k.cuda().find(std::string(tma) == "1" ? "tessel::tma_reduce_add(" : "tessel::atomic_add<") !=
          std::string::npos);
  }
}

// overlap_mma: the warp-specialized mainloop waits for the previous wgmma
// group, not its own, and ptxas keeps the groups asynchronous (no C7515
// "wgmma serialized" because something else writes the accumulator).
TEST_CASE("gemm with overlap_mma keeps one wgmma group in flight on sm_90a") {
  auto config = [](const char *in, const char *overlap) {
    return Params{{"in", in},         {"out", "f16"},     {"block_m", "128"},
                  {"block_n", "256"}, {"block_k", "64"},  {"threads", "256"},
                  {"stages", "4"},    {"warp_specialize", "on"}, {"overlap_mma", overlap}};
  };
  for (const char *in : {"f16", "bf16"}) {
    Kernel k = compileForHopper("gemm", config(in, "1"));
    INFO(in << "\n" << k.performanceWarnings());
    CHECK(k.cuda().find("wgmma.wait_group.sync.aligned 1") != std::string::npos);
    CHECK(k.performanceWarnings() == "");
    CHECK(compileForHopper("gemm", config(in, "0")).cuda().find("wgmma.wait_group.sync.aligned 1") ==
          std::string::npos);
  }
  compileEverywhere("gemm", {{"block_m", "128"}, {"block_n", "128"}, {"threads", "256"}, {"overlap_mma", "1"}});
}

// ptxas compiles the attention kernels as written: no wgmma serialized for
// want of registers (C7512), no setmaxnreg ignored (C7507, C7508).
TEST_CASE("flash attention kernels compile on sm_90a without ptxas performance warnings") {
  for (std::string name : {"flash_attention_fwd", "flash_attention_bwd"})
    for (std::string d : {"64", "128"})
      for (std::string variant : {"registers", "tma"}) {
        // Forward: the default step, and K a block ahead of V with turns.
        Params p = {{"head_dim", d}};
        if (name == "flash_attention_bwd") p["dq_atomics"] = variant;
        else if (variant == "tma") p.insert({{"overlap", "1"}, {"pingpong", "1"}});
        INFO(name << " head_dim=" << d << " variant=" << variant);
        CHECK(compileForHopper(name, p).performanceWarnings() == "");
      }
}

// K a block ahead of V: the last key step has no next block, so it issues
// only O += P V (a branch of its own, straight-line for ptxas) instead of
// scores that the mask would clear. Each branch commits its own groups:
// the prologue's scores, then both products, or the last one alone. At
// head_dim 256 (registers too tight for two copies of the step) the step
// stays whole.
TEST_CASE("the overlapped attention forward skips the scores past its last key block") {
  auto commits = [](const Kernel &k) {
    std::string cuda = k.cuda();
    size_t n = 0;
    for (size_t at = cuda.find("wgmma.commit_group"); at != std::string::npos;
         at = cuda.find("wgmma.commit_group", at + 1))
      ++n;
    return n;
  };
  for (std::string d : {"64", "128"})
    for (std::string persistent : {"0", "1"}) {
      Kernel k = compileForHopper("flash_attention_fwd", {{"head_dim", d}, {"overlap", "1"},
                                                          {"pingpong", "1"}, {"persistent", persistent}});
      INFO("head_dim " << d << " persistent " << persistent << "\n" << k.performanceWarnings());
      CHECK(commits(k) == 4);
      CHECK(k.performanceWarnings() == "");
    }
  CHECK(commits(compileForHopper("flash_attention_fwd", {{"head_dim", "256"}, {"overlap", "1"}})) == 3);
}

// A persistent forward's Q tile, loaded by the producer ahead of the tile,
// gets a second copy where shared memory has room (head_dim 128, two
// stages, O staged: 224 KiB), so the next tile's Q lands while this one's
// is read; with three stages it does not fit and stays single.
TEST_CASE("a persistent attention forward double-buffers Q where shared memory allows") {
  Params two = {{"persistent", "1"}, {"stages", "2"}, {"tma_store", "1"}};
  Params three = {{"persistent", "1"}, {"stages", "3"}, {"tma_store", "0"}};
  Kernel doubled = compileForHopper("flash_attention_fwd", two);
  Kernel single = compileForHopper("flash_attention_fwd", three);
  const int64_t q = 128 * 128 * 2, kv = 2 * 128 * 128 * 2;
  // Q twice, two stages of K and V, O: the rest is mbarriers.
  CHECK(doubled.spec().sharedBytes >= 2 * q + 2 * kv + q);
  CHECK(doubled.spec().sharedBytes < 2 * q + 2 * kv + q + 1024);
  CHECK(single.spec().sharedBytes >= q + 3 * kv);
  CHECK(single.spec().sharedBytes < q + 3 * kv + 1024);
}

// Packed sequences start on any row; the row vectors a kernel loads at a
// sequence's start still go through TMA (aligned tiles), so the main loops
// stay warp-specialized (which takes TMA for every load in them).
TEST_CASE("flash attention over packed sequences keeps TMA and warp specialization on sm_90a") {
  for (std::string name : {"flash_attention_fwd", "flash_attention_bwd"}) {
    Kernel k = compileForHopper(name, {{"varlen", "1"}, {"causal", "1"}});
    INFO(name);
    CHECK(k.cuda().find("setmaxnreg") != std::string::npos);
    CHECK(k.performanceWarnings() == "");
  }
}

TEST_CASE("flash attention kernels compile for every target") {
  compileEverywhere("flash_attention_fwd", {});
  compileEverywhere("flash_attention_fwd", {{"dtype", "f16"}, {"head_dim", "64"}, {"causal", "1"}});
  compileEverywhere("flash_attention_fwd", {{"head_dim", "256"}, {"stages", "1"}, {"varlen", "1"}});
  // Persistent: the register kernel walks its tiles on every target (on
  // sm_100a too, rather than the tcgen05 form, which has no walk and says
  // so), warp-specialized on sm_90a with packed sequences as well: the
  // producer reads cu_seqlens again in its own walk.
  compileEverywhere("flash_attention_fwd", {{"persistent", "1"}, {"causal", "1"}});
  for (std::string varlen : {"0", "1"}) {
    Kernel k = compileForHopper("flash_attention_fwd", {{"persistent", "1"}, {"varlen", varlen}});
    CHECK(k.spec().persistent);
    CHECK(k.cuda().find("setmaxnreg") != std::string::npos);
    CHECK(k.cuda().find("gridDim.x") != std::string::npos);
  }
  // Not warp-specialized, the TMA pipeline counts its iterations across
  // tiles in a per-thread counter, as any pipelined loop nested in another.
  Kernel plain = compileForHopper("flash_attention_fwd", {{"persistent", "1"}, {"warp_specialize", "off"}});
  CHECK(plain.cuda().find("setmaxnreg") == std::string::npos);
  CHECK(plain.cuda().find("tessel::tma_load(") != std::string::npos);
  CHECK(std::regex_search(plain.cuda(), std::regex(R"(__align__\(16\) int v\d+\[1\];)")));
  try {
    const LibraryKernel &entry = findKernel("flash_attention_fwd");
    entry.build(withDefaults(entry, {{"persistent", "1"}, {"variant", "ss"}}, "sm_100a"));
    FAIL("no error");
  } catch (const Error &e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("the register kernel's (variant=registers)"));
  }
  compileEverywhere("flash_attention_fwd",
                    {{"overlap", "1"}, {"pingpong", "1"}, {"causal", "1"}, {"head_dim", "64"}});
  compileEverywhere("flash_attention_bwd", {});
  compileEverywhere("flash_attention_bwd", {{"kv_reduction", "split"}, {"causal", "1"}, {"varlen", "1"}});
  compileEverywhere("flash_attention_bwd", {{"element_atomics", "1"}, {"dq_order", "release"},
                                            {"head_dim", "64"}});
}

// tma_store=1 on the attention forward: O goes through a swizzled shared
// tile and out by TMA; in the persistent walk the storing thread's wait for
// the shared reads moves into the next tile, before its first shared write
// and barrier. Packed sequences are an error (a tile would reach into the
// next sequence), as is the tcgen05 form.
TEST_CASE("the attention forward stores O by TMA with tma_store") {
  Params p = {{"persistent", "1"}, {"causal", "1"}, {"tma_store", "1"}};
  Kernel k = compileForHopper("flash_attention_fwd", p);
  INFO(k.performanceWarnings());
  CHECK(k.performanceWarnings() == "");
  const std::string &cuda = k.cuda();
  size_t store = cuda.find("tessel::tma_store(");
  REQUIRE(store != std::string::npos);
  size_t firstWait = cuda.find("cp.async.bulk.wait_group.read 0;");
  REQUIRE(firstWait != std::string::npos);
  CHECK(firstWait < store);
  CHECK(cuda.find("cp.async.bulk.wait_group.read 0;", store) != std::string::npos);
  CHECK(cuda.find("cp.async.bulk.wait_group 0;") == std::string::npos);
  compileEverywhere("flash_attention_fwd", {{"tma_store", "1"}, {"head_dim", "64"}});
  const LibraryKernel &entry = findKernel("flash_attention_fwd");
  auto error = [&](Params q, const std::string &arch) {
    try {
      Program program = entry.build(withDefaults(entry, q, arch));
      compile(program, {arch, ""});
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error({{"tma_store", "1"}, {"varlen", "1"}}, "sm_90a"),
             Catch::Contains("would reach into the next sequence's rows"));
  CHECK_THAT(error({{"tma_store", "1"}, {"variant", "ss"}}, "sm_100a"),
             Catch::Contains("the register kernel's (variant=registers)"));
  // O has a tile of its own where it fits beside the stages, and then Q's
  // tile is the producer's to load for the next tile of the walk; at
  // head_dim 256 O is staged in Q's tile instead, which the consumers load.
  CHECK(k.loweredIr().find("\"o_tile\"") != std::string::npos);
  CHECK(k.loweredIr().find("\"prologue_full\"") != std::string::npos);
  p["head_dim"] = "256";
  Kernel wide = compileForHopper("flash_attention_fwd", p);
  CHECK(wide.performanceWarnings() == "");
  CHECK(wide.loweredIr().find("\"o_tile\"") == std::string::npos);
  CHECK(wide.loweredIr().find("\"prologue_full\"") == std::string::npos);
  CHECK(wide.cuda().find("tessel::tma_store(") != std::string::npos);
}

TEST_CASE("row_lse compiles for every target") {
  compileEverywhere("row_lse", {});
  compileEverywhere("row_lse", {{"dtype", "bf16"}, {"head_dim", "128"}, {"block_m", "128"},
                                {"threads", "256"}, {"policy", "full_row"}});
}

// The benchmark configurations: warp-specialized and plain pipelines with
// TMA on sm_90a, cp.async pipelines elsewhere (4 stages of 128x256x64 do not
// fit sm_80's 163 KB, so sm_80 gets 3 stages of 128x128).
TEST_CASE("pipelined gemm configurations compile") {
  Params big = {{"in", "bf16"}, {"out", "f16"}, {"block_m", "128"}, {"block_n", "256"},
                {"block_k", "64"}, {"threads", "256"}, {"stages", "4"}, {"swizzle", "8"}};
  const LibraryKernel &entry = findKernel("gemm");
  for (std::string ws : {"on", "off"}) {
    Params p = big;
    p["warp_specialize"] = ws;
    Program program = entry.build(withDefaults(entry, p));
    Kernel k = compile(program, {"sm_90a", ""});
    INFO("warp_specialize=" << ws);
    CHECK(k.spec().threads == (ws == "on" ? 384 : 256));
    // One tensor map per operand: A's box is 128 rows of one 64-element
    // (128-byte) swizzle panel, B's 64 rows of one of its four panels.
    REQUIRE(k.spec().tensorMaps.size() == 2);
    CHECK(k.spec().tensorMaps[0].box == std::vector<int64_t>{128, 64});
    CHECK(k.spec().tensorMaps[1].box == std::vector<int64_t>{64, 64});
    CHECK(k.spec().tensorMaps[0].swizzle == 128);
    CHECK(k.cuda().find("cp.async.bulk.tensor") == std::string::npos); // in the device header
    CHECK(k.cuda().find("tessel::tma_load(&tma1") != std::string::npos);
    // Two consumer warpgroups take the registers the producer gives up; the
    // kernel promises one block per SM so that ptxas honours setmaxnreg.
    CHECK((k.cuda().find("setmaxnreg.dec.sync.aligned.u32 24") != std::string::npos) == (ws == "on"));
    CHECK((k.cuda().find("setmaxnreg.inc.sync.aligned.u32 240") != std::string::npos) == (ws == "on"));
    CHECK((k.cuda().find("__launch_bounds__(384, 1)") != std::string::npos) == (ws == "on"));
  }
  compileEverywhere("gemm", {{"block_m", "128"}, {"block_n", "128"}, {"block_k", "64"},
                             {"threads", "256"}, {"stages", "3"}, {"warp_specialize", "off"}});
  Params tooBig = big;
  Program program = entry.build(withDefaults(entry, tooBig));
  CHECK_THROWS_WITH(compile(program, {"sm_80", ""}),
                    Catch::Contains("bytes of shared memory; sm_80 allows 166912 per block") &&
                        Catch::Contains("x 4 pipeline stages"));
}

// Hand-scheduled warp specialization (roles, mbarriers, TMA) is sm_90a only.
TEST_CASE("tma_scale compiles for sm_90a") {
  for (Params p : {Params{}, Params{{"dtype", "bf16"}, {"cols", "128"}, {"rows", "16"}},
                   Params{{"accumulate", "1"}}}) {
    const LibraryKernel &entry = findKernel("tma_scale");
    Program program = entry.build(withDefaults(entry, p));
    Kernel k = compile(program, {"sm_90a", ""});
    CHECK(k.cubin().size() > 0);
    CHECK(k.spec().tensorMaps.size() == 2); // x in, y out
    CHECK(k.cuda().find("setmaxnreg.dec.sync.aligned.u32 40") != std::string::npos);
    bool add = p.count("accumulate");
    CHECK((k.cuda().find("tessel::tma_reduce_add(&tma1") != std::string::npos) == add);
    CHECK((k.cuda().find("tessel::tma_store(&tma1") != std::string::npos) == !add);
  }
  const LibraryKernel &entry = findKernel("tma_scale");
  // An explicit TMA copy of 40-byte rows cannot be carried; it says so at
  // the copy_async line.
  Program narrow = entry.build(withDefaults(entry, {{"cols", "20"}}));
  CHECK_THROWS_WITH(compile(narrow, {"sm_90a", ""}),
                    Catch::Contains("TmaScale.cpp") && Catch::Contains("TMA boxes are whole 16-byte rows"));
  Program program = entry.build(withDefaults(entry, {}));
  CHECK_THROWS_WITH(compile(program, {"sm_80", ""}), Catch::Contains("TMA copies (copy_async) need sm_90a; the target is sm_80"));
}

// A TMA load reads rows whose strides are whole 16-byte units; other
// arguments run the same program built with cp.async loads instead.
TEST_CASE("arguments TMA cannot read use the build without TMA") {
  const LibraryKernel &entry = findKernel("gemm");
  Params p = withDefaults(entry, {{"block_m", "128"}, {"block_n", "128"}, {"block_k", "64"},
                                  {"threads", "256"}, {"stages", "3"}, {"warp_specialize", "on"}});
  Program program = entry.build(p);
  Kernel k = compile(program, {"sm_90a", ""});
  REQUIRE(k.spec().tensorMaps.size() == 2);
  CHECK(k.spec().threads == 384);
  auto args = [](int64_t m, int64_t n, int64_t kk) {
    return std::vector<rt::LaunchArg>{
        rt::LaunchArg::integer(m), rt::LaunchArg::integer(n), rt::LaunchArg::integer(kk),
        rt::LaunchArg::buffer(256, {m, kk}), rt::LaunchArg::buffer(256, {kk, n}),
        rt::LaunchArg::buffer(256, {m, n})};
  };
  CHECK(&k.loadedFor(args(300, 200, 136)) == &k.loadedKernel());
  std::string why;
  CHECK_FALSE(rt::tensorMapFits(k.spec(), k.spec().tensorMaps[0], args(300, 200, 130), &why));
  CHECK(why == "argument 3 is read with TMA, whose row strides must be multiples of 16 bytes; "
               "dimension 0 has a stride of 260 bytes (extent 130 of f16)");
  rt::LoadedKernel &fallback = k.loadedFor(args(300, 200, 130));
  CHECK(&fallback != &k.loadedKernel());
  CHECK(fallback.spec().tensorMaps.empty());
  CHECK(fallback.spec().threads == 256); // no producer warpgroup without TMA
  CHECK(&k.loadedFor(args(300, 200, 130)) == &fallback); // built once
}

// Attention over shards that arrive while it runs: the query shard's wait
// precedes the Q load; on sm_90a the K/V waits sit in the producer
// warpgroup's loop, ahead of the TMA loads they guard (each followed by the
// proxy fence), and none is left in the consumers' loop.
TEST_CASE("streamed-shard attention waits in the producer, ahead of its loads") {
  for (bool causal : {false, true}) {
    AttentionConfig c;
    c.causal = causal;
    c.streamedShards = true;
    for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
      Program program = flashAttentionForward(c);
      Kernel k = compile(program, {arch, ""});
      INFO(arch << (causal ? " causal" : " full") << "\n" << k.cuda());
      CHECK(k.cubin().size() > 0);
      const std::string &src = k.cuda();
      size_t waits = 0;
      for (size_t at = src.find("flag_wait("); at != std::string::npos; at = src.find("flag_wait(", at + 1))
        ++waits;
      // The Q wait, and the K/V wait in the loop (and, software-pipelined,
      // in the prologue).
      // sm_90a and sm_100a split the loop into roles, sm_80 does not.
      CHECK(waits >= (arch == "sm_80" ? 3u : 2u));
      if (arch == "sm_90a") {
        CHECK(k.performanceWarnings() == "");
        size_t producer = src.find("setmaxnreg.dec");
        REQUIRE(producer != std::string::npos);
        size_t wait = src.find("flag_wait(", producer);
        size_t load = src.find("cp.async.bulk.tensor", producer);
        REQUIRE(wait != std::string::npos);
        CHECK(wait < load);
      }
    }
  }
  AttentionConfig overlapped;
  overlapped.streamedShards = overlapped.overlap = true;
  CHECK_THROWS_WITH(flashAttentionForward(overlapped),
                    Catch::Contains("streamed shards work without `overlap`"));
}

// sm_100a's gemm is tcgen05 (the library's target defaults): MMAs into
// tensor memory, no wgmma or mma.sync, and no register spills, plain and
// warp-specialized, for every input and output type and operand major-ness.
// The emulated build is the same kernel compiled for sm_90a.
TEST_CASE("the sm_100a gemm is tcgen05 without spills, and its emulation compiles for sm_90a") {
  const LibraryKernel &entry = findKernel("gemm");
  for (std::string ws : {"off", "on"})
    for (Params variant : {Params{}, Params{{"in", "bf16"}, {"out", "bf16"}, {"transpose_a", "1"}},
                           Params{{"out", "f16"}, {"transpose_b", "1"}, {"block_n", "128"}, {"threads", "256"}}}) {
      variant["warp_specialize"] = ws;
      for (std::string arch : {"sm_100a", "sm_100a-emu"}) {
        Program program = entry.build(withDefaults(entry, variant, arch));
        Kernel k = compile(program, {arch, ""});
        INFO(arch << " warp_specialize=" << ws << " " << variant.size() << " settings");
        CHECK(k.spillBytes() == 0);
        CHECK(k.ptx().find("wgmma") == std::string::npos);
        CHECK(k.ptx().find("mma.sync") == std::string::npos);
        if (arch == "sm_100a") {
          CHECK(k.ptx().find(".target sm_100a") != std::string::npos);
          CHECK(k.ptx().find("tcgen05.mma.cta_group::1.kind::f16") != std::string::npos);
          CHECK(k.ptx().find("tcgen05.commit") != std::string::npos);
          CHECK(k.ptx().find("tcgen05.ld.sync.aligned.32x32b") != std::string::npos);
          // Warp-specialized: a producer warpgroup beside the consumers.
          int threads = variant.count("threads") ? std::stoi(variant["threads"]) : 128;
          CHECK(k.spec().threads == threads + (ws == "on" ? 128 : 0));
        } else {
          CHECK(k.ptx().find(".target sm_90a") != std::string::npos);
          CHECK(k.ptx().find("tcgen05.") == std::string::npos);
          CHECK(k.cuda().find("tessel::emu::tcgen05_mma<") != std::string::npos);
        }
      }
    }
  // block_m is every tensor-memory lane.
  CHECK_THROWS_WITH(entry.build(withDefaults(entry, {{"block_m", "64"}}, "sm_100a")),
                    Catch::Contains("a tcgen05 gemm takes block_m = 128"));
}

// The ts form (A stored into tensor memory from registers) assembles for
// sm_100a and compiles for its emulation.
TEST_CASE("a tcgen05 gemm with A in tensor memory compiles for sm_100a") {
  Program p = test::tsGemm();
  Kernel k = compile(p, {"sm_100a", ""});
  CHECK(k.ptx().find("tcgen05.mma.cta_group::1.kind::f16 [%r") != std::string::npos);
  auto ptx = std::filesystem::temp_directory_path() / fmt::format("tessel-ts-gemm-{}.ptx", ::getpid());
  std::ofstream(ptx) << k.ptx();
  std::string cmd = fmt::format("{} -arch=sm_100a {} -o /dev/null", TESSEL_PTXAS, ptx.string());
  CHECK(std::system(cmd.c_str()) == 0);
  std::filesystem::remove(ptx);
  CHECK(k.spillBytes() == 0);
  CHECK(compile(p, {"sm_100a-emu", ""}).cuda().find("tessel::emu::tcgen05_mma<") != std::string::npos);
}

// A tcgen05 kernel's checks: MMAs into tensor memory, no wgmma, no spills,
// and (ts) at least one product whose A is a tensor-memory address ([%r]),
// not a descriptor.
static void checkTcgen05Kernel(const Kernel &k, bool aInTmemExpected) {
  CHECK(k.spillBytes() == 0);
  const std::string &ptx = k.ptx();
  CHECK(ptx.find("tcgen05.mma.cta_group::1.kind::f16") != std::string::npos);
  CHECK(ptx.find("wgmma") == std::string::npos);
  CHECK(ptx.find("mma.sync") == std::string::npos);
  bool aInTmem = false;
  std::istringstream lines(ptx);
  for (std::string line; std::getline(lines, line);)
    aInTmem |= line.find("tcgen05.mma") != std::string::npos && line.find("], [%r") != std::string::npos;
  CHECK(aInTmemExpected == aInTmem);
}

// The sm_100a attention forward forms: tcgen05 into tensor memory, P through
// shared memory (ss) or packed in tensor memory (ts), without spills, for
// every head_dim, causal or not, packed or not; the emulation compiles them
// for sm_90a. An unknown form is an error, never a default.
TEST_CASE("the sm_100a attention forward forms compile without spills") {
  const LibraryKernel &entry = findKernel("flash_attention_fwd");
  for (std::string variant : {"ss", "ts", "ws"})
    for (std::string d : {"64", "128", "256"})
      for (std::string causal : {"0", "1"}) {
        // ws keeps two tiles' S and O in tensor memory: not at head_dim 256.
        if (variant == "ws" && d == "256") continue;
        Params p = {{"variant", variant}, {"head_dim", d}, {"causal", causal},
                    {"varlen", d == "64" ? "1" : "0"}};
        Program program = entry.build(withDefaults(entry, p, "sm_100a"));
        INFO(variant << " head_dim " << d << " causal " << causal);
        checkTcgen05Kernel(compile(program, {"sm_100a", ""}), variant != "ss");
      }
  CHECK_THROWS_WITH(entry.build(withDefaults(entry, {{"variant", "fa4"}}, "sm_100a")),
                    Catch::Contains("use one of registers, ss, ts, ws"));
  // ws: 512 threads in roles, with setmaxnreg moving registers to the
  // softmax warpgroups; its limits are errors that say which.
  CHECK(withDefaults(entry, {{"variant", "ws"}}, "sm_100a").at("threads") == "512");
  {
    Program ws = entry.build(withDefaults(entry, {{"variant", "ws"}}, "sm_100a"));
    const std::string &ptx = compile(ws, {"sm_100a", ""}).ptx();
    CHECK(ptx.find("setmaxnreg.inc.sync.aligned.u32 184") != std::string::npos);
    CHECK(ptx.find("mbarrier.try_wait") != std::string::npos);
  }
  CHECK_THROWS_WITH(entry.build(withDefaults(entry, {{"variant", "ws"}, {"head_dim", "256"}}, "sm_100a")),
                    Catch::Contains("head_dim 64 or 128"));
  CHECK_THROWS_WITH(
      entry.build(withDefaults(entry, {{"variant", "ws"}, {"threads", "256"}}, "sm_100a")),
      Catch::Contains("threads 512"));
  CHECK_THROWS_WITH(
      entry.build(withDefaults(entry, {{"variant", "ws"}, {"stages", "1"}}, "sm_100a")),
      Catch::Contains("stages >= 2"));
  Program tooManyStages =
      entry.build(withDefaults(entry, {{"variant", "ws"}, {"stages", "3"}}, "sm_100a"));
  CHECK_THROWS_WITH(compile(tooManyStages, {"sm_100a", ""}),
                    Catch::Contains("FlashAttentionTcgen05Ws.cpp") &&
                        Catch::Contains("bytes of shared memory"));
  // sm_100a picks the tcgen05 form unless asked otherwise.
  CHECK(withDefaults(entry, {}, "sm_100a").at("variant") == "ss");
  CHECK(withDefaults(entry, {}, "sm_90a").at("variant") == "registers");
  CHECK(withDefaults(entry, {{"overlap", "1"}}, "sm_100a").at("variant") == "registers");
}

// The sm_100a attention backward forms: S^T, dP^T, dK, dV and dQ in tensor
// memory, P^T through shared memory (ss) or over S^T (ts), for both head_dims,
// causal or not, packed or not, with two stages (three are over the shared
// memory limit: a diagnostic, not a crash).
TEST_CASE("the sm_100a attention backward forms compile without spills") {
  const LibraryKernel &entry = findKernel("flash_attention_bwd");
  for (std::string variant : {"ss", "ts"})
    for (std::string d : {"64", "128"})
      for (std::string causal : {"0", "1"}) {
        Params p = {{"variant", variant}, {"head_dim", d}, {"causal", causal},
                    {"varlen", causal}};
        Params full = withDefaults(entry, p, "sm_100a");
        INFO(variant << " head_dim " << d << " causal " << causal);
        CHECK(full.at("block_m") == "128");
        CHECK(full.at("stages") == "2");
        Program program = entry.build(full);
        checkTcgen05Kernel(compile(program, {"sm_100a", ""}), variant == "ts");
      }
  CHECK(withDefaults(entry, {}, "sm_100a").at("variant") == "ss");
  CHECK(withDefaults(entry, {}, "sm_90a").at("variant") == "registers");
  CHECK_THROWS_WITH(entry.build(withDefaults(entry, {{"variant", "ws"}}, "sm_100a")),
                    Catch::Contains("use one of registers, ss, ts"));
  CHECK_THROWS_WITH(entry.build(withDefaults(entry, {{"block_m", "64"}}, "sm_100a")),
                    Catch::Contains("block_m 128"));
  // Three stages of Q and dO at head_dim 128: over the limit, said at the
  // kernel's line.
  Program tooBig =
      entry.build(withDefaults(entry, {{"variant", "ss"}, {"stages", "3"}}, "sm_100a"));
  CHECK_THROWS_WITH(compile(tooBig, {"sm_100a", ""}),
                    Catch::Contains("FlashAttentionBackward.cpp") &&
                        Catch::Contains("bytes of shared memory; sm_100a allows 232448"));
}

// sm_90a: dQ by TMA unless the caller asks for ordered or per-element adds
// (a TMA reduce-add is relaxed); query rows at 128 a step by default at
// head_dim 64, with either dQ path.
TEST_CASE("the sm_90a attention backward defaults") {
  const LibraryKernel &entry = findKernel("flash_attention_bwd");
  Params keys = withDefaults(entry, {}, "sm_90a");
  CHECK(keys.at("dq_atomics") == "tma");
  CHECK(keys.at("block_m") == "64");
  CHECK(keys.at("scores") == "keys");
  Params rows = withDefaults(entry, {{"head_dim", "64"}}, "sm_90a");
  CHECK(rows.at("dq_atomics") == "tma");
  CHECK(rows.at("block_m") == "128");
  CHECK(rows.at("scores") == "queries");
  CHECK(withDefaults(entry, {{"dq_order", "release"}}, "sm_90a").at("dq_atomics") == "registers");
  CHECK(withDefaults(entry, {{"element_atomics", "1"}}, "sm_90a").at("dq_atomics") ==
        "registers");
  CHECK(withDefaults(entry, {{"dq_atomics", "registers"}}, "sm_90a").at("dq_atomics") ==
        "registers");
  CHECK(withDefaults(entry, {}, "sm_80").at("dq_atomics") == "registers");
  // Ordered adds by query rows: from registers, and it compiles.
  Params ordered = withDefaults(entry, {{"head_dim", "64"}, {"dq_order", "release"}}, "sm_90a");
  CHECK(ordered.at("scores") == "queries");
  CHECK(ordered.at("dq_atomics") == "registers");
  Program program = entry.build(ordered);
  CHECK_NOTHROW(compile(program, {"sm_90a", ""}));
}

TEST_CASE("paged_decode and mla_decode compile for every target") {
  // One program per configuration on all three targets: mma.sync, wgmma's
  // fallback remark and tcgen05's alike.
  compileEverywhere("paged_decode", {});
  compileEverywhere("paged_decode", {{"split", "1"}, {"page_size", "128"}, {"group", "8"}});
  compileEverywhere("paged_decode", {{"dtype", "f16"}, {"head_dim", "64"}, {"page_size", "256"},
                                     {"block_n", "128"}, {"stages", "2"}});
  compileEverywhere("paged_decode", {{"fp8_cache", "1"}, {"split", "1"}});
  compileEverywhere("mla_decode", {});
  compileEverywhere("mla_decode", {{"split", "1"}, {"page_size", "16"}});
}
