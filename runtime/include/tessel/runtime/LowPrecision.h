//===- LowPrecision.h - host FP8 conversions --------------------*- C++ -*-===//
//
// The host's side of the 8-bit float types (ScalarType::F8E4M3, F8E5M2,
// UE8M0): the codes a kernel's `f8e4m3(float)` / `f8e5m2(float)` /
// `ue8m0(float)` produce and the floats they stand for, so that inputs are
// prepared and outputs checked bit for bit.
//
// Formats (OCP 8-bit floating point, "FP8 Formats for Deep Learning",
// arXiv:2209.05433):
//   E4M3 ("fn": finite, torch.float8_e4m3fn): bias 7, 3 mantissa bits, no
//     infinities; S.1111.111 (0x7f, 0xff) is NaN, so the largest finite
//     value is S.1111.110 = 448. Smallest subnormal 2^-9.
//   E5M2 (torch.float8_e5m2): bias 15, 2 mantissa bits, IEEE-like:
//     S.11111.00 is infinity, S.11111.{01,10,11} NaN; largest finite
//     S.11110.11 = 57344. Smallest subnormal 2^-16. The upper byte of an
//     IEEE binary16.
//
// Encoding follows PTX `cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32`, which
// sm_89 and later run in hardware and runtime/device/tessel_device.h
// computes in software below that:
//   - .rn: round to the nearest representable value, ties to the even code
//     (subnormal results included; a value at most half the smallest
//     subnormal becomes a zero of its sign).
//   - .satfinite, in the PTX ISA's words (cvt, "Saturation modifier"): "if
//     the input value is NaN, then the result is NaN in the specified
//     destination format. If the absolute value of input (ignoring sign)
//     is greater than MAX_NORM of the specified destination format, then
//     the result is sign-preserved MAX_NORM of the destination format."
//     So +-infinity gives +-MAX_NORM (0x7e/0xfe for E4M3, 0x7b/0xfb for
//     E5M2), never an E5M2 infinity, and so does any finite value that
//     would round past MAX_NORM.
//   - The ISA does not name the NaN code. Every NaN, of either sign and
//     any payload, encodes as 0x7f in both formats: the canonical NaN the
//     CUDA toolkit's own emulation of these instructions produces
//     (cuda_fp8.hpp, __nv_cvt_float_to_fp8 with __NV_SATFINITE replaces a
//     NaN input by 0x7fffffff before converting), and what
//     tests/gpu/LowPrecisionGpuTests.cpp checks the hardware against.
//
// Decoding is exact (every code is a float); NaN codes give a quiet NaN of
// the code's sign.
//
// UE8M0 (OCP Microscaling Formats (MX) v1.0, the E8M0 scale; DLPack's and
// torch's float8_e8m0fnu): no sign and no mantissa, the code b stands for
// 2^(b - 127), so 0x00 is 2^-127 and 0xfe is 2^127; 0xff is NaN; there is
// no zero and no infinity. Encoding follows PTX
// `cvt.rp.satfinite.ue8m0x2.f32`, which the sm_100/110/120 families run in
// hardware and the device header computes in software below that:
//   - .rp: round up, toward +infinity, to the next power of two (a power
//     of two stays itself). An MX quantiser rounds its block's scale up, so
//     that amax / scale never exceeds the element format's largest value;
//     rounding to nearest could make it up to 1.5 times that.
//   - The sign is ignored: -x encodes as x does, as in the CUDA toolkit's
//     emulation of the instruction (cuda_fp8.hpp, __nv_cvt_float_to_e8m0
//     with cudaRoundPosInf and __NV_SATFINITE, which converts |x|), the
//     rule tests/gpu/LowPrecisionGpuTests.cpp checks the device against.
//   - |x| <= 2^-127, zeros and subnormals included, gives 0x00 (2^-127 is
//     the smallest value, and rounding up reaches it).
//   - .satfinite: |x| > 2^127 and +-infinity give 0xfe (2^127); NaN gives
//     0xff.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_RUNTIME_LOWPRECISION_H
#define TESSEL_RUNTIME_LOWPRECISION_H

#include <cstdint>

namespace tessel::rt {

/// The largest finite values (MAX_NORM) and their codes.
inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE5M2Max = 57344.0f;
inline constexpr uint8_t kE4M3MaxCode = 0x7e;
inline constexpr uint8_t kE5M2MaxCode = 0x7b;
/// The code every NaN encodes to.
inline constexpr uint8_t kFp8NaNCode = 0x7f;
/// UE8M0's largest value (2^127) and its code, its smallest (2^-127, code
/// 0x00), and its NaN.
inline constexpr float kUE8M0Max = 0x1p127f;
inline constexpr float kUE8M0Min = 0x1p-127f;
inline constexpr uint8_t kUE8M0MaxCode = 0xfe;
inline constexpr uint8_t kUE8M0One = 0x7f; // 2^0
inline constexpr uint8_t kUE8M0NaNCode = 0xff;

/// Round to nearest even, saturating as `cvt.rn.satfinite` does.
uint8_t toE4M3(float f);
uint8_t toE5M2(float f);
/// |f| rounded up to a power of two, saturating as
/// `cvt.rp.satfinite.ue8m0x2.f32` does.
uint8_t toUE8M0(float f);
/// The exact value of a code.
float fromE4M3(uint8_t code);
float fromE5M2(uint8_t code);
/// 2^(code - 127); 0xff is NaN.
float fromUE8M0(uint8_t code);

} // namespace tessel::rt

#endif
