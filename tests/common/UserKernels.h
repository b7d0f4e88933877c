//===- UserKernels.h - kernels written as a user would ----------*- C++ -*-===//
//
// Small kernels outside the library that exercise what the library's own
// kernels never did; the unit tests compile them for every target and the
// GPU tests run them.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TESTS_USERKERNELS_H
#define TESSEL_TESTS_USERKERNELS_H

#include "tessel/dsl/Program.h"

#include <cmath>
#include <vector>

namespace tessel::test {

/// out[i] = max_j (q k^T)[i, j] over N keys, with the row maximum taken
/// across warps (full_col splits the columns over them) inside a pipelined
/// loop that sm_90a warp-specializes.
inline Program reduceInConsumer() {
  Program p("reduce_in_consumer");
  Expr n = p.sym("N");
  Tensor q = p.tensor("q", {16, 64}, DType::bf16), k = p.tensor("k", {n, 64}, DType::bf16);
  Tensor out = p.tensor("out", {16}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer qs = alloc_shared({16, 64}, DType::bf16), ks = alloc_shared({64, 64}, DType::bf16);
    Buffer s = alloc_fragment({16, 64}, DType::f32), m = alloc_fragment({16}, DType::f32);
    copy(q.tile({0, 0}, {16, 64}), qs);
    fill(m, -INFINITY);
    pipelined(ceil_div(n, 64), 2, [&](Expr kt) {
      copy(k.tile({kt * 64, 0}, {64, 64}), ks);
      gemm(qs, ks, s, {.transpose_b = true, .clear_accum = true, .policy = WarpPolicy::full_col});
      reduce_max(s, m, 1, /*clear=*/false);
    });
    copy(m, out.tile({0}, {16}));
  });
  return p;
}

/// Where offsetRowsSum's first row comes from: a serial scan into local
/// memory, a conditional on a symbol, or an element of a shared tile.
enum class RowSource { localScan, conditional, sharedRead, carriedScan };
inline constexpr RowSource allRowSources[] = {RowSource::localScan, RowSource::conditional,
                                              RowSource::sharedRead, RowSource::carriedScan};

inline const char *name(RowSource s) {
  switch (s) {
  case RowSource::localScan: return "serial scan into alloc_local";
  case RowSource::conditional: return "if_ before the loop";
  case RowSource::sharedRead: return "element of a shared tile";
  default: return "serial loop carrying the sum";
  }
}

/// y = sum over k < 4 of x[row0 + 64k .. +64, :], with row0 computed before
/// the pipelined loop (2 stages, 4 iterations) that loads the tiles.
inline Program offsetRowsSum(RowSource source) {
  Program p("offset_rows_sum");
  Expr n = p.sym("N");
  Tensor x = p.tensor("x", {n, 64}, DType::bf16), off = p.tensor("off", {4}, DType::i32);
  Tensor y = p.tensor("y", {64, 64}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer base = alloc_local({1}, DType::i32, "base");
    Expr row0 = 0;
    if (source == RowSource::localScan) {
      base(0) = 0;
      serial(4, [&](Expr i) { base(0) = base(0) + off(i); });
      row0 = cast(base(0), DType::index);
    } else if (source == RowSource::conditional) {
      base(0) = 0;
      if_(n > 256, [&] { base(0) = 128; });
      row0 = cast(base(0), DType::index);
    } else if (source == RowSource::sharedRead) {
      Buffer offsets = alloc_shared({4}, DType::i32, "offsets");
      copy(off.tile({0}, {4}), offsets);
      row0 = cast(offsets(2), DType::index);
    } else {
      Expr sum = serial(4, cast(Expr(0), DType::i32), [&](Expr i, Expr acc) { return acc + off(i); });
      row0 = cast(sum, DType::index);
    }
    Buffer s = alloc_shared({64, 64}, DType::bf16);
    Buffer acc = alloc_fragment({64, 64}, DType::f32);
    clear(acc);
    pipelined(4, 2, [&](Expr k) {
      copy(x.tile({row0 + k * 64, 0}, {64, 64}), s);
      parallel(64, 64, [&](Expr i, Expr j) { acc(i, j) = acc(i, j) + cast(s(i, j), DType::f32); });
    });
    copy(acc, y.tile({0, 0}, {64, 64}));
  });
  return p;
}

/// The row offsetRowsSum starts at for `rows` rows and offsets `off`.
inline int64_t expectedRowStart(RowSource source, int64_t rows, const std::vector<float> &off) {
  switch (source) {
  case RowSource::localScan:
  case RowSource::carriedScan: return int64_t(off[0] + off[1] + off[2] + off[3]);
  case RowSource::conditional: return rows > 256 ? 128 : 0;
  default: return int64_t(off[2]);
  }
}

/// y = softmax(x) over one vector of 256: the maximum and the sum are
/// reductions of the whole fragment, read inside parallel at index 0 by
/// every thread.
inline Program vectorSoftmax() {
  Program p("vector_softmax");
  Tensor x = p.tensor("x", {256}, DType::f32), y = p.tensor("y", {256}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer l = alloc_fragment({256}, DType::f32), mx = alloc_fragment({1}, DType::f32);
    Buffer sum = alloc_fragment({1}, DType::f32);
    copy(x.tile({0}, {256}), l);
    reduce_max(l, mx, 0);
    parallel(256, [&](Expr j) { l(j) = exp(l(j) - mx(0)); });
    reduce_sum(l, sum, 0);
    parallel(256, [&](Expr j) { l(j) = l(j) / sum(0); });
    copy(l, y.tile({0}, {256}));
  });
  return p;
}

/// y = 2 x, then z = 3 x, each through its own [128, 128] f32 fragment of
/// 128 registers per thread: live one after the other, never together.
inline Program twoPhases() {
  Program p("two_phases");
  Tensor x = p.tensor("x", {128, 128}, DType::f32), y = p.tensor("y", {128, 128}, DType::f32);
  Tensor z = p.tensor("z", {128, 128}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer a = alloc_fragment({128, 128}, DType::f32, "a");
    copy(x.tile({0, 0}, {128, 128}), a);
    parallel(128, 128, [&](Expr i, Expr j) { a(i, j) = a(i, j) * 2.0; });
    copy(a, y.tile({0, 0}, {128, 128}));
    Buffer b = alloc_fragment({128, 128}, DType::f32, "b");
    copy(x.tile({0, 0}, {128, 128}), b);
    parallel(128, 128, [&](Expr i, Expr j) { b(i, j) = b(i, j) * 3.0; });
    copy(b, z.tile({0, 0}, {128, 128}));
  });
  return p;
}

/// y = x with its column halves swapped and z = x's left half, through
/// windows at constant offsets of one [64, 128] f32 shared tile: copies
/// alone touch it, so it is swizzled, and each fragment copy into or out of
/// a window addresses its registers as a thread offset combined with a
/// constant (the window's origin included).
inline Program swappedHalves() {
  Program p("swapped_halves");
  Tensor x = p.tensor("x", {64, 128}, DType::f32), y = p.tensor("y", {64, 128}, DType::f32);
  Tensor z = p.tensor("z", {64, 64}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer left = alloc_fragment({64, 64}, DType::f32, "left");
    Buffer right = alloc_fragment({64, 64}, DType::f32, "right");
    copy(x.tile({0, 0}, {64, 64}), left);
    copy(x.tile({0, 64}, {64, 64}), right);
    Buffer staged = alloc_shared({64, 128}, DType::f32, "staged");
    copy(left, staged.tile({0, 64}, {64, 64}));
    copy(right, staged.tile({0, 0}, {64, 64}));
    Buffer back = alloc_fragment({64, 64}, DType::f32, "back");
    copy(staged.tile({0, 64}, {64, 64}), back);
    copy(back, z.tile({0, 0}, {64, 64}));
    copy(staged, y.tile({0, 0}, {64, 128}));
  });
  return p;
}

/// o = sum over key blocks of exp(s - rowmax_block(s)) v with s = q k^T, for
/// 64 query rows and N keys, 64 a step: FlashAttention's two products
/// written without a warp policy, the second reading P from registers.
/// Its layouts must agree on every target (wgmma splits warps along M by
/// itself; mma.sync's default square split would not).
inline Program twoProducts() {
  Program p("two_products");
  Expr n = p.sym("N");
  Tensor q = p.tensor("q", {64, 64}, DType::bf16), k = p.tensor("k", {n, 64}, DType::bf16);
  Tensor v = p.tensor("v", {n, 64}, DType::bf16), o = p.tensor("o", {64, 64}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer qs = alloc_shared({64, 64}, DType::bf16), ks = alloc_shared({64, 64}, DType::bf16);
    Buffer vs = alloc_shared({64, 64}, DType::bf16);
    Buffer s = alloc_fragment({64, 64}, DType::f32, "s"), m = alloc_fragment({64}, DType::f32);
    Buffer pr = alloc_fragment({64, 64}, DType::bf16, "p"), acc = alloc_fragment({64, 64}, DType::f32);
    copy(q.tile({0, 0}, {64, 64}), qs);
    fill(acc, 0.0);
    pipelined(ceil_div(n, 64), 2, [&](Expr kt) {
      copy(k.tile({kt * 64, 0}, {64, 64}), ks);
      copy(v.tile({kt * 64, 0}, {64, 64}), vs);
      gemm(qs, ks, s, {.transpose_b = true, .clear_accum = true});
      reduce_max(s, m, 1);
      parallel(64, 64, [&](Expr i, Expr j) { pr(i, j) = exp(s(i, j) - m(i)); });
      gemm(pr, vs, acc);
    });
    copy(acc, o.tile({0, 0}, {64, 64}));
  });
  return p;
}

/// A softmax row pass in the consumer role, for 16 query rows and N keys,
/// 64 a step: out[i] = sum over key blocks B of sum_{j in B} exp(s[i, j] -
/// max_{j in B} s[i, j]), s = q k^T. The row maximum and the row sum both
/// cross warps (full_col splits the columns over them), through one shared
/// scratch buffer.
inline Program twoReductions() {
  Program p("two_reductions");
  Expr n = p.sym("N");
  Tensor q = p.tensor("q", {16, 64}, DType::bf16), k = p.tensor("k", {n, 64}, DType::bf16);
  Tensor out = p.tensor("out", {16}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer qs = alloc_shared({16, 64}, DType::bf16), ks = alloc_shared({64, 64}, DType::bf16);
    Buffer s = alloc_fragment({16, 64}, DType::f32), m = alloc_fragment({16}, DType::f32);
    Buffer l = alloc_fragment({16}, DType::f32);
    copy(q.tile({0, 0}, {16, 64}), qs);
    fill(l, 0.0);
    pipelined(ceil_div(n, 64), 2, [&](Expr kt) {
      copy(k.tile({kt * 64, 0}, {64, 64}), ks);
      gemm(qs, ks, s, {.transpose_b = true, .clear_accum = true, .policy = WarpPolicy::full_col});
      reduce_max(s, m, 1);
      parallel(16, 64, [&](Expr i, Expr j) { s(i, j) = exp(s(i, j) - m(i)); });
      reduce_sum(s, l, 1, /*clear=*/false);
    });
    copy(l, out.tile({0}, {16}));
  });
  return p;
}

/// out[i] = max_j (q k^T)[i, j] and sum[i, :] = sum over key blocks of the
/// scores, for 128 query rows and N keys, 64 a step of a pipelined loop: a
/// register accumulator as a program for sm_90a writes it, which sm_100a
/// runs on tcgen05.mma through tensor memory (the row maximum and the
/// running sum read it in registers, a row a thread).
inline Program scoresRowMax() {
  Program p("scores_row_max");
  Expr n = p.sym("N");
  Tensor q = p.tensor("q", {128, 64}, DType::bf16), k = p.tensor("k", {n, 64}, DType::bf16);
  Tensor out = p.tensor("out", {128}, DType::f32), sum = p.tensor("sum", {128, 64}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer qs = alloc_shared({128, 64}, DType::bf16), ks = alloc_shared({64, 64}, DType::bf16);
    Buffer s = alloc_fragment({128, 64}, DType::f32, "scores");
    Buffer total = alloc_fragment({128, 64}, DType::f32, "total");
    Buffer m = alloc_fragment({128}, DType::f32);
    copy(q.tile({0, 0}, {128, 64}), qs);
    fill(m, -INFINITY);
    fill(total, 0.0);
    pipelined(ceil_div(n, 64), 2, [&](Expr kt) {
      copy(k.tile({kt * 64, 0}, {64, 64}), ks);
      gemm(qs, ks, s, {.transpose_b = true, .clear_accum = true});
      reduce_max(s, m, 1, /*clear=*/false);
      parallel(128, 64, [&](Expr i, Expr j) { total(i, j) = total(i, j) + s(i, j); });
    });
    copy(m, out.tile({0}, {128}));
    copy(total, sum.tile({0, 0}, {128, 64}));
  });
  return p;
}

/// s = q k^T + 1 for `rows` query rows (64 or 128) and `keys` keys (a
/// multiple of 8 up to 256, not necessarily a power of two), the scores
/// read back by element code and stored: wgmma's N in steps of 8, on one
/// warpgroup (128 rows are two 64-row tiles of registers).
inline Program wideScores(int64_t rows, int64_t keys) {
  Program p("wide_scores_" + std::to_string(rows) + "x" + std::to_string(keys));
  Tensor q = p.tensor("q", {rows, 64}, DType::bf16), k = p.tensor("k", {keys, 64}, DType::bf16);
  Tensor out = p.tensor("out", {rows, keys}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer qs = alloc_shared({rows, 64}, DType::bf16), ks = alloc_shared({keys, 64}, DType::bf16);
    Buffer s = alloc_fragment({rows, keys}, DType::f32, "s");
    copy(q.tile({0, 0}, {rows, 64}), qs);
    copy(k.tile({0, 0}, {keys, 64}), ks);
    gemm(qs, ks, s, {.transpose_b = true, .clear_accum = true});
    parallel(rows, keys, [&](Expr i, Expr j) { s(i, j) = s(i, j) + 1.0; });
    copy(s, out.tile({0, 0}, {rows, keys}));
  });
  return p;
}

/// Weight-only int4: yT = dequant(W) x^T for N output features and 16
/// tokens, W [N, K] packed two 4-bit codes a byte (low nibble first, code
/// c meaning c - 8) with an f32 scale per 128 of K. The weights are the
/// gemm's A operand, unpacked by element code from a shared tile of bytes
/// straight into a register fragment (bit operations and u8 promotion);
/// the tokens are B.
inline constexpr int64_t kInt4Tokens = 16, kInt4Group = 128;
inline Program int4Weights() {
  Program p("int4_weights");
  Expr n = p.sym("N"), k = p.sym("K");
  Tensor x = p.tensor("x", {kInt4Tokens, k}, DType::bf16);
  Tensor w = p.tensor("w", {n, k / 2}, DType::u8);
  Tensor scales = p.tensor("scales", {n, k / kInt4Group}, DType::f32);
  Tensor yT = p.tensor("yT", {n, kInt4Tokens}, DType::f32);
  p.kernel({ceil_div(n, 64)}, 128, [&](Expr bx) {
    Buffer ws = alloc_shared({64, kInt4Group / 2}, DType::u8, "w_codes");
    Buffer xs = alloc_shared({kInt4Tokens, kInt4Group}, DType::bf16, "x");
    Buffer a = alloc_fragment({64, kInt4Group}, DType::bf16, "w");
    Buffer acc = alloc_fragment({64, kInt4Tokens}, DType::f32, "acc");
    fill(acc, 0.0);
    pipelined(ceil_div(k, kInt4Group), 2, [&](Expr kt) {
      copy(w.tile({bx * 64, kt * (kInt4Group / 2)}, {64, kInt4Group / 2}), ws);
      copy(x.tile({0, kt * kInt4Group}, {kInt4Tokens, kInt4Group}), xs);
      parallel(64, kInt4Group, [&](Expr i, Expr j) {
        Expr code = (ws(i, j / 2) >> ((j % 2) * 4)) & 15;
        a(i, j) = cast(code - 8, DType::f32) * scales(bx * 64 + i, kt);
      });
      gemm(a, xs, acc, {.transpose_b = true});
    });
    copy(acc, yT.tile({bx * 64, 0}, {64, kInt4Tokens}));
  });
  return p;
}

/// c = a b for 8-bit a and b with one operand stored MN-major: b as [K, N]
/// (a row-major weight) or, with `aMnMajor`, a as [K, M] too; c is f32 for
/// FP8 inputs and i32 for i8. 128 x 128 tiles, 64 of K a step of a
/// pipelined loop; the compiler gives the tensor cores K-major copies.
inline Program mnMajorEightBit(DType in, bool aMnMajor) {
  Program p(std::string("mn_major_") + name(in) + (aMnMajor ? "_a" : ""));
  Expr m = p.sym("M"), n = p.sym("N"), k = p.sym("K");
  DType acc = in == DType::i8 ? DType::i32 : DType::f32;
  Tensor a = aMnMajor ? p.tensor("a", {k, m}, in) : p.tensor("a", {m, k}, in);
  Tensor b = p.tensor("b", {k, n}, in);
  Tensor c = p.tensor("c", {m, n}, acc);
  p.kernel({ceil_div(n, 128), ceil_div(m, 128)}, 256, [&](Expr bx, Expr by) {
    Buffer as = aMnMajor ? alloc_shared({64, 128}, in, "a") : alloc_shared({128, 64}, in, "a");
    Buffer bs = alloc_shared({64, 128}, in, "b");
    Buffer cf = alloc_fragment({128, 128}, acc, "c");
    clear(cf);
    pipelined(ceil_div(k, 64), 2, [&](Expr kt) {
      copy(aMnMajor ? a.tile({kt * 64, by * 128}, {64, 128}) : a.tile({by * 128, kt * 64}, {128, 64}), as);
      copy(b.tile({kt * 64, bx * 128}, {64, 128}), bs);
      gemm(as, bs, cf, {.transpose_a = aMnMajor});
    });
    copy(cf, c.tile({by * 128, bx * 128}, {128, 128}));
  });
  return p;
}

/// A gemm accumulating in f16, the tensor cores' .f16 forms: FP8 or f16
/// operands, A [M, K] and B [N, K] (both K-major), 128 x 128 tiles of C
/// [M, N] in f16 on `threads` threads. With `doubleEachStep`, element code
/// doubles the accumulator after each K step's product (C = 2 (C + A_t
/// B_t)), so the next product reads registers that code wrote.
inline Program halfAccumulator(DType in, bool doubleEachStep = false, int64_t threads = 256) {
  Program p(std::string("half_accumulator_") + name(in) + (doubleEachStep ? "_doubled" : ""));
  Expr m = p.sym("M"), n = p.sym("N"), k = p.sym("K");
  Tensor a = p.tensor("a", {m, k}, in), b = p.tensor("b", {n, k}, in);
  Tensor c = p.tensor("c", {m, n}, DType::f16);
  int64_t bk = in == DType::f16 ? 32 : 64; // 64 bytes of K a step
  p.kernel({ceil_div(n, 128), ceil_div(m, 128)}, threads, [&](Expr bx, Expr by) {
    Buffer as = alloc_shared({128, bk}, in, "a");
    Buffer bs = alloc_shared({128, bk}, in, "b");
    Buffer cf = alloc_fragment({128, 128}, DType::f16, "c");
    clear(cf);
    pipelined(ceil_div(k, bk), 2, [&](Expr kt) {
      copy(a.tile({by * 128, kt * bk}, {128, bk}), as);
      copy(b.tile({bx * 128, kt * bk}, {128, bk}), bs);
      gemm(as, bs, cf, {.transpose_b = true});
      if (doubleEachStep) parallel(128, 128, [&](Expr i, Expr j) { cf(i, j) = cf(i, j) * 2.0; });
    });
    copy(cf, c.tile({by * 128, bx * 128}, {128, 128}));
  });
  return p;
}

/// MLA's scores in one product: s = q kv^T over the 576 columns of a
/// latent (512) and rope (64) part, K = 576 read from shared memory, for 64
/// query rows and N keys, 32 a step of a pipelined loop.
inline constexpr int64_t kLatentWidth = 576;
inline Program latentScores() {
  Program p("latent_scores");
  Expr n = p.sym("N");
  Tensor q = p.tensor("q", {64, kLatentWidth}, DType::bf16);
  Tensor kv = p.tensor("kv", {n, kLatentWidth}, DType::bf16);
  Tensor s = p.tensor("s", {64, n}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer qs = alloc_shared({64, kLatentWidth}, DType::bf16, "q");
    Buffer ks = alloc_shared({32, kLatentWidth}, DType::bf16, "kv");
    Buffer acc = alloc_fragment({64, 32}, DType::f32, "scores");
    copy(q.tile({0, 0}, {64, kLatentWidth}), qs);
    pipelined(ceil_div(n, 32), 2, [&](Expr kt) {
      copy(kv.tile({kt * 32, 0}, {32, kLatentWidth}), ks);
      gemm(qs, ks, acc, {.transpose_b = true, .clear_accum = true});
      copy(acc, s.tile({0, kt * 32}, {64, 32}));
    });
  });
  return p;
}

/// A cache of N rows of which the first `len` are valid: y = the first 128
/// rows read through a bound at len (zero past it), and out's rows below
/// len set to 2 * cache through a bounded store (rows past it untouched).
inline Program boundedCache() {
  Program p("bounded_cache");
  Expr n = p.sym("N"), len = p.sym("len");
  Tensor cache = p.tensor("cache", {n, 64}, DType::f16);
  Tensor y = p.tensor("y", {128, 64}, DType::f16), out = p.tensor("out", {n, 64}, DType::f16);
  p.kernel({ceil_div(n, 128)}, 128, [&](Expr bx) {
    Buffer s = alloc_shared({128, 64}, DType::f16);
    copy(cache.bounded({len, 64}).tile({bx * 128, 0}, {128, 64}), s);
    if_(bx == 0, [&] { copy(s, y.tile({0, 0}, {128, 64})); });
    parallel(128, 64, [&](Expr i, Expr j) { s(i, j) = s(i, j) * 2.0; });
    copy(s, out.bounded({len, 64}).tile({bx * 128, 0}, {128, 64}));
  });
  return p;
}

/// A causal convolution over time of T steps of 32 channels, y[t] = x[t] +
/// x[t - 1] + ... + x[t - 8] with x = 0 before t = 0: each block walks 64
/// steps, 16 a step of a pipelined loop (TMA on sm_90a), each step reading
/// the 8 rows before it with its own, a window that starts 8 rows before
/// the tensor in block 0. Each block also copies its first window back to
/// `back` as it read it (writes before row 0 and past T are dropped).
inline Program causalConvolution() {
  Program p("causal_convolution");
  Expr t = p.sym("T");
  Tensor x = p.tensor("x", {t, 32}, DType::f32), y = p.tensor("y", {t, 32}, DType::f32);
  Tensor back = p.tensor("back", {t, 32}, DType::f32);
  p.kernel({ceil_div(t, 64)}, 128, [&](Expr bx) {
    Buffer first = alloc_shared({24, 32}, DType::f32);
    copy(x.tile({bx * 64 - 8, 0}, {24, 32}), first);
    copy(first, back.tile({bx * 64 - 8, 0}, {24, 32}));
    Buffer halo = alloc_shared({24, 32}, DType::f32), sums = alloc_shared({16, 32}, DType::f32);
    pipelined(4, 2, [&](Expr step) {
      Expr t0 = bx * 64 + step * 16;
      copy(x.tile({t0 - 8, 0}, {24, 32}), halo);
      parallel(16, 32, [&](Expr i, Expr c) {
        Expr sum = halo(i + 8, c);
        for (int k = 1; k <= 8; ++k) sum = sum + halo(i + 8 - k, c);
        sums(i, c) = sum;
      });
      copy(sums, y.tile({t0, 0}, {16, 32}));
    });
  });
  return p;
}

/// out[0] = sum of offs, a tensor of groups + 1 entries (an extent computed
/// from a symbol).
inline Program extentExpression() {
  Program p("extent_expression");
  Expr groups = p.sym("groups");
  Tensor offs = p.tensor("offs", {groups + 1}, DType::i32);
  Tensor out = p.tensor("out", {1}, DType::i32);
  p.kernel({1}, 32, [&](Expr) {
    Expr total = serial(groups + 1, cast(Expr(0), DType::i32),
                        [&](Expr i, Expr acc) { return acc + offs(i); });
    out(0) = total;
  });
  return p;
}

/// Producer: data = 2 * x over 4096 elements (one block), then
/// flags[0] = epoch. Consumer: waits for flags[0] >= epoch, then
/// out = data + 1. Run on two streams, the consumer first.
inline Program flagProducer() {
  Program p("flag_producer");
  Expr epoch = p.scalar("epoch", DType::i32);
  Tensor x = p.tensor("x", {4096}, DType::f32), data = p.tensor("data", {4096}, DType::f32);
  Tensor flags = p.tensor("flags", {4}, DType::i32);
  p.kernel({1}, 256, [&](Expr) {
    Buffer t = alloc_fragment({4096}, DType::f32);
    copy(x.tile({0}, {4096}), t);
    parallel(4096, [&](Expr i) { t(i) = t(i) * 2.0; });
    copy(t, data.tile({0}, {4096}));
    signal(flags, {0}, epoch);
  });
  return p;
}

inline Program flagConsumer(int64_t timeoutMs = 20000) {
  Program p("flag_consumer");
  Expr epoch = p.scalar("epoch", DType::i32);
  Tensor data = p.tensor("data", {4096}, DType::f32), out = p.tensor("out", {4096}, DType::f32);
  Tensor flags = p.tensor("flags", {4}, DType::i32);
  p.kernel({1}, 256, [&](Expr) {
    wait(flags, {0}, epoch, timeoutMs);
    Buffer t = alloc_fragment({4096}, DType::f32);
    copy(data.tile({0}, {4096}), t);
    parallel(4096, [&](Expr i) { t(i) = t(i) + 1.0; });
    copy(t, out.tile({0}, {4096}));
  });
  return p;
}

/// Y = X W with X [128, 64] stored from registers into tensor memory (packed
/// bf16) as the A operand of a tcgen05 gemm (the ts form), W [64, 128] in
/// shared memory, the accumulator in tensor memory, Y [128, 128] f32 written
/// in two column halves (sm_100a).
inline Program tsGemm() {
  Program p("tmem_ts_gemm");
  Tensor x = p.tensor("X", {128, 64}, DType::bf16);
  Tensor w = p.tensor("W", {64, 128}, DType::bf16);
  Tensor y = p.tensor("Y", {128, 128}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer xa = alloc_fragment({128, 64}, DType::bf16, "x_regs");
    Buffer a = alloc_tmem({128, 64}, DType::bf16, "a");
    Buffer ws = alloc_shared({64, 128}, DType::bf16, "w");
    Buffer acc = alloc_tmem({128, 128}, DType::f32, "acc");
    Buffer part = alloc_fragment({128, 64}, DType::f32, "part");
    copy(x.tile({0, 0}, {128, 64}), xa);
    copy(xa, a);
    copy(w.tile({0, 0}, {64, 128}), ws);
    gemm(a, ws, acc, {.clear_accum = true});
    for (int64_t at = 0; at < 128; at += 64) {
      copy(acc.tile({0, at}, {128, 64}), part);
      copy(part, y.tile({0, at}, {128, 64}));
    }
  });
  return p;
}

/// Y = 2 (X W) + P[q] a quarter of the columns at a time (q = 0..3), then
/// the last quarter cleared through a window of a window: an epilogue over
/// windows of the accumulator fragment, the quarters taken in a serial loop
/// (which the compiler unrolls: each window names registers). X [128, 64], W [64, 128]
/// f16; P [4, 128, 32] and Y [128, 128] f32.
inline Program fragmentWindows() {
  Program p("fragment_windows");
  Tensor x = p.tensor("X", {128, 64}, DType::f16);
  Tensor w = p.tensor("W", {64, 128}, DType::f16);
  Tensor parts = p.tensor("P", {4, 128, 32}, DType::f32);
  Tensor y = p.tensor("Y", {128, 128}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer xs = alloc_shared({128, 64}, DType::f16, "x");
    Buffer ws = alloc_shared({64, 128}, DType::f16, "w");
    Buffer acc = alloc_fragment({128, 128}, DType::f32, "acc");
    copy(x.tile({0, 0}, {128, 64}), xs);
    copy(w.tile({0, 0}, {64, 128}), ws);
    gemm(xs, ws, acc, {.clear_accum = true});
    serial(4, [&](Expr q) {
      Buffer quarter = acc.tile({0, q * 32}, {128, 32});
      Buffer part = parts.tile({q, 0, 0}, {drop, 128, 32});
      parallel(128, 32, [&](Expr i, Expr j) {
        quarter(i, j) = quarter(i, j) * 2.0 + part(i, j);
      });
    });
    fill(acc.tile({0, 64}, {128, 64}).tile({0, 32}, {128, 32}), 0.0);
    copy(acc, y.tile({0, 0}, {128, 128}));
  });
  return p;
}

/// out[64, 128] = the sum over i < N of page table[i] of a paged cache
/// [P, 64, 128]: each iteration's load address comes from a table the
/// kernel only reads, so its producer can run ahead.
inline Program pagedCacheSum() {
  Program p("paged_sum");
  Expr n = p.sym("N"), pages = p.sym("P");
  Tensor cache = p.tensor("cache", {pages, 64, 128}, DType::f16);
  Tensor table = p.tensor("table", {n}, DType::i32);
  Tensor out = p.tensor("out", {64, 128}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer ks = alloc_shared({64, 128}, DType::f16);
    Buffer acc = alloc_fragment({64, 128}, DType::f32);
    fill(acc, 0.0);
    pipelined(n, 3, [&](Expr kt) {
      Expr page = cast(table(kt), DType::index);
      copy(cache.tile({page, 0, 0}, {drop, 64, 128}), ks);
      parallel(64, 128, [&](Expr i, Expr j) { acc(i, j) = acc(i, j) + cast(ks(i, j), DType::f32); });
    });
    copy(acc, out.tile({0, 0}, {64, 128}));
  });
  return p;
}

/// GQA decode over a paged KV cache, as a user writes it: one block per
/// (sequence, KV head) with its 4 query heads (padded to 16 rows), pages of
/// 64 keys found through a block table, an online softmax, P through shared
/// memory for P x V (16 rows cannot be split over 4 warps along M), and o =
/// the normalised output. One program for sm_80, sm_90a and sm_100a.
inline constexpr int64_t kDecodeGroup = 4, kDecodeDim = 128, kDecodePage = 64;
inline Program pagedDecode() {
  Program p("paged_decode_user");
  Expr batch = p.sym("B"), kvHeads = p.sym("H"), pages = p.sym("P"), perSeq = p.sym("S");
  Tensor q = p.tensor("q", {batch, kvHeads * kDecodeGroup, kDecodeDim}, DType::bf16);
  Tensor kc = p.tensor("k_cache", {pages, kDecodePage, kvHeads, kDecodeDim}, DType::bf16);
  Tensor vc = p.tensor("v_cache", {pages, kDecodePage, kvHeads, kDecodeDim}, DType::bf16);
  Tensor table = p.tensor("block_table", {batch, perSeq}, DType::i32);
  Tensor lengths = p.tensor("lengths", {batch}, DType::i32);
  Tensor o = p.tensor("o", {batch, kvHeads * kDecodeGroup, kDecodeDim}, DType::f32);
  p.kernel({kvHeads, batch}, 128, [&](Expr h, Expr b) {
    Buffer qs = alloc_shared({16, kDecodeDim}, DType::bf16, "q");
    Buffer ks = alloc_shared({kDecodePage, kDecodeDim}, DType::bf16, "k");
    Buffer vs = alloc_shared({kDecodePage, kDecodeDim}, DType::bf16, "v");
    Buffer ps = alloc_shared({16, kDecodePage}, DType::bf16, "p");
    Buffer s = alloc_fragment({16, kDecodePage}, DType::f32, "s");
    Buffer acc = alloc_fragment({16, kDecodeDim}, DType::f32, "acc");
    Buffer mPrev = alloc_fragment({16}, DType::f32), m = alloc_fragment({16}, DType::f32);
    Buffer l = alloc_fragment({16}, DType::f32), scale = alloc_fragment({16}, DType::f32);
    Expr len = cast(lengths(b), DType::index);
    copy(q.tile({b, h * kDecodeGroup, 0}, {drop, 16, kDecodeDim}), qs);
    fill(acc, 0.0);
    fill(l, 0.0);
    fill(m, -INFINITY);
    pipelined(ceil_div(len, kDecodePage), 2, [&](Expr kt) {
      Expr page = cast(table(b, kt), DType::index);
      copy(kc.tile({page, 0, h, 0}, {drop, kDecodePage, drop, kDecodeDim}), ks);
      copy(vc.tile({page, 0, h, 0}, {drop, kDecodePage, drop, kDecodeDim}), vs);
      gemm(qs, ks, s, {.transpose_b = true, .clear_accum = true, .policy = WarpPolicy::full_col});
      parallel(16, kDecodePage, [&](Expr i, Expr j) {
        s(i, j) = select(kt * kDecodePage + j < len, s(i, j) * 0.08838834764831845, Expr(-INFINITY));
      });
      parallel(16, [&](Expr i) { mPrev(i) = m(i); });
      reduce_max(s, m, 1, /*clear=*/false);
      parallel(16, [&](Expr i) { scale(i) = exp(mPrev(i) - m(i)); });
      parallel(16, kDecodePage, [&](Expr i, Expr j) { s(i, j) = exp(s(i, j) - m(i)); });
      parallel(16, [&](Expr i) { l(i) = l(i) * scale(i); });
      reduce_sum(s, l, 1, /*clear=*/false);
      copy(s, ps);
      parallel(16, kDecodeDim, [&](Expr i, Expr d) { acc(i, d) = acc(i, d) * scale(i); });
      gemm(ps, vs, acc, {.policy = WarpPolicy::full_col});
    });
    parallel(16, kDecodeDim, [&](Expr i, Expr d) { acc(i, d) = acc(i, d) / l(i); });
    // Rows past the group's 4 belong to the next heads' blocks: dropped.
    Buffer mine = o.bounded({batch, h * kDecodeGroup + kDecodeGroup, kDecodeDim})
                      .tile({b, h * kDecodeGroup, 0}, {drop, 16, kDecodeDim});
    copy(acc, mine);
  });
  return p;
}

/// Three warpgroups (384 threads), FlashAttention-3's 192-row tiles: for
/// 192 query rows and N keys, 64 a step of a pipelined loop, rowmax[i] =
/// max_j s[i, j] and colsum[j] = sum over steps and rows of exp(s[i, j] -
/// rowmax so far[i]), s = q k^T; `last` is the last step's s. The row
/// maximum stays in a warp; the column sum crosses every warp, the fourth
/// warpgroup of the layout (which does not exist) included.
inline Program threeWarpgroups(WarpPolicy policy) {
  Program p(std::string("three_warpgroups_") + (policy == WarpPolicy::square ? "square" : "rows"));
  Expr n = p.sym("N");
  Tensor q = p.tensor("q", {192, 64}, DType::bf16), k = p.tensor("k", {n, 64}, DType::bf16);
  Tensor rowmax = p.tensor("rowmax", {192}, DType::f32);
  Tensor colsum = p.tensor("colsum", {64}, DType::f32);
  Tensor last = p.tensor("last", {192, 64}, DType::f32);
  p.kernel({1}, 384, [&](Expr) {
    Buffer qs = alloc_shared({192, 64}, DType::bf16), ks = alloc_shared({64, 64}, DType::bf16);
    Buffer s = alloc_fragment({192, 64}, DType::f32, "s"), m = alloc_fragment({192}, DType::f32);
    Buffer c = alloc_fragment({64}, DType::f32, "c");
    copy(q.tile({0, 0}, {192, 64}), qs);
    fill(m, -INFINITY);
    fill(c, 0.0);
    pipelined(ceil_div(n, 64), 2, [&](Expr kt) {
      copy(k.tile({kt * 64, 0}, {64, 64}), ks);
      gemm(qs, ks, s, {.transpose_b = true, .clear_accum = true, .policy = policy});
      reduce_max(s, m, 1, /*clear=*/false);
      copy(s, last.tile({0, 0}, {192, 64}));
      parallel(192, 64, [&](Expr i, Expr j) { s(i, j) = exp(s(i, j) - m(i)); });
      reduce_sum(s, c, 0, /*clear=*/false);
    });
    copy(m, rowmax.tile({0}, {192}));
    copy(c, colsum.tile({0}, {64}));
  });
  return p;
}

/// Another rank's cache rows up to a run-time length, as a decode kernel
/// reads a peer's KV shard: out [64, 64] = peer(cache, rank) rows from
/// `start`, bounded by `len` rows (rows at or past it read as zero).
inline Program boundedPeerRows() {
  Program p("bounded_peer_rows");
  Expr rows = p.sym("rows"), rank = p.sym("rank"), start = p.sym("start");
  Expr len = p.scalar("len", DType::i32);
  Tensor cache = p.tensor("cache", {rows, 64}, DType::f16);
  Tensor out = p.tensor("out", {64, 64}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer s = alloc_shared({64, 64}, DType::f16);
    copy(peer(cache, rank).bounded({len, 64}).tile({start, 0}, {64, 64}), s);
    parallel(64, 64, [&](Expr i, Expr j) { out(i, j) = cast(s(i, j), DType::f32); });
  });
  return p;
}

/// Indices read in the kernel: out[i] = table[offs[i]] + shared copy of
/// table[offs[i]] + table[codes[i]], each 0 where the index falls outside
/// its 256 elements (offs may be negative or past the end), and
/// bins[(offs[i] % 64 + 64) % 64] += 1, over N elements.
inline Program gatherAndHistogram() {
  Program p("gather_and_histogram");
  Expr n = p.sym("N");
  Tensor table = p.tensor("table", {256}, DType::f32);
  Tensor offs = p.tensor("offs", {n}, DType::i32);
  Tensor codes = p.tensor("codes", {n}, DType::u8);
  Tensor out = p.tensor("out", {n}, DType::f32);
  Tensor bins = p.tensor("bins", {64}, DType::i32);
  p.kernel({ceil_div(n, 512)}, 128, [&](Expr bx) {
    Buffer t = table.tile({0}, {256}), o = offs.tile({bx * 512}, {512});
    Buffer c = codes.tile({bx * 512}, {512}), y = out.tile({bx * 512}, {512});
    Buffer h = bins.tile({0}, {64});
    Buffer s = alloc_shared({256}, DType::f32);
    copy(t, s);
    parallel(512, [&](Expr i) {
      y(i) = t(o(i)) + s(o(i)) + t(c(i));
      // The last tile's elements past N read 0 and still run: only those
      // inside count.
      atomic_add(h((o(i) % Expr(64) + Expr(64)) % Expr(64)),
                 select(bx * 512 + i < n, Expr(1), Expr(0)));
    });
  });
  return p;
}

/// The same gather, and a scatter, indexing the kernel's tensors directly
/// rather than through tiles: out(e) = table(offs(e)) and hits(offs(e)) =
/// 1 for e = bx * 512 + i. An index past a tensor (offs outside [0, 256),
/// e past N in the last block) reads 0 and drops the write; the last
/// block's elements past N still run, so offs(e) = 0 there marks hits(0).
inline Program directGatherScatter() {
  Program p("direct_gather_scatter");
  Expr n = p.sym("N");
  Tensor table = p.tensor("table", {256}, DType::f32);
  Tensor offs = p.tensor("offs", {n}, DType::i32);
  Tensor out = p.tensor("out", {n}, DType::f32);
  Tensor hits = p.tensor("hits", {256}, DType::f32);
  p.kernel({ceil_div(n, 512)}, 128, [&](Expr bx) {
    parallel(512, [&](Expr i) {
      Expr e = bx * 512 + i;
      out(e) = table(offs(e));
      hits(offs(e)) = Expr(1.0);
    });
  });
  return p;
}

} // namespace tessel::test

#endif
