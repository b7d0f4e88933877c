//===- LibrarySupport.cpp - host tensors, launches and checks -------------===//
#include "tessel/harness/LibrarySupport.h"
#include "tessel/runtime/LowPrecision.h"

#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>

using namespace tessel;

using namespace tessel::harness;

int64_t tessel::harness::intParam(const Params &p, const std::string &key) {
  return parseInteger(p.at(key), INT32_MIN, INT32_MAX, "parameter " + key);
}

bool tessel::harness::flagParam(const Params &p, const std::string &key) {
  return kernels::parseFlag(key, p.at(key));
}

double tessel::harness::realParam(const Params &p, const std::string &key) {
  const std::string &v = p.at(key);
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(v, &used);
  } catch (const std::exception &) {
    used = 0;
  }
  if (v.empty() || used != v.size() || !std::isfinite(value))
    throw Error(fmt::format("parameter {}={} is not a finite number", key, v));
  return value;
}

DType tessel::harness::dtypeParam(const Params &p, const std::string &key) {
  // The 8-bit types by their DType names, and the FP8 formats by their
  // usual short names too.
  kernels::Choices<DType> choices = kernels::dtypeChoices();
  for (auto [word, t] : std::initializer_list<std::pair<const char *, DType>>{
           {"i8", DType::i8}, {"u8", DType::u8}, {"i32", DType::i32}, {"f8e4m3", DType::f8e4m3},
           {"f8e5m2", DType::f8e5m2}, {"e4m3", DType::f8e4m3}, {"e5m2", DType::f8e5m2}}) {
    bool listed = false;
    for (const auto &choice : choices) listed |= choice.first == word;
    if (!listed) choices.emplace_back(word, t);
  }
  return kernels::parseChoice(key, p.at(key), choices);
}

WarpPolicy tessel::harness::policyParam(const Params &p, const std::string &key) {
  return kernels::parseChoice(key, p.at(key), kernels::policyChoices());
}

WarpSpecialize tessel::harness::warpSpecializeParam(const Params &p, const std::string &key) {
  return kernels::parseChoice(key, p.at(key), kernels::warpSpecializeChoices());
}

GemmInstruction tessel::harness::instructionParam(const Params &p, const std::string &key) {
  return kernels::parseChoice(key, p.at(key), kernels::instructionChoices());
}

namespace {
// Host conversions, round to nearest even.
uint16_t toHalf(float f) {
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
  uint32_t h = (uint32_t(e) << 10) | (mant >> 13), rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return sign | h;
}
float fromHalf(uint16_t h) {
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
uint16_t toBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return (x >> 16) | 0x40;
  return (x + 0x7fff + ((x >> 16) & 1)) >> 16;
}
float fromBf16(uint16_t h) {
  uint32_t x = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

} // namespace

HostTensor::HostTensor(DType t, std::vector<int64_t> s) : type(t), shape(std::move(s)) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  values.assign(n, 0);
  bytes.assign(n * byteSize(t), '\0');
}

/// The integer an i8 or u8 element holds for `v`: rounded toward zero as
/// C++ and PTX's cvt.rzi round, then saturated to the type's range (NaN
/// gives 0), so that an out-of-range value stays at the nearest end
/// instead of wrapping.
static int32_t saturatedInteger(float v, int32_t lo, int32_t hi) {
  if (std::isnan(v)) return 0;
  float t = std::trunc(v);
  return t <= float(lo) ? lo : t >= float(hi) ? hi : int32_t(t);
}

void HostTensor::set(int64_t i, float v) {
  switch (type) {
  case DType::i32: {
    int32_t x = static_cast<int32_t>(v);
    values[i] = float(x);
    std::memcpy(&bytes[i * 4], &x, 4);
    return;
  }
  case DType::f32:
    values[i] = v;
    std::memcpy(&bytes[i * 4], &v, 4);
    return;
  case DType::i8: {
    int8_t x = int8_t(saturatedInteger(v, INT8_MIN, INT8_MAX));
    values[i] = float(x);
    bytes[i] = char(x);
    return;
  }
  case DType::u8: {
    uint8_t x = uint8_t(saturatedInteger(v, 0, UINT8_MAX));
    values[i] = float(x);
    bytes[i] = char(x);
    return;
  }
  case DType::f8e4m3:
  case DType::f8e5m2: {
    uint8_t c = type == DType::f8e4m3 ? rt::toE4M3(v) : rt::toE5M2(v);
    values[i] = type == DType::f8e4m3 ? rt::fromE4M3(c) : rt::fromE5M2(c);
    bytes[i] = char(c);
    return;
  }
  default: {
    uint16_t h = type == DType::f16 ? toHalf(v) : toBf16(v);
    values[i] = type == DType::f16 ? fromHalf(h) : fromBf16(h);
    std::memcpy(&bytes[i * 2], &h, 2);
  }
  }
}

void HostTensor::decode() {
  for (size_t i = 0; i < values.size(); ++i) {
    switch (type) {
    case DType::i32: {
      int32_t x;
      std::memcpy(&x, &bytes[i * 4], 4);
      values[i] = float(x);
      break;
    }
    case DType::f32: std::memcpy(&values[i], &bytes[i * 4], 4); break;
    case DType::i8: values[i] = float(int8_t(bytes[i])); break;
    case DType::u8: values[i] = float(uint8_t(bytes[i])); break;
    case DType::f8e4m3: values[i] = rt::fromE4M3(uint8_t(bytes[i])); break;
    case DType::f8e5m2: values[i] = rt::fromE5M2(uint8_t(bytes[i])); break;
    default: {
      uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      values[i] = type == DType::f16 ? fromHalf(h) : fromBf16(h);
    }
    }
  }
}

void tessel::harness::randomize(HostTensor &t, std::mt19937_64 &rng) {
  if (t.type == DType::i8) return randomize(t, rng, INT8_MIN, INT8_MAX);
  if (t.type == DType::u8) return randomize(t, rng, 0, UINT8_MAX);
  randomize(t, rng, -1, 1);
}

void tessel::harness::randomize(HostTensor &t, std::mt19937_64 &rng, float lo, float hi) {
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
  std::uniform_real_distribution<float> dist(lo, hi);
  for (size_t i = 0; i < t.values.size(); ++i) t.set(i, dist(rng));
}

double tessel::harness::relativeError(const std::vector<float> &out, const std::vector<double> &ref) {
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

double tessel::harness::toleranceFor(DType t) {
  switch (t) {
  case DType::f32: return 1e-5;
  // One rounding to the output type: half an ulp relative to the value, at
  // most 2^-4 with 3 mantissa bits and 2^-3 with 2.
  case DType::f8e4m3: return 0x1p-4;
  case DType::f8e5m2: return 0x1p-3;
  // Integers are exact: a reference models the kernel's own conversions.
  case DType::i8: case DType::u8: return 1e-6;
  default: return 1e-2;
  }
}

rt::LaunchArg DeviceRun::addTensor(HostTensor &t, bool poison) {
  buffers.push_back(std::make_unique<rt::DeviceBuffer>(t.bytes.size()));
  if (poison) buffers.back()->fillBytes(0xff);
  else buffers.back()->upload(t.bytes.data(), t.bytes.size());
  args.push_back(rt::LaunchArg::buffer(buffers.back()->ptr(), t.shape));
  return args.back();
}

void DeviceRun::download(size_t argIndex, HostTensor &t) {
  for (auto &b : buffers)
    if (b->ptr() == args[argIndex].ptr) b->download(t.bytes.data(), t.bytes.size());
  t.decode();
}

int tessel::harness::checkTimingReps() {
  const char *text = std::getenv("TESSEL_CHECK_REPS");
  if (!text || !*text) return 20;
  return int(parseInteger(text, 0, 100000, "TESSEL_CHECK_REPS"));
}

double tessel::harness::checkTime(const std::function<void()> &launch) {
  int reps = checkTimingReps();
  if (reps == 0) return 0;
  return rt::timeMedian([&](int) { launch(); }, 3, reps);
}

void tessel::harness::synchronize() {
  auto &d = rt::Driver::get();
  TESSEL_CU(d, cuCtxSynchronize);
}

CheckResult tessel::harness::launchAndCompare(Kernel &k, DeviceRun &run, size_t out, HostTensor &result,
                             const std::vector<double> &ref, double tolerance, CheckResult r) {
  k.launch(run.args);
  synchronize();
  run.download(out, result);
  r.relError = relativeError(result.values, ref);
  r.tolerance = tolerance;
  r.passed = r.relError < r.tolerance;
  rt::LoadedKernel &loaded = k.loadedFor(run.args);
  r.ms = checkTime([&] { loaded.launch(run.args); });
  return r;
}

