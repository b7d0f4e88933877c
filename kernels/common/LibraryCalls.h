//===- LibraryCalls.h - what the tensor-level library calls share -*- C++ -*-===//
//
// The compiled-kernel cache behind tessel::attention and tessel::gemm, and
// the checks every call makes on its views before compiling anything.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_COMMON_LIBRARYCALLS_H
#define TESSEL_KERNELS_COMMON_LIBRARYCALLS_H

#include "tessel/Tessel.h"
#include "tessel/dsl/Compile.h"

#include <functional>
#include <memory>
#include <string>

namespace tessel::kernels {

/// The kernel that `build` makes for `arch`, compiled once per process and
/// `key` (one compile even when several threads ask at once); `compiled`
/// says whether this call compiled it.
std::shared_ptr<Kernel> cachedKernel(const std::string &key, const std::string &arch,
                                     const std::function<Program()> &build, bool &compiled);

/// Prints `message` to stderr the first time this process says it.
void warnOnce(const std::string &message);

/// `compile(tuned)` where a tuned record gave the settings (`tunedOn` names
/// whose record), else `compile(untuned)`. A record this build cannot
/// compile (written by another version, or edited) is not an error: the
/// call warns once, clears `tunedOn` and runs the defaults.
template <class Config, class Compile>
auto compileTunedOr(const Config &tuned, const Config &untuned, std::string &tunedOn,
                    const std::string &kernel, Compile compile) -> decltype(compile(untuned)) {
  if (tunedOn.empty()) return compile(untuned);
  try {
    return compile(tuned);
  } catch (const Error &e) {
    std::string why = e.what();
    warnOnce("tessel: warning: the " + kernel + " configuration tuned on " + tunedOn +
             " does not compile here (" + why.substr(0, why.find('\n')) + "); the defaults run");
    tunedOn.clear();
    return compile(untuned);
  }
}

/// A call's device scratch on `stream`: the caller's workspace (`given`,
/// checked to hold `bytes`; the error names `needs`, the call's size
/// function), else memory allocated on the stream and freed after the
/// call's launches on it, also when one of them throws. The call's device
/// must be current.
class StreamScratch {
public:
  StreamScratch(uint64_t given, size_t givenBytes, size_t bytes, CUstream stream,
                const std::string &needs);
  ~StreamScratch();
  StreamScratch(const StreamScratch &) = delete;
  StreamScratch &operator=(const StreamScratch &) = delete;
  CUdeviceptr base() const { return address; }

private:
  CUdeviceptr address = 0;
  CUstream stream;
  bool owned = false;
};

/// `asked`, or the target of the device the tensors live on.
std::string targetFor(const std::string &asked, int device);

DType dtypeOf(rt::ScalarType t);
rt::ScalarType scalarOf(DType t);

/// Throws tessel::Error unless `view` has `rank` dimensions, one of
/// `dtypes`, and row-major contiguous strides; `what` names it.
void requireView(const TensorView &view, const char *what, size_t rank,
                 std::initializer_list<rt::ScalarType> dtypes);
/// Throws unless `view` has exactly `shape`.
void requireShape(const TensorView &view, const char *what, const std::vector<int64_t> &shape);
/// Throws unless every view lives on one device; returns it.
int commonDevice(std::initializer_list<const TensorView *> views);

} // namespace tessel::kernels

#endif
