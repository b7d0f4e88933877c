//===- LibraryChecks.h - a library kernel's harness check in a GPU test -*- C++ -*-===//
#ifndef TESSEL_TESTS_COMMON_LIBRARYCHECKS_H
#define TESSEL_TESTS_COMMON_LIBRARYCHECKS_H

#include "tessel/harness/LibrarySupport.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <random>

namespace tessel::test {

/// Compiles the library kernel `name` for `arch` with `overrides` over its
/// defaults (and the target's), runs its harness check on fresh random
/// inputs (the seed printed, to rerun a failure) and checks that it passed.
inline void checkLibraryKernel(const std::string &name, const harness::Params &overrides,
                               const std::string &arch) {
  const harness::LibraryKernel &entry = harness::findKernel(name);
  harness::Params p = harness::withDefaults(entry, overrides, arch);
  Program program = entry.build(p);
  Kernel k = compile(program, {arch, ""});
  uint64_t seed = std::random_device{}();
  harness::CheckResult r = entry.check(k, p, seed);
  std::string line = fmt::format("{} on {} {}: rel error {:.3e} (tolerance {:.0e}) seed {}", name,
                                 arch, r.shape, r.relError, r.tolerance, seed);
  fmt::print("{}\n", line);
  INFO(line);
  CHECK(r.passed);
}

} // namespace tessel::test

#endif
