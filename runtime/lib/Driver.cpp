//===- Driver.cpp - the CUDA driver, loaded at run time -------------------===//
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Error.h"
#include "tessel/runtime/LoadOnce.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

using namespace tessel;
using namespace tessel::rt;

/// Threads that never called setDevice work on the process default.
static thread_local int threadDevice = -1;
static std::atomic<int> defaultDevice{0};

// The ABI each entry point is requested at. cuda.h's prototypes are those of
// 12.8: CUDA 13.0 changed cuCtxSynchronize to take a context, and asking for
// 13.0 would hand back that version behind the old prototype.
static constexpr int kDriverAbiVersion = 12080;

void Driver::load() {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    throw Error(fmt::format("no CUDA driver: dlopen(\"libcuda.so.1\") failed: {}", dlerror()));
  auto getProc = reinterpret_cast<decltype(&::cuGetProcAddress)>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!getProc)
    throw Error("no CUDA driver: libcuda.so.1 has no cuGetProcAddress_v2 (driver older than CUDA 12)");
  auto take = [&](const char *name, void **slot) {
    CUdriverProcAddressQueryResult status;
    CUresult r = getProc(name, slot, kDriverAbiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (r != CUDA_SUCCESS || !*slot)
      throw Error(fmt::format("CUDA driver too old: cuGetProcAddress(\"{}\") failed (driver "
                              "must support CUDA {}.{})",
                              name, kDriverAbiVersion / 1000, kDriverAbiVersion % 1000 / 10));
  };
#define TESSEL_DRIVER_FN(name) take(#name, reinterpret_cast<void **>(&fns.name));
#include "tessel/runtime/DriverFunctions.def"
  TESSEL_CU(*this, cuInit, 0);
  int count = 0;
  TESSEL_CU(*this, cuDeviceGetCount, &count);
  if (count == 0) throw Error("no GPU: the CUDA driver found no device");
  devices.resize(count);
  for (int i = 0; i < count; ++i) {
    TESSEL_CU(*this, cuDeviceGet, &devices[i].dev, i);
    int major = 0, minor = 0;
    TESSEL_CU(*this, cuDeviceGetAttribute, &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
              devices[i].dev);
    TESSEL_CU(*this, cuDeviceGetAttribute, &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
              devices[i].dev);
    devices[i].cc = major * 10 + minor;
    TESSEL_CU(*this, cuDeviceGetAttribute, &devices[i].sms,
              CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, devices[i].dev);
    int l2 = 0;
    TESSEL_CU(*this, cuDeviceGetAttribute, &l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, devices[i].dev);
    devices[i].l2Bytes = l2;
  }
  if (const char *env = std::getenv("TESSEL_DEVICE"); env && *env) {
    char *end = nullptr;
    long ordinal = std::strtol(env, &end, 10);
    if (*end || ordinal < 0 || ordinal >= count)
      throw Error(fmt::format("TESSEL_DEVICE={} is not a device: this machine has {} (0 to {})", env,
                              count, count - 1));
    defaultDevice = static_cast<int>(ordinal);
  }
  makeCurrent();
}

Driver &Driver::get() {
  static Driver driver;
  static std::once_flag once;
  static std::string failure;
  loadOnce(once, failure, [] { driver.load(); });
  return driver;
}

bool Driver::available(std::string *why) { return succeeds([] { get(); }, why); }

int Driver::currentDevice() const { return threadDevice >= 0 ? threadDevice : defaultDevice.load(); }

void Driver::requireOrdinal(int ordinal, const char *what) const {
  if (ordinal < 0 || ordinal >= deviceCount())
    throw Error(fmt::format("{}({}): there is no such device; this machine has {} (0 to {})", what,
                            ordinal, deviceCount(), deviceCount() - 1));
}

void Driver::setDevice(int ordinal) {
  requireOrdinal(ordinal, "setDevice");
  threadDevice = ordinal;
  makeCurrent();
}

ScopedDevice::ScopedDevice(int ordinal) {
  if (ordinal < 0) return;
  Driver &d = Driver::get();
  if (d.currentDevice() == ordinal) return;
  saved = threadDevice;
  d.setDevice(ordinal);
  changed = true;
}

ScopedDevice::~ScopedDevice() {
  if (!changed) return;
  threadDevice = saved;
  // A destructor reports nothing; the next call that needs the context
  // makes it current again.
  try {
    Driver &d = Driver::get();
    d.api().cuCtxSetCurrent(d.context());
  } catch (const Error &) {
  }
}

void Driver::setDefaultDevice(int ordinal) {
  requireOrdinal(ordinal, "setDefaultDevice");
  defaultDevice = ordinal;
  if (threadDevice < 0) makeCurrent();
}

const Driver::DeviceState &Driver::state(int ordinal) const {
  requireOrdinal(ordinal, "device");
  static std::mutex retainMutex;
  std::lock_guard<std::mutex> lock(retainMutex);
  DeviceState &s = devices[ordinal];
  if (!s.ctx) {
    CUresult r = fns.cuDevicePrimaryCtxRetain(&s.ctx, s.dev);
    if (r != CUDA_SUCCESS) {
      s.ctx = nullptr;
      const char *name = nullptr;
      fns.cuGetErrorName(r, &name);
      throw Error(fmt::format("cuDevicePrimaryCtxRetain failed on device {}: {}", ordinal,
                              name ? name : "unknown error"));
    }
  }
  return s;
}

void Driver::makeCurrent() const { check(fns.cuCtxSetCurrent(context()), "cuCtxSetCurrent"); }

std::string Driver::deviceName(int ordinal) const {
  requireOrdinal(ordinal, "deviceName");
  char name[256] = {};
  check(fns.cuDeviceGetName(name, sizeof(name), devices[ordinal].dev), "cuDeviceGetName");
  return name;
}

void Driver::check(CUresult result, const char *call) const {
  if (result == CUDA_SUCCESS) return;
  const char *name = nullptr, *text = nullptr;
  if (fns.cuGetErrorName) fns.cuGetErrorName(result, &name);
  if (fns.cuGetErrorString) fns.cuGetErrorString(result, &text);
  std::string where =
      devices.empty() ? std::string() : fmt::format(" on device {}", currentDevice());
  // The capture errors name the rule, not the way out.
  bool capture = result >= CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED &&
                 result <= CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  throw Error(fmt::format("{} failed{}: {} ({}){}{}", call, where, name ? name : "unknown error",
                          text ? text : "no description",
                          capture ? "; this call cannot be captured into a CUDA graph: allocate, "
                                    "copy from the host and synchronize before the capture begins"
                                  : "",
                          takeTrapReport()));
}

namespace {
/// The host's view of the device header's tessel_trap_report.
struct TrapReport {
  unsigned state; // 0 empty, 1 being written, 2 written
  int held, expected;
  unsigned block[3];
  unsigned long long address;
  long long timeoutMs;
  char what[96];
};
static_assert(sizeof(TrapReport) == 136, "must match tessel_trap_report in tessel_device.h");
} // namespace

CUdeviceptr Driver::trapReportAddress() {
  static std::mutex allocation;
  std::lock_guard<std::mutex> lock(allocation);
  if (trapReport) return trapReportDevice;
  // Portable: pinned for every context; with unified addressing the
  // device address is the same in all of them.
  void *host = nullptr;
  TESSEL_CU(*this, cuMemHostAlloc, &host, sizeof(TrapReport),
            CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
  std::memset(host, 0, sizeof(TrapReport));
  TESSEL_CU(*this, cuMemHostGetDevicePointer, &trapReportDevice, host, 0);
  trapReport = host;
  return trapReportDevice;
}

std::string Driver::takeTrapReport() const {
  if (!trapReport) return "";
  auto *r = static_cast<volatile TrapReport *>(trapReport);
  if (r->state != 2) return "";
  char what[sizeof(r->what)];
  for (size_t i = 0; i < sizeof(what); ++i) what[i] = r->what[i];
  what[sizeof(what) - 1] = 0;
  // A negative timeout marks a broken rule (tessel::trap_with_report).
  std::string text =
      r->timeoutMs < 0
          ? fmt::format("; a kernel trapped: {} (block ({}, {}, {}), thread value {}, limit {})",
                        what, r->block[0], r->block[1], r->block[2], r->held, r->expected)
          : fmt::format("; a kernel trapped: its wait on {} timed out after {} ms (the flag at "
                        "{:#x} held {}, block ({}, {}, {}) waited for {})",
                        what, r->timeoutMs, r->address, r->held, r->block[0], r->block[1],
                        r->block[2], r->expected);
  r->state = 0;
  return text;
}
