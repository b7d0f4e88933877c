//===- GemmSettings.cpp - GemmConfig as named settings --------------------===//
#include "tessel/kernels/gemm/Gemm.h"

using namespace tessel;
using namespace tessel::kernels;

/// The types and transposes say what is computed; the rest how, within
/// the bounds the kernel takes (clusters of 1 or 2, up to 64 K slices).
const SettingsTable<GemmConfig> &kernels::gemmSettings() {
  using C = GemmConfig;
  static const SettingsTable<C> table({
      fixed(choiceSetting("in", &C::in, dtypeChoices())),
      fixed(choiceSetting("out", &C::out, dtypeChoices())),
      fixed(flagSetting("transpose_a", &C::transposeA)),
      fixed(flagSetting("transpose_b", &C::transposeB)),
      integerSetting("block_m", &C::blockM, 1, 1024),
      integerSetting("block_n", &C::blockN, 1, 1024),
      integerSetting("block_k", &C::blockK, 1, 1024),
      integerSetting("stages", &C::stages, 1, 16),
      integerSetting("threads", &C::threads),
      integerSetting("swizzle", &C::swizzlePanel, 0, 1024),
      choiceSetting("instruction", &C::instruction, instructionChoices()),
      choiceSetting("warp_specialize", &C::warpSpecialize, warpSpecializeChoices()),
      flagSetting("overlap_mma", &C::overlapMma),
      integerSetting("cluster_m", &C::clusterM, 1, 2),
      flagSetting("persistent", &C::persistent),
      flagSetting("tma_store", &C::tmaStore),
      choiceSetting("policy", &C::policy, policyChoices()),
      integerSetting("split_k", &C::splitK, 1, 64),
  });
  return table;
}
