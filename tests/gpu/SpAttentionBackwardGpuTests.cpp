//===- SpAttentionBackwardGpuTests.cpp - sp_attention's gradients ---------===//
//
// sp_attention::forward with its log-sum-exp and sp_attention::backward in
// processes of their own, as torchrun starts them (two local ranks: two
// GPUs, or two virtual ranks sharing one). Each rank checks its shards of
// O, the LSE and dq, dk, dv against single-GPU attention and its backward
// over the whole problem. With a GPU per rank the NCCL transport runs too
// and must give the symmetric transport's forward bit for bit (NCCL
// refuses two ranks on one device, so virtual ranks skip it, saying so).
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "SpShards.h"
#include "tessel/runtime/Communicator.h"
#include "tessel/runtime/Driver.h"

#include <filesystem>
#include <fmt/format.h>
#include <random>

using namespace tessel;
using namespace tessel::testing;

namespace {

/// Whole-problem tensors on one GPU: inputs, and the single-GPU forward's
/// and backward's results.
struct WholeProblem {
  HostTensor q, k, v, dout, o, lse, dq, dk, dv;
};

/// Single-GPU attention forward and backward over the whole problem.
WholeProblem singleGpu(const SpCase &c, int device, CUstream stream, int seed) {
  const DType t = DType::bf16;
  bool packed = !c.cuSeqlens.empty();
  int64_t total = packed ? c.cuSeqlens.back() : c.batch * c.seqlen;
  int64_t batch = packed ? 1 : c.batch, len = total / batch;
  std::mt19937_64 rng(c.seqlen * 17 + c.headsQ * 3 + c.headsKv + c.causal + 1000 * seed);
  WholeProblem w{HostTensor(t, {total, c.headsQ, c.headDim}),
                 HostTensor(t, {total, c.headsKv, c.headDim}),
                 HostTensor(t, {total, c.headsKv, c.headDim}),
                 HostTensor(t, {total, c.headsQ, c.headDim}),
                 HostTensor(t, {total, c.headsQ, c.headDim}),
                 HostTensor(DType::f32, {batch, c.headsQ, len}),
                 HostTensor(t, {total, c.headsQ, c.headDim}),
                 HostTensor(t, {total, c.headsKv, c.headDim}),
                 HostTensor(t, {total, c.headsKv, c.headDim})};
  for (HostTensor *x : {&w.q, &w.k, &w.v, &w.dout}) randomize(*x, rng);
  auto q = upload(w.q), k = upload(w.k), v = upload(w.v), dout = upload(w.dout);
  auto o = poisoned(w.o), lse = poisoned(w.lse), dq = poisoned(w.dq), dk = poisoned(w.dk),
       dv = poisoned(w.dv);
  std::unique_ptr<rt::DeviceBuffer> cuDevice;
  attention::BackwardOptions opt;
  opt.causal = c.causal;
  if (packed) {
    HostTensor cu(DType::i32, {int64_t(c.cuSeqlens.size())});
    for (size_t s = 0; s < c.cuSeqlens.size(); ++s) {
      cu.set(s, float(c.cuSeqlens[s]));
      if (s) opt.maxSeqlenQ = std::max<int64_t>(opt.maxSeqlenQ, c.cuSeqlens[s] - c.cuSeqlens[s - 1]);
    }
    opt.maxSeqlenK = opt.maxSeqlenQ;
    cuDevice = upload(cu);
    opt.cuSeqlensQ = opt.cuSeqlensK = TensorView::contiguous(
        cuDevice->ptr(), rt::ScalarType::I32, {int64_t(c.cuSeqlens.size())}, device);
  }
  auto qView = [&](const rt::DeviceBuffer &b) {
    return viewOf(b, t, {batch, len, c.headsQ, c.headDim}, device);
  };
  auto kvView = [&](const rt::DeviceBuffer &b) {
    return viewOf(b, t, {batch, len, c.headsKv, c.headDim}, device);
  };
  TensorView lseView =
      TensorView::contiguous(lse->ptr(), rt::ScalarType::F32, {batch, c.headsQ, len}, device);
  attention::ForwardOptions fo;
  static_cast<attention::Options &>(fo) = opt;
  attention::forward(qView(*q), kvView(*k), kvView(*v), qView(*o), lseView, fo, stream);
  attention::backward(qView(*q), kvView(*k), kvView(*v), qView(*o), lseView, qView(*dout),
                      qView(*dq), kvView(*dk), kvView(*dv), opt, stream);
  rt::Driver &d = rt::Driver::get();
  TESSEL_CU(d, cuStreamSynchronize, stream);
  download(*o, w.o);
  download(*lse, w.lse);
  download(*dq, w.dq);
  download(*dk, w.dk);
  download(*dv, w.dv);
  return w;
}

/// The rank's shard of the whole LSE [entries, heads, rows of an entry]:
/// [entries, heads, rows / N], from its rows of the whole problem.
HostTensor lseShard(const HostTensor &whole, const std::vector<int64_t> &rows) {
  int64_t entries = whole.shape[0], heads = whole.shape[1], len = whole.shape[2];
  int64_t mine = int64_t(rows.size()) / entries;
  HostTensor shard(DType::f32, {entries, heads, mine});
  for (int64_t e = 0; e < entries; ++e)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < mine; ++i)
        shard.set((e * heads + h) * mine + i,
                  whole.values[(e * heads + h) * len + rows[e * mine + i] - e * len]);
  return shard;
}

double errorAgainst(const HostTensor &got, const HostTensor &want) {
  return relativeError(got, std::vector<double>(want.values.begin(), want.values.end()));
}

/// The rank's outputs of one transport.
struct RankResult {
  HostTensor o, lse, dq, dk, dv;
  std::string forwardConfig, backwardConfig;
};

RankResult runRank(rt::Communicator &comm, const SpCase &c, const WholeProblem &w,
                   const std::vector<int64_t> &rows, const std::string &transport, int groups) {
  const DType t = DType::bf16;
  const int device = comm.device();
  bool packed = !c.cuSeqlens.empty();
  int64_t batch = packed ? 1 : c.batch, local = int64_t(rows.size()) / batch;
  HostTensor qs = shardOf(w.q, rows), ks = shardOf(w.k, rows), vs = shardOf(w.v, rows),
             dos = shardOf(w.dout, rows);
  RankResult r{shardOf(w.o, rows), lseShard(w.lse, rows), shardOf(w.dq, rows),
               shardOf(w.dk, rows), shardOf(w.dv, rows), "", ""};
  auto q = upload(qs), k = upload(ks), v = upload(vs), dout = upload(dos);
  auto o = poisoned(r.o), lse = poisoned(r.lse), dq = poisoned(r.dq), dk = poisoned(r.dk),
       dv = poisoned(r.dv);
  auto qView = [&](const rt::DeviceBuffer &b) {
    return viewOf(b, t, {batch, local, c.headsQ, c.headDim}, device);
  };
  auto kvView = [&](const rt::DeviceBuffer &b) {
    return viewOf(b, t, {batch, local, c.headsKv, c.headDim}, device);
  };
  TensorView lseView = TensorView::contiguous(lse->ptr(), rt::ScalarType::F32,
                                              {batch, c.headsQ, local}, device);
  sp_attention::Options opt;
  opt.causal = c.causal;
  opt.cuSeqlensQ = c.cuSeqlens;
  opt.transport = transport;
  opt.groups = groups;
  if (c.zigzag) opt.placement = sp_attention::Placement::zigzag;
  CUstream stream = comm.stream();
  r.forwardConfig = sp_attention::forward(comm, qView(*q), kvView(*k), kvView(*v), qView(*o),
                                          lseView, opt, stream)
                        .config;
  r.backwardConfig =
      sp_attention::backward(comm, qView(*q), kvView(*k), kvView(*v), qView(*o), lseView,
                             qView(*dout), qView(*dq), kvView(*dk), kvView(*dv), opt, stream)
          .config;
  rt::Driver &d = rt::Driver::get();
  TESSEL_CU(d, cuStreamSynchronize, stream);
  download(*o, r.o);
  download(*lse, r.lse);
  download(*dq, r.dq);
  download(*dk, r.dk);
  download(*dv, r.dv);
  return r;
}

void checkAgainstOneGpu(const rt::Communicator &comm, const SpCase &c, const RankResult &got,
                        const WholeProblem &w, const std::vector<int64_t> &rows) {
  double errors[5] = {errorAgainst(got.o, shardOf(w.o, rows)),
                      errorAgainst(got.lse, lseShard(w.lse, rows)),
                      errorAgainst(got.dq, shardOf(w.dq, rows)),
                      errorAgainst(got.dk, shardOf(w.dk, rows)),
                      errorAgainst(got.dv, shardOf(w.dv, rows))};
  fmt::print("rank {}: sp_attention batch={} seqlen={} heads {}/{} d={} causal={} packed={} "
             "zigzag={}: rel error against one GPU o {:.1e} lse {:.1e} dq {:.1e} dk {:.1e} dv "
             "{:.1e}; {}\n",
             comm.rank(), c.batch, c.seqlen, c.headsQ, c.headsKv, c.headDim, c.causal,
             !c.cuSeqlens.empty(), c.zigzag, errors[0], errors[1], errors[2], errors[3], errors[4],
             got.backwardConfig);
  INFO(got.forwardConfig << "\n" << got.backwardConfig);
  CHECK(errors[0] < 1e-3);
  CHECK(errors[1] < 1e-5);
  for (int i = 2; i < 5; ++i) CHECK(errors[i] < 1e-2);
}

} // namespace

TEST_CASE("one rank of sp_attention::backward (run by the case below)", "[.sp_backward_rank]") {
  auto comm = rt::Communicator::fromEnvironment();
  const std::vector<SpCase> cases = {
      {2, 512, 8, 4, 128, false, {}},            // a fixed batch, K/V heads split
      {1, 1024, 8, 2, 64, true, {}},             // GQA, causal
      {1, 256, 4, 1, 128, true, {}},             // one K/V head, replicated on both ranks
      {1, 0, 8, 8, 128, true, {0, 2, 258, 770}}, // packed, a length-2 sequence
      // Zig-zag: GQA causal, a fixed batch without a mask, MHA causal.
      {1, 1024, 8, 2, 64, true, {}, true},
      {2, 512, 4, 4, 128, false, {}, true},
      {1, 1024, 4, 4, 128, true, {}, true},
  };
  const std::vector<int> &devices = comm->localDevices();
  bool gpuPerRank = devices.size() == 2 && devices[0] != devices[1];
  if (!gpuPerRank && comm->rank() == 0)
    fmt::print("skipped: the NCCL transport needs a GPU per rank (NCCL refuses two ranks on one "
               "device); the symmetric transport runs alone\n");
  for (const SpCase &c : cases) {
    std::vector<int64_t> rows = shardRows(c, comm->size(), comm->rank());
    // Two head groups where the rank's heads split so (the pipeline's
    // parts), else the rule's.
    int ranks = comm->size();
    bool halves = !c.zigzag && c.headsKv % ranks == 0 && c.headsQ / ranks % 2 == 0 &&
                  c.headsKv / ranks % 2 == 0;
    for (int groups : {0, halves ? 2 : 0}) {
      // Two calls of one plan, on different data: nothing of the first
      // (buffers, epochs) leaks into the second.
      for (int seed : {1, 2}) {
        WholeProblem w = singleGpu(c, comm->device(), comm->stream(), seed);
        RankResult symmetric = runRank(*comm, c, w, rows, "symmetric", groups);
        checkAgainstOneGpu(*comm, c, symmetric, w, rows);
        // Zig-zag gathers through symmetric memory only.
        if (!gpuPerRank || c.zigzag) continue;
        RankResult nccl = runRank(*comm, c, w, rows, "nccl", groups);
        checkAgainstOneGpu(*comm, c, nccl, w, rows);
        // The same bytes through either transport: the forward is identical.
        CHECK(nccl.o.bytes == symmetric.o.bytes);
        CHECK(nccl.lse.bytes == symmetric.lse.bytes);
      }
      if (!halves) break;
    }
  }
  // Problems the backward cannot run are errors on every rank before
  // anything moves.
  rt::DeviceBuffer small(64 * 64 * 2 * 4);
  TensorView x = TensorView::contiguous(small.ptr(), rt::ScalarType::BF16, {1, 16, 2, 64},
                                        comm->device());
  TensorView lse = TensorView::contiguous(small.ptr(), rt::ScalarType::F32, {1, 2, 16},
                                          comm->device());
  sp_attention::Options zigzag;
  zigzag.placement = sp_attention::Placement::zigzag;
  CHECK_THROWS_WITH(sp_attention::backward(*comm, x, x, x, x, lse, x, x, x, x, zigzag),
                    Catch::Contains("rank 0: zig-zag: sequence 0 has 16 query rows"));
  zigzag.groups = 2;
  CHECK_THROWS_WITH(sp_attention::backward(*comm, x, x, x, x, lse, x, x, x, x, zigzag),
                    Catch::Contains("rank 0: groups = 2 splits the heads of placement ulysses"));
  CHECK_THROWS_WITH(sp_attention::backward(*comm, x, x, x, x, x, x, x, x, x),
                    Catch::Contains("rank 0: lse"));
  sp_attention::Options unknown;
  unknown.transport = "carrier-pigeon";
  CHECK_THROWS_WITH(sp_attention::forward(*comm, x, x, x, x, unknown),
                    Catch::Contains("exchange transport 'carrier-pigeon'"));
  sp_attention::release(*comm);
}

TEST_CASE("sp_attention::backward on two ranks matches one GPU", "[gpu][multi]") {
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  int rc = rt::launchLocalRanks(2, {self, "[.sp_backward_rank]"});
  CHECK(rc == 0);
}
