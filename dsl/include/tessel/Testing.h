//===- Testing.h - host tensors and checks for kernel tests -----*- C++ -*-===//
//
// What a test of a Tessel kernel needs around its launch, as the project's
// own tests use it: host tensors that hold their elements rounded exactly
// as the device stores them (f32, f16, bf16, the FP8 formats, the ue8m0
// scale type, i8, u8, i32), random inputs, device buffers uploaded from
// them or poisoned so that an element the kernel never writes shows,
// downloads, the relative error of an output against a float64 reference
// with a default tolerance per type, and a synchronisation that reports a
// kernel fault as a tessel::Error.
//
//   testing::HostTensor x(DType::bf16, {n}), y(DType::f32, {n});
//   testing::randomize(x, rng);
//   testing::DeviceRun run;
//   run.args.push_back(rt::LaunchArg::integer(n));
//   run.addTensor(x, /*poison=*/false);
//   run.addTensor(y, /*poison=*/true);
//   kernel.launch(run.args);
//   testing::synchronize();
//   run.download(2, y);
//   bool ok = testing::relativeError(y, ref) < testing::toleranceFor(y.type);
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TESTING_H
#define TESSEL_TESTING_H

#include "tessel/dsl/Program.h"
#include "tessel/runtime/Launch.h"
#include "tessel/runtime/TensorView.h"

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace tessel::testing {

/// The bf16 and f16 codes of a float as the device's conversions
/// (cvt.rn.bf16.f32, cvt.rn.f16.f32) give them: round to nearest, ties to
/// the even code, subnormals kept, overflow to infinity, NaN stays NaN.
uint16_t toBf16(float v);
uint16_t toF16(float v);
/// The exact value of a bf16 or f16 code.
float fromBf16(uint16_t code);
float fromF16(uint16_t code);

/// The value an element of type `t` holds when a kernel stores `v` into it:
/// f32 as it is; f16, bf16 and the FP8 formats rounded to nearest even
/// (FP8 saturating to its largest finite value, infinities too, as
/// cvt.rn.satfinite does: tessel/runtime/LowPrecision.h); ue8m0 |v|
/// rounded up to a power of two in [2^-127, 2^127] (NaN stays NaN, as
/// cvt.rp.satfinite.ue8m0x2 does); i32, i8 and u8 truncated toward zero
/// and saturated to the type's range (NaN gives 0).
/// Throws tessel::Error for a type without a host form (f64, i64, index,
/// i1).
float roundTo(DType t, float v);

/// A row-major host tensor of a kernel's element type. `bytes` is what the
/// device stores (what an upload copies and a download fills), `values`
/// the same elements as floats, so that a reference computes with exactly
/// the inputs the kernel reads. Types: f32, f16, bf16, f8e4m3, f8e5m2,
/// ue8m0, i8, u8, i32.
struct HostTensor {
  /// The element type, as the kernel's parameter declares it.
  DType type;
  /// The extents, outermost first (what a launch argument carries).
  std::vector<int64_t> shape;
  /// Every element as the device sees it, rounded to `type`.
  std::vector<float> values;
  /// Every element's bytes as the device stores them.
  std::string bytes;

  /// Zeros of type `t` (all bytes zero: for ue8m0, which has no zero,
  /// 2^-127). Throws tessel::Error for a type without a host form or a
  /// negative extent.
  HostTensor(DType t, std::vector<int64_t> shape);
  /// Elements from `init` (one per element), each rounded to `t`.
  HostTensor(DType t, std::vector<int64_t> shape, const std::vector<float> &init);
  int64_t size() const { return int64_t(values.size()); }
  /// Stores `v` at flat index `i`, rounded as roundTo(type, v).
  void set(int64_t i, float v);
  /// Reads `values` back from `bytes` (after a download, or after writing
  /// codes into `bytes` directly).
  void decode();
};

/// Uniform values over the type's usual range, rounded to the type: [-1, 1]
/// for floats and i32, every value of i8 and u8; for ue8m0, scales around
/// 1: each power of two from 2^-8 to 2^8 equally likely.
void randomize(HostTensor &t, std::mt19937_64 &rng);
/// Uniform values in [lo, hi] rounded to the type; for i8 and u8 each whole
/// number in [lo, hi] and the type's range equally likely, for ue8m0 each
/// power of two in [lo, hi] and the type's range (an Error when there is
/// none).
void randomize(HostTensor &t, std::mt19937_64 &rng, float lo, float hi);

/// A device buffer (on the thread's current device) holding `t`'s bytes.
std::unique_ptr<rt::DeviceBuffer> upload(const HostTensor &t);
/// A device buffer of `t`'s size with every byte 0xff: NaN in every float
/// type (FP8 and ue8m0 included), so an element a kernel leaves unwritten
/// makes the relative error infinite; -1 in i8 and i32, 255 in u8.
std::unique_ptr<rt::DeviceBuffer> poisoned(const HostTensor &t);
/// Copies `t`'s bytes into `buffer` (which must be at least as large).
void upload(const HostTensor &t, rt::DeviceBuffer &buffer);
/// Copies `t`'s size from the start of `buffer` into `t` and decodes it.
void download(const rt::DeviceBuffer &buffer, HostTensor &t);
/// `buffer` as a kernel's tensor argument of `t`'s shape.
rt::LaunchArg launchArg(const rt::DeviceBuffer &buffer, const HostTensor &t);
/// The element type a TensorView names for `t` (f16, bf16, f32, the 8-bit
/// types, i32...); throws for a type views do not carry.
rt::ScalarType scalarTypeOf(DType t);
/// `buffer` as a contiguous view of `t`'s type and shape on `device`: what
/// the library's calls (tessel::gemm, tessel::tp, ...) take.
TensorView viewOf(const rt::DeviceBuffer &buffer, const HostTensor &t, int device);

/// A launch's arguments with the device buffers they point to: inputs
/// uploaded, outputs poisoned. Scalars go into `args` directly
/// (rt::LaunchArg::integer, rt::LaunchArg::real), in the kernel's
/// parameter order.
struct DeviceRun {
  std::vector<std::unique_ptr<rt::DeviceBuffer>> buffers;
  std::vector<rt::LaunchArg> args;
  /// Uploads `t` (or, with `poison`, gives it a poisoned buffer), appends
  /// its argument and returns a copy of it.
  rt::LaunchArg addTensor(const HostTensor &t, bool poison);
  /// Downloads the buffer of argument `argIndex` into `t` and decodes it.
  void download(size_t argIndex, HostTensor &t) const;
};

/// ||out - ref|| / ||ref|| (Euclidean norms, in double). Infinite when
/// `out` has a non-finite element that `ref` does not have at the same
/// index (unwritten poison or a broken result); an infinity both have
/// matches. Throws tessel::Error when the sizes differ.
double relativeError(const std::vector<float> &out, const std::vector<double> &ref);
double relativeError(const HostTensor &out, const std::vector<double> &ref);
/// The relative error a check of an output of type `t` allows against a
/// float64 reference: 1e-5 for f32; 2^-4 for f8e4m3 and 2^-3 for f8e5m2
/// (half an ulp, one rounding to the type); 1e-6 for i8, u8 and ue8m0
/// (exact: the reference models the kernel's conversions, for ue8m0 with
/// rt::toUE8M0, since one rounding up to a power of two may double a
/// value); 1e-2 otherwise (f16, bf16, i32).
double toleranceFor(DType t);

/// Waits for everything launched on the current device; a kernel that
/// faulted or trapped is reported here as a tessel::Error naming the
/// device and the driver's explanation (and what the kernel reported, if
/// it did). Throws when there is no GPU.
void synchronize();

} // namespace tessel::testing

#endif
