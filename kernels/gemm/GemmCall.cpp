//===- GemmCall.cpp - tessel::gemm on views --------------------------------===//
#include "common/LibraryCalls.h"
#include "tessel/kernels/Tuned.h"
#include "tessel/runtime/Cache.h"
#include "tessel/runtime/Driver.h"

#include <fmt/format.h>
#include <mutex>
#include <tuple>
#include <unordered_map>

using namespace tessel;
using namespace tessel::kernels;
using rt::LaunchArg;
using rt::ScalarType;

/// The tiles each target gets unless the caller gives a configuration:
/// sm_90a the warp-specialized 128x256x64 pipeline of four stages with
/// rasterized blocks (three and a TMA-store epilogue for a 16-bit C); sm_100a tcgen05.mma into tensor memory at 128x256
/// (every TMEM lane; the widest single instruction); sm_80 mma.sync at
/// 64x64x32.
GemmConfig kernels::defaultGemmConfig(const std::string &arch) {
  GemmConfig c;
  if (arch == "sm_90a") {
    c.blockM = 128;
    c.blockN = 256;
    c.blockK = 64;
    c.threads = 256;
    c.stages = 4;
    c.swizzlePanel = 8;
  } else if (arch.rfind("sm_100a", 0) == 0) {
    c.instruction = GemmInstruction::tcgen05;
    c.blockM = 128;
    c.blockN = 256;
    c.blockK = 64;
    c.stages = 3;
  }
  return c;
}

namespace {
/// The sm_90a tiles of an 8-bit gemm, by how many 128 x 128 tiles C has
/// against the GPU's SMs (what `tessel tune gemm` chose for FP8 on an H100,
/// e4m3 -> bf16): a C of a few tiles (M 128, N 4096) runs 64 x 32 tiles in
/// 8 stages, so that every SM streams B; one of about a wave of them (M
/// 128, N 14336) 128 x 128 tiles, persistent; larger ones 128 x 256
/// persistent (1.06x the grid at 8192^3, 1.05x at 4096^3). K tiles are 128
/// bytes, one swizzle row (two for block scales). A 32-bit C (128 KB a 128
/// x 256 tile) stays in registers, with the stages its shared memory left.
GemmConfig eightBitConfig(GemmConfig c, int64_t m, int64_t n, int sms) {
  int64_t tiles = ((m + 127) / 128) * ((n + 127) / 128);
  c.blockK = 128;
  c.swizzlePanel = 8;
  if (tiles < sms / 2 && c.scale != GemmScale::block) {
    c.blockM = 64;
    c.blockN = 32;
    c.threads = 128;
    c.stages = 8;
    c.tmaStore = false;
    return c;
  }
  c.blockM = 128;
  // Block scales promote each K block's product into a second accumulator:
  // 128 columns keep both in registers.
  c.blockN = tiles < sms || c.scale == GemmScale::block ? 128 : 256;
  c.threads = 256;
  c.stages = c.blockN == 128 ? 4 : 3;
  c.tmaStore = c.out == DType::bf16 || c.out == DType::f16;
  c.persistent = c.tmaStore;
  if (!c.tmaStore) c.stages = 4;
  if (c.scale == GemmScale::block) {
    // Two K blocks a stage, the second's wgmmas running under the first's
    // promotion: 1100 against 1004 TFLOP/s at 8192^3 on an H100. The
    // consumer warpgroups take turns at the tensor cores, so that one's
    // promotions run under the other's wgmmas: 1097-1110 against
    // 1083-1086 TFLOP/s at 8192^3, 1028-1035 against 1005-1007 at 4096^3
    // (H100, two rounds). Carrying the second block's promotion into the
    // next step measured slower (1051): ptxas serializes the wgmmas
    // around its reads of a partial the next group overwrites (C7518).
    c.blockK = 256;
    c.stages = c.tmaStore ? 2 : 3;
    c.pingpong = true;
  }
  return c;
}

} // namespace

GemmConfig kernels::chooseGemmConfig(const std::string &arch, const GemmConfig &problem, int64_t m,
                                     int64_t n, int sms) {
  GemmConfig config = defaultGemmConfig(arch);
  config.in = problem.in;
  config.out = problem.out;
  config.scale = problem.scale;
  config.transposeA = problem.transposeA;
  config.transposeB = problem.transposeB;
  bool eightBit = byteSize(config.in) == 1;
  if (arch == "sm_90a" && eightBit)
    return eightBitConfig(config, m, n, sms);
  if (config.instruction == GemmInstruction::tcgen05 && eightBit) {
    config.blockK = 128; // 128 bytes of K: one swizzle row, four kind::f8f6f4/i8 MMAs
  } else if (arch == "sm_90a" && config.out != DType::f32) {
    // A 16-bit C goes out through a shared tile and a TMA store (5-10%
    // faster at 4096-8192 on an H100), which leaves room for 3 stages; an
    // f32 tile (128 KB) would not fit beside them.
    config.tmaStore = true;
    config.stages = 3;
  }
  return config;
}

namespace {
/// `base` with a record's settings; false (and `base` unchanged) when the
/// record names a setting or value gemmSettings() does not know. The
/// settings `tessel tune` does not always vary, when the record leaves them
/// out, were the library gemm's defaults when it was tuned.
bool applyRecord(const TunedSettings &record, GemmConfig &base) {
  const SettingsTable<GemmConfig> &table = gemmSettings();
  Settings defaults = table.write(GemmConfig{}), all;
  for (const char *key :
       {"tma_store", "persistent", "overlap_mma", "pingpong", "cluster_m", "split_k", "policy"})
    all[key] = defaults.at(key);
  for (const auto &[key, value] : record) all[key] = value;
  return table.apply(all, base);
}
/// The scaling the options' scale views ask for: none, one element each
/// (per tensor), scaleA [M] and scaleB [N] (per row and column), or 2-D
/// block scales (scaleA [ceil(K / 128), M], scaleB [ceil(N / 128),
/// ceil(K / 128)]).
GemmScale scaleOf(const GemmCallOptions &o, int64_t m, int64_t n, int64_t k) {
  if (!o.scaleA && !o.scaleB) return GemmScale::none;
  if (!o.scaleA || !o.scaleB)
    throw Error("gemm: give both scaleA and scaleB (or neither): the product is scaled by both");
  if (o.scaleA->dtype == ScalarType::UE8M0) {
    // MX: cuBLAS's blocked layout of ue8m0 scales, one per 32 of K.
    requireView(*o.scaleA, "scaleA", 4, {ScalarType::UE8M0});
    requireView(*o.scaleB, "scaleB", 4, {ScalarType::UE8M0});
    int64_t kTiles = (k + 127) / 128;
    requireShape(*o.scaleA, "scaleA", {(m + 127) / 128, kTiles, 32, 16});
    requireShape(*o.scaleB, "scaleB", {(n + 127) / 128, kTiles, 32, 16});
    return GemmScale::mx;
  }
  if (o.scaleA->shape.size() == 2) {
    requireView(*o.scaleA, "scaleA", 2, {ScalarType::F32});
    requireView(*o.scaleB, "scaleB", 2, {ScalarType::F32});
    int64_t kBlocks = (k + 127) / 128;
    requireShape(*o.scaleA, "scaleA", {kBlocks, m});
    requireShape(*o.scaleB, "scaleB", {(n + 127) / 128, kBlocks});
    return GemmScale::block;
  }
  requireView(*o.scaleA, "scaleA", 1, {ScalarType::F32});
  requireView(*o.scaleB, "scaleB", 1, {ScalarType::F32});
  if (o.scaleA->shape[0] == 1 && o.scaleB->shape[0] == 1) return GemmScale::tensor;
  requireShape(*o.scaleA, "scaleA", {m});
  requireShape(*o.scaleB, "scaleB", {n});
  return GemmScale::row;
}
} // namespace

namespace {
/// What tessel::gemm runs for a call: the kernel, its settings and the
/// Choice it reports.
struct GemmPlan {
  std::shared_ptr<Kernel> kernel;
  GemmConfig config;
  Choice choice;
};

/// The plan for a call: the caller's configuration, or the target's tiles
/// for the shape, replaced by a tuned record where there is one.
GemmPlan planGemm(const TensorView &a, const TensorView &c, const GemmCallOptions &o,
                  GemmScale scale, int64_t m, int64_t n, int64_t k, int device) {
  GemmPlan plan;
  Choice &choice = plan.choice;
  choice.arch = targetFor(o.arch, device);
  GemmConfig config = o.config.value_or(GemmConfig{});
  config.in = dtypeOf(a.dtype);
  config.out = dtypeOf(c.dtype);
  config.scale = scale;
  config.transposeA = o.transposeA;
  config.transposeB = o.transposeB;
  if (!o.config)
    config = chooseGemmConfig(choice.arch, config, m, n, rt::Driver::get().multiprocessors(device));
  const GemmConfig untuned = config;
  std::string tunedOn;
  if (!o.config && o.tuned) {
    // The bucket `tessel tune gemm` files its record under.
    std::string bucket = tunedBucket({{"in", choiceName(config.in, gemmInputChoices())},
                                      {"out", name(config.out)},
                                      {"transpose_a", o.transposeA ? "1" : "0"},
                                      {"transpose_b", o.transposeB ? "1" : "0"}},
                                     {{"M", m}, {"N", n}, {"K", k}});
    auto [record, who] = tunedRecord("gemm", device, choice.arch, bucket);
    if (record && applyRecord(*record, config)) tunedOn = who;
  }
  auto compileWith = [&](const GemmConfig &settings) {
    choice.config = "gemm " + gemmSettings().describe(settings);
    return std::pair{cachedKernel(choice.config, choice.arch,
                                  [&] { return kernels::gemm(settings); }, choice.compiled),
                     settings};
  };
  std::tie(plan.kernel, plan.config) =
      compileTunedOr(config, untuned, tunedOn, "gemm", compileWith);
  if (!tunedOn.empty()) choice.config += " (tuned on " + tunedOn + ")";
  return plan;
}

/// The plans of calls without a configuration, by everything that decides
/// them: a call repeated (every layer of every step of a model) skips the
/// tuned-record lookup, the settings string and the kernel cache's keys,
/// about 1.5 us of host time. The record directory is part of the key, as
/// tunedRecord reads records once per directory.
class GemmPlans {
public:
  static GemmPlans &global() {
    static GemmPlans plans;
    return plans;
  }

  GemmPlan find(const TensorView &a, const TensorView &c, const GemmCallOptions &o,
                GemmScale scale, int64_t m, int64_t n, int64_t k, int device) {
    Key key{device, o.arch, o.tuned ? rt::KernelCache::global().directory() : std::string(),
            a.dtype, c.dtype, scale, o.transposeA, o.transposeB, o.tuned, m, n, k};
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (auto it = plans.find(key); it != plans.end()) {
        GemmPlan hit = it->second;
        hit.choice.compiled = false;
        return hit;
      }
    }
    // Planned outside the lock: a compile may take a while, and two
    // threads planning the same call get the same kernel from the cache.
    GemmPlan plan = planGemm(a, c, o, scale, m, n, k, device);
    std::lock_guard<std::mutex> lock(mutex);
    // A bound on a process that sees endlessly many shapes: start over.
    if (plans.size() >= kMaxPlans) plans.clear();
    plans.emplace(std::move(key), plan);
    return plan;
  }

private:
  static constexpr size_t kMaxPlans = 4096;
  struct Key {
    int device;
    std::string arch, recordDirectory;
    ScalarType in, out;
    GemmScale scale;
    bool transposeA, transposeB, tuned;
    int64_t m, n, k;
    bool operator==(const Key &) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key &key) const {
      size_t h = std::hash<std::string>()(key.arch) ^ std::hash<std::string>()(key.recordDirectory);
      for (int64_t v : {int64_t(key.device), int64_t(key.in), int64_t(key.out), int64_t(key.scale),
                        int64_t(key.transposeA) | int64_t(key.transposeB) << 1 |
                            int64_t(key.tuned) << 2,
                        key.m, key.n, key.k})
        h = h * 0x100000001b3ull ^ std::hash<int64_t>()(v);
      return h;
    }
  };
  std::mutex mutex;
  std::unordered_map<Key, GemmPlan, KeyHash> plans;
};
} // namespace

Choice tessel::gemm(const TensorView &a, const TensorView &b, const TensorView &c,
                    const GemmCallOptions &o, CUstream stream) {
  requireView(a, "a", 2,
              {ScalarType::F16, ScalarType::BF16, ScalarType::F8E4M3, ScalarType::F8E5M2,
               ScalarType::I8});
  requireView(b, "b", 2, {a.dtype});
  if (a.dtype == ScalarType::I8) requireView(c, "c", 2, {ScalarType::I32});
  else requireView(c, "c", 2, {ScalarType::F16, ScalarType::BF16, ScalarType::F32});
  int64_t m = o.transposeA ? a.shape[1] : a.shape[0], k = o.transposeA ? a.shape[0] : a.shape[1];
  int64_t bk = o.transposeB ? b.shape[1] : b.shape[0], n = o.transposeB ? b.shape[0] : b.shape[1];
  if (bk != k)
    throw Error(fmt::format("a is {} and b is {}: op(a) has {} columns but op(b) has {} rows",
                            a.str(), b.str(), k, bk));
  requireShape(c, "c", {m, n});
  GemmScale scale = scaleOf(o, m, n, k);
  int device = commonDevice({&a, &b, &c});
  if (o.scaleA) commonDevice({&a, &*o.scaleA, &*o.scaleB});
  GemmPlan plan = o.config ? planGemm(a, c, o, scale, m, n, k, device)
                           : GemmPlans::global().find(a, c, o, scale, m, n, k, device);
  std::vector<LaunchArg> args = {LaunchArg::integer(m), LaunchArg::integer(n), LaunchArg::integer(k),
                                 LaunchArg::view(a), LaunchArg::view(b), LaunchArg::view(c)};
  if (o.scaleA) {
    args.push_back(LaunchArg::view(*o.scaleA));
    args.push_back(LaunchArg::view(*o.scaleB));
  }
  // A split-K gemm adds its K slices into C (contiguous, as required above).
  if (plan.config.splitK > 1)
    rt::clearAsync(c.data, size_t(m) * size_t(n) * size_t(rt::scalarBytes(c.dtype)), stream);
  plan.kernel->launch(args, stream);
  return plan.choice;
}
