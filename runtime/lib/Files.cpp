//===- Files.cpp - files written for the user -----------------------------===//
#include "tessel/runtime/Files.h"
#include "tessel/runtime/Error.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <unistd.h>

using namespace tessel;
namespace fs = std::filesystem;

void rt::createDirectories(const fs::path &dir, std::string_view purpose) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw Error(fmt::format("cannot create the {} directory {}: {}", purpose, dir.string(),
                            ec.message()));
  if (!fs::is_directory(dir, ec))
    throw Error(fmt::format("cannot use {} as the {} directory: it is not a directory",
                            dir.string(), purpose));
}

void rt::writeFile(const fs::path &file, std::string_view bytes) {
  // stdio rather than ofstream: fclose reports a write that fails late (a
  // full disk), and errno says why.
  std::FILE *f = std::fopen(file.c_str(), "wb");
  if (!f) throw Error(fmt::format("cannot write {}: {}", file.string(), std::strerror(errno)));
  size_t written = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
  int writeErrno = errno;
  bool flushed = std::fflush(f) == 0;
  int flushErrno = errno;
  bool closed = std::fclose(f) == 0;
  if (written != bytes.size() || !flushed || !closed) {
    int why = written != bytes.size() ? writeErrno : !flushed ? flushErrno : errno;
    throw Error(fmt::format("cannot write {}: {} ({} of {} bytes written)", file.string(),
                            std::strerror(why), written, bytes.size()));
  }
}

bool rt::readWholeFile(const fs::path &file, std::string &bytes) {
  std::FILE *f = std::fopen(file.c_str(), "rb");
  if (!f) return false;
  bool ok = std::fseek(f, 0, SEEK_END) == 0;
  long size = ok ? std::ftell(f) : -1;
  ok = size >= 0 && std::fseek(f, 0, SEEK_SET) == 0;
  if (ok) {
    bytes.resize(static_cast<size_t>(size));
    ok = std::fread(bytes.data(), 1, bytes.size(), f) == bytes.size();
  }
  std::fclose(f);
  return ok;
}

std::string rt::replaceFile(const fs::path &file, std::string_view bytes) {
  static std::atomic<uint64_t> counter{0};
  fs::path tmp = file;
  tmp += fmt::format(".tmp{}.{}", getpid(), ++counter);
  std::FILE *f = std::fopen(tmp.c_str(), "wb");
  bool written = f && std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (f && std::fclose(f) != 0) written = false;
  std::error_code ec;
  if (!written) {
    fs::remove(tmp, ec);
    return "cannot write " + tmp.filename().string();
  }
  fs::rename(tmp, file, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    return "cannot replace " + file.filename().string() + ": " + ec.message();
  }
  return "";
}
