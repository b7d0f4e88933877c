//===- Tuning.cpp - tuned configurations by kernel, device and shape ------===//
#include "tessel/harness/Tuning.h"

#include <climits>
#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::harness;

std::string tessel::harness::shapeBucket(const LibraryKernel &k, const Params &p) {
  std::vector<std::pair<std::string, std::string>> problem;
  std::vector<std::pair<std::string, int64_t>> extents;
  for (const std::string &key : k.tuning.problemKeys) problem.push_back({key, p.at(key)});
  for (const std::string &key : k.tuning.shapeKeys)
    extents.push_back({key, parseInteger(p.at(key), 1, INT32_MAX, key)});
  return tunedBucket(problem, extents);
}

Params tessel::harness::resolveConfig(const LibraryKernel &k, Params overrides,
                                      const std::string &device, const std::string &arch,
                                      std::string *said) {
  auto it = overrides.find("config");
  if (it == overrides.end()) return overrides;
  if (it->second == "library") {
    overrides.erase(it);
    if (!k.libraryChoice)
      throw Error(fmt::format("config=library: {}'s call has no rule of its own (gemm's has)",
                              k.name));
    Params all = withDefaults(k, overrides, arch);
    std::string applied;
    for (auto &[key, value] : k.libraryChoice(arch, all)) {
      if (overrides.count(key) || all.at(key) == value) continue; // the caller's own settings win
      overrides[key] = value;
      applied += fmt::format(" {}={}", key, value);
    }
    if (said)
      *said = fmt::format("config=library: the call's own choice:{}",
                          applied.empty() ? " the defaults" : applied);
    return overrides;
  }
  if (it->second != "auto")
    throw Error(fmt::format("config={}: use auto (the tuned configuration) or library (what the "
                            "library's call picks)",
                            it->second));
  overrides.erase(it);
  if (!k.tuning.candidates) {
    std::string tunable;
    for (const LibraryKernel &other : library())
      if (other.tuning.candidates) tunable += (tunable.empty() ? "" : ", ") + other.name;
    throw Error(fmt::format("config=auto: {} has no tuned configurations (tessel tune knows {})",
                            k.name, tunable));
  }
  Params all = withDefaults(k, overrides, arch);
  if (std::string why = k.tuning.untunable ? k.tuning.untunable(all) : ""; !why.empty()) {
    if (said) *said = fmt::format("config=auto: {}; the defaults run", why);
    return overrides;
  }
  std::string bucket = shapeBucket(k, all);
  std::optional<Params> tuned;
  std::string from;
  for (const std::string &who : {device, arch}) {
    if (who.empty() || tuned) continue;
    tuned = findTuned(k.name, who, bucket);
    from = who;
  }
  if (!tuned) {
    if (said)
      *said = fmt::format("config=auto: nothing tuned for {} on {} at {}; the defaults run (tessel "
                          "tune {} with these shapes records a configuration)",
                          k.name, device.empty() ? arch : device, bucket, k.name);
    return overrides;
  }
  std::string applied;
  for (auto &[key, value] : *tuned) {
    if (overrides.count(key)) continue; // the caller's own settings win
    overrides[key] = value;
    applied += fmt::format(" {}={}", key, value);
  }
  if (said) *said = fmt::format("config=auto: tuned on {} for {}:{}", from, bucket, applied);
  return overrides;
}
