//===- LibrarySupport.cpp - host tensors, launches and checks -------------===//
#include "tessel/harness/LibrarySupport.h"

#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>

using namespace tessel;

using namespace tessel::harness;

int64_t tessel::harness::intParam(const Params &p, const std::string &key) {
  return parseInteger(p.at(key), INT32_MIN, INT32_MAX, "parameter " + key);
}

bool tessel::harness::flagParam(const Params &p, const std::string &key) {
  return kernels::parseFlag(key, p.at(key));
}

double tessel::harness::realParam(const Params &p, const std::string &key) {
  const std::string &v = p.at(key);
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(v, &used);
  } catch (const std::exception &) {
    used = 0;
  }
  if (v.empty() || used != v.size() || !std::isfinite(value))
    throw Error(fmt::format("parameter {}={} is not a finite number", key, v));
  return value;
}

DType tessel::harness::dtypeParam(const Params &p, const std::string &key) {
  // The 8-bit types (the ue8m0 scale type too) by their DType names, and
  // the FP8 formats by their usual short names too.
  kernels::Choices<DType> choices = kernels::dtypeChoices();
  for (auto [word, t] : std::initializer_list<std::pair<const char *, DType>>{
           {"i8", DType::i8}, {"u8", DType::u8}, {"i32", DType::i32}, {"f8e4m3", DType::f8e4m3},
           {"f8e5m2", DType::f8e5m2}, {"e4m3", DType::f8e4m3}, {"e5m2", DType::f8e5m2},
           {"ue8m0", DType::ue8m0}}) {
    bool listed = false;
    for (const auto &choice : choices) listed |= choice.first == word;
    if (!listed) choices.emplace_back(word, t);
  }
  return kernels::parseChoice(key, p.at(key), choices);
}

WarpPolicy tessel::harness::policyParam(const Params &p, const std::string &key) {
  return kernels::parseChoice(key, p.at(key), kernels::policyChoices());
}

WarpSpecialize tessel::harness::warpSpecializeParam(const Params &p, const std::string &key) {
  return kernels::parseChoice(key, p.at(key), kernels::warpSpecializeChoices());
}

GemmInstruction tessel::harness::instructionParam(const Params &p, const std::string &key) {
  return kernels::parseChoice(key, p.at(key), kernels::instructionChoices());
}

int tessel::harness::checkTimingReps() {
  const char *text = std::getenv("TESSEL_CHECK_REPS");
  if (!text || !*text) return 20;
  return int(parseInteger(text, 0, 100000, "TESSEL_CHECK_REPS"));
}

double tessel::harness::checkTime(const std::function<void()> &launch) {
  int reps = checkTimingReps();
  if (reps == 0) return 0;
  return rt::timeMedian([&](int) { launch(); }, 3, reps);
}

CheckResult tessel::harness::launchAndCompare(Kernel &k, DeviceRun &run, size_t out, HostTensor &result,
                             const std::vector<double> &ref, double tolerance, CheckResult r) {
  k.launch(run.args);
  synchronize();
  run.download(out, result);
  r.relError = relativeError(result.values, ref);
  r.tolerance = tolerance;
  r.passed = r.relError < r.tolerance;
  rt::LoadedKernel &loaded = k.loadedFor(run.args);
  r.ms = checkTime([&] { loaded.launch(run.args); });
  return r;
}

