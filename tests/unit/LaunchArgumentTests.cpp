//===- LaunchArgumentTests.cpp - every launch description fits its kernel -===//
//
// The attention kernels are launched by the public calls, the
// sequence-parallel forms and the harness through one description of their
// arguments each (AttentionForwardArgs, AttentionBackwardArgs). Here each
// description is checked against the parameters of the kernel it launches,
// for every way a kernel is built, with Kernel::checkArguments (no device).
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "tessel/kernels/Kernels.h"
#include "tessel/kernels/parallel/SequenceParallelAttention.h"

#include <cmath>

using namespace tessel;
using namespace tessel::kernels;
using rt::LaunchArg;
using rt::ScalarType;

namespace {
/// Addresses that are never dereferenced: checkArguments looks at shapes,
/// types and strides only.
CUdeviceptr fakeAddress(int n) { return CUdeviceptr(0x100000) * CUdeviceptr(n + 1); }

LaunchArg view(int n, ScalarType t, std::vector<int64_t> shape) {
  return LaunchArg::view(TensorView::contiguous(fakeAddress(n), t, std::move(shape), 0));
}

struct Extents {
  int64_t batch = 2, seqQ = 300, seqK = 260, headsQ = 4, headsKv = 2, headDim = 128;
};

AttentionForwardArgs forwardArgs(const Extents &e) {
  AttentionForwardArgs a;
  a.batch = e.batch, a.seqQ = e.seqQ, a.seqK = e.seqK, a.headsQ = e.headsQ, a.headsKv = e.headsKv;
  a.scale = 1 / std::sqrt(double(e.headDim));
  a.q = view(0, ScalarType::BF16, {e.batch, e.seqQ, e.headsQ, e.headDim});
  a.k = view(1, ScalarType::BF16, {e.batch, e.seqK, e.headsKv, e.headDim});
  a.v = view(2, ScalarType::BF16, {e.batch, e.seqK, e.headsKv, e.headDim});
  a.o = view(3, ScalarType::BF16, {e.batch, e.seqQ, e.headsQ, e.headDim});
  a.lse = view(4, ScalarType::F32, {e.batch, e.headsQ, e.seqQ});
  return a;
}

Kernel compileFor(Program program, const std::string &arch) { return compile(program, {arch}); }
} // namespace

TEST_CASE("the forward launch description fits every forward kernel") {
  Extents e;
  AttentionConfig c;
  for (std::string arch : {"sm_80", "sm_90a"}) {
    INFO(arch);
    compileFor(flashAttentionForward(c), arch).checkArguments(forwardArgs(e).list());
    // Packed sequences: batch 1, every row, the prefix sums last.
    AttentionConfig packed = c;
    packed.varlen = true;
    Extents p{1, 500, 500, 4, 2, 128};
    AttentionForwardArgs a = forwardArgs(p);
    a.packed = {4, 300, view(5, ScalarType::I32, {4}), view(6, ScalarType::I32, {4})};
    compileFor(flashAttentionForward(packed), arch).checkArguments(a.list());
    // Shards that arrive while the kernel runs, and queries placed by an
    // offset under the causal mask.
    AttentionConfig streamed = c;
    streamed.streamedShards = true;
    Extents s{1, 512, 512, 4, 2, 128};
    a = forwardArgs(s);
    a.streamed = {256, 2, 1, 7, view(7, ScalarType::I32, {2})};
    compileFor(flashAttentionForward(streamed), arch).checkArguments(a.list());
    AttentionConfig offset = c;
    offset.causal = offset.queryOffset = true;
    a = forwardArgs(e);
    a.queryOffset = 40;
    compileFor(flashAttentionForward(offset), arch).checkArguments(a.list());
    // What a list that leaves a setting's arguments out gets.
    CHECK_THROWS_WITH(compileFor(flashAttentionForward(offset), arch).checkArguments(forwardArgs(e).list()),
                      Catch::Contains("takes 12 arguments, got 11"));
  }
  // The tcgen05 forms take the same arguments.
  compileFor(flashAttentionForwardTcgen05(c, false), "sm_100a").checkArguments(forwardArgs(e).list());
  compileFor(flashAttentionForwardTcgen05(c, true), "sm_100a").checkArguments(forwardArgs(e).list());
  AttentionConfig ws = c;
  ws.threads = 512;
  compileFor(flashAttentionForwardTcgen05Ws(ws), "sm_100a").checkArguments(forwardArgs(e).list());
  // O and LSE stand where the description says.
  std::vector<LaunchArg> list = forwardArgs(e).list();
  CHECK(list[AttentionForwardArgs::kOutIndex].ptr == fakeAddress(3));
  CHECK(list[AttentionForwardArgs::kLseIndex].ptr == fakeAddress(4));
}

TEST_CASE("the backward launch description fits its three kernels") {
  for (KvReduction r : {KvReduction::direct, KvReduction::atomic, KvReduction::split})
    for (bool varlen : {false, true}) {
      INFO("reduction " << int(r) << (varlen ? " varlen" : ""));
      AttentionBackwardConfig c;
      c.kvReduction = r;
      c.varlen = varlen;
      Extents e = varlen ? Extents{1, 500, 500, 4, 2, 128} : Extents{};
      if (r == KvReduction::direct) e.headsKv = e.headsQ;
      AttentionBackwardArgs a;
      a.batch = e.batch, a.seqQ = e.seqQ, a.seqK = e.seqK, a.headsQ = e.headsQ;
      a.headsKv = e.headsKv, a.scale = 0.125, a.kvReduction = r;
      std::vector<int64_t> qShape = {e.batch, e.seqQ, e.headsQ, e.headDim};
      std::vector<int64_t> kShape = {e.batch, e.seqK, e.headsKv, e.headDim};
      std::vector<int64_t> accumShape = {e.batch, e.seqK, a.accumHeads(), e.headDim};
      a.q = view(0, ScalarType::BF16, qShape), a.o = view(1, ScalarType::BF16, qShape);
      a.dout = view(2, ScalarType::BF16, qShape), a.dq = view(3, ScalarType::BF16, qShape);
      a.k = view(4, ScalarType::BF16, kShape), a.v = view(5, ScalarType::BF16, kShape);
      a.dk = view(6, ScalarType::BF16, kShape), a.dv = view(7, ScalarType::BF16, kShape);
      a.lse = view(8, ScalarType::F32, {e.batch, e.headsQ, e.seqQ});
      a.delta = view(9, ScalarType::F32, {e.batch, e.headsQ, e.seqQ});
      a.dqAccum = view(10, ScalarType::F32, qShape);
      bool direct = r == KvReduction::direct;
      a.dkAccum = direct ? a.dk : view(11, ScalarType::F32, accumShape);
      a.dvAccum = direct ? a.dv : view(12, ScalarType::F32, accumShape);
      if (varlen) a.packed = {4, 300, view(13, ScalarType::I32, {4}), view(14, ScalarType::I32, {4})};
      for (std::string arch : {"sm_90a", "sm_100a"}) {
        AttentionBackwardConfig target = c;
        if (arch == "sm_100a") target.form = BackwardForm::ss, target.blockM = 128;
        compileFor(flashAttentionBackwardPre(target), arch).checkArguments(a.preArgs());
        compileFor(flashAttentionBackward(target), arch).checkArguments(a.mainArgs());
        Kernel post = compileFor(flashAttentionBackwardPost(target), arch);
        std::vector<std::vector<LaunchArg>> posts = a.postArgs();
        CHECK(posts.size() == (direct ? 1u : 3u));
        for (const std::vector<LaunchArg> &args : posts) post.checkArguments(args);
      }
    }
}

TEST_CASE("the sequence-parallel forms' arguments fit the forward kernels") {
  SequenceParallelProblem p;
  p.shape.batch = 1, p.shape.seqlen = 1024, p.shape.headsQ = 8, p.shape.headsKV = 4;
  p.shape.headDim = 128, p.shape.elementBytes = 2, p.shape.ranks = 2;
  p.scale = 1 / std::sqrt(128.0);
  // A fixed batch needs no prefix sums on the device.
  DeviceSeqlens cu(p.shape);
  AttentionForwardArgs group =
      wholeSequenceArgs(p, cu, 2, 1, fakeAddress(0), fakeAddress(1), fakeAddress(2),
                        fakeAddress(3), fakeAddress(4));
  compileFor(flashAttentionForward(p.config), "sm_90a").checkArguments(group.list());
  // The fused form: each source rank's shard of the local sequence.
  AttentionConfig streamed = p.config;
  streamed.streamedShards = true;
  group.streamed = {p.shape.localSeq(), p.shape.ranks, 1, 3,
                    LaunchArg::buffer(fakeAddress(5), {p.shape.ranks})};
  compileFor(flashAttentionForward(streamed), "sm_90a").checkArguments(group.list());
}

TEST_CASE("a block budget is refused, before the device, for a kernel that is not persistent") {
  Program p("not_persistent");
  Tensor y = p.tensor("y", {256}, DType::f32);
  p.kernel({2}, 128, [&](Expr bx) { parallel(128, [&](Expr i) { y(bx * 128 + i) = 1.0; }); });
  Kernel k = compile(p, {"sm_80"});
  rt::LaunchOptions budget;
  budget.maxBlocks = 4;
  CHECK_THROWS_WITH(k.launch({view(0, ScalarType::F32, {256})}, nullptr, budget),
                    Catch::Contains("sizes persistent() kernels"));
  budget.maxBlocks = -1;
  CHECK_THROWS_WITH(k.launch({view(0, ScalarType::F32, {256})}, nullptr, budget),
                    Catch::Contains("sizes persistent() kernels"));
}
