//===- SpAttention.cpp - tessel run/bench sp_attention --------------------===//
//
// Ulysses sequence-parallel attention forward, one process per GPU: the
// all-to-all gives each rank the whole sequence for heads/N heads, Tessel's
// FlashAttention runs over it, and the inverse all-to-all brings O back to
// the rank's sequence shard. The forms are the library's
// (SequenceParallelAttention.h); here the command reads its parameters,
// checks each form against single-GPU attention over the gathered tensors,
// and times it against that.
//
//===----------------------------------------------------------------------===//
#include "MultiGpu.h"
#include "SpAttention.h"
#include "tessel/Tessel.h"
#include "tessel/harness/LibrarySupport.h"
#include "tessel/kernels/parallel/ExchangeFlags.h"
#include "tessel/kernels/parallel/SequenceParallelAttention.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Error.h"

#include <cmath>
#include <numeric>
#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::harness;
using namespace tessel::rt;

namespace {
// `groups`: head groups per rank whose exchange overlaps the attention of
// the previous group (1: exchange, attention, exchange back in turn): a
// count of equal groups, or the query heads of each group (2,6,6,2).
// `attention_streams`: streams the groups' attention takes turns on, so
// that one group's kernel starts while the previous one's last blocks run.
// `variant`: ulysses (the all-to-all by heads) or zigzag (queries stay,
// K/V gathered, zig-zag placed).
// `seqlens` (and `seqlens_k`): a packed batch (Ulysses only).
const Params kSpDefaults = {{"batch", "1"},     {"seqlen", "1024"}, {"heads_q", "8"},
                            {"heads_kv", "4"},   {"head_dim", "128"}, {"causal", "0"},
                            {"dtype", "bf16"},   {"groups", "2"},     {"variant", "ulysses"},
                            {"seqlens", ""},     {"seqlens_k", ""},   {"attention_streams", "2"},
                            {"local", "kernel"}, {"transport", ""}};
const Params kSpBenchShape = {{"batch", "1"},   {"seqlen", "8192"}, {"heads_q", "32"},
                              {"heads_kv", "32"}, {"head_dim", "128"}, {"causal", "0"},
                              {"dtype", "bf16"}, {"groups", "4"},     {"variant", "ulysses"},
                              {"seqlens", ""},   {"seqlens_k", ""}, {"attention_streams", "2"},
                              {"local", "kernel"}, {"transport", ""}};

/// The defaults grown to run on `ranks`: each rank's K/V heads split into
/// the default head groups, and each rank's rows are whole attention tiles
/// (so that the fused form runs too), in two chunks for zig-zag.
Params defaultsFor(const Params &given, const Params &defaults, int ranks) {
  bool zigzag = choiceParam<bool>(mergeParams(given, defaults, "sp_attention"), "variant",
                                  {{"ulysses", false}, {"zigzag", true}});
  AttentionConfig config;
  int64_t tile = std::lcm(config.blockM, forwardKeyBlock(config));
  return scaledUlyssesDefaults(defaults, ranks, intParam(defaults, "groups"),
                               (zigzag ? 2 : 1) * tile);
}

/// `ranks` 0: not known yet (checks that depend on it are left for later).
SpProblem problemFrom(const Params &given, const Params &defaults, int ranks) {
  bool ranksKnown = ranks > 0;
  ranks = std::max(ranks, 1);
  Params p = mergeParams(given, defaultsFor(given, defaults, ranks), "sp_attention");
  SpProblem sp;
  UlyssesShape &s = sp.shape;
  s.batch = intParam(p, "batch");
  s.seqlen = intParam(p, "seqlen");
  s.headsQ = intParam(p, "heads_q");
  s.headsKV = intParam(p, "heads_kv");
  s.headDim = intParam(p, "head_dim");
  s.elementBytes = 2;
  s.ranks = ranks;
  sp.zigzag = choiceParam<bool>(p, "variant", {{"ulysses", false}, {"zigzag", true}});
  // The attention settings this command takes, read as every caller reads them.
  sp.config = attentionSettings().read({{"dtype", p.at("dtype")}, {"causal", p.at("causal")}});
  if (sp.config.dtype == DType::f32)
    throw Error("sp_attention: dtype=f32; the exchange moves 16-bit elements: use bf16 or f16");
  sp.config.headDim = s.headDim;
  sp.scale = 1.0 / std::sqrt(double(s.headDim));
  const std::string &groups = p.at("groups");
  bool list = groups.find(',') != std::string::npos;
  sp.attentionStreams = static_cast<int>(intParam(p, "attention_streams"));
  sp.transport = p.at("transport");
  sp.localShard = localShardParam(p);
  if (sp.attentionStreams < 1 || sp.attentionStreams > 8)
    throw Error(fmt::format("sp_attention: attention_streams={}; use 1 to 8",
                            sp.attentionStreams));
  if (sp.zigzag) {
    if (!p.at("seqlens").empty())
      throw Error("sp_attention: variant=zigzag takes a fixed batch (batch, seqlen), not seqlens");
    validateZigZag(zigzagShape(sp), sp.config.blockM, forwardKeyBlock(sp.config));
    return sp;
  }
  setPackedBatch(s, p);
  sp.config.varlen = s.packed();
  validateUlysses(s);
  if (list) {
    std::vector<int32_t> cu = prefixSumsParam(p, "groups");
    for (size_t g = 0; g + 1 < cu.size(); ++g) sp.groupHeads.push_back(cu[g + 1] - cu[g]);
    // The groups split a rank's heads: how many depends on the ranks.
    if (ranksKnown) validateHeadGroups(s, sp.groupHeads);
  } else {
    sp.groupHeads = evenHeadGroups(
        s, static_cast<int>(parseInteger(groups, 1, 1 << 16, "parameter groups")));
  }
  return sp;
}

/// tessel::sp_attention::forward on views of this rank's shards (`x`'s
/// inputs) into `out`, and forward with the LSE then backward (dout: the
/// rank's Q shard), as training runs them.
struct LibraryCall {
  Communicator &comm;
  const SpProblem &sp;
  UlyssesExchange &x;
  DeviceBuffer out, lse, dq, dk, dv;
  /// Head groups (0: the library's rule) and attention streams.
  int groups = 0, streams = 2;
  LibraryCall(Communicator &comm, const SpProblem &sp, UlyssesExchange &x)
      : comm(comm), sp(sp), x(x), out(sp.shape.inputElements(0) * sp.shape.elementBytes),
        lse(sp.shape.localRows(0) * sp.shape.headsQ * 4),
        dq(sp.shape.inputElements(0) * sp.shape.elementBytes),
        dk(sp.shape.inputElements(1) * sp.shape.elementBytes),
        dv(sp.shape.inputElements(1) * sp.shape.elementBytes), streams(sp.attentionStreams) {}
  TensorView view(CUdeviceptr at, int tensor) const {
    const UlyssesShape &s = sp.shape;
    ScalarType t = sp.config.dtype == DType::bf16 ? ScalarType::BF16 : ScalarType::F16;
    int64_t entries = s.packed() ? 1 : s.batch;
    return TensorView::contiguous(
        at, t, {entries, s.localRows(tensor) / entries, s.heads(tensor), s.headDim}, comm.device());
  }
  sp_attention::Options options() const {
    const UlyssesShape &s = sp.shape;
    sp_attention::Options o;
    o.causal = sp.config.causal;
    o.cuSeqlensQ = s.cuSeqlensQ;
    o.cuSeqlensK = s.cuSeqlensK;
    o.attentionStreams = streams;
    o.groups = groups;
    o.transport = sp.transport;
    return o;
  }
  /// The forward; returns its configuration.
  std::string run(CUstream stream) {
    return sp_attention::forward(comm, view(x.input(0), 0), view(x.input(1), 1),
                                 view(x.input(2), 2), view(out.ptr(), 0), options(), stream)
        .config;
  }
  /// Forward with the LSE, then backward; returns the backward's
  /// configuration.
  std::string train(CUstream stream) {
    const UlyssesShape &s = sp.shape;
    int64_t entries = s.packed() ? 1 : s.batch;
    TensorView l = TensorView::contiguous(lse.ptr(), ScalarType::F32,
                                          {entries, s.headsQ, s.localRows(0) / entries},
                                          comm.device());
    TensorView q = view(x.input(0), 0), k = view(x.input(1), 1), v = view(x.input(2), 2),
               o = view(out.ptr(), 0);
    sp_attention::forward(comm, q, k, v, o, l, options(), stream);
    return sp_attention::backward(comm, q, k, v, o, l, q, view(dq.ptr(), 0), view(dk.ptr(), 1),
                                  view(dv.ptr(), 1), options(), stream)
        .config;
  }
};

/// Each form's output, twice, against single-GPU attention over the whole
/// problem (`fullArgs`, O in `fullO`): one line per form.
bool checkForms(Communicator &comm, const SpProblem &sp, UlyssesAttention &ulysses,
                DeviceBuffer &fullO, const std::vector<LaunchArg> &fullArgs,
                const std::string &what) {
  const UlyssesShape &s = sp.shape;
  Driver &d = Driver::get();
  CUstream stream = comm.stream();
  int rank = comm.localRank();
  ulysses.kernel().launch(fullArgs, stream);
  HostTensor all(sp.config.dtype, {s.totalRows(0), s.headsQ, s.headDim});
  TESSEL_CU(d, cuStreamSynchronize, stream);
  fullO.download(all.bytes.data(), all.bytes.size());
  all.decode();
  // The rank's rows of the whole output, in its shard's order.
  std::vector<double> ref;
  int64_t row = s.headsQ * s.headDim;
  forEachShardRun(s, 0, rank, [&](int64_t, int64_t global, int64_t rows) {
    ref.insert(ref.end(), all.values.begin() + global * row,
               all.values.begin() + (global + rows) * row);
  });
  bool ok = true;
  for (auto &f : ulysses.forms()) {
    UlyssesExchange &x = f->exchange();
    // Twice: the second call's epochs must not be satisfied by the
    // first's. The first call takes the last epoch before the limit, so
    // the second resets the flags and starts over.
    x.skipEpochsTo(kEpochLimit - 1);
    for (int call = 0; call < 2; ++call) {
      TESSEL_CU(d, cuMemsetD8Async, x.result(), 0xff, all.bytes.size() / s.ranks, stream);
      f->run(stream);
    }
    TESSEL_CU(d, cuStreamSynchronize, stream);
    OutputCheck c =
        checkOutput(sp.config.dtype, {s.localRows(0), s.headsQ, s.headDim}, x.result(), ref);
    ok &= c.pass;
    fmt::print("rank {} (device {}): sp_attention {} {}, {} head groups: rel error {:.3e} "
               "against single-GPU attention over the gathered tensors ({} of {} elements "
               "identical) — {}\n",
               rank, comm.device(), f->name(), what, x.groupCount(), c.error, c.identical,
               ref.size(), c.pass ? "PASS" : "FAIL");
  }
  // The library call on the rank's shards (the first form's inputs hold
  // them), its form chosen by the rule.
  LibraryCall call(comm, sp, ulysses.forms()[0]->exchange());
  std::string config = call.run(stream);
  TESSEL_CU(d, cuStreamSynchronize, stream);
  OutputCheck c =
      checkOutput(sp.config.dtype, {s.localRows(0), s.headsQ, s.headDim}, call.out.ptr(), ref);
  ok &= c.pass;
  fmt::print("rank {} (device {}): sp_attention::forward {} ({}): rel error {:.3e} ({} of {} "
             "elements identical) — {}\n",
             rank, comm.device(), what, config, c.error, c.identical, ref.size(),
             c.pass ? "PASS" : "FAIL");
  return ok;
}

/// Each form timed (slowest rank), the pipelined form's attention and
/// exchanges alone, and single-GPU attention over the whole problem;
/// rank 0 prints them.
void benchForms(Communicator &comm, const SpProblem &sp, UlyssesAttention &ulysses,
                const std::vector<LaunchArg> &fullArgs,
                const std::function<void(CUstream)> &singleTrain, const std::string &what,
                int reps) {
  const UlyssesShape &s = sp.shape;
  CUstream stream = comm.stream();
  int rank = comm.localRank(), n = s.ranks;
  std::vector<double> worst;
  for (auto &f : ulysses.forms()) {
    comm.barrier();
    worst.push_back(slowestRank(comm, medianOnStream(stream, reps, [&] { f->run(stream); })));
  }
  // The library call, its shards copied in and O out.
  LibraryCall call(comm, sp, ulysses.forms()[0]->exchange());
  std::string libraryConfig = call.run(stream);
  comm.barrier();
  double library = slowestRank(comm, medianOnStream(stream, reps, [&] { call.run(stream); }));
  std::string trainingConfig = call.train(stream);
  comm.barrier();
  double training = slowestRank(comm, medianOnStream(stream, reps, [&] { call.train(stream); }));
  // The training step's head groups and streams, each where the heads
  // divide: what the rule picks among.
  std::vector<std::tuple<int, int, double>> sweep;
  for (int groups : {1, 2, 4})
    for (int streams : {1, 2}) {
      // (The backward's part always runs on one stream.)
      if (s.headsPerRank(0) % groups || s.headsPerRank(1) % groups || (groups == 1 && streams > 1))
        continue;
      call.groups = groups;
      call.streams = streams;
      call.train(stream);
      comm.barrier();
      sweep.emplace_back(groups, streams,
                         slowestRank(comm, medianOnStream(stream, reps, [&] { call.train(stream); })));
    }
  call.groups = 0;
  call.streams = sp.attentionStreams;
  // The pipelined form's attention launches without the exchanges: what
  // overlapping could at best reach.
  UlyssesAttentionForm &pipelined = ulysses.pipelined();
  double computeOnly =
      medianOnStream(stream, reps, [&] { pipelined.attentionAlone(stream); });
  double worstCompute = slowestRank(comm, computeOnly);
  // And its exchanges without attention: what there is to hide.
  double exchangeOnly = slowestRank(comm, medianOnStream(stream, reps, [&] {
    pipelined.exchange().forward(stream);
    pipelined.exchange().reverse(stream);
  }));
  comm.barrier();
  // One GPU alone: the others wait.
  double single =
      rank == 0
          ? medianOnStream(stream, reps, [&] { ulysses.kernel().launch(fullArgs, stream); })
          : 0;
  double singleTraining = rank == 0 ? medianOnStream(stream, reps, [&] { singleTrain(stream); }) : 0;
  comm.barrier();
  if (rank != 0) return;
  double pairs = 0; // query-key pairs attended
  std::vector<UlyssesShape::Sequence> qs = s.sequences(0), ks = s.sequences(1);
  for (size_t i = 0; i < qs.size(); ++i) pairs += double(qs[i].length) * ks[i].length;
  double flops = 4.0 * s.headsQ * pairs * s.headDim / (sp.config.causal ? 2 : 1);
  fmt::print("sp_attention forward on {} GPUs, {} (median of {}, slowest rank):\n", n, what, reps);
  auto line = [&](const std::string &label, double ms) {
    fmt::print("  {:44} {:8.3f} ms  {:7.1f} TFLOP/s  {:.2f} of one GPU\n", label, ms,
               flops / ms / 1e9, ms / single);
  };
  std::vector<std::unique_ptr<UlyssesAttentionForm>> &forms = ulysses.forms();
  for (size_t i = 0; i < forms.size(); ++i)
    line(fmt::format("{}, {} head group(s), exchanges included", forms[i]->name(),
                     forms[i]->exchange().groupCount()),
         worst[i]);
  line("sp_attention::forward (copies in and out)", library);
  fmt::print("    {}\n", libraryConfig);
  line("attention alone, no exchange", worstCompute);
  line("exchanges alone, there and back", exchangeOnly);
  line("one GPU, whole problem", single);
  fmt::print("  ideal {:.2f}\n", 1.0 / n);
  printTrainingStep("sp_attention", n, flops, training, trainingConfig, singleTraining);
  for (const auto &[groups, streams, ms] : sweep)
    fmt::print("  {:44} {:8.3f} ms  {:7.1f} TFLOP/s  {:.2f} of one GPU\n",
               fmt::format("  groups={} attention_streams={}", groups, streams), ms,
               3.5 * flops / ms / 1e9, ms / singleTraining);
}

int runRank(const Params &params, bool bench, int reps) {
  auto comm = Communicator::fromEnvironment();
  SpProblem sp = problemFrom(params, bench ? kSpBenchShape : kSpDefaults, comm->size());
  if (sp.zigzag) return runZigZagRank(*comm, sp, bench, reps);
  const UlyssesShape &s = sp.shape;
  UlyssesAttention ulysses(*comm, sp);
  if (!ulysses.noFused().empty() && comm->localRank() == 0)
    fmt::print("sp_attention: no fused form for {}\n", ulysses.noFused());
  std::array<HostTensor, 3> whole = wholeInputs(s, sp.config.dtype);
  ulysses.upload(wholeBytes(whole));

  // Single-GPU attention over the whole problem, on this rank's GPU.
  std::array<std::unique_ptr<DeviceBuffer>, 3> full;
  for (int t = 0; t < 3; ++t) {
    full[t] = std::make_unique<DeviceBuffer>(whole[t].bytes.size());
    full[t]->upload(whole[t].bytes.data(), whole[t].bytes.size());
  }
  DeviceBuffer fullO(whole[0].bytes.size()), fullLse(s.headsQ * s.totalRows(0) * 4);
  std::vector<LaunchArg> fullArgs =
      wholeSequenceArgs(sp, ulysses.seqlens(), s.headsQ, s.headsKV, full[0]->ptr(),
                        full[1]->ptr(), full[2]->ptr(), fullO.ptr(), fullLse.ptr())
          .list();
  std::string what = shapeText(s) + (sp.config.causal ? " causal" : " full");
  if (!bench) return checkForms(*comm, sp, ulysses, fullO, fullArgs, what) ? 0 : 1;
  // And its training step: the forward with the LSE, then the backward
  // (dout: Q), through the library calls.
  DeviceBuffer fullDq(whole[0].bytes.size()), fullDk(whole[1].bytes.size()),
      fullDv(whole[2].bytes.size());
  auto singleTrain = [&](CUstream stream) {
    ScalarType t = sp.config.dtype == DType::bf16 ? ScalarType::BF16 : ScalarType::F16;
    int64_t entries = s.packed() ? 1 : s.batch, rows = s.totalRows(0) / entries;
    auto view = [&](CUdeviceptr at, int tensor) {
      return TensorView::contiguous(at, t, {entries, s.totalRows(tensor) / entries,
                                            s.heads(tensor), s.headDim},
                                    comm->device());
    };
    attention::BackwardOptions o;
    o.causal = sp.config.causal;
    if (s.packed()) {
      int64_t count = int64_t(s.cuSeqlensQ.size());
      o.cuSeqlensQ = TensorView::contiguous(ulysses.seqlens().q->ptr(), ScalarType::I32, {count},
                                            comm->device());
      o.cuSeqlensK = TensorView::contiguous(ulysses.seqlens().k->ptr(), ScalarType::I32, {count},
                                            comm->device());
      for (int tensor : {0, 1})
        for (const UlyssesShape::Sequence &q : s.sequences(tensor))
          (tensor ? o.maxSeqlenK : o.maxSeqlenQ) =
              std::max(tensor ? o.maxSeqlenK : o.maxSeqlenQ, q.length);
    }
    attention::ForwardOptions fo;
    static_cast<attention::Options &>(fo) = o;
    TensorView q = view(full[0]->ptr(), 0), k = view(full[1]->ptr(), 1),
               v = view(full[2]->ptr(), 2), out = view(fullO.ptr(), 0);
    TensorView lse =
        TensorView::contiguous(fullLse.ptr(), ScalarType::F32, {entries, s.headsQ, rows},
                               comm->device());
    attention::forward(q, k, v, out, lse, fo, stream);
    attention::backward(q, k, v, out, lse, q, view(fullDq.ptr(), 0), view(fullDk.ptr(), 1),
                        view(fullDv.ptr(), 1), o, stream);
  };
  benchForms(*comm, sp, ulysses, fullArgs, singleTrain, what, reps);
  return 0;
}
} // namespace

std::array<HostTensor, 3> tessel::wholeInputs(const UlyssesShape &s, DType t) {
  std::mt19937_64 rng(2024);
  std::array<HostTensor, 3> x = {HostTensor(t, {s.totalRows(0), s.headsQ, s.headDim}),
                                 HostTensor(t, {s.totalRows(1), s.headsKV, s.headDim}),
                                 HostTensor(t, {s.totalRows(2), s.headsKV, s.headDim})};
  for (HostTensor &h : x) randomize(h, rng);
  return x;
}

WholeInputs tessel::wholeBytes(const std::array<HostTensor, 3> &whole) {
  return {whole[0].bytes, whole[1].bytes, whole[2].bytes};
}

OutputCheck tessel::checkOutput(DType dtype, std::vector<int64_t> shape, CUdeviceptr result,
                                const std::vector<double> &reference) {
  HostTensor mine(dtype, std::move(shape));
  TESSEL_CU(Driver::get(), cuMemcpyDtoH, mine.bytes.data(), result, mine.bytes.size());
  mine.decode();
  OutputCheck c;
  for (size_t i = 0; i < reference.size(); ++i) c.identical += mine.values[i] == reference[i];
  c.error = relativeError(mine.values, reference);
  c.pass = c.error < toleranceFor(dtype);
  return c;
}

void tessel::printTrainingStep(const std::string &what, int ranks, double flops, double ms,
                               const std::string &config, double singleMs) {
  // A training step's FLOPs: the forward's and the backward's 2.5 times them.
  fmt::print("{} forward + backward on {} GPUs (forward with the LSE, then backward; slowest "
             "rank):\n  {:44} {:8.3f} ms  {:7.1f} TFLOP/s  {:.2f} of one GPU\n    {}\n"
             "  {:44} {:8.3f} ms  {:7.1f} TFLOP/s\n",
             what, ranks, "sp_attention::forward + backward", ms, 3.5 * flops / ms / 1e9,
             ms / singleMs, config, "one GPU, attention::forward + backward", singleMs,
             3.5 * flops / singleMs / 1e9);
}

double tessel::medianOnStream(CUstream stream, int reps, const std::function<void()> &work) {
  return timeMedian([&](int) { work(); }, 3, reps, stream);
}

int tessel::spAttentionCommand(bool bench, const Params &params, int ranks, int reps) {
  return asRanks(
      "sp_attention", bench, ranks,
      [&](int n) { problemFrom(params, bench ? kSpBenchShape : kSpDefaults, n); },
      [&] { return runRank(params, bench, reps); });
}
