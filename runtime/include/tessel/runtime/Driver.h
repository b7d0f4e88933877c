//===- Driver.h - the CUDA driver, loaded at run time -----------*- C++ -*-===//
//
// libcuda is opened with dlopen and every entry point is taken through
// cuGetProcAddress, so Tessel's binaries start on machines without a GPU and
// say so clearly when asked to run something.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_RUNTIME_DRIVER_H
#define TESSEL_RUNTIME_DRIVER_H

#include <cuda.h>
#include <string>

namespace tessel::rt {

struct DriverApi {
#define TESSEL_DRIVER_FN(name) decltype(&::name) name = nullptr;
#include "tessel/runtime/DriverFunctions.def"
};

class Driver {
public:
  /// The driver, loaded and initialised on first use. Throws tessel::Error
  /// ("no CUDA driver", "no GPU") when it cannot be.
  static Driver &get();
  /// Whether a driver and at least one GPU are present; never throws.
  static bool available(std::string *why = nullptr);

  const DriverApi &api() const { return fns; }
  CUdevice device() const { return dev; }
  CUcontext context() const { return ctx; }
  /// Compute capability as major * 10 + minor (90 for H100).
  int computeCapability() const { return cc; }
  std::string deviceName() const;
  /// Makes the primary context current on the calling thread.
  void makeCurrent() const;

  /// Throws tessel::Error naming `call` and the driver's explanation.
  void check(CUresult result, const char *call) const;

private:
  Driver() = default;
  void load();
  DriverApi fns;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  int cc = 0;
};

#define TESSEL_CU(driver, call, ...) (driver).check((driver).api().call(__VA_ARGS__), #call)

} // namespace tessel::rt

#endif
