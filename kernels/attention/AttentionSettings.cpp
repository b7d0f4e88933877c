//===- AttentionSettings.cpp - attention configurations as settings -------===//
#include "tessel/kernels/attention/Attention.h"

using namespace tessel;
using namespace tessel::kernels;

namespace {
/// block_n: a number of key rows, or "auto" (0: the kernel's choice by
/// head_dim).
template <class Config> Setting<Config> blockNSetting() {
  return {"block_n",
          [](Config &c, const std::string &text) {
            c.blockN = text == "auto" ? 0 : parseInteger(text, INT32_MIN, INT32_MAX, "parameter block_n");
          },
          [](const Config &c) { return c.blockN ? std::to_string(c.blockN) : std::string("auto"); }};
}

const Choices<GridOrder> &gridOrderChoices() {
  static const Choices<GridOrder> all = {
      {"auto", GridOrder::automatic}, {"blocks", GridOrder::blocks}, {"heads", GridOrder::heads}};
  return all;
}

/// The settings both passes share, in the order their tables list them.
template <class C> std::vector<Setting<C>> sharedSettings() {
  return {choiceSetting("dtype", &C::dtype, dtypeChoices()),
          integerSetting("head_dim", &C::headDim),
          integerSetting("block_m", &C::blockM),
          blockNSetting<C>(),
          integerSetting("threads", &C::threads),
          // More stages than 8 never fit beside the tiles a step needs.
          integerSetting("stages", &C::stages, 1, 8),
          flagSetting("causal", &C::causal),
          flagSetting("varlen", &C::varlen),
          choiceSetting("warp_specialize", &C::warpSpecialize, warpSpecializeChoices()),
          choiceSetting("grid_order", &C::gridOrder, gridOrderChoices())};
}
} // namespace

const SettingsTable<AttentionConfig> &kernels::attentionSettings() {
  using C = AttentionConfig;
  static const SettingsTable<C> table = [] {
    std::vector<Setting<C>> rows = sharedSettings<C>();
    rows.push_back(flagSetting("pingpong", &C::pingpong));
    rows.push_back(flagSetting("overlap", &C::overlap));
    rows.push_back(flagSetting("persistent", &C::persistent));
    rows.push_back(flagSetting("tma_store", &C::tmaStore));
    return SettingsTable<C>(std::move(rows));
  }();
  return table;
}

const SettingsTable<AttentionBackwardConfig> &kernels::attentionBackwardSettings() {
  using C = AttentionBackwardConfig;
  static const SettingsTable<C> table = [] {
    std::vector<Setting<C>> rows = sharedSettings<C>();
    rows.push_back(integerSetting("pre_block", &C::preBlock));
    rows.push_back(choiceSetting("kv_reduction", &C::kvReduction,
                                 Choices<KvReduction>{{"direct", KvReduction::direct},
                                                      {"atomic", KvReduction::atomic},
                                                      {"split", KvReduction::split}}));
    rows.push_back(flagSetting("element_atomics", &C::elementAtomics));
    rows.push_back(choiceSetting("dq_order", &C::dqOrder,
                                 Choices<MemoryOrder>{{"relaxed", MemoryOrder::relaxed},
                                                      {"release", MemoryOrder::release}}));
    rows.push_back(
        choiceSetting("dq_atomics", &C::dqTma, Choices<bool>{{"registers", false}, {"tma", true}}));
    rows.push_back(choiceSetting("dkv_operands", &C::dkvOperandsShared,
                                 Choices<bool>{{"registers", false}, {"shared", true}}));
    rows.push_back(
        choiceSetting("scores", &C::queryRows, Choices<bool>{{"keys", false}, {"queries", true}}));
    rows.push_back(choiceSetting("variant", &C::form,
                                 Choices<BackwardForm>{{"registers", BackwardForm::registers},
                                                       {"ss", BackwardForm::ss},
                                                       {"ts", BackwardForm::ts}}));
    return SettingsTable<C>(std::move(rows));
  }();
  return table;
}
