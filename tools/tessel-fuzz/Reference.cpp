//===- Reference.cpp - what a fuzz program computes, on the CPU -----------===//
//
// The DSL's semantics of each template, evaluated tile by tile in f32 as
// the kernel would: tiles read zero outside the tensor (and past a bound),
// element code runs on every element of a tile (those outside the tensor
// too, and their values reach reductions and atomics), stores drop what
// falls outside. Sums are exact (Generate.cpp), so their order is free.
//
//===----------------------------------------------------------------------===//
#include "Reference.h"

#include "tessel/runtime/LowPrecision.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

using namespace tessel;
using namespace tessel::fuzz;

namespace {

using Tile = std::vector<float>; // [tm, tn], row-major

/// f32 rounded to bf16 or f16 (nearest, ties to even) and back.
float roundTo(float v, DType t) {
  if (t == DType::bf16) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    bits += 0x7fff + ((bits >> 16) & 1);
    bits &= 0xffff0000u;
    std::memcpy(&v, &bits, 4);
    return v;
  }
  // f16: 11 significant bits; values stay in its normal range or are 0.
  if (v == 0) return v;
  int exponent;
  std::frexp(v, &exponent);
  int shift = std::max(exponent, -13) - 11; // subnormals keep a fixed step
  return float(std::nearbyint(std::ldexp(double(v), -shift)) * std::ldexp(1.0, shift));
}

float castThrough(float v, DType via) {
  switch (via) {
  case DType::bf16:
  case DType::f16: return roundTo(v, via);
  // Nearest even, saturating (cvt.rn.satfinite; sm_80's software encoder
  // computes the same bits).
  case DType::f8e4m3: return rt::fromE4M3(rt::toE4M3(v));
  case DType::f8e5m2: return rt::fromE5M2(rt::toE5M2(v));
  case DType::i32:
  case DType::i64: return float(int64_t(std::trunc(v)));
  default: return float(double(v));
  }
}

int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

float reduceOf(ReduceKind k, const float *v, size_t n, size_t stride) {
  float r = k == ReduceKind::sum ? 0.0f : k == ReduceKind::min ? INFINITY : k == ReduceKind::max ? -INFINITY : 0.0f;
  for (size_t e = 0; e < n; ++e) {
    float x = v[e * stride];
    switch (k) {
    case ReduceKind::sum: r += x; break;
    case ReduceKind::max: r = std::max(r, x); break;
    case ReduceKind::min: r = std::min(r, x); break;
    case ReduceKind::absmax: r = std::max(r, std::abs(x)); break;
    }
  }
  return r;
}

struct Model {
  const Spec &s;
  std::vector<std::vector<float>> in; // the input tensors as f32, in tensors() order
  std::vector<std::string> names;     // their names
  std::vector<float> y, r, sum;

  /// X[row, col], A[row, k] or B[k, col] as a tile reads it.
  float x(int64_t row, int64_t col, bool bounded) const {
    if (row < 0 || row >= s.m || col < 0 || col >= s.n || (bounded && row >= s.limit)) return 0;
    return in[0][size_t(row * s.n + col)];
  }
  float a(int64_t row, int64_t k) const {
    if (row >= s.m || k >= s.k) return 0;
    return in[0][size_t(s.transposeA ? k * s.m + row : row * s.k + k)];
  }
  float b(int64_t k, int64_t col) const {
    if (k >= s.k || col >= s.n) return 0;
    return in[1][size_t(s.transposeB ? col * s.k + k : k * s.n + col)];
  }

  const std::vector<float> &input(const std::string &name) const {
    return in[size_t(std::find(names.begin(), names.end(), name) - names.begin())];
  }

  /// The paged load: step kt's columns come from the pages P names, each
  /// step weighted by kt + 1.
  float paged(int64_t row, int64_t j) const {
    const std::vector<float> &table = input("P");
    int64_t width = s.tn / s.pageParts, q = j / width;
    float sum = 0;
    for (int64_t kt = 0; kt * s.tn < s.n; ++kt) {
      int64_t page = int64_t(table[size_t(kt * s.pageParts + q)]);
      sum += float(kt + 1) * x(row, page * width + j % width, false);
    }
    return sum;
  }

  Tile load(int64_t row0, int64_t col0) const {
    Tile w(size_t(s.tm * s.tn), 0);
    for (int64_t i = 0; i < s.tm; ++i)
      for (int64_t j = 0; j < s.tn; ++j) {
        float &e = w[size_t(i * s.tn + j)];
        if (s.family == Family::gemm) {
          int64_t depth = (s.k + s.tk - 1) / s.tk * s.tk;
          for (int64_t k = 0; k < depth; ++k)
            e += a(row0 + i, k) * (s.staged == StagedEdit::scale ? 2 * b(k, col0 + j) : b(k, col0 + j));
        } else if (s.load == Load::paged) {
          e = paged(row0 + i, j);
        } else if (s.load == Load::rowSum) {
          for (int64_t kt = 0; kt * s.tn < s.n; ++kt) e += x(row0 + i, kt * s.tn + j, false);
        } else {
          e = x(row0 + i, col0 + j, s.load == Load::bounded);
        }
      }
    return w;
  }

  void statement(const Stmt &st, Tile &w, int64_t row0, int64_t col0) {
    auto each = [&](auto f) {
      for (int64_t i = 0; i < s.tm; ++i)
        for (int64_t j = 0; j < s.tn; ++j) w[size_t(i * s.tn + j)] = f(w[size_t(i * s.tn + j)], i, j);
    };
    switch (st.kind) {
    case StmtKind::scaleShift: each([&](float v, int64_t, int64_t) { return v * float(st.a) + float(st.b); }); break;
    case StmtKind::selectBelow:
      each([&](float v, int64_t, int64_t) { return v > float(st.a) ? v : v * float(st.b); });
      break;
    case StmtKind::roundTrip: each([&](float v, int64_t, int64_t) { return castThrough(v, st.via); }); break;
    case StmtKind::clampMax:
      each([&](float v, int64_t, int64_t) { return std::min(std::max(v, float(-st.a)), float(st.a)); });
      break;
    case StmtKind::integerPath:
      each([&](float v, int64_t, int64_t j) { return float(int64_t(std::trunc(v * 4)) * 3 + j) * 0.25f; });
      break;
    case StmtKind::integerDivide:
      each([&](float v, int64_t, int64_t) {
        int64_t q = int64_t(std::trunc(v * 4)), d = st.divisor;
        return float(floorDiv(q, d) + (q - floorDiv(q, d) * d));
      });
      break;
    case StmtKind::carried: {
      float c = 0;
      for (size_t i = 0; i < 4; ++i) c += input("V")[i];
      each([&](float v, int64_t, int64_t) { return v + c; });
      break;
    }
    case StmtKind::rowReduce: {
      std::vector<float> rows(size_t(s.tm));
      for (int64_t i = 0; i < s.tm; ++i) rows[size_t(i)] = reduceOf(st.reduce, &w[size_t(i * s.tn)], size_t(s.tn), 1);
      each([&](float v, int64_t i, int64_t) { return v - rows[size_t(i)]; });
      if (st.rowAtomic)
        for (int64_t i = 0; i < s.tm && row0 + i < s.m; ++i) r[size_t(row0 + i)] += rows[size_t(i)];
      break;
    }
    case StmtKind::integerReduce: {
      for (int64_t i = 0; i < s.tm; ++i) {
        int64_t acc = st.reduce == ReduceKind::max   ? INT32_MIN
                      : st.reduce == ReduceKind::min ? INT32_MAX
                                                     : 0;
        for (int64_t j = 0; j < s.tn; ++j) {
          int64_t q = int64_t(std::trunc(w[size_t(i * s.tn + j)] * 4));
          switch (st.reduce) {
          case ReduceKind::sum: acc += q; break;
          case ReduceKind::max: acc = std::max(acc, q); break;
          case ReduceKind::min: acc = std::min(acc, q); break;
          case ReduceKind::absmax: acc = std::max(acc, std::abs(q)); break;
          }
        }
        for (int64_t j = 0; j < s.tn; ++j) w[size_t(i * s.tn + j)] -= float(int32_t(acc)) * 0.25f;
      }
      break;
    }
    case StmtKind::allReduce: {
      std::vector<float> rows(size_t(s.tm));
      for (int64_t i = 0; i < s.tm; ++i) rows[size_t(i)] = reduceOf(st.reduce, &w[size_t(i * s.tn)], size_t(s.tn), 1);
      float t = reduceOf(st.reduce, rows.data(), rows.size(), 1);
      each([&](float v, int64_t, int64_t) { return v - t; });
      break;
    }
    case StmtKind::scalarAtomic:
      for (float v : w) sum[0] += v;
      break;
    case StmtKind::firstColumn:
      if (col0 == 0) each([&](float v, int64_t, int64_t) { return v * float(st.a) + float(st.b); });
      break;
    case StmtKind::exponent:
      each([&](float v, int64_t, int64_t) {
        return st.fmaEvery ? std::exp2(v * float(st.a)) : std::exp(v * float(st.a));
      });
      break;
    case StmtKind::columnParts:
      each([&](float v, int64_t, int64_t j) {
        return v * float(st.a) + (float(st.b) + float(j / (s.tn / st.parts)));
      });
      break;
    }
  }

  /// W rounded to `in`, times C (the last input).
  Tile chained(const Tile &w) const {
    const std::vector<float> &c = in.back();
    Tile out(w.size(), 0);
    for (int64_t i = 0; i < s.tm; ++i)
      for (int64_t j = 0; j < s.tn; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < s.tn; ++l)
          sum += double(roundTo(w[size_t(i * s.tn + l)], s.in)) * c[size_t(l * s.tn + j)];
        out[size_t(i * s.tn + j)] = float(sum);
      }
    return out;
  }

  void store(const Tile &w, int64_t row0, int64_t col0) {
    for (int64_t i = 0; i < s.tm; ++i)
      for (int64_t j = 0; j < s.tn; ++j) {
        int64_t row = row0 + i, col = col0 + j;
        if (row >= s.m || col >= s.n || (s.store == Store::bounded && row >= s.limit)) continue;
        float v = w[size_t(i * s.tn + j)];
        float &out = y[size_t(row * s.n + col)];
        if (s.store == Store::atomic || s.store == Store::atomicTma) out += v;
        else out = v;
      }
  }
};

} // namespace

float tessel::fuzz::valueAt(const std::vector<uint8_t> &bytes, DType t, size_t e) {
  switch (t) {
  case DType::f32: {
    float v;
    std::memcpy(&v, &bytes[e * 4], 4);
    return v;
  }
  case DType::f8e4m3: return rt::fromE4M3(bytes[e]);
  case DType::f8e5m2: return rt::fromE5M2(bytes[e]);
  case DType::i8: return float(int8_t(bytes[e]));
  case DType::i32: {
    int32_t v;
    std::memcpy(&v, &bytes[e * 4], 4);
    return float(v);
  }
  default: break;
  }
  uint16_t h;
  std::memcpy(&h, &bytes[e * 2], 2);
  if (t == DType::bf16) {
    uint32_t bits = uint32_t(h) << 16;
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
  int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  float magnitude = exponent == 0 ? std::ldexp(float(mantissa), -24)
                                  : std::ldexp(float(mantissa | 0x400), exponent - 25);
  return h & 0x8000 ? -magnitude : magnitude;
}

std::vector<std::vector<uint8_t>> tessel::fuzz::referenceOutputs(
    const Spec &s, const std::vector<std::vector<uint8_t>> &inputs) {
  Model model{s, {}, {}, {}, {}, {}};
  std::vector<TensorInfo> infos = tensors(s);
  size_t input = 0;
  for (const TensorInfo &t : infos) {
    if (t.role != TensorInfo::input) continue;
    const std::vector<uint8_t> &bytes = inputs.at(input++);
    std::vector<float> values(bytes.size() / size_t(byteSize(t.type)));
    for (size_t e = 0; e < values.size(); ++e) values[e] = valueAt(bytes, t.type, e);
    model.in.push_back(std::move(values));
    model.names.push_back(t.name);
  }
  bool adds = s.store == Store::atomic || s.store == Store::atomicTma;
  model.y.assign(size_t(s.m * s.n), adds ? 0.0f : std::nanf(""));
  model.r.assign(size_t(s.m), 0);
  model.sum.assign(1, 0);
  for (int64_t by = 0; by * s.tm < s.m; ++by)
    for (int64_t bx = 0; bx * s.tn < s.n; ++bx) {
      Tile w = model.load(by * s.tm, bx * s.tn);
      for (const Stmt &st : s.stmts) model.statement(st, w, by * s.tm, bx * s.tn);
      if (s.chain) w = model.chained(w);
      model.store(w, by * s.tm, bx * s.tn);
    }
  auto bytesOf = [](const std::vector<float> &v, bool poisonNan) {
    std::vector<uint8_t> out(v.size() * 4);
    for (size_t e = 0; e < v.size(); ++e) {
      uint32_t bits;
      std::memcpy(&bits, &v[e], 4);
      if (poisonNan && std::isnan(v[e])) bits = 0xffffffffu; // the poison pattern
      std::memcpy(&out[e * 4], &bits, 4);
    }
    return out;
  };
  return {bytesOf(model.y, !adds), bytesOf(model.r, false), bytesOf(model.sum, false)};
}
