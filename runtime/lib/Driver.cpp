//===- Driver.cpp - the CUDA driver, loaded at run time -------------------===//
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Error.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <mutex>

using namespace tessel;
using namespace tessel::rt;

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
  TESSEL_CU(*this, cuDeviceGet, &dev, 0);
  int major = 0, minor = 0;
  TESSEL_CU(*this, cuDeviceGetAttribute, &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  TESSEL_CU(*this, cuDeviceGetAttribute, &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  cc = major * 10 + minor;
  TESSEL_CU(*this, cuDevicePrimaryCtxRetain, &ctx, dev);
  makeCurrent();
}

Driver &Driver::get() {
  static Driver driver;
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    try {
      driver.load();
    } catch (const Error &e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw Error(failure);
  return driver;
}

bool Driver::available(std::string *why) {
  try {
    get();
    return true;
  } catch (const Error &e) {
    if (why) *why = e.what();
    return false;
  }
}

void Driver::makeCurrent() const { check(fns.cuCtxSetCurrent(ctx), "cuCtxSetCurrent"); }

std::string Driver::deviceName() const {
  char name[256] = {};
  check(fns.cuDeviceGetName(name, sizeof(name), dev), "cuDeviceGetName");
  return name;
}

void Driver::check(CUresult result, const char *call) const {
  if (result == CUDA_SUCCESS) return;
  const char *name = nullptr, *text = nullptr;
  if (fns.cuGetErrorName) fns.cuGetErrorName(result, &name);
  if (fns.cuGetErrorString) fns.cuGetErrorString(result, &text);
  throw Error(fmt::format("{} failed: {} ({})", call, name ? name : "unknown error",
                          text ? text : "no description"));
}
