//===- Tuning.h - tuned configurations by kernel, device and shape -*- C++ -*-===//
//
// `tessel tune` times a kernel's candidate configurations and records the
// fastest for the device and the shape bucket (problem parameters as they
// are, extents rounded up to powers of two) as a small text file under the
// kernel cache's directory (tune/). `--param config=auto` applies it; with
// nothing recorded, the kernel's documented defaults run, and the tool says
// so.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_HARNESS_TUNING_H
#define TESSEL_HARNESS_TUNING_H

#include "tessel/harness/Library.h"
#include "tessel/kernels/Tuned.h"

#include <filesystem>
#include <optional>
#include <string>

namespace tessel::harness {

/// e.g. "in=bf16,out=f16,transpose_a=0,transpose_b=0,M=8192,N=16384,K=4096".
std::string shapeBucket(const LibraryKernel &k, const Params &p);

/// `overrides` with `config=auto` replaced by the record for the device
/// (else for `arch`), or `config=library` by what the library's call picks
/// for the problem (LibraryKernel::libraryChoice), under the caller's
/// explicit settings; `said` tells which record or choice was used, or that
/// none was and the defaults run. Other values of `config` are an error;
/// without `config`, `overrides` as given.
Params resolveConfig(const LibraryKernel &k, Params overrides, const std::string &device,
                     const std::string &arch, std::string *said);

} // namespace tessel::harness

#endif
