//===- Execute.h - compile and run fuzz programs ----------------*- C++ -*-===//
#ifndef TESSEL_FUZZ_EXECUTE_H
#define TESSEL_FUZZ_EXECUTE_H

#include "Spec.h"

#include <functional>
#include <string>
#include <vector>

namespace tessel::fuzz {

/// How one program fared. A program is valid by construction, so anything
/// but `passed` is a failure, except `skipped`: no build asked for can
/// target it (FP8 on sm_80 only), or a run has nothing to compare it with.
/// A skipped program is neither passed nor failed, and is counted apart.
struct Outcome {
  enum Kind { passed, compileError, crashed, mismatch, hung, runError, skipped } kind = passed;
  std::string message;
};
const char *name(Outcome::Kind k);

/// Compiles `s` for every build in this process (NVRTC to cubin; no GPU
/// needed). Returns compileError with the first build's tessel::Error.
Outcome compileAll(const Spec &s, const std::vector<Build> &builds);

/// The inputs a run gives `s` and the outputs the CPU reference computes
/// from them, as text (for --cpu-dump).
std::string describeReference(const Spec &s);

/// Runs every build of `s` on the GPU with deterministic inputs and
/// poisoned outputs, and compares each build's outputs with the first's:
/// bit for bit (either zero matching the other), or within 1e-5 relative
/// where the program is inexact.
/// `compiled` is called once every build has compiled, before any runs.
/// With `cpuReference`, every build is also compared with what the
/// program computes on the CPU (Reference.cpp).
Outcome runAll(const Spec &s, const std::vector<Build> &builds, const std::function<void()> &compiled = {},
               bool cpuReference = false);

} // namespace tessel::fuzz

#endif
