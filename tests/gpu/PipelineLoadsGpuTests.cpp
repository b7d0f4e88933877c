//===- PipelineLoadsGpuTests.cpp - loads issued ahead, checked on the GPU -===//
//
// Pipelined loops whose loads were once left in place: a paged cache whose
// page is read from a table inside the loop (now read ahead with the load,
// by the TMA producer on sm_90a) and copies into two windows of one staged
// tile (now cp.async loads into the window of each stage). Each runs for
// more iterations than it has stages, so a page read for the wrong
// iteration or a window landing in the wrong stage gives wrong sums here.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "tessel/harness/LibrarySupport.h"
#include "UserKernels.h"

#include <fmt/format.h>

#include <array>

using namespace tessel;

using namespace tessel::harness;

static std::string deviceArch() {
  return rt::nativeArch(rt::Driver::get().computeCapability());
}

TEST_CASE("a paged cache's pages are loaded ahead from the page table", "[gpu][user]") {
  Program p = test::pagedCacheSum();
  Kernel k = compile(p, {deviceArch()});
  for (int64_t iterations : {1, 5, 11}) {
    const int64_t pageCount = 7;
    std::mt19937_64 rng(iterations);
    HostTensor c(DType::f16, {pageCount, 64, 128}), t(DType::i32, {iterations}),
        o(DType::f32, {64, 128});
    randomize(c, rng);
    for (int64_t i = 0; i < iterations; ++i) t.set(i, float((i * 5 + 3) % pageCount));
    std::vector<double> ref(64 * 128, 0.0);
    for (int64_t i = 0; i < iterations; ++i)
      for (int64_t e = 0; e < 64 * 128; ++e) ref[e] += c.values[int64_t(t.values[i]) * 64 * 128 + e];
    DeviceRun run;
    run.args.push_back(rt::LaunchArg::integer(iterations));
    run.args.push_back(rt::LaunchArg::integer(pageCount));
    run.addTensor(c, false);
    run.addTensor(t, false);
    run.addTensor(o, true);
    CheckResult r = launchAndCompare(k, run, 4, o, ref, 1e-5, {});
    INFO(fmt::format("{} iterations: rel error {:.3e}", iterations, r.relError));
    CHECK(r.passed);
  }
}

TEST_CASE("copies into two windows of a staged tile land in each stage", "[gpu][user]") {
  Program p("window_sum");
  Expr n = p.sym("N");
  Tensor a = p.tensor("a", {n * 64, 32}, DType::f16), b = p.tensor("b", {n * 64, 32}, DType::f16);
  Tensor out = p.tensor("out", {64, 64}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer s = alloc_shared({64, 64}, DType::f16);
    Buffer acc = alloc_fragment({64, 64}, DType::f32);
    fill(acc, 0.0);
    pipelined(n, 3, [&](Expr kt) {
      copy(a.tile({kt * 64, 0}, {64, 32}), s.tile({0, 0}, {64, 32}));
      copy(b.tile({kt * 64, 0}, {64, 32}), s.tile({0, 32}, {64, 32}));
      parallel(64, 64, [&](Expr i, Expr j) { acc(i, j) = acc(i, j) + cast(s(i, j), DType::f32); });
    });
    copy(acc, out.tile({0, 0}, {64, 64}));
  });
  Kernel k = compile(p, {deviceArch()});
  for (int64_t iterations : {1, 5, 11}) {
    std::mt19937_64 rng(iterations);
    HostTensor ha(DType::f16, {iterations * 64, 32}), hb(DType::f16, {iterations * 64, 32}),
        o(DType::f32, {64, 64});
    randomize(ha, rng);
    randomize(hb, rng);
    std::vector<double> ref(64 * 64, 0.0);
    for (int64_t it = 0; it < iterations; ++it)
      for (int64_t i = 0; i < 64; ++i)
        for (int64_t j = 0; j < 64; ++j) {
          HostTensor &from = j < 32 ? ha : hb;
          ref[i * 64 + j] += from.values[(it * 64 + i) * 32 + j % 32];
        }
    DeviceRun run;
    run.args.push_back(rt::LaunchArg::integer(iterations));
    run.addTensor(ha, false);
    run.addTensor(hb, false);
    run.addTensor(o, true);
    CheckResult r = launchAndCompare(k, run, 3, o, ref, 1e-5, {});
    INFO(fmt::format("{} iterations: rel error {:.3e}", iterations, r.relError));
    CHECK(r.passed);
  }
}

TEST_CASE("a TMA load and cp.async loads share one pipelined loop", "[gpu][user]") {
  // TMA fills whole buffers: the window loads are cp.async copies, the
  // whole-tile load beside them stays a TMA copy (on sm_90a), and each
  // iteration waits for both before reading the stage.
  Program p("mixed_sum");
  Expr n = p.sym("N");
  Tensor a = p.tensor("a", {n * 64, 64}, DType::f16);
  Tensor b = p.tensor("b", {n * 64, 32}, DType::f16), c = p.tensor("c", {n * 64, 32}, DType::f16);
  Tensor out = p.tensor("out", {64, 64}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer as = alloc_shared({64, 64}, DType::f16), bs = alloc_shared({64, 64}, DType::f16);
    Buffer acc = alloc_fragment({64, 64}, DType::f32);
    fill(acc, 0.0);
    pipelined(n, 3, [&](Expr kt) {
      copy(a.tile({kt * 64, 0}, {64, 64}), as);
      copy(b.tile({kt * 64, 0}, {64, 32}), bs.tile({0, 0}, {64, 32}));
      copy(c.tile({kt * 64, 0}, {64, 32}), bs.tile({0, 32}, {64, 32}));
      parallel(64, 64, [&](Expr i, Expr j) {
        acc(i, j) = acc(i, j) + cast(as(i, j), DType::f32) * cast(bs(i, j), DType::f32);
      });
    });
    copy(acc, out.tile({0, 0}, {64, 64}));
  });
  Kernel k = compile(p, {deviceArch()});
  for (int64_t iterations : {1, 5, 11}) {
    std::mt19937_64 rng(iterations);
    HostTensor ha(DType::f16, {iterations * 64, 64}), hb(DType::f16, {iterations * 64, 32}),
        hc(DType::f16, {iterations * 64, 32}), o(DType::f32, {64, 64});
    randomize(ha, rng);
    randomize(hb, rng);
    randomize(hc, rng);
    std::vector<double> ref(64 * 64, 0.0);
    for (int64_t it = 0; it < iterations; ++it)
      for (int64_t i = 0; i < 64; ++i)
        for (int64_t j = 0; j < 64; ++j) {
          int64_t row = it * 64 + i;
          double w = j < 32 ? hb.values[row * 32 + j] : hc.values[row * 32 + j - 32];
          ref[i * 64 + j] += double(ha.values[row * 64 + j]) * w;
        }
    DeviceRun run;
    run.args.push_back(rt::LaunchArg::integer(iterations));
    run.addTensor(ha, false);
    run.addTensor(hb, false);
    run.addTensor(hc, false);
    run.addTensor(o, true);
    CheckResult r = launchAndCompare(k, run, 4, o, ref, 1e-5, {});
    INFO(fmt::format("{} iterations: rel error {:.3e}", iterations, r.relError));
    CHECK(r.passed);
  }
}

TEST_CASE("a gemm over K = 576 (latent and rope in one product) matches the reference",
          "[gpu][user]") {
  Program p = test::latentScores();
  Kernel k = compile(p, {deviceArch()});
  const int64_t keys = 160, width = test::kLatentWidth; // five steps, more than the stages
  std::mt19937_64 rng(576);
  HostTensor q(DType::bf16, {64, width}), kv(DType::bf16, {keys, width}), s(DType::f32, {64, keys});
  randomize(q, rng);
  randomize(kv, rng);
  std::vector<double> ref(64 * keys, 0.0);
  for (int64_t i = 0; i < 64; ++i)
    for (int64_t j = 0; j < keys; ++j)
      for (int64_t c = 0; c < width; ++c)
        ref[i * keys + j] += double(q.values[i * width + c]) * kv.values[j * width + c];
  DeviceRun run;
  run.args.push_back(rt::LaunchArg::integer(keys));
  run.addTensor(q, false);
  run.addTensor(kv, false);
  run.addTensor(s, true);
  CheckResult r = launchAndCompare(k, run, 3, s, ref, 1e-5, {});
  INFO(fmt::format("rel error {:.3e}", r.relError));
  CHECK(r.passed);
}

TEST_CASE("a paged GQA decode kernel written as a user writes it matches the reference",
          "[gpu][user]") {
  const int64_t batch = 3, kvHeads = 2, pool = 11, perSeq = 4, g = test::kDecodeGroup;
  const int64_t d = test::kDecodeDim, page = test::kDecodePage;
  const int64_t lengths[] = {1, 130, 256};
  std::mt19937_64 rng(16);
  HostTensor q(DType::bf16, {batch, kvHeads * g, d}), kc(DType::bf16, {pool, page, kvHeads, d}),
      vc(DType::bf16, {pool, page, kvHeads, d}), table(DType::i32, {batch, perSeq}),
      len(DType::i32, {batch}), o(DType::f32, {batch, kvHeads * g, d});
  randomize(q, rng);
  randomize(kc, rng);
  randomize(vc, rng);
  for (int64_t b = 0; b < batch; ++b) {
    len.set(b, float(lengths[b]));
    for (int64_t i = 0; i < perSeq; ++i) table.set(b * perSeq + i, float((b * 5 + i * 3 + 1) % pool));
  }
  std::vector<double> ref(batch * kvHeads * g * d, 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < kvHeads; ++h)
      for (int64_t r = 0; r < g; ++r) {
        int64_t row = (b * kvHeads * g + h * g + r) * d;
        std::vector<double> s(lengths[b]);
        auto at = [&](int64_t key, int64_t c) {
          int64_t pg = int64_t(table.values[b * perSeq + key / page]);
          return ((pg * page + key % page) * kvHeads + h) * d + c;
        };
        for (int64_t key = 0; key < lengths[b]; ++key)
          for (int64_t c = 0; c < d; ++c) s[key] += double(q.values[row + c]) * kc.values[at(key, c)] / std::sqrt(double(d));
        double mx = *std::max_element(s.begin(), s.end()), sum = 0;
        for (double &v : s) sum += (v = std::exp(v - mx));
        for (int64_t key = 0; key < lengths[b]; ++key)
          for (int64_t c = 0; c < d; ++c) ref[row + c] += s[key] / sum * vc.values[at(key, c)];
      }
  for (std::string arch : {deviceArch(), std::string("sm_80")}) {
    Program p = test::pagedDecode();
    Kernel k = compile(p, {arch});
    DeviceRun run;
    for (int64_t v : {batch, kvHeads, pool, perSeq}) run.args.push_back(rt::LaunchArg::integer(v));
    for (HostTensor *t : {&q, &kc, &vc, &table, &len}) run.addTensor(*t, false);
    run.addTensor(o, true);
    // P is rounded to bf16 for the second product.
    CheckResult r = launchAndCompare(k, run, 9, o, ref, 1e-2, {});
    INFO(fmt::format("{}: rel error {:.3e}", arch, r.relError));
    CHECK(r.passed);
  }
}

TEST_CASE("wgmma with N of 96 192 and 200 (padded accumulators) matches the reference",
          "[gpu][user]") {
  if (deviceArch() != "sm_90a") {
    WARN("SKIPPED: wgmma's N in steps of 8 needs sm_90a; this GPU is " << deviceArch());
    return;
  }
  for (auto [rows, keys] : {std::pair<int64_t, int64_t>{128, 96}, {64, 192}, {64, 200}}) {
    Program p = test::wideScores(rows, keys);
    Kernel k = compile(p, {deviceArch()});
    std::mt19937_64 rng(keys);
    HostTensor q(DType::bf16, {rows, 64}), kt(DType::bf16, {keys, 64}), out(DType::f32, {rows, keys});
    randomize(q, rng);
    randomize(kt, rng);
    std::vector<double> ref(rows * keys, 1.0);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < keys; ++j)
        for (int64_t c = 0; c < 64; ++c) ref[i * keys + j] += double(q.values[i * 64 + c]) * kt.values[j * 64 + c];
    DeviceRun run;
    run.addTensor(q, false);
    run.addTensor(kt, false);
    run.addTensor(out, true);
    CheckResult r = launchAndCompare(k, run, 2, out, ref, 1e-5, {});
    INFO(fmt::format("{} x {}: rel error {:.3e}", rows, keys, r.relError));
    CHECK(r.passed);
  }
}

TEST_CASE("int4 weights unpacked into a register operand match the reference", "[gpu][user]") {
  const int64_t n = 192, k = 512, t = test::kInt4Tokens, g = test::kInt4Group;
  std::mt19937_64 rng(4);
  HostTensor x(DType::bf16, {t, k}), w(DType::u8, {n, k / 2}), scales(DType::f32, {n, k / g}),
      yT(DType::f32, {n, t});
  randomize(x, rng);
  randomize(w, rng); // every byte: both nibbles take all 16 codes
  std::uniform_real_distribution<float> positive(0.01f, 0.1f);
  for (int64_t i = 0; i < n * (k / g); ++i) scales.set(i, positive(rng));
  std::vector<double> ref(n * t, 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      int byte = int(w.values[r * (k / 2) + c / 2]);
      // Each dequantised weight is rounded to bf16, as the fragment holds it.
      double weight = testing::roundTo(DType::bf16, float(((byte >> ((c % 2) * 4)) & 15) - 8) *
                                                        scales.values[r * (k / g) + c / g]);
      for (int64_t j = 0; j < t; ++j) ref[r * t + j] += weight * x.values[j * k + c];
    }
  for (std::string arch : {deviceArch(), std::string("sm_80")}) {
    Program p = test::int4Weights();
    Kernel kernel = compile(p, {arch});
    DeviceRun run;
    run.args.push_back(rt::LaunchArg::integer(n));
    run.args.push_back(rt::LaunchArg::integer(k));
    run.addTensor(x, false);
    run.addTensor(w, false);
    run.addTensor(scales, false);
    run.addTensor(yT, true);
    CheckResult r = launchAndCompare(kernel, run, 5, yT, ref, 1e-5, {});
    INFO(fmt::format("{}: rel error {:.3e}", arch, r.relError));
    CHECK(r.passed);
  }
}

/// Runs a gemm program taking (M, N, K, a, b, out) for `arch` and compares
/// `out` with `ref` within `tolerance`.
static CheckResult checkGemm(Program &p, const std::string &arch, std::array<int64_t, 3> mnk,
                             HostTensor &a, HostTensor &b, HostTensor &out,
                             const std::vector<double> &ref, double tolerance) {
  Kernel kernel = compile(p, {arch});
  DeviceRun run;
  for (int64_t v : mnk) run.args.push_back(rt::LaunchArg::integer(v));
  run.addTensor(a, false);
  run.addTensor(b, false);
  run.addTensor(out, true);
  return launchAndCompare(kernel, run, 5, out, ref, tolerance, {});
}

TEST_CASE("8-bit gemms with MN-major operands match the reference", "[gpu][user]") {
  const int64_t m = 256, n = 256, k = 320; // a K tail: five steps of 64
  struct Case { DType in; bool aMnMajor; std::string arch; };
  std::vector<Case> cases = {{DType::i8, true, "sm_80"}, {DType::i8, true, deviceArch()}};
  if (deviceArch() == "sm_90a") {
    cases.push_back({DType::f8e4m3, false, "sm_90a"});
    // tcgen05.mma (emulated) reads the operands MN-major as stored.
    cases.push_back({DType::f8e4m3, true, "sm_100a-emu"});
    cases.push_back({DType::i8, false, "sm_100a-emu"});
  }
  for (Case c : cases) {
    std::mt19937_64 rng(k);
    bool integer = c.in == DType::i8;
    HostTensor a(c.in, c.aMnMajor ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k});
    HostTensor b(c.in, {k, n}), out(integer ? DType::i32 : DType::f32, {m, n});
    if (integer) {
      randomize(a, rng, -20, 20);
      randomize(b, rng, -20, 20);
    } else {
      randomize(a, rng);
      randomize(b, rng);
    }
    std::vector<double> ref(m * n, 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t kk = 0; kk < k; ++kk) {
        double av = a.values[c.aMnMajor ? kk * m + i : i * k + kk];
        for (int64_t j = 0; j < n; ++j) ref[i * n + j] += av * b.values[kk * n + j];
      }
    Program p = test::mnMajorEightBit(c.in, c.aMnMajor);
    // i8 is exact; FP8 wgmma accumulates with fewer bits than f32 (a
    // misplaced element would be off by far more than either bound).
    CheckResult r = checkGemm(p, c.arch, {m, n, k}, a, b, out, ref, integer ? 1e-6 : 1e-3);
    INFO(fmt::format("{} on {}: rel error {:.3e}", name(c.in), c.arch, r.relError));
    CHECK(r.passed);
  }
}

// f16 accumulators (the .f16 forms of wgmma and mma.sync: two elements a
// register) against the float64 product: FP8 on wgmma, on sm_89's
// mma.sync (its PTX, run by this GPU) and on sm_100a-emu (tensor memory
// holds 32-bit accumulators, so mma.sync), f16 on wgmma. A K tail, and N
// and M past their last tile.
TEST_CASE("gemms accumulating in f16 match the reference", "[gpu][user]") {
  if (deviceArch() != "sm_90a") return;
  const int64_t m = 200, n = 300, k = 320;
  struct Case { DType in; std::string arch; bool doubled = false; };
  for (Case c : {Case{DType::f8e4m3, "sm_90a"}, Case{DType::f8e5m2, "sm_89"},
                 Case{DType::f8e4m3, "sm_100a-emu"}, Case{DType::f16, "sm_90a"},
                 Case{DType::f8e4m3, "sm_90a", true}, Case{DType::f16, "sm_90a", true}}) {
    std::mt19937_64 rng(k);
    HostTensor a(c.in, {m, k}), b(c.in, {n, k}), out(DType::f16, {m, n});
    randomize(a, rng);
    randomize(b, rng);
    // Doubled after each K step (64 bytes of K): C = 2 (C + A_t B_t).
    int64_t step = c.in == DType::f16 ? 32 : 64;
    std::vector<double> ref(m * n, 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t k0 = 0; k0 < k; k0 += step) {
          double &r = ref[i * n + j];
          for (int64_t kk = k0; kk < std::min(k, k0 + step); ++kk)
            r += a.values[i * k + kk] * b.values[j * k + kk];
          if (c.doubled) r *= 2;
        }
    Program p = test::halfAccumulator(c.in, c.doubled);
    // f16 keeps 11 bits of each partial sum; a misplaced element would be
    // off by far more.
    CheckResult r = checkGemm(p, c.arch, {m, n, k}, a, b, out, ref, 1e-2);
    INFO(fmt::format("{} on {}{}: rel error {:.3e}", name(c.in), c.arch,
                     c.doubled ? ", doubled each step" : "", r.relError));
    CHECK(r.passed);
  }
}

TEST_CASE("a peer's tensor bounded at a run-time length reads zero past it", "[gpu][user]") {
  // One rank whose peer table holds its own copy: the same addressing as
  // another GPU's, checked on one.
  Program p = test::boundedPeerRows();
  Kernel k = compile(p, {deviceArch()});
  const int64_t rows = 256, start = 64;
  std::mt19937_64 rng(9);
  HostTensor cache(DType::f16, {rows, 64}), out(DType::f32, {64, 64});
  randomize(cache, rng);
  auto dc = testing::upload(cache);
  auto dout = testing::poisoned(out);
  for (int64_t len : {100, 64, 300}) {
    k.launch({rt::LaunchArg::integer(rows), rt::LaunchArg::integer(0), rt::LaunchArg::integer(start),
              rt::LaunchArg::integer(len),
              rt::LaunchArg::symmetric(dc->ptr(), {dc->ptr()}, {rows, 64}),
              testing::launchArg(*dout, out)});
    testing::synchronize();
    testing::download(*dout, out);
    std::vector<double> ref(64 * 64, 0.0);
    for (int64_t i = 0; i < 64; ++i)
      for (int64_t j = 0; j < 64; ++j)
        if (start + i < len) ref[i * 64 + j] = cache.values[(start + i) * 64 + j];
    double error = testing::relativeError(out, ref);
    INFO(fmt::format("len {}: rel error {:.3e}", len, error));
    // len 64: every row is past the limit, all zeros.
    if (len <= start)
      CHECK(std::all_of(out.values.begin(), out.values.end(), [](float v) { return v == 0.0f; }));
    else CHECK(error == 0.0);
  }
}
