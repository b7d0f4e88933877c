//===- OutsideTrainingKernels.h - training-step kernels of an outside user -*- C++ -*-===//
//
// A second round of kernels written from the README and the public headers
// only, as a new user writes them: the pieces of a training step and of
// decoding that the library does not have. LayerNorm's backward (dx per
// row, dgamma and dbeta added across row blocks with region atomics), a
// cross-entropy forward and backward fused over a vocabulary, a histogram
// through shared-memory atomics, transposes through a shared tile, Mamba's
// causal depthwise conv1d with SiLU, a split-K decode GEMV (bf16 and int8
// weights) and an MoE router's softmax + top-k.
// tests/unit/OutsideTrainingKernelTests.cpp compiles them for every target
// and tests/gpu/OutsideTrainingKernelGpuTests.cpp runs them against float64
// references.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TESTS_OUTSIDETRAININGKERNELS_H
#define TESSEL_TESTS_OUTSIDETRAININGKERNELS_H

#include "tessel/dsl/Program.h"

#include <cmath>
#include <string>

namespace tessel::test {

/// LayerNorm backward. Inputs x [M, H] bf16, gamma [H] bf16, the forward's
/// mean and rstd [M] f32, dy [M, H] bf16. With xhat = (x - mean) rstd and
/// g = gamma dy, per row:
///   dx = bf16(rstd (g - mean_j(g) - xhat mean_j(g xhat)))
/// and per column, over all rows:
///   dgamma = sum_i dy xhat,  dbeta = sum_i dy   (f32, zero before launch)
/// `rows` rows a block. A first pipelined pass over `chunk`-wide column
/// chunks sums g and g xhat per row and adds the block's column sums of dy
/// xhat and dy into dgamma and dbeta with region atomic_adds; a second pass
/// writes dx. Rows past M read 0 (their mean and rstd too), so they add
/// nothing; H need not be a multiple of `chunk`.
inline Program layerNormBackward(int64_t rows, int64_t chunk, int threads, int stages) {
  Program p("outside_layernorm_bwd_" + std::to_string(rows) + "x" + std::to_string(chunk) + "_t" +
            std::to_string(threads) + "_s" + std::to_string(stages));
  Expr m = p.sym("M"), h = p.sym("H");
  Tensor x = p.tensor("x", {m, h}, DType::bf16);
  Tensor gamma = p.tensor("gamma", {h}, DType::bf16);
  Tensor mean = p.tensor("mean", {m}, DType::f32);
  Tensor rstd = p.tensor("rstd", {m}, DType::f32);
  Tensor dy = p.tensor("dy", {m, h}, DType::bf16);
  Tensor dx = p.tensor("dx", {m, h}, DType::bf16);
  Tensor dgamma = p.tensor("dgamma", {h}, DType::f32);
  Tensor dbeta = p.tensor("dbeta", {h}, DType::f32);
  p.kernel({ceil_div(m, rows)}, threads, [&](Expr bx) {
    Buffer xs = alloc_shared({rows, chunk}, DType::bf16, "x");
    Buffer dys = alloc_shared({rows, chunk}, DType::bf16, "dy");
    Buffer gs = alloc_shared({chunk}, DType::bf16, "gamma");
    Buffer mu = alloc_fragment({rows}, DType::f32, "mean");
    Buffer rs = alloc_fragment({rows}, DType::f32, "rstd");
    copy(mean.tile({bx * rows}, {rows}), mu);
    copy(rstd.tile({bx * rows}, {rows}), rs);
    Buffer g = alloc_fragment({rows, chunk}, DType::f32, "g");
    Buffer gx = alloc_fragment({rows, chunk}, DType::f32, "g_xhat");
    Buffer dyx = alloc_fragment({rows, chunk}, DType::f32, "dy_xhat");
    Buffer dyf = alloc_fragment({rows, chunk}, DType::f32, "dy_f32");
    Buffer sumG = alloc_fragment({rows}, DType::f32, "sum_g");
    Buffer sumGx = alloc_fragment({rows}, DType::f32, "sum_g_xhat");
    Buffer colGamma = alloc_fragment({chunk}, DType::f32, "col_dgamma");
    Buffer colBeta = alloc_fragment({chunk}, DType::f32, "col_dbeta");
    fill(sumG, 0.0);
    fill(sumGx, 0.0);
    pipelined(ceil_div(h, chunk), stages, [&](Expr kt) {
      copy(x.tile({bx * rows, kt * chunk}, {rows, chunk}), xs);
      copy(dy.tile({bx * rows, kt * chunk}, {rows, chunk}), dys);
      copy(gamma.tile({kt * chunk}, {chunk}), gs);
      parallel(rows, chunk, [&](Expr i, Expr j) {
        Expr xhat = (cast(xs(i, j), DType::f32) - mu(i)) * rs(i);
        Expr d = cast(dys(i, j), DType::f32);
        Expr gd = cast(gs(j), DType::f32) * d;
        g(i, j) = gd;
        gx(i, j) = gd * xhat;
        dyx(i, j) = d * xhat;
        dyf(i, j) = d;
      });
      reduce_sum(g, sumG, 1, /*clear=*/false);
      reduce_sum(gx, sumGx, 1, /*clear=*/false);
      reduce_sum(dyx, colGamma, 0);
      reduce_sum(dyf, colBeta, 0);
      // Columns past H are dropped by the window.
      atomic_add(dgamma.tile({kt * chunk}, {chunk}), colGamma);
      atomic_add(dbeta.tile({kt * chunk}, {chunk}), colBeta);
    });
    Buffer meanG = alloc_fragment({rows}, DType::f32, "mean_g");
    Buffer meanGx = alloc_fragment({rows}, DType::f32, "mean_g_xhat");
    parallel(rows, [&](Expr i) {
      meanG(i) = sumG(i) / cast(h, DType::f32);
      meanGx(i) = sumGx(i) / cast(h, DType::f32);
    });
    Buffer dxf = alloc_fragment({rows, chunk}, DType::bf16, "dx");
    // The second pass stages through the first pass's buffers (each loop
    // rewrites them before reading them). This once failed
    // tessel-verify-sync ("missing barrier: 'x' is read at ... and written
    // here by other threads") while the compiler was being changed beside
    // this work; crossEntropyFwdBwd keeps buffers of its own.
    pipelined(ceil_div(h, chunk), stages, [&](Expr kt) {
      copy(x.tile({bx * rows, kt * chunk}, {rows, chunk}), xs);
      copy(dy.tile({bx * rows, kt * chunk}, {rows, chunk}), dys);
      copy(gamma.tile({kt * chunk}, {chunk}), gs);
      parallel(rows, chunk, [&](Expr i, Expr j) {
        Expr xhat = (cast(xs(i, j), DType::f32) - mu(i)) * rs(i);
        Expr gd = cast(gs(j), DType::f32) * cast(dys(i, j), DType::f32);
        dxf(i, j) = cast(rs(i) * (gd - meanG(i) - xhat * meanGx(i)), DType::bf16);
      });
      copy(dxf, dx.tile({bx * rows, kt * chunk}, {rows, chunk}));
    });
  });
  return p;
}

/// The label that marks a position without a loss (PyTorch's ignore_index).
inline constexpr int kIgnoreIndex = -100;

/// Cross-entropy forward and backward fused over a vocabulary, a block per
/// row: logits [M, V] bf16, labels [M] i32. loss[r] = logsumexp(logits[r])
/// - logits[r, label] (f32), dlogits[r, :] = bf16(softmax(logits[r]) -
/// onehot(label)); a row whose label is kIgnoreIndex gets loss 0 and
/// dlogits 0. The first pipelined pass over `chunk`-wide column chunks
/// keeps the running maximum and the rescaled sum of exponentials (online
/// softmax); the second writes dlogits. V need not be a multiple of
/// `chunk`.
inline Program crossEntropyFwdBwd(int64_t chunk, int threads, int stages) {
  Program p("outside_cross_entropy_" + std::to_string(chunk) + "_t" + std::to_string(threads) +
            "_s" + std::to_string(stages));
  Expr m = p.sym("M"), v = p.sym("V");
  Tensor logits = p.tensor("logits", {m, v}, DType::bf16);
  Tensor labels = p.tensor("labels", {m}, DType::i32);
  Tensor loss = p.tensor("loss", {m}, DType::f32);
  Tensor dlogits = p.tensor("dlogits", {m, v}, DType::bf16);
  p.kernel({m}, threads, [&](Expr row) {
    Buffer xs = alloc_shared({chunk}, DType::bf16, "logits");
    Buffer f = alloc_fragment({chunk}, DType::f32, "f");
    Buffer cm = alloc_fragment({1}, DType::f32, "chunk_max");
    Buffer cs = alloc_fragment({1}, DType::f32, "chunk_sum");
    Buffer mx = alloc_fragment({1}, DType::f32, "max");
    Buffer sum = alloc_fragment({1}, DType::f32, "sum");
    Buffer df = alloc_fragment({chunk}, DType::bf16, "dlogits");
    fill(mx, -INFINITY);
    fill(sum, 0.0);
    pipelined(ceil_div(v, chunk), stages, [&](Expr kt) {
      copy(logits.tile({row, kt * chunk}, {drop, chunk}), xs);
      parallel(chunk, [&](Expr j) {
        f(j) = select(kt * chunk + j < v, cast(xs(j), DType::f32), Expr(-INFINITY));
      });
      reduce_max(f, cm, 0);
      parallel(1, [&](Expr z) {
        Expr next = max(mx(0), cm(0));
        sum(z) = sum(0) * exp(mx(0) - next);
        mx(z) = next;
      });
      parallel(chunk, [&](Expr j) { f(j) = exp(f(j) - mx(0)); });
      reduce_sum(f, cs, 0);
      parallel(1, [&](Expr z) { sum(z) = sum(0) + cs(0); });
    });
    Expr label = labels(row);
    Expr valid = label != Expr(kIgnoreIndex);
    // An ignored label (-100) indexes before the row: the read gives 0.
    Expr target = cast(logits(row, cast(label, DType::index)), DType::f32);
    Buffer xs2 = alloc_shared({chunk}, DType::bf16, "logits_again"); // its own (layerNormBackward shares)
    pipelined(ceil_div(v, chunk), stages, [&](Expr kt) {
      copy(logits.tile({row, kt * chunk}, {drop, chunk}), xs2);
      parallel(chunk, [&](Expr j) {
        Expr col = cast(kt * chunk + j, DType::i32);
        Expr prob = exp(cast(xs2(j), DType::f32) - mx(0)) / sum(0);
        Expr grad = prob - select(col == label, Expr(1.0), Expr(0.0));
        df(j) = cast(select(valid, grad, Expr(0.0)), DType::bf16);
      });
      copy(df, dlogits.tile({row, kt * chunk}, {drop, chunk}));
    });
    Buffer lossOut = loss.tile({row}, {1});
    parallel(1, [&](Expr z) {
      lossOut(z) = select(valid, log(sum(0)) + mx(0) - target, Expr(0.0));
    });
  });
  return p;
}

/// Histogram: counts[b] += the number of values[i] == b over i < N, for b in
/// [0, bins); values outside [0, bins) are not counted (the shared
/// histogram's bounds check drops their adds). Each block walks
/// `chunksPerBlock` chunks of `chunk` values in a pipelined loop, counting
/// into a shared histogram with scalar atomics, then adds its nonzero bins
/// into `counts` (i32, zero before launch) with one global atomic a bin.
inline Program histogram(int64_t bins, int64_t chunk, int64_t chunksPerBlock, int threads) {
  Program p("outside_histogram_" + std::to_string(bins) + "_" + std::to_string(chunk) + "x" +
            std::to_string(chunksPerBlock) + "_t" + std::to_string(threads));
  Expr n = p.sym("N");
  Tensor values = p.tensor("values", {n}, DType::i32);
  Tensor counts = p.tensor("counts", {bins}, DType::i32);
  p.kernel({ceil_div(n, chunk * chunksPerBlock)}, threads, [&](Expr bx) {
    Buffer hist = alloc_shared({bins}, DType::i32, "hist");
    Buffer vs = alloc_shared({chunk}, DType::i32, "values");
    fill(hist, 0);
    pipelined(chunksPerBlock, 3, [&](Expr c) {
      Expr base = (bx * chunksPerBlock + c) * chunk;
      copy(values.tile({base}, {chunk}), vs);
      parallel(chunk, [&](Expr i) {
        // Elements past N read 0: they must not count in bin 0.
        atomic_add(hist(cast(vs(i), DType::index)), select(base + i < n, Expr(1), Expr(0)));
      });
    });
    Buffer out = counts.tile({0}, {bins});
    parallel(bins, [&](Expr b) {
      Expr c = hist(b);
      if_(c != Expr(0), [&] { atomic_add(out(b), c); });
    });
  });
  return p;
}

/// y = x^T for x [M, N] bf16 (y [N, M]): a `tile` x `tile` block of x
/// staged in shared memory, read transposed into a fragment and stored
/// whole. M and N need not be multiples of `tile`.
inline Program transpose2d(int64_t tile, int threads, int64_t rowStride = 0) {
  Program p("outside_transpose_" + std::to_string(tile) + "_t" + std::to_string(threads) +
            (rowStride ? "_stride" + std::to_string(rowStride) : std::string()));
  Expr m = p.sym("M"), n = p.sym("N");
  Tensor x = p.tensor("x", {m, n}, DType::bf16);
  Tensor y = p.tensor("y", {n, m}, DType::bf16);
  p.kernel({ceil_div(n, tile), ceil_div(m, tile)}, threads, [&](Expr bx, Expr by) {
    Buffer s = alloc_shared({tile, tile}, DType::bf16, "x_tile");
    if (rowStride) annotate_layout(s, {rowStride, 1});
    Buffer f = alloc_fragment({tile, tile}, DType::bf16, "y_tile");
    copy(x.tile({by * tile, bx * tile}, {tile, tile}), s);
    parallel(tile, tile, [&](Expr i, Expr j) { f(i, j) = s(j, i); });
    copy(f, y.tile({bx * tile, by * tile}, {tile, tile}));
  });
  return p;
}

/// BSHD -> BHSD: y[b, h, s, :] = x[b, s, h, :] for x [B, S, H, D] bf16.
/// A block moves `seqTile` positions of `headTile` heads of one batch
/// through a shared [seqTile, headTile, D] tile into a [headTile, seqTile,
/// D] fragment. S and H need not be multiples of the tiles.
inline Program bshdToBhsd(int64_t d, int64_t seqTile, int64_t headTile, int threads) {
  Program p("outside_bshd_to_bhsd_d" + std::to_string(d) + "_" + std::to_string(seqTile) + "x" +
            std::to_string(headTile) + "_t" + std::to_string(threads));
  Expr b = p.sym("B"), s = p.sym("S"), h = p.sym("H");
  Tensor x = p.tensor("x", {b, s, h, d}, DType::bf16);
  Tensor y = p.tensor("y", {b, h, s, d}, DType::bf16);
  p.kernel({ceil_div(s, seqTile), ceil_div(h, headTile), b}, threads, [&](Expr bs, Expr bh, Expr bb) {
    Buffer sm = alloc_shared({seqTile, headTile, d}, DType::bf16, "bshd");
    Buffer f = alloc_fragment({headTile, seqTile, d}, DType::bf16, "bhsd");
    copy(x.tile({bb, bs * seqTile, bh * headTile, 0}, {drop, seqTile, headTile, d}), sm);
    parallel({headTile, seqTile, d}, [&](std::vector<Expr> i) { f(i[0], i[1], i[2]) = sm(i[1], i[0], i[2]); });
    copy(f, y.tile({bb, bh * headTile, bs * seqTile, 0}, {drop, headTile, seqTile, d}));
  });
  return p;
}

/// Mamba's causal depthwise conv1d with SiLU: for x [B, L, D] bf16, weight
/// [D, 4] f32 and bias [D] f32,
///   y[b, t, d] = bf16(silu(bias[d] + sum_k weight[d, k] x[b, t - 3 + k, d]))
/// with x = 0 before t = 0. A block takes `channels` channels of
/// `steps` x `stepRows` positions of one batch; each step of its pipelined
/// loop loads its rows with the 3-row halo before them (a window that
/// starts before the tensor at t = 0: zeros). L and D need not be multiples
/// of the tiles.
inline Program causalConv1dSilu(int64_t stepRows, int64_t steps, int64_t channels, int threads,
                                int stages) {
  Program p("outside_causal_conv1d_" + std::to_string(stepRows) + "x" + std::to_string(steps) + "_c" +
            std::to_string(channels) + "_t" + std::to_string(threads));
  Expr b = p.sym("B"), l = p.sym("L"), d = p.sym("D");
  Tensor x = p.tensor("x", {b, l, d}, DType::bf16);
  Tensor w = p.tensor("weight", {d, 4}, DType::f32);
  Tensor bias = p.tensor("bias", {d}, DType::f32);
  Tensor y = p.tensor("y", {b, l, d}, DType::bf16);
  p.kernel({ceil_div(d, channels), ceil_div(l, stepRows * steps), b}, threads,
           [&](Expr bc, Expr bl, Expr bb) {
             Buffer ws = alloc_shared({channels, 4}, DType::f32, "weight");
             Buffer bs = alloc_shared({channels}, DType::f32, "bias");
             copy(w.tile({bc * channels, 0}, {channels, 4}), ws);
             copy(bias.tile({bc * channels}, {channels}), bs);
             Buffer halo = alloc_shared({stepRows + 3, channels}, DType::bf16, "x_halo");
             Buffer yf = alloc_fragment({stepRows, channels}, DType::bf16, "y");
             pipelined(steps, stages, [&](Expr st) {
               Expr t0 = (bl * steps + st) * stepRows;
               copy(x.tile({bb, t0 - 3, bc * channels}, {drop, stepRows + 3, channels}), halo);
               parallel(stepRows, channels, [&](Expr i, Expr c) {
                 Expr acc = bs(c);
                 for (int k = 0; k < 4; ++k) acc = acc + ws(c, k) * cast(halo(i + k, c), DType::f32);
                 yf(i, c) = cast(acc / (Expr(1.0) + exp(-acc)), DType::bf16);
               });
               copy(yf, y.tile({bb, t0, bc * channels}, {drop, stepRows, channels}));
             });
           });
  return p;
}

/// Decode GEMV with split-K: y[n] += sum_k W[n, k] x[k] for W [N, K] of
/// `weight` type (bf16, or i8 codes with a per-row f32 scale: y[n] +=
/// scale[n] sum_k W[n, k] x[k]) and x [K] bf16; y [N] f32, zero before
/// launch. A block takes `rows` rows and one of S slices of K (the grid's
/// second dimension, S a launch symbol), walks its slice in a pipelined
/// loop of `chunk`-wide steps and adds its partial sums into y with a region
/// atomic_add. N and K need not be multiples of the tiles.
inline Program gemvSplitK(DType weight, int64_t rows, int64_t chunk, int threads, int stages) {
  Program p(std::string("outside_gemv_splitk_") + name(weight) + "_" + std::to_string(rows) + "x" +
            std::to_string(chunk) + "_t" + std::to_string(threads));
  Expr n = p.sym("N"), k = p.sym("K"), slices = p.sym("S");
  Tensor w = p.tensor("w", {n, k}, weight);
  Tensor x = p.tensor("x", {k}, DType::bf16);
  bool quantized = weight == DType::i8;
  Tensor scale;
  if (quantized) scale = p.tensor("scale", {n}, DType::f32);
  Tensor y = p.tensor("y", {n}, DType::f32);
  p.kernel({ceil_div(n, rows), slices}, threads, [&](Expr bx, Expr slice) {
    Expr steps = ceil_div(ceil_div(k, chunk), slices);
    Buffer ws = alloc_shared({rows, chunk}, weight, "w");
    Buffer xs = alloc_shared({chunk}, DType::bf16, "x");
    Buffer prod = alloc_fragment({rows, chunk}, DType::f32, "products");
    Buffer acc = alloc_fragment({rows}, DType::f32, "acc");
    fill(acc, 0.0);
    pipelined(steps, stages, [&](Expr st) {
      Expr k0 = (slice * steps + st) * chunk;
      copy(w.tile({bx * rows, k0}, {rows, chunk}), ws);
      copy(x.tile({k0}, {chunk}), xs);
      parallel(rows, chunk, [&](Expr i, Expr j) {
        prod(i, j) = cast(ws(i, j), DType::f32) * cast(xs(j), DType::f32);
      });
      reduce_sum(prod, acc, 1, /*clear=*/false);
    });
    if (quantized) {
      Buffer sc = alloc_fragment({rows}, DType::f32, "scale");
      copy(scale.tile({bx * rows}, {rows}), sc);
      parallel(rows, [&](Expr i) { acc(i) = acc(i) * sc(i); });
    }
    atomic_add(y.tile({bx * rows}, {rows}), acc);
  });
  return p;
}

/// MoE router: for logits [T, E] f32 (E = `experts`, a constant), p =
/// softmax(logits[t]); the `topK` largest p (the first index on ties) give
/// idx [T, topK] i32, in descending order, and weights [T, topK] f32 = p /
/// sum of the selected p. `rows` tokens a block over a [rows, pow2 >= E]
/// fragment (columns past E masked to -inf); each of the topK rounds takes
/// the row maximum, its first index (reduce_min over i32 candidates), and
/// masks it out. T need not be a multiple of `rows`.
inline Program moeRouterTopK(int64_t experts, int64_t topK, int64_t rows, int threads) {
  Program p("outside_moe_router_e" + std::to_string(experts) + "_k" + std::to_string(topK) + "_r" +
            std::to_string(rows) + "_t" + std::to_string(threads));
  int64_t width = 1;
  while (width < experts) width *= 2;
  Expr t = p.sym("T");
  Tensor logits = p.tensor("logits", {t, experts}, DType::f32);
  Tensor idx = p.tensor("idx", {t, topK}, DType::i32);
  Tensor weights = p.tensor("weights", {t, topK}, DType::f32);
  p.kernel({ceil_div(t, rows)}, threads, [&](Expr bx) {
    Buffer lf = alloc_fragment({rows, width}, DType::f32, "logits");
    Buffer pf = alloc_fragment({rows, width}, DType::f32, "exp");
    Buffer cand = alloc_fragment({rows, width}, DType::i32, "candidates");
    Buffer mx = alloc_fragment({rows}, DType::f32, "max");
    Buffer sum = alloc_fragment({rows}, DType::f32, "sum");
    Buffer best = alloc_fragment({rows}, DType::f32, "best");
    Buffer sel = alloc_fragment({rows}, DType::i32, "selected");
    Buffer total = alloc_fragment({rows}, DType::f32, "selected_sum");
    Buffer selIdx = alloc_shared({rows, topK}, DType::i32, "sel_idx");
    Buffer selP = alloc_shared({rows, topK}, DType::f32, "sel_p");
    // Staged at the tensor's own width: a [rows, width] window of the [T,
    // 160] tensor is refused when the program is built ("tile [4, 256] does
    // not fit in buffer [?, 160]"), though a window past a symbolic extent
    // reads zeros. Columns past E read the shared tile out of bounds, which
    // gives 0, and are masked to -inf. (A [rows, E] fragment, padded by the
    // compiler, works as well.)
    Buffer ls = alloc_shared({rows, experts}, DType::f32, "logits_staged");
    copy(logits.tile({bx * rows, 0}, {rows, experts}), ls);
    parallel(rows, width, [&](Expr i, Expr j) { lf(i, j) = select(j < experts, ls(i, j), Expr(-INFINITY)); });
    reduce_max(lf, mx, 1);
    parallel(rows, width, [&](Expr i, Expr j) { pf(i, j) = exp(lf(i, j) - mx(i)); });
    reduce_sum(pf, sum, 1);
    fill(total, 0.0);
    for (int64_t r = 0; r < topK; ++r) {
      reduce_max(lf, best, 1);
      parallel(rows, width, [&](Expr i, Expr j) {
        cand(i, j) = select(lf(i, j) == best(i), cast(j, DType::i32), Expr(int(width)));
      });
      reduce_min(cand, sel, 1);
      parallel(rows, [&](Expr i) {
        Expr prob = exp(best(i) - mx(i)) / sum(i);
        selIdx(i, r) = sel(i);
        selP(i, r) = prob;
        total(i) = total(i) + prob;
      });
      parallel(rows, width, [&](Expr i, Expr j) {
        lf(i, j) = select(cast(j, DType::i32) == sel(i), Expr(-INFINITY), lf(i, j));
      });
    }
    Buffer idxOut = idx.tile({bx * rows, 0}, {rows, topK});
    Buffer wOut = weights.tile({bx * rows, 0}, {rows, topK});
    parallel(rows, topK, [&](Expr i, Expr r) {
      idxOut(i, r) = selIdx(i, r);
      wOut(i, r) = selP(i, r) / total(i);
    });
  });
  return p;
}

} // namespace tessel::test

#endif
