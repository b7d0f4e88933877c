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

/// How the 8-bit two-product program stores V: as [N, 64] (the compiler
/// gives the second product a K-major copy with K in register order), or
/// already as [64, N] in register K order (register_k_position).
enum class EightBitV { rows, registerOrder };

/// o = sum over key blocks of P v, P = exp(s - rowmax_block(s)) in `type`
/// (e4m3 or e5m2) and s = q k^T, for 64 query rows and N keys, 64 a step,
/// on 128 threads: FP8 attention's two products, the second reading its
/// 8-bit A from registers (the scores' accumulator layout).
inline Program eightBitTwoProducts(DType type, EightBitV vLayout) {
  Program p("eight_bit_two_products");
  Expr n = p.sym("N");
  bool rows = vLayout == EightBitV::rows;
  Tensor q = p.tensor("q", {64, 64}, type), k = p.tensor("k", {n, 64}, type);
  Tensor v = rows ? p.tensor("v", {n, 64}, type) : p.tensor("vt", {64, n}, type);
  Tensor o = p.tensor("o", {64, 64}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer qs = alloc_shared({64, 64}, type), ks = alloc_shared({64, 64}, type);
    Buffer vs = alloc_shared({64, 64}, type);
    Buffer s = alloc_fragment({64, 64}, DType::f32, "s"), m = alloc_fragment({64}, DType::f32);
    Buffer pr = alloc_fragment({64, 64}, type, "p"), acc = alloc_fragment({64, 64}, DType::f32);
    copy(q.tile({0, 0}, {64, 64}), qs);
    fill(acc, 0.0);
    pipelined(ceil_div(n, 64), 2, [&](Expr kt) {
      copy(k.tile({kt * 64, 0}, {64, 64}), ks);
      copy(rows ? v.tile({kt * 64, 0}, {64, 64}) : v.tile({0, kt * 64}, {64, 64}), vs);
      gemm(qs, ks, s, {.transpose_b = true, .clear_accum = true});
      reduce_max(s, m, 1);
      parallel(64, 64, [&](Expr i, Expr j) { pr(i, j) = cast(exp(s(i, j) - m(i)), type); });
      gemm(pr, vs, acc, {.transpose_b = !rows, .b_register_k_order = !rows});
    });
    copy(acc, o.tile({0, 0}, {64, 64}));
  });
  return p;
}

/// e4m3[i] = f8e4m3(x[i]), e5m2[i] = f8e5m2(x[i]) over N elements; with
/// `inRegisters`, between fragments (where the conversions go in pairs,
/// tilenv.convert_pair), else in global memory, one at a time.
inline Program fp8Encode(bool inRegisters = false) {
  Program p(inRegisters ? "fp8_encode_in_registers" : "fp8_encode");
  Expr n = p.sym("N");
  Tensor x = p.tensor("x", {n}, DType::f32);
  Tensor e4m3 = p.tensor("e4m3", {n}, DType::f8e4m3);
  Tensor e5m2 = p.tensor("e5m2", {n}, DType::f8e5m2);
  p.kernel({ceil_div(n, 1024)}, 256, [&](Expr bx) {
    Buffer xs = x.tile({bx * 1024}, {1024});
    Buffer as = e4m3.tile({bx * 1024}, {1024});
    Buffer bs = e5m2.tile({bx * 1024}, {1024});
    if (!inRegisters) {
      parallel(1024, [&](Expr i) {
        as(i) = cast(xs(i), DType::f8e4m3);
        bs(i) = cast(xs(i), DType::f8e5m2);
      });
      return;
    }
    Buffer xf = alloc_fragment({1024}, DType::f32), af = alloc_fragment({1024}, DType::f8e4m3);
    Buffer bf = alloc_fragment({1024}, DType::f8e5m2);
    copy(xs, xf);
    parallel(1024, [&](Expr i) {
      af(i) = cast(xf(i), DType::f8e4m3);
      bf(i) = cast(xf(i), DType::f8e5m2);
    });
    copy(af, as);
    copy(bf, bs);
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
