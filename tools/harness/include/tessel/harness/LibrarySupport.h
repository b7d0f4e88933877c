//===- LibrarySupport.h - host tensors, launches and checks -----*- C++ -*-===//
//
// What the library's checks and benchmarks share: parameters, timed
// checks, settings defaults, and (from tessel/Testing.h, under the
// harness's names) host tensors rounded to the device's element type,
// device buffers poisoned before a launch, and the relative error against
// a float64 reference.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_HARNESS_LIBRARYSUPPORT_H
#define TESSEL_HARNESS_LIBRARYSUPPORT_H

#include "tessel/Testing.h"
#include "tessel/harness/Library.h"
#include "tessel/kernels/gemm/WeightGemm.h"
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
/// f8e5m2, ue8m0), or e4m3 / e5m2 for the FP8 formats.
DType dtypeParam(const Params &p, const std::string &key);
WarpPolicy policyParam(const Params &p, const std::string &key);
WarpSpecialize warpSpecializeParam(const Params &p, const std::string &key);
GemmInstruction instructionParam(const Params &p, const std::string &key);

// Host tensors, device runs, relative errors, tolerances and the wait for
// a launch (which reports a kernel fault) are the installed package's
// (tessel/Testing.h), under the harness's names.
using testing::DeviceRun;
using testing::HostTensor;
using testing::randomize;
using testing::relativeError;
using testing::synchronize;
using testing::toleranceFor;

/// Timed launches a check makes after comparing (20 unless TESSEL_CHECK_REPS
/// says otherwise; 0 skips timing, for runs under compute-sanitizer).
int checkTimingReps();
/// The median time of `launch` for a check, 0 when checkTimingReps() is 0.
double checkTime(const std::function<void()> &launch);

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
/// paged_decode and mla_decode (DecodeLibrary.cpp).
std::vector<LibraryKernel> decodeKernels();
/// The [N, K] weights that int4 codes (u8 [N, K / 2]) or int8 codes (i8
/// [N, K]) with scales (and zeros) [K / group, N] stand for, each (c - z) *
/// s in f32 rounded to `activations` (kernels::WeightGemmConfig).
std::vector<float> dequantizeWeights(kernels::WeightFormat format, DType activations,
                                     const HostTensor &codes, const HostTensor &scales,
                                     const HostTensor *zeros);
/// weight_gemm and weight_dequantize (WeightGemmLibrary.cpp).
std::vector<LibraryKernel> weightGemmKernels();

} // namespace tessel::harness

#endif
