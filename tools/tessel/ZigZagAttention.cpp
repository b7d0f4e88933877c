//===- ZigZagAttention.cpp - tessel run/bench sp_attention variant=zigzag -===//
//
// Chunked-query context parallelism: rank r keeps its queries (chunks r and
// 2N-1-r of the sequence, all heads), gathers K and V of the whole sequence
// by the copy engines, and runs causal attention per chunk with the queries
// placed at their key positions. Checked against single-GPU attention over
// the gathered tensors; timed against it, with each rank's attention alone
// to show the balance zig-zag placement gives.
//
//===----------------------------------------------------------------------===//
#include "MultiGpu.h"
#include "SpAttention.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Error.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::harness;
using namespace tessel::rt;

namespace {
/// One rank's queries, outputs and the attention launches over them.
struct ZigZagRank {
  const SpProblem &sp;
  ZigZagShape z;
  int rank;
  DeviceBuffer q, o, lse;

  ZigZagRank(const SpProblem &p, int r)
      : sp(p), z(zigzagShape(p)), rank(r), q(rowsBytes(p.shape.headsQ)), o(rowsBytes(p.shape.headsQ)),
        lse(2 * z.batch * z.headsQ * z.chunk() * 4) {}
  /// Bytes of the rank's two chunks of a tensor with `heads` heads.
  static int64_t rowsBytesOf(const SpProblem &p, int64_t heads) {
    const UlyssesShape &s = p.shape;
    return s.batch * 2 * (s.seqlen / (2 * s.ranks)) * heads * s.headDim * s.elementBytes;
  }
  int64_t rowsBytes(int64_t heads) const { return rowsBytesOf(sp, heads); }

  /// Copies rows of the rank's two chunks between a whole-sequence host
  /// tensor and a [B, 2C, heads, D] buffer (to the device, or back).
  void transfer(HostTensor &whole, CUdeviceptr local, int64_t heads, bool toDevice) const {
    Driver &d = Driver::get();
    int64_t chunk = z.chunk(), row = heads * z.headDim * z.elementBytes;
    for (int64_t b = 0; b < z.batch; ++b)
      for (int part = 0; part < 2; ++part) {
        char *host = whole.bytes.data() + (b * z.seqlen + z.globalChunk(rank, part) * chunk) * row;
        CUdeviceptr dev = local + (b * 2 + part) * chunk * row;
        if (toDevice) TESSEL_CU(d, cuMemcpyHtoD, dev, host, chunk * row);
        else TESSEL_CU(d, cuMemcpyDtoH, host, dev, chunk * row);
      }
  }

  /// Attention of every chunk and batch, the chunk whose keys are nearest
  /// (fewest peers' chunks needed) first. `arrivals` set: the streamed
  /// kernel's extra arguments.
  void attend(Kernel &kernel, CUdeviceptr keys, CUdeviceptr values, CUstream stream,
              CUdeviceptr arrivals = 0, uint32_t epoch = 0) {
    int64_t chunk = z.chunk();
    int64_t rowQ = z.headsQ * z.headDim * z.elementBytes, rowKV = z.headsKV * z.headDim * z.elementBytes;
    for (int part = 0; part < 2; ++part)
      for (int64_t b = 0; b < z.batch; ++b) {
        int c = z.globalChunk(rank, part);
        int64_t seqK = sp.config.causal ? (c + 1) * chunk : z.seqlen;
        int64_t at = (b * 2 + part) * chunk * rowQ;
        std::vector<LaunchArg> args = attentionArgs(
            {1, chunk, seqK, z.headsQ, z.headsKV, z.headDim}, sp.scale, q.ptr() + at,
            keys + b * z.seqlen * rowKV, values + b * z.seqlen * rowKV, o.ptr() + at,
            lse.ptr() + (b * 2 + part) * z.headsQ * chunk * 4);
        if (arrivals) {
          for (int64_t v : {chunk, int64_t(2 * z.ranks), int64_t(1), int64_t(static_cast<int32_t>(epoch))})
            args.push_back(LaunchArg::integer(v));
          args.push_back(LaunchArg::buffer(arrivals, {2 * z.ranks}));
        }
        if (sp.config.causal) args.push_back(LaunchArg::integer(c * chunk));
        kernel.launch(args, stream);
      }
  }
};
} // namespace

int tessel::runZigZagRank(Communicator &comm, const SpProblem &sp, bool bench, int reps) {
  ZigZagShape z = zigzagShape(sp);
  const UlyssesShape &s = sp.shape;
  Driver &d = Driver::get();
  AttentionConfig chunked = sp.config;
  chunked.queryOffset = sp.config.causal;
  Program program = flashAttentionForward(chunked);
  Kernel kernel = compile(program, {nativeArch(Driver::get().computeCapability())});
  AttentionConfig streamed = chunked;
  streamed.streamedShards = true;
  Program streamedProgram = flashAttentionForward(streamed);
  Kernel streamedKernel = compile(streamedProgram, {nativeArch(Driver::get().computeCapability())});
  int rank = comm.localRank(), n = z.ranks;

  ZigZagKvGather x(comm, z);
  ZigZagRank me(sp, rank);
  std::array<HostTensor, 3> whole = wholeInputs(s, sp.config.dtype);
  me.transfer(whole[0], me.q.ptr(), z.headsQ, true);
  for (int t = 0; t < 2; ++t) me.transfer(whole[1 + t], x.input(t), z.headsKV, true);
  CUstream stream = comm.stream();
  kernel.loadedKernel().resourceUsage();
  streamedKernel.loadedKernel().resourceUsage();
  auto unfused = [&] {
    x.gather(stream);
    me.attend(kernel, x.gathered(0), x.gathered(1), stream);
  };
  auto fused = [&] {
    x.gatherStreamed(stream, [&](CUstream st, CUdeviceptr arrivals, uint32_t epoch) {
      me.attend(streamedKernel, x.gathered(0), x.gathered(1), st, arrivals, epoch);
    });
  };

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
      attentionArgs({s.batch, s.seqlen, s.seqlen, s.headsQ, s.headsKV, s.headDim}, sp.scale,
                    full[0]->ptr(), full[1]->ptr(), full[2]->ptr(), fullO.ptr(), fullLse.ptr());

  if (!bench) {
    fullKernel.launch(fullArgs, stream);
    TESSEL_CU(d, cuStreamSynchronize, stream);
    HostTensor all(sp.config.dtype, {s.batch, s.seqlen, s.headsQ, s.headDim});
    fullO.download(all.bytes.data(), all.bytes.size());
    // The reference rows of this rank's chunks, in its layout.
    HostTensor expected(sp.config.dtype, {s.batch, 2 * z.chunk(), s.headsQ, s.headDim});
    DeviceBuffer staging(me.rowsBytes(z.headsQ));
    me.transfer(all, staging.ptr(), z.headsQ, true);
    staging.download(expected.bytes.data(), expected.bytes.size());
    expected.decode();
    std::vector<double> ref(expected.values.begin(), expected.values.end());
    bool ok = true;
    for (auto [name, form] : {std::pair<const char *, std::function<void()>>{"unfused", unfused},
                              {"fused", fused}}) {
      for (int call = 0; call < 2; ++call) {
        TESSEL_CU(d, cuMemsetD8Async, me.o.ptr(), 0xff, me.rowsBytes(z.headsQ), stream);
        form();
      }
      TESSEL_CU(d, cuStreamSynchronize, stream);
      OutputCheck c = checkOutput(sp.config.dtype, {s.batch, 2 * z.chunk(), s.headsQ, s.headDim},
                                  me.o.ptr(), ref);
      ok &= c.pass;
      fmt::print("rank {} (device {}): sp_attention zigzag {} batch={} seqlen={} heads_q={} "
                 "heads_kv={} d={} {}, chunks {} and {}: rel error {:.3e} against single-GPU "
                 "attention over the gathered tensors ({} of {} elements identical) — {}\n",
                 rank, comm.device(), name, s.batch, s.seqlen, s.headsQ, s.headsKV, s.headDim,
                 sp.config.causal ? "causal" : "full", z.globalChunk(rank, 0),
                 z.globalChunk(rank, 1), c.error, c.identical, ref.size(),
                 c.pass ? "PASS" : "FAIL");
    }
    return ok ? 0 : 1;
  }
  comm.barrier();
  double unfusedMs = slowestRank(comm, medianOnStream(stream, reps, unfused));
  double fusedMs = slowestRank(comm, medianOnStream(stream, reps, fused));
  double alone = medianOnStream(stream, reps, [&] {
    me.attend(kernel, x.gathered(0), x.gathered(1), stream);
  });
  double slowest = slowestRank(comm, alone), fastest = fastestRank(comm, alone);
  comm.barrier();
  double single = rank == 0 ? medianOnStream(stream, reps, [&] { fullKernel.launch(fullArgs, stream); })
                            : 0;
  comm.barrier();
  if (rank == 0) {
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
  }
  return 0;
}
