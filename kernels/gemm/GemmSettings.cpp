//===- GemmSettings.cpp - GemmConfig as named settings --------------------===//
#include "tessel/kernels/gemm/Gemm.h"

using namespace tessel;
using namespace tessel::kernels;

const SettingsTable<GemmConfig> &kernels::gemmSettings() {
  using C = GemmConfig;
  static const SettingsTable<C> table({
      choiceSetting("in", &C::in, dtypeChoices()),
      choiceSetting("out", &C::out, dtypeChoices()),
      flagSetting("transpose_a", &C::transposeA),
      flagSetting("transpose_b", &C::transposeB),
      integerSetting("block_m", &C::blockM),
      integerSetting("block_n", &C::blockN),
      integerSetting("block_k", &C::blockK),
      integerSetting("stages", &C::stages),
      integerSetting("threads", &C::threads),
      integerSetting("swizzle", &C::swizzlePanel),
      choiceSetting("instruction", &C::instruction, instructionChoices()),
      choiceSetting("warp_specialize", &C::warpSpecialize, warpSpecializeChoices()),
      flagSetting("overlap_mma", &C::overlapMma),
      integerSetting("cluster_m", &C::clusterM),
      flagSetting("persistent", &C::persistent),
      flagSetting("tma_store", &C::tmaStore),
      choiceSetting("policy", &C::policy, policyChoices()),
      integerSetting("split_k", &C::splitK),
  });
  return table;
}
