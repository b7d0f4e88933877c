//===- LowPrecisionKernels.h - FP8 conversions as DSL programs --*- C++ -*-===//
//
// Element-wise casts between f32 and the FP8 types (and the ue8m0 scale
// type): the unit tests compile them for every target, the GPU tests
// compare what they write with the host's conversions
// (tessel/runtime/LowPrecision.h) bit for bit.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TESTS_LOWPRECISIONKERNELS_H
#define TESSEL_TESTS_LOWPRECISIONKERNELS_H

#include "tessel/dsl/Program.h"

namespace tessel::test {

/// e4m3[i] = f8e4m3(x[i]), e5m2[i] = f8e5m2(x[i]) over N elements.
inline Program fp8Encode() {
  Program p("fp8_encode");
  Expr n = p.sym("N");
  Tensor x = p.tensor("x", {n}, DType::f32);
  Tensor e4m3 = p.tensor("e4m3", {n}, DType::f8e4m3);
  Tensor e5m2 = p.tensor("e5m2", {n}, DType::f8e5m2);
  p.kernel({ceil_div(n, 1024)}, 256, [&](Expr bx) {
    Buffer xs = x.tile({bx * 1024}, {1024});
    Buffer as = e4m3.tile({bx * 1024}, {1024});
    Buffer bs = e5m2.tile({bx * 1024}, {1024});
    parallel(1024, [&](Expr i) {
      as(i) = cast(xs(i), DType::f8e4m3);
      bs(i) = cast(xs(i), DType::f8e5m2);
    });
  });
  return p;
}

/// x4[i] = float(e4m3[i]), x5[i] = float(e5m2[i]) over N elements.
inline Program fp8Decode() {
  Program p("fp8_decode");
  Expr n = p.sym("N");
  Tensor e4m3 = p.tensor("e4m3", {n}, DType::f8e4m3);
  Tensor e5m2 = p.tensor("e5m2", {n}, DType::f8e5m2);
  Tensor x4 = p.tensor("x4", {n}, DType::f32);
  Tensor x5 = p.tensor("x5", {n}, DType::f32);
  p.kernel({ceil_div(n, 1024)}, 256, [&](Expr bx) {
    Buffer as = e4m3.tile({bx * 1024}, {1024});
    Buffer bs = e5m2.tile({bx * 1024}, {1024});
    Buffer ys = x4.tile({bx * 1024}, {1024});
    Buffer zs = x5.tile({bx * 1024}, {1024});
    parallel(1024, [&](Expr i) {
      ys(i) = cast(as(i), DType::f32);
      zs(i) = cast(bs(i), DType::f32);
    });
  });
  return p;
}

/// s[i] = ue8m0(x[i]), y[i] = float(ue8m0(x[i])) over N elements: the
/// encode, and f32 -> ue8m0 -> f32 within element code.
inline Program ue8m0Encode() {
  Program p("ue8m0_encode");
  Expr n = p.sym("N");
  Tensor x = p.tensor("x", {n}, DType::f32);
  Tensor s = p.tensor("s", {n}, DType::ue8m0);
  Tensor y = p.tensor("y", {n}, DType::f32);
  p.kernel({ceil_div(n, 1024)}, 256, [&](Expr bx) {
    Buffer xs = x.tile({bx * 1024}, {1024});
    Buffer ss = s.tile({bx * 1024}, {1024});
    Buffer ys = y.tile({bx * 1024}, {1024});
    parallel(1024, [&](Expr i) {
      ss(i) = cast(xs(i), DType::ue8m0);
      ys(i) = cast(cast(xs(i), DType::ue8m0), DType::f32);
    });
  });
  return p;
}

/// x[i] = float(s[i]) over N elements.
inline Program ue8m0Decode() {
  Program p("ue8m0_decode");
  Expr n = p.sym("N");
  Tensor s = p.tensor("s", {n}, DType::ue8m0);
  Tensor x = p.tensor("x", {n}, DType::f32);
  p.kernel({ceil_div(n, 1024)}, 256, [&](Expr bx) {
    Buffer ss = s.tile({bx * 1024}, {1024});
    Buffer xs = x.tile({bx * 1024}, {1024});
    parallel(1024, [&](Expr i) { xs(i) = cast(ss(i), DType::f32); });
  });
  return p;
}

} // namespace tessel::test

#endif
