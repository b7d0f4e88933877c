//===- Execute.cpp - compile and run fuzz programs ------------------------===//
//
// Inputs are multiples of 1/4 in [-2, 2] (exact in bf16, f16 and FP8; i8
// inputs are four times those), so the generator's exactness rule holds
// from the first load; outputs are filled with 0xff bytes (NaN) before each
// run unless the program adds into them, so an element a build forgot to
// write differs from one it wrote.
//
//===----------------------------------------------------------------------===//
#include "Execute.h"
#include "Reference.h"

#include "tessel/dsl/Compile.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/LowPrecision.h"

#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <memory>

using namespace tessel;
using namespace tessel::fuzz;

const char *tessel::fuzz::name(Outcome::Kind k) {
  static const char *names[] = {"passed", "compile-error", "crashed", "mismatch", "hung", "run-error", "skipped"};
  return names[k];
}

namespace {

CompileOptions optionsFor(const Build &b) {
  CompileOptions o;
  o.arch = b.arch;
  o.tma = b.tma;
  return o;
}

uint64_t mix(uint64_t x) { // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint16_t toHalf(float v) { // exact for the inputs' quarters
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  uint16_t sign = (bits >> 16) & 0x8000;
  if (v == 0) return sign;
  int exponent = int((bits >> 23) & 0xff) - 127 + 15;
  return sign | uint16_t(exponent << 10) | uint16_t((bits >> 13) & 0x3ff);
}

/// Tensor `index`'s contents in its element type: quarters in [-2, 2]
/// (exact in every float type, FP8 included), for i8 the integers four
/// times those, and for i32 (page tables) a permutation of 0..count-1.
std::vector<uint8_t> inputBytes(const TensorInfo &t, size_t index) {
  size_t count = 1;
  for (int64_t e : t.shape) count *= size_t(e);
  std::vector<uint8_t> bytes(count * byteSize(t.type));
  if (t.type == DType::i32) { // a page table: a permutation of its indices
    std::vector<int32_t> order(count);
    for (size_t e = 0; e < count; ++e) order[e] = int32_t(e);
    for (size_t e = count; e > 1; --e) std::swap(order[e - 1], order[mix(index * 1000003 + e) % e]);
    std::memcpy(bytes.data(), order.data(), bytes.size());
    return bytes;
  }
  for (size_t e = 0; e < count; ++e) {
    int64_t quarters = int64_t(mix(index * 1000003 + e) % 17) - 8;
    float v = float(quarters) * 0.25f;
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    switch (t.type) {
    case DType::f32: std::memcpy(&bytes[e * 4], &v, 4); break;
    case DType::f8e4m3: bytes[e] = rt::toE4M3(v); break;
    case DType::f8e5m2: bytes[e] = rt::toE5M2(v); break;
    case DType::i8: bytes[e] = uint8_t(int8_t(quarters)); break;
    default: {
      uint16_t h = t.type == DType::bf16 ? uint16_t(bits >> 16) : toHalf(v);
      std::memcpy(&bytes[e * 2], &h, 2);
    }
    }
  }
  return bytes;
}

/// The bytes of every output tensor after one run of build `b`.
std::vector<std::vector<uint8_t>> runBuild(Kernel &k, const Spec &s) {
  std::vector<TensorInfo> infos = tensors(s);
  std::vector<int64_t> symbols = symbolValues(s);
  std::vector<std::unique_ptr<rt::DeviceBuffer>> buffers;
  std::vector<rt::LaunchArg> args;
  size_t nextTensor = 0, nextSymbol = 0;
  for (const ParamInfo &param : k.params()) {
    if (!param.isTensor) {
      args.push_back(rt::LaunchArg::integer(symbols.at(nextSymbol++)));
      continue;
    }
    const TensorInfo &t = infos.at(nextTensor);
    size_t count = 1;
    for (int64_t e : t.shape) count *= size_t(e);
    auto buffer = std::make_unique<rt::DeviceBuffer>(std::max<size_t>(count * byteSize(t.type), 1));
    if (t.role == TensorInfo::input) buffer->upload(inputBytes(t, nextTensor).data(), count * byteSize(t.type));
    else buffer->fillBytes(t.role == TensorInfo::poisoned ? 0xff : 0);
    args.push_back(rt::LaunchArg::buffer(buffer->ptr(), t.shape));
    buffers.push_back(std::move(buffer));
    ++nextTensor;
  }
  k.launch(args);
  rt::Driver &driver = rt::Driver::get();
  driver.check(driver.api().cuCtxSynchronize(), "cuCtxSynchronize");
  std::vector<std::vector<uint8_t>> outputs;
  for (size_t i = 0; i < infos.size(); ++i) {
    if (infos[i].role == TensorInfo::input) continue;
    std::vector<uint8_t> bytes(buffers[i]->bytes());
    buffers[i]->download(bytes.data(), bytes.size());
    outputs.push_back(std::move(bytes));
  }
  return outputs;
}

bool close(float ref, float got, float tolerance) {
  uint32_t a, b;
  std::memcpy(&a, &ref, 4);
  std::memcpy(&b, &got, 4);
  // Sums taken in another order may end in a zero of the other sign.
  if (a == b || (ref == 0 && got == 0)) return true;
  if (!tolerance || std::isnan(ref) || std::isnan(got)) return false;
  return std::abs(ref - got) <= tolerance * std::max(1.0f, std::abs(ref));
}

/// "" when `got` matches `ref`, else the first differing element and how
/// many differ.
std::string compare(const Spec &s, const std::vector<std::vector<uint8_t>> &ref,
                    const std::vector<std::vector<uint8_t>> &got) {
  std::vector<TensorInfo> outputs;
  for (const TensorInfo &t : tensors(s))
    if (t.role != TensorInfo::input) outputs.push_back(t);
  for (size_t o = 0; o < outputs.size(); ++o) {
    size_t count = ref[o].size() / 4, differing = 0, first = 0;
    const float *r = reinterpret_cast<const float *>(ref[o].data());
    const float *g = reinterpret_cast<const float *>(got[o].data());
    for (size_t e = 0; e < count; ++e)
      if (!close(r[e], g[e], s.tolerance()) && differing++ == 0) first = e;
    if (differing)
      return fmt::format("{}: {} of {} elements differ; first at flat index {}: {} vs {}", outputs[o].name,
                         differing, count, first, r[first], g[first]);
  }
  return "";
}

} // namespace

std::string tessel::fuzz::describeReference(const Spec &s) {
  std::vector<TensorInfo> infos = tensors(s);
  std::vector<std::vector<uint8_t>> inputs;
  std::string text;
  auto show = [&](const std::string &name, const std::vector<float> &values) {
    text += name + ":";
    for (float v : values) text += fmt::format(" {}", v);
    text += "\n";
  };
  for (size_t i = 0; i < infos.size(); ++i) {
    if (infos[i].role != TensorInfo::input) continue;
    inputs.push_back(inputBytes(infos[i], i));
    std::vector<float> values(inputs.back().size() / size_t(byteSize(infos[i].type)));
    for (size_t e = 0; e < values.size(); ++e) values[e] = valueAt(inputs.back(), infos[i].type, e);
    show(infos[i].name, values);
  }
  std::vector<std::vector<uint8_t>> outputs = referenceOutputs(s, inputs);
  size_t o = 0;
  for (const TensorInfo &t : infos) {
    if (t.role == TensorInfo::input) continue;
    std::vector<float> values(outputs[o].size() / 4);
    std::memcpy(values.data(), outputs[o++].data(), values.size() * 4);
    show(t.name, values);
  }
  return text;
}

namespace {
/// The builds that can target `s` (the first stays the reference).
std::vector<Build> buildsFor(const Spec &s, const std::vector<Build> &builds) {
  std::vector<Build> out;
  for (const Build &b : builds)
    if (targets(s, b)) out.push_back(b);
  return out;
}

/// Why no build of `all` can target `s`.
Outcome noBuildTargets(const Spec &s, const std::vector<Build> &all) {
  std::string labels;
  for (const Build &b : all) {
    if (!labels.empty()) labels += ',';
    labels += b.label();
  }
  return {Outcome::skipped,
          fmt::format("no build of {} can target it{}", labels, s.fp8() ? " (FP8 needs sm_89 or later)" : "")};
}
} // namespace

Outcome tessel::fuzz::compileAll(const Spec &s, const std::vector<Build> &all) {
  std::vector<Build> builds = buildsFor(s, all);
  if (builds.empty()) return noBuildTargets(s, all);
  for (const Build &b : builds) {
    try {
      Program p = buildProgram(s, b);
      compile(p, optionsFor(b));
    } catch (const Error &e) {
      return {Outcome::compileError, fmt::format("{}: {}", b.label(), e.what())};
    }
  }
  return {};
}

Outcome tessel::fuzz::runAll(const Spec &s, const std::vector<Build> &all,
                             const std::function<void()> &compiled, bool cpuReference) {
  std::vector<Build> builds = buildsFor(s, all);
  if (builds.empty()) return noBuildTargets(s, all);
  // One build and no CPU reference: a run would compare nothing.
  if (builds.size() == 1 && !cpuReference)
    return {Outcome::skipped, fmt::format("only {} targets it and the CPU reference is off: nothing to compare",
                                          builds[0].label())};
  std::vector<Kernel> kernels;
  for (const Build &b : builds) {
    try {
      Program p = buildProgram(s, b);
      kernels.push_back(compile(p, optionsFor(b)));
    } catch (const Error &e) {
      return {Outcome::compileError, fmt::format("{}: {}", b.label(), e.what())};
    }
  }
  if (compiled) compiled();
  std::vector<std::vector<uint8_t>> reference, onCpu;
  if (cpuReference) {
    std::vector<TensorInfo> infos = tensors(s);
    std::vector<std::vector<uint8_t>> inputs;
    for (size_t i = 0; i < infos.size(); ++i)
      if (infos[i].role == TensorInfo::input) inputs.push_back(inputBytes(infos[i], i));
    onCpu = referenceOutputs(s, inputs);
  }
  for (size_t i = 0; i < builds.size(); ++i) {
    std::vector<std::vector<uint8_t>> outputs;
    try {
      outputs = runBuild(kernels[i], s);
    } catch (const Error &e) {
      return {Outcome::runError, fmt::format("{}: {}", builds[i].label(), e.what())};
    }
    if (cpuReference) {
      std::string diff = compare(s, onCpu, outputs);
      if (!diff.empty()) return {Outcome::mismatch, fmt::format("cpu vs {}: {}", builds[i].label(), diff)};
    }
    if (i == 0) {
      reference = std::move(outputs);
      continue;
    }
    std::string diff = compare(s, reference, outputs);
    if (!diff.empty())
      return {Outcome::mismatch, fmt::format("{} vs {}: {}", builds[0].label(), builds[i].label(), diff)};
  }
  return {};
}
