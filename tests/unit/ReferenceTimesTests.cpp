//===- ReferenceTimesTests.cpp - reading reference_anchors.py's JSON ------===//
#include <catch2/catch.hpp>

#include "tessel/harness/ReferenceTimes.h"
#include "tessel/runtime/Error.h"

#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace tessel;

using namespace tessel::harness;

// What `reference_anchors.py --json` writes (json.dump, indent=1): gemm and
// attention rows for two backends, booleans for the mask.
static const char *kSample = R"({
 "device": "NVIDIA H200",
 "rows": [
  {
   "op": "gemm", "impl": "cublas", "M": 4096, "N": 4096, "K": 4096, "dtype": "bfloat16",
   "ms": 0.197, "tflops": 697.3
  },
  {
   "op": "attention", "impl": "flash2", "batch": 4, "heads": 16, "seqlen": 4096,
   "head_dim": 128, "causal": true, "dtype": "bfloat16", "pass": "fwd", "ms": 0.75,
   "tflops": 366.5
  },
  {
   "op": "attention", "impl": "cudnn", "batch": 4, "heads": 16, "seqlen": 4096,
   "head_dim": 128, "causal": true, "dtype": "bfloat16", "pass": "fwd", "ms": 0.5,
   "tflops": 549.7
  },
  {
   "op": "attention", "impl": "cudnn", "batch": 4, "heads": 16, "seqlen": 4096,
   "head_dim": 128, "causal": false, "dtype": "bfloat16", "pass": "bwd", "ms": 2.5e0,
   "tflops": 1.1e2
  }
 ]
})";

TEST_CASE("reference timings: rows found by backend, shape, mask and pass") {
  ReferenceTimes t = parseReferenceTimes(kSample);
  CHECK(t.device == "NVIDIA H200");
  REQUIRE(t.rows.size() == 4);
  CHECK(t.rows[0].at("M") == "4096");
  CHECK(t.attentionMs("cudnn", 4096, 128, true, "fwd") == 0.5);
  CHECK(t.attentionMs("flash2", 4096, 128, true, "fwd") == 0.75);
  CHECK(t.attentionMs("cudnn", 4096, 128, false, "bwd") == 2.5);
  // Another mask, pass, length or head_dim is not a match.
  CHECK_FALSE(t.attentionMs("cudnn", 4096, 128, false, "fwd"));
  CHECK_FALSE(t.attentionMs("cudnn", 4096, 128, true, "bwd"));
  CHECK_FALSE(t.attentionMs("cudnn", 8192, 128, true, "fwd"));
  CHECK_FALSE(t.attentionMs("cudnn", 4096, 64, true, "fwd"));
  // Batch and heads, where asked for, must be the row's; a row without
  // heads_kv has as many K/V heads as query heads.
  CHECK(t.attentionMs("cudnn", 4096, 128, true, "fwd", 4, 16, 16) == 0.5);
  CHECK_FALSE(t.attentionMs("cudnn", 4096, 128, true, "fwd", 1, 16, 16));
  CHECK_FALSE(t.attentionMs("cudnn", 4096, 128, true, "fwd", 4, 32, 16));
  CHECK_FALSE(t.attentionMs("cudnn", 4096, 128, true, "fwd", 4, 16, 4));
}

TEST_CASE("reference timings: grouped K/V rows are told apart by heads_kv") {
  ReferenceTimes t = parseReferenceTimes(R"({"device": "NVIDIA H100", "rows": [
    {"op": "attention", "impl": "cudnn", "batch": 2, "heads": 32, "heads_kv": 8,
     "seqlen": 8192, "head_dim": 128, "causal": false, "pass": "bwd", "ms": 3.0},
    {"op": "attention", "impl": "cudnn", "batch": 2, "heads": 32, "heads_kv": 32,
     "seqlen": 8192, "head_dim": 128, "causal": false, "pass": "bwd", "ms": 4.0}]})");
  CHECK(t.attentionMs("cudnn", 8192, 128, false, "bwd", 2, 32, 8) == 3.0);
  CHECK(t.attentionMs("cudnn", 8192, 128, false, "bwd", 2, 32, 32) == 4.0);
  CHECK_FALSE(t.attentionMs("cudnn", 8192, 128, false, "bwd", 2, 64, 8));
}

TEST_CASE("reference timings: malformed files are errors with their offset") {
  auto errorOf = [](const std::string &text) -> std::string {
    try {
      parseReferenceTimes(text);
    } catch (const Error &e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(errorOf("") == "reference timings: expected '{' at byte 0");
  CHECK(errorOf(R"({"rows": [)") == "reference timings: expected '{' at byte 10");
  CHECK(errorOf(R"({"rows": []} x)") == "reference timings: expected the end of the file at byte 13");
  CHECK(errorOf(R"({"rows": [{"ms": "0.5}]})") == "reference timings: expected the end of a string at byte 24");
  CHECK(errorOf(R"({"rows": [{"ms": [1]}]})") ==
        "reference timings: expected a string, number or boolean (rows are flat) at byte 17");
  CHECK(errorOf(R"({"rows": [{"ms": nope}]})") == "reference timings: expected a value at byte 17");
  CHECK(errorOf(R"({"device": "x"})").find("the file has no \"rows\"") != std::string::npos);
  CHECK(parseReferenceTimes(R"({"rows": []})").rows.empty());
}

// What `reference_anchors.py --lowp --json` writes: cuBLASLt FP8 at both
// scalings and int8, with the bf16 run's cuBLAS rows beside them.
static const char *kGemmSample = R"({
 "device": "NVIDIA H100 80GB HBM3",
 "rows": [
  {"op": "gemm", "impl": "cublas", "M": 4096, "N": 4096, "K": 4096, "dtype": "float16",
   "ms": 0.25, "tflops": 550.0},
  {"op": "gemm", "impl": "cublas", "M": 4096, "N": 4096, "K": 4096, "dtype": "bfloat16",
   "ms": 0.26, "tflops": 528.0},
  {"op": "gemm", "impl": "cublaslt_fp8_tensor", "M": 128, "N": 14336, "K": 4096,
   "dtype": "e4m3->bf16", "ms": 0.03, "tflops": 500.0},
  {"op": "gemm", "impl": "cublaslt_fp8_row", "M": 128, "N": 14336, "K": 4096,
   "dtype": "e4m3->bf16", "ms": 0.035, "tflops": 430.0},
  {"op": "gemm", "impl": "cublas_int8", "M": 8192, "N": 4096, "K": 14336, "dtype": "i8->i32",
   "ms": 0.9, "tflops": 1070.0},
  {"op": "attention", "impl": "cublas", "M": 4096, "N": 4096, "K": 4096, "ms": 9.0}
 ]
})";

TEST_CASE("reference timings: gemm rows found by impl, dtype and shape") {
  ReferenceTimes t = parseReferenceTimes(kGemmSample);
  CHECK(t.gemmMs("cublas", "float16", 4096, 4096, 4096) == 0.25);
  CHECK(t.gemmMs("cublas", "bfloat16", 4096, 4096, 4096) == 0.26);
  // No dtype: the first row of that impl and shape.
  CHECK(t.gemmMs("cublas", "", 4096, 4096, 4096) == 0.25);
  CHECK(t.gemmMs("cublaslt_fp8_tensor", "e4m3->bf16", 128, 14336, 4096) == 0.03);
  CHECK(t.gemmMs("cublaslt_fp8_row", "", 128, 14336, 4096) == 0.035);
  CHECK(t.gemmMs("cublas_int8", "i8->i32", 8192, 4096, 14336) == 0.9);
  // M, N and K each count, in their places; so do impl and dtype; and only
  // gemm rows are gemms.
  CHECK_FALSE(t.gemmMs("cublaslt_fp8_tensor", "", 128, 4096, 14336));
  CHECK_FALSE(t.gemmMs("cublaslt_fp8_tensor", "", 14336, 128, 4096));
  CHECK_FALSE(t.gemmMs("cublas_int8", "i8->i32", 8192, 4096, 4096));
  CHECK_FALSE(t.gemmMs("cublas", "e4m3->bf16", 4096, 4096, 4096));
  CHECK_FALSE(t.gemmMs("cublas", "float16", 8192, 8192, 8192));
  CHECK_FALSE(t.gemmMs("cudnn", "", 4096, 4096, 4096));
  // The attention rows of the other sample hold no gemm but the one cuBLAS row.
  ReferenceTimes a = parseReferenceTimes(kSample);
  CHECK(a.gemmMs("cublas", "bfloat16", 4096, 4096, 4096) == 0.197);
  CHECK_FALSE(a.gemmMs("cublas", "float16", 4096, 4096, 4096));
}

TEST_CASE("reference timings: several files read as one") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / fs::path("tessel-reference-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string bf16 = (dir / "bf16.json").string(), lowp = (dir / "lowp.json").string();
  std::ofstream(bf16) << kSample;
  std::ofstream(lowp) << kGemmSample;
  // Repeated and comma-separated paths both read every file once.
  for (const std::vector<std::string> &paths :
       {std::vector<std::string>{bf16, lowp}, std::vector<std::string>{bf16 + "," + lowp}}) {
    ReferenceTimes t = readReferenceTimes(paths);
    CHECK(t.rows.size() == 10);
    CHECK(t.device == "NVIDIA H200, NVIDIA H100 80GB HBM3");
    CHECK(t.attentionMs("cudnn", 4096, 128, true, "fwd") == 0.5);
    CHECK(t.gemmMs("cublas_int8", "", 8192, 4096, 14336) == 0.9);
  }
  // One device named once.
  CHECK(readReferenceTimes(std::vector<std::string>{bf16, bf16}).device == "NVIDIA H200");
  auto errorOf = [](const std::vector<std::string> &paths) -> std::string {
    try {
      readReferenceTimes(paths);
    } catch (const Error &e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(errorOf({bf16 + ","}) == "reference timings: an empty path in '" + bf16 + ",'");
  CHECK(errorOf({(dir / "none.json").string()}) ==
        "reference timings: cannot read " + (dir / "none.json").string());
  fs::remove_all(dir);
}

TEST_CASE("reference timings: the reference a gemm's settings call for") {
  auto impl = [](std::map<std::string, std::string> settings) -> std::string {
    std::optional<GemmReference> r = gemmReferenceFor(settings);
    return r ? r->impl + " " + r->dtype : "none";
  };
  CHECK(impl({}) == "cublas float16");
  CHECK(impl({{"in", "f16"}, {"out", "f32"}}) == "cublas float16");
  CHECK(impl({{"in", "bf16"}}) == "cublas bfloat16");
  CHECK(impl({{"in", "f8e4m3"}}) == "cublaslt_fp8_tensor e4m3->bf16");
  CHECK(impl({{"in", "e4m3"}, {"scale", "tensor"}}) == "cublaslt_fp8_tensor e4m3->bf16");
  CHECK(impl({{"in", "f8e4m3"}, {"scale", "row"}}) == "cublaslt_fp8_row e4m3->bf16");
  CHECK(impl({{"in", "i8"}}) == "cublas_int8 i8->i32");
  // Inputs the reference script does not time.
  CHECK(impl({{"in", "f32"}}) == "none");
  CHECK(impl({{"in", "f8e5m2"}}) == "none");
}

TEST_CASE("reference timings: gemm shape lists") {
  using S = GemmShape;
  CHECK(parseGemmShapes("4096x4096x4096") == std::vector<S>{{4096, 4096, 4096}});
  CHECK(parseGemmShapes("4096x4096x4096,8192x1024x512") ==
        std::vector<S>{{4096, 4096, 4096}, {8192, 1024, 512}});
  std::vector<S> llm = parseGemmShapes("llm");
  REQUIRE(llm.size() == 9);
  CHECK(llm[0] == S{128, 4096, 4096});
  CHECK(llm[1] == S{128, 14336, 4096});
  CHECK(llm[2] == S{128, 4096, 14336});
  CHECK(llm[3] == S{1024, 4096, 4096});
  CHECK(llm[8] == S{8192, 4096, 14336});
  std::vector<S> both = parseGemmShapes("8192x8192x8192,llm");
  REQUIRE(both.size() == 10);
  CHECK(both[0] == S{8192, 8192, 8192});
  CHECK(both[1] == S{128, 4096, 4096});
  auto errorOf = [](const std::string &text) -> std::string {
    try {
      parseGemmShapes(text);
    } catch (const Error &e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(errorOf("") == "--shapes: '' is not MxNxK or llm");
  CHECK(errorOf("4096x4096") == "--shapes: '4096x4096' is not MxNxK or llm");
  CHECK(errorOf("1x2x3x4") == "--shapes: '1x2x3x4' is not MxNxK or llm");
  CHECK(errorOf("4096x4096x4096,") == "--shapes: '' is not MxNxK or llm");
  CHECK(errorOf("LLM") == "--shapes: 'LLM' is not MxNxK or llm");
  CHECK(errorOf("4096xfourx4096") == "--shapes 4096xfourx4096: N=four is not an integer");
  CHECK(errorOf("0x1x1") ==
        "--shapes 0x1x1: M=0 is out of range: use an integer in [1, 2147483647]");
}
