//===- LibraryApiGpuTests.cpp - the calls of tessel/Tessel.h on the GPU ---===//
//
// tessel::gemm and tessel::attention on views, checked against float64
// references: from eight threads at once on their own streams, at shapes
// that are not tile multiples, MHA and GQA, causal and full, packed
// sequences; a new shape reuses the compiled kernel.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "ErrorOf.h"
#include "GpuHelpers.h"
#include "ScopedCacheDir.h"
#include "tessel/harness/LibrarySupport.h"
#include "tessel/Tessel.h"
#include "tessel/kernels/Tuned.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/LowPrecision.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::harness;

namespace {

using test::DeviceTensor;
using test::referenceGemm;
using test::Stream;

/// Attention over packed or batched BSHD tensors, float64: O, LSE and, for
/// upstream dO, dQ, dK, dV. Sequence b has rows [startQ[b], +lenQ[b]) of
/// batch row `bq` (0 when packed).
struct AttentionReference {
  int64_t headsQ, headsKv, d;
  bool causal;
  double scale;
  std::vector<double> o, lse, dq, dk, dv;
  void run(const HostTensor &q, const HostTensor &k, const HostTensor &v, const HostTensor &dO,
           int64_t batch, const std::vector<int64_t> &lenQ, const std::vector<int64_t> &lenK) {
    const int64_t rowsQ = q.shape[1], rowsK = k.shape[1], group = headsQ / headsKv;
    o.assign(q.values.size(), 0);
    dq.assign(q.values.size(), 0);
    dk.assign(k.values.size(), 0);
    dv.assign(k.values.size(), 0);
    lse.assign(q.shape[0] * headsQ * rowsQ, 0);
    for (int64_t b = 0, sq = 0, sk = 0; b < batch; sq += lenQ[b], sk += lenK[b], ++b) {
      bool packed = q.shape[0] == 1 && batch > 1;
      int64_t tb = packed ? 0 : b, q0 = packed ? sq : 0, k0 = packed ? sk : 0;
      auto qAt = [&](int64_t i, int64_t h) { return ((tb * rowsQ + q0 + i) * headsQ + h) * d; };
      auto kAt = [&](int64_t j, int64_t h) { return ((tb * rowsK + k0 + j) * headsKv + h) * d; };
      for (int64_t h = 0; h < headsQ; ++h)
        for (int64_t i = 0; i < lenQ[b]; ++i) {
          int64_t visible = causal ? std::min(i + 1, lenK[b]) : lenK[b];
          std::vector<double> p(visible), dp(visible);
          double mx = -INFINITY, sum = 0, delta = 0;
          for (int64_t j = 0; j < visible; ++j) {
            double dot = 0;
            for (int64_t l = 0; l < d; ++l)
              dot += double(q.values[qAt(i, h) + l]) * k.values[kAt(j, h / group) + l];
            mx = std::max(mx, p[j] = dot * scale);
          }
          for (int64_t j = 0; j < visible; ++j) sum += (p[j] = std::exp(p[j] - mx));
          lse[(tb * headsQ + h) * rowsQ + q0 + i] = mx + std::log(sum);
          for (int64_t j = 0; j < visible; ++j) {
            p[j] /= sum;
            double dot = 0;
            for (int64_t l = 0; l < d; ++l) {
              o[qAt(i, h) + l] += p[j] * v.values[kAt(j, h / group) + l];
              dot += double(dO.values[qAt(i, h) + l]) * v.values[kAt(j, h / group) + l];
            }
            delta += p[j] * (dp[j] = dot);
          }
          for (int64_t j = 0; j < visible; ++j) {
            double ds = p[j] * (dp[j] - delta) * scale;
            for (int64_t l = 0; l < d; ++l) {
              dq[qAt(i, h) + l] += ds * k.values[kAt(j, h / group) + l];
              dk[kAt(j, h / group) + l] += ds * q.values[qAt(i, h) + l];
              dv[kAt(j, h / group) + l] += p[j] * dO.values[qAt(i, h) + l];
            }
          }
        }
    }
  }
};

/// What one forward + backward through the calls gave.
struct AttentionOutcome {
  std::string what;
  double tolerance = 0;
  double errors[5] = {}; // O, LSE, dQ, dK, dV
  bool compiled = false;
};

/// Forward and backward through the calls on their own stream, compared
/// with the reference (no Catch2 assertions: it runs on worker threads).
AttentionOutcome runAttention(int64_t batch, std::vector<int64_t> lens, int64_t headsQ,
                              int64_t headsKv, int64_t d, bool causal, DType t) {
  std::mt19937_64 rng(batch * 131 + d + causal);
  bool packed = lens.size() > 1;
  int64_t rows = 0;
  for (int64_t l : lens) rows += l;
  int64_t tb = packed ? 1 : batch, seq = packed ? rows : lens[0];
  std::vector<int64_t> perSeq = packed ? lens : std::vector<int64_t>(batch, lens[0]);
  DeviceTensor q(t, {tb, seq, headsQ, d}, &rng), k(t, {tb, seq, headsKv, d}, &rng),
      v(t, {tb, seq, headsKv, d}, &rng), dO(t, {tb, seq, headsQ, d}, &rng);
  DeviceTensor o(t, q.host.shape), lse(DType::f32, {tb, headsQ, seq}), dq(t, q.host.shape),
      dk(t, k.host.shape), dv(t, k.host.shape);
  DeviceTensor cu(DType::i32, {int64_t(perSeq.size()) + 1});
  cu.host.set(0, 0);
  for (size_t b = 0, at = 0; b < perSeq.size(); ++b) cu.host.set(b + 1, float(at += perSeq[b]));
  cu.device.upload(cu.host.bytes.data(), cu.host.bytes.size());

  AttentionReference ref{headsQ, headsKv, d, causal, 1.0 / std::sqrt(double(d)), {}, {}, {}, {}, {}};
  ref.run(q.host, k.host, v.host, dO.host, packed ? int64_t(lens.size()) : batch, perSeq, perSeq);

  attention::ForwardOptions fo;
  fo.causal = causal;
  attention::BackwardOptions bo;
  bo.causal = causal;
  if (packed) {
    int64_t longest = *std::max_element(lens.begin(), lens.end());
    fo.cuSeqlensQ = fo.cuSeqlensK = bo.cuSeqlensQ = bo.cuSeqlensK = cu.view();
    fo.maxSeqlenQ = fo.maxSeqlenK = bo.maxSeqlenQ = bo.maxSeqlenK = longest;
  }
  Stream stream;
  Choice f = attention::forward(q.view(), k.view(), v.view(), o.view(), lse.view(), fo, stream.s);
  Choice b = attention::backward(q.view(), k.view(), v.view(), o.view(), lse.view(), dO.view(),
                                 dq.view(), dk.view(), dv.view(), bo, stream.s);
  stream.sync();
  for (DeviceTensor *x : {&o, &lse, &dq, &dk, &dv}) x->fetch();
  AttentionOutcome r;
  r.what = fmt::format("{} batch={} lens={} heads {}/{} d={} causal={}; {} | {}", name(t), batch,
                       fmt::join(lens, ","), headsQ, headsKv, d, causal, f.config, b.config);
  r.tolerance = toleranceFor(t);
  r.errors[0] = relativeError(o.host.values, ref.o);
  r.errors[1] = relativeError(lse.host.values, ref.lse);
  r.errors[2] = relativeError(dq.host.values, ref.dq);
  r.errors[3] = relativeError(dk.host.values, ref.dk);
  r.errors[4] = relativeError(dv.host.values, ref.dv);
  r.compiled = f.compiled || b.compiled;
  return r;
}

void verify(const AttentionOutcome &r) {
  fmt::print("attention call {}: O {:.2e} LSE {:.2e} dQ {:.2e} dK {:.2e} dV {:.2e}\n", r.what,
             r.errors[0], r.errors[1], r.errors[2], r.errors[3], r.errors[4]);
  INFO(r.what);
  for (double e : r.errors) CHECK(e < r.tolerance);
}

/// Runs, checks, and says whether it compiled.
bool checkAttention(int64_t batch, std::vector<int64_t> lens, int64_t headsQ, int64_t headsKv,
                    int64_t d, bool causal, DType t) {
  AttentionOutcome r = runAttention(batch, std::move(lens), headsQ, headsKv, d, causal, t);
  verify(r);
  return r.compiled;
}
/// Points TESSEL_CACHE_DIR at a fresh directory named `name` for the
/// scope (tuned records live under it), then restores it and removes the
/// directory.
using test::ScopedCacheDir;
} // namespace

TEST_CASE("tessel::gemm from eight threads on their own streams", "[gpu][api]") {
  // One configuration: the eight threads share one compile, and every
  // shape after the first reuses it.
  std::vector<std::string> errors(8);
  std::vector<double> relErrors(8);
  std::vector<int> compiled(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      try {
        std::mt19937_64 rng(t);
        int64_t m = 100 + 37 * t, n = 256, kk = 192;
        DeviceTensor a(DType::bf16, {m, kk}, &rng), b(DType::bf16, {kk, n}, &rng), c(DType::f32, {m, n});
        Stream stream;
        for (int rep = 0; rep < 3; ++rep) {
          Choice choice = tessel::gemm(a.view(), b.view(), c.view(), {}, stream.s);
          compiled[t] += choice.compiled;
        }
        stream.sync();
        c.fetch();
        relErrors[t] = relativeError(c.host.values, referenceGemm(a.host, b.host));
      } catch (const std::exception &e) {
        errors[t] = e.what();
      }
    });
  for (std::thread &t : threads) t.join();
  int compiles = 0;
  for (int t = 0; t < 8; ++t) {
    INFO("thread " << t << ": " << errors[t]);
    CHECK(errors[t].empty());
    CHECK(relErrors[t] < 1e-3);
    compiles += compiled[t];
  }
  CHECK(compiles <= 1); // 0 when an earlier test compiled it
}

// The library's 8-bit defaults (sm_90a) differ by C's size against the SMs:
// 64 x 32 tiles for a C of a few tiles, 128 x 128 persistent for about a
// wave, 128 x 256 persistent beyond; each is checked here with per-tensor
// and per-row scales, and i8 into i32 (exact) at the largest.
TEST_CASE("tessel::gemm on FP8 and i8 views with scales", "[gpu][api]") {
  if (rt::nativeArch(rt::Driver::get().computeCapability()) != "sm_90a") {
    WARN("SKIPPED: 8-bit gemms run on wgmma (sm_90a)");
    return;
  }
  struct Shape { int64_t m, n, k; };
  for (Shape s : {Shape{128, 4096, 256}, Shape{128, 14336, 128}, Shape{520, 1030, 384},
                  Shape{2048, 2048, 256}})
    for (bool rows : {false, true}) {
      std::mt19937_64 rng(s.m * 7 + s.n + rows);
      DeviceTensor a(DType::f8e4m3, {s.m, s.k}, &rng), b(DType::f8e4m3, {s.n, s.k}, &rng);
      DeviceTensor c(DType::bf16, {s.m, s.n});
      DeviceTensor sa(DType::f32, {rows ? s.m : 1}), sb(DType::f32, {rows ? s.n : 1});
      for (DeviceTensor *t : {&sa, &sb}) {
        randomize(t->host, rng, 0.25, 4);
        t->device.upload(t->host.bytes.data(), t->host.bytes.size());
      }
      GemmCallOptions o;
      o.transposeB = true;
      o.scaleA = sa.view();
      o.scaleB = sb.view();
      Stream stream;
      Choice choice = tessel::gemm(a.view(), b.view(), c.view(), o, stream.s);
      stream.sync();
      c.fetch();
      std::vector<double> ref(s.m * s.n, 0);
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.n; ++j) {
          double dot = 0;
          for (int64_t l = 0; l < s.k; ++l)
            dot += double(a.host.values[i * s.k + l]) * b.host.values[j * s.k + l];
          ref[i * s.n + j] = dot * sa.host.values[rows ? i : 0] * sb.host.values[rows ? j : 0];
        }
      double error = relativeError(c.host.values, ref);
      INFO(fmt::format("{}x{}x{} {} scales: {} rel error {:.2e}", s.m, s.n, s.k,
                       rows ? "row" : "tensor", choice.config, error));
      fmt::print("fp8 gemm call {}x{}x{}: {} rel error {:.2e}\n", s.m, s.n, s.k, choice.config, error);
      CHECK(error < 1e-2);
    }
  std::mt19937_64 rng(3);
  int64_t m = 700, n = 2048, k = 512;
  DeviceTensor a(DType::i8, {m, k}, &rng), b(DType::i8, {n, k}, &rng), c(DType::i32, {m, n});
  GemmCallOptions o;
  o.transposeB = true;
  Stream stream;
  Choice choice = tessel::gemm(a.view(), b.view(), c.view(), o, stream.s);
  stream.sync();
  c.fetch();
  int64_t wrong = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t dot = 0;
      for (int64_t l = 0; l < k; ++l)
        dot += int64_t(a.host.values[i * k + l]) * int64_t(b.host.values[j * k + l]);
      wrong += int64_t(c.host.values[i * n + j]) != dot;
    }
  INFO(choice.config);
  CHECK(wrong == 0);
}

TEST_CASE("tessel::attention forward and backward match the reference", "[gpu][api]") {
  checkAttention(2, {200}, 4, 2, 64, false, DType::bf16);
  // Another sequence length and batch: the same kernels, no compile.
  CHECK_FALSE(checkAttention(1, {333}, 4, 2, 64, false, DType::bf16));
  checkAttention(2, {130}, 4, 4, 128, true, DType::bf16); // MHA: dK/dV written directly
  checkAttention(1, {150}, 2, 1, 128, true, DType::f16);
  checkAttention(1, {77, 200, 5}, 4, 2, 64, true, DType::bf16); // packed sequences
}

// FP8 attention through the call: q, k, v in e4m3 or e5m2 with per-tensor
// scales, out in bf16. Fixed-length batches read V rearranged by the
// call's own kernel (into its own or the caller's workspace), packed ones
// permute each V tile in shared memory; both against float64 attention of
// the scaled FP8 values. P is rounded to FP8 in the kernel, which the
// reference does not model: toleranceFor's half an ulp.
TEST_CASE("tessel::attention::forward on FP8 views with scales", "[gpu][api]") {
  std::string arch = rt::nativeArch(rt::Driver::get().computeCapability());
  if (arch != "sm_90a" && arch != "sm_89") {
    WARN("SKIPPED: FP8 attention runs on wgmma (sm_90a) and mma.sync (sm_89); this is " << arch);
    return;
  }
  struct Case {
    DType t;
    int64_t batch;
    std::vector<int64_t> lens;
    int64_t headsQ, headsKv, d;
    bool causal, ownWorkspace;
  };
  for (const Case &c : {Case{DType::f8e4m3, 2, {300}, 4, 2, 128, false, false},
                        Case{DType::f8e4m3, 1, {1000}, 2, 2, 64, true, true},
                        Case{DType::f8e5m2, 1, {517}, 4, 1, 128, true, false},
                        Case{DType::f8e4m3, 1, {77, 300, 16}, 4, 2, 128, true, false}}) {
    bool packed = c.lens.size() > 1;
    int64_t rows = 0;
    for (int64_t l : c.lens) rows += l;
    int64_t tb = packed ? 1 : c.batch, seq = packed ? rows : c.lens[0];
    std::vector<int64_t> perSeq = packed ? c.lens : std::vector<int64_t>(c.batch, c.lens[0]);
    std::mt19937_64 rng(seq * 3 + c.d + c.causal);
    DeviceTensor q(c.t, {tb, seq, c.headsQ, c.d}, &rng), k(c.t, {tb, seq, c.headsKv, c.d}, &rng),
        v(c.t, {tb, seq, c.headsKv, c.d}, &rng);
    DeviceTensor o(DType::bf16, q.host.shape), lse(DType::f32, {tb, c.headsQ, seq});
    DeviceTensor cu(DType::i32, {int64_t(perSeq.size()) + 1});
    cu.host.set(0, 0);
    for (size_t b = 0, at = 0; b < perSeq.size(); ++b) cu.host.set(b + 1, float(at += perSeq[b]));
    cu.device.upload(cu.host.bytes.data(), cu.host.bytes.size());
    attention::ForwardOptions fo;
    fo.causal = c.causal;
    fo.qScale = 0.5, fo.kScale = 1.5, fo.vScale = 0.75;
    if (packed) {
      fo.cuSeqlensQ = fo.cuSeqlensK = cu.view();
      fo.maxSeqlenQ = fo.maxSeqlenK = *std::max_element(c.lens.begin(), c.lens.end());
    }
    size_t bytes = attention::forwardWorkspaceBytes(q.view(), k.view(), fo);
    CHECK(bytes == (packed ? 0 : size_t(tb * c.headsKv * c.d * ((seq + 15) / 16 * 16))));
    std::optional<rt::DeviceBuffer> workspace;
    if (c.ownWorkspace) {
      workspace.emplace(bytes);
      fo.workspace = workspace->ptr(), fo.workspaceBytes = bytes;
    }
    Stream stream;
    Choice f = attention::forward(q.view(), k.view(), v.view(), o.view(), lse.view(), fo, stream.s);
    stream.sync();
    o.fetch();
    lse.fetch();
    AttentionReference ref{c.headsQ, c.headsKv, c.d, c.causal,
                           fo.qScale * fo.kScale / std::sqrt(double(c.d)), {}, {}, {}, {}, {}};
    ref.run(q.host, k.host, v.host, q.host, packed ? int64_t(c.lens.size()) : c.batch, perSeq,
            perSeq);
    for (double &x : ref.o) x *= fo.vScale;
    double oError = relativeError(o.host.values, ref.o);
    double lseError = relativeError(lse.host.values, ref.lse);
    std::string what = fmt::format("{} lens={} heads {}/{} d={} causal={}: {} O {:.2e} LSE {:.2e}",
                                   name(c.t), fmt::join(c.lens, ","), c.headsQ, c.headsKv, c.d,
                                   c.causal, f.config, oError, lseError);
    fmt::print("fp8 attention call {}\n", what);
    INFO(what);
    CHECK(oError < toleranceFor(c.t));
    CHECK(lseError < 1e-3);
    CHECK((f.config.find("v_transposed=1") != std::string::npos) == !packed);
  }
  // The scales are FP8's: bf16 inputs with them are an error.
  DeviceTensor q(DType::bf16, {1, 64, 2, 64}), o(DType::bf16, {1, 64, 2, 64}), lse(DType::f32, {1, 2, 64});
  attention::ForwardOptions scaled;
  scaled.vScale = 2;
  CHECK_THAT(test::errorOf([&] {
               attention::forward(q.view(), q.view(), q.view(), o.view(), lse.view(), scaled);
             }),
             Catch::Contains("scale FP8 inputs"));
}

// FP8 scales on the device (ForwardOptions::qDescale, kDescale, vDescale):
// per (sequence, K/V head) against float64 attention of the scaled values;
// one scale for every head as [1] and as a [batch, heads_kv] view with
// strides 0 (a per-tensor scale expanded), each at an address that is not
// 16-byte aligned, bit for bit what the same power-of-two scales given on
// the host make; and the errors.
TEST_CASE("tessel::attention::forward reads FP8 scales from the device", "[gpu][api]") {
  std::string arch = rt::nativeArch(rt::Driver::get().computeCapability());
  if (arch != "sm_90a" && arch != "sm_89") {
    WARN("SKIPPED: FP8 attention runs on wgmma (sm_90a) and mma.sync (sm_89); this is " << arch);
    return;
  }
  const int64_t batch = 2, seq = 300, headsQ = 4, headsKv = 2, d = 128;
  std::mt19937_64 rng(21);
  DeviceTensor q(DType::f8e4m3, {batch, seq, headsQ, d}, &rng), k(DType::f8e4m3, {batch, seq, headsKv, d}, &rng),
      v(DType::f8e4m3, {batch, seq, headsKv, d}, &rng);
  DeviceTensor o(DType::bf16, q.host.shape), lse(DType::f32, {batch, headsQ, seq});
  DeviceTensor qs(DType::f32, {batch, headsKv}), ks(DType::f32, {batch, headsKv}), vs(DType::f32, {batch, headsKv});
  for (DeviceTensor *t : {&qs, &ks, &vs}) {
    randomize(t->host, rng, 0.25f, 2.0f);
    t->device.upload(t->host.bytes.data(), t->host.bytes.size());
  }
  Stream stream;
  attention::ForwardOptions fo;
  fo.causal = true;
  fo.qDescale = qs.view(), fo.kDescale = ks.view(), fo.vDescale = vs.view();
  Choice f = attention::forward(q.view(), k.view(), v.view(), o.view(), lse.view(), fo, stream.s);
  stream.sync();
  o.fetch();
  lse.fetch();
  // Q's values times Q's and K's scales, O times V's.
  HostTensor scaledQ(DType::f32, q.host.shape);
  scaledQ.values = q.host.values;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < seq; ++i)
      for (int64_t h = 0; h < headsQ; ++h) {
        int64_t at = b * headsKv + h / (headsQ / headsKv);
        for (int64_t e = 0; e < d; ++e)
          scaledQ.values[((b * seq + i) * headsQ + h) * d + e] *= qs.host.values[at] * ks.host.values[at];
      }
  AttentionReference ref{headsQ, headsKv, d, true, 1 / std::sqrt(double(d)), {}, {}, {}, {}, {}};
  std::vector<int64_t> lens(batch, seq);
  ref.run(scaledQ, k.host, v.host, scaledQ, batch, lens, lens);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < seq; ++i)
      for (int64_t h = 0; h < headsQ; ++h)
        for (int64_t e = 0; e < d; ++e)
          ref.o[((b * seq + i) * headsQ + h) * d + e] *= vs.host.values[b * headsKv + h / (headsQ / headsKv)];
  double oError = relativeError(o.host.values, ref.o), lseError = relativeError(lse.host.values, ref.lse);
  fmt::print("fp8 attention with device scales per head: {} O {:.2e} LSE {:.2e}\n", f.config, oError,
             lseError);
  INFO(f.config);
  CHECK_THAT(f.config, Catch::Contains("descales=1"));
  CHECK(oError < toleranceFor(DType::f8e4m3));
  CHECK(lseError < 1e-3);
  // A kernel that read one head's scales for every head would be off by
  // the scales' spread: the same run with the first head's everywhere.
  HostTensor uniformQ(DType::f32, q.host.shape);
  uniformQ.values = q.host.values;
  for (float &x : uniformQ.values) x *= qs.host.values[0] * ks.host.values[0];
  AttentionReference wrong = ref;
  wrong.run(uniformQ, k.host, v.host, uniformQ, batch, lens, lens);
  for (double &x : wrong.o) x *= vs.host.values[0];
  CHECK(relativeError(o.host.values, wrong.o) > 0.1);

  // One scale for every head, on the device, against the host's: scales
  // that are powers of two multiply exactly either way.
  DeviceTensor one(DType::f32, {3});
  for (int64_t i = 0; i < 3; ++i) one.host.set(i, std::ldexp(1.0f, int(i) - 1)); // 0.5, 1, 2
  one.device.upload(one.host.bytes.data(), one.host.bytes.size());
  auto element = [&](int64_t i, std::vector<int64_t> shape, std::vector<int64_t> strides) {
    TensorView x = TensorView::contiguous(one.device.ptr() + 4 * i, rt::ScalarType::F32,
                                          std::move(shape), one.device.device());
    x.strides = std::move(strides);
    return x;
  };
  attention::ForwardOptions host;
  host.causal = true;
  host.qScale = 0.5, host.kScale = 1, host.vScale = 2;
  DeviceTensor oHost(DType::bf16, q.host.shape), oScalar(DType::bf16, q.host.shape),
      oExpanded(DType::bf16, q.host.shape);
  attention::forward(q.view(), k.view(), v.view(), oHost.view(), lse.view(), host, stream.s);
  attention::ForwardOptions scalar;
  scalar.causal = true;
  scalar.qDescale = element(0, {1}, {}), scalar.kDescale = element(1, {1}, {}),
  scalar.vDescale = element(2, {1}, {});
  attention::forward(q.view(), k.view(), v.view(), oScalar.view(), lse.view(), scalar, stream.s);
  attention::ForwardOptions expanded;
  expanded.causal = true;
  expanded.qDescale = element(0, {batch, headsKv}, {0, 0});
  expanded.kDescale = element(1, {batch, headsKv}, {0, 0});
  expanded.vDescale = element(2, {batch, headsKv}, {0, 0});
  attention::forward(q.view(), k.view(), v.view(), oExpanded.view(), lse.view(), expanded, stream.s);
  stream.sync();
  for (DeviceTensor *t : {&oHost, &oScalar, &oExpanded}) t->fetch();
  CHECK(oScalar.host.bytes == oHost.host.bytes);
  CHECK(oExpanded.host.bytes == oHost.host.bytes);

  // What is refused, before anything runs.
  auto error = [&](const attention::ForwardOptions &x) {
    return test::errorOf(
        [&] { attention::forward(q.view(), k.view(), v.view(), o.view(), lse.view(), x); });
  };
  attention::ForwardOptions two;
  two.qDescale = qs.view(), two.kDescale = ks.view();
  CHECK_THAT(error(two), Catch::Contains("give qDescale, kDescale and vDescale together"));
  attention::ForwardOptions shaped = fo;
  shaped.vDescale = element(0, {headsKv, batch + 1}, {});
  CHECK_THAT(error(shaped), Catch::Contains("vDescale is f32[2, 3]") &&
                                Catch::Contains("descales are [2, 2] (sequences, heads_kv) or [1]"));
  attention::ForwardOptions odd = fo;
  odd.qDescale->data += 2;
  CHECK_THAT(error(odd), Catch::Contains("qDescale is f32[2, 2]") &&
                             Catch::Contains("not 4-byte aligned"));
  attention::ForwardOptions typed = fo;
  typed.kDescale = o.view();
  CHECK_THAT(error(typed), Catch::Contains("kDescale is bf16") && Catch::Contains("descales are f32"));
  DeviceTensor b16(DType::bf16, {1, 64, 2, 64}), ob(DType::bf16, {1, 64, 2, 64}), lb(DType::f32, {1, 2, 64});
  attention::ForwardOptions onBf16;
  onBf16.qDescale = onBf16.kDescale = onBf16.vDescale = element(0, {1}, {});
  CHECK_THAT(test::errorOf([&] {
               attention::forward(b16.view(), b16.view(), b16.view(), ob.view(), lb.view(), onBf16);
             }),
             Catch::Contains("scale FP8 inputs"));
}

TEST_CASE("tessel::attention::forward takes 192-row tiles at head_dim 64 on sm_90a", "[gpu][api]") {
  bool hopper = rt::nativeArch(rt::Driver::get().computeCapability()) == "sm_90a";
  AttentionOutcome full = runAttention(2, {333}, 4, 2, 64, false, DType::bf16);
  verify(full);
  // Short causal problems keep 128 rows; so does head_dim 128.
  AttentionOutcome shortCausal = runAttention(2, {333}, 4, 2, 64, true, DType::bf16);
  verify(shortCausal);
  AttentionOutcome wide = runAttention(1, {333}, 4, 2, 128, false, DType::bf16);
  verify(wide);
  if (!hopper) {
    WARN("the 192-row rule is sm_90a's; checked the results only");
    return;
  }
  // The forward's configuration comes before the backward's.
  auto forwardOf = [](const AttentionOutcome &r) { return r.what.substr(0, r.what.find(" | ")); };
  CHECK_THAT(forwardOf(full), Catch::Contains("block_m=192") && Catch::Contains("threads=384"));
  CHECK_THAT(forwardOf(shortCausal),
             Catch::Contains("block_m=128") && Catch::Contains("threads=256"));
  CHECK_THAT(forwardOf(wide), Catch::Contains("block_m=128"));
}

TEST_CASE("tessel::attention::forward's schedule at 8k keys agrees with the plain kernel",
          "[gpu][api]") {
  // The CPU reference is too slow at 8k keys: the plain kernel (no K
  // ahead of V, no persistent walk), checked against it at every other
  // shape, is the reference here.
  bool hopper = rt::nativeArch(rt::Driver::get().computeCapability()) == "sm_90a";
  const int64_t seq = 8192, d = 128;
  for (auto [headsQ, headsKv] : {std::pair<int64_t, int64_t>{4, 4}, {4, 1}})
    for (bool causal : {false, true}) {
      std::mt19937_64 rng(headsKv * 2 + causal);
      DeviceTensor q(DType::bf16, {1, seq, headsQ, d}, &rng), k(DType::bf16, {1, seq, headsKv, d}, &rng),
          v(DType::bf16, {1, seq, headsKv, d}, &rng);
      DeviceTensor o(DType::bf16, q.host.shape), lse(DType::f32, {1, headsQ, seq}),
          plainO(DType::bf16, q.host.shape), plainLse(DType::f32, {1, headsQ, seq});
      attention::ForwardOptions fo;
      fo.causal = causal;
      fo.tuned = false;
      Choice chosen = attention::forward(q.view(), k.view(), v.view(), o.view(), lse.view(), fo);
      fo.config = AttentionConfig{};
      Choice plain =
          attention::forward(q.view(), k.view(), v.view(), plainO.view(), plainLse.view(), fo);
      testing::synchronize();
      for (DeviceTensor *x : {&o, &lse, &plainO, &plainLse}) x->fetch();
      std::vector<double> refO(plainO.host.values.begin(), plainO.host.values.end()),
          refLse(plainLse.host.values.begin(), plainLse.host.values.end());
      INFO(fmt::format("heads {}/{} causal={}: {} against {}", headsQ, headsKv, causal,
                       chosen.config, plain.config));
      CHECK(relativeError(o.host.values, refO) < 1e-2);
      CHECK(relativeError(lse.host.values, refLse) < 1e-5);
      if (!hopper) continue;
      CHECK_THAT(chosen.config, Catch::Contains("overlap=1"));
      bool groupedFull = headsQ != headsKv && !causal;
      CHECK_THAT(chosen.config, Catch::Contains(groupedFull ? "persistent=1" : "persistent=0"));
      CHECK_THAT(chosen.config,
                 Catch::Contains(!causal && !groupedFull ? "pingpong=1" : "pingpong=0"));
    }
}

TEST_CASE("tessel::attention calls from several threads at once", "[gpu][api]") {
  std::vector<std::string> errors(8);
  std::vector<AttentionOutcome> outcomes(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      try {
        outcomes[t] = runAttention(1, {64 + 29 * t}, 2, 1, 64, t % 2, DType::bf16);
      } catch (const std::exception &e) {
        errors[t] = e.what();
      }
    });
  for (std::thread &t : threads) t.join();
  for (int t = 0; t < 8; ++t) {
    INFO("thread " << t << ": " << errors[t]);
    CHECK(errors[t].empty());
    if (errors[t].empty()) verify(outcomes[t]);
  }
}

TEST_CASE("a view on a device that does not exist is an error", "[gpu][api]") {
  rt::Driver &d = rt::Driver::get();
  TensorView a = TensorView::contiguous(0x10000, rt::ScalarType::F16, {64, 64}, d.deviceCount());
  TensorView c = TensorView::contiguous(0x20000, rt::ScalarType::F32, {64, 64}, d.deviceCount());
  try {
    tessel::gemm(a, a, c);
    FAIL("no error");
  } catch (const Error &e) {
    CHECK_THAT(e.what(), Catch::Contains("no such device"));
  }
}

TEST_CASE("library calls run on the device their tensors live on", "[gpu][api]") {
  rt::Driver &d = rt::Driver::get();
  if (d.deviceCount() < 2) {
    WARN("skipped: one GPU; the call on a second device needs two");
    return;
  }
  int last = d.deviceCount() - 1, before = d.currentDevice();
  std::mt19937_64 rng(5);
  double error = 1;
  {
    // Memory and stream of the last device; the calling thread stays on
    // its own device.
    rt::ScopedDevice there(last);
    DeviceTensor a(DType::f16, {300, 128}, &rng), b(DType::f16, {128, 200}, &rng), c(DType::f32, {300, 200});
    Stream stream;
    rt::ScopedDevice back(before);
    CHECK(a.view().device == last);
    tessel::gemm(a.view(), b.view(), c.view(), {}, stream.s);
    CHECK(d.currentDevice() == before);
    stream.sync();
    c.fetch();
    error = relativeError(c.host.values, referenceGemm(a.host, b.host));
  }
  CHECK(error < 1e-3);
}

TEST_CASE("tessel::attention::forward runs the configuration tessel tune recorded", "[gpu][api]") {
  ScopedCacheDir cache("tessel-tuned-attention-test");
  rt::Driver &d = rt::Driver::get();
  // The bucket `tessel tune flash_attention_fwd` files batch 2, 300 rows,
  // 8 query heads at head_dim 64, causal under.
  std::string bucket = kernels::tunedBucket(
      {{"dtype", "bf16"}, {"head_dim", "64"}, {"causal", "1"}, {"varlen", "0"}},
      {{"batch", 2}, {"heads_q", 8}, {"seqlen_q", 300}, {"seqlen_k", 300}});
  CHECK(bucket == "dtype=bf16,head_dim=64,causal=1,varlen=0,batch=2,heads_q=8,seqlen_q=512,seqlen_k=512");
  kernels::recordTuned("flash_attention_fwd", d.deviceName(), bucket,
                       {{"stages", "3"}, {"persistent", "1"}, {"overlap", "0"}, {"pingpong", "0"}});
  AttentionOutcome tuned = runAttention(2, {300}, 8, 2, 64, true, DType::bf16);
  verify(tuned);
  CHECK_THAT(tuned.what, Catch::Contains("stages=3 causal=1") && Catch::Contains("persistent=1") &&
                             Catch::Contains("(tuned on " + d.deviceName() + ")"));
  // A record with a setting it does not know is not used.
  std::string other = kernels::tunedBucket(
      {{"dtype", "bf16"}, {"head_dim", "64"}, {"causal", "0"}, {"varlen", "0"}},
      {{"batch", 2}, {"heads_q", 8}, {"seqlen_q", 300}, {"seqlen_k", 300}});
  kernels::recordTuned("flash_attention_fwd", d.deviceName(), other, {{"stages", "9"}});
  AttentionOutcome untuned = runAttention(2, {300}, 8, 2, 64, false, DType::bf16);
  verify(untuned);
  CHECK_THAT(untuned.what, !Catch::Contains("tuned on") && Catch::Contains("persistent=0"));
}

TEST_CASE("tessel::attention::backward runs the configuration tessel tune recorded", "[gpu][api]") {
  ScopedCacheDir cache("tessel-tuned-attention-bwd-test");
  rt::Driver &d = rt::Driver::get();
  // The bucket `tessel tune flash_attention_bwd` files batch 2, 300 rows,
  // 8 query heads over 2 K/V heads (atomic dK/dV) at head_dim 64 under.
  auto bucket = [](const char *causal) {
    return kernels::tunedBucket({{"dtype", "bf16"},
                                 {"head_dim", "64"},
                                 {"causal", causal},
                                 {"varlen", "0"},
                                 {"kv_reduction", "atomic"}},
                                {{"batch", 2}, {"heads_q", 8}, {"seqlen_q", 300}, {"seqlen_k", 300}});
  };
  CHECK(bucket("1") == "dtype=bf16,head_dim=64,causal=1,varlen=0,kv_reduction=atomic,batch=2,"
                       "heads_q=8,seqlen_q=512,seqlen_k=512");
  kernels::recordTuned("flash_attention_bwd", d.deviceName(), bucket("1"),
                       {{"block_m", "64"}, {"scores", "keys"}, {"dq_atomics", "registers"},
                        {"stages", "3"}});
  AttentionOutcome tuned = runAttention(2, {300}, 8, 2, 64, true, DType::bf16);
  verify(tuned);
  std::string backward = tuned.what.substr(tuned.what.find(" | "));
  CHECK_THAT(backward, Catch::Contains("block_m=64") && Catch::Contains("stages=3") &&
                           Catch::Contains("dq_atomics=registers") &&
                           Catch::Contains("scores=keys") &&
                           Catch::Contains("(tuned on " + d.deviceName() + ")"));
  // A record with a value it does not know is not used: the defaults run.
  kernels::recordTuned("flash_attention_bwd", d.deviceName(), bucket("0"), {{"scores", "diagonal"}});
  AttentionOutcome untuned = runAttention(2, {300}, 8, 2, 64, false, DType::bf16);
  verify(untuned);
  std::string plain = untuned.what.substr(untuned.what.find(" | "));
  CHECK_THAT(plain, !Catch::Contains("tuned on"));
  if (rt::nativeArch(d.computeCapability()) == "sm_90a")
    CHECK_THAT(plain, Catch::Contains("block_m=128") && Catch::Contains("scores=queries"));
}

TEST_CASE("tessel::gemm runs the configuration tessel tune recorded", "[gpu][api]") {
  ScopedCacheDir cache("tessel-tuned-gemm-test");
  rt::Driver &d = rt::Driver::get();
  std::mt19937_64 rng(9);
  DeviceTensor a(DType::bf16, {200, 96}, &rng), b(DType::bf16, {96, 300}, &rng), c(DType::f32, {200, 300});
  std::string bucket = kernels::tunedBucket(
      {{"in", "bf16"}, {"out", "f32"}, {"transpose_a", "0"}, {"transpose_b", "0"}},
      {{"M", 200}, {"N", 300}, {"K", 96}});
  CHECK(bucket == "in=bf16,out=f32,transpose_a=0,transpose_b=0,M=256,N=512,K=128");
  // A record for this device: its tiles run.
  kernels::recordTuned("gemm", d.deviceName(), bucket,
                       {{"block_m", "64"}, {"block_n", "64"}, {"block_k", "32"}, {"stages", "3"},
                        {"threads", "128"}, {"swizzle", "0"}});
  Choice tuned = tessel::gemm(a.view(), b.view(), c.view());
  CHECK_THAT(tuned.config, Catch::Contains("block_m=64 block_n=64 block_k=32 stages=3 threads=128") &&
                               Catch::Contains("(tuned on " + d.deviceName() + ")"));
  c.fetch();
  CHECK(relativeError(c.host.values, referenceGemm(a.host, b.host)) < 1e-3);
  // Every setting the tuner varies is read back (a record it could not read
  // would run the defaults): a persistent TMA-store epilogue in 16 bits.
  if (rt::nativeArch(d.computeCapability()) == "sm_90a") {
    // N = 320: rows of whole 16-byte units, so B and C take TMA.
    DeviceTensor b16(DType::bf16, {96, 320}, &rng), c16(DType::f16, {200, 320});
    std::string bucket16 = kernels::tunedBucket(
        {{"in", "bf16"}, {"out", "f16"}, {"transpose_a", "0"}, {"transpose_b", "0"}},
        {{"M", 200}, {"N", 320}, {"K", 96}});
    kernels::recordTuned("gemm", d.deviceName(), bucket16,
                         {{"block_m", "128"}, {"block_n", "256"}, {"block_k", "64"},
                          {"stages", "3"}, {"threads", "256"}, {"swizzle", "8"},
                          {"persistent", "1"}, {"tma_store", "1"}, {"policy", "full_row"}});
    Choice staged = tessel::gemm(a.view(), b16.view(), c16.view());
    CHECK_THAT(staged.config, Catch::Contains("persistent=1 tma_store=1 policy=full_row") &&
                                  Catch::Contains("(tuned on " + d.deviceName() + ")"));
    c16.fetch();
    CHECK(relativeError(c16.host.values, referenceGemm(a.host, b16.host)) < 1e-2);
  }
  // A record it cannot read is not used (another bucket: records are read
  // once per process and bucket); nor is one when asked not to.
  DeviceTensor a2(DType::bf16, {600, 96}, &rng), c2(DType::f32, {600, 300});
  std::string bucket2 = kernels::tunedBucket(
      {{"in", "bf16"}, {"out", "f32"}, {"transpose_a", "0"}, {"transpose_b", "0"}},
      {{"M", 600}, {"N", 300}, {"K", 96}});
  kernels::recordTuned("gemm", d.deviceName(), bucket2, {{"block_m", "huge"}});
  CHECK_THAT(tessel::gemm(a2.view(), b.view(), c2.view()).config, !Catch::Contains("tuned on"));
  GemmCallOptions untuned;
  untuned.tuned = false;
  CHECK_THAT(tessel::gemm(a.view(), b.view(), c.view(), untuned).config, !Catch::Contains("tuned on"));
}
