//===- SettingsTests.cpp - each kernel's configuration described once -----===//
//
// The settings tables are what the command line, the harness's defaults,
// tuned records and the public calls' cache keys read: every field a
// kernel's configuration has must round-trip through its table, and every
// setting must be a parameter of the kernel by name.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "tessel/harness/Library.h"
#include "tessel/kernels/Kernels.h"

using namespace tessel;
using namespace tessel::kernels;

namespace {
/// Text of every setting -> config -> text gives the same text, and a
/// configuration that differs in any one setting describes differently.
template <class Config>
void checkRoundTrip(const SettingsTable<Config> &table, const Settings &changed) {
  Settings written = table.write(Config{});
  CHECK(table.write(table.read(written)) == written);
  for (const auto &[key, value] : changed) {
    INFO(key << "=" << value);
    REQUIRE(table.has(key));
    Config c = table.read({{key, value}});
    CHECK(table.write(c).at(key) == value);
    CHECK(table.describe(c) != table.describe(Config{}));
  }
}

/// Every setting of `table` is a parameter of the harness's kernel `name`,
/// and its default there is the configuration's own unless `differs`
/// names it.
template <class Config>
void checkHarnessReads(const SettingsTable<Config> &table, const std::string &name,
                       const Settings &differs = {}) {
  const harness::LibraryKernel &k = harness::findKernel(name);
  for (const auto &[key, value] : table.write(Config{})) {
    INFO(name << " " << key);
    REQUIRE(k.defaults.count(key));
    if (!differs.count(key)) CHECK(k.defaults.at(key) == value);
    else CHECK(k.defaults.at(key) == differs.at(key));
  }
}
} // namespace

TEST_CASE("every gemm setting round-trips through its table") {
  checkRoundTrip(gemmSettings(), {{"in", "bf16"}, {"out", "f16"}, {"transpose_a", "1"},
                                  {"transpose_b", "1"}, {"block_m", "128"}, {"block_n", "256"},
                                  {"block_k", "64"}, {"stages", "4"}, {"threads", "256"},
                                  {"swizzle", "8"}, {"instruction", "wgmma"},
                                  {"warp_specialize", "on"}, {"overlap_mma", "1"}, {"pingpong", "1"},
                                  {"cluster_m", "2"}, {"persistent", "1"}, {"tma_store", "1"},
                                  {"policy", "full_row"}, {"split_k", "4"}});
  checkHarnessReads(gemmSettings(), "gemm");
  // The cache key names every setting, in the table's order.
  CHECK(gemmSettings().describe(GemmConfig{}).rfind("in=f16 out=f32 transpose_a=0", 0) == 0);
}

TEST_CASE("every attention setting round-trips through its table") {
  checkRoundTrip(attentionSettings(),
                 {{"dtype", "f16"}, {"head_dim", "64"}, {"block_m", "64"}, {"block_n", "64"},
                  {"threads", "128"}, {"stages", "3"}, {"causal", "1"}, {"varlen", "1"},
                  {"warp_specialize", "off"}, {"grid_order", "heads"}, {"pingpong", "1"},
                  {"overlap", "1"}, {"persistent", "1"}, {"tma_store", "1"}});
  checkHarnessReads(attentionSettings(), "flash_attention_fwd");
  checkRoundTrip(attentionBackwardSettings(),
                 {{"block_m", "128"}, {"pre_block", "128"}, {"kv_reduction", "split"},
                  {"element_atomics", "1"}, {"dq_order", "release"}, {"dq_atomics", "tma"},
                  {"dkv_operands", "shared"}, {"scores", "queries"}, {"variant", "ts"}});
  // The harness's run has 4 query heads on 2 K/V heads: dK/dV by atomics.
  checkHarnessReads(attentionBackwardSettings(), "flash_attention_bwd", {{"kv_reduction", "atomic"}});
  // block_n 0 is the kernel's choice, written "auto".
  CHECK(attentionSettings().write(AttentionConfig{}).at("block_n") == "auto");
  CHECK(attentionSettings().read({{"block_n", "auto"}}).blockN == 0);
}

TEST_CASE("the small kernels' settings are their harness parameters") {
  checkHarnessReads(scaledAddSettings(), "scaled_add");
  checkHarnessReads(partialSumSettings(), "partial_sum");
  checkHarnessReads(columnSliceSettings(), "column_slice");
  checkHarnessReads(rowSoftmaxSettings(), "row_softmax");
  checkHarnessReads(rowLogSumExpSettings(), "row_lse");
  checkHarnessReads(tmaScaleSettings(), "tma_scale");
  checkHarnessReads(quantizeSettings(), "quantize");
  checkHarnessReads(weightGemmSettings(), "weight_gemm");
  checkHarnessReads(weightDequantizeSettings(), "weight_dequantize");
}

TEST_CASE("every weight_gemm setting round-trips through its table") {
  checkRoundTrip(weightGemmSettings(),
                 {{"weights", "int8"}, {"in", "f16"}, {"out", "f32"}, {"group", "64"},
                  {"zeros", "1"}, {"block_n", "128"}, {"block_m", "32"}, {"block_k", "64"},
                  {"stages", "3"}, {"threads", "256"}, {"split_k", "4"},
                  {"instruction", "mma_sync"}});
  checkRoundTrip(weightDequantizeSettings(), {{"weights", "int8"}, {"in", "f16"}, {"group", "32"},
                                              {"zeros", "1"}, {"block_k", "512"}, {"rows", "8"},
                                              {"threads", "256"}});
}

TEST_CASE("every quantize setting round-trips through its table") {
  checkRoundTrip(quantizeSettings(), {{"dtype", "f32"}, {"out", "e5m2"}, {"granularity", "block"},
                                      {"cols", "7168"}, {"rows", "4"}, {"threads", "128"}});
  checkRoundTrip(quantizeSettings(), {{"granularity", "mx"}, {"blocked_scales", "1"},
                                      {"cols", "160"}, {"rows", "256"}});
  CHECK(quantizeSettings().describe(QuantizeConfig{}) ==
        "dtype=bf16 out=e4m3 granularity=row cols=4096 rows=2 threads=256 k_major_scales=0 "
        "blocked_scales=0");
  // The types, granularity and row length say what is computed: a tuned
  // record may set the blocking only.
  QuantizeConfig c;
  CHECK_FALSE(quantizeSettings().apply({{"rows", "4"}, {"granularity", "block"}}, c));
  CHECK(quantizeSettings().apply({{"rows", "4"}, {"threads", "128"}}, c));
  CHECK(c.rows == 4);
  auto error = [](const Settings &s) {
    try {
      quantizeSettings().read(s);
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error({{"out", "f16"}}) == "parameter out=f16: use one of e4m3, e5m2");
  CHECK(error({{"granularity", "tensor"}}) ==
        "parameter granularity=tensor: use one of row, block, mx");
  // What the settings can hold but the kernel cannot compute.
  QuantizeConfig blocks;
  blocks.granularity = QuantizeGranularity::block;
  blocks.cols = 1000;
  CHECK_THROWS_WITH(quantize(blocks), Catch::Contains("cols=1000 is not a multiple of 128"));
  QuantizeConfig mx;
  mx.granularity = QuantizeGranularity::mx;
  mx.cols = 1000;
  CHECK_THROWS_WITH(quantize(mx), Catch::Contains("cols=1000 is not a multiple of 32"));
  mx.cols = 1024;
  mx.kMajorScales = true;
  CHECK_THROWS_WITH(quantize(mx), Catch::Contains("k_major_scales lays out 1x128 block scales"));
  blocks.cols = 1024;
  blocks.blockedScales = true;
  CHECK_THROWS_WITH(quantize(blocks), Catch::Contains("blocked_scales lays out MX scales"));
  QuantizeConfig wide;
  wide.out = DType::bf16;
  CHECK_THROWS_WITH(quantize(wide), Catch::Contains("bf16 is not an FP8 type"));
}

TEST_CASE("a setting that cannot be read names itself") {
  auto error = [](const Settings &s) {
    try {
      gemmSettings().read(s);
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error({{"block_m", "12x"}}) == "parameter block_m=12x is not an integer");
  CHECK(error({{"persistent", "yes"}}) == "parameter persistent=yes: use 0 or 1");
  CHECK(error({{"policy", "diagonal"}}) ==
        "parameter policy=diagonal: use one of square, full_row, full_col");
  CHECK(error({{"block_m", "99999999999"}}) ==
        "parameter block_m=99999999999 is out of range: use an integer in [1, 1024]");
  try {
    attentionSettings().read({{"stages", "9"}});
    FAIL("no error");
  } catch (const Error &e) {
    CHECK(std::string(e.what()) == "parameter stages=9 is out of range: use an integer in [1, 8]");
  }
}

TEST_CASE("a tuned record applies whole or not at all") {
  GemmConfig c;
  c.blockM = 128;
  // A setting the table does not have.
  CHECK_FALSE(gemmSettings().apply({{"block_m", "64"}, {"tiles", "4"}}, c));
  CHECK(c.blockM == 128);
  // A value it cannot read, after one it can.
  CHECK_FALSE(gemmSettings().apply({{"block_m", "64"}, {"stages", "many"}}, c));
  CHECK(c.blockM == 128);
  CHECK(gemmSettings().apply({{"block_m", "64"}, {"stages", "5"}}, c));
  CHECK(c.blockM == 64);
  CHECK(c.stages == 5);
  // Settings the record does not name keep their values.
  AttentionBackwardConfig b;
  b.kvReduction = KvReduction::atomic;
  CHECK(attentionBackwardSettings().apply({{"scores", "queries"}}, b));
  CHECK(b.queryRows);
  CHECK(b.kvReduction == KvReduction::atomic);
  CHECK_FALSE(attentionBackwardSettings().apply({{"scores", "diagonal"}}, b));
}

TEST_CASE("a tuned record chooses how a kernel computes, never what") {
  // What the kernel computes comes from the call's tensors and options: a
  // record that names it is refused whole.
  AttentionConfig f;
  f.causal = true;
  CHECK_FALSE(attentionSettings().apply({{"stages", "3"}, {"causal", "0"}}, f));
  CHECK(f.causal);
  CHECK(f.stages == 2);
  for (const char *key : {"dtype", "head_dim", "varlen"})
    CHECK_FALSE(attentionSettings().apply({{key, attentionSettings().write(f).at(key)}}, f));
  AttentionBackwardConfig b;
  b.kvReduction = KvReduction::atomic;
  for (auto [key, value] : {std::pair{"kv_reduction", "direct"}, {"variant", "ss"},
                            {"dq_order", "release"}, {"element_atomics", "1"}})
    CHECK_FALSE(attentionBackwardSettings().apply({{key, value}}, b));
  CHECK(b.kvReduction == KvReduction::atomic);
  GemmConfig g;
  for (auto [key, value] : {std::pair{"in", "bf16"}, {"out", "f16"}, {"transpose_a", "1"},
                            {"transpose_b", "1"}})
    CHECK_FALSE(gemmSettings().apply({{key, value}}, g));
  // Values outside what the kernels take are refused too.
  CHECK_FALSE(gemmSettings().apply({{"cluster_m", "4"}}, g));
  CHECK_FALSE(gemmSettings().apply({{"split_k", "0"}}, g));
  CHECK_FALSE(gemmSettings().apply({{"block_m", "-64"}}, g));
  CHECK(gemmSettings().apply({{"cluster_m", "2"}, {"split_k", "1"}}, g));
  // The command line still sets every setting.
  CHECK(gemmSettings().read({{"in", "bf16"}}).in == DType::bf16);
}
