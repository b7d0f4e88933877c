//===- TensorView.h - typed device tensors as launch arguments --*- C++ -*-===//
//
// What a caller hands a kernel: device memory with its element type, shape,
// strides and device. A launch checks each view against the kernel's
// parameter and says which argument is wrong and how, before anything
// reaches the GPU. Frameworks' tensors arrive through DLPack
// (fromDLPack), which needs no framework headers.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_RUNTIME_TENSORVIEW_H
#define TESSEL_RUNTIME_TENSORVIEW_H

#include "tessel/runtime/KernelSpec.h"

#include <cstdint>
#include <string>
#include <vector>

struct DLManagedTensor;

namespace tessel::rt {

struct TensorView {
  /// Device address of element [0, ..., 0].
  uint64_t data = 0;
  ScalarType dtype = ScalarType::F32;
  std::vector<int64_t> shape;
  /// Elements between neighbours in each dimension; empty means row-major
  /// contiguous.
  std::vector<int64_t> strides;
  /// CUDA device ordinal the memory lives on.
  int device = 0;

  /// A row-major contiguous view.
  static TensorView contiguous(uint64_t data, ScalarType dtype, std::vector<int64_t> shape,
                               int device = 0) {
    return {data, dtype, std::move(shape), {}, device};
  }
  int64_t numel() const;
  /// Whether the elements are row-major without gaps: every stride is the
  /// product of the extents inside it (dimensions of extent 1 may have any
  /// stride, as frameworks leave them).
  bool isContiguous() const;
  /// The strides a contiguous view of this shape has.
  std::vector<int64_t> contiguousStrides() const;
  /// e.g. "bf16[2, 1024, 16, 128] on device 0" (strides shown when not
  /// contiguous).
  std::string str() const;
};

/// A view of a DLPack tensor (kDLCUDA memory, one lane): f16, bf16, f32,
/// f64, i8, u8, i32, i64, bool, and DLPack 1.1's float8_e4m3fn (F8E4M3),
/// float8_e5m2 (F8E5M2) and float8_e8m0fnu (UE8M0, MX scales); the other
/// 8-bit floats (e4m3 with infinities, the fnuz variants, e3m4) are
/// refused by name. The tensor stays owned by its producer: keep it alive
/// while the view is used. Throws tessel::Error naming what is not
/// supported.
TensorView fromDLPack(const DLManagedTensor &tensor);

} // namespace tessel::rt

namespace tessel {
using rt::TensorView;
} // namespace tessel

#endif
