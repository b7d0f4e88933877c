//===- AttentionSettings.cpp - attention configurations as settings -------===//
#include "tessel/kernels/attention/Attention.h"

using namespace tessel;
using namespace tessel::kernels;

namespace {
/// block_n: a number of key rows, or "auto" (0: the kernel's choice by
/// head_dim).
template <class Config> Setting<Config> blockNSetting() {
  return {"block_n", true,
          [](Config &c, const std::string &text) {
            c.blockN = text == "auto" ? 0 : parseInteger(text, 1, 1024, "parameter block_n");
          },
          [](const Config &c) { return c.blockN ? std::to_string(c.blockN) : std::string("auto"); }};
}

const Choices<GridOrder> &gridOrderChoices() {
  static const Choices<GridOrder> all = {
      {"auto", GridOrder::automatic}, {"blocks", GridOrder::blocks}, {"heads", GridOrder::heads}};
  return all;
}

/// Settings of both passes: the element type and head size say what is
/// computed (a tuned record may not change them), the stages how.
template <class C> Setting<C> dtypeSetting() {
  return fixed(choiceSetting("dtype", &C::dtype, dtypeChoices()));
}
/// The forward also takes FP8 inputs (O in bf16).
Setting<AttentionConfig> forwardDtypeSetting() {
  static const Choices<DType> all = {{"f16", DType::f16},       {"bf16", DType::bf16},
                                     {"f32", DType::f32},       {"e4m3", DType::f8e4m3},
                                     {"e5m2", DType::f8e5m2}};
  return fixed(choiceSetting("dtype", &AttentionConfig::dtype, all));
}
template <class C> Setting<C> headDimSetting() {
  return fixed(integerSetting("head_dim", &C::headDim, 1, 1024));
}
template <class C> Setting<C> stagesSetting() {
  // More stages than 8 never fit beside the tiles a step needs.
  return integerSetting("stages", &C::stages, 1, 8);
}
} // namespace

DType kernels::attentionOutputType(DType dtype) {
  return dtype == DType::f8e4m3 || dtype == DType::f8e5m2 ? DType::bf16 : dtype;
}

int64_t kernels::forwardKeyBlock(const AttentionConfig &c) {
  return c.blockN ? c.blockN : c.headDim > 128 ? 64 : 128;
}

/// FlashAttention-3's head_dim 64 tile on sm_90a: 192 query rows on three
/// consumer warpgroups. On an H100 (batch x length 16k, 32 heads) it takes
/// 11-16% off the two-warpgroup kernel from 4k queries on, with and without
/// the causal mask, and ties it at 1k without one; at 1k with the mask the
/// longer row blocks leave more of the grid idle (0.32 against 0.30 ms), so
/// short causal problems keep 128 rows.
void kernels::chooseForwardRows(AttentionConfig &c, const std::string &arch, int64_t queries) {
  if (arch != "sm_90a" || c.headDim != 64 || (c.causal && queries < 2048)) return;
  c.blockM = 192;
  c.threads = 384;
}

GridOrder kernels::chooseCausalGridOrder(int64_t streamBytes, int64_t l2Bytes) {
  return streamBytes <= 2 * l2Bytes ? GridOrder::heads : GridOrder::blocks;
}

void kernels::chooseBackwardGridOrder(AttentionBackwardConfig &c, int64_t queries, int64_t headsQ,
                                      int64_t l2Bytes) {
  if (!c.causal || c.gridOrder != GridOrder::automatic) return;
  int64_t element = c.dtype == DType::f32 ? 4 : 2;
  c.gridOrder = chooseCausalGridOrder(headsQ * queries * c.headDim * (2 * element + 4), l2Bytes);
}

void kernels::chooseForwardSchedule(AttentionConfig &c, const std::string &arch, int64_t queries,
                                    int64_t keys, int64_t headsQ, int64_t headsKv,
                                    int64_t l2Bytes) {
  chooseForwardRows(c, arch, queries);
  if (c.causal && c.gridOrder == GridOrder::automatic) {
    int64_t element = c.dtype == DType::f32 ? 4 : 2;
    c.gridOrder = chooseCausalGridOrder(headsKv * keys * c.headDim * 2 * element, l2Bytes);
  }
  // FP8 runs fastest without K ahead, turns or the persistent walk (8k,
  // head_dim 128 on an H100: 753 TFLOP/s full and 745 causal, against 696
  // and 661 with K ahead, 640 and 596 with turns as well).
  if (arch != "sm_90a" || c.headDim != 128 || c.varlen || keys < 8192 || byteSize(c.dtype) == 1)
    return;
  c.overlap = true;
  bool grouped = headsQ != headsKv;
  c.pingpong = !c.causal && !grouped;
  c.persistent = c.tmaStore = !c.causal && grouped;
}

// Both tables list their settings in the order the calls' cache keys
// have always had them.

const SettingsTable<AttentionConfig> &kernels::attentionSettings() {
  using C = AttentionConfig;
  static const SettingsTable<C> table({
      forwardDtypeSetting(),
      headDimSetting<C>(),
      integerSetting("block_m", &C::blockM, 1, 1024),
      blockNSetting<C>(),
      integerSetting("threads", &C::threads),
      stagesSetting<C>(),
      fixed(flagSetting("causal", &C::causal)),
      fixed(flagSetting("varlen", &C::varlen)),
      choiceSetting("warp_specialize", &C::warpSpecialize, warpSpecializeChoices()),
      choiceSetting("grid_order", &C::gridOrder, gridOrderChoices()),
      flagSetting("pingpong", &C::pingpong),
      flagSetting("overlap", &C::overlap),
      flagSetting("persistent", &C::persistent),
      flagSetting("tma_store", &C::tmaStore),
      fixed(flagSetting("v_transposed", &C::vTransposed)),
      fixed(flagSetting("descales", &C::descales)),
      integerSetting("exp2_fma", &C::exp2FmaEvery, 0, 64),
  });
  return table;
}

/// The form, the K/V reduction, dQ's memory order and per-element atomics
/// change what the pass computes or how its results are combined (and the
/// workspace it needs): a tuned record leaves them alone.
const SettingsTable<AttentionBackwardConfig> &kernels::attentionBackwardSettings() {
  using C = AttentionBackwardConfig;
  static const SettingsTable<C> table({
      fixed(choiceSetting("variant", &C::form,
                          Choices<BackwardForm>{{"registers", BackwardForm::registers},
                                                {"ss", BackwardForm::ss},
                                                {"ts", BackwardForm::ts}})),
      dtypeSetting<C>(),
      headDimSetting<C>(),
      integerSetting("block_m", &C::blockM, 1, 1024),
      blockNSetting<C>(),
      integerSetting("pre_block", &C::preBlock, 1, 1024),
      integerSetting("threads", &C::threads),
      stagesSetting<C>(),
      fixed(flagSetting("causal", &C::causal)),
      fixed(flagSetting("varlen", &C::varlen)),
      fixed(choiceSetting("kv_reduction", &C::kvReduction,
                          Choices<KvReduction>{{"direct", KvReduction::direct},
                                               {"atomic", KvReduction::atomic},
                                               {"split", KvReduction::split}})),
      fixed(flagSetting("element_atomics", &C::elementAtomics)),
      fixed(choiceSetting("dq_order", &C::dqOrder,
                          Choices<MemoryOrder>{{"relaxed", MemoryOrder::relaxed},
                                               {"release", MemoryOrder::release}})),
      choiceSetting("dq_atomics", &C::dqTma, Choices<bool>{{"registers", false}, {"tma", true}}),
      choiceSetting("dkv_operands", &C::dkvOperandsShared,
                    Choices<bool>{{"registers", false}, {"shared", true}}),
      choiceSetting("scores", &C::queryRows, Choices<bool>{{"keys", false}, {"queries", true}}),
      choiceSetting("warp_specialize", &C::warpSpecialize, warpSpecializeChoices()),
      choiceSetting("grid_order", &C::gridOrder, gridOrderChoices()),
  });
  return table;
}
