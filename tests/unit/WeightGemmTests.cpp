//===- WeightGemmTests.cpp - weight-only quantised GEMMs without a GPU ----===//
//
// What tessel::weight_gemm checks before anything runs, the scratch it
// asks for on each path, the kernels' configuration errors, and what the
// kernels compile to on every target: the codes unpacked without an
// integer-to-float conversion, the weights fed to the tensor cores from
// registers.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "ErrorOf.h"
#include "tessel/Tessel.h"
#include "tessel/dsl/Compile.h"

#include <regex>

using namespace tessel;
using namespace tessel::kernels;
using rt::ScalarType;
using test::errorOf;

namespace {
TensorView view(ScalarType t, std::vector<int64_t> shape, uint64_t at = 0x10000) {
  return TensorView::contiguous(at, t, std::move(shape));
}
int64_t count(const std::string &text, const std::string &pattern) {
  std::regex re(pattern);
  auto words = std::sregex_iterator(text.begin(), text.end(), re);
  return std::distance(words, std::sregex_iterator());
}
} // namespace

TEST_CASE("weight_gemm says which view is wrong and why", "[views][weights]") {
  TensorView x = view(ScalarType::BF16, {4, 1024}), w = view(ScalarType::U8, {320, 512});
  TensorView scales = view(ScalarType::BF16, {8, 320}), y = view(ScalarType::BF16, {4, 320});
  auto error = [](const TensorView &x2, const TensorView &w2, const TensorView &s2,
                  const TensorView &y2, WeightGemmOptions o = {}) {
    return errorOf([&] { tessel::weight_gemm(x2, w2, s2, y2, o); });
  };
  CHECK_THAT(error(view(ScalarType::F32, {4, 1024}), w, scales, y),
             Catch::Contains("x is f32[4, 1024] on device 0: it must be bf16 or f16"));
  CHECK_THAT(error(x, view(ScalarType::BF16, {320, 512}), scales, y),
             Catch::Contains("w is bf16[320, 512] on device 0: it must be u8 or i8"));
  CHECK_THAT(error(x, view(ScalarType::U8, {320, 1024}), scales, y),
             Catch::Contains("int4 (u8, two codes a byte) weights are [N, K / 2]"));
  CHECK_THAT(error(x, view(ScalarType::I8, {320, 512}), scales, y),
             Catch::Contains("int8 weights are [N, K]"));
  CHECK_THAT(error(x, w, view(ScalarType::F16, {8, 320}), y),
             Catch::Contains("scales is f16[8, 320] on device 0: it must be bf16"));
  CHECK_THAT(error(x, w, view(ScalarType::BF16, {8, 300}), y),
             Catch::Contains("it is [K / group, N] = [K / group, 320]"));
  CHECK_THAT(error(x, w, view(ScalarType::BF16, {4, 320}), y),
             Catch::Contains("a group of 256 of K; weight_gemm takes groups of 32, 64 or 128"));
  CHECK_THAT(error(x, w, scales, view(ScalarType::BF16, {4, 321})),
             Catch::Contains("y is bf16[4, 321] on device 0: expected shape [4, 320]"));
  WeightGemmOptions o;
  o.zeros = view(ScalarType::BF16, {8, 32});
  CHECK_THAT(error(x, w, scales, y, o),
             Catch::Contains("zeros is bf16[8, 32] on device 0: expected shape [8, 320]"));
  o.zeros = view(ScalarType::BF16, {8, 320});
  o.zeros->device = 1;
  CHECK_THAT(error(x, w, scales, y, o), Catch::Contains("tensors on devices 0 and 1"));
  CHECK_THAT(error(view(ScalarType::BF16, {4, 0}), view(ScalarType::U8, {320, 0}),
                   view(ScalarType::BF16, {0, 320}), y),
             Catch::Contains("weight_gemm needs K > 0"));
  // No tokens: nothing runs (no driver is touched), and the choice says so.
  Choice none = tessel::weight_gemm(view(ScalarType::BF16, {0, 1024}), w, scales,
                                    view(ScalarType::BF16, {0, 320}));
  CHECK(none.config == "weight_gemm: nothing to compute (M = 0, N = 320)");
}

TEST_CASE("weight_gemm asks for scratch by its path", "[views][weights]") {
  TensorView w = view(ScalarType::U8, {320, 512}), scales = view(ScalarType::BF16, {8, 320});
  auto bytes = [&](int64_t m, ScalarType out) {
    return weightGemmWorkspaceBytes(view(ScalarType::BF16, {m, 1024}), w, scales,
                                    view(out, {m, 320}));
  };
  // Many tokens: the dense weights. Few: f32 sums for a 16-bit y, none for
  // an f32 y (split-K adds into it).
  CHECK(bytes(256, ScalarType::BF16) == 320 * 1024 * 2);
  CHECK(bytes(3, ScalarType::BF16) == 3 * 320 * 4);
  CHECK(bytes(3, ScalarType::F32) == 0);
}

TEST_CASE("weight_gemm's settings are checked where they are read", "[weights]") {
  auto error = [](WeightGemmConfig c) { return errorOf([&] { kernels::weightGemm(c); }); };
  WeightGemmConfig c;
  c.group = 48;
  CHECK_THAT(error(c), Catch::Contains("group is 32, 64 or 128, got 48"));
  c = {};
  c.splitK = 4;
  CHECK_THAT(error(c), Catch::Contains("split_k = 4 adds each K slice's partial product into y: y "
                                       "must be f32 (out = f32), got bf16"));
  c = {};
  c.blockK = 96;
  CHECK_THAT(error(c), Catch::Contains("block_k = 96 must be a multiple or a divisor of group = 128"));
  c = {};
  c.activations = DType::f32;
  CHECK_THAT(error(c), Catch::Contains("activations are f16 or bf16, got f32"));
  WeightDequantizeConfig d;
  d.blockK = 64;
  CHECK_THAT(errorOf([&] { kernels::weightDequantize(d); }),
             Catch::Contains("block_k = 64 is not a multiple of group = 128"));
}

TEST_CASE("weight_gemm unpacks codes without conversions into register operands",
          "[weights][compile]") {
  for (auto [arch, instruction, mma] :
       {std::tuple{"sm_90a", GemmInstruction::wgmma, "wgmma.mma_async.sync.aligned.m64n16k16"},
        {"sm_90a", GemmInstruction::mma_sync, "mma.sync.aligned.m16n8k16"},
        {"sm_80", GemmInstruction::mma_sync, "mma.sync.aligned.m16n8k16"},
        {"sm_100a", GemmInstruction::mma_sync, "mma.sync.aligned.m16n8k16"}})
    for (WeightFormat format : {WeightFormat::int4, WeightFormat::int8})
      for (bool zeros : {false, true}) {
        WeightGemmConfig c;
        c.format = format;
        c.zeros = zeros;
        c.instruction = instruction;
        Program p = kernels::weightGemm(c);
        Kernel k = compile(p, {arch, ""});
        INFO(arch << (format == WeightFormat::int4 ? " int4" : " int8") << " zeros " << zeros);
        const std::string &ptx = k.ptx();
        CHECK(count(ptx, mma) > 0);
        // The weights go to the tensor cores from registers: wgmma reads A
        // from registers, not a descriptor, where it is the instruction.
        if (instruction == GemmInstruction::wgmma)
          CHECK(count(ptx, R"(wgmma[^;]*\},\s*\{%r)") > 0);
        // No integer-to-float conversion and no division in the unpacking.
        CHECK(count(ptx, R"(cvt\.rn\.f32\.[su](8|16|32))") == 0);
        CHECK(count(ptx, R"(div\.rn\.f32)") == 0);
        CHECK(k.spillBytes() == 0);
      }
  for (const char *arch : {"sm_80", "sm_90a", "sm_100a"}) {
    WeightDequantizeConfig d;
    d.zeros = true;
    Program p = kernels::weightDequantize(d);
    Kernel k = compile(p, {arch, ""});
    CHECK(count(k.ptx(), R"(cvt\.rn\.f32\.[su](8|16|32))") == 0);
  }
}
