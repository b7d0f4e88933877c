//===- DecodeCalls.cpp - tessel::decode on views --------------------------===//
//
// Checks every view before anything compiles or launches, picks the key
// splits from the grid and the GPU, and runs the decode kernel, then (split)
// the combine kernel on the same stream, with the partial rows in the
// caller's workspace or in memory allocated and freed on the stream.
//
//===----------------------------------------------------------------------===//
#include "common/LibraryCalls.h"
#include "tessel/kernels/Tuned.h"
#include "tessel/runtime/Driver.h"

#include <bit>
#include <cmath>
#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;
using rt::LaunchArg;
using rt::ScalarType;

namespace {
/// What both decode calls take apart from their caches.
struct DecodeProblem {
  int64_t batch = 0, heads = 0, width = 0, outWidth = 0, pages = 0, pageSize = 0, perSeq = 0;
  DType dtype = DType::bf16;
  bool fp8Cache = false; // paged: K and V as f8e4m3 with scales
  int device = 0;
  double scale = 0;
};

void checkTables(const TensorView &q, const TensorView &blockTable, const TensorView &lengths,
                 DecodeProblem &p) {
  requireView(blockTable, "block_table", 2, {ScalarType::I32});
  requireView(lengths, "lengths", 1, {ScalarType::I32});
  if (blockTable.shape[0] != p.batch)
    throw Error(fmt::format("block_table is {}: it needs a row per sequence of q {} ({} rows)",
                            blockTable.str(), q.str(), p.batch));
  requireShape(lengths, "lengths", {p.batch});
  p.perSeq = blockTable.shape[1];
  if (p.perSeq < 1) throw Error(fmt::format("block_table is {}: it lists no page", blockTable.str()));
}

void checkPageSize(int64_t pageSize, const TensorView &cache, const char *what) {
  if (pageSize < 16 || pageSize > 256 || !std::has_single_bit(uint64_t(pageSize)))
    throw Error(fmt::format("{} is {}: its page size (dimension 1) is {}; decode takes pages of "
                            "16, 32, 64, 128 or 256 keys",
                            what, cache.str(), pageSize));
}

/// The options both calls share, checked before anything compiles.
void checkOptions(const decode::Options &o) {
  if (o.splits < 0 || o.splits > 256)
    throw Error(fmt::format("splits={} is not in [0, 256] (0 picks them)", o.splits));
  if (o.maxSeqlen < 0)
    throw Error(fmt::format("maxSeqlen={} is negative (0 takes the block table's pages)",
                            o.maxSeqlen));
}

double scaleOf(double asked, int64_t width) {
  if (asked < 0 || !std::isfinite(asked))
    throw Error(fmt::format("scale={} is not a finite positive number (0 picks 1/sqrt(head_dim))",
                            asked));
  return asked > 0 ? asked : 1.0 / std::sqrt(double(width));
}

/// The splits of a call: asked for, or decodeSplits of the grid over the
/// blocks the device holds at once (`perSm` a multiprocessor).
int64_t splitsOf(const decode::Options &o, int64_t blocks, int64_t keysPerStep, int perSm,
                 DecodeSplitRule rule, const DecodeProblem &p) {
  int64_t maxKeys = o.maxSeqlen > 0 ? o.maxSeqlen : p.perSeq * p.pageSize;
  if (o.splits > 0) return o.splits;
  int64_t slots = int64_t(perSm) * rt::Driver::get().multiprocessors(p.device);
  return decodeSplits(blocks, slots, (maxKeys + keysPerStep - 1) / keysPerStep, rule);
}

/// What names a decode problem in `tessel tune`'s records: the settings
/// that say what it computes (split as tuned: unsplit) and its extents.
struct TuneBucket {
  std::vector<std::pair<std::string, std::string>> problem;
  std::vector<std::pair<std::string, int64_t>> extents;
};

/// The kernel `build` makes of `config` with `split` set as the grid asks
/// (the unsplit kernel's occupancy decides: the split one differs only in
/// its outputs), named in `choice`; returns it and its splits. Without a
/// configuration of the caller's, the one `tessel tune` recorded for the
/// device and bucket, when there is one.
template <class Config>
std::pair<std::shared_ptr<Kernel>, int64_t>
decodeKernel(const char *name, Config config, const SettingsTable<Config> &table,
             Program (*build)(const Config &), int64_t blocks, const decode::Options &o,
             bool configured, const TuneBucket &bucket, const DecodeProblem &p, Choice &choice) {
  std::string tunedOn;
  config.split = false;
  const Config untuned = config;
  if (!configured && o.tuned) {
    auto [record, who] = tunedRecord(name, p.device, choice.arch,
                                     tunedBucket(bucket.problem, bucket.extents));
    if (record && table.apply(*record, config)) tunedOn = who;
  }
  auto compileWith = [&](const Config &c) {
    choice.config = std::string(name) + " " + table.describe(c);
    return cachedKernel(choice.config, choice.arch, [&] { return build(c); }, choice.compiled);
  };
  std::shared_ptr<Kernel> kernel = compileTunedOr(config, untuned, tunedOn, name, compileWith);
  if (tunedOn.empty()) config = untuned;
  int perSm = o.splits ? 1 : kernel->loadedKernel().residentBlocksPerSm(p.device);
  int64_t splits = splitsOf(o, blocks, config.blockN, perSm, splitRule(config), p);
  if (splits > 1) {
    config.split = true;
    bool compiledUnsplit = choice.compiled;
    kernel = compileWith(config);
    choice.compiled = choice.compiled || compiledUnsplit;
  }
  if (!tunedOn.empty()) choice.config += " (tuned on " + tunedOn + ")";
  return {kernel, splits};
}

size_t partialBytes(int64_t splits, const DecodeProblem &p) {
  if (splits <= 1) return 0;
  size_t rows = size_t(splits * p.batch * p.heads);
  return (rows * size_t(p.outWidth) * 4 + 255) / 256 * 256 + rows * 4;
}

/// Runs `decodeKernel` with the partial rows' views (split) or unsplit,
/// then the combine kernel into `out`.
void launchDecode(const std::shared_ptr<Kernel> &decodeKernel, std::vector<LaunchArg> args,
                  const TensorView &out, int64_t splits, const DecodeProblem &p,
                  const decode::Options &o, Choice &choice, CUstream stream) {
  if (splits <= 1) {
    args.push_back(LaunchArg::view(out));
    decodeKernel->launch(args, stream);
    return;
  }
  DecodeCombineConfig cc;
  cc.dtype = p.dtype;
  cc.headDim = p.outWidth;
  cc.rows = std::max<int64_t>(1, 4096 / p.outWidth);
  bool compiled = false;
  std::string key = "decode_combine " + decodeCombineSettings().describe(cc);
  std::shared_ptr<Kernel> combine =
      cachedKernel(key, choice.arch, [&] { return decodeCombine(cc); }, compiled);
  choice.compiled = choice.compiled || compiled;
  choice.config += fmt::format(" splits={} + {}", splits, key);
  size_t bytes = partialBytes(splits, p);
  rt::ScopedDevice onDevice(p.device);
  rt::Driver::get().makeCurrent();
  StreamScratch scratch(o.workspace, o.workspaceBytes, bytes, stream,
                        "this decode (its WorkspaceBytes call)");
  CUdeviceptr base = scratch.base();
  size_t lseAt = (size_t(splits * p.batch * p.heads) * size_t(p.outWidth) * 4 + 255) / 256 * 256;
  TensorView partialO = TensorView::contiguous(base, ScalarType::F32,
                                               {splits, p.batch, p.heads, p.outWidth}, p.device);
  TensorView partialLse =
      TensorView::contiguous(base + lseAt, ScalarType::F32, {splits, p.batch, p.heads}, p.device);
  args.insert(args.begin() + 4, LaunchArg::integer(splits));
  args.push_back(LaunchArg::view(partialO));
  args.push_back(LaunchArg::view(partialLse));
  decodeKernel->launch(args, stream);
  int64_t rows = p.batch * p.heads;
  TensorView flatO = partialO, flatLse = partialLse, flatOut = out;
  flatO.shape = {splits, rows, p.outWidth};
  flatO.strides = flatO.contiguousStrides();
  flatLse.shape = {splits, rows};
  flatLse.strides = flatLse.contiguousStrides();
  flatOut.shape = {rows, p.outWidth};
  flatOut.strides = flatOut.contiguousStrides();
  combine->launch({LaunchArg::integer(splits), LaunchArg::integer(rows), LaunchArg::view(flatO),
                   LaunchArg::view(flatLse), LaunchArg::view(flatOut)},
                  stream);
}

// --- GQA ----------------------------------------------------------------

DecodeProblem checkPaged(const TensorView &q, const TensorView &kCache, const TensorView &vCache,
                         const TensorView &blockTable, const TensorView &lengths,
                         const TensorView &out, const decode::PagedOptions &o) {
  requireView(q, "q", 3, {ScalarType::F16, ScalarType::BF16});
  requireView(kCache, "k_cache", 4, {q.dtype, ScalarType::F8E4M3});
  requireView(vCache, "v_cache", 4, {kCache.dtype});
  for (auto [what, value] : {std::pair{"kScale", o.kScale}, {"vScale", o.vScale}})
    if (!(value > 0) || !std::isfinite(value))
      throw Error(fmt::format("{}={} is not a finite positive number", what, value));
  requireView(out, "out", 3, {q.dtype});
  requireShape(out, "out", q.shape);
  requireShape(vCache, "v_cache", kCache.shape);
  DecodeProblem p;
  p.batch = q.shape[0], p.heads = q.shape[1], p.width = q.shape[2], p.outWidth = p.width;
  p.pages = kCache.shape[0], p.pageSize = kCache.shape[1];
  p.dtype = dtypeOf(q.dtype);
  int64_t kvHeads = kCache.shape[2];
  if (kCache.shape[3] != p.width)
    throw Error(fmt::format("k_cache is {}: its head_dim (dimension 3) must be q's, {}",
                            kCache.str(), p.width));
  if (kvHeads < 1 || p.heads % kvHeads)
    throw Error(fmt::format("q has {} heads and k_cache {} (dimension 2): heads_q must be a "
                            "multiple of heads_kv",
                            p.heads, kvHeads));
  p.fp8Cache = kCache.dtype == ScalarType::F8E4M3;
  checkPageSize(p.pageSize, kCache, "k_cache");
  checkTables(q, blockTable, lengths, p);
  p.device = commonDevice({&q, &kCache, &vCache, &blockTable, &lengths, &out});
  p.scale = scaleOf(o.scale, p.width);
  checkOptions(o);
  return p;
}

PagedDecodeConfig pagedConfig(const DecodeProblem &p, int64_t kvHeads,
                              const decode::PagedOptions &o) {
  PagedDecodeConfig c = o.config.value_or(PagedDecodeConfig{});
  if (!o.config) {
    // 64 keys a step (a page of 64 or more, or up to 4 smaller pages) in
    // three stages: at head_dim 128, 96 KB of K and V tiles in flight a
    // block and two blocks an SM. On an H100 (batch 64, 8 kv heads, 8k
    // keys, 16-key pages) that ran at 2.97 TB/s, against 2.49 with two
    // stages and 1.89 with four or six (one block an SM). At head_dim 256,
    // 32 keys a step keep the same bytes.
    c.blockN = p.width > 128 ? 32 : 64;
    c.stages = 3;
  }
  c.dtype = p.dtype;
  c.headDim = p.width;
  c.group = p.heads / kvHeads;
  c.pageSize = p.pageSize;
  c.fp8Cache = p.fp8Cache;
  return c;
}

int64_t longestOf(const DecodeProblem &p, const decode::Options &o) {
  return std::max<int64_t>(1, o.maxSeqlen > 0 ? o.maxSeqlen : p.perSeq * p.pageSize);
}

/// The bucket `tessel tune paged_decode` files a record under.
TuneBucket pagedBucket(const DecodeProblem &p, int64_t kvHeads, const decode::PagedOptions &o) {
  return {{{"dtype", name(p.dtype)},
           {"head_dim", std::to_string(p.width)},
           {"group", std::to_string(p.heads / kvHeads)},
           {"page_size", std::to_string(p.pageSize)},
           {"split", "0"},
           {"fp8_cache", p.fp8Cache ? "1" : "0"}},
          {{"batch", p.batch}, {"heads_kv", kvHeads}, {"max_len", longestOf(p, o)}}};
}
} // namespace

size_t decode::pagedWorkspaceBytes(const TensorView &q, const TensorView &kCache,
                                   const TensorView &blockTable, const PagedOptions &o) {
  if (q.shape.size() != 3 || kCache.shape.size() != 4 || blockTable.shape.size() != 2)
    throw Error("pagedWorkspaceBytes: q, k_cache and block_table need 3, 4 and 2 dimensions");
  DecodeProblem p;
  p.batch = q.shape[0], p.heads = q.shape[1], p.width = p.outWidth = q.shape[2];
  p.pageSize = kCache.shape[1], p.perSeq = blockTable.shape[1];
  p.device = q.device;
  int64_t kvHeads = std::max<int64_t>(1, kCache.shape[2]);
  p.dtype = dtypeOf(q.dtype);
  p.fp8Cache = kCache.dtype == ScalarType::F8E4M3;
  Choice choice;
  choice.arch = targetFor(o.arch, p.device);
  int64_t splits = decodeKernel("paged_decode", pagedConfig(p, kvHeads, o), pagedDecodeSettings(),
                                pagedDecode, kvHeads * p.batch, o, o.config.has_value(),
                                pagedBucket(p, kvHeads, o), p, choice)
                       .second;
  return partialBytes(splits, p);
}

Choice decode::paged(const TensorView &q, const TensorView &kCache, const TensorView &vCache,
                     const TensorView &blockTable, const TensorView &lengths,
                     const TensorView &out, const PagedOptions &o, CUstream stream) {
  DecodeProblem p = checkPaged(q, kCache, vCache, blockTable, lengths, out, o);
  int64_t kvHeads = kCache.shape[2];
  if (p.fp8Cache)
    warnOnce("tessel: warning: paged_decode widens an f8e4m3 cache to q's type in shared "
             "memory before its products: the cache takes half the memory, but the call runs "
             "about 1.2x longer than with a cache in q's type, not shorter (0.46 against 0.38 ms "
             "at batch 64, 8 kv heads, 4096 keys on an H100)");
  Choice choice;
  choice.arch = targetFor(o.arch, p.device);
  auto [kernel, splits] =
      decodeKernel("paged_decode", pagedConfig(p, kvHeads, o), pagedDecodeSettings(), pagedDecode,
                   kvHeads * p.batch, o, o.config.has_value(), pagedBucket(p, kvHeads, o), p, choice);
  std::vector<LaunchArg> args = {LaunchArg::integer(p.batch), LaunchArg::integer(kvHeads),
                                 LaunchArg::integer(p.pages), LaunchArg::integer(p.perSeq),
                                 LaunchArg::real(float(p.scale))};
  if (p.fp8Cache) {
    args.push_back(LaunchArg::real(float(o.kScale)));
    args.push_back(LaunchArg::real(float(o.vScale)));
  }
  for (const TensorView *view : {&q, &kCache, &vCache, &blockTable, &lengths})
    args.push_back(LaunchArg::view(*view));
  launchDecode(kernel, std::move(args), out, splits, p, o, choice, stream);
  return choice;
}

// --- MLA ----------------------------------------------------------------

namespace {
DecodeProblem checkMla(const TensorView &q, const TensorView &cache, const TensorView &blockTable,
                       const TensorView &lengths, const TensorView &out,
                       const decode::MlaOptions &o) {
  requireView(q, "q", 3, {ScalarType::F16, ScalarType::BF16});
  requireView(cache, "cache", 3, {q.dtype});
  requireView(out, "out", 3, {q.dtype});
  DecodeProblem p;
  p.batch = q.shape[0], p.heads = q.shape[1], p.width = q.shape[2], p.outWidth = o.latent;
  p.pages = cache.shape[0], p.pageSize = cache.shape[1];
  p.dtype = dtypeOf(q.dtype);
  if (cache.shape[2] != p.width)
    throw Error(fmt::format("cache is {}: its rows (dimension 2) must be as wide as q's, {}",
                            cache.str(), p.width));
  if (o.latent < 64 || o.latent > 512 || o.latent % 64 || o.latent > p.width ||
      (p.width - o.latent) % 16 || p.width - o.latent > 128)
    throw Error(fmt::format("latent={} with rows of {}: the latent part must be a multiple of 64 "
                            "up to 512, and the rope part after it a multiple of 16 up to 128",
                            o.latent, p.width));
  requireShape(out, "out", {p.batch, p.heads, o.latent});
  checkPageSize(p.pageSize, cache, "cache");
  checkTables(q, blockTable, lengths, p);
  p.device = commonDevice({&q, &cache, &blockTable, &lengths, &out});
  p.scale = scaleOf(o.scale, p.width);
  checkOptions(o);
  return p;
}

MlaDecodeConfig mlaConfig(const DecodeProblem &p, const decode::MlaOptions &o,
                          const std::string &arch) {
  MlaDecodeConfig c = o.config.value_or(MlaDecodeConfig{});
  if (!o.config) c.blockN = mlaDefaultKeys(arch);
  c.dtype = p.dtype;
  c.latent = o.latent;
  c.rope = p.width - o.latent;
  c.pageSize = p.pageSize;
  return c;
}

/// The bucket `tessel tune mla_decode` files a record under.
TuneBucket mlaBucket(const DecodeProblem &p, const decode::MlaOptions &o) {
  return {{{"dtype", name(p.dtype)},
           {"latent", std::to_string(o.latent)},
           {"rope", std::to_string(p.width - o.latent)},
           {"page_size", std::to_string(p.pageSize)},
           {"split", "0"}},
          {{"batch", p.batch}, {"heads", p.heads}, {"max_len", longestOf(p, o)}}};
}
} // namespace

size_t decode::mlaWorkspaceBytes(const TensorView &q, const TensorView &cache,
                                 const TensorView &blockTable, const MlaOptions &o) {
  if (q.shape.size() != 3 || cache.shape.size() != 3 || blockTable.shape.size() != 2)
    throw Error("mlaWorkspaceBytes: q, cache and block_table need 3 dimensions, 3 and 2");
  DecodeProblem p;
  p.batch = q.shape[0], p.heads = q.shape[1], p.width = q.shape[2], p.outWidth = o.latent;
  p.pageSize = cache.shape[1], p.perSeq = blockTable.shape[1];
  p.device = q.device;
  p.dtype = dtypeOf(q.dtype);
  Choice choice;
  choice.arch = targetFor(o.arch, p.device);
  MlaDecodeConfig c = mlaConfig(p, o, choice.arch);
  int64_t blocks = (p.heads + c.blockM - 1) / c.blockM * p.batch;
  return partialBytes(decodeKernel("mla_decode", c, mlaDecodeSettings(), mlaDecode, blocks, o,
                                   o.config.has_value(), mlaBucket(p, o), p, choice)
                          .second,
                      p);
}

Choice decode::mla(const TensorView &q, const TensorView &cache, const TensorView &blockTable,
                   const TensorView &lengths, const TensorView &out, const MlaOptions &o,
                   CUstream stream) {
  DecodeProblem p = checkMla(q, cache, blockTable, lengths, out, o);
  Choice choice;
  choice.arch = targetFor(o.arch, p.device);
  MlaDecodeConfig c = mlaConfig(p, o, choice.arch);
  auto [kernel, splits] =
      decodeKernel("mla_decode", c, mlaDecodeSettings(), mlaDecode,
                   (p.heads + c.blockM - 1) / c.blockM * p.batch, o, o.config.has_value(),
                   mlaBucket(p, o), p, choice);
  std::vector<LaunchArg> args = {LaunchArg::integer(p.batch), LaunchArg::integer(p.heads),
                                 LaunchArg::integer(p.pages), LaunchArg::integer(p.perSeq),
                                 LaunchArg::real(float(p.scale)), LaunchArg::view(q),
                                 LaunchArg::view(cache), LaunchArg::view(blockTable),
                                 LaunchArg::view(lengths)};
  launchDecode(kernel, std::move(args), out, splits, p, o, choice, stream);
  return choice;
}
