//===- AttentionLibrary.cpp - attention kernels by name, with checks -------===//
//
// The checks run on fresh random inputs with poisoned outputs and compare
// with a float64 CPU reference of softmax(scale * Q K^T) V (and its
// gradients). Benchmarks time FlashAttention-3's shapes.
//
//===----------------------------------------------------------------------===//
#include "Kernels.h"
#include "LibrarySupport.h"

#include <cmath>

using namespace tessel;
using namespace tessel::kernels;

namespace {
AttentionConfig attentionConfig(const Params &p) {
  AttentionConfig c;
  c.dtype = dtypeParam(p, "dtype");
  c.headDim = intParam(p, "head_dim");
  c.blockM = intParam(p, "block_m");
  c.blockN = intParam(p, "block_n");
  c.threads = intParam(p, "threads");
  c.stages = intParam(p, "stages");
  c.causal = intParam(p, "causal");
  c.warpSpecialize = warpSpecializeParam(p, "warp_specialize");
  return c;
}

/// Run shapes of an attention check or benchmark.
struct AttentionShape {
  int64_t batch, seqQ, seqK, headsQ, headsKv, headDim;
  bool causal;
  double scale;
  explicit AttentionShape(const Params &p)
      : batch(intParam(p, "batch")), seqQ(intParam(p, "seqlen_q")),
        seqK(intParam(p, "seqlen_k")), headsQ(intParam(p, "heads_q")),
        headsKv(intParam(p, "heads_kv")), headDim(intParam(p, "head_dim")),
        causal(intParam(p, "causal")), scale(realParam(p, "scale")) {
    if (scale == 0) scale = 1.0 / std::sqrt(double(headDim));
  }
  std::string str(DType t) const {
    return fmt::format("batch={} seqlen_q={} seqlen_k={} heads_q={} heads_kv={} d={} {}{}", batch,
                       seqQ, seqK, headsQ, headsKv, headDim, name(t), causal ? " causal" : "");
  }
  /// Matmul FLOPs of the forward pass (two products; half of them when
  /// causal with equal lengths).
  double forwardFlops() const {
    double f = 4.0 * batch * headsQ * seqQ * seqK * headDim;
    return causal ? f / 2 : f;
  }
};

/// Reference forward pass in float64 over BSHD tensors: O and LSE.
void referenceForward(const AttentionShape &s, const HostTensor &q, const HostTensor &k,
                      const HostTensor &v, std::vector<double> &o, std::vector<double> &lse) {
  const int64_t d = s.headDim, group = s.headsQ / s.headsKv;
  o.assign(s.batch * s.seqQ * s.headsQ * d, 0.0);
  lse.assign(s.batch * s.headsQ * s.seqQ, 0.0);
  std::vector<double> scores(s.seqK);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.headsQ; ++h) {
      int64_t hk = h / group;
      for (int64_t i = 0; i < s.seqQ; ++i) {
        const float *qi = &q.values[((b * s.seqQ + i) * s.headsQ + h) * d];
        double mx = -INFINITY;
        int64_t visible = s.causal ? std::min(i + 1, s.seqK) : s.seqK;
        for (int64_t j = 0; j < visible; ++j) {
          const float *kj = &k.values[((b * s.seqK + j) * s.headsKv + hk) * d];
          double dot = 0;
          for (int64_t l = 0; l < d; ++l) dot += double(qi[l]) * kj[l];
          scores[j] = dot * s.scale;
          mx = std::max(mx, scores[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < visible; ++j) sum += (scores[j] = std::exp(scores[j] - mx));
        double *oi = &o[((b * s.seqQ + i) * s.headsQ + h) * d];
        for (int64_t j = 0; j < visible; ++j) {
          const float *vj = &v.values[((b * s.seqK + j) * s.headsKv + hk) * d];
          for (int64_t l = 0; l < d; ++l) oi[l] += scores[j] / sum * vj[l];
        }
        lse[(b * s.headsQ + h) * s.seqQ + i] = mx + std::log(sum);
      }
    }
}

struct ForwardTensors {
  HostTensor q, k, v, o, lse;
  ForwardTensors(const AttentionShape &s, DType t)
      : q(t, {s.batch, s.seqQ, s.headsQ, s.headDim}), k(t, {s.batch, s.seqK, s.headsKv, s.headDim}),
        v(t, {s.batch, s.seqK, s.headsKv, s.headDim}), o(t, {s.batch, s.seqQ, s.headsQ, s.headDim}),
        lse(DType::f32, {s.batch, s.headsQ, s.seqQ}) {}
};

/// Symbols in the order the forward kernel declares them, then its tensors.
void forwardArgs(DeviceRun &run, const AttentionShape &s, ForwardTensors &t, bool poison) {
  for (int64_t n : {s.batch, s.seqQ, s.seqK, s.headsQ, s.headsKv})
    run.args.push_back(rt::LaunchArg::integer(n));
  run.args.push_back(rt::LaunchArg::real(s.scale));
  run.addTensor(t.q, false);
  run.addTensor(t.k, false);
  run.addTensor(t.v, false);
  run.addTensor(t.o, poison);
  run.addTensor(t.lse, poison);
}

CheckResult checkForward(Kernel &kernel, const Params &p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  AttentionShape s(p);
  DType t = dtypeParam(p, "dtype");
  ForwardTensors x(s, t);
  randomize(x.q, rng, -2, 2);
  randomize(x.k, rng, -2, 2);
  randomize(x.v, rng);
  std::vector<double> o, lse;
  referenceForward(s, x.q, x.k, x.v, o, lse);
  DeviceRun run;
  forwardArgs(run, s, x, /*poison=*/true);
  CheckResult r;
  r.shape = s.str(t);
  r = launchAndCompare(kernel, run, 9, x.o, o, toleranceFor(t), r);
  run.download(10, x.lse);
  double lseError = relativeError(x.lse.values, lse);
  r.relError = std::max(r.relError, lseError);
  r.passed = r.relError < r.tolerance;
  return r;
}

BenchResult benchForward(Kernel &kernel, const Params &p, int reps) {
  std::mt19937_64 rng(1);
  AttentionShape s(p);
  DType t = dtypeParam(p, "dtype");
  ForwardTensors x(s, t);
  randomize(x.q, rng, -2, 2);
  randomize(x.k, rng, -2, 2);
  randomize(x.v, rng);
  DeviceRun run;
  forwardArgs(run, s, x, /*poison=*/false);
  BenchResult r;
  r.ms = kernel.loadedFor(run.args).time({run.args}, 10, reps);
  r.tflops = s.forwardFlops() / r.ms / 1e9;
  int64_t bytes = x.q.bytes.size() + x.k.bytes.size() + x.v.bytes.size() + x.o.bytes.size() +
                  x.lse.bytes.size();
  r.gbps = bytes / r.ms / 1e6;
  r.shape = s.str(t);
  return r;
}

Params attentionDefaults() {
  return {{"dtype", "bf16"}, {"head_dim", "128"}, {"block_m", "128"}, {"block_n", "128"},
          {"threads", "256"}, {"stages", "2"}, {"causal", "0"}, {"warp_specialize", "auto"},
          {"batch", "2"}, {"seqlen_q", "300"}, {"seqlen_k", "300"}, {"heads_q", "4"},
          {"heads_kv", "2"}, {"scale", "0"}};
}
} // namespace

std::vector<LibraryKernel> tessel::kernels::attentionKernels() {
  return {
      {"flash_attention_fwd",
       "O = softmax(scale * Q K^T) V with its log-sum-exp, BSHD tensors, GQA, causal or full",
       attentionDefaults(), [](const Params &p) { return flashAttentionForward(attentionConfig(p)); },
       checkForward, benchForward},
  };
}
