//===- AttentionValidationTests.cpp - attention arguments before launch ---===//
#include <catch2/catch.hpp>

#include "tessel/kernels/Kernels.h"

#include <string>

using namespace tessel;
using namespace tessel::kernels;

namespace {
AttentionArgs fixedArgs() {
  AttentionArgs a;
  a.q = a.o = {DType::bf16, {2, 300, 8, 128}};
  a.k = a.v = {DType::bf16, {2, 300, 2, 128}};
  return a;
}

AttentionArgs packedArgs() {
  AttentionArgs a;
  a.q = a.o = {DType::bf16, {1, 383, 8, 128}};
  a.k = a.v = {DType::bf16, {1, 383, 2, 128}};
  a.cuSeqlensQ = a.cuSeqlensK = {0, 1, 78, 378, 383};
  a.maxSeqlenQ = a.maxSeqlenK = 300;
  return a;
}

std::string errorOf(const AttentionArgs &a, bool varlen = false, DType t = DType::bf16,
                    int64_t headDim = 128) {
  try {
    validateAttention(t, headDim, varlen, a);
  } catch (const Error &e) {
    return e.what();
  }
  return "no error";
}
} // namespace

TEST_CASE("well-formed attention arguments pass") {
  CHECK(errorOf(fixedArgs()) == "no error");
  CHECK(errorOf(packedArgs(), true) == "no error");
}

TEST_CASE("attention arguments that disagree are named") {
  AttentionArgs a = fixedArgs();
  a.k.shape[2] = 3;
  a.v.shape[2] = 3;
  CHECK(errorOf(a) == "heads_q = 8 is not a multiple of heads_kv = 3: each K/V head serves a group "
                      "of heads_q / heads_kv query heads");
  a = fixedArgs();
  a.v.dtype = DType::f16;
  CHECK(errorOf(a) == "V is f16 but the kernel was built for bf16");
  a = fixedArgs();
  CHECK(errorOf(a, false, DType::bf16, 64) ==
        "Q has head_dim 128 but the kernel was built for head_dim 64");
  a = fixedArgs();
  a.v.shape[1] = 301;
  CHECK(errorOf(a) == "K [2, 300, 2, 128] and V [2, 301, 2, 128] differ in shape");
  a = fixedArgs();
  a.o.shape[0] = 3;
  CHECK(errorOf(a) == "Q [2, 300, 8, 128] and O [3, 300, 8, 128] differ in shape");
  a = fixedArgs();
  a.k.shape[0] = a.v.shape[0] = 1;
  CHECK(errorOf(a) == "Q has batch 2 but K has batch 1");
  a = fixedArgs();
  a.k.shape[2] = a.v.shape[2] = 0;
  CHECK(errorOf(a) == "K has an empty dimension: [2, 300, 0, 128]");
  a = fixedArgs();
  a.q.shape = {600, 8, 128};
  CHECK(errorOf(a) == "Q has shape [600, 8, 128]; attention tensors are [batch, seqlen, heads, head_dim]");
}

TEST_CASE("packed sequences are checked against cu_seqlens and max_seqlen") {
  AttentionArgs a = packedArgs();
  a.maxSeqlenQ = 299;
  CHECK(errorOf(a, true) == "max_seqlen_q = 299 is smaller than sequence 2 of cu_seqlens_q, which has "
                            "300 rows");
  a = packedArgs();
  a.cuSeqlensK = {0, 1, 78, 77, 383};
  CHECK(errorOf(a, true) == "cu_seqlens_k is not monotone: entry 3 is 77 after 78");
  a = packedArgs();
  a.cuSeqlensQ = {1, 78, 378, 383, 383};
  CHECK(errorOf(a, true) == "cu_seqlens_q[0] is 1; prefix sums start at 0");
  a = packedArgs();
  a.cuSeqlensQ.back() = 380;
  CHECK(errorOf(a, true) == "cu_seqlens_q ends at 380 but the packed tensor has 383 rows");
  a = packedArgs();
  a.cuSeqlensK = {0, 383};
  CHECK(errorOf(a, true) == "cu_seqlens_q has 5 entries but cu_seqlens_k has 2; both list the same "
                            "sequences");
  a = packedArgs();
  a.q.shape[0] = a.o.shape[0] = a.k.shape[0] = a.v.shape[0] = 2;
  CHECK(errorOf(a, true).find("packed (varlen) tensors have batch 1") == 0);
  CHECK(errorOf(packedArgs(), false) ==
        "cu_seqlens given to a kernel built for fixed-length batches; build it with varlen");
}

TEST_CASE("unsupported head dimensions are refused when the kernel is built") {
  AttentionConfig fwd;
  fwd.headDim = 96;
  CHECK_THROWS_WITH(flashAttentionForward(fwd),
                    "flash attention forward supports head_dim 64, 128 and 256, not 96");
  AttentionBackwardConfig bwd;
  bwd.headDim = 256;
  CHECK_THROWS_WITH(flashAttentionBackward(bwd),
                    "flash attention backward supports head_dim 64 and 128, not 256");
}
