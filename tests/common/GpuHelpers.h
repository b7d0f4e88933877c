//===- GpuHelpers.h - streams, device tensors, a reference gemm -*- C++ -*-===//
#ifndef TESSEL_TESTS_COMMON_GPUHELPERS_H
#define TESSEL_TESTS_COMMON_GPUHELPERS_H

#include "tessel/Testing.h"
#include "tessel/runtime/Driver.h"

#include <random>
#include <vector>

namespace tessel::test {

/// A stream of the test's own (non-blocking), destroyed with it.
struct Stream {
  CUstream s = nullptr;
  Stream() {
    rt::Driver &d = rt::Driver::get();
    d.makeCurrent();
    TESSEL_CU(d, cuStreamCreate, &s, CU_STREAM_NON_BLOCKING);
  }
  ~Stream() { rt::Driver::get().api().cuStreamDestroy(s); }
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;
  void sync() const { TESSEL_CU(rt::Driver::get(), cuStreamSynchronize, s); }
};

/// A host tensor with its device copy, seen as a library view: random
/// (from `rng`, uploaded) or NaN-poisoned (every element must be written).
struct DeviceTensor {
  testing::HostTensor host;
  rt::DeviceBuffer device;
  DeviceTensor(DType t, std::vector<int64_t> shape, std::mt19937_64 *rng = nullptr)
      : host(t, shape), device(host.bytes.size()) {
    if (rng) {
      testing::randomize(host, *rng);
      device.upload(host.bytes.data(), host.bytes.size());
    } else {
      device.fillBytes(0xff);
    }
  }
  TensorView view() const { return testing::viewOf(device, host, device.device()); }
  /// The device's bytes back into `host`, decoded.
  void fetch() {
    device.download(host.bytes.data(), host.bytes.size());
    host.decode();
  }
};

/// C = A B in float64 for row-major A [m, k] and B [k, n].
inline std::vector<double> referenceGemm(const testing::HostTensor &a,
                                         const testing::HostTensor &b) {
  int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
  std::vector<double> c(m * n, 0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t l = 0; l < k; ++l)
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += double(a.values[i * k + l]) * b.values[l * n + j];
  return c;
}

} // namespace tessel::test

#endif
