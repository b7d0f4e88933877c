//===- SpAttention.cpp - tessel run/bench sp_attention --------------------===//
//
// Ulysses sequence-parallel attention forward, one process per GPU: the
// all-to-all gives each rank the whole sequence for heads/N heads, Tessel's
// FlashAttention runs over it, and the inverse all-to-all brings O back to
// the rank's sequence shard. Checked against single-GPU attention over the
// gathered tensors, and timed against it.
//
//===----------------------------------------------------------------------===//
#include "Kernels.h"
#include "LibrarySupport.h"
#include "MultiGpu.h"
#include "Ulysses.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Error.h"

#include <cmath>
#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::rt;

namespace {
// `groups`: head groups per rank whose exchange overlaps the attention of
// the previous group (1: exchange, attention, exchange back in turn).
const Params kSpDefaults = {{"batch", "1"},     {"seqlen", "1024"}, {"heads_q", "8"},
                            {"heads_kv", "4"},   {"head_dim", "128"}, {"causal", "0"},
                            {"dtype", "bf16"},   {"groups", "2"}};
const Params kSpBenchShape = {{"batch", "1"},   {"seqlen", "8192"}, {"heads_q", "32"},
                              {"heads_kv", "32"}, {"head_dim", "128"}, {"causal", "0"},
                              {"dtype", "bf16"}, {"groups", "4"}};

struct SpProblem {
  UlyssesShape shape;
  AttentionConfig config;
  double scale = 0;
  int groups = 1;
};

SpProblem problemFrom(const Params &given, const Params &defaults, int ranks) {
  Params p = mergeParams(given, defaults, "sp_attention");
  SpProblem sp;
  UlyssesShape &s = sp.shape;
  s.batch = intParam(p, "batch");
  s.seqlen = intParam(p, "seqlen");
  s.headsQ = intParam(p, "heads_q");
  s.headsKV = intParam(p, "heads_kv");
  s.headDim = intParam(p, "head_dim");
  s.elementBytes = 2;
  s.ranks = ranks;
  validateUlysses(s);
  sp.config.dtype = choiceParam<DType>(p, "dtype", {{"bf16", DType::bf16}, {"f16", DType::f16}});
  sp.config.headDim = s.headDim;
  sp.config.causal = flagParam(p, "causal");
  sp.scale = 1.0 / std::sqrt(double(s.headDim));
  sp.groups = static_cast<int>(intParam(p, "groups"));
  for (int t : {0, 1})
    if (sp.groups < 1 || s.headsPerRank(t) % sp.groups)
      throw Error(fmt::format("sp_attention: groups={} does not divide the {} {} heads of a rank",
                              sp.groups, s.headsPerRank(t), t ? "K/V" : "query"));
  return sp;
}

std::string deviceArch() {
  int cc = Driver::get().computeCapability();
  return cc == 90 ? "sm_90a" : cc >= 100 ? "sm_100a" : "sm_80";
}

/// The forward kernel's arguments: symbols, scale, Q, K, V, O, LSE.
std::vector<LaunchArg> attentionArgs(const UlyssesShape &s, int64_t headsQ, int64_t headsKV,
                                     double scale, CUdeviceptr q, CUdeviceptr k, CUdeviceptr v,
                                     CUdeviceptr o, CUdeviceptr lse) {
  int64_t b = s.batch, n = s.seqlen, d = s.headDim;
  return {LaunchArg::integer(b), LaunchArg::integer(n), LaunchArg::integer(n),
          LaunchArg::integer(headsQ), LaunchArg::integer(headsKV), LaunchArg::real(scale),
          LaunchArg::buffer(q, {b, n, headsQ, d}), LaunchArg::buffer(k, {b, n, headsKV, d}),
          LaunchArg::buffer(v, {b, n, headsKV, d}), LaunchArg::buffer(o, {b, n, headsQ, d}),
          LaunchArg::buffer(lse, {b, headsQ, n})};
}

/// The whole problem's Q, K, V (every rank draws the same).
std::array<HostTensor, 3> wholeInputs(const UlyssesShape &s, DType t) {
  std::mt19937_64 rng(2024);
  std::array<HostTensor, 3> x = {HostTensor(t, {s.batch, s.seqlen, s.headsQ, s.headDim}),
                                 HostTensor(t, {s.batch, s.seqlen, s.headsKV, s.headDim}),
                                 HostTensor(t, {s.batch, s.seqlen, s.headsKV, s.headDim})};
  for (HostTensor &h : x) randomize(h, rng);
  return x;
}

double medianOnStream(CUstream stream, int reps, const std::function<void()> &work) {
  return timeMedian([&](int) { work(); }, 3, reps, stream);
}

int runRank(const Params &params, bool bench, int reps) {
  auto comm = Communicator::fromEnvironment();
  SpProblem sp = problemFrom(params, bench ? kSpBenchShape : kSpDefaults, comm->size());
  const UlyssesShape &s = sp.shape;
  Driver &d = Driver::get();
  Program program = flashAttentionForward(sp.config);
  Kernel kernel = compile(program, {deviceArch()});
  UlyssesExchange x(*comm, s, sp.groups);
  int rank = comm->localRank(), n = s.ranks;
  int64_t local = s.localSeq(), eb = s.elementBytes;

  // This rank's shard of the whole problem's inputs.
  std::array<HostTensor, 3> whole = wholeInputs(s, sp.config.dtype);
  for (int t = 0; t < 3; ++t) {
    int64_t heads = s.heads(t), row = heads * s.headDim * eb;
    for (int64_t b = 0; b < s.batch; ++b)
      TESSEL_CU(d, cuMemcpyHtoD, x.input(t) + b * local * row,
                whole[t].bytes.data() + (b * s.seqlen + rank * local) * row, local * row);
  }
  // One attention launch per head group, on its group's tensors.
  int64_t groupQ = s.headsPerRank(0) / sp.groups, groupKV = s.headsPerRank(1) / sp.groups;
  DeviceBuffer lse(s.batch * s.headsPerRank(0) * s.seqlen * 4);
  std::vector<std::vector<LaunchArg>> args;
  for (int g = 0; g < sp.groups; ++g)
    args.push_back(attentionArgs(s, groupQ, groupKV, sp.scale, x.output(0, g), x.output(1, g),
                                 x.output(2, g), x.attentionOutput(g),
                                 lse.ptr() + g * s.batch * groupQ * s.seqlen * 4));
  CUstream stream = comm->stream();
  // Load the kernel before anything waits on a stream.
  kernel.loadedKernel().resourceUsage();
  auto spForward = [&] {
    x.pipeline(stream, [&](int g, CUstream st) { kernel.launch(args[g], st); });
  };

  // Single-GPU attention over the whole problem, on this rank's GPU.
  std::array<std::unique_ptr<DeviceBuffer>, 3> full;
  for (int t = 0; t < 3; ++t) {
    full[t] = std::make_unique<DeviceBuffer>(whole[t].bytes.size());
    full[t]->upload(whole[t].bytes.data(), whole[t].bytes.size());
  }
  DeviceBuffer fullO(whole[0].bytes.size()), fullLse(s.batch * s.headsQ * s.seqlen * 4);
  std::vector<LaunchArg> fullArgs =
      attentionArgs(s, s.headsQ, s.headsKV, sp.scale, full[0]->ptr(), full[1]->ptr(),
                    full[2]->ptr(), fullO.ptr(), fullLse.ptr());

  if (!bench) {
    spForward();
    kernel.launch(fullArgs, stream);
    TESSEL_CU(d, cuStreamSynchronize, stream);
    HostTensor mine(sp.config.dtype, {s.batch, local, s.headsQ, s.headDim});
    HostTensor all(sp.config.dtype, {s.batch, s.seqlen, s.headsQ, s.headDim});
    TESSEL_CU(d, cuMemcpyDtoH, mine.bytes.data(), x.result(), mine.bytes.size());
    fullO.download(all.bytes.data(), all.bytes.size());
    mine.decode();
    all.decode();
    std::vector<double> ref;
    int64_t row = s.headsQ * s.headDim;
    size_t identical = 0;
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t i = 0; i < local * row; ++i) {
        double v = all.values[(b * s.seqlen + rank * local) * row + i];
        ref.push_back(v);
        identical += mine.values[b * local * row + i] == v;
      }
    double err = relativeError(mine.values, ref);
    bool ok = err < toleranceFor(sp.config.dtype);
    fmt::print("rank {} (device {}): sp_attention batch={} seqlen={} heads_q={} heads_kv={} d={} "
               "{}, {} head groups: rel error {:.3e} against single-GPU attention over the gathered tensors ({} "
               "of {} elements identical) — {}\n",
               rank, comm->device(), s.batch, s.seqlen, s.headsQ, s.headsKV, s.headDim,
               sp.config.causal ? "causal" : "full", sp.groups, err, identical, ref.size(),
               ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
  }
  comm->barrier();
  double spMs = medianOnStream(stream, reps, spForward);
  double worst = slowestRank(*comm, spMs);
  // The same attention launches without the exchanges: what overlapping
  // could at best reach.
  double computeOnly = medianOnStream(stream, reps, [&] {
    for (int g = 0; g < sp.groups; ++g) kernel.launch(args[g], stream);
  });
  double worstCompute = slowestRank(*comm, computeOnly);
  comm->barrier();
  // One GPU alone: the others wait.
  double single = rank == 0 ? medianOnStream(stream, reps, [&] { kernel.launch(fullArgs, stream); })
                            : 0;
  comm->barrier();
  if (rank == 0) {
    double flops = 4.0 * s.batch * s.headsQ * double(s.seqlen) * s.seqlen * s.headDim /
                   (sp.config.causal ? 2 : 1);
    fmt::print("sp_attention forward on {} GPUs, batch={} seqlen={} heads_q={} heads_kv={} d={} "
               "{}, {} head groups (median of {}, slowest rank):\n",
               n, s.batch, s.seqlen, s.headsQ, s.headsKV, s.headDim,
               sp.config.causal ? "causal" : "full", sp.groups, reps);
    fmt::print("  sequence-parallel, exchanges included {:8.3f} ms  {:7.1f} TFLOP/s\n", worst,
               flops / worst / 1e9);
    fmt::print("  its attention alone, no exchange      {:8.3f} ms  {:7.1f} TFLOP/s\n",
               worstCompute, flops / worstCompute / 1e9);
    fmt::print("  one GPU, whole problem                {:8.3f} ms  {:7.1f} TFLOP/s\n", single,
               flops / single / 1e9);
    fmt::print("  time ratio {:.2f} (ideal {:.2f})\n", worst / single, 1.0 / n);
  }
  return 0;
}
} // namespace

int tessel::spAttentionCommand(bool bench, const Params &params, int ranks, int reps) {
  return asRanks(
      "sp_attention", bench, ranks,
      [&](int n) { problemFrom(params, bench ? kSpBenchShape : kSpDefaults, n); },
      [&] { return runRank(params, bench, reps); });
}
