//===- Testing.cpp - host tensors and checks for kernel tests -------------===//
#include "tessel/Testing.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/LowPrecision.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

using namespace tessel;
using namespace tessel::testing;

uint16_t tessel::testing::toF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000, exp = (x >> 23) & 0xff, mant = x & 0x7fffff;
  if (exp == 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  int e = int(exp) - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    int shift = 14 - e;
    uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return sign | h;
  }
  // A carry out of the mantissa moves into the exponent, up to infinity.
  uint32_t h = (uint32_t(e) << 10) | (mant >> 13), rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return sign | h;
}

float tessel::testing::fromF16(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, x;
  if (exp == 0x1f) x = sign | 0x7f800000 | (mant << 13);
  else if (exp == 0) {
    if (!mant) x = sign;
    else {
      int e = -1;
      do { ++e; mant <<= 1; } while (!(mant & 0x400));
      x = sign | (uint32_t(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
    }
  } else x = sign | ((exp + 112) << 23) | (mant << 13);
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t tessel::testing::toBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  // NaN: quieted, keeping its sign (adding the rounding bias could carry it
  // into an infinity).
  if ((x & 0x7fffffff) > 0x7f800000) return (x >> 16) | 0x40;
  return (x + 0x7fff + ((x >> 16) & 1)) >> 16;
}

float tessel::testing::fromBf16(uint16_t h) {
  uint32_t x = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

namespace {
/// The integer an i32, i8 or u8 element holds for `v`: rounded toward zero
/// as C++ and PTX's cvt.rzi round, then saturated to the type's range (NaN
/// gives 0), so that an out-of-range value stays at the nearest end
/// instead of wrapping.
int32_t saturatedInteger(float v, int32_t lo, int32_t hi) {
  if (std::isnan(v)) return 0;
  float t = std::trunc(v);
  return t <= float(lo) ? lo : t >= float(hi) ? hi : int32_t(t);
}

void requireHostForm(DType t) {
  switch (t) {
  case DType::f32: case DType::f16: case DType::bf16: case DType::f8e4m3: case DType::f8e5m2:
  case DType::ue8m0: case DType::i32: case DType::i8: case DType::u8: return;
  default:
    throw Error(fmt::format("host tensors hold f32, f16, bf16, f8e4m3, f8e5m2, ue8m0, i32, i8 "
                            "and u8, not {}",
                            name(t)));
  }
}

/// Stores `v` as an element of type `t` at `out` (byteSize(t) bytes) and
/// returns the value it holds.
float encode(DType t, float v, char *out) {
  switch (t) {
  case DType::f32: std::memcpy(out, &v, 4); return v;
  case DType::i32: {
    int32_t x = saturatedInteger(v, INT32_MIN, INT32_MAX);
    std::memcpy(out, &x, 4);
    return float(x);
  }
  case DType::i8: {
    int8_t x = int8_t(saturatedInteger(v, INT8_MIN, INT8_MAX));
    *out = char(x);
    return float(x);
  }
  case DType::u8: {
    uint8_t x = uint8_t(saturatedInteger(v, 0, UINT8_MAX));
    *out = char(x);
    return float(x);
  }
  case DType::f8e4m3: {
    uint8_t c = rt::toE4M3(v);
    *out = char(c);
    return rt::fromE4M3(c);
  }
  case DType::f8e5m2: {
    uint8_t c = rt::toE5M2(v);
    *out = char(c);
    return rt::fromE5M2(c);
  }
  case DType::ue8m0: {
    uint8_t c = rt::toUE8M0(v);
    *out = char(c);
    return rt::fromUE8M0(c);
  }
  case DType::f16:
  case DType::bf16: {
    uint16_t h = t == DType::f16 ? toF16(v) : toBf16(v);
    std::memcpy(out, &h, 2);
    return t == DType::f16 ? fromF16(h) : fromBf16(h);
  }
  default: requireHostForm(t); return 0;
  }
}

/// The value of the element of type `t` stored at `in`.
float decodeOne(DType t, const char *in) {
  switch (t) {
  case DType::f32: {
    float f;
    std::memcpy(&f, in, 4);
    return f;
  }
  case DType::i32: {
    int32_t x;
    std::memcpy(&x, in, 4);
    return float(x);
  }
  case DType::i8: return float(int8_t(*in));
  case DType::u8: return float(uint8_t(*in));
  case DType::f8e4m3: return rt::fromE4M3(uint8_t(*in));
  case DType::f8e5m2: return rt::fromE5M2(uint8_t(*in));
  case DType::ue8m0: return rt::fromUE8M0(uint8_t(*in));
  case DType::f16:
  case DType::bf16: {
    uint16_t h;
    std::memcpy(&h, in, 2);
    return t == DType::f16 ? fromF16(h) : fromBf16(h);
  }
  default: requireHostForm(t); return 0;
  }
}
} // namespace

float tessel::testing::roundTo(DType t, float v) {
  char scratch[4];
  return encode(t, v, scratch);
}

HostTensor::HostTensor(DType t, std::vector<int64_t> s) : type(t), shape(std::move(s)) {
  requireHostForm(t);
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw Error(fmt::format("host tensor of negative extent {}", d));
    n *= d;
  }
  values.assign(n, 0);
  bytes.assign(n * byteSize(t), '\0');
  // ue8m0 has no zero: its zero bytes hold 2^-127, which `values` says.
  if (t == DType::ue8m0) decode();
}

HostTensor::HostTensor(DType t, std::vector<int64_t> s, const std::vector<float> &init)
    : HostTensor(t, std::move(s)) {
  if (init.size() != values.size())
    throw Error(fmt::format("host tensor of {} elements given {} values", values.size(),
                            init.size()));
  for (size_t i = 0; i < init.size(); ++i) set(int64_t(i), init[i]);
}

void HostTensor::set(int64_t i, float v) {
  values[i] = encode(type, v, &bytes[i * byteSize(type)]);
}

void HostTensor::decode() {
  int64_t width = byteSize(type);
  for (size_t i = 0; i < values.size(); ++i) values[i] = decodeOne(type, &bytes[i * width]);
}

void tessel::testing::randomize(HostTensor &t, std::mt19937_64 &rng) {
  if (t.type == DType::i8) return randomize(t, rng, INT8_MIN, INT8_MAX);
  if (t.type == DType::u8) return randomize(t, rng, 0, UINT8_MAX);
  // Scales near 1, as an MX block of values of magnitude about 1 has.
  if (t.type == DType::ue8m0) return randomize(t, rng, 0x1p-8f, 0x1p8f);
  randomize(t, rng, -1, 1);
}

void tessel::testing::randomize(HostTensor &t, std::mt19937_64 &rng, float lo, float hi) {
  if (t.type == DType::i8 || t.type == DType::u8) {
    // Whole numbers in [lo, hi] within the type's range, each equally likely.
    bool isSigned = t.type == DType::i8;
    float min = isSigned ? INT8_MIN : 0, max = isSigned ? INT8_MAX : UINT8_MAX;
    float first = std::max(std::ceil(lo), min), last = std::min(std::floor(hi), max);
    if (!(first <= last))
      throw Error(fmt::format("randomize: no {} value lies in [{}, {}]", name(t.type), lo, hi));
    std::uniform_int_distribution<int32_t> dist{int32_t(first), int32_t(last)};
    for (size_t i = 0; i < t.values.size(); ++i) t.set(i, float(dist(rng)));
    return;
  }
  if (t.type == DType::ue8m0) {
    // Powers of two, uniform in the exponent: a uniform real in [lo, hi]
    // rounded up would almost always land in the top one or two binades.
    int first = 0, last = rt::kUE8M0MaxCode;
    while (first <= last && !(rt::fromUE8M0(uint8_t(first)) >= lo)) ++first;
    while (first <= last && !(rt::fromUE8M0(uint8_t(last)) <= hi)) --last;
    if (first > last)
      throw Error(fmt::format("randomize: no {} value lies in [{}, {}]", name(t.type), lo, hi));
    std::uniform_int_distribution<int> dist{first, last};
    for (size_t i = 0; i < t.values.size(); ++i) {
      uint8_t code = uint8_t(dist(rng));
      t.bytes[i] = char(code);
      t.values[i] = rt::fromUE8M0(code);
    }
    return;
  }
  std::uniform_real_distribution<float> dist(lo, hi);
  for (size_t i = 0; i < t.values.size(); ++i) t.set(i, dist(rng));
}

std::unique_ptr<rt::DeviceBuffer> tessel::testing::upload(const HostTensor &t) {
  auto buffer = std::make_unique<rt::DeviceBuffer>(t.bytes.size());
  upload(t, *buffer);
  return buffer;
}

std::unique_ptr<rt::DeviceBuffer> tessel::testing::poisoned(const HostTensor &t) {
  auto buffer = std::make_unique<rt::DeviceBuffer>(t.bytes.size());
  buffer->fillBytes(0xff);
  return buffer;
}

void tessel::testing::upload(const HostTensor &t, rt::DeviceBuffer &buffer) {
  buffer.upload(t.bytes.data(), t.bytes.size());
}

void tessel::testing::download(const rt::DeviceBuffer &buffer, HostTensor &t) {
  buffer.download(t.bytes.data(), t.bytes.size());
  t.decode();
}

rt::LaunchArg tessel::testing::launchArg(const rt::DeviceBuffer &buffer, const HostTensor &t) {
  return rt::LaunchArg::buffer(buffer.ptr(), t.shape);
}

rt::ScalarType tessel::testing::scalarTypeOf(DType t) {
  switch (t) {
  case DType::f16: return rt::ScalarType::F16;
  case DType::bf16: return rt::ScalarType::BF16;
  case DType::f32: return rt::ScalarType::F32;
  case DType::f64: return rt::ScalarType::F64;
  case DType::i8: return rt::ScalarType::I8;
  case DType::u8: return rt::ScalarType::U8;
  case DType::i32: return rt::ScalarType::I32;
  case DType::i64: return rt::ScalarType::I64;
  case DType::f8e4m3: return rt::ScalarType::F8E4M3;
  case DType::f8e5m2: return rt::ScalarType::F8E5M2;
  case DType::ue8m0: return rt::ScalarType::UE8M0;
  default: break;
  }
  throw Error(fmt::format("a tensor view has no element type {}", name(t)));
}

TensorView tessel::testing::viewOf(const rt::DeviceBuffer &buffer, const HostTensor &t,
                                   int device) {
  return TensorView::contiguous(buffer.ptr(), scalarTypeOf(t.type), t.shape, device);
}

rt::LaunchArg DeviceRun::addTensor(const HostTensor &t, bool poison) {
  buffers.push_back(poison ? poisoned(t) : upload(t));
  args.push_back(launchArg(*buffers.back(), t));
  return args.back();
}

void DeviceRun::download(size_t argIndex, HostTensor &t) const {
  if (argIndex >= args.size() || args[argIndex].kind != rt::LaunchArg::Buffer)
    throw Error(fmt::format("download: argument {} of {} is not a buffer", argIndex, args.size()));
  for (const auto &b : buffers)
    if (b->ptr() == args[argIndex].ptr) return testing::download(*b, t);
  throw Error(fmt::format("download: argument {} is not one of this run's buffers", argIndex));
}

double tessel::testing::relativeError(const std::vector<float> &out,
                                      const std::vector<double> &ref) {
  if (out.size() != ref.size())
    throw Error(fmt::format("relativeError: {} outputs against {} reference values", out.size(),
                            ref.size()));
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    // An infinity the reference has too (the LSE of a row without keys)
    // matches; any other non-finite value is unwritten (poisoned) or broken.
    if (!std::isfinite(out[i])) {
      if (double(out[i]) == ref[i]) continue;
      return INFINITY;
    }
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

double tessel::testing::relativeError(const HostTensor &out, const std::vector<double> &ref) {
  return relativeError(out.values, ref);
}

double tessel::testing::toleranceFor(DType t) {
  switch (t) {
  case DType::f32: return 1e-5;
  // One rounding to the output type: half an ulp relative to the value, at
  // most 2^-4 with 3 mantissa bits and 2^-3 with 2.
  case DType::f8e4m3: return 0x1p-4;
  case DType::f8e5m2: return 0x1p-3;
  // Integers are exact: a reference models the kernel's own conversions.
  // So is ue8m0, whose one rounding (up, to a power of two) may double a
  // value: no tolerance that allows that would check anything.
  case DType::i8: case DType::u8: case DType::ue8m0: return 1e-6;
  default: return 1e-2;
  }
}

void tessel::testing::synchronize() {
  rt::Driver &d = rt::Driver::get();
  // The thread's device's context, whichever was current before.
  d.makeCurrent();
  TESSEL_CU(d, cuCtxSynchronize);
}
