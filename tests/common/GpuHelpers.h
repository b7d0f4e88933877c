//===- GpuHelpers.h - streams and a reference gemm for GPU tests -*- C++ -*-===//
#ifndef TESSEL_TESTS_COMMON_GPUHELPERS_H
#define TESSEL_TESTS_COMMON_GPUHELPERS_H

#include "tessel/Testing.h"
#include "tessel/runtime/Driver.h"

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
