//===- Tuned.cpp - configurations recorded by tessel tune -----------------===//
#include "tessel/kernels/Tuned.h"
#include "tessel/runtime/Cache.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Error.h"
#include "tessel/runtime/Files.h"

#include <cctype>
#include <fmt/format.h>
#include <mutex>

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

std::string tessel::kernels::tunedBucket(
    const std::vector<std::pair<std::string, std::string>> &problem,
    const std::vector<std::pair<std::string, int64_t>> &extents) {
  std::string out;
  auto add = [&](const std::string &key, const std::string &value) {
    out += (out.empty() ? "" : ",") + key + "=" + value;
  };
  for (auto &[key, value] : problem) add(key, value);
  for (auto &[key, extent] : extents) add(key, std::to_string(roundUpToPowerOfTwo(extent)));
  return out;
}

fs::path tessel::kernels::tunedFile(const std::string &kernel, const std::string &device,
                                     const std::string &bucket) {
  std::string dir = rt::KernelCache::global().directory();
  if (dir.empty()) return {};
  return fs::path(dir) / "tune" / fileSafe(kernel) / fileSafe(device) / (fileSafe(bucket) + ".txt");
}

std::optional<TunedSettings> tessel::kernels::findTuned(const std::string &kernel,
                                                 const std::string &device,
                                                 const std::string &bucket) {
  fs::path file = tunedFile(kernel, device, bucket);
  std::string text;
  if (file.empty() || !rt::readWholeFile(file, text)) return std::nullopt;
  TunedSettings p;
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

std::pair<std::optional<TunedSettings>, std::string>
tessel::kernels::tunedRecord(const std::string &kernel, int device, const std::string &arch,
                             const std::string &bucket) {
  static std::mutex mutex;
  static std::map<std::string, std::pair<std::optional<TunedSettings>, std::string>> seen;
  std::string key = rt::KernelCache::global().directory() + '\n' + kernel + '\n' +
                    std::to_string(device) + '\n' + arch + '\n' + bucket;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = seen.find(key); it != seen.end()) return it->second;
  std::vector<std::string> who;
  if (rt::Driver::available()) who.push_back(rt::Driver::get().deviceName(device));
  who.push_back(arch);
  std::pair<std::optional<TunedSettings>, std::string> found;
  for (const std::string &w : who)
    if (std::optional<TunedSettings> record = findTuned(kernel, w, bucket)) {
      found = {record, w};
      break;
    }
  return seen[key] = found;
}

void tessel::kernels::recordTuned(const std::string &kernel, const std::string &device,
                                  const std::string &bucket, const TunedSettings &config) {
  fs::path file = tunedFile(kernel, device, bucket);
  if (file.empty()) throw Error("the kernel cache is off (TESSEL_CACHE), so a tuned configuration has nowhere to go");
  rt::createDirectories(file.parent_path(), "tuning");
  std::string text = fmt::format("# {} on {}, {}\n", kernel, device, bucket);
  for (auto &[key, value] : config) text += key + "=" + value + "\n";
  if (std::string why = rt::replaceFile(file, text); !why.empty())
    throw Error(fmt::format("cannot record the tuned configuration in {}: {}", file.string(), why));
}

