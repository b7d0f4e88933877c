//===- OutsideChecks.h - what the outside-kernel tests check ------*- C++ -*-===//
//
// The checks the outside kernels' unit tests share: a quiet compile that
// also assembles the PTX with ptxas (and dumps the CUDA and PTX where
// TESSEL_OUTSIDE_DUMP names a folder, and prints the remarks when
// TESSEL_OUTSIDE_REMARKS is set), and readings of the remarks.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TESTS_OUTSIDECHECKS_H
#define TESSEL_TESTS_OUTSIDECHECKS_H

#include <catch2/catch.hpp>

#include "tessel/dsl/Compile.h"

#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace tessel::test {

/// How often `what` occurs in `text`.
inline size_t count(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

/// Every remark of `k`, one a line.
inline std::string remarksText(const Kernel &k) {
  std::string out;
  for (const Remark &r : k.remarks()) out += r.str() + "\n";
  return out;
}

/// Compiles `p` for `arch` quietly and assembles its PTX with ptxas.
inline Kernel compileQuiet(Program &p, const std::string &arch) {
  CompileOptions o;
  o.arch = arch;
  o.printWarnings = false;
  Kernel k = compile(p, o);
  auto ptx = std::filesystem::temp_directory_path() /
             fmt::format("tessel-outside-{}-{}-{}.ptx", p.name(), arch, ::getpid());
  std::ofstream(ptx) << k.ptx();
  std::string cmd = fmt::format("{} -arch={} {} -o /dev/null", TESSEL_PTXAS, arch, ptx.string());
  CHECK(std::system(cmd.c_str()) == 0);
  std::filesystem::remove(ptx);
  if (const char *dir = std::getenv("TESSEL_OUTSIDE_DUMP")) {
    std::filesystem::create_directories(dir);
    std::ofstream(std::filesystem::path(dir) / (p.name() + "-" + arch + ".cu")) << k.cuda();
    std::ofstream(std::filesystem::path(dir) / (p.name() + "-" + arch + ".ptx")) << k.ptx();
  }
  if (std::getenv("TESSEL_OUTSIDE_REMARKS"))
    fmt::print("== {} on {} (spills {})\n{}", p.name(), arch, k.spillBytes(), remarksText(k));
  return k;
}

/// A remark that says a pipelined loop (or one of its copies) was not
/// pipelined.
inline bool saysNotPipelined(const Kernel &k) {
  for (const Remark &r : k.remarks())
    if (r.category == "pipelining") return true;
  return false;
}

/// The warnings whose message does not contain any of `allowed`.
inline std::vector<std::string> unexpectedWarnings(const Kernel &k,
                                                   const std::vector<std::string> &allowed) {
  std::vector<std::string> out;
  for (const Remark &r : k.remarks()) {
    if (!r.isWarning) continue;
    bool ok = false;
    for (const std::string &a : allowed) ok |= r.message.find(a) != std::string::npos;
    if (!ok) out.push_back(r.str());
  }
  return out;
}

} // namespace tessel::test

#endif
