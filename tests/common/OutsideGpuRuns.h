//===- OutsideGpuRuns.h - how the outside kernels' GPU tests build -*- C++ -*-===//
//
// The targets the outside kernels' GPU tests run on (the device's own, and
// sm_80's through its PTX on a later GPU, so that the cp.async pipelines
// without a producer warpgroup run too) and the quiet build they share: the
// unit tests check the warnings.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TESTS_OUTSIDEGPURUNS_H
#define TESSEL_TESTS_OUTSIDEGPURUNS_H

#include "tessel/dsl/Compile.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Launch.h"

#include <string>
#include <vector>

namespace tessel::test {

inline std::string deviceArch() {
  return rt::nativeArch(rt::Driver::get().computeCapability());
}

inline std::vector<std::string> runnableTargets() {
  std::vector<std::string> out = {deviceArch()};
  if (out[0] != "sm_80") out.push_back("sm_80");
  return out;
}

/// `p` for `arch`, its warnings not printed.
inline Kernel buildQuiet(Program &p, const std::string &arch) {
  CompileOptions o;
  o.arch = arch;
  o.printWarnings = false;
  return compile(p, o);
}

} // namespace tessel::test

#endif
