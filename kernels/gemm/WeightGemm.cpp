//===- WeightGemm.cpp - weight-only quantised GEMM ------------------------===//
//
// The weights are the product's A operand: each pipeline step copies a
// tile of codes, the group scales (and zeros) and the tokens' tile into
// shared memory, element code unpacks the codes straight into the register
// fragment the tensor-core instruction reads (no shared-memory round trip),
// and the tokens are B. The unpacking avoids integer-to-float conversions
// (a quarter-rate instruction on Hopper): a code or'ed into the mantissa of
// 2^23 is the float 2^23 + c, one exact subtraction of 2^23 leaves c, and
// a second c - z (exact in f32 for a 16-bit z below 256; z is not added to
// 2^23 first, where its fraction would be lost).
//
//===----------------------------------------------------------------------===//
#include "tessel/kernels/gemm/WeightGemm.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;

namespace {
constexpr double kTwo23 = 8388608.0; // 2^23: floats from it on have unit spacing

/// The shapes of a format's code tensor and of a K tile of it.
std::vector<Expr> codeShape(WeightFormat f, Expr n, Expr k) {
  return {n, f == WeightFormat::int4 ? k / 2 : k};
}
int64_t codeColumns(WeightFormat f, int64_t k) { return f == WeightFormat::int4 ? k / 2 : k; }
DType codeType(WeightFormat f) { return f == WeightFormat::int4 ? DType::u8 : DType::i8; }
/// The zero point of codes stored without one: int4's are 0-15 about 8.
double defaultZero(WeightFormat f) { return f == WeightFormat::int4 ? 8.0 : 0.0; }

/// A kernel's quantised weights: codes, and scales and zeros per group.
struct WeightTensors {
  WeightFormat format;
  DType activations;
  int64_t group;
  Tensor codes, scales;
  std::optional<Tensor> zeros;

  WeightTensors(Program &p, WeightFormat f, DType activations, int64_t group, bool withZeros,
                Expr n, Expr k)
      : format(f), activations(activations), group(group),
        codes(p.tensor("w", codeShape(f, n, k), codeType(f))),
        scales(p.tensor("scales", {k / group, n}, activations)) {
    if (withZeros) zeros = p.tensor("zeros", {k / group, n}, activations);
  }
};

/// Shared tiles of `rows` weight rows and `columns` of K: the codes, and
/// the scales (and zeros) of the groups they span.
struct WeightTiles {
  const WeightTensors &from;
  int64_t rows, columns, groups;
  Buffer codes, scales;
  std::optional<Buffer> zeros;

  WeightTiles(const WeightTensors &t, int64_t rows, int64_t columns)
      : from(t), rows(rows), columns(columns), groups(std::max<int64_t>(1, columns / t.group)),
        codes(alloc_shared({rows, codeColumns(t.format, columns)}, codeType(t.format), "w_codes")),
        scales(alloc_shared({groups, rows}, t.activations, "w_scales")) {
    if (t.zeros) zeros = alloc_shared({groups, rows}, t.activations, "w_zeros");
  }
  /// Copies the tiles of weight rows from `row` and K tile `kTile`.
  void load(Expr row, Expr kTile) const {
    int64_t bytes = codeColumns(from.format, columns);
    copy(from.codes.tile({row, kTile * bytes}, {rows, bytes}), codes);
    Expr firstGroup = kTile * columns / from.group;
    copy(from.scales.tile({firstGroup, row}, {groups, rows}), scales);
    if (zeros) copy(from.zeros->tile({firstGroup, row}, {groups, rows}), *zeros);
  }
  /// Element (i, j) of the tiles dequantised, in the activations' type.
  Expr value(Expr i, Expr j) const;
};

/// The f32 value (c - z) * s of code column j (a logical K index) of
/// `codes` row i, where `codes` holds the bytes of that row's K range; `z`
/// is the zero point, a tensor's (an f32 expression) or, without one, the
/// format's whole-number default `fixedZero`, and `s` the scale.
Expr dequantized(WeightFormat f, const Buffer &codes, Expr i, Expr j, std::optional<Expr> z,
                 double fixedZero, Expr s) {
  // A whole-number zero point joins the bias: 2^23 + z is exact, one
  // subtraction an element instead of two.
  // `magic` is bias + unit * c; the result unit * (c - z).
  auto unbias = [&](Expr magic, double bias, Expr unit) {
    if (!z) return magic - (Expr(bias) + Expr(fixedZero) * unit);
    return (magic - Expr(bias)) - *z * unit;
  };
  if (f == WeightFormat::int8) {
    // c + 128 in the low byte, or'ed into 2^23's mantissa: 2^23 + 128 + c.
    Expr biased = ((cast(codes(i, j), DType::i32) & 255) ^ 128) | 0x4b000000;
    return unbias(bitcast(biased, DType::f32), kTwo23 + 128.0, Expr(1.0)) * s;
  }
  // Even K in the low nibble: 2^23 + c. Odd K in the high one, left where
  // it is: 2^23 + 16 c, so that c - z comes out as 16 (c - z) and the scale
  // takes the 16 back (exact: a power of two). j % 2 is a constant once
  // the fragment loop is unrolled, so each element costs a logic op, a
  // subtraction and a product.
  Expr byte = cast(codes(i, j / 2), DType::i32);
  Expr odd = j % 2 == 1;
  Expr bits = (byte & select(odd, Expr(0xf0), Expr(0x0f))) | 0x4b000000;
  Expr unit = select(odd, Expr(16.0), Expr(1.0)), inverse = select(odd, Expr(0.0625), Expr(1.0));
  return unbias(bitcast(bits, DType::f32), kTwo23, unit) * (s * inverse);
}

Expr WeightTiles::value(Expr i, Expr j) const {
  Expr g = groups > 1 ? j / from.group : Expr(0);
  Expr s = cast(scales(g, i), DType::f32);
  std::optional<Expr> z;
  if (zeros) z = cast((*zeros)(g, i), DType::f32);
  return cast(dequantized(from.format, codes, i, j, z, defaultZero(from.format), s),
              from.activations);
}

void checkConfig(const WeightGemmConfig &c) {
  if (c.activations != DType::f16 && c.activations != DType::bf16)
    throw Error(fmt::format("weight_gemm: activations are f16 or bf16, got {}", name(c.activations)));
  if (c.out != DType::f16 && c.out != DType::bf16 && c.out != DType::f32)
    throw Error(fmt::format("weight_gemm: out is f16, bf16 or f32, got {}", name(c.out)));
  if (c.group != 32 && c.group != 64 && c.group != 128)
    throw Error(fmt::format("weight_gemm: group is 32, 64 or 128, got {}", c.group));
  if (c.blockK % c.group && c.group % c.blockK)
    throw Error(fmt::format("weight_gemm: block_k = {} must be a multiple or a divisor of group = {}",
                            c.blockK, c.group));
  if (c.blockK % 32)
    throw Error(fmt::format("weight_gemm: block_k = {} is not a multiple of 32", c.blockK));
  if (c.splitK < 1 || c.splitK > 64)
    throw Error(fmt::format("weight_gemm: split_k is between 1 and 64, got {}", c.splitK));
  if (c.splitK > 1 && c.out != DType::f32)
    throw Error(fmt::format("weight_gemm: split_k = {} adds each K slice's partial product into y: "
                            "y must be f32 (out = f32), got {}",
                            c.splitK, name(c.out)));
}
} // namespace

Program kernels::weightGemm(const WeightGemmConfig &c) {
  checkConfig(c);
  Program p("weight_gemm");
  Expr m = p.sym("M"), n = p.sym("N"), k = p.sym("K");
  Tensor x = p.tensor("x", {m, k}, c.activations);
  WeightTensors w(p, c.format, c.activations, c.group, c.zeros, n, k);
  Tensor y = p.tensor("y", {m, n}, c.out);
  const int64_t bn = c.blockN, bm = c.blockM, bk = c.blockK;
  Expr kTiles = ceil_div(k, bk);
  Expr perSplit = ceil_div(kTiles, Expr(c.splitK));
  p.kernel({ceil_div(n, bn), ceil_div(m, bm), Expr(c.splitK)}, c.threads,
           [&](Expr bx, Expr by, Expr split) {
    Expr firstK = split * perSplit;
    Expr steps = max(min(perSplit, kTiles - firstK), Expr(0));
    WeightTiles tiles(w, bn, bk);
    Buffer tokens = alloc_shared({bm, bk}, c.activations, "x_tile");
    Buffer weights = alloc_fragment({bn, bk}, c.activations, "w");
    Buffer acc = alloc_fragment({bn, bm}, DType::f32, "acc");
    clear(acc);
    pipelined(steps, c.stages, {.warp_specialize = c.warpSpecialize, .pingpong = c.pingpong},
              [&](Expr step) {
      Expr kt = firstK + step;
      tiles.load(bx * bn, kt);
      copy(x.tile({by * bm, kt * bk}, {bm, bk}), tokens);
      parallel(bn, bk, [&](Expr i, Expr j) { weights(i, j) = tiles.value(i, j); });
      gemm(weights, tokens, acc,
           {.transpose_b = true, .policy = WarpPolicy::full_row, .instruction = c.instruction});
    });
    // acc is y's tile transposed; rows past M or N fall outside the window.
    Buffer out = y.tile({by * bm, bx * bn}, {bm, bn});
    parallel(bn, bm, [&](Expr i, Expr j) {
      if (c.splitK > 1) atomic_add(out(j, i), acc(i, j));
      else out(j, i) = cast(acc(i, j), c.out);
    });
  });
  return p;
}

Program kernels::weightDequantize(const WeightDequantizeConfig &c) {
  if (c.activations != DType::f16 && c.activations != DType::bf16)
    throw Error(fmt::format("weight_dequantize: activations are f16 or bf16, got {}",
                            name(c.activations)));
  if (c.group != 32 && c.group != 64 && c.group != 128)
    throw Error(fmt::format("weight_dequantize: group is 32, 64 or 128, got {}", c.group));
  if (c.blockK % c.group)
    throw Error(fmt::format("weight_dequantize: block_k = {} is not a multiple of group = {}",
                            c.blockK, c.group));
  Program p("weight_dequantize");
  Expr n = p.sym("N"), k = p.sym("K");
  WeightTensors w(p, c.format, c.activations, c.group, c.zeros, n, k);
  Tensor dense = p.tensor("dense", {n, k}, c.activations);
  const int64_t rows = c.rows, bk = c.blockK;
  p.kernel({ceil_div(k, bk), ceil_div(n, rows)}, c.threads, [&](Expr bx, Expr by) {
    WeightTiles tiles(w, rows, bk);
    Buffer values = alloc_fragment({rows, bk}, c.activations, "values");
    tiles.load(by * rows, bx);
    parallel(rows, bk, [&](Expr i, Expr j) { values(i, j) = tiles.value(i, j); });
    copy(values, dense.tile({by * rows, bx * bk}, {rows, bk}));
  });
  return p;
}

Program kernels::weightGemmSums(const WeightSumsConfig &c) {
  Program p("weight_gemm_sums");
  Expr count = p.sym("count");
  Tensor sums = p.tensor("sums", {count}, DType::f32);
  Tensor y = p.tensor("y", {count}, c.out);
  p.kernel({ceil_div(count, c.block)}, c.threads, [&](Expr bx) {
    Buffer wide = alloc_fragment({c.block}, DType::f32, "sums");
    Buffer narrow = alloc_fragment({c.block}, c.out, "y");
    copy(sums.tile({bx * c.block}, {c.block}), wide);
    parallel(c.block, [&](Expr i) { narrow(i) = cast(wide(i), c.out); });
    copy(narrow, y.tile({bx * c.block}, {c.block}));
  });
  return p;
}
