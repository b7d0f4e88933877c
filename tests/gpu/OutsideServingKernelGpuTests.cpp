//===- OutsideServingKernelGpuTests.cpp - serving kernels on the GPU -------===//
//
// The kernels of tests/common/OutsideServingKernels.h, built for the
// running GPU's architecture (and sm_80's PTX on a later GPU), on random
// inputs of shapes that are not multiples of their tiles, against float64
// or exact references on the host: a row-wise prefix sum (f32 and i32), a
// paged KV-cache append, variable-length mean pooling, GroupNorm over
// NHWC, an embedding lookup with positions, and greedy sampling with a
// repetition penalty over a 50257-word vocabulary.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "OutsideGpuRuns.h"
#include "OutsideServingKernels.h"
#include "tessel/Testing.h"
#include "tessel/dsl/Compile.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Launch.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <random>

using namespace tessel;
using testing::DeviceRun;
using testing::HostTensor;
using test::buildQuiet;
using test::runnableTargets;

namespace {

/// A 16-bit output that is one rounding of an f32 result: half an ulp of
/// bf16 (2^-9 = 1.95e-3) bounds the error element by element, so the
/// norm-wise error too; 4e-3 leaves room for the f32 arithmetic before the
/// rounding (rsqrt, the statistics).
constexpr double kBf16Output = 4e-3;

/// i32 elements of a host tensor, read from its bytes (exact past 2^24).
std::vector<int32_t> ints(const HostTensor &t) {
  std::vector<int32_t> out(t.size());
  std::memcpy(out.data(), t.bytes.data(), out.size() * 4);
  return out;
}

/// Stores `values` into an i32 host tensor exactly.
void setInts(HostTensor &t, const std::vector<int32_t> &values) {
  std::memcpy(t.bytes.data(), values.data(), values.size() * 4);
  t.decode();
}

} // namespace

TEST_CASE("outside: row-wise prefix sum over long rows (f32 and i32)", "[gpu][outside][serving]") {
  struct Config {
    DType type;
    int64_t perThread;
    int threads, stages;
    int64_t m, n;
  };
  // 256-element chunks are TMA loads on sm_90a where rows are whole 16-byte
  // units (N 4100, 1000), the build without TMA otherwise.
  for (Config c : {Config{DType::f32, 4, 256, 3, 3, 100003}, Config{DType::f32, 4, 256, 3, 2, 1},
                   Config{DType::f32, 2, 128, 3, 5, 4100}, Config{DType::i32, 8, 128, 2, 4, 54321},
                   Config{DType::i32, 8, 128, 2, 1, 1025}, Config{DType::i32, 2, 128, 4, 3, 1000}})
    for (const std::string &arch : runnableTargets()) {
      Program p = test::cumsumRows(c.type, c.perThread, c.threads, c.stages);
      Kernel k = buildQuiet(p, arch);
      std::mt19937_64 rng(c.m * 31 + c.n);
      HostTensor x(c.type, {c.m, c.n}), y(c.type, {c.m, c.n});
      std::vector<int32_t> raw(c.m * c.n);
      if (c.type == DType::i32) {
        // Sums stay far from 2^31: the scan is exact.
        std::uniform_int_distribution<int32_t> pick(-1000, 1000);
        for (int32_t &v : raw)
          v = pick(rng);
        setInts(x, raw);
      } else {
        testing::randomize(x, rng, 0.0f, 1.0f);
      }
      DeviceRun run;
      run.args.push_back(rt::LaunchArg::integer(c.m));
      run.args.push_back(rt::LaunchArg::integer(c.n));
      run.addTensor(x, false);
      run.addTensor(y, true);
      k.launch(run.args);
      testing::synchronize();
      run.download(3, y);
      if (c.type == DType::i32) {
        std::vector<int32_t> got = ints(y);
        int64_t wrong = 0, first = -1;
        for (int64_t r = 0; r < c.m; ++r) {
          int64_t sum = 0;
          for (int64_t j = 0; j < c.n; ++j) {
            sum += raw[r * c.n + j];
            if (got[r * c.n + j] != sum && wrong++ == 0)
              first = r * c.n + j;
          }
        }
        fmt::print("[{}] cumsum i32 {}x{}, M {} N {}: {} elements differ (first at {})\n", arch, c.perThread,
                   c.threads, c.m, c.n, wrong, first);
        CHECK(wrong == 0);
        continue;
      }
      std::vector<double> ref(c.m * c.n);
      for (int64_t r = 0; r < c.m; ++r) {
        double sum = 0;
        for (int64_t j = 0; j < c.n; ++j)
          ref[r * c.n + j] = sum += x.values[r * c.n + j];
      }
      double err = testing::relativeError(y, ref);
      fmt::print("[{}] cumsum f32 {}x{}, M {} N {}: rel error {:.3e}\n", arch, c.perThread, c.threads, c.m,
                 c.n, err);
      // Inputs in [0, 1]: every partial sum is the sum of the magnitudes, so
      // each output's f32 error is at most (terms added in sequence) x
      // 2^-24 of it: a thread's 4, the scan's 8 steps and one carry a chunk
      // (98 chunks at N 100003; 17 of 256 at N 4100): 110 x 6e-8 = 6.6e-6.
      CHECK(err < 1e-5);
    }
}

TEST_CASE("outside: paged KV-cache append through a block table", "[gpu][outside][serving]") {
  struct Config {
    int64_t heads, headDim, blockSize;
    int threads;
  };
  for (Config c : {Config{8, 128, 16, 128}, Config{2, 64, 32, 64}})
    for (const std::string &arch : runnableTargets()) {
      Program p = test::pagedKvAppend(c.heads, c.headDim, c.blockSize, c.threads);
      Kernel k = buildQuiet(p, arch);
      int64_t bs = c.blockSize, width = 4, blocks = 23, batch = 5, padding = 3;
      // New tokens and cached ones per sequence: an empty append, one token,
      // an append across a page boundary into a missing page (-1), one
      // that runs past the table's width, and a long one.
      std::vector<int32_t> fresh = {3, 0, 4, 5, int32_t(bs) + 3};
      std::vector<int32_t> context = {5, 7, int32_t(bs) - 2, int32_t(width * bs) - 2, 1};
      std::vector<int32_t> cu = {0};
      for (int32_t f : fresh)
        cu.push_back(cu.back() + f);
      int64_t t = cu.back() + padding;
      std::mt19937_64 rng(c.heads * 7 + c.blockSize);
      std::vector<int32_t> perm(blocks);
      for (int64_t i = 0; i < blocks; ++i)
        perm[i] = int32_t(i);
      std::shuffle(perm.begin(), perm.end(), rng);
      std::vector<int32_t> tableRaw(batch * width);
      for (int64_t i = 0; i < batch * width; ++i)
        tableRaw[i] = perm[i]; // distinct blocks: no two tokens share a row
      tableRaw[2 * width + 1] = -1;
      HostTensor kNew(DType::bf16, {t, c.heads, c.headDim}), vNew(DType::bf16, {t, c.heads, c.headDim});
      HostTensor kCache(DType::bf16, {blocks, bs, c.heads, c.headDim});
      HostTensor vCache(DType::bf16, {blocks, bs, c.heads, c.headDim});
      HostTensor table(DType::i32, {batch, width}), cuT(DType::i32, {batch + 1}), ctx(DType::i32, {batch});
      testing::randomize(kNew, rng);
      testing::randomize(vNew, rng);
      testing::randomize(kCache, rng);
      testing::randomize(vCache, rng);
      setInts(table, tableRaw);
      setInts(cuT, cu);
      setInts(ctx, context);
      std::vector<double> refK(kCache.values.begin(), kCache.values.end());
      std::vector<double> refV(vCache.values.begin(), vCache.values.end());
      int64_t row = c.heads * c.headDim, written = 0;
      for (int64_t s = 0; s < batch; ++s)
        for (int32_t i = 0; i < fresh[s]; ++i) {
          int64_t pos = context[s] + i, page = pos / bs;
          if (page >= width || tableRaw[s * width + page] < 0)
            continue;
          int64_t dst = (tableRaw[s * width + page] * bs + pos % bs) * row, src = (cu[s] + i) * row;
          std::copy(&kNew.values[src], &kNew.values[src] + row, &refK[dst]);
          std::copy(&vNew.values[src], &vNew.values[src] + row, &refV[dst]);
          ++written;
        }
      DeviceRun run;
      for (int64_t v : {t, batch, blocks, width})
        run.args.push_back(rt::LaunchArg::integer(v));
      run.addTensor(kNew, false);
      run.addTensor(vNew, false);
      run.addTensor(kCache, false);
      run.addTensor(vCache, false);
      run.addTensor(table, false);
      run.addTensor(cuT, false);
      run.addTensor(ctx, false);
      k.launch(run.args);
      testing::synchronize();
      run.download(6, kCache);
      run.download(7, vCache);
      // Exact: rows are moved, not computed; every row not written keeps
      // its old contents.
      double errK = testing::relativeError(kCache, refK), errV = testing::relativeError(vCache, refV);
      fmt::print("[{}] paged kv append h{} d{} block {}: {} of {} tokens written, k rel error {:.3e}, v "
                 "{:.3e}\n",
                 arch, c.heads, c.headDim, c.blockSize, written, t, errK, errV);
      CHECK(errK == 0.0);
      CHECK(errV == 0.0);
    }
}

TEST_CASE("outside: mean pooling over packed variable-length sequences", "[gpu][outside][serving]") {
  struct Config {
    int64_t rows, cols;
    int threads, stages;
    bool bounded;
    int64_t d;
  };
  // D 200: rows of whole 16-byte units (TMA on sm_90a); D 133: not.
  for (Config c : {Config{16, 128, 128, 3, false, 200}, Config{16, 128, 128, 3, true, 200},
                   Config{16, 128, 128, 3, false, 133}, Config{32, 64, 128, 4, false, 200}})
    for (const std::string &arch : runnableTargets()) {
      Program p = test::segmentMeanPool(c.rows, c.cols, c.threads, c.stages, c.bounded);
      Kernel k = buildQuiet(p, arch);
      std::vector<int32_t> lens = {0, 1, 37, 0, 130, 5, 16, 1};
      std::vector<int32_t> cu = {0};
      for (int32_t l : lens)
        cu.push_back(cu.back() + l);
      int64_t b = int64_t(lens.size()), t = cu.back();
      std::mt19937_64 rng(c.d * 5 + c.bounded);
      HostTensor x(DType::bf16, {t, c.d}), cuT(DType::i32, {b + 1}), out(DType::f32, {b, c.d});
      testing::randomize(x, rng, 0.0f, 2.0f);
      setInts(cuT, cu);
      std::vector<double> ref(b * c.d, 0.0);
      for (int64_t s = 0; s < b; ++s)
        for (int64_t j = 0; j < c.d; ++j) {
          double sum = 0;
          for (int64_t r = cu[s]; r < cu[s + 1]; ++r)
            sum += x.values[r * c.d + j];
          ref[s * c.d + j] = lens[s] ? sum / lens[s] : 0.0;
        }
      DeviceRun run;
      for (int64_t v : {t, b, c.d})
        run.args.push_back(rt::LaunchArg::integer(v));
      run.addTensor(x, false);
      run.addTensor(cuT, false);
      run.addTensor(out, true);
      k.launch(run.args);
      testing::synchronize();
      run.download(5, out);
      double err = testing::relativeError(out, ref);
      // Empty sequences give exactly 0 and one-row sequences their row.
      int64_t inexact = 0;
      for (int64_t s = 0; s < b; ++s)
        if (lens[s] <= 1)
          for (int64_t j = 0; j < c.d; ++j)
            inexact += out.values[s * c.d + j] != float(ref[s * c.d + j]);
      fmt::print("[{}] segment mean {}x{} ({}), D {}: rel error {:.3e}, {} inexact short rows\n", arch, c.rows,
                 c.cols, c.bounded ? "bounded" : "select", c.d, err, inexact);
      // Inputs in [0, 2]: the f32 sum of at most 130 positive terms is off by
      // at most (130 + 8 partial sums across threads) x 2^-24 of itself
      // (8.2e-6), and the division adds half an ulp.
      CHECK(err < 1e-5);
      CHECK(inexact == 0);
    }
}

TEST_CASE("outside: GroupNorm over NHWC with groups of 10 and 30 channels", "[gpu][outside][serving]") {
  struct Config {
    int64_t groupsPerBlock, channelsPerGroup, rows;
    int threads, stages;
    int64_t n, hw, groups;
  };
  // C 130 and 150: rows that are not whole 16-byte units (the build
  // without TMA); C 320 and 80: TMA on sm_90a.
  for (Config c : {Config{8, 10, 16, 128, 2, 2, 37, 13}, Config{4, 30, 8, 128, 2, 3, 50, 5},
                   Config{8, 10, 16, 128, 2, 1, 7, 32}, Config{2, 20, 32, 128, 3, 2, 45, 4}})
    for (const std::string &arch : runnableTargets()) {
      Program p = test::groupNormNhwc(c.groupsPerBlock, c.channelsPerGroup, c.rows, c.threads, c.stages);
      Kernel k = buildQuiet(p, arch);
      int64_t ch = c.groups * c.channelsPerGroup;
      float eps = 1e-5f;
      std::mt19937_64 rng(c.hw * 3 + ch);
      HostTensor x(DType::bf16, {c.n, c.hw, ch}), gamma(DType::f32, {ch}), beta(DType::f32, {ch});
      HostTensor y(DType::bf16, {c.n, c.hw, ch});
      // An offset per channel (a mean far from 0) that the two passes keep
      // from costing the variance its precision.
      testing::randomize(x, rng, -1.0f, 1.0f);
      for (int64_t i = 0; i < x.size(); ++i)
        x.set(i, x.values[i] + float(i % ch % 7));
      testing::randomize(gamma, rng, 0.5f, 1.5f);
      testing::randomize(beta, rng, -0.5f, 0.5f);
      std::vector<double> ref(y.size());
      for (int64_t s = 0; s < c.n; ++s)
        for (int64_t g = 0; g < c.groups; ++g) {
          double sum = 0, dev = 0, cnt = double(c.hw * c.channelsPerGroup);
          auto at = [&](int64_t r, int64_t j) { return (s * c.hw + r) * ch + g * c.channelsPerGroup + j; };
          for (int64_t r = 0; r < c.hw; ++r)
            for (int64_t j = 0; j < c.channelsPerGroup; ++j)
              sum += x.values[at(r, j)];
          double mean = sum / cnt;
          for (int64_t r = 0; r < c.hw; ++r)
            for (int64_t j = 0; j < c.channelsPerGroup; ++j)
              dev += (x.values[at(r, j)] - mean) * (x.values[at(r, j)] - mean);
          double rstd = 1.0 / std::sqrt(dev / cnt + eps);
          for (int64_t r = 0; r < c.hw; ++r)
            for (int64_t j = 0; j < c.channelsPerGroup; ++j) {
              int64_t chan = g * c.channelsPerGroup + j;
              ref[at(r, j)] = (x.values[at(r, j)] - mean) * rstd * gamma.values[chan] + beta.values[chan];
            }
        }
      DeviceRun run;
      for (int64_t v : {c.n, c.hw, ch})
        run.args.push_back(rt::LaunchArg::integer(v));
      run.args.push_back(rt::LaunchArg::real(eps));
      run.addTensor(x, false);
      run.addTensor(gamma, false);
      run.addTensor(beta, false);
      run.addTensor(y, true);
      k.launch(run.args);
      testing::synchronize();
      run.download(7, y);
      double err = testing::relativeError(y, ref);
      fmt::print("[{}] group norm {} groups x {} channels a block, N {} HW {} G {}: rel error {:.3e}\n", arch,
                 c.groupsPerBlock, c.channelsPerGroup, c.n, c.hw, c.groups, err);
      CHECK(err < kBf16Output);
    }
}

TEST_CASE("outside: embedding lookup with padding row and position embedding", "[gpu][outside][serving]") {
  struct Config {
    int64_t tokens, chunk;
    int threads, stages;
    int64_t t, v, d, maxPos;
  };
  // D 600: rows of whole 16-byte units (TMA on sm_90a); D 300: not (the
  // build without TMA).
  for (Config c : {Config{4, 256, 128, 3, 37, 1000, 600, 64}, Config{4, 256, 128, 3, 9, 50, 300, 16},
                   Config{8, 128, 256, 4, 21, 300, 200, 32}})
    for (const std::string &arch : runnableTargets()) {
      Program p = test::embeddingLookup(c.tokens, c.chunk, c.threads, c.stages);
      Kernel k = buildQuiet(p, arch);
      std::mt19937_64 rng(c.t * 13 + c.d);
      int32_t pad = 1;
      HostTensor ids(DType::i32, {c.t}), positions(DType::i32, {c.t});
      HostTensor table(DType::bf16, {c.v, c.d}), posTable(DType::bf16, {c.maxPos, c.d});
      HostTensor out(DType::bf16, {c.t, c.d});
      testing::randomize(table, rng);
      testing::randomize(posTable, rng);
      std::vector<int32_t> idRaw(c.t), posRaw(c.t);
      for (int64_t i = 0; i < c.t; ++i) {
        idRaw[i] = int32_t(rng() % c.v);
        posRaw[i] = int32_t(rng() % c.maxPos);
      }
      // Out of range: below 0, at V, far past it; and the padding row itself.
      idRaw[0] = -1;
      idRaw[1] = int32_t(c.v);
      idRaw[2] = 1 << 30;
      idRaw[3] = pad;
      idRaw[c.t - 1] = int32_t(c.v - 1);
      setInts(ids, idRaw);
      setInts(positions, posRaw);
      std::vector<double> ref(out.size());
      for (int64_t i = 0; i < c.t; ++i) {
        int64_t id = idRaw[i] >= 0 && idRaw[i] < c.v ? idRaw[i] : pad;
        for (int64_t j = 0; j < c.d; ++j)
          ref[i * c.d + j] = testing::roundTo(
              DType::bf16, table.values[id * c.d + j] + posTable.values[posRaw[i] * c.d + j]);
      }
      DeviceRun run;
      for (int64_t v : {c.t, c.v, c.d, c.maxPos})
        run.args.push_back(rt::LaunchArg::integer(v));
      run.args.push_back(rt::LaunchArg::integer(pad));
      run.addTensor(ids, false);
      run.addTensor(positions, false);
      run.addTensor(table, false);
      run.addTensor(posTable, false);
      run.addTensor(out, true);
      k.launch(run.args);
      testing::synchronize();
      run.download(9, out);
      // Exact: the kernel adds two bf16 values in f32 (exactly rounded) and
      // rounds once to bf16, as the reference does.
      double err = testing::relativeError(out, ref);
      fmt::print("[{}] embedding {} tokens x {}, T {} V {} D {}: rel error {:.3e}\n", arch, c.tokens, c.chunk,
                 c.t, c.v, c.d, err);
      CHECK(err == 0.0);
    }
}

TEST_CASE("outside: greedy sampling with temperature and repetition penalty", "[gpu][outside][serving]") {
  struct Config {
    int64_t chunk, maxPrev;
    int threads, stages;
    int64_t v;
  };
  // GPT-2's 50257 words: rows of 201028 bytes, not whole 16-byte units (the
  // build without TMA); 32000 words with 256-word chunks: TMA on sm_90a.
  for (Config c : {Config{2048, 256, 256, 3, 50257}, Config{1024, 64, 128, 2, 50257},
                   Config{256, 64, 128, 4, 50257}, Config{256, 64, 128, 4, 32000}})
    for (const std::string &arch : runnableTargets()) {
      Program p = test::greedySample(c.chunk, c.maxPrev, c.threads, c.stages);
      Kernel k = buildQuiet(p, arch);
      const int64_t b = 6, v = c.v, l = 7;
      float temperature = 0.7f, penalty = 1.3f;
      std::mt19937_64 rng(c.chunk + c.maxPrev);
      HostTensor logits(DType::f32, {b, v}), prev(DType::i32, {b, l}), lens(DType::i32, {b});
      testing::randomize(logits, rng, -10.0f, 10.0f);
      std::vector<int32_t> prevRaw(b * l);
      for (int32_t &id : prevRaw)
        id = int32_t(rng() % v);
      std::vector<int32_t> lenRaw = {0, 3, 7, 7, 2, 5};
      auto top = [&](int64_t r) {
        return int32_t(std::max_element(&logits.values[r * v], &logits.values[r * v] + v) - &logits.values[r * v]);
      };
      // Row 1: its largest logit (positive) was generated, twice: divided
      // once, another token wins. Row 2: a tie between two chunks and one
      // within a chunk: the first index wins. Row 3: all logits negative, the
      // largest generated (multiplied). Row 4: ids out of range and before
      // the row. Row 5: the largest at V - 1 (the last, partial chunk).
      for (int64_t j = 0; j < l; ++j)
        if (prevRaw[2 * l + j] == 70 || prevRaw[2 * l + j] == 75)
          prevRaw[2 * l + j] = 100; // row 2's tie is between unpenalised logits
      prevRaw[1 * l + 0] = top(1);
      prevRaw[1 * l + 2] = top(1);
      logits.set(2 * v + 70, 50.0f);
      logits.set(2 * v + 75, 50.0f);
      logits.set(2 * v + v - 2000, 50.0f);
      logits.set(2 * v + v - 1000, 49.0f);
      for (int64_t j = 0; j < v; ++j)
        logits.set(3 * v + j, -std::fabs(logits.values[3 * v + j]) - 1.0f);
      prevRaw[3 * l + 4] = top(3);
      prevRaw[4 * l + 0] = -1;
      prevRaw[4 * l + 1] = int32_t(v) + 5;
      logits.set(5 * v + v - 1, 20.0f);
      setInts(prev, prevRaw);
      setInts(lens, lenRaw);
      // The kernel's f32 arithmetic (IEEE division) exactly: the token and its
      // score must match bit for bit.
      std::vector<int32_t> refToken(b);
      std::vector<float> refScore(b);
      for (int64_t r = 0; r < b; ++r) {
        std::vector<float> row(&logits.values[r * v], &logits.values[r * v] + v);
        std::vector<bool> hit(v, false);
        for (int64_t j = 0; j < std::min<int64_t>(lenRaw[r], l); ++j)
          if (prevRaw[r * l + j] >= 0 && prevRaw[r * l + j] < v)
            hit[prevRaw[r * l + j]] = true;
        float best = -INFINITY;
        int32_t at = 0;
        for (int64_t j = 0; j < v; ++j) {
          float x = row[j];
          if (hit[j])
            x = x > 0.0f ? x / penalty : x * penalty;
          x = x / temperature;
          if (x > best) {
            best = x;
            at = int32_t(j);
          }
        }
        refToken[r] = at;
        refScore[r] = best;
      }
      HostTensor token(DType::i32, {b}), score(DType::f32, {b});
      DeviceRun run;
      for (int64_t s : {b, v, l})
        run.args.push_back(rt::LaunchArg::integer(s));
      run.args.push_back(rt::LaunchArg::real(temperature));
      run.args.push_back(rt::LaunchArg::real(penalty));
      run.addTensor(logits, false);
      run.addTensor(prev, false);
      run.addTensor(lens, false);
      run.addTensor(token, true);
      run.addTensor(score, true);
      k.launch(run.args);
      testing::synchronize();
      run.download(8, token);
      run.download(9, score);
      std::vector<int32_t> got = ints(token);
      fmt::print("[{}] greedy sample chunk {}, V {}: tokens (got/want)", arch, c.chunk, v);
      for (int64_t r = 0; r < b; ++r)
        fmt::print(" {}/{}", got[r], refToken[r]);
      fmt::print("\n");
      for (int64_t r = 0; r < b; ++r) {
        INFO("row " << r);
        CHECK(got[r] == refToken[r]);
        CHECK(score.values[r] == refScore[r]);
      }
      CHECK(refToken[1] != top(1)); // the penalty moved row 1's token
      CHECK(refToken[2] == 70);
    }
}
