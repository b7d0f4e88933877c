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

/// Reference gradients in float64: dQ, dK, dV for upstream gradient dO.
void referenceBackward(const AttentionShape &s, const HostTensor &q, const HostTensor &k,
                       const HostTensor &v, const HostTensor &dO, std::vector<double> &dq,
                       std::vector<double> &dk, std::vector<double> &dv) {
  const int64_t d = s.headDim, group = s.headsQ / s.headsKv;
  dq.assign(q.values.size(), 0.0);
  dk.assign(k.values.size(), 0.0);
  dv.assign(v.values.size(), 0.0);
  std::vector<double> prob(s.seqK), dp(s.seqK);
  auto at = [&](int64_t b, int64_t row, int64_t rows, int64_t head, int64_t heads) {
    return ((b * rows + row) * heads + head) * d;
  };
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.headsQ; ++h) {
      int64_t hk = h / group;
      for (int64_t i = 0; i < s.seqQ; ++i) {
        const float *qi = &q.values[at(b, i, s.seqQ, h, s.headsQ)];
        const float *doi = &dO.values[at(b, i, s.seqQ, h, s.headsQ)];
        int64_t visible = s.causal ? std::min(i + 1, s.seqK) : s.seqK;
        double mx = -INFINITY, sum = 0, delta = 0;
        for (int64_t j = 0; j < visible; ++j) {
          const float *kj = &k.values[at(b, j, s.seqK, hk, s.headsKv)];
          double dot = 0;
          for (int64_t l = 0; l < d; ++l) dot += double(qi[l]) * kj[l];
          prob[j] = dot * s.scale;
          mx = std::max(mx, prob[j]);
        }
        for (int64_t j = 0; j < visible; ++j) sum += (prob[j] = std::exp(prob[j] - mx));
        for (int64_t j = 0; j < visible; ++j) {
          prob[j] /= sum;
          const float *vj = &v.values[at(b, j, s.seqK, hk, s.headsKv)];
          double dot = 0;
          for (int64_t l = 0; l < d; ++l) dot += double(doi[l]) * vj[l];
          dp[j] = dot;
          delta += prob[j] * dp[j];
        }
        for (int64_t j = 0; j < visible; ++j) {
          double ds = prob[j] * (dp[j] - delta) * s.scale;
          int64_t kvAt = at(b, j, s.seqK, hk, s.headsKv);
          for (int64_t l = 0; l < d; ++l) {
            dq[at(b, i, s.seqQ, h, s.headsQ) + l] += ds * k.values[kvAt + l];
            dk[kvAt + l] += ds * qi[l];
            dv[kvAt + l] += prob[j] * doi[l];
          }
        }
      }
    }
}

AttentionBackwardConfig backwardConfig(const Params &p) {
  AttentionBackwardConfig c;
  c.dtype = dtypeParam(p, "dtype");
  c.headDim = intParam(p, "head_dim");
  c.blockM = intParam(p, "block_m");
  c.blockN = intParam(p, "block_n");
  c.threads = intParam(p, "threads");
  c.stages = intParam(p, "stages");
  c.causal = intParam(p, "causal");
  c.kvReduction = choiceParam<KvReduction>(p, "kv_reduction", {{"direct", KvReduction::direct},
                                                               {"atomic", KvReduction::atomic},
                                                               {"split", KvReduction::split}});
  c.elementAtomics = intParam(p, "element_atomics");
  c.dqOrder = choiceParam<MemoryOrder>(p, "dq_order", {{"relaxed", MemoryOrder::relaxed},
                                                       {"release", MemoryOrder::release}});
  c.warpSpecialize = warpSpecializeParam(p, "warp_specialize");
  return c;
}

/// The whole backward pass on the device: preprocess, zeroed accumulators,
/// the main kernel, postprocess; inputs and reference-free outputs.
struct BackwardRun {
  const AttentionShape &s;
  AttentionBackwardConfig config;
  Kernel &main;
  Kernel pre, post;
  HostTensor q, k, v, o, dO, lse, delta, dqAcc, dkOut, dvOut, dq, dk, dv;
  DeviceRun dev;
  std::vector<rt::LaunchArg> preArgs, mainArgs, postDq, postDk, postDv;
  std::vector<rt::DeviceBuffer *> zeroed;

  static int64_t kvHeads(const AttentionShape &s, KvReduction r) {
    return r == KvReduction::split ? s.headsQ : s.headsKv;
  }
  BackwardRun(Kernel &kernel, const Params &p, const AttentionShape &shape)
      : s(shape), config(backwardConfig(p)), main(kernel),
        pre(compile(*std::make_unique<Program>(flashAttentionBackwardPre(config)),
                    {.arch = kernel.loadedKernel().arch()})),
        post(compile(*std::make_unique<Program>(flashAttentionBackwardPost(config)),
                     {.arch = kernel.loadedKernel().arch()})),
        q(config.dtype, {s.batch, s.seqQ, s.headsQ, s.headDim}),
        k(config.dtype, {s.batch, s.seqK, s.headsKv, s.headDim}), v(k), o(q), dO(q),
        lse(DType::f32, {s.batch, s.headsQ, s.seqQ}), delta(lse),
        dqAcc(DType::f32, q.shape),
        dkOut(config.kvReduction == KvReduction::direct ? config.dtype : DType::f32,
              {s.batch, s.seqK, kvHeads(s, config.kvReduction), s.headDim}),
        dvOut(dkOut), dq(q), dk(k), dv(k) {
    if (config.kvReduction == KvReduction::direct && s.headsQ != s.headsKv)
      throw Error(fmt::format("kv_reduction=direct writes dK/dV per K/V head and needs heads_q == "
                              "heads_kv (got {} and {}); use atomic or split",
                              s.headsQ, s.headsKv));
  }

  /// Uploads the inputs (o and lse as given) and lays out every launch.
  void upload() {
    auto sym = [](std::initializer_list<int64_t> v) {
      std::vector<rt::LaunchArg> a;
      for (int64_t x : v) a.push_back(rt::LaunchArg::integer(x));
      return a;
    };
    auto buffer = [&](HostTensor &t, bool poison) {
      dev.addTensor(t, poison);
      return dev.args.back();
    };
    rt::LaunchArg aq = buffer(q, false), ak = buffer(k, false), av = buffer(v, false),
                  ao = buffer(o, false), ado = buffer(dO, false), alse = buffer(lse, false),
                  adelta = buffer(delta, true), aacc = buffer(dqAcc, true),
                  adk = buffer(dkOut, true), adv = buffer(dvOut, true), adq = buffer(dq, true);
    zeroed.push_back(dev.buffers[7].get());
    if (config.kvReduction == KvReduction::atomic) {
      zeroed.push_back(dev.buffers[8].get());
      zeroed.push_back(dev.buffers[9].get());
    }
    preArgs = sym({s.batch, s.seqQ, s.headsQ});
    preArgs.insert(preArgs.end(), {ao, ado, adelta});
    mainArgs = sym({s.batch, s.seqQ, s.seqK, s.headsQ, s.headsKv});
    mainArgs.push_back(rt::LaunchArg::real(s.scale));
    mainArgs.insert(mainArgs.end(), {aq, ak, av, ado, alse, adelta, aacc, adk, adv});
    postDq = sym({s.batch, s.seqQ, s.headsQ, s.headsQ});
    postDq.insert(postDq.end(), {aacc, adq});
    if (config.kvReduction != KvReduction::direct) {
      rt::LaunchArg agk = buffer(dk, true), agv = buffer(dv, true);
      int64_t in = kvHeads(s, config.kvReduction);
      postDk = sym({s.batch, s.seqK, in, s.headsKv});
      postDk.insert(postDk.end(), {adk, agk});
      postDv = sym({s.batch, s.seqK, in, s.headsKv});
      postDv.insert(postDv.end(), {adv, agv});
    }
  }
  void launchAll() {
    pre.launch(preArgs);
    for (rt::DeviceBuffer *b : zeroed) b->fillBytes(0);
    main.launch(mainArgs);
    post.launch(postDq);
    if (!postDk.empty()) {
      post.launch(postDk);
      post.launch(postDv);
    }
  }
  /// Downloads dQ, dK, dV (in the output type).
  void download() {
    auto fetch = [&](const rt::LaunchArg &a, HostTensor &t) {
      for (auto &b : dev.buffers)
        if (b->ptr() == a.ptr) b->download(t.bytes.data(), t.bytes.size());
      t.decode();
    };
    fetch(postDq.back(), dq);
    if (config.kvReduction == KvReduction::direct) {
      fetch(mainArgs[mainArgs.size() - 2], dk);
      fetch(mainArgs.back(), dv);
    } else {
      fetch(postDk.back(), dk);
      fetch(postDv.back(), dv);
    }
  }
};

CheckResult checkBackward(Kernel &kernel, const Params &p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  AttentionShape s(p);
  BackwardRun run(kernel, p, s);
  randomize(run.q, rng, -2, 2);
  randomize(run.k, rng, -2, 2);
  randomize(run.v, rng);
  randomize(run.dO, rng);
  std::vector<double> o, lse, dq, dk, dv;
  referenceForward(s, run.q, run.k, run.v, o, lse);
  for (size_t i = 0; i < o.size(); ++i) run.o.set(i, float(o[i]));
  for (size_t i = 0; i < lse.size(); ++i) run.lse.set(i, float(lse[i]));
  referenceBackward(s, run.q, run.k, run.v, run.dO, dq, dk, dv);
  run.upload();
  run.launchAll();
  synchronize();
  run.download();
  CheckResult r;
  r.shape = s.str(run.config.dtype) + fmt::format(" kv_reduction={}", p.at("kv_reduction"));
  double eq = relativeError(run.dq.values, dq), ek = relativeError(run.dk.values, dk),
         ev = relativeError(run.dv.values, dv);
  r.shape += fmt::format(" (dQ {:.2e}, dK {:.2e}, dV {:.2e})", eq, ek, ev);
  r.relError = std::max({eq, ek, ev});
  r.tolerance = toleranceFor(run.config.dtype);
  r.passed = r.relError < r.tolerance;
  r.ms = rt::timeMedian([&](int) { run.launchAll(); }, 3, 20);
  return r;
}

BenchResult benchBackward(Kernel &kernel, const Params &p, int reps) {
  std::mt19937_64 rng(1);
  AttentionShape s(p);
  BackwardRun run(kernel, p, s);
  for (HostTensor *t : {&run.q, &run.k, &run.v, &run.o, &run.dO}) randomize(*t, rng);
  for (size_t i = 0; i < run.lse.values.size(); ++i) run.lse.set(i, 4.0f);
  run.upload();
  BenchResult r;
  r.ms = rt::timeMedian([&](int) { run.launchAll(); }, 10, reps);
  // FLOPs as FlashAttention counts them: 2.5x the forward pass.
  r.tflops = 2.5 * s.forwardFlops() / r.ms / 1e9;
  r.shape = s.str(run.config.dtype) + fmt::format(" kv_reduction={}{}", p.at("kv_reduction"),
                                                  run.config.elementAtomics ? " element atomics" : "");
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
      {"flash_attention_bwd",
       "dQ, dK, dV of attention: preprocess (delta), main kernel with region atomic_add of dQ, "
       "postprocess; GQA dK/dV by atomics or split slices",
       [] {
         Params p = attentionDefaults();
         p["block_m"] = "64";
         p.insert({{"kv_reduction", "atomic"}, {"element_atomics", "0"}, {"dq_order", "relaxed"}});
         return p;
       }(),
       [](const Params &p) { return flashAttentionBackward(backwardConfig(p)); }, checkBackward,
       benchBackward},
  };
}
