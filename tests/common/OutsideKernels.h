//===- OutsideKernels.h - kernels a new outside user writes -----*- C++ -*-===//
//
// Kernels of kinds the library and UserKernels.h do not have, written from
// the README and the public headers only, as a new user writes them: a
// fused residual add + RMSNorm over wide rows, rotary embeddings applied in
// place through a position array, an MoE grouped gemm that gathers and
// scatters rows through a token index, int8 quantisation per row and its
// dequantisation, and a softmax fused with its top-1 over a vocabulary.
// tests/unit/OutsideKernelTests.cpp compiles them for every target and
// tests/gpu/OutsideKernelGpuTests.cpp runs them against float64 references.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TESTS_OUTSIDEKERNELS_H
#define TESSEL_TESTS_OUTSIDEKERNELS_H

#include "tessel/dsl/Program.h"

#include <cmath>
#include <string>

namespace tessel::test {

/// Fused residual add + RMSNorm (vLLM's fused_add_rms_norm): for each row,
/// h = bf16(x + residual) (stored to `h`), y = bf16(h * rsqrt(mean(h^2) +
/// eps) * weight). `rows` rows a block; a pipelined loop over column chunks
/// of `chunk` accumulates the sum of squares, a second pipelined loop
/// normalises. H need not be a multiple of `chunk`.
inline Program rmsNormResidual(int64_t rows, int64_t chunk, int threads, int stages) {
  Program p("outside_rms_norm_residual_" + std::to_string(rows) + "x" + std::to_string(chunk) +
            "_t" + std::to_string(threads));
  Expr m = p.sym("M"), h = p.sym("H");
  Expr eps = p.scalar("eps", DType::f32);
  Tensor x = p.tensor("x", {m, h}, DType::bf16);
  Tensor res = p.tensor("residual", {m, h}, DType::bf16);
  Tensor w = p.tensor("weight", {h}, DType::bf16);
  Tensor y = p.tensor("y", {m, h}, DType::bf16);
  Tensor hout = p.tensor("h", {m, h}, DType::bf16);
  p.kernel({ceil_div(m, rows)}, threads, [&](Expr bx) {
    // Both loops stage x and the residual through the same buffers (each
    // rewrites them before reading them), which both loops pipeline.
    Buffer xs = alloc_shared({rows, chunk}, DType::bf16, "x");
    Buffer rs = alloc_shared({rows, chunk}, DType::bf16, "residual");
    Buffer ws = alloc_shared({chunk}, DType::bf16, "weight");
    Buffer hb = alloc_fragment({rows, chunk}, DType::bf16, "h");
    Buffer sq = alloc_fragment({rows, chunk}, DType::f32, "squares");
    Buffer ss = alloc_fragment({rows}, DType::f32, "sum_squares");
    // rstd in registers beside the reduction's result, read at the row
    // index by the second loop (its layout follows the reduced fragment's;
    // see OutsideKernelTests.cpp).
    Buffer rstd = alloc_fragment({rows}, DType::f32, "rstd");
    Buffer yb = alloc_fragment({rows, chunk}, DType::bf16, "y");
    fill(ss, 0.0);
    pipelined(ceil_div(h, chunk), stages, [&](Expr kt) {
      copy(x.tile({bx * rows, kt * chunk}, {rows, chunk}), xs);
      copy(res.tile({bx * rows, kt * chunk}, {rows, chunk}), rs);
      parallel(rows, chunk, [&](Expr i, Expr j) {
        Expr v = cast(cast(xs(i, j), DType::f32) + cast(rs(i, j), DType::f32), DType::bf16);
        hb(i, j) = v;
        Expr f = cast(v, DType::f32);
        sq(i, j) = f * f;
      });
      reduce_sum(sq, ss, 1, /*clear=*/false);
      copy(hb, hout.tile({bx * rows, kt * chunk}, {rows, chunk}));
    });
    parallel(rows, [&](Expr i) {
      rstd(i) = Expr(1.0) / sqrt(ss(i) / cast(h, DType::f32) + eps);
    });
    pipelined(ceil_div(h, chunk), stages, [&](Expr kt) {
      copy(x.tile({bx * rows, kt * chunk}, {rows, chunk}), xs);
      copy(res.tile({bx * rows, kt * chunk}, {rows, chunk}), rs);
      copy(w.tile({kt * chunk}, {chunk}), ws);
      parallel(rows, chunk, [&](Expr i, Expr j) {
        Expr v = cast(cast(cast(xs(i, j), DType::f32) + cast(rs(i, j), DType::f32), DType::bf16),
                      DType::f32);
        yb(i, j) = cast(v * rstd(i) * cast(ws(j), DType::f32), DType::bf16);
      });
      copy(yb, y.tile({bx * rows, kt * chunk}, {rows, chunk}));
    });
  });
  return p;
}

/// Rotary embeddings (NeoX halves) applied in place to q [T, heads, 128]
/// bf16: for token t at position pos[t] (i32, read on the device), d < 64:
/// q[d] = x[d] c - x[d + 64] s and q[d + 64] = x[d + 64] c + x[d] s with c,
/// s = cos[pos, d], sin[pos, d] from [max_pos, 64] tables of `table`'s type.
/// A block per (group of `headsPerBlock` heads, token); heads need not be
/// a multiple of the group.
inline Program ropeInPlace(int64_t headsPerBlock, DType table, int threads) {
  Program p(std::string("outside_rope_h") + std::to_string(headsPerBlock) + "_" + name(table) +
            "_t" + std::to_string(threads));
  Expr t = p.sym("T"), heads = p.sym("heads"), maxPos = p.sym("max_pos");
  Tensor q = p.tensor("q", {t, heads, 128}, DType::bf16);
  Tensor pos = p.tensor("pos", {t}, DType::i32);
  Tensor cosT = p.tensor("cos", {maxPos, 64}, table);
  Tensor sinT = p.tensor("sin", {maxPos, 64}, table);
  p.kernel({ceil_div(heads, headsPerBlock), t}, threads, [&](Expr hb, Expr tok) {
    Buffer qs = alloc_shared({headsPerBlock, 128}, DType::bf16, "q");
    Buffer cs = alloc_shared({64}, table, "cos"), sn = alloc_shared({64}, table, "sin");
    Buffer out = alloc_fragment({headsPerBlock, 128}, DType::bf16, "rotated");
    Expr at = cast(pos(tok), DType::index);
    Buffer qt = q.tile({tok, hb * headsPerBlock, 0}, {drop, headsPerBlock, 128});
    copy(qt, qs);
    copy(cosT.tile({at, 0}, {drop, 64}), cs);
    copy(sinT.tile({at, 0}, {drop, 64}), sn);
    parallel(headsPerBlock, 128, [&](Expr i, Expr d) {
      Expr lo = d % 64;
      Expr self = cast(qs(i, d), DType::f32);
      Expr partner = cast(qs(i, (d + 64) % 128), DType::f32);
      Expr c = cast(cs(lo), DType::f32), s = cast(sn(lo), DType::f32);
      out(i, d) = cast(select(d < 64, self * c - partner * s, self * c + partner * s), DType::bf16);
    });
    copy(out, qt);
  });
  return p;
}

/// MoE grouped gemm: for each expert e, rows r in [offsets[e], offsets[e +
/// 1]) of the routing list gather token idx[r] of X [T, K] (bf16), multiply
/// by W[e] [K, N] (bf16) and write Y[idx[r]] [T, N] (f32): top-1 routing, so
/// each token is written once. offsets (E + 1, i32) and idx (R, i32) are
/// read on the device. A block per (128 columns, 64 routed rows, expert);
/// `rowTiles` bounds every expert's 64-row tiles. The rows of each K step
/// are gathered by one copy per row into a window of the staged A tile; a
/// row past the expert's end reads token T (past X: zeros) and its store
/// is dropped.
inline constexpr int64_t kMoeBlockM = 64, kMoeBlockN = 128, kMoeBlockK = 64;
inline Program moeGroupedGemm(int stages) {
  Program p("outside_moe_grouped_gemm_s" + std::to_string(stages));
  Expr t = p.sym("T"), k = p.sym("K"), n = p.sym("N"), experts = p.sym("E"), routed = p.sym("R");
  Expr rowTiles = p.sym("row_tiles");
  Tensor x = p.tensor("x", {t, k}, DType::bf16);
  Tensor w = p.tensor("w", {experts, k, n}, DType::bf16);
  Tensor offsets = p.tensor("offsets", {experts + 1}, DType::i32);
  Tensor idx = p.tensor("idx", {routed}, DType::i32);
  Tensor y = p.tensor("y", {t, n}, DType::f32);
  p.kernel({ceil_div(n, kMoeBlockN), rowTiles, experts}, 128, [&](Expr bx, Expr by, Expr e) {
    Buffer as = alloc_shared({kMoeBlockM, kMoeBlockK}, DType::bf16, "a_rows");
    Buffer bs = alloc_shared({kMoeBlockK, kMoeBlockN}, DType::bf16, "w");
    Buffer acc = alloc_fragment({kMoeBlockM, kMoeBlockN}, DType::f32, "acc");
    // idx and y indexed directly: a row past the expert's end reads token
    // T, whose scatter store past y is dropped (see the tests).
    Expr end = cast(offsets(e + 1), DType::index);
    Expr m0 = cast(offsets(e), DType::index) + by * kMoeBlockM;
    clear(acc);
    pipelined(ceil_div(k, kMoeBlockK), stages, [&](Expr kt) {
      for (int64_t i = 0; i < kMoeBlockM; ++i) {
        Expr token = select(m0 + i < end, cast(idx(m0 + i), DType::index), t);
        copy(x.tile({token, kt * kMoeBlockK}, {drop, kMoeBlockK}), as.tile({i, 0}, {drop, kMoeBlockK}));
      }
      copy(w.tile({e, kt * kMoeBlockK, bx * kMoeBlockN}, {drop, kMoeBlockK, kMoeBlockN}), bs);
      gemm(as, bs, acc);
    });
    parallel(kMoeBlockM, kMoeBlockN, [&](Expr i, Expr j) {
      Expr token = select(m0 + i < end, cast(idx(m0 + i), DType::index), t);
      y(token, bx * kMoeBlockN + j) = acc(i, j);
    });
  });
  return p;
}

/// Per-row int8 quantisation: scale[r] = absmax(x[r, :]) / 127, q[r, c] =
/// round-half-away(x[r, c] * 127 / absmax) (0 for an all-zero row). `rows`
/// rows a block; one pipelined pass over column chunks for the absmax,
/// a second to quantise. C need not be a multiple of `chunk`.
inline Program quantizeRowsInt8(DType in, int64_t rows, int64_t chunk, int threads) {
  Program p(std::string("outside_quantize_rows_int8_") + name(in) + "_" + std::to_string(rows) +
            "x" + std::to_string(chunk));
  Expr m = p.sym("M"), c = p.sym("C");
  Tensor x = p.tensor("x", {m, c}, in);
  Tensor q = p.tensor("q", {m, c}, DType::i8);
  Tensor scale = p.tensor("scale", {m}, DType::f32);
  p.kernel({ceil_div(m, rows)}, threads, [&](Expr bx) {
    Buffer xs = alloc_shared({rows, chunk}, in, "x");
    Buffer xf = alloc_fragment({rows, chunk}, DType::f32, "xf");
    Buffer qf = alloc_fragment({rows, chunk}, DType::i8, "codes");
    Buffer amax = alloc_fragment({rows}, DType::f32, "amax");
    Buffer inv = alloc_fragment({rows}, DType::f32, "inverse");
    Buffer sc = alloc_fragment({rows}, DType::f32, "scale");
    fill(amax, 0.0);
    pipelined(ceil_div(c, chunk), 3, [&](Expr kt) {
      copy(x.tile({bx * rows, kt * chunk}, {rows, chunk}), xs);
      copy(xs, xf);
      reduce_absmax(xf, amax, 1, /*clear=*/false);
    });
    parallel(rows, [&](Expr i) {
      sc(i) = amax(i) / 127.0;
      inv(i) = select(amax(i) > 0.0, Expr(127.0) / amax(i), Expr(0.0));
    });
    copy(sc, scale.tile({bx * rows}, {rows}));
    pipelined(ceil_div(c, chunk), 3, [&](Expr kt) {
      copy(x.tile({bx * rows, kt * chunk}, {rows, chunk}), xs);
      // Through a fragment copied from the stage (see rmsNormResidual).
      copy(xs, xf);
      parallel(rows, chunk, [&](Expr i, Expr j) {
        Expr v = xf(i, j) * inv(i);
        qf(i, j) = cast(v + select(v >= 0.0, Expr(0.5), Expr(-0.5)), DType::i8);
      });
      copy(qf, q.tile({bx * rows, kt * chunk}, {rows, chunk}));
    });
  });
  return p;
}

/// y[r, c] = q[r, c] * scale[r] in `out`'s type, 16 x 256 tiles through
/// registers.
inline Program dequantizeRowsInt8(DType out, int threads) {
  Program p(std::string("outside_dequantize_rows_int8_") + name(out));
  Expr m = p.sym("M"), c = p.sym("C");
  Tensor q = p.tensor("q", {m, c}, DType::i8);
  Tensor scale = p.tensor("scale", {m}, DType::f32);
  Tensor y = p.tensor("y", {m, c}, out);
  p.kernel({ceil_div(c, 256), ceil_div(m, 16)}, threads, [&](Expr bx, Expr by) {
    Buffer qf = alloc_fragment({16, 256}, DType::i8, "codes");
    Buffer sf = alloc_fragment({16}, DType::f32, "scales");
    Buffer yf = alloc_fragment({16, 256}, out, "values");
    copy(q.tile({by * 16, bx * 256}, {16, 256}), qf);
    copy(scale.tile({by * 16}, {16}), sf);
    parallel(16, 256, [&](Expr i, Expr j) { yf(i, j) = cast(cast(qf(i, j), DType::f32) * sf(i), out); });
    copy(yf, y.tile({by * 16, bx * 256}, {16, 256}));
  });
  return p;
}

/// Softmax over a vocabulary row fused with its top-1: probs[r, :] =
/// softmax(logits[r, :]) (f32), top[r] = the first index of the row's
/// maximum (i32), top_prob[r] = its probability. A block per row; the first
/// pipelined pass over `chunk`-wide column chunks keeps the running maximum,
/// its index and the rescaled sum of exponentials (online softmax), the
/// second writes the probabilities. V need not be a multiple of `chunk`.
inline Program softmaxTop1(DType in, int64_t chunk, int threads) {
  Program p(std::string("outside_softmax_top1_") + name(in) + "_" + std::to_string(chunk) + "_t" +
            std::to_string(threads));
  Expr m = p.sym("M"), v = p.sym("V");
  Tensor logits = p.tensor("logits", {m, v}, in);
  Tensor probs = p.tensor("probs", {m, v}, DType::f32);
  Tensor top = p.tensor("top", {m}, DType::i32);
  Tensor topProb = p.tensor("top_prob", {m}, DType::f32);
  p.kernel({m}, threads, [&](Expr row) {
    Buffer xs = alloc_shared({chunk}, in, "logits");
    Buffer xs2 = alloc_shared({chunk}, in, "logits_again"); // its own (rmsNormResidual shares one)
    Buffer f = alloc_fragment({chunk}, DType::f32, "f");
    // Indices in i32: integer reductions are exact at any size.
    Buffer ix = alloc_fragment({chunk}, DType::i32, "first_index");
    Buffer cm = alloc_fragment({1}, DType::f32, "chunk_max");
    Buffer ci = alloc_fragment({1}, DType::i32, "chunk_argmax");
    Buffer cs = alloc_fragment({1}, DType::f32, "chunk_sum");
    Buffer mx = alloc_fragment({1}, DType::f32, "max");
    Buffer best = alloc_fragment({1}, DType::i32, "argmax");
    Buffer sum = alloc_fragment({1}, DType::f32, "sum");
    Buffer pf = alloc_fragment({chunk}, DType::f32, "p");
    fill(mx, -INFINITY);
    fill(sum, 0.0);
    fill(best, 0);
    pipelined(ceil_div(v, chunk), 3, [&](Expr kt) {
      copy(logits.tile({row, kt * chunk}, {drop, chunk}), xs);
      parallel(chunk, [&](Expr j) {
        f(j) = select(kt * chunk + j < v, cast(xs(j), DType::f32), Expr(-INFINITY));
      });
      reduce_max(f, cm, 0);
      parallel(chunk, [&](Expr j) {
        ix(j) = select(f(j) == cm(0), cast(kt * chunk + j, DType::i32), cast(v, DType::i32));
      });
      reduce_min(ix, ci, 0);
      parallel(1, [&](Expr z) {
        Expr next = max(mx(0), cm(0));
        best(z) = select(cm(0) > mx(0), ci(0), best(0));
        sum(z) = sum(0) * exp(mx(0) - next);
        mx(z) = next;
      });
      parallel(chunk, [&](Expr j) { f(j) = exp(f(j) - mx(0)); });
      reduce_sum(f, cs, 0);
      parallel(1, [&](Expr z) { sum(z) = sum(0) + cs(0); });
    });
    pipelined(ceil_div(v, chunk), 3, [&](Expr kt) {
      copy(logits.tile({row, kt * chunk}, {drop, chunk}), xs2);
      copy(xs2, pf); // in place: see rmsNormResidual
      parallel(chunk, [&](Expr j) { pf(j) = exp(pf(j) - mx(0)) / sum(0); });
      copy(pf, probs.tile({row, kt * chunk}, {drop, chunk}));
    });
    Buffer topOut = top.tile({row}, {1}), topProbOut = topProb.tile({row}, {1});
    parallel(1, [&](Expr z) {
      topOut(z) = best(0);
      topProbOut(z) = Expr(1.0) / sum(0);
    });
  });
  return p;
}

} // namespace tessel::test

#endif
