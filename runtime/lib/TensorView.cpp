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

/// Whether `strides` (empty: row-major) describe `shape` row-major without
/// gaps; computed without allocating, as every launch asks it.
static bool rowMajorWithoutGaps(const std::vector<int64_t> &shape,
                                const std::vector<int64_t> &strides) {
  if (strides.empty()) return true;
  if (strides.size() != shape.size()) return false;
  int64_t expected = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

bool TensorView::isContiguous() const { return rowMajorWithoutGaps(shape, strides); }

std::string TensorView::str() const {
  std::string s = fmt::format("{}[{}]", scalarName(dtype), fmt::join(shape, ", "));
  if (!isContiguous()) s += fmt::format(" with strides [{}]", fmt::join(strides, ", "));
  return s + fmt::format(" on device {}", device);
}

// Type codes of DLPack releases newer than the dlpack.h Tessel builds
// with (Debian's is 0.6), numbered as DLPack 1.1's include/dlpack/dlpack.h
// (github.com/dmlc/dlpack, tag v1.1) numbers DLDataTypeCode: kDLBool came
// in 0.8, the 8-bit floats (kDLFloat8_e3m4 = 7 through kDLFloat8_e8m0fnu =
// 14) in 1.1, which also numbers float6_e2m3fn 15, float6_e3m2fn 16 and
// float4_e2m1fn 17.
namespace {
enum : uint8_t {
  kBoolCode = 6,
  kFloat8E3M4 = 7,
  kFloat8E4M3 = 8,
  kFloat8E4M3B11Fnuz = 9,
  kFloat8E4M3Fn = 10,
  kFloat8E4M3Fnuz = 11,
  kFloat8E5M2 = 12,
  kFloat8E5M2Fnuz = 13,
  kFloat8E8M0Fnu = 14,
};

/// DLPack's name for an 8-bit float code Tessel has no type for (each
/// differs from e4m3fn, e5m2 or e8m0fnu in its bias, its NaN or infinity
/// codes or its field widths, so a kernel would read other values).
const char *otherFloat8(uint8_t code) {
  switch (code) {
  case kFloat8E3M4: return "float8_e3m4";
  case kFloat8E4M3: return "float8_e4m3 (IEEE-like, with infinities)";
  case kFloat8E4M3B11Fnuz: return "float8_e4m3b11fnuz";
  case kFloat8E4M3Fnuz: return "float8_e4m3fnuz";
  case kFloat8E5M2Fnuz: return "float8_e5m2fnuz";
  default: return nullptr;
  }
}
} // namespace

static ScalarType dlpackType(const DLDataType &t) {
  if (t.lanes != 1)
    throw Error(fmt::format("DLPack tensor with {} lanes per element: Tessel takes one", t.lanes));
  auto unsupported = [&]() -> ScalarType {
    throw Error(fmt::format("DLPack dtype (code {}, {} bits) is not supported: Tessel takes f16, "
                            "bf16, f32, f64, i8, u8, i32, i64, bool, float8_e4m3fn, "
                            "float8_e5m2 and float8_e8m0fnu",
                            int(t.code), int(t.bits)));
  };
  switch (t.code) {
  case kDLFloat:
    return t.bits == 16 ? ScalarType::F16 : t.bits == 32 ? ScalarType::F32
           : t.bits == 64                               ? ScalarType::F64
                                                        : unsupported();
  case kDLBfloat: return t.bits == 16 ? ScalarType::BF16 : unsupported();
  case kDLInt:
    return t.bits == 8    ? ScalarType::I8
           : t.bits == 32 ? ScalarType::I32
           : t.bits == 64 ? ScalarType::I64
                          : unsupported();
  case kDLUInt: return t.bits == 8 ? ScalarType::U8 : unsupported();
  case kBoolCode: return t.bits == 8 ? ScalarType::I1 : unsupported(); // bool is one byte
  case kFloat8E4M3Fn: return t.bits == 8 ? ScalarType::F8E4M3 : unsupported();
  case kFloat8E5M2: return t.bits == 8 ? ScalarType::F8E5M2 : unsupported();
  case kFloat8E8M0Fnu: return t.bits == 8 ? ScalarType::UE8M0 : unsupported();
  default:
    if (const char *name = otherFloat8(t.code))
      throw Error(fmt::format("DLPack dtype {} (code {}) is not supported: of the 8-bit floats "
                              "Tessel takes float8_e4m3fn (code {}), float8_e5m2 (code {}) and "
                              "float8_e8m0fnu (code {})",
                              name, int(t.code), int(kFloat8E4M3Fn), int(kFloat8E5M2),
                              int(kFloat8E8M0Fnu)));
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

bool tessel::rt::viewFits(const ParamSpec &param, const LaunchArg &arg) {
  return !arg.typed || (arg.dtype == param.type && rowMajorWithoutGaps(arg.shape, arg.strides));
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
