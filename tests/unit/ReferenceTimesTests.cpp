//===- ReferenceTimesTests.cpp - reading reference_anchors.py's JSON ------===//
#include <catch2/catch.hpp>

#include "tessel/harness/ReferenceTimes.h"
#include "tessel/runtime/Error.h"

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
