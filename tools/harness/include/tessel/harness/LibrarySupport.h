//===- LibrarySupport.h - host tensors, launches and checks -----*- C++ -*-===//
//
// What the library's checks and benchmarks share: parameters, host tensors
// rounded to the device's element type, device buffers poisoned before a
// launch, and the relative error against a float64 reference.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_HARNESS_LIBRARYSUPPORT_H
#define TESSEL_HARNESS_LIBRARYSUPPORT_H

#include "tessel/harness/Library.h"
#include "tessel/runtime/Driver.h"

#include <fmt/format.h>
#include <functional>
#include <memory>
#include <random>

namespace tessel::harness {

/// An integer parameter (a 32-bit value: sizes, counts, tile shapes).
int64_t intParam(const Params &p, const std::string &key);
/// A parameter that is 0 or 1.
bool flagParam(const Params &p, const std::string &key);
double realParam(const Params &p, const std::string &key);

/// The value of a parameter that names one of `choices`; an error lists them.
template <class T>
T choiceParam(const Params &p, const std::string &key,
              std::initializer_list<std::pair<const char *, T>> choices) {
  const std::string &v = p.at(key);
  std::string names;
  for (auto [name, value] : choices) {
    if (v == name) return value;
    names += names.empty() ? name : std::string(", ") + name;
  }
  throw Error(fmt::format("parameter {}={}: use one of {}", key, v, names));
}

/// A type by its DType name (the kernels' dtype choices and i8, u8, f8e4m3,
/// f8e5m2), or e4m3 / e5m2 for the FP8 formats.
DType dtypeParam(const Params &p, const std::string &key);
WarpPolicy policyParam(const Params &p, const std::string &key);
WarpSpecialize warpSpecializeParam(const Params &p, const std::string &key);
GemmInstruction instructionParam(const Params &p, const std::string &key);

/// A host tensor in the kernel's element type, kept as rounded floats too.
/// Types: f32, f16, bf16 and the FP8 formats round to nearest even (FP8
/// saturating as the device's conversions do, tessel/runtime/LowPrecision.h);
/// i32 truncates toward zero; i8 and u8 truncate toward zero and saturate
/// to [-128, 127] and [0, 255] (they never wrap; NaN gives 0).
struct HostTensor {
  DType type;
  std::vector<int64_t> shape;
  std::vector<float> values; // the values the device sees
  std::string bytes;
  HostTensor(DType t, std::vector<int64_t> s);
  void set(int64_t i, float v);
  /// Reads `values` back from `bytes` (after a download).
  void decode();
};

/// Uniform values over the type's usual range: [-1, 1] for floats (and, as
/// before, i32), rounded to the type; every value of i8 and u8.
void randomize(HostTensor &t, std::mt19937_64 &rng);
/// Uniform values in [lo, hi] rounded to the type; for i8 and u8 each whole
/// number in [lo, hi] and the type's range equally likely.
void randomize(HostTensor &t, std::mt19937_64 &rng, float lo, float hi);
/// ||out - ref|| / ||ref||; infinite when `out` has a non-finite element
/// (unwritten poison or a broken result).
double relativeError(const std::vector<float> &out, const std::vector<double> &ref);
/// The relative error a check of an output of type `t` allows: 1e-5 for
/// f32, 2^-4 for f8e4m3 and 2^-3 for f8e5m2 (one rounding to the type),
/// 1e-6 for i8/u8 (exact), 1e-2 otherwise.
double toleranceFor(DType t);

/// Uploads inputs, poisons outputs with NaN bytes, launches, downloads.
struct DeviceRun {
  std::vector<std::unique_ptr<rt::DeviceBuffer>> buffers;
  std::vector<rt::LaunchArg> args;
  /// Uploads `t` (or fills its buffer with 0xff bytes), appends its
  /// argument and returns a copy of it.
  rt::LaunchArg addTensor(HostTensor &t, bool poison);
  void download(size_t argIndex, HostTensor &t);
};

/// Timed launches a check makes after comparing (20 unless TESSEL_CHECK_REPS
/// says otherwise; 0 skips timing, for runs under compute-sanitizer).
int checkTimingReps();
/// The median time of `launch` for a check, 0 when checkTimingReps() is 0.
double checkTime(const std::function<void()> &launch);

/// Waits for the launch, so that a kernel fault is reported by the check.
void synchronize();
/// Launches once, compares argument `out` with `ref`, then times the kernel.
CheckResult launchAndCompare(Kernel &k, DeviceRun &run, size_t out, HostTensor &result,
                             const std::vector<double> &ref, double tolerance, CheckResult r);

/// A kernel's defaults: its configuration's, written by its settings
/// table, and the run's shapes (whose names must differ from the
/// settings').
template <class Config>
Params defaultsFrom(const kernels::SettingsTable<Config> &table, const Params &shapes) {
  Params p = table.write(Config{});
  for (const auto &[key, value] : shapes)
    if (!p.emplace(key, value).second)
      throw Error("run shape '" + key + "' has the name of a setting of the kernel");
  return p;
}

/// The builder of a kernel whose configuration its table reads from a
/// run's settings.
template <class Config>
std::function<Program(const Params &)> builtFrom(const kernels::SettingsTable<Config> &table,
                                                 Program (*build)(const Config &)) {
  return [&table, build](const Params &p) { return build(table.read(p)); };
}

/// The attention kernels of the library (forward, backward and its helpers).
std::vector<LibraryKernel> attentionKernels();

} // namespace tessel::harness

#endif
