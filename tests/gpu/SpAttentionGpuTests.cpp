//===- SpAttentionGpuTests.cpp - tessel::sp_attention across ranks --------===//
//
// The sequence-parallel call in processes of their own, as torchrun starts
// them: a visible case launches this binary's hidden "[.sp_rank]" case on
// two local ranks (two GPUs, or two virtual ranks sharing one), where each
// rank calls sp_attention::forward on its shards and compares its O with
// single-GPU attention over the whole problem, run by itself.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "tessel/Tessel.h"
#include "tessel/Testing.h"
#include "tessel/runtime/Communicator.h"
#include "tessel/runtime/Driver.h"
#include "SpShards.h"

#include <filesystem>
#include <fmt/format.h>
#include <random>

using namespace tessel;
using namespace tessel::testing;

namespace {

/// One rank's check of one case; returns the relative error of its O shard
/// against single-GPU attention.
double runCase(rt::Communicator &comm, const SpCase &c, std::string &config) {
  const int ranks = comm.size(), device = comm.device();
  const DType t = DType::bf16;
  bool packed = !c.cuSeqlens.empty();
  int64_t total = packed ? c.cuSeqlens.back() : c.batch * c.seqlen;
  std::mt19937_64 rng(c.seqlen * 31 + c.headsQ + c.causal); // the same on every rank
  HostTensor q(t, {total, c.headsQ, c.headDim}), k(t, {total, c.headsKv, c.headDim}),
      v(t, {total, c.headsKv, c.headDim}), o(t, {total, c.headsQ, c.headDim});
  for (HostTensor *x : {&q, &k, &v}) randomize(*x, rng);
  std::vector<int64_t> rows = shardRows(c, ranks, comm.rank());
  HostTensor qs = shardOf(q, rows), ks = shardOf(k, rows), vs = shardOf(v, rows), os = shardOf(o, rows);
  auto qd = upload(qs), kd = upload(ks), vd = upload(vs), od = poisoned(os);
  int64_t batch = packed ? 1 : c.batch, local = int64_t(rows.size()) / batch;
  sp_attention::Options opt;
  opt.causal = c.causal;
  opt.cuSeqlensQ = c.cuSeqlens;
  if (c.zigzag) opt.placement = sp_attention::Placement::zigzag;
  CUstream stream = comm.stream();
  Choice choice = sp_attention::forward(
      comm, viewOf(*qd, t, {batch, local, c.headsQ, c.headDim}, device),
      viewOf(*kd, t, {batch, local, c.headsKv, c.headDim}, device),
      viewOf(*vd, t, {batch, local, c.headsKv, c.headDim}, device),
      viewOf(*od, t, {batch, local, c.headsQ, c.headDim}, device), opt, stream);
  config = choice.config;
  // Single-GPU attention over the whole problem.
  auto qw = upload(q), kw = upload(k), vw = upload(v), ow = poisoned(o);
  HostTensor lse(DType::f32, {batch, c.headsQ, total / batch});
  auto lw = poisoned(lse);
  std::unique_ptr<rt::DeviceBuffer> cuDevice;
  attention::ForwardOptions fo;
  fo.causal = c.causal;
  if (packed) {
    HostTensor cu(DType::i32, {int64_t(c.cuSeqlens.size())});
    int64_t longest = 0;
    for (size_t s = 0; s < c.cuSeqlens.size(); ++s) {
      cu.set(s, float(c.cuSeqlens[s]));
      if (s) longest = std::max<int64_t>(longest, c.cuSeqlens[s] - c.cuSeqlens[s - 1]);
    }
    cuDevice = upload(cu);
    fo.cuSeqlensQ = fo.cuSeqlensK = TensorView::contiguous(
        cuDevice->ptr(), rt::ScalarType::I32, {int64_t(c.cuSeqlens.size())}, device);
    fo.maxSeqlenQ = fo.maxSeqlenK = longest;
  }
  attention::forward(viewOf(*qw, t, {batch, total / batch, c.headsQ, c.headDim}, device),
                     viewOf(*kw, t, {batch, total / batch, c.headsKv, c.headDim}, device),
                     viewOf(*vw, t, {batch, total / batch, c.headsKv, c.headDim}, device),
                     viewOf(*ow, t, {batch, total / batch, c.headsQ, c.headDim}, device),
                     TensorView::contiguous(lw->ptr(), rt::ScalarType::F32,
                                            {batch, c.headsQ, total / batch}, device),
                     fo, stream);
  rt::Driver &d = rt::Driver::get();
  TESSEL_CU(d, cuStreamSynchronize, stream);
  download(*od, os);
  download(*ow, o);
  HostTensor expected = shardOf(o, rows);
  std::vector<double> ref(expected.values.begin(), expected.values.end());
  return relativeError(os, ref);
}

} // namespace

TEST_CASE("one rank of sp_attention::forward (run by the case below)", "[.sp_rank]") {
  auto comm = rt::Communicator::fromEnvironment();
  // Transfers go on the device's highest-priority stream.
  int lowest = 0, highest = 0, priority = 1;
  rt::Driver &d = rt::Driver::get();
  TESSEL_CU(d, cuCtxGetStreamPriorityRange, &lowest, &highest);
  TESSEL_CU(d, cuStreamGetPriority, comm->stream(), &priority);
  CHECK(priority == highest);
  const std::vector<SpCase> cases = {
      {2, 512, 8, 4, 128, false, {}}, // MHA-like groups, a fixed batch
      {1, 1024, 8, 2, 64, true, {}},  // GQA, causal
      {1, 256, 4, 1, 128, true, {}},  // one K/V head, replicated on both ranks
      {1, 0, 8, 8, 128, true, {0, 2, 258, 770}}, // packed, a length-2 sequence
      {2, 512, 8, 2, 128, true, {}, true},        // zig-zag: chunks 0 and 3, 1 and 2
      {1, 1024, 4, 1, 64, false, {}, true},       // zig-zag without the mask
  };
  for (const SpCase &c : cases) {
    std::string config;
    double error = runCase(*comm, c, config);
    fmt::print("rank {}: sp_attention batch={} seqlen={} heads {}/{} d={} causal={} packed={} "
               "zigzag={}: rel error {:.2e} against one GPU; {}\n",
               comm->rank(), c.batch, c.seqlen, c.headsQ, c.headsKv, c.headDim, c.causal,
               !c.cuSeqlens.empty(), c.zigzag, error, config);
    INFO(config);
    CHECK(error < 1e-3);
  }
  // A problem that cannot run is an error on every rank before anything
  // moves, naming the rank and the value.
  rt::DeviceBuffer small(64 * 96 * 2);
  TensorView bad = TensorView::contiguous(small.ptr(), rt::ScalarType::BF16, {1, 16, 4, 96},
                                          comm->device());
  CHECK_THROWS_WITH(sp_attention::forward(*comm, bad, bad, bad, bad),
                    Catch::Contains("rank 0: head_dim = 96"));
  // Ranks that disagree on the problem: both learn it.
  int64_t rows = comm->rank() == 0 ? 16 : 8;
  TensorView mine = TensorView::contiguous(small.ptr(), rt::ScalarType::BF16, {1, rows, 2, 64},
                                           comm->device());
  CHECK_THROWS_WITH(sp_attention::forward(*comm, mine, mine, mine, mine),
                    Catch::Contains("the ranks call with different problems"));
  sp_attention::release(*comm);
}

TEST_CASE("sp_attention::forward on two ranks matches one GPU", "[gpu][multi]") {
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  // Two processes as torchrun would start them; on one GPU they share it.
  int rc = rt::launchLocalRanks(2, {self, "[.sp_rank]"});
  CHECK(rc == 0);
}
