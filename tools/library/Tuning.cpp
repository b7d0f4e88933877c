//===- Tuning.cpp - tuned configurations by kernel, device and shape ------===//
#include "Tuning.h"
#include "tessel/runtime/Cache.h"
#include "tessel/runtime/Files.h"

#include <cctype>
#include <climits>
#include <fmt/format.h>
#include <fstream>

using namespace tessel;
using namespace tessel::kernels;
namespace fs = std::filesystem;

namespace {
/// A file-name-safe spelling of a device or bucket.
std::string fileSafe(const std::string &text) {
  std::string out;
  for (char c : text) out += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '=' ? c : '_';
  return out;
}

int64_t roundUpToPowerOfTwo(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}
} // namespace

std::string tessel::kernels::shapeBucket(const LibraryKernel &k, const Params &p) {
  std::string out;
  auto add = [&](const std::string &key, const std::string &value) {
    out += (out.empty() ? "" : ",") + key + "=" + value;
  };
  for (const std::string &key : k.tuning.problemKeys) add(key, p.at(key));
  for (const std::string &key : k.tuning.shapeKeys)
    add(key, std::to_string(roundUpToPowerOfTwo(parseInteger(p.at(key), 1, INT32_MAX, key))));
  return out;
}

fs::path tessel::kernels::tuningFile(const std::string &kernel, const std::string &device,
                                     const std::string &bucket) {
  std::string dir = rt::KernelCache::global().directory();
  if (dir.empty()) return {};
  return fs::path(dir) / "tune" / fileSafe(kernel) / fileSafe(device) / (fileSafe(bucket) + ".txt");
}

std::optional<Params> tessel::kernels::findTuned(const std::string &kernel,
                                                 const std::string &device,
                                                 const std::string &bucket) {
  fs::path file = tuningFile(kernel, device, bucket);
  std::string text;
  if (file.empty() || !rt::readWholeFile(file, text)) return std::nullopt;
  Params p;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    std::string line = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? text.size() : end + 1;
    if (line.empty() || line[0] == '#') continue;
    size_t eq = line.find('=');
    // A record that does not parse is not used (the defaults run).
    if (eq == std::string::npos || eq == 0) return std::nullopt;
    p[line.substr(0, eq)] = line.substr(eq + 1);
  }
  if (p.empty()) return std::nullopt;
  return p;
}

void tessel::kernels::recordTuned(const std::string &kernel, const std::string &device,
                                  const std::string &bucket, const Params &config) {
  fs::path file = tuningFile(kernel, device, bucket);
  if (file.empty()) throw Error("the kernel cache is off (TESSEL_CACHE), so a tuned configuration has nowhere to go");
  rt::createDirectories(file.parent_path(), "tuning");
  std::string text = fmt::format("# {} on {}, {}\n", kernel, device, bucket);
  for (auto &[key, value] : config) text += key + "=" + value + "\n";
  fs::path tmp = file;
  tmp += ".tmp";
  rt::writeFile(tmp, text);
  std::error_code ec;
  fs::rename(tmp, file, ec);
  if (ec) throw Error(fmt::format("cannot write {}: {}", file.string(), ec.message()));
}

Params tessel::kernels::resolveConfig(const LibraryKernel &k, Params overrides,
                                      const std::string &device, const std::string &arch,
                                      std::string *said) {
  auto it = overrides.find("config");
  if (it == overrides.end()) return overrides;
  if (it->second != "auto")
    throw Error(fmt::format("config={}: the only value is auto (the tuned configuration)", it->second));
  overrides.erase(it);
  if (!k.tuning.candidates) {
    std::string tunable;
    for (const LibraryKernel &other : library())
      if (other.tuning.candidates) tunable += (tunable.empty() ? "" : ", ") + other.name;
    throw Error(fmt::format("config=auto: {} has no tuned configurations (tessel tune knows {})",
                            k.name, tunable));
  }
  std::string bucket = shapeBucket(k, withDefaults(k, overrides, arch));
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
