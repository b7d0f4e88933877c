//===- ScopedCacheDir.h - a kernel cache of a test's own --------*- C++ -*-===//
#ifndef TESSEL_TESTS_SCOPEDCACHEDIR_H
#define TESSEL_TESTS_SCOPEDCACHEDIR_H

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

namespace tessel::test {

/// TESSEL_CACHE_DIR pointed at a fresh temporary directory for the scope
/// (a test's own tuned records and binaries), restored and removed after.
struct ScopedCacheDir {
  std::filesystem::path dir;
  std::optional<std::string> saved;
  explicit ScopedCacheDir(const std::string &name)
      : dir(std::filesystem::temp_directory_path() / name) {
    std::filesystem::remove_all(dir);
    if (const char *before = std::getenv("TESSEL_CACHE_DIR")) saved = before;
    setenv("TESSEL_CACHE_DIR", dir.c_str(), 1);
  }
  ~ScopedCacheDir() {
    if (saved) setenv("TESSEL_CACHE_DIR", saved->c_str(), 1);
    else unsetenv("TESSEL_CACHE_DIR");
    std::filesystem::remove_all(dir);
  }
};

} // namespace tessel::test

#endif
