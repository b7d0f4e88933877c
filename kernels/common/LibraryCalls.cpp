//===- LibraryCalls.cpp - compiled-kernel cache and view checks -----------===//
#include "common/LibraryCalls.h"
#include "tessel/runtime/Driver.h"

#include <algorithm>
#include <set>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <map>
#include <mutex>

using namespace tessel;
using namespace tessel::kernels;

namespace {
struct CacheEntry {
  std::once_flag once;
  std::shared_ptr<Kernel> kernel;
};
} // namespace

std::shared_ptr<Kernel> tessel::kernels::cachedKernel(const std::string &key,
                                                      const std::string &arch,
                                                      const std::function<Program()> &build,
                                                      bool &compiled) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<CacheEntry>> entries;
  std::shared_ptr<CacheEntry> entry;
  {
    std::lock_guard<std::mutex> lock(mutex);
    std::shared_ptr<CacheEntry> &slot = entries[arch + '\n' + key];
    if (!slot) slot = std::make_shared<CacheEntry>();
    entry = slot;
  }
  compiled = false;
  // Compiles outside the map's lock: other configurations proceed; callers
  // of this one wait for it. A failed compile leaves the entry unset, so
  // the next call reports the error again.
  std::call_once(entry->once, [&] {
    Program program = build();
    entry->kernel = std::make_shared<Kernel>(compile(program, {.arch = arch}));
    compiled = true;
  });
  return entry->kernel;
}

std::string tessel::kernels::targetFor(const std::string &asked, int device) {
  if (!asked.empty()) return asked;
  rt::Driver &d = rt::Driver::get();
  return rt::nativeArch(d.computeCapability(device));
}

DType tessel::kernels::dtypeOf(rt::ScalarType t) {
  switch (t) {
  case rt::ScalarType::F16: return DType::f16;
  case rt::ScalarType::BF16: return DType::bf16;
  case rt::ScalarType::F32: return DType::f32;
  case rt::ScalarType::F64: return DType::f64;
  case rt::ScalarType::I32: return DType::i32;
  case rt::ScalarType::I64: return DType::i64;
  case rt::ScalarType::Index: return DType::index;
  case rt::ScalarType::I1: return DType::i1;
  case rt::ScalarType::I8: return DType::i8;
  case rt::ScalarType::U8: return DType::u8;
  case rt::ScalarType::F8E4M3: return DType::f8e4m3;
  case rt::ScalarType::F8E5M2: return DType::f8e5m2;
  case rt::ScalarType::UE8M0: return DType::ue8m0;
  }
  return DType::f32;
}

rt::ScalarType tessel::kernels::scalarOf(DType t) {
  switch (t) {
  case DType::f16: return rt::ScalarType::F16;
  case DType::bf16: return rt::ScalarType::BF16;
  case DType::f32: return rt::ScalarType::F32;
  case DType::f64: return rt::ScalarType::F64;
  case DType::i32: return rt::ScalarType::I32;
  case DType::i64: return rt::ScalarType::I64;
  case DType::index: return rt::ScalarType::Index;
  case DType::i1: return rt::ScalarType::I1;
  case DType::i8: return rt::ScalarType::I8;
  case DType::u8: return rt::ScalarType::U8;
  case DType::f8e4m3: return rt::ScalarType::F8E4M3;
  case DType::f8e5m2: return rt::ScalarType::F8E5M2;
  case DType::ue8m0: return rt::ScalarType::UE8M0;
  }
  return rt::ScalarType::F32;
}

void tessel::kernels::requireView(const TensorView &view, const char *what, size_t rank,
                                  std::initializer_list<rt::ScalarType> dtypes) {
  if (view.shape.size() != rank)
    throw Error(fmt::format("{} is {}: it needs {} dimensions", what, view.str(), rank));
  if (std::find(dtypes.begin(), dtypes.end(), view.dtype) == dtypes.end()) {
    std::vector<std::string> names;
    for (rt::ScalarType t : dtypes) names.push_back(rt::scalarName(t));
    throw Error(fmt::format("{} is {}: it must be {}", what, view.str(), fmt::join(names, " or ")));
  }
  if (!view.isContiguous())
    throw Error(fmt::format("{} is {}: the kernels read it row-major contiguous (strides [{}]); "
                            "pass a contiguous copy",
                            what, view.str(), fmt::join(view.contiguousStrides(), ", ")));
  if (view.data == 0) throw Error(fmt::format("{} is {} at address 0", what, view.str()));
  if (view.data % 16)
    throw Error(fmt::format("{} is {} at address {:#x}, which is not 16-byte aligned", what,
                            view.str(), view.data));
}

void tessel::kernels::requireShape(const TensorView &view, const char *what,
                                   const std::vector<int64_t> &shape) {
  if (view.shape != shape)
    throw Error(fmt::format("{} is {}: expected shape [{}]", what, view.str(), fmt::join(shape, ", ")));
}

int tessel::kernels::commonDevice(std::initializer_list<const TensorView *> views) {
  const TensorView *first = *views.begin();
  for (const TensorView *v : views)
    if (v->device != first->device)
      throw Error(fmt::format("tensors on devices {} and {}: every tensor of a call must be on one "
                              "device",
                              first->device, v->device));
  return first->device;
}

void kernels::warnOnce(const std::string &message) {
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mutex);
  if (said.insert(message).second) fmt::print(stderr, "{}\n", message);
}

StreamScratch::StreamScratch(uint64_t given, size_t givenBytes, size_t bytes, CUstream stream,
                             const std::string &needs)
    : address(given), stream(stream) {
  if (given && givenBytes < bytes)
    throw Error(fmt::format("the workspace has {} bytes; {} needs {}", givenBytes, needs, bytes));
  if (given) return;
  rt::Driver &d = rt::Driver::get();
  TESSEL_CU(d, cuMemAllocAsync, &address, bytes, stream);
  owned = true;
}

StreamScratch::~StreamScratch() {
  if (owned) rt::Driver::get().api().cuMemFreeAsync(address, stream);
}
