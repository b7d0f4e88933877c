//===- OutsideInferenceKernels.h - inference kernels of an outside user -*- C++ -*-===//
//
// A third round of kernels written from the README and the public headers
// only, as a new user writes them for inference: a FlashAttention-style
// forward with a sliding-window causal mask, logit soft-capping (Gemma 2's)
// and grouped key heads, and GEMMs with the epilogues a transformer's MLP
// fuses: SwiGLU over two accumulators or over one merged gate/up weight,
// bias + GELU(tanh), and split-K partial tiles added into an f32 output
// with region atomics. None of the extents need be multiples of the tiles.
// tests/unit/OutsideInferenceKernelTests.cpp compiles them for every target
// and tests/gpu/OutsideInferenceKernelGpuTests.cpp runs them against
// float64 references.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TESTS_OUTSIDEINFERENCEKERNELS_H
#define TESSEL_TESTS_OUTSIDEINFERENCEKERNELS_H

#include "tessel/dsl/Program.h"

#include <cmath>
#include <string>

namespace tessel::test {

/// GELU with the tanh approximation (PyTorch's approximate="tanh").
inline Expr geluTanh(Expr x) {
  Expr inner = (x + x * x * x * 0.044715) * 0.7978845608028654; // sqrt(2 / pi)
  return x * 0.5 * (Expr(1.0) + tanh(inner));
}

/// SiLU, x sigmoid(x).
inline Expr silu(Expr x) { return x / (Expr(1.0) + exp(-x)); }

/// How the sliding-window attention forward is tiled and scheduled.
struct WindowAttentionConfig {
  int64_t headDim = 128;
  /// Query rows a block, keys a step.
  int64_t rows = 128, keys = 64;
  int threads = 256;
  int stages = 2;
  /// Mask only the key blocks that need it (an if_ on the block's place):
  /// a block wholly inside every row's window, and inside S, skips the
  /// mask's compares and selects.
  bool maskEdgesOnly = false;
  /// PipelineOptions::pingpong (sm_90a, two consumer warpgroups).
  bool pingpong = false;
};

/// log2(e): the scores are kept in base 2 so that the softmax is exp2.
inline constexpr double kLog2e = 1.4426950408889634;

/// Sliding-window causal attention forward with logit soft-capping, over
/// BSHD tensors q [B, S, H, D] and k, v [B, S, HKV, D] bf16 (grouped
/// query heads: query head h reads key head h / (H / HKV)): query i
/// attends to keys j with i - W < j <= i, its scores s = cap tanh(scale
/// q k^T / cap), and
///   o = bf16(softmax(s) v),  lse[b, h, i] = logsumexp_j s  (f32).
/// W (the window, >= 1) and the sequence length are launch symbols; scale
/// and cap f32 scalars. A block takes `rows` queries of one (head, batch)
/// and walks only the key blocks that its window reaches, `keys` a step, in
/// a pipelined loop: the online softmax (running maximum and sum in base
/// 2, the accumulator rescaled each step), P handed to P V in registers.
/// A row whose keys in a block are all masked keeps its maximum (-inf until
/// it meets a key, with 0 subtracted instead so that exp2 gives 0, not
/// NaN). S need not be a multiple of the tiles: keys past S are masked and
/// rows past S dropped by the store.
inline Program windowSoftcapAttention(const WindowAttentionConfig &c) {
  Program p("outside_window_softcap_attention_d" + std::to_string(c.headDim) + "_r" +
            std::to_string(c.rows) + "x" + std::to_string(c.keys) + "_t" + std::to_string(c.threads) +
            "_s" + std::to_string(c.stages) + (c.maskEdgesOnly ? "_edges" : "") +
            (c.pingpong ? "_pingpong" : ""));
  Expr b = p.sym("B"), s = p.sym("S"), h = p.sym("H"), hkv = p.sym("HKV"), window = p.sym("W");
  Expr scale = p.scalar("scale", DType::f32), cap = p.scalar("cap", DType::f32);
  int64_t d = c.headDim, bm = c.rows, bn = c.keys;
  Tensor q = p.tensor("q", {b, s, h, d}, DType::bf16);
  Tensor k = p.tensor("k", {b, s, hkv, d}, DType::bf16);
  Tensor v = p.tensor("v", {b, s, hkv, d}, DType::bf16);
  Tensor o = p.tensor("o", {b, s, h, d}, DType::bf16);
  Tensor lse = p.tensor("lse", {b, h, s}, DType::f32);
  p.kernel({ceil_div(s, bm), h, b}, c.threads, [&](Expr bx, Expr hh, Expr bb) {
    Expr m0 = bx * bm, kvHead = hh / (h / hkv);
    Buffer qs = alloc_shared({bm, d}, DType::bf16, "q");
    Buffer ks = alloc_shared({bn, d}, DType::bf16, "k");
    Buffer vs = alloc_shared({bn, d}, DType::bf16, "v");
    Buffer sc = alloc_fragment({bm, bn}, DType::f32, "scores");
    Buffer pr = alloc_fragment({bm, bn}, DType::bf16, "p");
    Buffer acc = alloc_fragment({bm, d}, DType::f32, "o_acc");
    Buffer mx = alloc_fragment({bm}, DType::f32, "row_max");
    Buffer bmax = alloc_fragment({bm}, DType::f32, "block_max");
    Buffer base = alloc_fragment({bm}, DType::f32, "exp_base");
    Buffer alpha = alloc_fragment({bm}, DType::f32, "rescale");
    Buffer sum = alloc_fragment({bm}, DType::f32, "row_sum");
    Buffer bsum = alloc_fragment({bm}, DType::f32, "block_sum");
    copy(q.tile({bb, m0, hh, 0}, {drop, bm, drop, d}), qs);
    fill(acc, 0.0);
    fill(mx, -INFINITY);
    fill(sum, 0.0);
    // The key blocks that hold a key of some row of this block: from the
    // first row's oldest key to the last row's own (or S - 1).
    Expr first = max(m0 - window + 1, Expr(0)) / bn;
    Expr last = (min(m0 + bm, s) - 1) / bn;
    // One division for the whole kernel, not one per score.
    Expr inverseCap = Expr(1.0) / cap, scaleOverCap = scale * inverseCap;
    PipelineOptions options;
    options.pingpong = c.pingpong;
    pipelined(last - first + 1, c.stages, options, [&](Expr it) {
      Expr n0 = (first + it) * bn;
      copy(k.tile({bb, n0, kvHead, 0}, {drop, bn, drop, d}), ks);
      copy(v.tile({bb, n0, kvHead, 0}, {drop, bn, drop, d}), vs);
      gemm(qs, ks, sc, {.transpose_b = true, .clear_accum = true});
      // tanh from exp (1 - 2 / (e^2x + 1), exactly +-1 once e^2x saturates):
      // CUDA's tanhf needs registers the d128 ping-pong build on sm_100a
      // does not have (8 bytes spilled), and the scores' absolute error is
      // what soft-capping needs.
      auto capped = [&](Expr i, Expr j) {
        Expr x = sc(i, j) * scaleOverCap;
        return cap * (Expr(1.0) - Expr(2.0) / (exp(x * 2.0) + Expr(1.0))) * kLog2e;
      };
      auto masked = [&] {
        parallel(bm, bn, [&](Expr i, Expr j) {
          Expr row = m0 + i, col = n0 + j;
          Expr inside = col <= row && col + window > row && col < s;
          sc(i, j) = select(inside, capped(i, j), Expr(-INFINITY));
        });
      };
      if (c.maskEdgesOnly) {
        // Inside every row's window: the block's last key is at most the
        // first row, its first key within the last row's window.
        Expr whole = n0 + bn <= m0 + 1 && n0 + window > m0 + bm - 1 && n0 + bn <= s;
        if_(whole, [&] { parallel(bm, bn, [&](Expr i, Expr j) { sc(i, j) = capped(i, j); }); }, masked);
      } else {
        masked();
      }
      reduce_max(sc, bmax, 1);
      parallel(bm, [&](Expr i) {
        Expr next = max(mx(i), bmax(i));
        Expr safe = select(next == Expr(-INFINITY), Expr(0.0), next);
        alpha(i) = exp2(mx(i) - safe);
        base(i) = safe;
        mx(i) = next;
      });
      parallel(bm, bn, [&](Expr i, Expr j) {
        Expr e = exp2(sc(i, j) - base(i));
        sc(i, j) = e;
        pr(i, j) = cast(e, DType::bf16);
      });
      reduce_sum(sc, bsum, 1);
      parallel(bm, [&](Expr i) { sum(i) = sum(i) * alpha(i) + bsum(i); });
      parallel(bm, d, [&](Expr i, Expr j) { acc(i, j) = acc(i, j) * alpha(i); });
      gemm(pr, vs, acc);
    });
    Buffer out = alloc_fragment({bm, d}, DType::bf16, "o");
    Buffer lseOut = alloc_fragment({bm}, DType::f32, "lse");
    parallel(bm, d, [&](Expr i, Expr j) { out(i, j) = cast(acc(i, j) / sum(i), DType::bf16); });
    parallel(bm, [&](Expr i) { lseOut(i) = mx(i) / kLog2e + log(sum(i)); });
    copy(out, o.tile({bb, m0, hh, 0}, {drop, bm, drop, d}));
    copy(lseOut, lse.tile({bb, hh, m0}, {drop, drop, bm}));
  });
  return p;
}

/// How the GEMMs below are tiled: C's `rows` x `cols` a block, `depth` of K
/// a step of a pipelined loop of `stages`.
struct GemmTiles {
  int64_t rows = 128, cols = 128, depth = 64;
  int threads = 256;
  int stages = 3;
};

inline std::string tilesName(const GemmTiles &t) {
  return std::to_string(t.rows) + "x" + std::to_string(t.cols) + "x" + std::to_string(t.depth) + "_t" +
         std::to_string(t.threads) + "_s" + std::to_string(t.stages);
}

/// The gated MLP's first half (LLaMA's SwiGLU): for x [M, K] and the gate
/// and up projections wg, wu [N, K] (nn.Linear's layout, K-major) in bf16,
///   out = bf16(silu(x wg^T) * (x wu^T))   [M, N]
/// with both products in f32 accumulators of one block, fed from the same
/// staged x tile. M, N and K need not be multiples of the tiles (the
/// windows read zeros past them; the store drops what lies outside).
inline Program swigluGemm(const GemmTiles &t) {
  Program p("outside_swiglu_gemm_" + tilesName(t));
  Expr m = p.sym("M"), n = p.sym("N"), kk = p.sym("K");
  Tensor x = p.tensor("x", {m, kk}, DType::bf16);
  Tensor wg = p.tensor("w_gate", {n, kk}, DType::bf16);
  Tensor wu = p.tensor("w_up", {n, kk}, DType::bf16);
  Tensor out = p.tensor("out", {m, n}, DType::bf16);
  p.kernel({ceil_div(n, t.cols), ceil_div(m, t.rows)}, t.threads, [&](Expr bx, Expr by) {
    Buffer xs = alloc_shared({t.rows, t.depth}, DType::bf16, "x");
    Buffer gs = alloc_shared({t.cols, t.depth}, DType::bf16, "w_gate");
    Buffer us = alloc_shared({t.cols, t.depth}, DType::bf16, "w_up");
    Buffer gate = alloc_fragment({t.rows, t.cols}, DType::f32, "gate");
    Buffer up = alloc_fragment({t.rows, t.cols}, DType::f32, "up");
    clear(gate);
    clear(up);
    pipelined(ceil_div(kk, t.depth), t.stages, [&](Expr kt) {
      copy(x.tile({by * t.rows, kt * t.depth}, {t.rows, t.depth}), xs);
      copy(wg.tile({bx * t.cols, kt * t.depth}, {t.cols, t.depth}), gs);
      copy(wu.tile({bx * t.cols, kt * t.depth}, {t.cols, t.depth}), us);
      gemm(xs, gs, gate, {.transpose_b = true});
      gemm(xs, us, up, {.transpose_b = true});
    });
    Buffer res = alloc_fragment({t.rows, t.cols}, DType::bf16, "out");
    parallel(t.rows, t.cols, [&](Expr i, Expr j) {
      res(i, j) = cast(silu(gate(i, j)) * up(i, j), DType::bf16);
    });
    copy(res, out.tile({by * t.rows, bx * t.cols}, {t.rows, t.cols}));
  });
  return p;
}

/// SwiGLU over a merged gate/up weight, as serving engines store it
/// (vLLM's gate_up_proj): w [2N, K] bf16, the gate's rows first, then the
/// up projection's. A block's [2 cols, depth] weight tile is filled by two
/// copies into its halves, one gemm writes a [rows, 2 cols] accumulator,
/// and the epilogue reads its halves through windows (indexing the
/// accumulator at j + cols directly is refused: see the tests).
inline Program swigluMergedGemm(const GemmTiles &t) {
  Program p("outside_swiglu_merged_gemm_" + tilesName(t));
  Expr m = p.sym("M"), n = p.sym("N"), kk = p.sym("K");
  Tensor x = p.tensor("x", {m, kk}, DType::bf16);
  Tensor w = p.tensor("w_gate_up", {n * 2, kk}, DType::bf16);
  Tensor out = p.tensor("out", {m, n}, DType::bf16);
  p.kernel({ceil_div(n, t.cols), ceil_div(m, t.rows)}, t.threads, [&](Expr bx, Expr by) {
    Buffer xs = alloc_shared({t.rows, t.depth}, DType::bf16, "x");
    Buffer ws = alloc_shared({2 * t.cols, t.depth}, DType::bf16, "w_gate_up");
    Buffer acc = alloc_fragment({t.rows, 2 * t.cols}, DType::f32, "gate_up");
    clear(acc);
    pipelined(ceil_div(kk, t.depth), t.stages, [&](Expr kt) {
      copy(x.tile({by * t.rows, kt * t.depth}, {t.rows, t.depth}), xs);
      // Gate rows past N would read the up projection's first rows: their
      // columns are dropped by the store.
      copy(w.tile({bx * t.cols, kt * t.depth}, {t.cols, t.depth}), ws.tile({0, 0}, {t.cols, t.depth}));
      copy(w.tile({n + bx * t.cols, kt * t.depth}, {t.cols, t.depth}),
           ws.tile({t.cols, 0}, {t.cols, t.depth}));
      gemm(xs, ws, acc, {.transpose_b = true});
    });
    Buffer gate = acc.tile({0, 0}, {t.rows, t.cols}), up = acc.tile({0, t.cols}, {t.rows, t.cols});
    Buffer res = alloc_fragment({t.rows, t.cols}, DType::bf16, "out");
    parallel(t.rows, t.cols, [&](Expr i, Expr j) {
      res(i, j) = cast(silu(gate(i, j)) * up(i, j), DType::bf16);
    });
    copy(res, out.tile({by * t.rows, bx * t.cols}, {t.rows, t.cols}));
  });
  return p;
}

/// A linear layer with bias and GELU(tanh): for x [M, K] bf16, a weight
/// stored [K, N] (row-major, N-major for the tensor cores: the compiler
/// stages it as it is) and bias [N] f32,
///   y = bf16(gelu_tanh(x w + bias))   [M, N]
/// M, N and K need not be multiples of the tiles.
inline Program biasGeluGemm(const GemmTiles &t) {
  Program p("outside_bias_gelu_gemm_" + tilesName(t));
  Expr m = p.sym("M"), n = p.sym("N"), kk = p.sym("K");
  Tensor x = p.tensor("x", {m, kk}, DType::bf16);
  Tensor w = p.tensor("w", {kk, n}, DType::bf16);
  Tensor bias = p.tensor("bias", {n}, DType::f32);
  Tensor y = p.tensor("y", {m, n}, DType::bf16);
  p.kernel({ceil_div(n, t.cols), ceil_div(m, t.rows)}, t.threads, [&](Expr bx, Expr by) {
    Buffer xs = alloc_shared({t.rows, t.depth}, DType::bf16, "x");
    Buffer ws = alloc_shared({t.depth, t.cols}, DType::bf16, "w");
    Buffer acc = alloc_fragment({t.rows, t.cols}, DType::f32, "acc");
    Buffer bs = alloc_fragment({t.cols}, DType::f32, "bias");
    clear(acc);
    pipelined(ceil_div(kk, t.depth), t.stages, [&](Expr kt) {
      copy(x.tile({by * t.rows, kt * t.depth}, {t.rows, t.depth}), xs);
      copy(w.tile({kt * t.depth, bx * t.cols}, {t.depth, t.cols}), ws);
      gemm(xs, ws, acc);
    });
    copy(bias.tile({bx * t.cols}, {t.cols}), bs);
    Buffer res = alloc_fragment({t.rows, t.cols}, DType::bf16, "y");
    parallel(t.rows, t.cols, [&](Expr i, Expr j) {
      res(i, j) = cast(geluTanh(acc(i, j) + bs(j)), DType::bf16);
    });
    copy(res, y.tile({by * t.rows, bx * t.cols}, {t.rows, t.cols}));
  });
  return p;
}

/// Split-K: out += x w^T for x [M, K] and w [N, K] bf16 into out [M, N]
/// f32 (zero before launch). The grid's third dimension is the launch
/// symbol SPLITS; slice z walks its share of K's steps in a pipelined loop
/// (a slice past K's end walks none and adds zeros) and adds its partial
/// tile into out with one region atomic_add: from the registers, or with
/// `throughShared` staged in a shared tile and added by TMA
/// (AtomicPath::tma; the threads' atomics on sm_80). `overlapMma` keeps
/// each step's wgmmas running into the next (PipelineOptions). M, N and K
/// need not be multiples of the tiles; the window drops the adds outside
/// out.
inline Program splitKGemm(const GemmTiles &t, bool throughShared, bool overlapMma = false) {
  Program p("outside_splitk_gemm_" + tilesName(t) + (throughShared ? "_tma_add" : "_reg_add") +
            (overlapMma ? "_overlap" : ""));
  Expr m = p.sym("M"), n = p.sym("N"), kk = p.sym("K"), splits = p.sym("SPLITS");
  Tensor x = p.tensor("x", {m, kk}, DType::bf16);
  Tensor w = p.tensor("w", {n, kk}, DType::bf16);
  Tensor out = p.tensor("out", {m, n}, DType::f32);
  p.kernel({ceil_div(n, t.cols), ceil_div(m, t.rows), splits}, t.threads, [&](Expr bx, Expr by, Expr z) {
    Expr steps = ceil_div(kk, t.depth);
    Expr share = ceil_div(steps, splits);
    Expr begin = min(z * share, steps), end = min(begin + share, steps);
    Buffer xs = alloc_shared({t.rows, t.depth}, DType::bf16, "x");
    Buffer ws = alloc_shared({t.cols, t.depth}, DType::bf16, "w");
    Buffer acc = alloc_fragment({t.rows, t.cols}, DType::f32, "partial");
    clear(acc);
    // overlap_mma: the mainloop is a plain gemm, the form it takes (sm_90a;
    // ignored elsewhere).
    pipelined(end - begin, t.stages, {.overlap_mma = overlapMma}, [&](Expr it) {
      Expr k0 = (begin + it) * t.depth;
      copy(x.tile({by * t.rows, k0}, {t.rows, t.depth}), xs);
      copy(w.tile({bx * t.cols, k0}, {t.cols, t.depth}), ws);
      gemm(xs, ws, acc, {.transpose_b = true});
    });
    Buffer dst = out.tile({by * t.rows, bx * t.cols}, {t.rows, t.cols});
    if (throughShared) {
      Buffer staged = alloc_shared({t.rows, t.cols}, DType::f32, "partial_staged");
      copy(acc, staged);
      atomic_add(dst, staged, MemoryOrder::relaxed, AtomicPath::tma);
    } else {
      atomic_add(dst, acc);
    }
  });
  return p;
}

} // namespace tessel::test

#endif
