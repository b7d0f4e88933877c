//===- Cache.cpp - compiled kernels in memory and on disk -----------------===//
#include "tessel/runtime/Cache.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <mutex>
#include <unistd.h>

using namespace tessel::rt;
namespace fs = std::filesystem;

static constexpr char kMagic[8] = {'T', 'E', 'S', 'S', 'B', 'I', 'N', '3'};

static uint64_t fnv1a(const void *data, size_t n, uint64_t h = 1469598103934665603ull) {
  auto *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static std::mutex mutex;
static std::map<std::string, std::shared_ptr<const Binary>> memory;

KernelCache &KernelCache::global() {
  static KernelCache cache;
  return cache;
}

static std::string cacheMode() {
  const char *mode = std::getenv("TESSEL_CACHE");
  return mode ? mode : "";
}

std::string KernelCache::directory() const {
  std::string mode = cacheMode();
  if (mode == "off" || mode == "none" || mode == "0") return "";
  if (const char *dir = std::getenv("TESSEL_CACHE_DIR"); dir && *dir) return dir;
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return (fs::path(xdg) / "tessel").string();
  if (const char *home = std::getenv("HOME"); home && *home)
    return (fs::path(home) / ".cache" / "tessel").string();
  return "";
}

std::string KernelCache::key(const std::string &source, const std::string &arch,
                             const std::vector<std::string> &options) {
  std::string all = source + '\0' + arch + '\0' + nvrtcVersion() + '\0' + deviceHeader() +
                    '\0' + tcgen05EmulationHeader();
  for (auto &o : options) all += '\0' + o;
  // Two independent 64-bit hashes make accidental collisions negligible.
  return fmt::format("{:016x}{:016x}", fnv1a(all.data(), all.size()),
                     fnv1a(all.data(), all.size(), 0x9e3779b97f4a7c15ull));
}

std::string KernelCache::encode(const Binary &bin) {
  uint64_t sizes[3] = {bin.cubin.size(), bin.ptx.size(), bin.performanceWarnings.size()};
  const std::string body = bin.cubin + bin.ptx + bin.performanceWarnings;
  uint64_t sum = fnv1a(body.data(), body.size());
  std::string out(kMagic, sizeof(kMagic));
  out.append(reinterpret_cast<const char *>(sizes), sizeof(sizes));
  out.append(reinterpret_cast<const char *>(&sum), sizeof(sum));
  int64_t spills[2] = {bin.spillStoreBytes, bin.spillLoadBytes};
  out.append(reinterpret_cast<const char *>(spills), sizeof(spills));
  return out + body;
}

bool KernelCache::decode(const std::string &bytes, Binary &out) {
  constexpr size_t header = sizeof(kMagic) + 6 * sizeof(uint64_t);
  if (bytes.size() < header || std::memcmp(bytes.data(), kMagic, sizeof(kMagic))) return false;
  uint64_t sizes[3], sum;
  std::memcpy(sizes, bytes.data() + sizeof(kMagic), sizeof(sizes));
  std::memcpy(&sum, bytes.data() + sizeof(kMagic) + sizeof(sizes), sizeof(sum));
  if (sizes[0] == 0 || bytes.size() != header + sizes[0] + sizes[1] + sizes[2]) return false;
  if (fnv1a(bytes.data() + header, bytes.size() - header) != sum) return false;
  out.cubin = bytes.substr(header, sizes[0]);
  out.ptx = bytes.substr(header + sizes[0], sizes[1]);
  out.performanceWarnings = bytes.substr(header + sizes[0] + sizes[1], sizes[2]);
  int64_t spills[2];
  std::memcpy(spills, bytes.data() + sizeof(kMagic) + sizeof(sizes) + sizeof(sum), sizeof(spills));
  out.spillStoreBytes = spills[0];
  out.spillLoadBytes = spills[1];
  return true;
}

void KernelCache::clearMemory() {
  std::lock_guard<std::mutex> lock(mutex);
  memory.clear();
}

/// Says once per process that the disk cache is not being used, and why;
/// compiling goes on without it.
static void warnUnusable(const std::string &dir, const std::string &why) {
  static std::once_flag once;
  std::call_once(once, [&] {
    fmt::print(stderr,
               "tessel: warning: the kernel cache directory {} is unusable ({}); kernels are "
               "compiled without the disk cache (set TESSEL_CACHE_DIR, or TESSEL_CACHE=off)\n",
               dir, why);
  });
}

std::shared_ptr<Binary> KernelCache::readEntry(const std::string &dir, const fs::path &file) {
  std::error_code ec;
  fs::file_status status = fs::status(file, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    warnUnusable(dir, ec.message());
    return nullptr;
  }
  if (!fs::exists(status)) return nullptr;
  if (!fs::is_regular_file(status)) {
    // Not ours to delete (a directory, a device): compile, and say so.
    warnUnusable(dir, file.filename().string() + " is not a regular file");
    return nullptr;
  }
  std::ifstream in(file, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto loaded = std::make_shared<Binary>();
  if (in.bad() || !decode(bytes, *loaded)) {
    // Corrupt or truncated: delete it; the rebuilt entry replaces it.
    ++counters.diskRejected;
    fs::remove(file, ec);
    return nullptr;
  }
  ++counters.diskHits;
  return loaded;
}

void KernelCache::writeEntry(const std::string &dir, const fs::path &file, const Binary &bin) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return warnUnusable(dir, ec.message());
  // Write then rename, so a concurrent reader never sees half an entry.
  fs::path tmp = file;
  tmp += fmt::format(".tmp{}.{}", getpid(), ++tmpCounter);
  std::string bytes = encode(bin);
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(bytes.data(), bytes.size());
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      return warnUnusable(dir, "cannot write " + tmp.filename().string());
    }
  }
  fs::rename(tmp, file, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    warnUnusable(dir, "cannot replace " + file.filename().string() + ": " + ec.message());
  }
}

std::shared_ptr<const Binary>
KernelCache::getOrCompile(const std::string &source, const std::string &arch,
                          const std::vector<std::string> &options) {
  std::string k = key(source, arch, options);
  bool useMemory = cacheMode() != "none";
  if (useMemory) {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = memory.find(k); it != memory.end()) {
      ++counters.memoryHits;
      return it->second;
    }
  }
  std::string dir = directory();
  fs::path file = dir.empty() ? fs::path() : fs::path(dir) / (k + ".tbin");
  std::shared_ptr<Binary> bin;
  if (!dir.empty()) bin = readEntry(dir, file);
  if (!bin) {
    bin = std::make_shared<Binary>(compileCuda(source, arch, options));
    ++counters.nvrtcCompiles;
    if (!dir.empty()) writeEntry(dir, file, *bin);
  }
  if (useMemory) {
    std::lock_guard<std::mutex> lock(mutex);
    memory[k] = bin;
  }
  return bin;
}
