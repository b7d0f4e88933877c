//===- SpAttention.cpp - tessel run/bench sp_attention --------------------===//
//
// Ulysses sequence-parallel attention forward, one process per GPU: the
// all-to-all gives each rank the whole sequence for heads/N heads, Tessel's
// FlashAttention runs over it, and the inverse all-to-all brings O back to
// the rank's sequence shard. Checked against single-GPU attention over the
// gathered tensors, and timed against it.
//
//===----------------------------------------------------------------------===//
#include "tessel/kernels/Kernels.h"
#include "tessel/harness/LibrarySupport.h"
#include "MultiGpu.h"
#include "SpAttention.h"
#include "tessel/kernels/parallel/ExchangeFlags.h"
#include "tessel/kernels/parallel/Ulysses.h"
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
                            {"local", "kernel"}};
const Params kSpBenchShape = {{"batch", "1"},   {"seqlen", "8192"}, {"heads_q", "32"},
                              {"heads_kv", "32"}, {"head_dim", "128"}, {"causal", "0"},
                              {"dtype", "bf16"}, {"groups", "4"},     {"variant", "ulysses"},
                              {"seqlens", ""},   {"seqlens_k", ""}, {"attention_streams", "2"},
                              {"local", "kernel"}};

/// The defaults grown to run on `ranks`: each rank's K/V heads split into
/// the default head groups, and each rank's rows are whole attention tiles
/// (so that the fused form runs too), in two chunks for zig-zag.
Params defaultsFor(const Params &given, const Params &defaults, int ranks) {
  bool zigzag = choiceParam<bool>(mergeParams(given, defaults, "sp_attention"), "variant",
                                  {{"ulysses", false}, {"zigzag", true}});
  AttentionConfig config;
  int64_t tile = std::lcm(config.blockM, config.blockN ? config.blockN : int64_t{128});
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
  sp.config.dtype = choiceParam<DType>(p, "dtype", {{"bf16", DType::bf16}, {"f16", DType::f16}});
  sp.config.headDim = s.headDim;
  sp.config.causal = flagParam(p, "causal");
  sp.scale = 1.0 / std::sqrt(double(s.headDim));
  const std::string &groups = p.at("groups");
  bool list = groups.find(',') != std::string::npos;
  sp.attentionStreams = static_cast<int>(intParam(p, "attention_streams"));
  sp.localShard = localShardParam(p);
  if (sp.attentionStreams < 1 || sp.attentionStreams > 8)
    throw Error(fmt::format("sp_attention: attention_streams={}; use 1 to 8",
                            sp.attentionStreams));
  if (sp.zigzag) {
    if (!p.at("seqlens").empty())
      throw Error("sp_attention: variant=zigzag takes a fixed batch (batch, seqlen), not seqlens");
    validateZigZag(zigzagShape(sp), sp.config.blockM, sp.config.blockN ? sp.config.blockN : 128);
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

/// A packed batch's prefix sums on the device (empty buffers otherwise).
struct DeviceSeqlens {
  std::unique_ptr<DeviceBuffer> q, k;
  explicit DeviceSeqlens(const UlyssesShape &s) {
    if (!s.packed()) return;
    q = std::make_unique<DeviceBuffer>(s.cuSeqlensQ.size() * 4);
    k = std::make_unique<DeviceBuffer>(s.cuSeqlensK.size() * 4);
    q->upload(s.cuSeqlensQ.data(), s.cuSeqlensQ.size() * 4);
    k->upload(s.cuSeqlensK.data(), s.cuSeqlensK.size() * 4);
  }
};

/// The forward kernel's arguments over the whole sequences, `headsQ` and
/// `headsKV` heads (a packed batch's prefix sums and longest query last).
std::vector<LaunchArg> attentionArgs(const SpProblem &sp, const DeviceSeqlens &cu, int64_t headsQ,
                                     int64_t headsKV, CUdeviceptr q, CUdeviceptr k, CUdeviceptr v,
                                     CUdeviceptr o, CUdeviceptr lse) {
  const UlyssesShape &s = sp.shape;
  std::vector<LaunchArg> args = tessel::attentionArgs(
      {s.batch, s.totalRows(0) / s.batch, s.totalRows(1) / s.batch, headsQ, headsKV, s.headDim},
      sp.scale, q, k, v, o, lse);
  if (!s.packed()) return args;
  int64_t entries = s.cuSeqlensQ.size(), longest = 0;
  for (const UlyssesShape::Sequence &seq : s.sequences(0)) longest = std::max(longest, seq.length);
  args.push_back(LaunchArg::integer(entries));
  args.push_back(LaunchArg::integer(longest));
  args.push_back(LaunchArg::buffer(cu.q->ptr(), {entries}));
  args.push_back(LaunchArg::buffer(cu.k->ptr(), {entries}));
  return args;
}

/// Rows of the whole problem's tensor `t` to and from this rank's shard:
/// `copy(localRow, wholeRow, rows)` for each sequence's 1/N.
void forEachShardRun(const UlyssesShape &s, int t, int rank,
                     const std::function<void(int64_t, int64_t, int64_t)> &copy) {
  for (const UlyssesShape::Sequence &q : s.sequences(t)) {
    int64_t shard = q.length / s.ranks;
    copy(q.start / s.ranks, q.start + rank * shard, shard);
  }
}

/// Extra arguments of a kernel built with streamed shards: head group g's
/// arrivals on this rank, one shard per source rank.
void appendArrivals(std::vector<LaunchArg> &args, const UlyssesExchange &x, int group) {
  const UlyssesShape &s = x.exchangeShape();
  args.push_back(LaunchArg::integer(s.localSeq()));
  args.push_back(LaunchArg::integer(s.ranks));
  args.push_back(LaunchArg::integer(1));
  args.push_back(LaunchArg::integer(static_cast<int32_t>(x.currentEpoch())));
  args.push_back(LaunchArg::buffer(x.arrivalFlags(group), {s.ranks}));
}

/// One way of running the sequence-parallel forward: its exchange (head
/// groups), how attention learns of arrivals, and its kernel.
struct SpForm {
  std::string name;
  std::unique_ptr<UlyssesExchange> exchange;
  UlyssesExchange::Arrival arrival;
  Kernel *kernel;
  int attentionStreams;
  DeviceBuffer lse;
  std::vector<std::vector<LaunchArg>> args; // per group, without arrivals

  SpForm(std::string n, Communicator &comm, const SpProblem &sp, const DeviceSeqlens &cu,
         std::vector<int64_t> groupHeads, UlyssesExchange::Arrival a, Kernel &k)
      : name(std::move(n)),
        exchange(std::make_unique<UlyssesExchange>(comm, sp.shape, groupHeads, sp.localShard)),
        arrival(a), kernel(&k), attentionStreams(sp.attentionStreams),
        lse(sp.shape.headsPerRank(0) * sp.shape.totalRows(0) * 4) {
    const UlyssesShape &s = sp.shape;
    UlyssesExchange &x = *exchange;
    for (int g = 0; g < x.groupCount(); ++g)
      args.push_back(attentionArgs(sp, cu, x.groupHeads(0, g), x.groupHeads(1, g), x.output(0, g),
                                   x.output(1, g), x.output(2, g), x.attentionOutput(g),
                                   lse.ptr() + x.groupFirst(0, g) * s.totalRows(0) * 4));
  }
  void upload(const std::array<HostTensor, 3> &whole, int rank) {
    const UlyssesShape &s = exchange->exchangeShape();
    Driver &d = Driver::get();
    for (int t = 0; t < 3; ++t) {
      int64_t row = s.heads(t) * s.headDim * s.elementBytes;
      forEachShardRun(s, t, rank, [&](int64_t local, int64_t global, int64_t rows) {
        TESSEL_CU(d, cuMemcpyHtoD, exchange->input(t) + local * row,
                  whole[t].bytes.data() + global * row, rows * row);
      });
    }
  }
  void run(CUstream stream) {
    exchange->pipeline(
        stream,
        [&](int g, CUstream st) {
          if (arrival == UlyssesExchange::Arrival::stream) return kernel->launch(args[g], st);
          std::vector<LaunchArg> withArrivals = args[g];
          appendArrivals(withArrivals, *exchange, g);
          kernel->launch(withArrivals, st);
        },
        arrival, attentionStreams);
  }
};

int runRank(const Params &params, bool bench, int reps) {
  auto comm = Communicator::fromEnvironment();
  SpProblem sp = problemFrom(params, bench ? kSpBenchShape : kSpDefaults, comm->size());
  if (sp.zigzag) return runZigZagRank(*comm, sp, bench, reps);
  const UlyssesShape &s = sp.shape;
  Driver &d = Driver::get();
  Program program = flashAttentionForward(sp.config);
  Kernel kernel = compile(program, {nativeArch(Driver::get().computeCapability())});
  int rank = comm->localRank(), n = s.ranks;
  DeviceSeqlens cu(s);

  // Three forms: the exchange, attention and the exchange back in turn
  // (unfused); head groups whose exchange overlaps attention of the group
  // before (pipelined); and the same with attention waiting in the kernel
  // for each source's shard (fused; fixed batches whose shards are whole
  // tiles).
  using Arrival = UlyssesExchange::Arrival;
  std::vector<std::unique_ptr<SpForm>> forms;
  forms.push_back(std::make_unique<SpForm>("unfused", *comm, sp, cu, std::vector<int64_t>{s.headsPerRank(0)},
                                           Arrival::stream, kernel));
  forms.push_back(
      std::make_unique<SpForm>("pipelined", *comm, sp, cu, sp.groupHeads, Arrival::stream, kernel));
  AttentionConfig streamed = sp.config;
  streamed.streamedShards = true;
  int64_t blockN = streamed.blockN ? streamed.blockN : streamed.headDim > 128 ? 64 : 128;
  std::string noFused = s.packed() ? "a packed batch" : "";
  if (!s.packed() && (s.localSeq() % streamed.blockM || s.localSeq() % blockN))
    noFused = fmt::format("{}-row shards, not whole tiles of {} and {} rows", s.localSeq(),
                          streamed.blockM, blockN);
  std::unique_ptr<Program> streamedProgram;
  std::unique_ptr<Kernel> streamedKernel;
  if (noFused.empty()) {
    streamedProgram = std::make_unique<Program>(flashAttentionForward(streamed));
    streamedKernel = std::make_unique<Kernel>(compile(*streamedProgram, {nativeArch(Driver::get().computeCapability())}));
    forms.push_back(std::make_unique<SpForm>("fused", *comm, sp, cu, sp.groupHeads, Arrival::kernel,
                                             *streamedKernel));
  } else if (rank == 0) {
    fmt::print("sp_attention: no fused form for {}\n", noFused);
  }
  std::array<HostTensor, 3> whole = wholeInputs(s, sp.config.dtype);
  for (auto &f : forms) f->upload(whole, rank);
  CUstream stream = comm->stream();
  // Load the kernels before anything waits on a stream.
  kernel.loadedKernel().resourceUsage();
  if (streamedKernel) streamedKernel->loadedKernel().resourceUsage();

  // Single-GPU attention over the whole problem, on this rank's GPU.
  std::array<std::unique_ptr<DeviceBuffer>, 3> full;
  for (int t = 0; t < 3; ++t) {
    full[t] = std::make_unique<DeviceBuffer>(whole[t].bytes.size());
    full[t]->upload(whole[t].bytes.data(), whole[t].bytes.size());
  }
  DeviceBuffer fullO(whole[0].bytes.size()), fullLse(s.headsQ * s.totalRows(0) * 4);
  std::vector<LaunchArg> fullArgs =
      attentionArgs(sp, cu, s.headsQ, s.headsKV, full[0]->ptr(), full[1]->ptr(), full[2]->ptr(),
                    fullO.ptr(), fullLse.ptr());
  std::string what = shapeText(s) + (sp.config.causal ? " causal" : " full");

  if (!bench) {
    kernel.launch(fullArgs, stream);
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
    for (auto &f : forms) {
      // Twice: the second call's epochs must not be satisfied by the
      // first's. The first call takes the last epoch before the limit, so
      // the second resets the flags and starts over.
      f->exchange->skipEpochsTo(kEpochLimit - 1);
      for (int call = 0; call < 2; ++call) {
        TESSEL_CU(d, cuMemsetD8Async, f->exchange->result(), 0xff, whole[0].bytes.size() / n, stream);
        f->run(stream);
      }
      TESSEL_CU(d, cuStreamSynchronize, stream);
      OutputCheck c = checkOutput(sp.config.dtype, {s.localRows(0), s.headsQ, s.headDim},
                                  f->exchange->result(), ref);
      ok &= c.pass;
      fmt::print("rank {} (device {}): sp_attention {} {}, {} head groups: rel error {:.3e} "
                 "against single-GPU attention over the gathered tensors ({} of {} elements "
                 "identical) — {}\n",
                 rank, comm->device(), f->name, what, f->exchange->groupCount(), c.error,
                 c.identical, ref.size(), c.pass ? "PASS" : "FAIL");
    }
    return ok ? 0 : 1;
  }
  std::vector<double> worst;
  for (auto &f : forms) {
    comm->barrier();
    worst.push_back(slowestRank(*comm, medianOnStream(stream, reps, [&] { f->run(stream); })));
  }
  // The pipelined form's attention launches without the exchanges: what
  // overlapping could at best reach.
  SpForm &pipelined = *forms[1];
  double computeOnly = medianOnStream(stream, reps, [&] {
    for (auto &a : pipelined.args) kernel.launch(a, stream);
  });
  double worstCompute = slowestRank(*comm, computeOnly);
  // And its exchanges without attention: what there is to hide.
  double exchangeOnly = slowestRank(*comm, medianOnStream(stream, reps, [&] {
    pipelined.exchange->forward(stream);
    pipelined.exchange->reverse(stream);
  }));
  comm->barrier();
  // One GPU alone: the others wait.
  double single = rank == 0 ? medianOnStream(stream, reps, [&] { kernel.launch(fullArgs, stream); })
                            : 0;
  comm->barrier();
  if (rank == 0) {
    double pairs = 0; // query-key pairs attended
    std::vector<UlyssesShape::Sequence> qs = s.sequences(0), ks = s.sequences(1);
    for (size_t i = 0; i < qs.size(); ++i) pairs += double(qs[i].length) * ks[i].length;
    double flops = 4.0 * s.headsQ * pairs * s.headDim / (sp.config.causal ? 2 : 1);
    fmt::print("sp_attention forward on {} GPUs, {} (median of {}, slowest rank):\n", n, what,
               reps);
    auto line = [&](const std::string &label, double ms) {
      fmt::print("  {:44} {:8.3f} ms  {:7.1f} TFLOP/s  {:.2f} of one GPU\n", label, ms,
                 flops / ms / 1e9, ms / single);
    };
    for (size_t i = 0; i < forms.size(); ++i)
      line(fmt::format("{}, {} head group(s), exchanges included", forms[i]->name,
                       forms[i]->exchange->groupCount()),
           worst[i]);
    line("attention alone, no exchange", worstCompute);
    line("exchanges alone, there and back", exchangeOnly);
    line("one GPU, whole problem", single);
    fmt::print("  ideal {:.2f}\n", 1.0 / n);
  }
  return 0;
}
} // namespace

std::vector<LaunchArg> tessel::attentionArgs(const AttentionExtents &e, double scale, CUdeviceptr q,
                                             CUdeviceptr k, CUdeviceptr v, CUdeviceptr o,
                                             CUdeviceptr lse) {
  return {LaunchArg::integer(e.batch), LaunchArg::integer(e.seqQ), LaunchArg::integer(e.seqK),
          LaunchArg::integer(e.headsQ), LaunchArg::integer(e.headsKV), LaunchArg::real(scale),
          LaunchArg::buffer(q, {e.batch, e.seqQ, e.headsQ, e.headDim}),
          LaunchArg::buffer(k, {e.batch, e.seqK, e.headsKV, e.headDim}),
          LaunchArg::buffer(v, {e.batch, e.seqK, e.headsKV, e.headDim}),
          LaunchArg::buffer(o, {e.batch, e.seqQ, e.headsQ, e.headDim}),
          LaunchArg::buffer(lse, {e.batch, e.headsQ, e.seqQ})};
}

std::array<HostTensor, 3> tessel::wholeInputs(const UlyssesShape &s, DType t) {
  std::mt19937_64 rng(2024);
  std::array<HostTensor, 3> x = {HostTensor(t, {s.totalRows(0), s.headsQ, s.headDim}),
                                 HostTensor(t, {s.totalRows(1), s.headsKV, s.headDim}),
                                 HostTensor(t, {s.totalRows(2), s.headsKV, s.headDim})};
  for (HostTensor &h : x) randomize(h, rng);
  return x;
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

double tessel::medianOnStream(CUstream stream, int reps, const std::function<void()> &work) {
  return timeMedian([&](int) { work(); }, 3, reps, stream);
}

int tessel::spAttentionCommand(bool bench, const Params &params, int ranks, int reps) {
  return asRanks(
      "sp_attention", bench, ranks,
      [&](int n) { problemFrom(params, bench ? kSpBenchShape : kSpDefaults, n); },
      [&] { return runRank(params, bench, reps); });
}
