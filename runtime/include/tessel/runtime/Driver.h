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
#include <cstdint>
#include <string>
#include <vector>

namespace tessel::rt {

struct DriverApi {
#define TESSEL_DRIVER_FN(name) decltype(&::name) name = nullptr;
#include "tessel/runtime/DriverFunctions.def"
};

/// The CUDA driver and the process's devices. Each device is used through
/// its primary context. A thread works on its current device: the one it
/// chose with setDevice, else the process default (setDefaultDevice, else
/// $TESSEL_DEVICE, else 0). Memory, module loads and launches go to the
/// current device; errors name it.
class Driver {
public:
  /// The driver, loaded and initialised on first use. Throws tessel::Error
  /// ("no CUDA driver", "no GPU") when it cannot be.
  static Driver &get();
  /// Whether a driver and at least one GPU are present; never throws.
  static bool available(std::string *why = nullptr);

  const DriverApi &api() const { return fns; }
  int deviceCount() const { return static_cast<int>(devices.size()); }
  /// The calling thread's device ordinal.
  int currentDevice() const;
  /// Makes `ordinal` the calling thread's device (and its primary context
  /// current). Throws naming the devices there are.
  void setDevice(int ordinal);
  /// The device of threads that never called setDevice.
  void setDefaultDevice(int ordinal);

  // The current device's properties.
  CUdevice device() const { return state(currentDevice()).dev; }
  CUcontext context() const { return state(currentDevice()).ctx; }
  /// Compute capability as major * 10 + minor (90 for H100).
  int computeCapability() const { return state(currentDevice()).cc; }
  std::string deviceName() const { return deviceName(currentDevice()); }
  std::string deviceName(int ordinal) const;
  int computeCapability(int ordinal) const { return state(ordinal).cc; }
  /// Streaming multiprocessors of `ordinal`.
  int multiprocessors(int ordinal) const { return state(ordinal).sms; }
  /// Bytes of L2 cache of `ordinal`.
  int64_t l2CacheBytes(int ordinal) const { return state(ordinal).l2Bytes; }
  /// The primary context of `ordinal`, retained on first use.
  CUcontext context(int ordinal) const { return state(ordinal).ctx; }
  /// Makes the current device's primary context current on the thread.
  void makeCurrent() const;

  /// Throws tessel::Error naming `call`, the current device and the
  /// driver's explanation, followed by what a kernel reported before it
  /// trapped, if one did.
  void check(CUresult result, const char *call) const;

  /// The device address of the trap report: pinned host memory mapped into
  /// every context, where a kernel describes why it traps (a flag wait that
  /// timed out) before the trap kills the context. Allocated on first use.
  CUdeviceptr trapReportAddress();
  /// The report's text, once a kernel has written one (emptying it), or "".
  std::string takeTrapReport() const;

private:
  struct DeviceState {
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    int cc = 0;
    int sms = 0;
    int64_t l2Bytes = 0;
  };
  Driver() = default;
  void load();
  /// The device's state, its context retained on first use.
  const DeviceState &state(int ordinal) const;
  void requireOrdinal(int ordinal, const char *what) const;
  DriverApi fns;
  mutable std::vector<DeviceState> devices;
  void *trapReport = nullptr; // host side of trapReportAddress()
  CUdeviceptr trapReportDevice = 0;
};

/// Makes `ordinal` the calling thread's device for its lifetime (no change
/// for -1), then restores the thread's earlier choice (or lack of one) and
/// the context that was current.
class ScopedDevice {
public:
  explicit ScopedDevice(int ordinal);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice &) = delete;
  ScopedDevice &operator=(const ScopedDevice &) = delete;

private:
  int saved = -1;
  bool changed = false;
};

#define TESSEL_CU(driver, call, ...) (driver).check((driver).api().call(__VA_ARGS__), #call)

} // namespace tessel::rt

#endif
