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
