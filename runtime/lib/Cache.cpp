//===- Cache.cpp - compiled kernels in memory and on disk -----------------===//
#include "tessel/runtime/Cache.h"
#include "tessel/runtime/Files.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <map>
#include <mutex>

using namespace tessel::rt;
namespace fs = std::filesystem;

static constexpr char kMagic[8] = {'T', 'E', 'S', 'S', 'B', 'I', 'N', '6'};

namespace {
uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
uint64_t finish(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}

/// Two independent 64-bit hashes of `data`, eight bytes a step: keys and
/// checksums cover every warm compile's source and binary (hundreds of
/// kilobytes), where a byte-at-a-time hash cost milliseconds.
std::pair<uint64_t, uint64_t> hash128(const void *data, size_t n) {
  const auto *p = static_cast<const unsigned char *>(data);
  uint64_t a = 0x9e3779b97f4a7c15ull ^ n, b = 0xc2b2ae3d27d4eb4full + n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    a = rotl(a ^ (w * 0x87c37b91114253d5ull), 31) * 0x4cf5ad432745937full;
    b = rotl(b ^ (w * 0x52dce729da3ed7b5ull), 29) * 0x9e3779b97f4a7c15ull;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, n - i);
  a = rotl(a ^ (tail * 0x87c37b91114253d5ull), 31) * 0x4cf5ad432745937full;
  b = rotl(b ^ (tail * 0x52dce729da3ed7b5ull), 29) * 0x9e3779b97f4a7c15ull;
  return {finish(a ^ rotl(b, 17)), finish(b + a)};
}

uint64_t checksum(const void *data, size_t n) { return hash128(data, n).first; }
} // namespace

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
  // What every key shares (NVRTC's version and the device headers, a few
  // hundred kilobytes) is hashed once per process.
  static const std::string shared =
      hash(nvrtcVersion() + '\0' + deviceHeader() + '\0' + tcgen05EmulationHeader());
  std::string all = source + '\0' + arch + '\0' + shared;
  for (auto &o : options) all += '\0' + o;
  return hash(all);
}

std::string KernelCache::hash(const std::string &bytes) {
  // Two independent 64-bit hashes make accidental collisions negligible.
  auto [a, b] = hash128(bytes.data(), bytes.size());
  return fmt::format("{:016x}{:016x}", a, b);
}

bool KernelCache::enabled() { return cacheMode() != "none"; }

namespace {
/// The entry's fields after the magic: sizes of the cubin, ptxas's notes
/// and the PTX (stored last, read only when asked for), a checksum of the
/// first two and one of the PTX, the spill counts.
struct EntryHeader {
  uint64_t sizes[3];
  uint64_t sum, ptxSum;
  int64_t spills[2];
};
constexpr size_t kHeaderBytes = sizeof(kMagic) + sizeof(EntryHeader);

uint64_t bodyChecksum(const std::string &cubin, const std::string &notes) {
  return checksum(cubin.data(), cubin.size()) ^ rotl(checksum(notes.data(), notes.size()), 21);
}

bool plausible(const EntryHeader &h, uint64_t totalBytes) {
  return h.sizes[0] != 0 && h.sizes[0] <= totalBytes && h.sizes[1] <= totalBytes &&
         h.sizes[2] <= totalBytes &&
         totalBytes == kHeaderBytes + h.sizes[0] + h.sizes[1] + h.sizes[2];
}

/// `n` bytes at `offset` of `file`, or false.
bool readAt(const fs::path &file, uint64_t offset, uint64_t n, std::string &out) {
  std::FILE *f = std::fopen(file.c_str(), "rb");
  if (!f) return false;
  out.resize(n);
  bool ok = std::fseek(f, long(offset), SEEK_SET) == 0 && std::fread(out.data(), 1, n, f) == n;
  std::fclose(f);
  return ok;
}

/// The cubin, notes and header of an entry, its PTX left on disk; false
/// when anything does not check out.
bool readEntryFile(const fs::path &file, Binary &out, EntryHeader &h) {
  std::FILE *f = std::fopen(file.c_str(), "rb");
  if (!f) return false;
  auto read = [&](void *to, size_t n) { return std::fread(to, 1, n, f) == n; };
  char magic[sizeof(kMagic)];
  bool ok = std::fseek(f, 0, SEEK_END) == 0;
  long total = ok ? std::ftell(f) : -1;
  ok = ok && total >= long(kHeaderBytes) && std::fseek(f, 0, SEEK_SET) == 0 &&
       read(magic, sizeof(magic)) && !std::memcmp(magic, kMagic, sizeof(kMagic)) &&
       read(&h, sizeof(h)) && plausible(h, uint64_t(total));
  Binary b;
  if (ok) {
    b.cubin.resize(h.sizes[0]);
    b.performanceWarnings.resize(h.sizes[1]);
    ok = read(b.cubin.data(), h.sizes[0]) && read(b.performanceWarnings.data(), h.sizes[1]) &&
         bodyChecksum(b.cubin, b.performanceWarnings) == h.sum;
  }
  std::fclose(f);
  if (!ok) return false;
  b.spillStoreBytes = h.spills[0];
  b.spillLoadBytes = h.spills[1];
  out = std::move(b);
  return true;
}
} // namespace

std::string KernelCache::encode(const Binary &bin) {
  const std::string &ptx = bin.ptxText();
  EntryHeader h{{bin.cubin.size(), bin.performanceWarnings.size(), ptx.size()},
                bodyChecksum(bin.cubin, bin.performanceWarnings),
                checksum(ptx.data(), ptx.size()),
                {bin.spillStoreBytes, bin.spillLoadBytes}};
  std::string out(kMagic, sizeof(kMagic));
  out.append(reinterpret_cast<const char *>(&h), sizeof(h));
  return out + bin.cubin + bin.performanceWarnings + ptx;
}

bool KernelCache::decode(const std::string &bytes, Binary &out) {
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, sizeof(kMagic))) return false;
  EntryHeader h;
  std::memcpy(&h, bytes.data() + sizeof(kMagic), sizeof(h));
  if (!plausible(h, bytes.size())) return false;
  Binary b;
  b.cubin = bytes.substr(kHeaderBytes, h.sizes[0]);
  b.performanceWarnings = bytes.substr(kHeaderBytes + h.sizes[0], h.sizes[1]);
  b.ptx = bytes.substr(kHeaderBytes + h.sizes[0] + h.sizes[1], h.sizes[2]);
  if (bodyChecksum(b.cubin, b.performanceWarnings) != h.sum ||
      checksum(b.ptx.data(), b.ptx.size()) != h.ptxSum)
    return false;
  b.spillStoreBytes = h.spills[0];
  b.spillLoadBytes = h.spills[1];
  out = std::move(b);
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

std::shared_ptr<Binary> KernelCache::readEntry(const std::string &dir, const fs::path &file,
                                               const std::string &source, const std::string &arch,
                                               const std::vector<std::string> &options) {
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
  auto loaded = std::make_shared<Binary>();
  EntryHeader h;
  if (!readEntryFile(file, *loaded, h)) {
    // Corrupt or truncated: delete it; the rebuilt entry replaces it.
    ++counters.diskRejected;
    fs::remove(file, ec);
    return nullptr;
  }
  ++counters.diskHits;
  // The PTX stays on disk until someone asks for it (a dump, --emit ptx).
  uint64_t offset = kHeaderBytes + h.sizes[0] + h.sizes[1], size = h.sizes[2], sum = h.ptxSum;
  loaded->lazyPtx = std::make_shared<LazyText>([file, offset, size, sum, source, arch, options] {
    std::string ptx;
    if (readAt(file, offset, size, ptx) && checksum(ptx.data(), ptx.size()) == sum) return ptx;
    // The entry went away or was replaced since: NVRTC gives it again.
    return compileCuda(source, arch, options).ptx;
  });
  return loaded;
}

void KernelCache::writeEntry(const std::string &dir, const fs::path &file, const Binary &bin) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return warnUnusable(dir, ec.message());
  // Written whole, so a concurrent reader never sees half an entry.
  if (std::string why = replaceFile(file, encode(bin)); !why.empty()) warnUnusable(dir, why);
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
  if (!dir.empty()) bin = readEntry(dir, file, source, arch, options);
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
