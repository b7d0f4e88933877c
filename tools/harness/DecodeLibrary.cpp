//===- DecodeLibrary.cpp - decode kernels by name, with GPU checks --------===//
//
// paged_decode and mla_decode over random paged caches: each sequence's
// pages are a random draw of the cache's pages (so neighbouring keys of a
// sequence are never neighbours in memory), lengths uniform in [min_len,
// max_len], table entries past a sequence's pages poisoned with a page id
// past the cache. Split runs end with decode_combine. Checks compare with a
// float64 reference over the gathered keys; benchmarks fill the caches on
// the device (a decode's time does not depend on the values) and count the
// bytes of the keys each sequence has.
//
//===----------------------------------------------------------------------===//
#include "tessel/harness/LibrarySupport.h"
#include "tessel/kernels/Kernels.h"
#include "tessel/runtime/Driver.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <limits>
#include <numeric>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::harness;

namespace {
/// A batch's lengths and block table over a cache of `pages` pages.
struct PagedLayout {
  int64_t batch = 0, pageSize = 0, perSeq = 0, pages = 0, keys = 0;
  HostTensor lengths{DType::i32, {0}}, table{DType::i32, {0}};

  PagedLayout(const Params &p, int64_t pageSize, std::mt19937_64 &rng)
      : batch(intParam(p, "batch")), pageSize(pageSize) {
    int64_t lo = intParam(p, "min_len"), hi = intParam(p, "max_len");
    if (batch < 1 || lo < 0 || hi < lo)
      throw Error(fmt::format("decode: batch={} min_len={} max_len={}: need batch >= 1 and "
                              "0 <= min_len <= max_len",
                              batch, lo, hi));
    perSeq = std::max<int64_t>(1, (hi + pageSize - 1) / pageSize);
    lengths = HostTensor(DType::i32, {batch});
    std::uniform_int_distribution<int64_t> len(lo, hi);
    std::vector<int64_t> used(batch);
    for (int64_t b = 0; b < batch; ++b) {
      int64_t n = b == 0 ? hi : len(rng); // the longest always runs
      lengths.set(b, float(n));
      used[b] = (n + pageSize - 1) / pageSize;
      keys += n;
    }
    pages = std::max<int64_t>(1, std::accumulate(used.begin(), used.end(), int64_t(0)));
    std::vector<int32_t> order(pages);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    table = HostTensor(DType::i32, {batch, perSeq});
    int64_t next = 0;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < perSeq; ++i)
        table.set(b * perSeq + i, i < used[b] ? float(order[next++]) : float(1 << 30));
  }
  int64_t length(int64_t b) const { return int64_t(lengths.values[b]); }
  /// The cache row of key `j` of sequence `b`.
  int64_t row(int64_t b, int64_t j) const {
    return int64_t(table.values[b * perSeq + j / pageSize]) * pageSize + j % pageSize;
  }
};

/// The splits a run of kernel `k` asks for: `splits`, or (0) what the
/// library would pick.
template <class Config>
int64_t runSplits(Kernel &k, const Params &p, const Config &c, int64_t blocks) {
  bool split = c.split;
  int64_t blockN = c.blockN;
  if (!split) return 1;
  int64_t asked = intParam(p, "splits");
  if (asked > 0) return asked;
  rt::Driver &d = rt::Driver::get();
  int64_t slots = int64_t(k.loadedKernel().residentBlocksPerSm()) *
                  d.multiprocessors(d.currentDevice());
  return decodeSplits(blocks, slots, (intParam(p, "max_len") + blockN - 1) / blockN,
                      splitRule(c));
}

/// Softmax attention of one query row over `n` keys, in float64: key j's
/// score is score(j), its value row value(j, e).
template <class Score, class Value>
void referenceRow(int64_t n, int64_t dim, double scale, Score score, Value value, double *out) {
  std::fill(out, out + dim, 0.0);
  if (n == 0) return;
  std::vector<double> s(n);
  double top = -INFINITY, sum = 0;
  for (int64_t j = 0; j < n; ++j) top = std::max(top, s[j] = score(j) * scale);
  for (int64_t j = 0; j < n; ++j) sum += s[j] = std::exp(s[j] - top);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t e = 0; e < dim; ++e) out[e] += s[j] / sum * value(j, e);
}

/// A decode launch: the decode kernel writing o directly, or (split) its
/// partial rows and then decode_combine into o.
struct DecodeLaunch {
  Kernel &decode;
  std::optional<Kernel> combine;
  DeviceRun run, combineRun;

  explicit DecodeLaunch(Kernel &decode) : decode(decode) {}
  /// Appends o (or, for a split kernel, S and the partial rows) to the
  /// decode's arguments; a split kernel may run with S = 1.
  void addOutputs(const HostTensor &out, bool split, int64_t splits) {
    if (!split) {
      run.addTensor(out, true);
      return;
    }
    // partial_o [S, batch, heads, dim] and partial_lse [S, batch, heads];
    // the combine sees them as [S, batch x heads, ...].
    const int64_t batch = out.shape[0], heads = out.shape[1], dim = out.shape[2];
    const int64_t rows = batch * heads;
    run.args.insert(run.args.begin() + 4, rt::LaunchArg::integer(splits));
    run.addTensor(HostTensor(DType::f32, {splits, batch, heads, dim}), true);
    run.addTensor(HostTensor(DType::f32, {splits, batch, heads}), true);
    auto flat = [&](size_t fromEnd, std::vector<int64_t> shape) {
      const rt::DeviceBuffer &b = *run.buffers[run.buffers.size() - fromEnd];
      return rt::LaunchArg::view(
          rt::TensorView::contiguous(b.ptr(), rt::ScalarType::F32, std::move(shape), b.device()));
    };
    DecodeCombineConfig cc;
    cc.dtype = out.type;
    cc.headDim = dim;
    cc.rows = std::max<int64_t>(1, 4096 / dim);
    // Plain tile code: the sm_80 build runs on every GPU the decode runs on.
    Program program = decodeCombine(cc);
    combine.emplace(compile(program, CompileOptions{"sm_80"}));
    combineRun.args = {rt::LaunchArg::integer(splits), rt::LaunchArg::integer(rows),
                       flat(2, {splits, rows, dim}), flat(1, {splits, rows})};
    combineRun.addTensor(HostTensor(out.type, {rows, dim}), true);
  }
  void launch() {
    decode.launch(run.args);
    if (combine) combine->launch(combineRun.args);
  }
  /// Launches once, waits and downloads the output into `out`.
  void runOnce(HostTensor &out) {
    launch();
    synchronize();
    download(out);
  }
  /// The output after launch() and a synchronisation.
  void download(HostTensor &out) const {
    if (combine) combineRun.download(4, out);
    else run.download(run.args.size() - 1, out);
  }
  double time(int reps) {
    rt::LoadedKernel &main = decode.loadedFor(run.args);
    if (!combine) return main.time({run.args}, 10, reps);
    rt::LoadedKernel &tail = combine->loadedFor(combineRun.args);
    return rt::timeMedian([&](int) {
      main.launch(run.args);
      tail.launch(combineRun.args);
    }, 10, reps);
  }
};

// --- GQA ----------------------------------------------------------------

CheckResult checkPaged(Kernel &k, const Params &p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  PagedDecodeConfig c = pagedDecodeSettings().read(p);
  PagedLayout layout(p, c.pageSize, rng);
  int64_t kvHeads = intParam(p, "heads_kv"), heads = kvHeads * c.group, d = c.headDim;
  HostTensor q(c.dtype, {layout.batch, heads, d}), out(c.dtype, {layout.batch, heads, d});
  DType cacheType = c.fp8Cache ? DType::f8e4m3 : c.dtype;
  HostTensor kc(cacheType, {layout.pages, c.pageSize, kvHeads, d}), vc = kc;
  randomize(q, rng);
  randomize(kc, rng);
  randomize(vc, rng);
  double scale = 1.0 / std::sqrt(double(d));
  // An FP8 cache's codes stand for code * scale.
  std::uniform_real_distribution<float> scaleDist(0.25f, 4.0f);
  float kScale = c.fp8Cache ? scaleDist(rng) : 1.0f, vScale = c.fp8Cache ? scaleDist(rng) : 1.0f;
  int64_t splits = runSplits(k, p, c, kvHeads * layout.batch);
  DecodeLaunch launch(k);
  DeviceRun &run = launch.run;
  for (int64_t v : {layout.batch, kvHeads, layout.pages, layout.perSeq})
    run.args.push_back(rt::LaunchArg::integer(v));
  run.args.push_back(rt::LaunchArg::real(float(scale)));
  if (c.fp8Cache) {
    run.args.push_back(rt::LaunchArg::real(kScale));
    run.args.push_back(rt::LaunchArg::real(vScale));
  }
  for (const HostTensor *t : {&q, &kc, &vc, &layout.table, &layout.lengths}) run.addTensor(*t, false);
  launch.addOutputs(out, c.split, splits);
  launch.runOnce(out);
  std::vector<double> ref(out.size());
  for (int64_t b = 0; b < layout.batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      int64_t kvh = h / c.group;
      const float *qr = &q.values[(b * heads + h) * d];
      auto at = [&](int64_t j, int64_t e) { return (layout.row(b, j) * kvHeads + kvh) * d + e; };
      referenceRow(
          layout.length(b), d, scale,
          [&](int64_t j) {
            double dot = 0;
            for (int64_t e = 0; e < d; ++e) dot += double(qr[e]) * kc.values[at(j, e)];
            return dot * kScale;
          },
          [&](int64_t j, int64_t e) { return double(vc.values[at(j, e)]) * vScale; },
          &ref[(b * heads + h) * d]);
    }
  CheckResult r;
  r.shape = fmt::format("batch={} heads={}/{} head_dim={} page={} keys {}..{} splits={} {}{}",
                        layout.batch, heads, kvHeads, d, c.pageSize, intParam(p, "min_len"),
                        intParam(p, "max_len"), splits, name(c.dtype),
                        c.fp8Cache ? " e4m3 cache" : "");
  r.relError = relativeError(out, ref);
  r.tolerance = toleranceFor(c.dtype);
  r.passed = r.relError < r.tolerance;
  r.ms = checkTime([&] { launch.launch(); });
  return r;
}

/// A device buffer of 16-bit or 8-bit elements whose every byte is 0x3c:
/// about 1.06 in f16, 0.0115 in bf16 and 1.5 in e4m3, finite (a decode's
/// time does not depend on its values, and drawing gigabytes of random keys
/// on the host would take longer than the benchmark).
rt::LaunchArg filledArg(DeviceRun &run, DType t, std::vector<int64_t> shape) {
  int64_t elements = 1;
  for (int64_t e : shape) elements *= e;
  auto buffer = std::make_unique<rt::DeviceBuffer>(size_t(elements) * byteSize(t));
  buffer->fillBytes(0x3c);
  rt::ScalarType type = t == DType::f16      ? rt::ScalarType::F16
                        : t == DType::f8e4m3 ? rt::ScalarType::F8E4M3
                                             : rt::ScalarType::BF16;
  rt::LaunchArg arg = rt::LaunchArg::view(
      rt::TensorView::contiguous(buffer->ptr(), type, std::move(shape), buffer->device()));
  run.buffers.push_back(std::move(buffer));
  run.args.push_back(arg);
  return arg;
}

BenchResult benchPaged(Kernel &k, const Params &p, int reps) {
  std::mt19937_64 rng(1);
  PagedDecodeConfig c = pagedDecodeSettings().read(p);
  PagedLayout layout(p, c.pageSize, rng);
  int64_t kvHeads = intParam(p, "heads_kv"), heads = kvHeads * c.group, d = c.headDim;
  int64_t splits = runSplits(k, p, c, kvHeads * layout.batch);
  DecodeLaunch launch(k);
  DeviceRun &run = launch.run;
  for (int64_t v : {layout.batch, kvHeads, layout.pages, layout.perSeq})
    run.args.push_back(rt::LaunchArg::integer(v));
  run.args.push_back(rt::LaunchArg::real(float(1.0 / std::sqrt(double(d)))));
  if (c.fp8Cache)
    for (int i = 0; i < 2; ++i) run.args.push_back(rt::LaunchArg::real(1.0f));
  HostTensor q(c.dtype, {layout.batch, heads, d}), out = q;
  randomize(q, rng);
  run.addTensor(q, false);
  DType cacheType = c.fp8Cache ? DType::f8e4m3 : c.dtype;
  for (int i = 0; i < 2; ++i) filledArg(run, cacheType, {layout.pages, c.pageSize, kvHeads, d});
  run.addTensor(layout.table, false);
  run.addTensor(layout.lengths, false);
  launch.addOutputs(out, c.split, splits);
  BenchResult r;
  r.ms = launch.time(reps);
  double bytes = double(layout.keys) * kvHeads * d * 2 * byteSize(cacheType) + 2.0 * q.bytes.size() +
                 double(layout.table.bytes.size());
  r.gbps = bytes / r.ms / 1e6;
  r.tflops = 4.0 * double(layout.keys) * heads * d / r.ms / 1e9;
  r.shape = fmt::format("batch={} heads={}/{} head_dim={} page={} keys {}..{} splits={}",
                        layout.batch, heads, kvHeads, d, c.pageSize, intParam(p, "min_len"),
                        intParam(p, "max_len"), splits);
  return r;
}

// --- MLA ----------------------------------------------------------------

CheckResult checkMla(Kernel &k, const Params &p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  MlaDecodeConfig c = mlaDecodeSettings().read(p);
  PagedLayout layout(p, c.pageSize, rng);
  int64_t heads = intParam(p, "heads"), width = c.latent + c.rope, lat = c.latent;
  HostTensor q(c.dtype, {layout.batch, heads, width}), out(c.dtype, {layout.batch, heads, lat});
  HostTensor cache(c.dtype, {layout.pages, c.pageSize, width});
  randomize(q, rng);
  randomize(cache, rng);
  double scale = 1.0 / std::sqrt(double(width));
  int64_t blocks = (heads + c.blockM - 1) / c.blockM * layout.batch;
  int64_t splits = runSplits(k, p, c, blocks);
  DecodeLaunch launch(k);
  DeviceRun &run = launch.run;
  for (int64_t v : {layout.batch, heads, layout.pages, layout.perSeq})
    run.args.push_back(rt::LaunchArg::integer(v));
  run.args.push_back(rt::LaunchArg::real(float(scale)));
  for (const HostTensor *t : {&q, &cache, &layout.table, &layout.lengths}) run.addTensor(*t, false);
  launch.addOutputs(out, c.split, splits);
  launch.runOnce(out);
  std::vector<double> ref(out.size());
  for (int64_t b = 0; b < layout.batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      const float *qr = &q.values[(b * heads + h) * width];
      auto row = [&](int64_t j) { return &cache.values[layout.row(b, j) * width]; };
      referenceRow(
          layout.length(b), lat, scale,
          [&](int64_t j) {
            const float *kr = row(j);
            double dot = 0;
            for (int64_t e = 0; e < width; ++e) dot += double(qr[e]) * kr[e];
            return dot;
          },
          [&](int64_t j, int64_t e) { return double(row(j)[e]); }, &ref[(b * heads + h) * lat]);
    }
  CheckResult r;
  r.shape = fmt::format("batch={} heads={} latent={}+{} page={} keys {}..{} splits={} {}",
                        layout.batch, heads, lat, c.rope, c.pageSize, intParam(p, "min_len"),
                        intParam(p, "max_len"), splits, name(c.dtype));
  r.relError = relativeError(out, ref);
  r.tolerance = toleranceFor(c.dtype);
  r.passed = r.relError < r.tolerance;
  r.ms = checkTime([&] { launch.launch(); });
  return r;
}

BenchResult benchMla(Kernel &k, const Params &p, int reps) {
  std::mt19937_64 rng(1);
  MlaDecodeConfig c = mlaDecodeSettings().read(p);
  PagedLayout layout(p, c.pageSize, rng);
  int64_t heads = intParam(p, "heads"), width = c.latent + c.rope, lat = c.latent;
  int64_t blocks = (heads + c.blockM - 1) / c.blockM * layout.batch;
  int64_t splits = runSplits(k, p, c, blocks);
  DecodeLaunch launch(k);
  DeviceRun &run = launch.run;
  for (int64_t v : {layout.batch, heads, layout.pages, layout.perSeq})
    run.args.push_back(rt::LaunchArg::integer(v));
  run.args.push_back(rt::LaunchArg::real(float(1.0 / std::sqrt(double(width)))));
  HostTensor q(c.dtype, {layout.batch, heads, width}), out(c.dtype, {layout.batch, heads, lat});
  randomize(q, rng);
  run.addTensor(q, false);
  filledArg(run, c.dtype, {layout.pages, c.pageSize, width});
  run.addTensor(layout.table, false);
  run.addTensor(layout.lengths, false);
  launch.addOutputs(out, c.split, splits);
  BenchResult r;
  r.ms = launch.time(reps);
  r.tflops = 2.0 * double(layout.keys) * heads * (width + lat) / r.ms / 1e9;
  r.gbps = (double(layout.keys) * width * 2 + q.bytes.size() + out.bytes.size()) / r.ms / 1e6;
  r.shape = fmt::format("batch={} heads={} latent={}+{} page={} keys {}..{} splits={}",
                        layout.batch, heads, lat, c.rope, c.pageSize, intParam(p, "min_len"),
                        intParam(p, "max_len"), splits);
  return r;
}

std::vector<Params> pagedCandidates(const std::string &arch, const Params &problem) {
  // 16 to 48 KB of K and V a stage at head_dim 128: two to four stages keep
  // two or more blocks an SM (the measured best on an H100 was 64 keys in
  // three stages), one block an SM with deeper pipelines for comparison.
  std::vector<Params> out;
  int64_t page = intParam(problem, "page_size");
  for (auto [bn, stages] : {std::pair{32, 4}, {32, 6}, {64, 2}, {64, 3}, {64, 4}, {128, 2}})
    for (int threads : {64, 128}) {
      if (bn > page && bn / page > 16) continue;
      out.push_back({{"block_n", std::to_string(bn)}, {"stages", std::to_string(stages)},
                     {"threads", std::to_string(threads)}});
    }
  return out;
}

std::vector<Params> mlaCandidates(const std::string &arch, const Params &problem) {
  std::vector<Params> out;
  for (int64_t bn : {32, 64})
    for (int stages : {1, 2})
      out.push_back({{"block_n", std::to_string(bn)}, {"stages", std::to_string(stages)}});
  return out;
}
} // namespace

std::vector<LibraryKernel> tessel::harness::decodeKernels() {
  return {
      {"paged_decode",
       "GQA decode of one query token per sequence over a paged KV cache (block table, lengths "
       "on the device), split along the keys with a combine kernel when split=1",
       defaultsFrom(pagedDecodeSettings(), {{"batch", "6"},
                                            {"heads_kv", "2"},
                                            {"min_len", "1"},
                                            {"max_len", "700"},
                                            {"splits", "0"}}),
       builtFrom(pagedDecodeSettings(), pagedDecode), checkPaged, benchPaged, {},
       {{"dtype", "head_dim", "group", "page_size", "split", "fp8_cache"},
        {"batch", "heads_kv", "max_len"},
        pagedCandidates}},
      {"mla_decode",
       "MLA decode: every head over one paged latent cache (latent + rope columns; values the "
       "latent ones), split along the keys with a combine kernel when split=1",
       defaultsFrom(mlaDecodeSettings(), {{"batch", "3"},
                                          {"heads", "128"},
                                          {"min_len", "1"},
                                          {"max_len", "300"},
                                          {"splits", "0"}}),
       builtFrom(mlaDecodeSettings(), mlaDecode), checkMla, benchMla,
       [](const std::string &arch, const Params &) {
         return Params{{"block_n", std::to_string(mlaDefaultKeys(arch))}};
       },
       {{"dtype", "latent", "rope", "page_size", "split"}, {"batch", "heads", "max_len"}, mlaCandidates}},
  };
}
