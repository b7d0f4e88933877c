//===- OutsideServingKernels.h - serving kernels of an outside user -*- C++ -*-===//
//
// A third round of kernels written from the README and the public headers
// only, as a new user writes them: the memory-bound pieces around a model
// in a serving stack. A row-wise inclusive prefix sum over long rows (f32
// and i32) carried from chunk to chunk, a paged KV-cache append through a
// block table, mean pooling over packed variable-length sequences,
// GroupNorm over NHWC activations with groups of a channel count that is
// not a power of two, an embedding lookup with a position embedding, and
// greedy sampling (temperature, repetition penalty, argmax) over a 50257
// word vocabulary.
// tests/unit/OutsideServingKernelTests.cpp compiles them for every target
// and tests/gpu/OutsideServingKernelGpuTests.cpp runs them against float64
// (or exact integer) references.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TESTS_OUTSIDESERVINGKERNELS_H
#define TESSEL_TESTS_OUTSIDESERVINGKERNELS_H

#include "tessel/dsl/Program.h"

#include <climits>
#include <cmath>
#include <string>
#include <utility>

namespace tessel::test {

/// Row-wise inclusive prefix sum y[r, j] = sum_{i <= j} x[r, i] for x [M, N]
/// of `type` (f32, summed in f32; or i32, exact). A block per row walks the
/// row in chunks of `perThread` x `threads` elements staged by a pipelined
/// loop. Each thread sums its `perThread` consecutive elements with a serial
/// loop that carries the sum, the threads' sums are scanned in shared
/// memory (Hillis-Steele, ping-ponging two buffers: each step reads what
/// the previous one wrote), and each thread then rescans its elements from
/// the running total of the row before the chunk plus the sums of the
/// threads before it. The running total is a [1] fragment that every
/// thread holds, carried across the loop. N need not be a multiple of the
/// chunk: elements past N read 0 and their writes are dropped.
inline Program cumsumRows(DType type, int64_t perThread, int threads, int stages) {
  Program p(std::string("outside_cumsum_") + name(type) + "_" + std::to_string(perThread) + "x" +
            std::to_string(threads) + "_s" + std::to_string(stages));
  int64_t chunk = perThread * threads;
  DType acc = type == DType::i32 ? DType::i32 : DType::f32;
  Expr m = p.sym("M"), n = p.sym("N");
  Tensor x = p.tensor("x", {m, n}, type);
  Tensor y = p.tensor("y", {m, n}, type);
  p.kernel({m}, threads, [&](Expr row) {
    Expr zero = acc == DType::i32 ? cast(Expr(0), DType::i32) : Expr(0.0);
    Buffer xs = alloc_shared({chunk}, type, "x");
    Buffer ys = alloc_shared({chunk}, type, "y");
    Buffer ping = alloc_shared({threads}, acc, "sums_ping");
    Buffer pong = alloc_shared({threads}, acc, "sums_pong");
    Buffer carry = alloc_fragment({1}, acc, "row_total");
    fill(carry, zero);
    pipelined(ceil_div(n, chunk), stages, [&](Expr kt) {
      copy(x.tile({row, kt * chunk}, {drop, chunk}), xs);
      parallel(threads, [&](Expr t) {
        ping(t) = serial(perThread, zero,
                         [&](Expr k, Expr s) { return s + cast(xs(t * perThread + k), acc); });
      });
      Buffer from = ping, to = pong;
      for (int64_t d = 1; d < threads; d *= 2) {
        // `from(t - d)` at t < d indexes before the buffer (read as 0); the
        // select keeps the sum right either way.
        parallel(threads, [&](Expr t) { to(t) = from(t) + select(t >= d, from(t - d), zero); });
        std::swap(from, to);
      }
      Buffer scanned = from;
      parallel(threads, [&](Expr t) {
        Expr base = carry(0) + select(t > 0, scanned(t - 1), zero);
        serial(perThread, base, [&](Expr k, Expr s) {
          Expr next = s + cast(xs(t * perThread + k), acc);
          ys(t * perThread + k) = cast(next, type);
          return next;
        });
      });
      parallel(1, [&](Expr z) { carry(z) = carry(0) + scanned(threads - 1); });
      copy(ys, y.tile({row, kt * chunk}, {drop, chunk}));
    });
  });
  return p;
}

/// Paged KV-cache append (vLLM's reshape_and_cache, with the slot computed
/// on the device): the new rows k, v [T, heads, d] bf16 of a packed batch
/// go into k_cache, v_cache [num_blocks, block_size, heads, d]. Sequence s
/// owns new tokens [cu_new[s], cu_new[s + 1]) (i32, B + 1 entries) and
/// already has context_lens[s] tokens cached, so its i-th new token lands
/// at position p = context_lens[s] + i: cache block block_table[s, p /
/// block_size], row p % block_size. A block per token finds its sequence
/// by counting the cu_new entries at or before it (a serial loop carrying
/// the count). Tokens past cu_new[B] (a batch padded for a CUDA graph), a
/// position past the block table's width and a table entry of -1 (no
/// block) write nothing: the block index becomes -1, before the cache,
/// where a window's writes are dropped. Without the width check the
/// table's read past its row would give 0 and the token would overwrite
/// cache block 0.
inline Program pagedKvAppend(int64_t heads, int64_t headDim, int64_t blockSize, int threads) {
  Program p("outside_paged_kv_append_h" + std::to_string(heads) + "_d" + std::to_string(headDim) +
            "_b" + std::to_string(blockSize) + "_t" + std::to_string(threads));
  Expr t = p.sym("T"), b = p.sym("B"), blocks = p.sym("num_blocks"), width = p.sym("max_blocks");
  Tensor k = p.tensor("k", {t, heads, headDim}, DType::bf16);
  Tensor v = p.tensor("v", {t, heads, headDim}, DType::bf16);
  Tensor kc = p.tensor("k_cache", {blocks, blockSize, heads, headDim}, DType::bf16);
  Tensor vc = p.tensor("v_cache", {blocks, blockSize, heads, headDim}, DType::bf16);
  Tensor table = p.tensor("block_table", {b, width}, DType::i32);
  Tensor cu = p.tensor("cu_new", {b + 1}, DType::i32);
  Tensor context = p.tensor("context_lens", {b}, DType::i32);
  p.kernel({t}, threads, [&](Expr tok) {
    Expr tok32 = cast(tok, DType::i32);
    Expr seq = serial(b, cast(Expr(0), DType::i32),
                      [&](Expr s, Expr count) { return count + cast(cu(s + 1) <= tok32, DType::i32); });
    Expr valid = seq < cast(b, DType::i32);
    Expr s = cast(seq, DType::index);
    Expr pos = context(s) + tok32 - cu(s);
    Expr page = pos / Expr(int(blockSize));
    Expr inTable = valid && page < cast(width, DType::i32);
    Expr block = select(inTable, table(s, cast(page, DType::index)), cast(Expr(-1), DType::i32));
    Expr blk = cast(block, DType::index), slot = cast(pos % Expr(int(blockSize)), DType::index);
    Buffer kf = alloc_fragment({heads, headDim}, DType::bf16, "k_row");
    Buffer vf = alloc_fragment({heads, headDim}, DType::bf16, "v_row");
    copy(k.tile({tok, 0, 0}, {drop, heads, headDim}), kf);
    copy(v.tile({tok, 0, 0}, {drop, heads, headDim}), vf);
    copy(kf, kc.tile({blk, slot, 0, 0}, {drop, drop, heads, headDim}));
    copy(vf, vc.tile({blk, slot, 0, 0}, {drop, drop, heads, headDim}));
  });
  return p;
}

/// Mean pooling over packed variable-length sequences: x [T, D] bf16 holds
/// sequence s in rows [cu_seqlens[s], cu_seqlens[s + 1]) (i32, B + 1
/// entries); out[s, :] = the mean of its rows (f32), 0 for an empty
/// sequence. A block per (`cols` columns, sequence) sums its rows in a
/// pipelined loop over `rows`-row tiles, masking the rows of the next
/// sequence that the last tile reaches into (`bounded`: the tensor seen up
/// to the sequence's end, read as zeros past it; otherwise a select on the
/// row index). D need not be a multiple of `cols`.
inline Program segmentMeanPool(int64_t rows, int64_t cols, int threads, int stages, bool bounded) {
  Program p("outside_segment_mean_" + std::to_string(rows) + "x" + std::to_string(cols) + "_t" +
            std::to_string(threads) + (bounded ? "_bounded" : "_select"));
  Expr t = p.sym("T"), b = p.sym("B"), d = p.sym("D");
  Tensor x = p.tensor("x", {t, d}, DType::bf16);
  Tensor cu = p.tensor("cu_seqlens", {b + 1}, DType::i32);
  Tensor out = p.tensor("out", {b, d}, DType::f32);
  p.kernel({ceil_div(d, cols), b}, threads, [&](Expr bc, Expr seq) {
    Expr start = cast(cu(seq), DType::index), end = cast(cu(seq + 1), DType::index);
    Expr len = end - start;
    Buffer xs = alloc_shared({rows, cols}, DType::bf16, "x");
    Buffer f = alloc_fragment({rows, cols}, DType::f32, "x_f32");
    Buffer sum = alloc_fragment({cols}, DType::f32, "sum");
    fill(sum, 0.0);
    pipelined(ceil_div(len, rows), stages, [&](Expr kt) {
      Expr r0 = start + kt * rows;
      if (bounded) {
        copy(x.bounded({end, d}).tile({r0, bc * cols}, {rows, cols}), xs);
        parallel(rows, cols, [&](Expr i, Expr j) { f(i, j) = cast(xs(i, j), DType::f32); });
      } else {
        copy(x.tile({r0, bc * cols}, {rows, cols}), xs);
        parallel(rows, cols, [&](Expr i, Expr j) {
          f(i, j) = select(r0 + i < end, cast(xs(i, j), DType::f32), Expr(0.0));
        });
      }
      reduce_sum(f, sum, 0, /*clear=*/false);
    });
    Buffer o = out.tile({seq, bc * cols}, {drop, cols});
    parallel(cols, [&](Expr j) { o(j) = sum(j) / cast(max(len, Expr(1)), DType::f32); });
  });
  return p;
}

/// GroupNorm forward over NHWC: x [N, HW, C] bf16 with C = G x
/// `channelsPerGroup` channels (10 or 30: not powers of two), gamma and
/// beta [C] f32; per sample n and group g, over its HW x channelsPerGroup
/// values, mean and var (biased), and
///   y = bf16((x - mean) / sqrt(var + eps) gamma[c] + beta[c]).
/// A block per (`groupsPerBlock` groups, sample) walks HW in `rows`-row
/// tiles three times (pipelined loops staging through one buffer): the
/// sum, the sum of squared deviations from the mean (two passes, which
/// keep the variance accurate where the mean is large), then y. The tile's
/// [rows, groups x channels] columns are viewed as a [rows, groups,
/// channels] fragment, reduced over rows and then channels. HW and G need
/// not be multiples of the tiles; rows past HW are masked out of the
/// deviations (they read 0, which does not change the sum).
inline Program groupNormNhwc(int64_t groupsPerBlock, int64_t channelsPerGroup, int64_t rows,
                             int threads, int stages) {
  Program p("outside_group_norm_g" + std::to_string(groupsPerBlock) + "x" +
            std::to_string(channelsPerGroup) + "_r" + std::to_string(rows) + "_t" +
            std::to_string(threads));
  int64_t cols = groupsPerBlock * channelsPerGroup, cpg = channelsPerGroup, gpb = groupsPerBlock;
  Expr n = p.sym("N"), hw = p.sym("HW"), c = p.sym("C");
  Expr eps = p.scalar("eps", DType::f32);
  Tensor x = p.tensor("x", {n, hw, c}, DType::bf16);
  Tensor gamma = p.tensor("gamma", {c}, DType::f32);
  Tensor beta = p.tensor("beta", {c}, DType::f32);
  Tensor y = p.tensor("y", {n, hw, c}, DType::bf16);
  p.kernel({ceil_div(c, cols), n}, threads, [&](Expr bg, Expr bn) {
    Expr c0 = bg * cols;
    Buffer xs = alloc_shared({rows, cols}, DType::bf16, "x");
    Buffer f = alloc_fragment({rows, gpb, cpg}, DType::f32, "x_grouped");
    Buffer perChannel = alloc_fragment({gpb, cpg}, DType::f32, "per_channel");
    Buffer sum = alloc_fragment({gpb}, DType::f32, "sum");
    Buffer mean = alloc_fragment({gpb}, DType::f32, "mean");
    Buffer rstd = alloc_fragment({gpb}, DType::f32, "rstd");
    Expr count = cast(hw * cpg, DType::f32);
    fill(perChannel, 0.0);
    pipelined(ceil_div(hw, rows), stages, [&](Expr kt) {
      copy(x.tile({bn, kt * rows, c0}, {drop, rows, cols}), xs);
      parallel({rows, gpb, cpg}, [&](std::vector<Expr> i) {
        f(i[0], i[1], i[2]) = cast(xs(i[0], i[1] * cpg + i[2]), DType::f32);
      });
      reduce_sum(f, perChannel, 0, /*clear=*/false);
    });
    reduce_sum(perChannel, sum, 1);
    parallel(gpb, [&](Expr g) { mean(g) = sum(g) / count; });
    fill(perChannel, 0.0);
    pipelined(ceil_div(hw, rows), stages, [&](Expr kt) {
      copy(x.tile({bn, kt * rows, c0}, {drop, rows, cols}), xs);
      parallel({rows, gpb, cpg}, [&](std::vector<Expr> i) {
        Expr dev = cast(xs(i[0], i[1] * cpg + i[2]), DType::f32) - mean(i[1]);
        f(i[0], i[1], i[2]) = select(kt * rows + i[0] < hw, dev * dev, Expr(0.0));
      });
      reduce_sum(f, perChannel, 0, /*clear=*/false);
    });
    reduce_sum(perChannel, sum, 1);
    parallel(gpb, [&](Expr g) { rstd(g) = Expr(1.0) / sqrt(sum(g) / count + eps); });
    Buffer gs = alloc_shared({cols}, DType::f32, "gamma");
    Buffer bs = alloc_shared({cols}, DType::f32, "beta");
    copy(gamma.tile({c0}, {cols}), gs);
    copy(beta.tile({c0}, {cols}), bs);
    Buffer yf = alloc_fragment({rows, gpb, cpg}, DType::bf16, "y");
    Buffer ys = alloc_shared({rows, cols}, DType::bf16, "y_staged");
    pipelined(ceil_div(hw, rows), stages, [&](Expr kt) {
      copy(x.tile({bn, kt * rows, c0}, {drop, rows, cols}), xs);
      parallel({rows, gpb, cpg}, [&](std::vector<Expr> i) {
        Expr ch = i[1] * cpg + i[2];
        Expr xhat = (cast(xs(i[0], ch), DType::f32) - mean(i[1])) * rstd(i[1]);
        yf(i[0], i[1], i[2]) = cast(xhat * gs(ch) + bs(ch), DType::bf16);
      });
      // The fragment's [groups, channels] go back to the tile's columns
      // through a shared tile.
      parallel({rows, gpb, cpg}, [&](std::vector<Expr> i) {
        ys(i[0], i[1] * cpg + i[2]) = yf(i[0], i[1], i[2]);
      });
      copy(ys, y.tile({bn, kt * rows, c0}, {drop, rows, cols}));
    });
  });
  return p;
}

/// Embedding lookup with a learned position embedding (GPT-2's input):
/// out[t, :] = bf16(table[id', :] + pos_table[positions[t], :]) for ids
/// [T] and positions [T] i32, tables [V, D] and [max_pos, D] bf16, where
/// id' = ids[t] if 0 <= ids[t] < V, else the padding row `padding_idx` (a
/// scalar). A block per `tokens` tokens reads their ids once, then walks D
/// in `chunk`-wide steps of a pipelined loop whose copies gather one row
/// of each table per token into the rows of two shared tiles (windows at
/// constant offsets; addresses from the ids). T and D need not be
/// multiples of the tiles.
inline Program embeddingLookup(int64_t tokens, int64_t chunk, int threads, int stages) {
  Program p("outside_embedding_" + std::to_string(tokens) + "x" + std::to_string(chunk) + "_t" +
            std::to_string(threads) + "_s" + std::to_string(stages));
  Expr t = p.sym("T"), v = p.sym("V"), d = p.sym("D"), maxPos = p.sym("max_pos");
  Expr pad = p.scalar("padding_idx", DType::i32);
  Tensor ids = p.tensor("ids", {t}, DType::i32);
  Tensor positions = p.tensor("positions", {t}, DType::i32);
  Tensor table = p.tensor("table", {v, d}, DType::bf16);
  Tensor posTable = p.tensor("pos_table", {maxPos, d}, DType::bf16);
  Tensor out = p.tensor("out", {t, d}, DType::bf16);
  p.kernel({ceil_div(t, tokens)}, threads, [&](Expr bx) {
    std::vector<Expr> row, at;
    for (int64_t i = 0; i < tokens; ++i) {
      Expr id = ids(bx * tokens + i);
      Expr known = id >= cast(Expr(0), DType::i32) && id < cast(v, DType::i32);
      row.push_back(cast(select(known, id, pad), DType::index));
      at.push_back(cast(positions(bx * tokens + i), DType::index));
    }
    Buffer rowsS = alloc_shared({tokens, chunk}, DType::bf16, "rows");
    Buffer posS = alloc_shared({tokens, chunk}, DType::bf16, "pos_rows");
    Buffer o = alloc_fragment({tokens, chunk}, DType::bf16, "out");
    pipelined(ceil_div(d, chunk), stages, [&](Expr kc) {
      for (int64_t i = 0; i < tokens; ++i) {
        copy(table.tile({row[i], kc * chunk}, {drop, chunk}), rowsS.tile({i, 0}, {drop, chunk}));
        copy(posTable.tile({at[i], kc * chunk}, {drop, chunk}), posS.tile({i, 0}, {drop, chunk}));
      }
      parallel(tokens, chunk, [&](Expr i, Expr j) {
        o(i, j) = cast(cast(rowsS(i, j), DType::f32) + cast(posS(i, j), DType::f32), DType::bf16);
      });
      copy(o, out.tile({bx * tokens, kc * chunk}, {tokens, chunk}));
    });
  });
  return p;
}

/// Greedy sampling with a temperature and a repetition penalty (as
/// Hugging Face's RepetitionPenaltyLogitsProcessor): for logits [B, V] f32
/// and the ids each row generated so far, prev [B, L] i32 of which the
/// first prev_lens[b] count (L <= `maxPrev`; ids outside [0, V) are
/// skipped), a logit l of a generated id becomes l / penalty where l > 0
/// and l x penalty otherwise (once, however often the id repeats); the
/// token is the first index of the largest l / temperature, stored with
/// that value. A block per row walks V in `chunk`-wide pipelined steps:
/// each step penalises the generated ids that fall in its chunk in shared
/// memory (an id met twice writes the same value twice, computed from the
/// unmodified logit in global memory), takes the chunk's maximum and its
/// first index (reduce_min over i32 candidates) and keeps the running best
/// in [1] fragments, replaced only by a strictly larger maximum.
inline Program greedySample(int64_t chunk, int64_t maxPrev, int threads, int stages) {
  Program p("outside_greedy_sample_" + std::to_string(chunk) + "_p" + std::to_string(maxPrev) + "_t" +
            std::to_string(threads) + "_s" + std::to_string(stages));
  Expr b = p.sym("B"), v = p.sym("V"), l = p.sym("L");
  Expr temperature = p.scalar("temperature", DType::f32);
  Expr penalty = p.scalar("penalty", DType::f32);
  Tensor logits = p.tensor("logits", {b, v}, DType::f32);
  Tensor prev = p.tensor("prev", {b, l}, DType::i32);
  Tensor prevLens = p.tensor("prev_lens", {b}, DType::i32);
  Tensor token = p.tensor("token", {b}, DType::i32);
  Tensor score = p.tensor("score", {b}, DType::f32);
  p.kernel({b}, threads, [&](Expr row) {
    Buffer ids = alloc_shared({maxPrev}, DType::i32, "prev_ids");
    copy(prev.tile({row, 0}, {drop, maxPrev}), ids);
    Expr used = min(prevLens(row), cast(l, DType::i32));
    Buffer xs = alloc_shared({chunk}, DType::f32, "logits");
    Buffer f = alloc_fragment({chunk}, DType::f32, "scaled");
    Buffer cand = alloc_fragment({chunk}, DType::i32, "candidates");
    Buffer cm = alloc_fragment({1}, DType::f32, "chunk_max");
    Buffer ci = alloc_fragment({1}, DType::i32, "chunk_argmax");
    Buffer best = alloc_fragment({1}, DType::f32, "best");
    Buffer bestIdx = alloc_fragment({1}, DType::i32, "best_index");
    fill(best, -INFINITY);
    fill(bestIdx, 0);
    Expr v32 = cast(v, DType::i32);
    pipelined(ceil_div(v, chunk), stages, [&](Expr kt) {
      Expr c0 = cast(kt * chunk, DType::i32);
      copy(logits.tile({row, kt * chunk}, {drop, chunk}), xs);
      parallel(maxPrev, [&](Expr j) {
        Expr id = ids(j);
        Expr hit = cast(j, DType::i32) < used && id >= c0 && id < c0 + Expr(int(chunk)) && id < v32;
        if_(hit, [&] {
          Expr orig = logits(row, cast(id, DType::index));
          xs(cast(id - c0, DType::index)) = select(orig > Expr(0.0), orig / penalty, orig * penalty);
        });
      });
      parallel(chunk, [&](Expr j) {
        f(j) = select(kt * chunk + j < v, xs(j) / temperature, Expr(-INFINITY));
      });
      reduce_max(f, cm, 0);
      parallel(chunk, [&](Expr j) {
        cand(j) = select(f(j) == cm(0), c0 + cast(j, DType::i32), Expr(INT_MAX));
      });
      reduce_min(cand, ci, 0);
      parallel(1, [&](Expr z) {
        Expr take = cm(0) > best(0);
        bestIdx(z) = select(take, ci(0), bestIdx(0));
        best(z) = select(take, cm(0), best(0));
      });
    });
    Buffer tokenOut = token.tile({row}, {1}), scoreOut = score.tile({row}, {1});
    parallel(1, [&](Expr z) {
      tokenOut(z) = bestIdx(0);
      scoreOut(z) = best(0);
    });
  });
  return p;
}

} // namespace tessel::test

#endif
