//===- Tune.h - tessel tune -------------------------------------*- C++ -*-===//
#ifndef TESSEL_TOOLS_TESSEL_TUNE_H
#define TESSEL_TOOLS_TESSEL_TUNE_H

#include "tessel/harness/Library.h"

#include <string>

namespace tessel {

/// `tessel tune KERNEL`: compiles every candidate configuration at once
/// (`jobs` threads; 0 = one per core), times each at the shape `params`
/// give, and records the fastest for this device and shape bucket. With
/// `compileOnly`, or without a GPU, stops after compiling (the latter
/// says so and fails).
int tuneCommand(const std::string &kernel, const harness::Params &params, const std::string &arch,
                int reps, int jobs, bool compileOnly);

} // namespace tessel

#endif
