//===- Nccl.cpp - NCCL, loaded at run time --------------------------------===//
#include "tessel/runtime/Nccl.h"
#include "tessel/runtime/Error.h"
#include "tessel/runtime/LoadOnce.h"

#include <cstdlib>
#include <dlfcn.h>
#include <fmt/format.h>
#include <link.h>
#include <mutex>

using namespace tessel;
using namespace tessel::rt;

void Nccl::load() {
  const char *env = std::getenv("TESSEL_NCCL_LIBRARY");
  std::string name = env && *env ? env : "libnccl.so.2";
  void *lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    throw Error(fmt::format("no NCCL: dlopen(\"{}\") failed: {}. Install NCCL for CUDA 13 "
                            "(libnccl2) or point TESSEL_NCCL_LIBRARY at libnccl.so.2",
                            name, dlerror()));
  auto take = [&](const char *symbol, void **slot) {
    *slot = dlsym(lib, symbol);
    if (!*slot)
      throw Error(fmt::format("NCCL at {} has no {}: Tessel needs NCCL 2.28 or newer", name, symbol));
  };
#define TESSEL_NCCL_FN(fn) take(#fn, reinterpret_cast<void **>(&fns.fn));
#include "tessel/runtime/NcclFunctions.def"
  check(fns.ncclGetVersion(&versionCode), "ncclGetVersion");
  link_map *map = nullptr;
  where = dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name ? map->l_name : name;
}

Nccl &Nccl::get() {
  static Nccl nccl;
  static std::once_flag once;
  static std::string failure;
  loadOnce(once, failure, [] { nccl.load(); });
  return nccl;
}

bool Nccl::available(std::string *why) { return succeeds([] { get(); }, why); }

std::string Nccl::version() const {
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return fmt::format("{}.{}.{}", versionCode / 10000, versionCode / 100 % 100, versionCode % 100);
}

void Nccl::check(ncclResult_t result, const char *call, ncclComm_t comm) const {
  if (result == ncclSuccess || result == ncclInProgress) return;
  const char *text = fns.ncclGetErrorString ? fns.ncclGetErrorString(result) : "unknown";
  const char *last = comm && fns.ncclGetLastError ? fns.ncclGetLastError(comm) : nullptr;
  throw Error(fmt::format("{} failed: {}{}{}", call, text, last && *last ? ": " : "",
                          last ? last : ""));
}
