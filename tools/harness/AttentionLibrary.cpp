//===- AttentionLibrary.cpp - attention kernels by name, with checks -------===//
//
// The checks run on fresh random inputs with poisoned outputs and compare
// with a float64 CPU reference of softmax(scale * Q K^T) V (and its
// gradients). Benchmarks time FlashAttention-3's shapes.
//
//===----------------------------------------------------------------------===//
#include "tessel/kernels/Kernels.h"
#include "tessel/harness/LibrarySupport.h"

#include <climits>
#include <cmath>
#include <memory>
#include <mutex>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::harness;

namespace {
/// The forward configuration a run's settings name: the table's, and
/// streamed shards or a query offset where the run has them (those come
/// with run-time arguments, which the check supplies).
AttentionConfig attentionConfig(const Params &p) {
  AttentionConfig c = attentionSettings().read(p);
  c.streamedShards = intParam(p, "shards") > 0;
  c.queryOffset = intParam(p, "query_offset") > 0;
  return c;
}

std::vector<int64_t> listParam(const Params &p, const std::string &key) {
  std::vector<int64_t> out;
  std::string v = p.at(key);
  for (size_t at = 0; at < v.size();) {
    size_t comma = v.find(',', at);
    std::string item = v.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    out.push_back(parseInteger(item, INT32_MIN, INT32_MAX, fmt::format("parameter {}={}: item", key, v)));
    at = comma == std::string::npos ? v.size() : comma + 1;
  }
  return out;
}

/// Run shapes of an attention check or benchmark. A fixed batch is `batch`
/// sequences of seqlen_q/seqlen_k; a packed (varlen) batch lists each
/// sequence's lengths and is stored as one batch of the rows end to end.
struct AttentionShape {
  int64_t batch, seqQ, seqK, headsQ, headsKv, headDim;
  bool causal, varlen;
  double scale;
  /// Forward with streamed shards: the key rows split into this many.
  int64_t shards = 0;
  /// Causal: the key position of query row 0.
  int64_t queryOffset = 0;
  std::vector<int64_t> startQ, lenQ, startK, lenK; // per sequence
  explicit AttentionShape(const Params &p)
      : batch(intParam(p, "batch")), seqQ(intParam(p, "seqlen_q")),
        seqK(intParam(p, "seqlen_k")), headsQ(intParam(p, "heads_q")),
        headsKv(intParam(p, "heads_kv")), headDim(intParam(p, "head_dim")),
        causal(flagParam(p, "causal")), varlen(flagParam(p, "varlen")), scale(realParam(p, "scale")) {
    if (scale == 0) scale = 1.0 / std::sqrt(double(headDim));
    if (headsKv <= 0 || headsQ <= 0) throw Error("heads_q and heads_kv must be positive");
    if (varlen) {
      lenQ = listParam(p, "seqlens_q");
      lenK = p.at("seqlens_k").empty() ? lenQ : listParam(p, "seqlens_k");
      if (lenQ.size() != lenK.size())
        throw Error("seqlens_q and seqlens_k list different numbers of sequences");
      batch = lenQ.size();
    } else {
      lenQ.assign(batch, seqQ);
      lenK.assign(batch, seqK);
    }
    for (int64_t b = 0, q = 0, k = 0; b < batch; ++b) {
      startQ.push_back(q);
      startK.push_back(k);
      q += lenQ[b];
      k += lenK[b];
    }
    if (varlen) {
      seqQ = startQ.back() + lenQ.back(); // the packed tensors' rows
      seqK = startK.back() + lenK.back();
    }
    if (p.count("query_offset")) queryOffset = intParam(p, "query_offset");
    if (queryOffset < 0 || (queryOffset && (!causal || varlen)))
      throw Error(fmt::format("query_offset={}: a query offset must not be negative and is for causal "
                              "attention without varlen",
                              queryOffset));
    if (p.count("shards")) shards = intParam(p, "shards");
    if (shards) {
      int64_t blockN = forwardKeyBlock(attentionSettings().read(p));
      int64_t rows = seqK / shards;
      if (shards < 0 || varlen || seqQ != seqK || seqK % shards ||
          rows % intParam(p, "block_m") || rows % blockN)
        throw Error(fmt::format("shards={}: streamed shards take seqlen_q = seqlen_k split into "
                                "shards of whole blocks (block_m, block_n), without varlen; "
                                "seqlen_k={} makes shards of {} rows",
                                shards, seqK, shards > 0 ? seqK / shards : 0));
    }
  }
  /// The batch extent of the tensors (packed: 1).
  int64_t tensorBatch() const { return varlen ? 1 : batch; }
  int64_t maxLen(const std::vector<int64_t> &lens) const {
    return *std::max_element(lens.begin(), lens.end());
  }
  /// Element offsets of (sequence b, row i, head h) in Q/O-like and
  /// K/V-like tensors, and of (b, h, i) in LSE-like row vectors.
  int64_t qAt(int64_t b, int64_t i, int64_t h) const {
    return ((startQ[b] + i) * headsQ + h) * headDim;
  }
  int64_t kAt(int64_t b, int64_t j, int64_t h) const {
    return ((startK[b] + j) * headsKv + h) * headDim;
  }
  int64_t lseAt(int64_t b, int64_t h, int64_t i) const {
    return varlen ? h * seqQ + startQ[b] + i : (b * headsQ + h) * seqQ + i;
  }
  std::string str(DType t) const {
    std::string lengths = varlen ? fmt::format("varlen {} sequences, {} + {} rows", batch, seqQ, seqK)
                                 : fmt::format("batch={} seqlen_q={} seqlen_k={}", batch, seqQ, seqK);
    return fmt::format("{} heads_q={} heads_kv={} d={} {}{}{}", lengths, headsQ, headsKv, headDim,
                       name(t), causal ? " causal" : "",
                       queryOffset ? fmt::format(" query_offset={}", queryOffset) : "");
  }
  /// Matmul FLOPs of the forward pass (two products over the visible
  /// query-key pairs).
  double forwardFlops() const {
    double pairs = 0;
    for (int64_t b = 0; b < batch; ++b) {
      if (!causal) {
        pairs += double(lenQ[b]) * lenK[b];
        continue;
      }
      // Row i sees min(query_offset + i + 1, keys) keys: a triangle while
      // that grows, then full rows.
      int64_t growing = std::clamp<int64_t>(lenK[b] - queryOffset, 0, lenQ[b]);
      pairs += double(growing) * queryOffset + double(growing) * (growing + 1) / 2 +
               double(lenQ[b] - growing) * lenK[b];
    }
    return 4.0 * headsQ * headDim * pairs;
  }
  AttentionArgs args(DType t) const {
    AttentionArgs a;
    a.q = {t, {tensorBatch(), seqQ, headsQ, headDim}};
    a.o = {attentionOutputType(t), a.q.shape};
    a.k = a.v = {t, {tensorBatch(), seqK, headsKv, headDim}};
    if (varlen) {
      for (int64_t b = 0; b <= batch; ++b) {
        a.cuSeqlensQ.push_back(b < batch ? startQ[b] : seqQ);
        a.cuSeqlensK.push_back(b < batch ? startK[b] : seqK);
      }
      a.maxSeqlenQ = maxLen(lenQ);
      a.maxSeqlenK = maxLen(lenK);
    }
    return a;
  }
};

/// Query row i of head h in sequence b, in float64: softmax(scale q_i K^T)
/// over the keys it sees, prob[0, visible). Returns `visible` and sets the
/// row's log-sum-exp (-inf for a row that sees no key).
int64_t referenceProbabilities(const AttentionShape &s, const HostTensor &q, const HostTensor &k,
                               int64_t b, int64_t h, int64_t i, std::vector<double> &prob,
                               double &lse) {
  const int64_t d = s.headDim, hk = h / (s.headsQ / s.headsKv);
  const float *qi = &q.values[s.qAt(b, i, h)];
  int64_t visible = s.causal ? std::min(s.queryOffset + i + 1, s.lenK[b]) : s.lenK[b];
  prob.resize(s.lenK[b]);
  double mx = -INFINITY, sum = 0;
  for (int64_t j = 0; j < visible; ++j) {
    const float *kj = &k.values[s.kAt(b, j, hk)];
    double dot = 0;
    for (int64_t l = 0; l < d; ++l) dot += double(qi[l]) * kj[l];
    prob[j] = dot * s.scale;
    mx = std::max(mx, prob[j]);
  }
  for (int64_t j = 0; j < visible; ++j) sum += (prob[j] = std::exp(prob[j] - mx));
  for (int64_t j = 0; j < visible; ++j) prob[j] /= sum;
  lse = visible ? mx + std::log(sum) : -INFINITY;
  return visible;
}

/// Reference forward pass in float64: O and LSE (a row that sees no key has
/// output 0 and LSE -inf).
void referenceForward(const AttentionShape &s, const HostTensor &q, const HostTensor &k,
                      const HostTensor &v, std::vector<double> &o, std::vector<double> &lse) {
  const int64_t d = s.headDim, group = s.headsQ / s.headsKv;
  o.assign(q.values.size(), 0.0);
  lse.assign(s.tensorBatch() * s.headsQ * s.seqQ, 0.0);
  std::vector<double> prob;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.headsQ; ++h)
      for (int64_t i = 0; i < s.lenQ[b]; ++i) {
        int64_t visible = referenceProbabilities(s, q, k, b, h, i, prob, lse[s.lseAt(b, h, i)]);
        double *oi = &o[s.qAt(b, i, h)];
        for (int64_t j = 0; j < visible; ++j) {
          const float *vj = &v.values[s.kAt(b, j, h / group)];
          for (int64_t l = 0; l < d; ++l) oi[l] += prob[j] * vj[l];
        }
      }
}

struct ForwardInputs {
  HostTensor q, k, v, o, lse, cuQ, cuK;
  /// FP8 kernels built with descales: Q's, K's and V's scales, f32
  /// [sequences, heads_kv] (empty otherwise).
  std::vector<HostTensor> descales;
  /// V as a v_transposed kernel takes it (an empty tensor otherwise).
  HostTensor vt{DType::f32, {0}};
  /// Streamed shards: every shard's flag already at epoch 1.
  HostTensor arrivals;
  ForwardInputs(const AttentionShape &s, DType t)
      : q(t, {s.tensorBatch(), s.seqQ, s.headsQ, s.headDim}),
        k(t, {s.tensorBatch(), s.seqK, s.headsKv, s.headDim}), v(k),
        o(attentionOutputType(t), {s.tensorBatch(), s.seqQ, s.headsQ, s.headDim}),
        lse(DType::f32, {s.tensorBatch(), s.headsQ, s.seqQ}), cuQ(DType::i32, {s.batch + 1}),
        cuK(cuQ), arrivals(DType::i32, {std::max<int64_t>(s.shards, 1)}) {
    for (int64_t i = 0; i < s.shards; ++i) arrivals.set(i, 1);
    AttentionArgs a = s.args(t);
    for (size_t i = 0; i < a.cuSeqlensQ.size(); ++i) {
      cuQ.set(i, a.cuSeqlensQ[i]);
      cuK.set(i, a.cuSeqlensK[i]);
    }
  }
};

/// V^T in register order, [batch, heads_kv, head_dim, seqlen_k rounded up
/// to 16], zeros past seqlen_k (AttentionConfig::vTransposed).
HostTensor registerOrderValues(const AttentionShape &s, const HostTensor &v) {
  int64_t keys = (s.seqK + 15) / 16 * 16;
  HostTensor vt(v.type, {s.tensorBatch(), s.headsKv, s.headDim, keys});
  for (int64_t b = 0; b < s.tensorBatch(); ++b)
    for (int64_t h = 0; h < s.headsKv; ++h)
      for (int64_t c = 0; c < s.headDim; ++c)
        for (int64_t p = 0; p < keys; ++p) {
          int64_t key = (p & ~int64_t{15}) | (p & 1) | ((p >> 1 & 1) << 3) | ((p >> 2 & 3) << 1);
          int64_t at = ((b * s.headsKv + h) * s.headDim + c) * keys + p;
          vt.set(at, key < s.seqK ? v.values[s.kAt(b, key, h) + c] : 0.0f);
        }
  return vt;
}

/// Checked, random forward inputs (outputs left zero).
/// V's scale in the FP8 forward's checks and benchmarks: not 1, so that a
/// kernel that ignores it fails.
constexpr double kFp8VScale = 0.75;

ForwardInputs randomForwardInputs(const AttentionShape &s, DType t, std::mt19937_64 &rng) {
  validateAttention(t, s.headDim, s.varlen, s.args(t));
  ForwardInputs x(s, t);
  randomize(x.q, rng, -2, 2);
  randomize(x.k, rng, -2, 2);
  randomize(x.v, rng);
  return x;
}

/// The forward's inputs for a kernel built with `c`: with descales, a
/// scale per (sequence, K/V head) for each of Q, K and V, from 1/4 to 2, so
/// that a kernel that reads another head's (or none) fails.
ForwardInputs forwardInputsFor(const AttentionConfig &c, const AttentionShape &s, DType t,
                               std::mt19937_64 &rng) {
  ForwardInputs x = randomForwardInputs(s, t, rng);
  if (c.vTransposed) x.vt = registerOrderValues(s, x.v);
  if (c.descales)
    for (int i = 0; i < 3; ++i) {
      x.descales.emplace_back(DType::f32, std::vector<int64_t>{s.batch, s.headsKv});
      randomize(x.descales.back(), rng, 0.25f, 2.0f);
    }
  return x;
}

/// What a descaled FP8 forward computes, for the reference: Q's values
/// times Q's and K's scale of their (sequence, K/V head), in f32 so that
/// nothing is rounded to FP8 again. O is then times V's.
HostTensor descaledQueries(const AttentionShape &s, const ForwardInputs &x) {
  HostTensor q(DType::f32, x.q.shape);
  q.values = x.q.values;
  const int64_t group = s.headsQ / s.headsKv;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.headsQ; ++h) {
      int64_t at = b * s.headsKv + h / group;
      float scale = x.descales[0].values[at] * x.descales[1].values[at];
      for (int64_t i = 0; i < s.lenQ[b]; ++i)
        for (int64_t e = 0; e < s.headDim; ++e) q.values[s.qAt(b, i, h) + e] *= scale;
    }
  return q;
}

void scaleByValueDescales(const AttentionShape &s, const ForwardInputs &x, std::vector<double> &o) {
  const int64_t group = s.headsQ / s.headsKv;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.headsQ; ++h) {
      double scale = x.descales[2].values[b * s.headsKv + h / group];
      for (int64_t i = 0; i < s.lenQ[b]; ++i)
        for (int64_t e = 0; e < s.headDim; ++e) o[s.qAt(b, i, h) + e] *= scale;
    }
}

/// The forward kernel's arguments over the run's device buffers (one head
/// group with every shard at epoch 1 when the kernel streams shards).
void forwardArgs(DeviceRun &run, const AttentionShape &s, ForwardInputs &t, bool poison) {
  AttentionForwardArgs a;
  a.batch = s.tensorBatch(), a.seqQ = s.seqQ, a.seqK = s.seqK;
  a.headsQ = s.headsQ, a.headsKv = s.headsKv, a.scale = s.scale;
  a.q = run.addTensor(t.q, false);
  a.k = run.addTensor(t.k, false);
  a.v = run.addTensor(t.vt.size() ? t.vt : t.v, false);
  a.o = run.addTensor(t.o, poison);
  a.lse = run.addTensor(t.lse, poison);
  if (s.shards) a.streamed = {s.seqK / s.shards, s.shards, 1, 1, run.addTensor(t.arrivals, false)};
  if (s.queryOffset) a.queryOffset = s.queryOffset;
  if (s.varlen)
    a.packed = {s.batch + 1, s.maxLen(s.lenQ), run.addTensor(t.cuQ, false),
                run.addTensor(t.cuK, false)};
  if (attentionOutputType(t.q.type) != t.q.type) a.vScale = kFp8VScale;
  if (!t.descales.empty()) {
    a.descales.emplace();
    for (size_t i = 0; i < 3; ++i) {
      run.addTensor(t.descales[i], false);
      (*a.descales)[i] = {run.buffers.back()->ptr(), 0, s.headsKv, 1, s.batch * s.headsKv};
    }
  }
  run.args = a.list();
}

CheckResult checkForward(Kernel &kernel, const Params &p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  AttentionShape s(p);
  DType t = dtypeParam(p, "dtype");
  ForwardInputs x = forwardInputsFor(attentionConfig(p), s, t, rng);
  std::vector<double> o, lse;
  if (x.descales.empty()) {
    referenceForward(s, x.q, x.k, x.v, o, lse);
  } else {
    referenceForward(s, descaledQueries(s, x), x.k, x.v, o, lse);
    scaleByValueDescales(s, x, o);
  }
  // FP8: O is V's scale times the product of the FP8 values; P is rounded
  // to FP8 in the kernel (not in the reference), about 3% (e4m3) or 5%
  // (e5m2) per probability, which toleranceFor allows (half an ulp).
  bool fp8 = attentionOutputType(t) != t;
  if (fp8)
    for (double &value : o) value *= kFp8VScale;
  DeviceRun run;
  forwardArgs(run, s, x, /*poison=*/true);
  CheckResult r;
  r.shape = s.str(t);
  r = launchAndCompare(kernel, run, AttentionForwardArgs::kOutIndex, x.o, o, toleranceFor(t), r);
  run.download(AttentionForwardArgs::kLseIndex, x.lse);
  double lseError = relativeError(x.lse.values, lse);
  r.relError = std::max(r.relError, lseError);
  r.passed = r.relError < r.tolerance;
  return r;
}

BenchResult benchForward(Kernel &kernel, const Params &p, int reps) {
  AttentionShape s(p);
  DType t = dtypeParam(p, "dtype");
  // The last shape's inputs are kept: `tessel tune` times a dozen or more
  // configurations of one shape, and drawing 100 MB of random inputs on
  // the host took longer than timing each of them.
  static std::mutex lastMutex;
  static std::unique_ptr<std::pair<std::string, ForwardInputs>> last;
  std::lock_guard<std::mutex> lock(lastMutex);
  std::string key = fmt::format("{} lengths {} / {} shards {} v_transposed {}", s.str(t),
                                fmt::join(s.lenQ, ","), fmt::join(s.lenK, ","), s.shards,
                                attentionConfig(p).vTransposed);
  if (!last || last->first != key) {
    last.reset();
    std::mt19937_64 rng(1);
    last = std::make_unique<std::pair<std::string, ForwardInputs>>(
        key, forwardInputsFor(attentionConfig(p), s, t, rng));
  }
  ForwardInputs &x = last->second;
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
  std::vector<double> prob;
  for (int64_t b = 0; b < s.batch; ++b) {
    std::vector<double> dp(s.lenK[b]);
    for (int64_t h = 0; h < s.headsQ; ++h) {
      int64_t hk = h / group;
      for (int64_t i = 0; i < s.lenQ[b]; ++i) {
        const float *qi = &q.values[s.qAt(b, i, h)];
        const float *doi = &dO.values[s.qAt(b, i, h)];
        double lse, delta = 0;
        int64_t visible = referenceProbabilities(s, q, k, b, h, i, prob, lse);
        for (int64_t j = 0; j < visible; ++j) {
          const float *vj = &v.values[s.kAt(b, j, hk)];
          double dot = 0;
          for (int64_t l = 0; l < d; ++l) dot += double(doi[l]) * vj[l];
          dp[j] = dot;
          delta += prob[j] * dp[j];
        }
        for (int64_t j = 0; j < visible; ++j) {
          double ds = prob[j] * (dp[j] - delta) * s.scale;
          int64_t kvAt = s.kAt(b, j, hk);
          for (int64_t l = 0; l < d; ++l) {
            dq[s.qAt(b, i, h) + l] += ds * k.values[kvAt + l];
            dk[kvAt + l] += ds * qi[l];
            dv[kvAt + l] += prob[j] * doi[l];
          }
        }
      }
    }
  }
}

/// The backward configuration a run's settings name, with a query offset
/// where the run has one.
AttentionBackwardConfig backwardConfig(const Params &p) {
  AttentionBackwardConfig c = attentionBackwardSettings().read(p);
  c.queryOffset = intParam(p, "query_offset") > 0;
  return c;
}

/// The whole backward pass on the device: preprocess, zeroed accumulators,
/// the main kernel, postprocess. The pre/postprocess kernels see a packed
/// batch as one long sequence.
struct BackwardRun {
  const AttentionShape &s;
  AttentionBackwardConfig config;
  Kernel &main;
  Kernel pre, post;
  HostTensor q, k, v, o, dO, lse, delta, dqAcc, dkOut, dvOut, dq, dk, dv, cuQ, cuK;
  DeviceRun dev;
  AttentionBackwardArgs args;

  static Kernel compileFor(Program program, const Kernel &like) {
    return compile(program, {.arch = const_cast<Kernel &>(like).loadedKernel().arch()});
  }
  BackwardRun(Kernel &kernel, const Params &p, const AttentionShape &shape)
      : s(shape), config(backwardConfig(p)), main(kernel),
        pre(compileFor(flashAttentionBackwardPre(config), kernel)),
        post(compileFor(flashAttentionBackwardPost(config), kernel)),
        q(config.dtype, {s.tensorBatch(), s.seqQ, s.headsQ, s.headDim}),
        k(config.dtype, {s.tensorBatch(), s.seqK, s.headsKv, s.headDim}), v(k), o(q), dO(q),
        lse(DType::f32, {s.tensorBatch(), s.headsQ, s.seqQ}), delta(lse),
        dqAcc(DType::f32, q.shape),
        dkOut(config.kvReduction == KvReduction::direct ? config.dtype : DType::f32,
              {s.tensorBatch(), s.seqK, AttentionBackwardArgs::accumHeads(config.kvReduction, s.headsQ, s.headsKv), s.headDim}),
        dvOut(dkOut), dq(q), dk(k), dv(k), cuQ(DType::i32, {s.batch + 1}), cuK(cuQ) {
    validateAttention(config.dtype, s.headDim, s.varlen, s.args(config.dtype));
    if (config.kvReduction == KvReduction::direct && s.headsQ != s.headsKv)
      throw Error(fmt::format("kv_reduction=direct writes dK/dV per K/V head and needs heads_q == "
                              "heads_kv (got {} and {}); use atomic or split",
                              s.headsQ, s.headsKv));
    AttentionArgs a = s.args(config.dtype);
    for (size_t i = 0; i < a.cuSeqlensQ.size(); ++i) {
      cuQ.set(i, a.cuSeqlensQ[i]);
      cuK.set(i, a.cuSeqlensK[i]);
    }
  }

  /// Uploads the inputs (o and lse as given; outputs and workspace
  /// poisoned) and lays out every launch.
  void upload() {
    auto buffer = [&](HostTensor &t, bool poison) { return dev.addTensor(t, poison); };
    args.batch = s.tensorBatch(), args.seqQ = s.seqQ, args.seqK = s.seqK;
    args.headsQ = s.headsQ, args.headsKv = s.headsKv, args.scale = s.scale;
    args.kvReduction = config.kvReduction;
    args.q = buffer(q, false), args.k = buffer(k, false), args.v = buffer(v, false);
    args.o = buffer(o, false), args.dout = buffer(dO, false), args.lse = buffer(lse, false);
    args.delta = buffer(delta, true), args.dqAccum = buffer(dqAcc, true);
    args.dkAccum = buffer(dkOut, true), args.dvAccum = buffer(dvOut, true);
    args.dq = buffer(dq, true);
    if (s.queryOffset) args.queryOffset = s.queryOffset;
    if (s.varlen)
      args.packed = {s.batch + 1, s.maxLen(s.lenK), buffer(cuQ, false), buffer(cuK, false)};
    if (config.kvReduction != KvReduction::direct) {
      args.dk = buffer(dk, true);
      args.dv = buffer(dv, true);
    }
  }
  void launchAll() { args.launch(pre, main, post); }
  /// Downloads dQ, dK, dV (in the output type).
  void download() {
    auto fetch = [&](const rt::LaunchArg &a, HostTensor &t) {
      for (auto &b : dev.buffers)
        if (b->ptr() == a.ptr) b->download(t.bytes.data(), t.bytes.size());
      t.decode();
    };
    bool direct = config.kvReduction == KvReduction::direct;
    fetch(args.dq, dq);
    fetch(direct ? args.dkAccum : args.dk, dk);
    fetch(direct ? args.dvAccum : args.dv, dv);
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
  r.ms = checkTime([&] { run.launchAll(); });
  return r;
}

BenchResult benchBackward(Kernel &kernel, const Params &p, int reps) {
  AttentionShape s(p);
  BackwardRun run(kernel, p, s);
  // The last shape's random inputs are kept, as for the forward: drawing
  // Q, K, V, O and dO on the host took seconds per configuration timed.
  static std::mutex lastMutex;
  static std::unique_ptr<std::pair<std::string, std::vector<HostTensor>>> last;
  std::lock_guard<std::mutex> lock(lastMutex);
  std::string key = fmt::format("{} lengths {} / {}", s.str(run.config.dtype),
                                fmt::join(s.lenQ, ","), fmt::join(s.lenK, ","));
  std::vector<HostTensor *> inputs = {&run.q, &run.k, &run.v, &run.o, &run.dO};
  if (!last || last->first != key) {
    last.reset();
    std::mt19937_64 rng(1);
    std::vector<HostTensor> drawn;
    for (HostTensor *t : inputs) {
      randomize(*t, rng);
      drawn.push_back(*t);
    }
    last = std::make_unique<std::pair<std::string, std::vector<HostTensor>>>(key, std::move(drawn));
  } else {
    for (size_t i = 0; i < inputs.size(); ++i) *inputs[i] = last->second[i];
  }
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

/// What `tessel tune flash_attention_fwd` times on sm_90a: two or three
/// stages, the persistent walk, K a block ahead of V, with and without
/// ping-pong turns, each with O stored by registers or by TMA. On an H200
/// the best of these differs by shape: the persistent walk is 6-7% ahead
/// without a mask at 1k-4k (head_dim 128), K ahead with turns 9% ahead at
/// 8k, the plain grid best for causal 1k; the TMA store takes another 6-10%
/// off the persistent walk at 1k. (At head_dim 256 the staged O tile does
/// not fit beside the stages: those candidates fail to compile and are
/// left out.) At head_dim 64 also FlashAttention-3's tile: 192 query rows
/// on three consumer warpgroups (384 threads and the producer), plain and
/// persistent (K ahead of V spills there: 1.5x slower on an H100). Elsewhere
/// the register kernel's defaults are the one candidate.
std::vector<Params> attentionForwardCandidates(const std::string &arch, const Params &problem) {
  if (arch != "sm_90a") return {{{"stages", "2"}}};
  std::vector<Params> out;
  auto headDim = problem.find("head_dim");
  if (headDim != problem.end() && headDim->second == "64")
    for (const char *persistent : {"0", "1"})
      out.push_back({{"block_m", "192"}, {"threads", "384"}, {"block_n", "128"},
                     {"stages", "2"}, {"persistent", persistent}, {"overlap", "0"},
                     {"pingpong", "0"}, {"tma_store", "0"}});
  for (const char *tmaStore : {"0", "1"}) {
    for (const char *stages : {"2", "3"})
      for (const char *persistent : {"0", "1"})
        out.push_back({{"stages", stages}, {"persistent", persistent}, {"overlap", "0"},
                       {"pingpong", "0"}, {"tma_store", tmaStore}});
    for (const char *persistent : {"0", "1"})
      for (const char *pingpong : {"0", "1"})
        out.push_back({{"stages", "2"}, {"persistent", persistent}, {"overlap", "1"},
                       {"pingpong", pingpong}, {"tma_store", tmaStore}});
  }
  return out;
}

/// What `tessel tune flash_attention_bwd` times on sm_90a: scores by key
/// rows at 64 query rows a step with dQ added from registers or by a TMA
/// reduce-add, two or three stages; at head_dim 64 also scores by query
/// rows at 128 a step (dQ by TMA, two stages). On an H200 at 4k the TMA
/// path is 7% ahead at head_dim 128 and 2% behind at 64 without a mask;
/// three stages are within 1-2% at 128; query rows gain 17% at 64 and 8k
/// and lose 3% at 128. Elsewhere the defaults are the one candidate.
std::vector<Params> attentionBackwardCandidates(const std::string &arch, const Params &problem) {
  if (arch != "sm_90a") return {{{"stages", "2"}}};
  std::vector<Params> out;
  for (const char *dq : {"registers", "tma"})
    for (const char *stages : {"2", "3"})
      out.push_back({{"dq_atomics", dq}, {"stages", stages}, {"block_m", "64"}, {"scores", "keys"}});
  // (Three stages of 128 query rows leave no room for the P, dS and dQ
  // tiles.)
  if (problem.at("head_dim") == "64")
    out.push_back({{"dq_atomics", "tma"}, {"stages", "2"}, {"block_m", "128"}, {"scores", "queries"}});
  return out;
}

/// A packed batch's size is its lengths, which a bucket's extents (batch,
/// seqlen_q, seqlen_k) do not describe.
std::string packedIsUntunable(const Params &p) {
  return p.at("varlen") == "1" ? std::string("packed sequences (varlen=1) are not tuned")
                               : std::string();
}

/// A run's shapes: a fixed batch, and the packed batch's sequence lengths
/// (varlen=1; seqlens_k empty: the same as the queries').
Params runShapeDefaults() {
  return {{"batch", "2"}, {"seqlen_q", "300"}, {"seqlen_k", "300"}, {"seqlens_q", "1,77,300,128,5"},
          {"seqlens_k", ""}, {"heads_q", "4"}, {"heads_kv", "2"}, {"scale", "0"}};
}

/// fp8Values's run: V of the run's shape and its rearranged copy, both as
/// the kernel takes them (their bytes as i32 words).
struct Fp8ValuesRun {
  AttentionShape s;
  DType t;
  HostTensor v, words, vtWords;
  DeviceRun run;
  Fp8ValuesRun(const Params &p, uint64_t seed, bool poison)
      : s(p), t(dtypeParam(p, "dtype")), v(t, {s.batch, s.seqK, s.headsKv, s.headDim}),
        words(DType::i32, {s.batch, s.seqK, s.headsKv, s.headDim / 4}),
        vtWords(DType::i32, {s.batch, s.headsKv, s.headDim, (s.seqK + 15) / 16 * 4}) {
    std::mt19937_64 rng(seed);
    randomize(v, rng);
    words.bytes = v.bytes;
    words.decode();
    for (int64_t n : {s.batch, s.seqK, s.headsKv}) run.args.push_back(rt::LaunchArg::integer(n));
    run.addTensor(words, false);
    run.addTensor(vtWords, poison);
  }
};

/// The rearranged V bit for bit against registerOrderValues (padding keys
/// zero): the relative error is the share of bytes that differ.
CheckResult checkFp8Values(Kernel &kernel, const Params &p, uint64_t seed) {
  Fp8ValuesRun x(p, seed, /*poison=*/true);
  CheckResult r;
  r.shape = fmt::format("batch={} seqlen_k={} heads_kv={} d={} {}", x.s.batch, x.s.seqK,
                        x.s.headsKv, x.s.headDim, name(x.t));
  kernel.launch(x.run.args);
  synchronize();
  x.run.download(4, x.vtWords);
  std::string expected = registerOrderValues(x.s, x.v).bytes;
  int64_t wrong = 0;
  for (size_t i = 0; i < expected.size(); ++i) wrong += expected[i] != x.vtWords.bytes[i];
  r.relError = double(wrong) / double(expected.size());
  r.tolerance = 0;
  r.passed = wrong == 0 && expected.size() == x.vtWords.bytes.size();
  r.ms = checkTime([&] { kernel.loadedFor(x.run.args).launch(x.run.args); });
  return r;
}

BenchResult benchFp8Values(Kernel &kernel, const Params &p, int reps) {
  Fp8ValuesRun x(p, 1, /*poison=*/false);
  BenchResult r;
  r.ms = kernel.loadedFor(x.run.args).time({x.run.args}, 10, reps);
  r.gbps = double(x.words.bytes.size() + x.vtWords.bytes.size()) / r.ms / 1e6;
  r.shape = fmt::format("batch={} seqlen_k={} heads_kv={} d={} {}", x.s.batch, x.s.seqK,
                        x.s.headsKv, x.s.headDim, name(x.t));
  return r;
}
} // namespace

std::vector<LibraryKernel> tessel::harness::attentionKernels() {
  return {
      {"flash_attention_fwd",
       "O = softmax(scale * Q K^T) V with its log-sum-exp, BSHD tensors, GQA, causal or full",
       [] {
         Params p = defaultsFrom(attentionSettings(), runShapeDefaults());
         // > 0: the kernel built for shards that arrive while it runs
         // (AttentionConfig::streamedShards), checked with every shard
         // present.
         p["shards"] = "0";
         // > 0 (causal): query row i sits at key position query_offset + i.
         p["query_offset"] = "0";
         // registers: accumulators in registers (wgmma, mma.sync); ss and
         // ts: tcgen05 with S and O in tensor memory (sm_100a), P through
         // shared memory or back in tensor memory; ws: the ts form
         // warp-specialized, two query tiles in flight.
         p["variant"] = "registers";
         return p;
       }(),
       [](const Params &p) {
         enum class Form { registers, ss, ts, ws };
         Form form = choiceParam<Form>(p, "variant",
                                       {{"registers", Form::registers},
                                        {"ss", Form::ss},
                                        {"ts", Form::ts},
                                        {"ws", Form::ws}});
         if (form == Form::registers) return flashAttentionForward(attentionConfig(p));
         if (form == Form::ws) return flashAttentionForwardTcgen05Ws(attentionConfig(p));
         return flashAttentionForwardTcgen05(attentionConfig(p), form == Form::ts);
       },
       checkForward, benchForward,
       // sm_100a: the tcgen05 form, where the options asked for have one
       // (K a block ahead, streamed shards, query offsets and the
       // persistent walk are the register kernel's).
       [](const std::string &arch, const Params &overrides) {
         auto on = [&](const char *key) {
           auto it = overrides.find(key);
           return it != overrides.end() && it->second != "0";
         };
         // ws runs its roles on 512 threads.
         if (auto it = overrides.find("variant"); it != overrides.end() && it->second == "ws")
           return Params{{"threads", "512"}};
         if (arch.rfind("sm_100a", 0) != 0 || overrides.count("variant") || on("overlap") ||
             on("shards") || on("query_offset") || on("persistent") || on("tma_store"))
           return Params{};
         return Params{{"variant", "ss"}};
       },
       {{"dtype", "head_dim", "causal", "varlen"},
        {"batch", "heads_q", "seqlen_q", "seqlen_k"},
        attentionForwardCandidates, packedIsUntunable}},
      {"attention_fp8_values",
       "V [batch, seqlen_k, heads_kv, head_dim] (FP8) rearranged for the FP8 forward's "
       "v_transposed: transposed, keys of each 16 in register order",
       {{"dtype", "e4m3"}, {"head_dim", "128"}, {"batch", "2"}, {"seqlen_q", "300"},
        {"seqlen_k", "300"}, {"seqlens_q", "300"}, {"seqlens_k", ""}, {"heads_q", "2"},
        {"heads_kv", "2"}, {"scale", "0"}, {"causal", "0"}, {"varlen", "0"}},
       [](const Params &p) {
         return fp8Values(dtypeParam(p, "dtype"),
                          parseInteger(p.at("head_dim"), 16, 1024, "head_dim"));
       },
       checkFp8Values, benchFp8Values},
      {"flash_attention_bwd",
       "dQ, dK, dV of attention: preprocess (delta), main kernel with region atomic_add of dQ, "
       "postprocess; GQA dK/dV by atomics or split slices",
       [] {
         Params p = defaultsFrom(attentionBackwardSettings(), runShapeDefaults());
         // The run's default heads (4 query heads on 2 K/V heads) need a
         // reduction of dK/dV over each group.
         p["kv_reduction"] = "atomic";
         // > 0 (causal): query row i sits at key position query_offset + i.
         p["query_offset"] = "0";
         return p;
       }(),
       [](const Params &p) { return flashAttentionBackward(backwardConfig(p)); }, checkBackward,
       benchBackward,
       // sm_100a: the tcgen05 form at 128 query rows a step (two stages of
       // Q and dO fit at head_dim 128, three do not). Without wgmma or tcgen05 (sm_80) the mma.sync
       // main kernel at 64 query rows a block spills; 32 rows fit.
       [](const std::string &arch, const Params &overrides) {
         auto given = [&](const char *key, const char *otherwise) {
           auto it = overrides.find(key);
           return it == overrides.end() ? std::string(otherwise) : it->second;
         };
         // sm_90a: dQ by one TMA reduce-add per step where the adds are
         // relaxed, as attention::backward and `tessel bench attention`
         // run it (an H200 at 8k, head_dim 128: 485 against 416 TFLOP/s
         // from registers); scores by query rows at 128 a step where that
         // is the default under the settings given (or tuned).
         if (arch == "sm_90a") {
           Params out;
           if (!overrides.count("dq_atomics") && given("dq_order", "relaxed") == "relaxed" &&
               given("element_atomics", "0") == "0")
             out["dq_atomics"] = "tma";
           if (backwardQueryRowsByDefault(
                   parseInteger(given("head_dim", "128"), 1, INT32_MAX, "head_dim"), overrides)) {
             out["block_m"] = "128";
             out["scores"] = "queries";
           }
           return out;
         }
         std::string variant = given("variant", arch.rfind("sm_100a", 0) == 0 ? "ss" : "registers");
         if (variant == "registers") return Params{{"block_m", "32"}};
         return Params{{"variant", variant}, {"block_m", "128"}};
       },
       {{"dtype", "head_dim", "causal", "varlen", "kv_reduction"},
        {"batch", "heads_q", "seqlen_q", "seqlen_k"},
        attentionBackwardCandidates, packedIsUntunable}},
  };
}
