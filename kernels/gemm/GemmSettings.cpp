//===- GemmSettings.cpp - GemmConfig as named settings --------------------===//
#include "tessel/kernels/gemm/Gemm.h"

using namespace tessel;
using namespace tessel::kernels;

const Choices<DType> &kernels::gemmInputChoices() {
  static const Choices<DType> all = {{"f16", DType::f16},       {"bf16", DType::bf16},
                                     {"e4m3", DType::f8e4m3},   {"e5m2", DType::f8e5m2},
                                     {"f8e4m3", DType::f8e4m3}, {"f8e5m2", DType::f8e5m2},
                                     {"i8", DType::i8}};
  return all;
}

const Choices<DType> &kernels::gemmOutputChoices() {
  static const Choices<DType> all = {
      {"f16", DType::f16}, {"bf16", DType::bf16}, {"f32", DType::f32}, {"i32", DType::i32}};
  return all;
}

/// The types, transposes and scales say what is computed; the rest how, within
/// the bounds the kernel takes (clusters of 1 or 2, up to 64 K slices).
const SettingsTable<GemmConfig> &kernels::gemmSettings() {
  using C = GemmConfig;
  static const SettingsTable<C> table({
      fixed(choiceSetting("in", &C::in, gemmInputChoices())),
      fixed(choiceSetting("out", &C::out, gemmOutputChoices())),
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
      flagSetting("pingpong", &C::pingpong),
      integerSetting("cluster_m", &C::clusterM, 1, 2),
      flagSetting("persistent", &C::persistent),
      flagSetting("tma_store", &C::tmaStore),
      choiceSetting("policy", &C::policy, policyChoices()),
      integerSetting("split_k", &C::splitK, 1, 64),
      fixed(choiceSetting("scale", &C::scale,
                          Choices<GemmScale>{{"none", GemmScale::none},
                                             {"tensor", GemmScale::tensor},
                                             {"row", GemmScale::row},
                                             {"block", GemmScale::block},
                                             {"mx", GemmScale::mx}})),
  });
  return table;
}
