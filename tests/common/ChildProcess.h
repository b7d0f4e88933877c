//===- ChildProcess.h - run a hidden test case in a child -------*- C++ -*-===//
//
// A kernel that traps kills its CUDA context, and every later test with it:
// such cases are hidden ("[.tag]") and run by another test in a child
// process of the same binary, whose output it checks.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TESTS_CHILDPROCESS_H
#define TESSEL_TESTS_CHILDPROCESS_H

#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <string>

namespace tessel::test {

struct ChildResult {
  int status;         // as pclose returns it
  std::string output; // stdout and stderr
};

/// Runs this binary's test cases tagged `tag` ("[.name]") in a child.
inline ChildResult runTaggedChild(const std::string &tag) {
  std::string cmd = fmt::format("{} '{}' 2>&1",
                                std::filesystem::read_symlink("/proc/self/exe").string(), tag);
  ChildResult r{-1, ""};
  FILE *child = popen(cmd.c_str(), "r");
  if (!child) return r;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), child)) r.output.append(buffer, n);
  r.status = pclose(child);
  return r;
}

} // namespace tessel::test

#endif
