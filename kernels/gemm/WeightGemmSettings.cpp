//===- WeightGemmSettings.cpp - the weight-only GEMMs' settings -----------===//
#include "tessel/kernels/gemm/WeightGemm.h"

using namespace tessel;
using namespace tessel::kernels;

const Choices<WeightFormat> &kernels::weightFormatChoices() {
  static const Choices<WeightFormat> all = {{"int4", WeightFormat::int4},
                                            {"int8", WeightFormat::int8}};
  return all;
}

/// The formats, types, group and zeros say what is computed; the rest how.
const SettingsTable<WeightGemmConfig> &kernels::weightGemmSettings() {
  using C = WeightGemmConfig;
  static const SettingsTable<C> table({
      fixed(choiceSetting("weights", &C::format, weightFormatChoices())),
      fixed(choiceSetting("in", &C::activations,
                          Choices<DType>{{"bf16", DType::bf16}, {"f16", DType::f16}})),
      fixed(choiceSetting("out", &C::out, Choices<DType>{{"bf16", DType::bf16},
                                                          {"f16", DType::f16},
                                                          {"f32", DType::f32}})),
      fixed(integerSetting("group", &C::group, 32, 128)),
      fixed(flagSetting("zeros", &C::zeros)),
      integerSetting("block_n", &C::blockN, 16, 256),
      integerSetting("block_m", &C::blockM, 8, 256),
      integerSetting("block_k", &C::blockK, 32, 512),
      integerSetting("stages", &C::stages, 1, 16),
      integerSetting("threads", &C::threads, 32, 512),
      integerSetting("split_k", &C::splitK, 1, 64),
      choiceSetting("instruction", &C::instruction, instructionChoices()),
      choiceSetting("warp_specialize", &C::warpSpecialize, warpSpecializeChoices()),
      flagSetting("pingpong", &C::pingpong),
  });
  return table;
}

const SettingsTable<WeightDequantizeConfig> &kernels::weightDequantizeSettings() {
  using C = WeightDequantizeConfig;
  static const SettingsTable<C> table({
      fixed(choiceSetting("weights", &C::format, weightFormatChoices())),
      fixed(choiceSetting("in", &C::activations,
                          Choices<DType>{{"bf16", DType::bf16}, {"f16", DType::f16}})),
      fixed(integerSetting("group", &C::group, 32, 128)),
      fixed(flagSetting("zeros", &C::zeros)),
      integerSetting("block_k", &C::blockK, 32, 1024),
      integerSetting("rows", &C::rows, 1, 256),
      integerSetting("threads", &C::threads, 32, 1024),
  });
  return table;
}
