//===- Cache.h - compiled kernels in memory and on disk ---------*- C++ -*-===//
//
// Keyed by the generated source, the target, NVRTC's version and the options.
// Disk entries carry a magic, their sizes and a checksum; an entry that fails
// any check is deleted and rebuilt, never loaded. A directory that cannot be
// used (no permission, an entry path that is not a file) is reported once on
// stderr and compiling goes on without it.
//   TESSEL_CACHE_DIR  where entries live (default $XDG_CACHE_HOME/tessel or
//                     ~/.cache/tessel)
//   TESSEL_CACHE=off  no disk cache (the in-memory cache stays)
//   TESSEL_CACHE=none no cache at all
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_RUNTIME_CACHE_H
#define TESSEL_RUNTIME_CACHE_H

#include "tessel/runtime/Nvrtc.h"
#include <atomic>
#include <filesystem>
#include <memory>
#include <string>

namespace tessel::rt {

struct CacheStats {
  std::atomic<int> nvrtcCompiles{0}, memoryHits{0}, diskHits{0}, diskRejected{0};
};

class KernelCache {
public:
  static KernelCache &global();
  /// The binary for `source` on `arch`, compiling only on a miss.
  std::shared_ptr<const Binary> getOrCompile(const std::string &source, const std::string &arch,
                                             const std::vector<std::string> &options = {});
  CacheStats &stats() { return counters; }
  /// Where disk entries go ("" when the disk cache is off).
  std::string directory() const;
  /// Drops the in-memory entries (the disk stays).
  void clearMemory();

  static std::string key(const std::string &source, const std::string &arch,
                         const std::vector<std::string> &options);
  /// 32 hex digits naming `bytes` (two independent 64-bit hashes).
  static std::string hash(const std::string &bytes);
  /// Whether any cache is on (TESSEL_CACHE is not "none").
  static bool enabled();
  /// Serialised entry and its checked reader (exposed for tests).
  static std::string encode(const Binary &bin);
  static bool decode(const std::string &bytes, Binary &out);

private:
  std::shared_ptr<Binary> readEntry(const std::string &dir, const std::filesystem::path &file,
                                    const std::string &source, const std::string &arch,
                                    const std::vector<std::string> &options);
  void writeEntry(const std::string &dir, const std::filesystem::path &file, const Binary &bin);
  CacheStats counters;
};

} // namespace tessel::rt

#endif
