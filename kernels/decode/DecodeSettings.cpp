//===- DecodeSettings.cpp - the decode kernels' configurations as settings ===//
//
// Types, head sizes, groups, page sizes and whether a kernel writes splits
// say what it computes (fixed); key steps, stages, head blocks and threads
// how.
//
//===----------------------------------------------------------------------===//
#include "tessel/kernels/decode/Decode.h"

#include <algorithm>
#include <cmath>

using namespace tessel;
using namespace tessel::kernels;

const SettingsTable<PagedDecodeConfig> &kernels::pagedDecodeSettings() {
  using C = PagedDecodeConfig;
  static const SettingsTable<C> table({fixed(choiceSetting("dtype", &C::dtype, dtypeChoices())),
                                       fixed(integerSetting("head_dim", &C::headDim, 1, 1024)),
                                       fixed(integerSetting("group", &C::group, 1, 1024)),
                                       fixed(integerSetting("page_size", &C::pageSize, 1, 1 << 20)),
                                       integerSetting("block_n", &C::blockN, 1, 4096),
                                       integerSetting("stages", &C::stages, 1, 16),
                                       integerSetting("threads", &C::threads, 32, 1024),
                                       fixed(flagSetting("split", &C::split)),
                                       fixed(flagSetting("fp8_cache", &C::fp8Cache))});
  return table;
}

const SettingsTable<MlaDecodeConfig> &kernels::mlaDecodeSettings() {
  using C = MlaDecodeConfig;
  static const SettingsTable<C> table({fixed(choiceSetting("dtype", &C::dtype, dtypeChoices())),
                                       fixed(integerSetting("latent", &C::latent, 1, 4096)),
                                       fixed(integerSetting("rope", &C::rope, 0, 4096)),
                                       fixed(integerSetting("page_size", &C::pageSize, 1, 1 << 20)),
                                       integerSetting("block_m", &C::blockM, 1, 1024),
                                       integerSetting("block_n", &C::blockN, 1, 4096),
                                       integerSetting("stages", &C::stages, 1, 16),
                                       integerSetting("threads", &C::threads, 32, 1024),
                                       fixed(flagSetting("split", &C::split))});
  return table;
}

const SettingsTable<DecodeCombineConfig> &kernels::decodeCombineSettings() {
  using C = DecodeCombineConfig;
  static const SettingsTable<C> table({fixed(choiceSetting("dtype", &C::dtype, dtypeChoices())),
                                       fixed(integerSetting("head_dim", &C::headDim, 1, 4096)),
                                       integerSetting("rows", &C::rows, 1, 1024),
                                       integerSetting("threads", &C::threads, 32, 1024)});
  return table;
}

int64_t kernels::decodeSplits(int64_t blocks, int64_t slots, int64_t maxSteps,
                              DecodeSplitRule rule) {
  blocks = std::max<int64_t>(blocks, 1);
  slots = std::max<int64_t>(slots, 1);
  const int64_t target = std::max<int64_t>(1, int64_t(std::ceil(rule.waves * double(slots))));
  // A grid already half way to the target runs unsplit: the splits'
  // partial rows and the combine would cost more than they even out.
  if (2 * blocks >= target) return 1;
  int64_t most = std::clamp<int64_t>(maxSteps / std::max<int64_t>(rule.minSteps, 1), 1, 64);
  int64_t least = std::min(most, (target + blocks - 1) / blocks);
  // Of the splits that reach the target, the one whose last wave is
  // fullest (ties to fewer splits): a grid of 1.1 waves takes as long as 2.
  int64_t best = least;
  double bestUse = 0;
  for (int64_t s = least; s <= std::min(most, 2 * least); ++s) {
    int64_t grid = blocks * s, waveCount = (grid + slots - 1) / slots;
    double use = double(grid) / double(waveCount * slots);
    if (use > bestUse + 1e-9) {
      best = s;
      bestUse = use;
    }
  }
  return best;
}

int64_t kernels::mlaDefaultKeys(const std::string &arch) { return arch == "sm_90a" ? 64 : 32; }
