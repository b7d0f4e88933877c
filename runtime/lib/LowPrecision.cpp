//===- LowPrecision.cpp - host FP8 conversions ----------------------------===//
//
// Integer arithmetic on the float's bits, unlike the device header's
// software path (which scales by a power of two and rounds with
// cvt.rni), so that each checks the other. For UE8M0 both work on the
// bits: here the exponent field and a test of the mantissa, there the
// carry out of adding a mantissa of ones.
//
//===----------------------------------------------------------------------===//
#include "tessel/runtime/LowPrecision.h"

#include <cstring>

using namespace tessel;
using namespace tessel::rt;

namespace {
uint32_t bitsOf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}

float floatOf(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

/// An 8-bit float of MANT mantissa bits and exponent bias BIAS; `maxCode`
/// is the largest finite magnitude's code.
template <int MANT, int BIAS> uint8_t encode(float f, uint32_t maxCode) {
  uint32_t x = bitsOf(f);
  uint32_t sign = (x >> 24) & 0x80, a = x & 0x7fffffff;
  if (a > 0x7f800000) return kFp8NaNCode;
  if (a == 0x7f800000) return uint8_t(sign | maxCode);
  // |f| = sig * 2^(exp - 150), exp the biased exponent (1 for subnormals).
  int biased = int(a >> 23);
  uint32_t sig = (a & 0x7fffff) | (biased ? 0x800000u : 0);
  int exp = biased ? biased : 1;
  // The target's quantum at this magnitude is 2^q, q = max(e, 1 - BIAS) - MANT
  // for the unbiased exponent e (the subnormal quantum below the normals).
  int e = exp - 127;
  int q = (e > 1 - BIAS ? e : 1 - BIAS) - MANT;
  // Bits of sig below the quantum: at least 23 - MANT, since the target has
  // fewer mantissa bits; beyond 25, sig < 2^24 is under half a quantum.
  int shift = q - (exp - 150);
  if (shift > 25) shift = 25;
  uint32_t m = sig >> shift, rest = sig & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (m & 1))) ++m;
  // |f| rounds to m * 2^q. In the normal range m is 2^MANT plus the
  // mantissa field, so the code is ((e + BIAS - 1) << MANT) + m; a carry
  // into 2^(MANT+1) moves to the next binade by the same sum, and in the
  // subnormal range (q + MANT + BIAS - 1 = 0) the code is m itself.
  uint32_t code = (uint32_t(q + MANT + BIAS - 1) << MANT) + m;
  return uint8_t(sign | (code > maxCode ? maxCode : code));
}

/// The value of a finite code: a sign, an exponent field and a mantissa
/// field, built as float bits (every such value is a normal float).
template <int MANT, int BIAS> float decodeFinite(uint8_t code) {
  uint32_t sign = uint32_t(code & 0x80) << 24;
  uint32_t field = (code & 0x7f) >> MANT, mant = code & ((1u << MANT) - 1);
  if (field == 0) {
    if (mant == 0) return floatOf(sign);
    // A subnormal: mant * 2^(1 - BIAS - MANT); normalize the leading bit.
    int lead = 31 - __builtin_clz(mant);
    uint32_t frac = (mant << (23 - lead)) & 0x7fffff;
    return floatOf(sign | (uint32_t(1 - BIAS - MANT + lead + 127) << 23) | frac);
  }
  return floatOf(sign | (uint32_t(int(field) - BIAS + 127) << 23) | (mant << (23 - MANT)));
}

float quietNaN(uint8_t code) { return floatOf((uint32_t(code & 0x80) << 24) | 0x7fc00000); }
} // namespace

uint8_t tessel::rt::toE4M3(float f) { return encode<3, 7>(f, kE4M3MaxCode); }

uint8_t tessel::rt::toE5M2(float f) { return encode<2, 15>(f, kE5M2MaxCode); }

float tessel::rt::fromE4M3(uint8_t code) {
  if ((code & 0x7f) == 0x7f) return quietNaN(code);
  return decodeFinite<3, 7>(code);
}

uint8_t tessel::rt::toUE8M0(float f) {
  uint32_t a = bitsOf(f) & 0x7fffffff; // the sign is ignored
  if (a > 0x7f800000) return kUE8M0NaNCode;
  // A normal float's exponent field is its UE8M0 code, one more when a
  // mantissa bit is set (rounding up). Subnormals are below 2^-126: those
  // above 2^-127 round up to it (code 1), the rest to 2^-127 (code 0).
  uint32_t field = a >> 23, mantissa = a & 0x7fffff;
  uint32_t code = field ? field + (mantissa != 0) : mantissa > 0x400000 ? 1 : 0;
  return uint8_t(code > kUE8M0MaxCode ? kUE8M0MaxCode : code);
}

float tessel::rt::fromE5M2(uint8_t code) {
  if ((code & 0x7f) == 0x7c) return floatOf((uint32_t(code & 0x80) << 24) | 0x7f800000);
  if ((code & 0x7f) > 0x7c) return quietNaN(code);
  return decodeFinite<2, 15>(code);
}

float tessel::rt::fromUE8M0(uint8_t code) {
  if (code == kUE8M0NaNCode) return floatOf(0x7fc00000);
  // 2^-127 is a float subnormal; every other code is a normal float's
  // exponent field.
  return code ? floatOf(uint32_t(code) << 23) : floatOf(0x400000);
}
