//===- EightBitProductTests.cpp - 8-bit gemms and FP8 attention, compiled ===//
//
// What the 8-bit tensor-core products compile to on each target, without a
// GPU: FP8 and i8 gemms on mma.sync (sm_89), wgmma (sm_90a) and tcgen05.mma
// (sm_100a, MX block scales with tcgen05.cp), an 8-bit A read from
// registers with B in register K order, and the FP8 attention forward.
// ptxas assembles each; the GPU tests run them.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "ErrorOf.h"
#include "tessel/Tessel.h"
#include "tessel/dsl/Compile.h"
#include "tessel/harness/LibrarySupport.h"
#include "LowPrecisionKernels.h"

#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <unistd.h>

using namespace tessel;
using test::errorOf;

TEST_CASE("FP8 and i8 gemms run on mma.sync m16n8k32 on sm_89", "[fp8]") {
  const harness::LibraryKernel &entry = harness::findKernel("gemm");
  struct Case {
    const char *in, *out, *scale, *instruction;
  };
  for (Case c : {Case{"e4m3", "bf16", "tensor", "f32.e4m3.e4m3.f32"},
                 Case{"e5m2", "f32", "row", "f32.e5m2.e5m2.f32"},
                 Case{"e4m3", "f16", "block", "f32.e4m3.e4m3.f32"},
                 Case{"i8", "i32", "none", "s32.s8.s8.s32"}}) {
    INFO(c.in << " scale=" << c.scale);
    harness::Params p = {{"in", c.in}, {"out", c.out}, {"scale", c.scale}, {"transpose_b", "1"}};
    if (std::string(c.scale) == "block")
      p.insert({{"block_m", "64"}, {"block_n", "128"}, {"block_k", "128"}, {"threads", "128"}});
    Program program = entry.build(harness::withDefaults(entry, p, "sm_89"));
    Kernel k = compile(program, {"sm_89", ""});
    CHECK(k.ptx().find(".target sm_89") != std::string::npos);
    CHECK(k.ptx().find(std::string("mma.sync.aligned.m16n8k32.row.col.") + c.instruction) !=
          std::string::npos);
    auto ptx = std::filesystem::temp_directory_path() /
               fmt::format("tessel-sm89-{}-{}-{}.ptx", c.in, c.scale, ::getpid());
    std::ofstream(ptx) << k.ptx();
    CHECK(std::system(fmt::format("{} -arch=sm_89 {} -o /dev/null", TESSEL_PTXAS, ptx.string())
                          .c_str()) == 0);
    std::filesystem::remove(ptx);
  }
  // sm_80 has no FP8 tensor cores: an error that names the targets that do.
  Program fp8 = entry.build(harness::withDefaults(entry, {{"in", "e4m3"}, {"transpose_b", "1"}}, "sm_80"));
  CHECK_THAT(errorOf([&] { compile(fp8, {"sm_80", ""}); }),
             Catch::Contains("runs on mma.sync from sm_89 and on wgmma on sm_90a; target sm_80"));
  // The device an sm_89 build runs on: Ada itself, later GPUs through PTX.
  CHECK(rt::nativeArch(89) == "sm_89");
  CHECK(rt::archRunsOn("sm_89", 89));
  CHECK(rt::archRunsOn("sm_89", 90));
  CHECK_FALSE(rt::archRunsOn("sm_89", 86));
  CHECK(rt::runsThroughPtx("sm_89", 90));
  CHECK_FALSE(rt::runsThroughPtx("sm_89", 89));
}

// FP8 attention's second product reads its 8-bit A from registers, laid
// out as the scores' accumulator: wgmma's register-A form (k32, four values
// a register, the words formed before the fence) on sm_90a, mma.sync
// m16n8k32 on sm_89. B is read with K in register order: a compiler copy
// (and a remark that says how to skip it) for V stored [N, 64], none where
// the program says V^T is stored that way.
TEST_CASE("an 8-bit A in registers reads B in register K order", "[fp8]") {
  for (DType type : {DType::f8e4m3, DType::f8e5m2})
    for (test::EightBitV v : {test::EightBitV::rows, test::EightBitV::registerOrder})
      for (std::string arch : {"sm_90a", "sm_89"}) {
        bool rows = v == test::EightBitV::rows;
        std::string t = type == DType::f8e4m3 ? "e4m3" : "e5m2";
        INFO(arch << " " << t << (rows ? " V rows" : " V^T in register order"));
        CompileOptions options{arch};
        options.printWarnings = false;
        Program program = test::eightBitTwoProducts(type, v);
        Kernel k = compile(program, options);
        // The register-A form lists its A words between braces after the
        // accumulator's 32 registers.
        std::string product = arch == "sm_90a"
                                  ? "m64n64k32.f32." + t + "." + t + " {%0,"
                                  : "mma.sync.aligned.m16n8k32.row.col.f32." + t;
        CHECK(k.cuda().find(product) != std::string::npos);
        if (arch == "sm_90a") {
          CHECK(k.cuda().find("%31}, {%32, %33, %34, %35}") != std::string::npos);
          CHECK(k.cuda().find("tessel::fence_quads(") != std::string::npos);
        }
        CHECK(k.cuda().find("tessel::pack_quad(") != std::string::npos);
        bool remarked = false;
        for (const Remark &r : k.remarks())
          remarked |= r.message.find("with K in register order") != std::string::npos;
        CHECK(remarked == rows);
        CHECK(k.spillBytes() == 0);
      }
  // The permutation: k = 16 g + 8 b + 2 q + e at 16 g + 4 q + 2 b + e.
  for (int64_t g : {0, 1, 5})
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t q = 0; q < 4; ++q)
        for (int64_t e = 0; e < 2; ++e) {
          int64_t position = -1;
          CHECK(register_k_position(Expr(16 * g + 8 * b + 2 * q + e)).isConstant(&position));
          CHECK(position == 16 * g + 4 * q + 2 * b + e);
        }
  // Only an 8-bit A in registers takes B in register order.
  Program wrong("register_order_on_shared_a");
  Tensor x = wrong.tensor("x", {64, 64}, DType::f8e4m3);
  wrong.kernel({1}, 128, [&](Expr) {
    Buffer a = alloc_shared({64, 64}, DType::f8e4m3), b = alloc_shared({64, 64}, DType::f8e4m3);
    Buffer c = alloc_fragment({64, 64}, DType::f32);
    copy(x.tile({0, 0}, {64, 64}), a);
    copy(x.tile({0, 0}, {64, 64}), b);
    CHECK_THAT(errorOf([&] { gemm(a, b, c, {.transpose_b = true, .b_register_k_order = true}); }),
               Catch::Contains("b_register_k_order") && Catch::Contains("shared memory"));
  });
}

// The FP8 attention forward: both products on FP8 tensor cores on each
// target, P x V reading P from registers on wgmma and mma.sync, V either
// rearranged beforehand (v_transposed, no remark) or permuted in shared
// memory by the compiler (a remark says so); on sm_100a the ss form with
// kind::f8f6f4. What it does not take is an error that says so.
TEST_CASE("the FP8 attention forward compiles to FP8 tensor-core products", "[fp8]") {
  const harness::LibraryKernel &entry = harness::findKernel("flash_attention_fwd");
  auto build = [&](const std::string &arch, harness::Params p) {
    Program program = entry.build(harness::withDefaults(entry, p, arch));
    CompileOptions options{arch};
    options.printWarnings = false;
    return compile(program, options);
  };
  auto remarked = [](const Kernel &k) {
    for (const Remark &r : k.remarks())
      if (r.message.find("with K in register order") != std::string::npos) return true;
    return false;
  };
  for (std::string dtype : {"e4m3", "e5m2"})
    for (std::string transposed : {"0", "1"}) {
      INFO(dtype << " v_transposed=" << transposed);
      Kernel k = build("sm_90a", {{"dtype", dtype}, {"v_transposed", transposed}, {"causal", "1"}});
      CHECK(k.ptx().find("wgmma.mma_async.sync.aligned.m64n128k32.f32." + dtype + "." + dtype) !=
            std::string::npos);
      CHECK(k.cuda().find("tessel::fence_quads(") != std::string::npos);
      CHECK(k.cuda().find("tessel::convert_pair(") != std::string::npos);
      CHECK(k.spillBytes() == 0);
      CHECK(remarked(k) == (transposed == "0"));
    }
  Kernel ada = build("sm_89", {{"dtype", "e4m3"}, {"v_transposed", "1"}});
  CHECK(ada.ptx().find("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32") != std::string::npos);
  Kernel blackwell = build("sm_100a", {{"dtype", "e4m3"}});
  CHECK(blackwell.ptx().find("tcgen05.mma.cta_group::1.kind::f8f6f4") != std::string::npos);
  CHECK(blackwell.ptx().find("kind::f16") == std::string::npos);
  CHECK(blackwell.spillBytes() == 0);
  CHECK_THAT(errorOf([&] { build("sm_100a", {{"dtype", "e4m3"}, {"variant", "ts"}}); }),
             Catch::Contains("FP8 inputs take variant=ss"));
  CHECK_THAT(errorOf([&] { build("sm_90a", {{"v_transposed", "1"}}); }),
             Catch::Contains("v_transposed"));
  CHECK_THAT(errorOf([&] {
               build("sm_90a", {{"dtype", "e4m3"}, {"v_transposed", "1"}, {"varlen", "1"}});
             }),
             Catch::Contains("fixed-length"));
  // Scales read on the device per (sequence, K/V head): three more strided
  // f32 tensors after v_scale, read once per tile, on every FP8 form.
  for (auto [arch, extra] : {std::pair<std::string, harness::Params>{"sm_90a", {{"v_transposed", "1"}}},
                             {"sm_90a", {{"persistent", "1"}, {"causal", "1"}}},
                             {"sm_89", {}},
                             {"sm_100a", {}}}) {
    INFO("descales on " << arch);
    extra.insert({{"dtype", "e4m3"}, {"descales", "1"}});
    Kernel k = build(arch, extra);
    std::vector<std::string> names;
    for (const ParamInfo &param : k.params()) names.push_back(param.name);
    for (const char *name : {"q_descale", "k_descale", "v_descale"})
      CHECK(std::find(names.begin(), names.end(), name) != names.end());
    CHECK(k.spillBytes() == 0);
  }
  CHECK_THAT(errorOf([&] { build("sm_90a", {{"descales", "1"}}); }),
             Catch::Contains("descales scale FP8 inputs; these are bf16"));
  CHECK_THAT(errorOf([&] { build("sm_100a", {{"descales", "1"}}); }),
             Catch::Contains("descales scale FP8 inputs; these are bf16"));
  CHECK_THAT(errorOf([&] { build("sm_100a", {{"descales", "1"}, {"variant", "ws"}}); }),
             Catch::Contains("descales scale FP8 inputs, which run on variant=ss"));
  // V rearranged for it: transposed, keys permuted, on every target.
  const harness::LibraryKernel &values = harness::findKernel("attention_fp8_values");
  for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
    Program program = values.build(harness::withDefaults(values, {}, arch));
    CHECK_NOTHROW(compile(program, {arch, ""}));
  }
}

// sm_100a: 8-bit gemms are tcgen05.mma kind::f8f6f4 (e4m3, e5m2) and kind::i8
// into tensor memory, K-major or MN-major, plain and warp-specialized, with
// no spills; the emulated build is the same kernel for sm_90a. Block scales
// are wgmma's (promotion in registers), an error here that says so.
TEST_CASE("FP8 and i8 gemms run on tcgen05.mma on sm_100a", "[fp8][tcgen05]") {
  const harness::LibraryKernel &entry = harness::findKernel("gemm");
  struct Case {
    const char *in, *out, *scale, *kind;
    bool kMajor;
  };
  for (Case c : {Case{"e4m3", "bf16", "tensor", "f8f6f4", true},
                 Case{"e5m2", "f32", "row", "f8f6f4", true},
                 Case{"e4m3", "f16", "none", "f8f6f4", false},
                 Case{"i8", "i32", "none", "i8", true}})
    for (std::string ws : {"off", "on"}) {
      INFO(c.in << " -> " << c.out << " scale=" << c.scale << " warp_specialize=" << ws
                << (c.kMajor ? " K-major" : " MN-major"));
      harness::Params p = {{"in", c.in},          {"out", c.out},     {"scale", c.scale},
                           {"transpose_b", c.kMajor ? "1" : "0"}, {"block_k", "128"},
                           {"warp_specialize", ws}};
      Program program = entry.build(harness::withDefaults(entry, p, "sm_100a"));
      Kernel k = compile(program, {"sm_100a", ""});
      CHECK(k.ptx().find(std::string("tcgen05.mma.cta_group::1.kind::") + c.kind) !=
            std::string::npos);
      CHECK(k.ptx().find("kind::f16") == std::string::npos);
      CHECK(k.ptx().find("wgmma") == std::string::npos);
      CHECK(k.ptx().find("mma.sync") == std::string::npos);
      CHECK(k.spillBytes() == 0);
      Program emulatedProgram = entry.build(harness::withDefaults(entry, p, "sm_100a-emu"));
      Kernel emulated = compile(emulatedProgram, {"sm_100a-emu", ""});
      CHECK(emulated.cuda().find(std::string("tessel::emu::tcgen05_mma<tessel::emu::kind_") +
                                 c.kind) != std::string::npos);
    }
  harness::Params block = {{"in", "e4m3"}, {"out", "bf16"}, {"scale", "block"},
                           {"transpose_b", "1"}, {"block_k", "128"}, {"block_n", "128"}};
  CHECK_THAT(errorOf([&] { entry.build(harness::withDefaults(entry, block, "sm_100a")); }),
             Catch::Contains("a block-scaled gemm"));
}

// MXFP8 on sm_100a: each K tile's scale atoms come in by TMA beside A and B,
// the MMA thread moves them into tensor memory with tcgen05.cp
// .32x128b.warpx4 (one for A's, one per 128 columns of B's) and issues
// kind::mxf8f6f4.block_scale MMAs, which ptxas assembles; plain and
// warp-specialized, without spills. Elsewhere MX is an error that names
// what it needs.
TEST_CASE("MX gemms are tcgen05.mma kind::mxf8f6f4 with tcgen05.cp on sm_100a", "[fp8][tcgen05]") {
  const harness::LibraryKernel &entry = harness::findKernel("gemm");
  for (std::string ws : {"off", "on"})
    for (std::string bn : {"128", "256"}) {
      INFO("warp_specialize=" << ws << " block_n=" << bn);
      harness::Params p = {{"in", "e4m3"},  {"out", "bf16"},       {"scale", "mx"},
                           {"transpose_b", "1"}, {"block_k", "128"}, {"block_n", bn},
                           {"warp_specialize", ws}};
      Program program = entry.build(harness::withDefaults(entry, p, "sm_100a"));
      Kernel k = compile(program, {"sm_100a", ""});
      const std::string &ptx = k.ptx();
      CHECK(ptx.find("tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.scale_vec::1X") !=
            std::string::npos);
      auto count = [&](const std::string &what) {
        int n = 0;
        for (size_t at = ptx.find(what); at != std::string::npos; at = ptx.find(what, at + 1)) ++n;
        return n;
      };
      CHECK(count("tcgen05.cp.cta_group::1.32x128b.warpx4") == 1 + std::stoi(bn) / 128);
      CHECK(k.spillBytes() == 0);
      Program emulatedProgram = entry.build(harness::withDefaults(entry, p, "sm_100a-emu"));
      Kernel emulated = compile(emulatedProgram, {"sm_100a-emu", ""});
      CHECK(emulated.cuda().find("tessel::emu::tcgen05_cp(") != std::string::npos);
      CHECK(emulated.cuda().find("tessel::emu::kind_mxf8f6f4") != std::string::npos);
    }
  for (auto [arch, params, why] :
       {std::tuple{"sm_90a", harness::Params{{"block_k", "128"}}, "not tcgen05"},
        std::tuple{"sm_100a", harness::Params{{"block_k", "64"}}, "block_k = 64"},
        std::tuple{"sm_100a", harness::Params{{"block_k", "128"}, {"block_n", "64"}},
                   "block_n = 64"}}) {
    harness::Params p = params;
    p.insert({{"in", "e4m3"}, {"out", "bf16"}, {"scale", "mx"}, {"transpose_b", "1"}});
    CHECK_THAT(errorOf([&] { entry.build(harness::withDefaults(entry, p, arch)); }),
               Catch::Contains("an MX gemm (scale = mx)") && Catch::Contains(why));
  }
}
