//===- Pool.h - fuzz programs in child processes with a watchdog -*- C++ -*-===//
//
// Each program compiles (and runs) in a forked child, so a compiler crash
// or a kernel that traps or hangs is one program's failure, not the
// fuzzer's. The parent builds no IR and touches no GPU: forking it is safe.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_FUZZ_POOL_H
#define TESSEL_FUZZ_POOL_H

#include "Execute.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace tessel::fuzz {

struct Task {
  uint64_t id = 0;
  /// Runs in the child; calls its argument once compiling is done, which
  /// switches the watchdog from the compile limit to the run limit.
  std::function<Outcome(const std::function<void()> &compiled)> work;
};

struct Limits {
  double compileSeconds = 300; // a compile that takes longer has hung
  double runSeconds = 20;      // running every build of one program
};

/// Runs the tasks `next` gives (until it gives none) in up to `jobs`
/// children at once and hands each outcome to `done` in the parent. A child
/// past its limit is killed and `hung`; one that dies is `crashed`, with
/// the tail of its stderr. Children's stderr goes to files under `scratch`.
void runPool(const std::function<std::optional<Task>()> &next, int jobs, const Limits &limits,
             const std::string &scratch, const std::function<void(uint64_t, const Outcome &)> &done);

/// One task through the pool (a fresh child), for shrinking.
Outcome runIsolated(const Task &task, const Limits &limits, const std::string &scratch);

} // namespace tessel::fuzz

#endif
