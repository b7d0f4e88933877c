//===- GpuTests.cpp - library kernels checked on the GPU ------------------===//
//
// Each kernel runs at several shapes, tile multiples and not, on fresh random
// inputs with NaN-poisoned outputs, against a float64 CPU reference. Without
// a GPU the binary says so and skips.
//
//===----------------------------------------------------------------------===//
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "tessel/harness/Library.h"
#include "tessel/kernels/Kernels.h"
#include "tessel/harness/LibrarySupport.h"
#include "ScalarKernels.h"
#include "tessel/runtime/Cache.h"
#include "tessel/runtime/Driver.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <random>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::harness;

static std::string deviceArch() {
  return rt::nativeArch(rt::Driver::get().computeCapability());
}

static void checkKernel(const std::string &name, const Params &overrides, bool tma = true,
                        const std::string &arch = "") {
  const LibraryKernel &entry = findKernel(name);
  Params p = withDefaults(entry, overrides);
  Program program = entry.build(p);
  Kernel k = compile(program, {arch.empty() ? deviceArch() : arch, "", tma});
  uint64_t seed = std::random_device{}();
  CheckResult r = entry.check(k, p, seed);
  std::string line = fmt::format("{} {}: rel error {:.3e} (tolerance {:.0e}) {:.4f} ms seed {}", name,
                                 r.shape, r.relError, r.tolerance, r.ms, seed);
  fmt::print("{}\n", line);
  INFO(line);
  CHECK(r.passed);
}

TEST_CASE("scaled_add matches the reference", "[gpu]") {
  for (std::string dtype : {"f32", "f16", "bf16"})
    for (std::string n : {"1", "1000", "1024", "1000003", "4194304"})
      checkKernel("scaled_add", {{"dtype", dtype}, {"N", n}});
  checkKernel("scaled_add", {{"block", "512"}, {"threads", "64"}, {"N", "77777"}});
}

TEST_CASE("partial_sum adds its parts in f32", "[gpu]") {
  for (std::string dtype : {"f32", "f16", "bf16"})
    for (std::string parts : {"1", "2", "4", "7"})
      for (std::string n : {"1", "2047", "1000003"})
        checkKernel("partial_sum", {{"dtype", dtype}, {"P", parts}, {"N", n}});
  checkKernel("partial_sum", {{"block", "960"}, {"threads", "96"}, {"P", "3"}, {"N", "77777"}});
}

TEST_CASE("column_slice copies a column slice of rows exactly", "[gpu]") {
  checkKernel("column_slice", {});
  // Rows that are not whole blocks; a slice at the end of the rows.
  checkKernel("column_slice", {{"rows", "77"}, {"pitch", "1024"}, {"first", "768"}, {"cols", "256"}});
  checkKernel("column_slice", {{"dtype", "f32"}, {"block_cols", "64"}, {"rows", "4097"},
                               {"pitch", "192"}, {"first", "64"}, {"cols", "128"}});
}

TEST_CASE("row_softmax matches the reference", "[gpu]") {
  for (std::string dtype : {"f32", "f16", "bf16"})
    for (std::string m : {"1", "7", "1001", "4096"})
      checkKernel("row_softmax", {{"dtype", dtype}, {"M", m}});
  checkKernel("row_softmax", {{"cols", "1000"}, {"rows", "2"}, {"threads", "256"}, {"M", "333"}});
  checkKernel("row_softmax", {{"cols", "20"}, {"rows", "16"}, {"threads", "64"}, {"M", "45"}});
  checkKernel("row_softmax", {{"cols", "1"}, {"rows", "3"}, {"threads", "32"}, {"M", "10"}});
}

TEST_CASE("online softmax over gemm accumulators matches the reference", "[gpu]") {
  // Square splits warps over columns too, so the row reductions cross warps
  // through shared memory; full_row keeps them inside a warp.
  for (std::string dtype : {"f16", "bf16"})
    for (std::string policy : {"square", "full_row", "full_col"})
      for (std::string n : {"1", "64", "1000"})
        checkKernel("row_lse", {{"dtype", dtype}, {"policy", policy}, {"M", "300"}, {"N", n}});
  checkKernel("row_lse", {{"head_dim", "128"}, {"block_m", "128"}, {"threads", "256"},
                          {"M", "1000"}, {"N", "777"}});
}

TEST_CASE("gemm matches the reference", "[gpu]") {
  struct Shape { const char *m, *n, *k; };
  for (std::string in : {"f16", "bf16"})
    for (std::string ta : {"0", "1"})
      for (std::string tb : {"0", "1"})
        for (Shape s : {Shape{"256", "256", "256"}, Shape{"300", "200", "130"}, Shape{"1", "65", "33"}})
          checkKernel("gemm", {{"in", in}, {"transpose_a", ta}, {"transpose_b", tb},
                               {"M", s.m}, {"N", s.n}, {"K", s.k}});
  checkKernel("gemm", {{"out", "f16"}, {"M", "513"}, {"N", "255"}, {"K", "100"}});
  checkKernel("gemm", {{"block_m", "32"}, {"block_n", "128"}, {"block_k", "16"}, {"threads", "256"},
                       {"M", "1000"}, {"N", "1000"}, {"K", "1000"}});
  // Both instructions on every target that has them, each warp policy, and
  // the large tiles the benchmark uses.
  std::vector<std::string> instructions = {"mma_sync"};
  if (deviceArch() == "sm_90a") instructions.push_back("wgmma");
  for (std::string instr : instructions)
    for (std::string policy : {"square", "full_row", "full_col"})
      for (std::string ta : {"0", "1"})
        for (std::string tb : {"0", "1"})
          checkKernel("gemm", {{"in", "bf16"}, {"instruction", instr}, {"policy", policy},
                               {"block_m", "128"}, {"block_n", "128"}, {"block_k", "64"},
                               {"threads", "256"}, {"transpose_a", ta}, {"transpose_b", tb},
                               {"M", "520"}, {"N", "390"}, {"K", "200"}});
}

// FP8 (both formats, per-tensor and per-row scales, every output type) and
// i8 products against the float64 reference of the values the device
// holds: one k-step and several, K past the last tile, K whose rows TMA
// cannot read (the cp.async build), the library's large tiles with a TMA
// store, persistent and split-K forms.
TEST_CASE("8-bit gemms match the reference", "[gpu]") {
  if (deviceArch() != "sm_90a") {
    WARN("SKIPPED: 8-bit gemms run on wgmma (sm_90a); this GPU is " << deviceArch());
    return;
  }
  struct Shape { const char *m, *n, *k; };
  const std::vector<Shape> shapes = {{"256", "256", "128"}, {"300", "200", "160"},
                                     {"130", "520", "1000"}, {"1", "72", "64"}, {"200", "120", "136"}};
  Params big = {{"block_m", "128"}, {"block_n", "256"}, {"block_k", "128"}, {"threads", "256"},
                {"stages", "3"},    {"swizzle", "8"},   {"tma_store", "1"}};
  for (std::string in : {"e4m3", "e5m2"})
    for (std::string scale : {"none", "tensor", "row"})
      for (std::string out : {"bf16", "f16", "f32"})
        for (Shape s : shapes)
          checkKernel("gemm", {{"in", in}, {"out", out}, {"scale", scale}, {"transpose_b", "1"},
                               {"M", s.m}, {"N", s.n}, {"K", s.k}});
  for (std::string scale : {"tensor", "row"})
    for (std::string persistent : {"0", "1"}) {
      Params p = big;
      p.insert({{"in", "e4m3"}, {"out", "bf16"}, {"scale", scale}, {"transpose_b", "1"},
                {"persistent", persistent}, {"M", "1000"}, {"N", "1100"}, {"K", "640"}});
      checkKernel("gemm", p);
    }
  checkKernel("gemm", {{"in", "e4m3"}, {"out", "f32"}, {"scale", "row"}, {"transpose_b", "1"},
                       {"split_k", "3"}, {"M", "200"}, {"N", "300"}, {"K", "2048"}});
  // Block scales (1 x 128 for A, 128 x 128 for B): K past a whole block, N
  // past a whole scale block, one warpgroup or two, persistent.
  for (Shape s : {Shape{"256", "256", "512"}, Shape{"300", "200", "200"}, Shape{"1", "136", "1000"}})
    for (std::string threads : {"128", "256"})
      for (std::string persistent : {"0", "1"})
        checkKernel("gemm", {{"in", "e4m3"}, {"out", "bf16"}, {"scale", "block"},
                             {"transpose_b", "1"}, {"block_m", threads == "128" ? "64" : "128"},
                             {"block_n", "128"}, {"block_k", "128"}, {"threads", threads},
                             {"stages", "4"}, {"tma_store", persistent}, {"persistent", persistent},
                             {"M", s.m}, {"N", s.n}, {"K", s.k}});
  // Two K blocks a stage (block_k = 256): K ending in the first or the
  // second of a stage's blocks, or before it.
  for (Shape s : {Shape{"256", "256", "512"}, Shape{"300", "200", "200"}, Shape{"130", "136", "100"},
                  Shape{"1", "256", "1000"}})
    for (std::string persistent : {"0", "1"})
      checkKernel("gemm", {{"in", "e4m3"}, {"out", "bf16"}, {"scale", "block"}, {"transpose_b", "1"},
                           {"block_m", "128"}, {"block_n", "128"}, {"block_k", "256"},
                           {"threads", "256"}, {"stages", "2"}, {"tma_store", persistent},
                           {"persistent", persistent}, {"M", s.m}, {"N", s.n}, {"K", s.k}});
  // The two consumer warpgroups taking turns at the tensor cores, each
  // one's promotions under the other's wgmmas.
  for (std::string bk : {"128", "256"})
    checkKernel("gemm", {{"in", "e4m3"}, {"out", "bf16"}, {"scale", "block"}, {"transpose_b", "1"},
                         {"block_m", "128"}, {"block_n", "128"}, {"block_k", bk},
                         {"threads", "256"}, {"stages", bk == "128" ? "4" : "2"}, {"pingpong", "1"},
                         {"tma_store", "1"}, {"persistent", "1"}, {"M", "300"}, {"N", "384"},
                         {"K", "1000"}});
  for (Shape s : shapes)
    checkKernel("gemm", {{"in", "i8"}, {"out", "i32"}, {"transpose_b", "1"}, {"M", s.m},
                         {"N", s.n}, {"K", s.k}});
  Params wide = {{"block_m", "128"}, {"block_n", "256"}, {"block_k", "128"}, {"threads", "256"},
                 {"stages", "4"},    {"in", "i8"},      {"out", "i32"},     {"transpose_b", "1"},
                 {"M", "700"},       {"N", "600"},      {"K", "1024"}};
  checkKernel("gemm", wide);
  // i8 on mma.sync m16n8k32: the sm_80 build (its PTX compiled for this GPU
  // by the driver) and the instruction asked for on sm_90a.
  if (rt::archRunsOn("sm_80", rt::Driver::get().computeCapability()))
    for (Shape s : shapes)
      checkKernel("gemm", {{"in", "i8"}, {"out", "i32"}, {"transpose_b", "1"}, {"M", s.m},
                           {"N", s.n}, {"K", s.k}}, true, "sm_80");
  checkKernel("gemm", {{"in", "i8"}, {"out", "i32"}, {"transpose_b", "1"}, {"instruction", "mma_sync"},
                       {"block_m", "128"}, {"block_n", "128"}, {"block_k", "64"}, {"threads", "256"},
                       {"M", "520"}, {"N", "390"}, {"K", "200"}});
  // FP8 on mma.sync m16n8k32 (sm_89, Ada): the sm_89 build through its PTX,
  // every scale, both formats; and the instruction asked for on sm_90a.
  if (rt::archRunsOn("sm_89", rt::Driver::get().computeCapability()))
    for (std::string in : {"e4m3", "e5m2"})
      for (std::string scale : {"none", "tensor", "row"})
        for (Shape s : {shapes[1], shapes[2], shapes[3]})
          checkKernel("gemm", {{"in", in}, {"out", "bf16"}, {"scale", scale}, {"transpose_b", "1"},
                               {"M", s.m}, {"N", s.n}, {"K", s.k}}, true, "sm_89");
  checkKernel("gemm", {{"in", "e4m3"}, {"out", "f32"}, {"scale", "block"}, {"transpose_b", "1"},
                       {"block_m", "64"}, {"block_n", "128"}, {"block_k", "128"}, {"threads", "128"},
                       {"M", "300"}, {"N", "200"}, {"K", "1000"}}, true, "sm_89");
  checkKernel("gemm", {{"in", "e4m3"}, {"out", "bf16"}, {"scale", "row"}, {"transpose_b", "1"},
                       {"instruction", "mma_sync"}, {"block_m", "128"}, {"block_n", "128"},
                       {"block_k", "64"}, {"threads", "256"}, {"M", "520"}, {"N", "390"},
                       {"K", "200"}});
}

// The configurations the benchmark uses, on shapes that stress the
// pipeline: one iteration, a K that is not a multiple of the tile, more
// stages than iterations, strides TMA cannot read (the kernel falls back to
// its cp.async build), and both the warp-specialized and the plain
// pipelined schedules, with and without TMA.
TEST_CASE("pipelined gemm matches the reference", "[gpu]") {
  struct Shape { const char *m, *n, *k; };
  std::vector<Shape> shapes = {{"520", "390", "200"}, {"256", "512", "64"}, {"130", "260", "40"},
                               {"384", "256", "136"}, {"300", "200", "130"}, {"1", "8", "8"}};
  // overlap_mma: each stage released an iteration late, the first
  // product overwriting the accumulator; two stages is the tightest ring.
  // cluster_m=2: B tiles multicast to two blocks (an odd number of tile rows
  // leaves the last cluster's second block outside C). persistent: blocks
  // walk the tiles, the pipeline's phases running on from tile to tile.
  // tma_store: the epilogue through a swizzled shared tile and a TMA store
  // (clipped at C's edges) that runs on under the next tile. split_k: K
  // slices add into a cleared C by atomics or TMA reduce-add (K = 8 and 40
  // leave slices with no K tile at all).
  struct Config {
    const char *bm, *bn, *stages, *ws;
    bool tma;
    const char *overlap = "0", *cluster = "1", *persistent = "0", *tmaStore = "0", *splitK = "1";
  };
  std::vector<Config> configs = {{"128", "256", "4", "on", true},
                                 {"128", "256", "4", "off", true},
                                 {"128", "128", "3", "off", false},
                                 {"128", "128", "2", "auto", true},
                                 {"128", "256", "4", "on", true, "1"},
                                 {"128", "128", "2", "on", true, "1"},
                                 {"128", "256", "4", "on", true, "0", "2"},
                                 {"128", "128", "2", "on", true, "1", "2"},
                                 {"128", "256", "4", "on", true, "0", "1", "1"},
                                 {"128", "128", "3", "on", true, "1", "1", "1"},
                                 {"128", "256", "3", "on", true, "0", "1", "0", "1"},
                                 {"128", "256", "3", "on", true, "0", "1", "1", "1"},
                                 {"128", "128", "3", "on", true, "1", "1", "1", "1"},
                                 {"128", "128", "3", "on", true, "0", "1", "0", "0", "3"},
                                 {"128", "128", "3", "off", true, "0", "1", "0", "0", "2"},
                                 {"128", "256", "3", "on", true, "0", "1", "0", "1", "2"}};
  if (deviceArch() != "sm_90a") configs = {{"128", "128", "3", "off", false}};
  for (Config c : configs)
    for (Shape s : shapes)
      for (std::string tb : {"0", "1"})
        checkKernel("gemm", {{"in", "bf16"}, {"out", "f16"}, {"block_m", c.bm}, {"block_n", c.bn},
                             {"block_k", "64"}, {"threads", "256"}, {"stages", c.stages},
                             {"warp_specialize", c.ws}, {"swizzle", "8"}, {"transpose_b", tb},
                             {"overlap_mma", c.overlap}, {"cluster_m", c.cluster},
                             {"persistent", c.persistent}, {"tma_store", c.tmaStore},
                             {"split_k", c.splitK},
                             {"M", s.m}, {"N", s.n}, {"K", s.k}},
                    c.tma);
  checkKernel("gemm", {{"in", "f16"}, {"block_m", "128"}, {"block_n", "256"}, {"block_k", "64"},
                       {"threads", "256"}, {"stages", "4"}, {"transpose_a", "1"},
                       {"M", "264"}, {"N", "264"}, {"K", "264"}});
}

TEST_CASE("hand-scheduled TMA producer role matches the reference", "[gpu]") {
  if (deviceArch() != "sm_90a") {
    WARN("skipped: TMA and setmaxnreg need sm_90a, the device is " << deviceArch());
    return;
  }
  for (std::string dtype : {"f16", "bf16"})
    for (std::string m : {"1", "32", "1001"})
      checkKernel("tma_scale", {{"dtype", dtype}, {"M", m}});
  checkKernel("tma_scale", {{"cols", "128"}, {"rows", "16"}, {"M", "77"}});
  // TMA reduce-add into y; 1001 rows end inside a tile, whose rows past M
  // the TMA unit drops.
  for (std::string m : {"1", "1001"}) checkKernel("tma_scale", {{"accumulate", "1"}, {"M", m}});

}

TEST_CASE("flash attention forward matches the reference", "[gpu][attention]") {
  // GQA groups 1, 4 and 8; lengths that are not tile multiples, and 1.
  for (std::string causal : {"0", "1"})
    for (auto [hq, hkv] : {std::pair{"4", "4"}, {"8", "2"}, {"8", "1"}})
      checkKernel("flash_attention_fwd", {{"causal", causal}, {"heads_q", hq}, {"heads_kv", hkv},
                                          {"seqlen_q", "200"}, {"seqlen_k", "200"}});
  // block_n follows head_dim (64 keys per step at 256).
  for (std::string d : {"64", "256"})
    checkKernel("flash_attention_fwd",
                {{"head_dim", d}, {"causal", "1"}, {"seqlen_q", "77"}, {"seqlen_k", "77"}});
  // Both launch orders, each where it is not the default.
  checkKernel("flash_attention_fwd", {{"grid_order", "blocks"}, {"causal", "1"}, {"seqlen_q", "333"}});
  checkKernel("flash_attention_fwd", {{"grid_order", "heads"}, {"seqlen_q", "333"}});
  checkKernel("flash_attention_fwd", {{"dtype", "f16"}, {"seqlen_q", "1"}, {"seqlen_k", "1"}});
  checkKernel("flash_attention_fwd", {{"seqlen_q", "130"}, {"seqlen_k", "333"}});
  checkKernel("flash_attention_fwd", {{"warp_specialize", "off"}, {"causal", "1"}});
  // Consumer warpgroups taking ping-pong turns; K a block ahead of V, with
  // and without turns (both products of a step in one turn).
  checkKernel("flash_attention_fwd", {{"pingpong", "1"}, {"causal", "1"}, {"seqlen_q", "333"}});
  for (std::string pingpong : {"0", "1"})
    checkKernel("flash_attention_fwd", {{"overlap", "1"}, {"pingpong", pingpong}, {"causal", "1"},
                                        {"seqlen_q", "333"}, {"seqlen_k", "333"}});
  checkKernel("flash_attention_fwd", {{"overlap", "1"}, {"varlen", "1"}, {"seqlens_q", "3,200,5"},
                                      {"seqlens_k", "0,130,7"}});
  checkKernel("flash_attention_fwd", {{"block_m", "64"}, {"threads", "128"}, {"head_dim", "64"},
                                      {"block_n", "64"}});
  // The softmax's exp2 partly on the FMA pipe: one register in 3 (chosen
  // by index) and one in 2 (FP8's paired conversions), both dtypes.
  checkKernel("flash_attention_fwd", {{"exp2_fma", "3"}, {"causal", "1"}, {"seqlen_q", "333"}});
  checkKernel("flash_attention_fwd", {{"exp2_fma", "2"}, {"dtype", "e4m3"}, {"causal", "1"},
                                      {"v_transposed", "1"}, {"seqlen_q", "333"}});
  // Three consumer warpgroups, 192 query rows a block (FlashAttention-3's
  // head_dim 64 tile): masks, ragged and packed lengths, GQA, the
  // persistent walk, K ahead of V, the TMA store, and sm_80's mma.sync on
  // twelve warps.
  const Params rows192 = {{"block_m", "192"}, {"threads", "384"}, {"head_dim", "64"}};
  auto with = [&](Params extra) {
    extra.insert(rows192.begin(), rows192.end());
    return extra;
  };
  for (std::string causal : {"0", "1"}) {
    checkKernel("flash_attention_fwd", with({{"causal", causal}, {"heads_q", "8"}, {"heads_kv", "2"},
                                             {"seqlen_q", "333"}, {"seqlen_k", "333"}}));
    checkKernel("flash_attention_fwd", with({{"causal", causal}, {"persistent", "1"}, {"batch", "8"},
                                             {"seqlen_q", "400"}, {"seqlen_k", "400"}}));
    checkKernel("flash_attention_fwd", with({{"causal", causal}, {"seqlen_q", "200"},
                                             {"seqlen_k", "200"}}), true, "sm_80");
  }
  checkKernel("flash_attention_fwd", with({{"varlen", "1"}, {"causal", "1"}}));
  checkKernel("flash_attention_fwd", with({{"overlap", "1"}, {"causal", "1"}, {"seqlen_q", "333"},
                                           {"seqlen_k", "333"}}));
  checkKernel("flash_attention_fwd", with({{"tma_store", "1"}, {"persistent", "1"},
                                           {"seqlen_q", "200"}, {"seqlen_k", "300"}}));
  // Queries placed at key position query_offset (a chunk of a longer
  // sequence), and the kernel built for shards that arrive while it runs
  // (here all present), alone and together.
  checkKernel("flash_attention_fwd", {{"causal", "1"}, {"query_offset", "300"}, {"seqlen_q", "200"},
                                      {"seqlen_k", "500"}});
  checkKernel("flash_attention_fwd", {{"causal", "1"}, {"query_offset", "256"}, {"seqlen_q", "256"},
                                      {"seqlen_k", "256"}, {"shards", "2"}});
  for (std::string causal : {"0", "1"})
    checkKernel("flash_attention_fwd", {{"causal", causal}, {"seqlen_q", "768"},
                                        {"seqlen_k", "768"}, {"shards", "3"}});
  // Persistent: resident blocks walk the (row block, head, batch) tiles, the
  // producer's K/V pipeline running on from tile to tile; more tiles than
  // blocks (batch 8 x 8 heads x 3 row blocks; causal: a reversed round,
  // then a partial forward one), GQA, both orders, overlap, head_dim 64,
  // and packed sequences (tiles with no keys or no rows).
  for (std::string causal : {"0", "1"})
    checkKernel("flash_attention_fwd", {{"persistent", "1"}, {"causal", causal}, {"batch", "8"},
                                        {"heads_q", "8"}, {"heads_kv", "2"}, {"seqlen_q", "333"},
                                        {"seqlen_k", "333"}});
  checkKernel("flash_attention_fwd", {{"persistent", "1"}, {"grid_order", "heads"}, {"seqlen_q", "130"}});
  // Not warp-specialized: the software pipeline runs once per tile, its TMA
  // stages' phases following its count of iterations over all tiles.
  checkKernel("flash_attention_fwd", {{"persistent", "1"}, {"warp_specialize", "off"}, {"causal", "1"},
                                      {"batch", "16"}, {"seqlen_q", "333"}, {"seqlen_k", "333"}});
  checkKernel("flash_attention_fwd", {{"persistent", "1"}, {"overlap", "1"}, {"causal", "1"},
                                      {"head_dim", "64"}, {"seqlen_q", "333"}, {"seqlen_k", "333"}});
  checkKernel("flash_attention_fwd", {{"persistent", "1"}, {"varlen", "1"}, {"causal", "1"},
                                      {"seqlens_q", "1,77,300,128,5"}});
  checkKernel("flash_attention_fwd", {{"persistent", "1"}, {"varlen", "1"}, {"seqlens_q", "3,200,1"},
                                      {"seqlens_k", "0,130,7"}});
  // O through a shared tile and a TMA store: rows past the sequence are
  // clipped by the tensor map; walked, the store runs into the next tile
  // (causal: the shortest tiles come last, one key block each).
  for (std::string persistent : {"0", "1"})
    checkKernel("flash_attention_fwd", {{"tma_store", "1"}, {"persistent", persistent}, {"causal", "1"},
                                        {"batch", "8"}, {"heads_q", "8"}, {"heads_kv", "2"},
                                        {"seqlen_q", "333"}, {"seqlen_k", "333"}});
  checkKernel("flash_attention_fwd", {{"tma_store", "1"}, {"persistent", "1"}, {"head_dim", "64"},
                                      {"seqlen_q", "200"}, {"seqlen_k", "300"}});
}

TEST_CASE("flash attention forward over packed sequences matches the reference", "[gpu][attention]") {
  for (std::string causal : {"0", "1"})
    for (auto [hq, hkv] : {std::pair{"4", "4"}, {"8", "2"}, {"8", "1"}})
      checkKernel("flash_attention_fwd", {{"varlen", "1"}, {"causal", causal}, {"heads_q", hq},
                                          {"heads_kv", hkv}, {"seqlens_q", "1,77,300,128,5"}});
  checkKernel("flash_attention_fwd", {{"varlen", "1"}, {"seqlens_q", "3,200,1"},
                                      {"seqlens_k", "130,7,1"}});
  // A sequence without keys: its rows are 0 with LSE -inf.
  for (std::string causal : {"0", "1"})
    checkKernel("flash_attention_fwd", {{"varlen", "1"}, {"causal", causal}, {"seqlens_q", "3,200,5"},
                                        {"seqlens_k", "0,130,7"}});
}

TEST_CASE("flash attention backward matches the reference", "[gpu][attention]") {
  for (std::string causal : {"0", "1"}) {
    checkKernel("flash_attention_bwd", {{"causal", causal}, {"heads_q", "4"}, {"heads_kv", "4"},
                                        {"kv_reduction", "direct"}});
    for (std::string reduction : {"atomic", "split"})
      for (auto [hq, hkv] : {std::pair{"8", "2"}, {"8", "1"}})
        checkKernel("flash_attention_bwd", {{"causal", causal}, {"heads_q", hq}, {"heads_kv", hkv},
                                            {"kv_reduction", reduction}});
  }
  checkKernel("flash_attention_bwd", {{"element_atomics", "1"}, {"heads_q", "8"}, {"heads_kv", "1"}});
  checkKernel("flash_attention_bwd", {{"dq_order", "release"}, {"causal", "1"}});
  checkKernel("flash_attention_bwd", {{"head_dim", "64"}, {"dtype", "f16"}, {"seqlen_q", "77"},
                                      {"seqlen_k", "77"}});
  // seqlen_k = 1 makes dQ and dK exactly zero (softmax of one key is 1), so
  // a relative error says nothing there; one query row still does.
  checkKernel("flash_attention_bwd", {{"seqlen_q", "1"}, {"seqlen_k", "7"}});
  checkKernel("flash_attention_bwd", {{"seqlen_q", "130"}, {"seqlen_k", "333"}, {"causal", "1"}});
  checkKernel("flash_attention_bwd", {{"warp_specialize", "off"}});
  checkKernel("flash_attention_bwd", {{"grid_order", "blocks"}, {"causal", "1"}});
  checkKernel("flash_attention_bwd", {{"grid_order", "heads"}});
  // dQ through a shared tile and one TMA reduce-add (the sm_90a default
  // for relaxed adds), and from registers, at both head_dims.
  for (std::string path : {"tma", "registers"})
    for (std::string d : {"64", "128"})
      checkKernel("flash_attention_bwd", {{"dq_atomics", path}, {"head_dim", d}, {"causal", "1"},
                                          {"heads_q", "8"}, {"heads_kv", "1"}, {"seqlen_q", "130"},
                                          {"seqlen_k", "333"}});
}

TEST_CASE("flash attention backward with P^T and dS^T as shared operands matches the reference",
          "[gpu][attention]") {
  // 128 query rows a step at head_dim 64 (what the shared operands are for)
  // and 64 at 128; masks, GQA atomics, both dQ paths, packed sequences.
  for (std::string causal : {"0", "1"})
    for (auto [d, bm] : {std::pair{"64", "128"}, {"128", "64"}})
      for (std::string path : {"tma", "registers"})
        checkKernel("flash_attention_bwd",
                    {{"dkv_operands", "shared"}, {"head_dim", d}, {"block_m", bm},
                     {"causal", causal}, {"dq_atomics", path}, {"heads_q", "8"},
                     {"heads_kv", "2"}, {"seqlen_q", "130"}, {"seqlen_k", "333"}});
  for (std::string causal : {"0", "1"})
    checkKernel("flash_attention_bwd", {{"dkv_operands", "shared"}, {"head_dim", "64"},
                                        {"block_m", "128"}, {"varlen", "1"}, {"causal", causal},
                                        {"heads_q", "4"}, {"heads_kv", "4"},
                                        {"kv_reduction", "direct"}, {"seqlens_q", "1,77,300,128,5"}});
}

TEST_CASE("flash attention backward with scores by query rows matches the reference",
          "[gpu][attention]") {
  // Each warpgroup's rows its own 64 queries (block_m 128), or both
  // warpgroups splitting the key columns of 64 queries (block_m 64).
  for (std::string causal : {"0", "1"})
    for (auto [d, bm] : {std::pair{"64", "128"}, {"64", "64"}, {"128", "64"}})
      for (std::string path : {"tma", "registers"})
        checkKernel("flash_attention_bwd",
                    {{"scores", "queries"}, {"head_dim", d}, {"block_m", bm}, {"causal", causal},
                     {"dq_atomics", path}, {"heads_q", "8"}, {"heads_kv", "2"},
                     {"seqlen_q", "130"}, {"seqlen_k", "333"}});
  for (std::string causal : {"0", "1"})
    checkKernel("flash_attention_bwd", {{"scores", "queries"}, {"head_dim", "64"},
                                        {"block_m", "128"}, {"varlen", "1"}, {"causal", causal},
                                        {"heads_q", "8"}, {"heads_kv", "2"},
                                        {"kv_reduction", "split"}, {"seqlens_q", "3,200,5"},
                                        {"seqlens_k", "0,130,7"}});
  checkKernel("flash_attention_bwd", {{"scores", "queries"}, {"seqlen_q", "1"}, {"seqlen_k", "7"}});
}

TEST_CASE("flash attention backward over packed sequences matches the reference", "[gpu][attention]") {
  for (std::string causal : {"0", "1"})
    for (std::string reduction : {"atomic", "split"})
      checkKernel("flash_attention_bwd", {{"varlen", "1"}, {"causal", causal}, {"heads_q", "8"},
                                          {"heads_kv", "2"}, {"kv_reduction", reduction},
                                          {"seqlens_q", "1,77,300,128,5"}});
  checkKernel("flash_attention_bwd", {{"varlen", "1"}, {"heads_q", "4"}, {"heads_kv", "4"},
                                      {"kv_reduction", "direct"}, {"seqlens_q", "3,200,2"},
                                      {"seqlens_k", "130,7,2"}});
  // A sequence without keys gets dQ = 0 and adds nothing to dK, dV.
  for (std::string causal : {"0", "1"})
    checkKernel("flash_attention_bwd", {{"varlen", "1"}, {"causal", causal}, {"heads_q", "4"},
                                        {"heads_kv", "2"}, {"seqlens_q", "3,200,5"},
                                        {"seqlens_k", "0,130,7"}});
}

TEST_CASE("a second compile in one process does not call NVRTC", "[gpu][cache]") {
  const LibraryKernel &entry = findKernel("gemm");
  Params p = withDefaults(entry, {{"block_m", "32"}, {"block_n", "32"}});
  Program first = entry.build(p), second = entry.build(p);
  rt::CacheStats &stats = rt::KernelCache::global().stats();
  compile(first, {deviceArch(), ""});
  int compiles = stats.nvrtcCompiles, hits = stats.memoryHits;
  Kernel k = compile(second, {deviceArch(), ""});
  CHECK(stats.nvrtcCompiles == compiles);
  CHECK(stats.memoryHits == hits + 1);
  CHECK_FALSE(k.times().nvrtcCalled);
  CHECK(entry.check(k, p, 7).passed);
}

TEST_CASE("integer division of negative values floors on the GPU", "[gpu][user]") {
  Program p = test::signedDivision();
  Kernel k = compile(p, {deviceArch(), ""});
  const int64_t n = test::kDivisionElements, rows = test::kDivisionRows;
  // Every sign of dividend and divisor, exact multiples included.
  std::vector<int32_t> x(n), d(n), out(rows * n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = int32_t(i % 41) - 20;
    int32_t divisor = int32_t(i / 41) % 11 - 5;
    d[i] = divisor ? divisor : 3;
  }
  rt::DeviceBuffer dx(n * 4), dd(n * 4), dout(rows * n * 4);
  dx.upload(x.data(), n * 4);
  dd.upload(d.data(), n * 4);
  dout.fillBytes(0xff);
  k.launch({rt::LaunchArg::buffer(dx.ptr(), {n}), rt::LaunchArg::buffer(dd.ptr(), {n}),
            rt::LaunchArg::buffer(dout.ptr(), {rows, n})});
  synchronize();
  dout.download(out.data(), rows * n * 4);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t want[] = {test::floorDivision(x[i], d[i]), test::floorRemainder(x[i], d[i]),
                            test::floorDivision(x[i], 4),    test::floorRemainder(x[i], 4),
                            -test::floorDivision(-x[i], d[i]), i};
    for (int64_t r = 0; r < rows; ++r) {
      if (out[r * n + i] == want[r]) continue;
      if (++wrong <= 8)
        fmt::print("row {} at x = {}, d = {}: {} (want {})\n", r, x[i], d[i], out[r * n + i], want[r]);
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("conversions mean what they do in C++ on the GPU", "[gpu][user]") {
  Program p = test::conversions();
  Kernel k = compile(p, {deviceArch(), ""});
  const int64_t n = test::kDivisionElements, rows = test::kConversionRows;
  const float xs[] = {-2.75f, -1.0f, -0.5f, 0.0f, 0.25f, 1.0f, 3.9f, -0.0f};
  std::vector<float> x(n);
  std::vector<int32_t> kv(n), out(rows * n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = xs[i % 8];
    kv[i] = int32_t(i % 9) - 4; // 2 and -2 have a clear low bit
  }
  rt::DeviceBuffer dx(n * 4), dk(n * 4), dout(rows * n * 4);
  dx.upload(x.data(), n * 4);
  dk.upload(kv.data(), n * 4);
  dout.fillBytes(0xff);
  k.launch({rt::LaunchArg::buffer(dx.ptr(), {n}), rt::LaunchArg::buffer(dk.ptr(), {n}),
            rt::LaunchArg::buffer(dout.ptr(), {rows, n})});
  synchronize();
  dout.download(out.data(), rows * n * 4);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t want[] = {int64_t(x[i]), x[i] != 0, kv[i] != 0, 2 * (kv[i] != 0), kv[i]};
    for (int64_t r = 0; r < rows; ++r) {
      if (out[r * n + i] == want[r]) continue;
      if (++wrong <= 8)
        fmt::print("row {} at x = {}, k = {}: {} (want {})\n", r, x[i], kv[i], out[r * n + i], want[r]);
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("bit and logical operators mean what they do in C++ on the GPU", "[gpu][user]") {
  Program p = test::bitOperations();
  Kernel k = compile(p, {deviceArch(), ""});
  const int64_t n = test::kDivisionElements, rows = test::kBitRows;
  // Every byte value; keys of either sign (zero and 3 among them) and every
  // shift amount.
  std::vector<uint8_t> q(n), q8(n);
  std::vector<int32_t> kv(n), s(n), out(rows * n);
  for (int64_t i = 0; i < n; ++i) {
    q[i] = uint8_t(i);
    kv[i] = int32_t((i * 2654435761u) >> (i % 7)) * (i % 3 == 0 ? -1 : 1) * (i % 11 != 0) + (i % 17 == 0) * 3;
    s[i] = int32_t(i % 32);
  }
  rt::DeviceBuffer dq(n), dk(n * 4), ds(n * 4), dout(rows * n * 4), dq8(n);
  dq.upload(q.data(), n);
  dk.upload(kv.data(), n * 4);
  ds.upload(s.data(), n * 4);
  dout.fillBytes(0xff);
  dq8.fillBytes(0xff);
  k.launch({rt::LaunchArg::buffer(dq.ptr(), {n}), rt::LaunchArg::buffer(dk.ptr(), {n}),
            rt::LaunchArg::buffer(ds.ptr(), {n}), rt::LaunchArg::buffer(dout.ptr(), {rows, n}),
            rt::LaunchArg::buffer(dq8.ptr(), {n})});
  synchronize();
  dout.download(out.data(), rows * n * 4);
  dq8.download(q8.data(), n);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t> want = test::bitOperationsReference(q[i], kv[i], s[i]);
    for (int64_t r = 0; r < rows; ++r) {
      if (out[r * n + i] == want[r]) continue;
      if (++wrong <= 8)
        fmt::print("row {} at q = {}, k = {}, s = {}: {} (want {})\n", r, q[i], kv[i], s[i],
                   out[r * n + i], want[r]);
    }
    wrong += q8[i] != uint8_t(q[i] + 1);
  }
  CHECK(wrong == 0);
}

TEST_CASE("a whole-held fragment read after other accesses and twice", "[gpu][user]") {
  using test::BroadcastForm;
  for (BroadcastForm form :
       {BroadcastForm::elementFirst, BroadcastForm::maximumFirst, BroadcastForm::maximumTwice}) {
    Program p = test::broadcastReads(form);
    Kernel k = compile(p, {deviceArch(), ""});
    std::vector<float> x(256), y(256);
    std::mt19937 rng{static_cast<unsigned>(form)};
    std::uniform_real_distribution<float> uniform(-4.0f, 4.0f);
    for (float &v : x) v = uniform(rng);
    double mx = *std::max_element(x.begin(), x.end());
    rt::DeviceBuffer dx(256 * 4), dy(256 * 4);
    dx.upload(x.data(), 256 * 4);
    dy.fillBytes(0xff);
    k.launch({rt::LaunchArg::buffer(dx.ptr(), {256}), rt::LaunchArg::buffer(dy.ptr(), {256})});
    synchronize();
    dy.download(y.data(), 256 * 4);
    double worst = 0;
    for (int i = 0; i < 256; ++i) {
      double want = form == BroadcastForm::maximumTwice ? (x[i] - mx) * mx : std::exp(x[i] - mx);
      double d = std::abs(y[i] - want);
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    }
    INFO("form " << int(form));
    CHECK(worst < 1e-4 * 16);
  }
}

int main(int argc, char **argv) {
  std::string why;
  if (!rt::Driver::available(&why)) {
    fmt::print("GPU tests SKIPPED: {}\n", why);
    return 0;
  }
  auto &d = rt::Driver::get();
  fmt::print("GPU tests on {} (sm_{})\n", d.deviceName(), d.computeCapability());
  return Catch::Session().run(argc, argv);
}
