//===- Settings.cpp - reading settings from text --------------------------===//
#include "tessel/kernels/Settings.h"

#include <charconv>
#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;

int64_t kernels::parseInteger(const std::string &text, int64_t lo, int64_t hi,
                              const std::string &what) {
  int64_t value = 0;
  const char *begin = text.data(), *end = text.data() + text.size();
  auto [last, ec] = std::from_chars(begin, end, value);
  if (ec == std::errc::result_out_of_range ||
      (ec == std::errc() && last == end && (value < lo || value > hi)))
    throw Error(fmt::format("{}={} is out of range: use an integer in [{}, {}]", what, text, lo, hi));
  if (ec != std::errc() || last != end || text.empty())
    throw Error(fmt::format("{}={} is not an integer", what, text));
  return value;
}

bool kernels::parseFlag(const std::string &name, const std::string &text) {
  if (text != "0" && text != "1") throw Error(fmt::format("parameter {}={}: use 0 or 1", name, text));
  return text == "1";
}

const Choices<DType> &kernels::dtypeChoices() {
  static const Choices<DType> all = {{"f16", DType::f16}, {"bf16", DType::bf16}, {"f32", DType::f32}};
  return all;
}

const Choices<WarpPolicy> &kernels::policyChoices() {
  static const Choices<WarpPolicy> all = {{"square", WarpPolicy::square},
                                          {"full_row", WarpPolicy::full_row},
                                          {"full_col", WarpPolicy::full_col}};
  return all;
}

const Choices<WarpSpecialize> &kernels::warpSpecializeChoices() {
  static const Choices<WarpSpecialize> all = {{"auto", WarpSpecialize::automatic},
                                              {"on", WarpSpecialize::on},
                                              {"off", WarpSpecialize::off}};
  return all;
}

const Choices<GemmInstruction> &kernels::instructionChoices() {
  static const Choices<GemmInstruction> all = {{"auto", GemmInstruction::automatic},
                                               {"mma_sync", GemmInstruction::mma_sync},
                                               {"wgmma", GemmInstruction::wgmma},
                                               {"tcgen05", GemmInstruction::tcgen05}};
  return all;
}
