//===- Library.h - the kernel library by name, with GPU checks --*- C++ -*-===//
#ifndef TESSEL_HARNESS_LIBRARY_H
#define TESSEL_HARNESS_LIBRARY_H

#include "tessel/dsl/Compile.h"
#include "tessel/kernels/Settings.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace tessel::harness {

/// key=value settings: configuration (tile sizes, types) and run shapes.
using Params = kernels::Settings;

struct CheckResult {
  double relError = 0;  // ||out - ref|| / ||ref||, NaN-aware
  double tolerance = 0;
  double ms = 0;        // median kernel time
  bool passed = false;
  std::string shape;    // what ran, for reports
};

struct BenchResult {
  double ms = 0;        // median of repeated launches (CUDA events)
  double tflops = 0;
  double gbps = 0;      // bytes every launch must move (inputs + outputs) / time
  std::string shape;
};

/// What `tessel tune` varies for a kernel and how it groups run shapes.
struct TuneSpace {
  /// Parameters that name the problem rather than its size (types,
  /// transposes): part of a shape bucket as they are.
  std::vector<std::string> problemKeys;
  /// Extents: rounded up to a power of two in a shape bucket.
  std::vector<std::string> shapeKeys;
  /// The configurations worth timing on a target (each a set of
  /// parameters over the defaults) for a problem (the run's settings,
  /// defaults applied).
  std::function<std::vector<Params>(const std::string &arch, const Params &problem)> candidates;
  /// Why a run's settings (defaults applied) have no bucket of their own,
  /// or "" when they do: such runs are not tuned, and config=auto runs
  /// the defaults for them. Empty: every run has one.
  std::function<std::string(const Params &)> untunable = {};
};

struct LibraryKernel {
  std::string name, summary;
  Params defaults;
  std::function<Program(const Params &)> build;
  /// Runs the compiled kernel on fresh random inputs with poisoned outputs
  /// and compares with a float64 CPU reference.
  std::function<CheckResult(Kernel &, const Params &, uint64_t seed)> check;
  /// Times the kernel on random inputs without a reference (large shapes);
  /// empty for kernels without a benchmark.
  std::function<BenchResult(Kernel &, const Params &, int reps)> bench = {};
  /// Defaults that differ by target (an arch such as "sm_100a"), given the
  /// caller's settings: applied over `defaults`, under those settings.
  /// Empty when none do.
  std::function<Params(const std::string &arch, const Params &overrides)> targetDefaults = {};
  /// Empty for kernels the tuner does not know.
  TuneSpace tuning = {};
  /// The settings the library's call on views picks for a run's problem
  /// (its settings, defaults applied) on `arch`, without a configuration
  /// or a tuned record: what `config=library` runs. Empty for kernels whose
  /// call has no rule of its own.
  std::function<Params(const std::string &arch, const Params &problem)> libraryChoice = {};
};

using kernels::parseInteger;

const std::vector<LibraryKernel> &library();
/// The kernel called `name`; throws tessel::Error listing the known ones.
const LibraryKernel &findKernel(const std::string &name);
/// `defaults` (and the target's, for `arch`) overridden by `overrides`;
/// unknown keys are an error.
Params withDefaults(const LibraryKernel &k, const Params &overrides, const std::string &arch = "");

} // namespace tessel::harness

#endif
