//===- TensorView.cpp - typed device tensors and DLPack import ------------===//
#include "tessel/runtime/TensorView.h"
#include "tessel/runtime/Error.h"
#include "tessel/runtime/Launch.h"

#include <dlpack/dlpack.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

using namespace tessel;
using namespace tessel::rt;

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

std::vector<int64_t> TensorView::contiguousStrides() const {
  std::vector<int64_t> out(shape.size());
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    out[d] = stride;
    stride *= shape[d];
  }
  return out;
}

bool TensorView::isContiguous() const {
  if (strides.empty()) return true;
  if (strides.size() != shape.size()) return false;
  std::vector<int64_t> expected = contiguousStrides();
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1 && strides[d] != expected[d]) return false;
  return true;
}

std::string TensorView::str() const {
  std::string s = fmt::format("{}[{}]", scalarName(dtype), fmt::join(shape, ", "));
  if (!isContiguous()) s += fmt::format(" with strides [{}]", fmt::join(strides, ", "));
  return s + fmt::format(" on device {}", device);
}

static ScalarType dlpackType(const DLDataType &t) {
  if (t.lanes != 1)
    throw Error(fmt::format("DLPack tensor with {} lanes per element: Tessel takes one", t.lanes));
  auto unsupported = [&]() -> ScalarType {
    throw Error(fmt::format("DLPack dtype (code {}, {} bits) is not supported: Tessel takes f16, "
                            "bf16, f32, f64, i32, i64 and bool",
                            int(t.code), int(t.bits)));
  };
  switch (t.code) {
  case kDLFloat:
    return t.bits == 16 ? ScalarType::F16 : t.bits == 32 ? ScalarType::F32
           : t.bits == 64                               ? ScalarType::F64
                                                        : unsupported();
  case kDLBfloat: return t.bits == 16 ? ScalarType::BF16 : unsupported();
  case kDLInt: return t.bits == 32 ? ScalarType::I32 : t.bits == 64 ? ScalarType::I64 : unsupported();
  default:
    // DLPack >= 0.8 has kDLBool = 6; bool is one byte.
    if (t.code == 6 && t.bits == 8) return ScalarType::I1;
    return unsupported();
  }
}

TensorView tessel::rt::fromDLPack(const DLManagedTensor &managed) {
  const DLTensor &t = managed.dl_tensor;
  if (t.device.device_type != kDLCUDA)
    throw Error(fmt::format("DLPack tensor on device type {} (id {}): Tessel kernels take CUDA "
                            "device memory (kDLCUDA = {})",
                            int(t.device.device_type), t.device.device_id, int(kDLCUDA)));
  if (t.ndim < 0) throw Error(fmt::format("DLPack tensor with rank {}", t.ndim));
  if (t.ndim > 0 && !t.shape) throw Error("DLPack tensor without a shape");
  TensorView v;
  v.dtype = dlpackType(t.dtype);
  v.device = t.device.device_id;
  v.data = reinterpret_cast<uint64_t>(t.data) + t.byte_offset;
  v.shape.assign(t.shape, t.shape + t.ndim);
  for (int64_t e : v.shape)
    if (e < 0) throw Error(fmt::format("DLPack tensor with extent {}", e));
  // No strides means row-major contiguous (DLPack's convention).
  if (t.strides) v.strides.assign(t.strides, t.strides + t.ndim);
  return v;
}

std::string tessel::rt::viewMismatch(const ParamSpec &param, const LaunchArg &arg,
                                     const std::string &what) {
  if (!arg.typed) return "";
  if (arg.dtype != param.type)
    return fmt::format("{} is {}, the kernel takes {}", what, scalarName(arg.dtype),
                       scalarName(param.type));
  TensorView v{arg.ptr, arg.dtype, arg.shape, arg.strides, arg.device};
  if (!v.isContiguous()) {
    // Generated code indexes row-major from the extents alone; TMA maps
    // take strides but the same parameter is also addressed directly.
    return fmt::format("{} has strides [{}], the kernel reads it row-major contiguous (strides "
                       "[{}]); pass a contiguous copy",
                       what, fmt::join(v.strides, ", "), fmt::join(v.contiguousStrides(), ", "));
  }
  return "";
}

int tessel::rt::argumentDevice(const std::vector<LaunchArg> &args, const std::string &kernel) {
  int device = -1;
  size_t first = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].typed || args[i].device < 0) continue;
    if (device < 0) {
      device = args[i].device;
      first = i;
    } else if (args[i].device != device) {
      throw Error(fmt::format("kernel {}: argument {} is on device {}, argument {} on device {}; "
                              "every tensor of a launch must be on one device",
                              kernel, first, device, i, args[i].device));
    }
  }
  return device;
}
