//===- ZigZagAttention.cpp - tessel run/bench sp_attention variant=zigzag -===//
//
// Chunked-query context parallelism: rank r keeps its queries (chunks r and
// 2N-1-r of the sequence, all heads), gathers K and V of the whole sequence
// by the copy engines, and runs causal attention per chunk with the queries
// placed at their key positions (the library's ZigZagAttention). Checked
// against single-GPU attention over the gathered tensors; timed against it,
// with each rank's attention alone to show the balance zig-zag placement
// gives.
//
//===----------------------------------------------------------------------===//
#include "MultiGpu.h"
#include "SpAttention.h"
#include "tessel/Tessel.h"
#include "tessel/dsl/Compile.h"
#include "tessel/kernels/parallel/SequenceParallelAttention.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Error.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::harness;
using namespace tessel::rt;

namespace {
/// Both forms' outputs, twice each, against single-GPU attention over the
/// whole problem (O in `fullO`, already launched): one line per form.
bool checkForms(Communicator &comm, const SpProblem &sp, ZigZagAttention &me,
                DeviceBuffer &fullO) {
  const UlyssesShape &s = sp.shape;
  const ZigZagShape &z = me.shape();
  Driver &d = Driver::get();
  CUstream stream = comm.stream();
  int rank = comm.localRank();
  TESSEL_CU(d, cuStreamSynchronize, stream);
  HostTensor all(sp.config.dtype, {s.batch, s.seqlen, s.headsQ, s.headDim});
  fullO.download(all.bytes.data(), all.bytes.size());
  // The reference rows of this rank's chunks, in its layout.
  HostTensor expected(sp.config.dtype, {s.batch, 2 * z.chunk(), s.headsQ, s.headDim});
  DeviceBuffer staging(me.chunksBytes(z.headsQ));
  me.uploadChunks(all.bytes, staging.ptr(), z.headsQ);
  staging.download(expected.bytes.data(), expected.bytes.size());
  expected.decode();
  std::vector<double> ref(expected.values.begin(), expected.values.end());
  bool ok = true;
  for (auto [name, form] : {std::pair<const char *, void (ZigZagAttention::*)(CUstream)>{
                                "unfused", &ZigZagAttention::unfused},
                            {"fused", &ZigZagAttention::fused}}) {
    for (int call = 0; call < 2; ++call) {
      TESSEL_CU(d, cuMemsetD8Async, me.output(), 0xff, me.chunksBytes(z.headsQ), stream);
      (me.*form)(stream);
    }
    TESSEL_CU(d, cuStreamSynchronize, stream);
    OutputCheck c = checkOutput(sp.config.dtype, {s.batch, 2 * z.chunk(), s.headsQ, s.headDim},
                                me.output(), ref);
    ok &= c.pass;
    fmt::print("rank {} (device {}): sp_attention zigzag {} batch={} seqlen={} heads_q={} "
               "heads_kv={} d={} {}, chunks {} and {}: rel error {:.3e} against single-GPU "
               "attention over the gathered tensors ({} of {} elements identical) — {}\n",
               rank, comm.device(), name, s.batch, s.seqlen, s.headsQ, s.headsKV, s.headDim,
               sp.config.causal ? "causal" : "full", z.globalChunk(rank, 0),
               z.globalChunk(rank, 1), c.error, c.identical, ref.size(),
               c.pass ? "PASS" : "FAIL");
  }
  return ok;
}

/// A training step on the whole problem and on the rank's chunks: the
/// forward with the LSE, then the backward (dout: Q), through the library's
/// calls (attention:: on one GPU, sp_attention:: with placement zigzag).
struct TrainingSteps {
  Communicator &comm;
  const SpProblem &sp;
  ScalarType type;
  std::array<std::unique_ptr<DeviceBuffer>, 8> whole, mine; // q k v o lse dq dk dv

  TrainingSteps(Communicator &comm, const SpProblem &sp, const ZigZagAttention &me,
                const std::array<HostTensor, 3> &inputs)
      : comm(comm), sp(sp),
        type(sp.config.dtype == DType::bf16 ? ScalarType::BF16 : ScalarType::F16) {
    const UlyssesShape &s = sp.shape;
    const ZigZagShape &z = me.shape();
    for (int t = 0; t < 8; ++t) {
      int heads = t == 1 || t == 2 || t == 6 || t == 7 ? 1 : 0;
      int64_t bytes = t == 4 ? s.batch * s.headsQ * s.seqlen * 4 : int64_t(inputs[heads].bytes.size());
      whole[t] = std::make_unique<DeviceBuffer>(bytes);
      mine[t] = std::make_unique<DeviceBuffer>(bytes / s.ranks);
      if (t < 3) {
        whole[t]->upload(inputs[t].bytes.data(), bytes);
        me.uploadChunks(inputs[t].bytes, mine[t]->ptr(), heads ? z.headsKV : z.headsQ);
      }
    }
  }
  std::array<TensorView, 8> views(const std::array<std::unique_ptr<DeviceBuffer>, 8> &b,
                                  int64_t rows) const {
    const UlyssesShape &s = sp.shape;
    std::array<TensorView, 8> out;
    for (int t = 0; t < 8; ++t) {
      int64_t heads = t == 1 || t == 2 || t == 6 || t == 7 ? s.headsKV : s.headsQ;
      out[t] = t == 4 ? TensorView::contiguous(b[t]->ptr(), ScalarType::F32,
                                               {s.batch, s.headsQ, rows}, comm.device())
                      : TensorView::contiguous(b[t]->ptr(), type, {s.batch, rows, heads, s.headDim},
                                               comm.device());
    }
    return out;
  }
  void single(CUstream stream) {
    std::array<TensorView, 8> x = views(whole, sp.shape.seqlen);
    attention::BackwardOptions o;
    o.causal = sp.config.causal;
    attention::ForwardOptions fo;
    static_cast<attention::Options &>(fo) = o;
    attention::forward(x[0], x[1], x[2], x[3], x[4], fo, stream);
    attention::backward(x[0], x[1], x[2], x[3], x[4], x[0], x[5], x[6], x[7], o, stream);
  }
  std::string spread(CUstream stream) {
    std::array<TensorView, 8> x = views(mine, sp.shape.seqlen / sp.shape.ranks);
    sp_attention::Options o;
    o.causal = sp.config.causal;
    o.placement = sp_attention::Placement::zigzag;
    sp_attention::forward(comm, x[0], x[1], x[2], x[3], x[4], o, stream);
    return sp_attention::backward(comm, x[0], x[1], x[2], x[3], x[4], x[0], x[5], x[6], x[7], o,
                                  stream)
        .config;
  }
};

/// Both forms timed (slowest rank), each rank's attention alone (slowest
/// and fastest) and single-GPU attention, and the training step; rank 0
/// prints them.
void benchForms(Communicator &comm, const SpProblem &sp, ZigZagAttention &me,
                Kernel &fullKernel, const std::vector<LaunchArg> &fullArgs,
                TrainingSteps &training, int reps) {
  const UlyssesShape &s = sp.shape;
  CUstream stream = comm.stream();
  int rank = comm.localRank(), n = s.ranks;
  comm.barrier();
  double unfusedMs = slowestRank(comm, medianOnStream(stream, reps, [&] { me.unfused(stream); }));
  double fusedMs = slowestRank(comm, medianOnStream(stream, reps, [&] { me.fused(stream); }));
  double alone = medianOnStream(stream, reps, [&] { me.attentionAlone(stream); });
  double slowest = slowestRank(comm, alone), fastest = fastestRank(comm, alone);
  std::string trainingConfig;
  double trained = slowestRank(
      comm, medianOnStream(stream, reps, [&] { trainingConfig = training.spread(stream); }));
  comm.barrier();
  double single =
      rank == 0 ? medianOnStream(stream, reps, [&] { fullKernel.launch(fullArgs, stream); }) : 0;
  double singleTrained =
      rank == 0 ? medianOnStream(stream, reps, [&] { training.single(stream); }) : 0;
  comm.barrier();
  if (rank != 0) return;
  double flops = 4.0 * s.batch * s.headsQ * double(s.seqlen) * s.seqlen * s.headDim /
                 (sp.config.causal ? 2 : 1);
  fmt::print("sp_attention zigzag forward on {} GPUs, batch={} seqlen={} heads_q={} heads_kv={} "
             "d={} {} (median of {}, slowest rank):\n",
             n, s.batch, s.seqlen, s.headsQ, s.headsKV, s.headDim,
             sp.config.causal ? "causal" : "full", reps);
  auto line = [&](const std::string &what, double ms) {
    fmt::print("  {:44} {:8.3f} ms  {:7.1f} TFLOP/s  {:.2f} of one GPU\n", what, ms,
               flops / ms / 1e9, ms / single);
  };
  line("K/V gathered, then attention", unfusedMs);
  line("fused: attention waits per chunk", fusedMs);
  line("attention alone, slowest rank", slowest);
  line("attention alone, fastest rank", fastest);
  line("one GPU, whole problem", single);
  fmt::print("  ideal {:.2f}\n", 1.0 / n);
  printTrainingStep("sp_attention zigzag", n, flops, trained, trainingConfig, singleTrained);
}
} // namespace

int tessel::runZigZagRank(Communicator &comm, const SpProblem &sp, bool bench, int reps) {
  const UlyssesShape &s = sp.shape;
  ZigZagAttention me(comm, sp);
  std::array<HostTensor, 3> whole = wholeInputs(s, sp.config.dtype);
  me.upload(wholeBytes(whole));

  // Single-GPU attention over the whole problem, on this rank's GPU.
  std::array<std::unique_ptr<DeviceBuffer>, 3> full;
  for (int t = 0; t < 3; ++t) {
    full[t] = std::make_unique<DeviceBuffer>(whole[t].bytes.size());
    full[t]->upload(whole[t].bytes.data(), whole[t].bytes.size());
  }
  Program fullProgram = flashAttentionForward(sp.config);
  Kernel fullKernel = compile(fullProgram, {nativeArch(Driver::get().computeCapability())});
  DeviceBuffer fullO(whole[0].bytes.size()), fullLse(s.batch * s.headsQ * s.seqlen * 4);
  std::vector<LaunchArg> fullArgs =
      AttentionForwardArgs::dense(s.batch, s.seqlen, s.seqlen, s.headsQ, s.headsKV, s.headDim,
                                  sp.scale, full[0]->ptr(), full[1]->ptr(), full[2]->ptr(),
                                  fullO.ptr(), fullLse.ptr())
          .list();

  if (!bench) {
    fullKernel.launch(fullArgs, comm.stream());
    return checkForms(comm, sp, me, fullO) ? 0 : 1;
  }
  TrainingSteps training(comm, sp, me, whole);
  benchForms(comm, sp, me, fullKernel, fullArgs, training, reps);
  return 0;
}
