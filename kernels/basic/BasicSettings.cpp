//===- BasicSettings.cpp - the small kernels' configurations as settings --===//
//
// Types, row lengths and whether a kernel accumulates say what it computes
// (fixed); block shapes and thread counts how.
//
//===----------------------------------------------------------------------===//
#include "tessel/kernels/basic/Basic.h"

using namespace tessel;
using namespace tessel::kernels;

const SettingsTable<ScaledAddConfig> &kernels::scaledAddSettings() {
  using C = ScaledAddConfig;
  static const SettingsTable<C> table({fixed(choiceSetting("dtype", &C::dtype, dtypeChoices())),
                                       integerSetting("block", &C::block),
                                       integerSetting("threads", &C::threads)});
  return table;
}

const SettingsTable<PartialSumConfig> &kernels::partialSumSettings() {
  using C = PartialSumConfig;
  static const SettingsTable<C> table({fixed(choiceSetting("dtype", &C::dtype, dtypeChoices())),
                                       integerSetting("block", &C::block),
                                       integerSetting("threads", &C::threads)});
  return table;
}

const SettingsTable<ColumnSliceConfig> &kernels::columnSliceSettings() {
  using C = ColumnSliceConfig;
  static const SettingsTable<C> table({fixed(choiceSetting("dtype", &C::dtype, dtypeChoices())),
                                       integerSetting("block_rows", &C::blockRows),
                                       integerSetting("block_cols", &C::blockCols),
                                       integerSetting("threads", &C::threads)});
  return table;
}

const SettingsTable<SoftmaxConfig> &kernels::rowSoftmaxSettings() {
  using C = SoftmaxConfig;
  static const SettingsTable<C> table({fixed(choiceSetting("dtype", &C::dtype, dtypeChoices())),
                                       fixed(integerSetting("cols", &C::cols)),
                                       integerSetting("rows", &C::rows),
                                       integerSetting("threads", &C::threads)});
  return table;
}

const SettingsTable<RowLseConfig> &kernels::rowLogSumExpSettings() {
  using C = RowLseConfig;
  static const SettingsTable<C> table({fixed(choiceSetting("dtype", &C::dtype, dtypeChoices())),
                                       fixed(integerSetting("head_dim", &C::headDim)),
                                       integerSetting("block_m", &C::blockM),
                                       integerSetting("block_n", &C::blockN),
                                       integerSetting("threads", &C::threads),
                                       choiceSetting("policy", &C::policy, policyChoices())});
  return table;
}

const SettingsTable<TmaScaleConfig> &kernels::tmaScaleSettings() {
  using C = TmaScaleConfig;
  static const SettingsTable<C> table({fixed(choiceSetting("dtype", &C::dtype, dtypeChoices())),
                                       fixed(integerSetting("cols", &C::cols)),
                                       integerSetting("rows", &C::rows),
                                       fixed(flagSetting("accumulate", &C::accumulate))});
  return table;
}

const SettingsTable<QuantizeConfig> &kernels::quantizeSettings() {
  using C = QuantizeConfig;
  static const SettingsTable<C> table(
      {fixed(choiceSetting("dtype", &C::dtype, dtypeChoices())),
       fixed(choiceSetting("out", &C::out,
                           Choices<DType>{{"e4m3", DType::f8e4m3}, {"e5m2", DType::f8e5m2}})),
       fixed(choiceSetting("granularity", &C::granularity,
                           Choices<QuantizeGranularity>{{"row", QuantizeGranularity::row},
                                                        {"block", QuantizeGranularity::block},
                                                        {"mx", QuantizeGranularity::mx}})),
       fixed(integerSetting("cols", &C::cols, 1, INT32_MAX)),
       integerSetting("rows", &C::rows, 1, 1024),
       integerSetting("threads", &C::threads, 32, 1024),
       fixed(flagSetting("k_major_scales", &C::kMajorScales)),
       fixed(flagSetting("blocked_scales", &C::blockedScales))});
  return table;
}
