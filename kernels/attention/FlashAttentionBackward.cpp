//===- FlashAttentionBackward.cpp - gradients of softmax(Q K^T) V ---------===//
//
// Three kernels, as in FlashAttention-2/3:
//  1. preprocess: delta = rowsum(dO * O), per query row;
//  2. main: one thread block per key/value block and query head walks the
//     query blocks, recomputing P^T = exp(S^T - lse) from S^T = K Q^T (so P^T
//     sits in the accumulator layout and feeds dV += P^T dO from registers),
//     then dS^T = P^T * (dP^T - delta) with dP^T = V dO^T, dK += dS^T Q, and
//     dQ = dS K through shared memory, added into an fp32 dQ accumulator with
//     a region atomic_add (one vector reduction per register pair);
//  3. postprocess: fp32 accumulators to the output type, summing the query
//     heads of a GQA group where the main kernel wrote one slice per head.
//
//===----------------------------------------------------------------------===//
#include "AttentionSequences.h"
#include "tessel/kernels/attention/Attention.h"

#include <fmt/format.h>
#include <functional>
#include <optional>

using namespace tessel;
using namespace tessel::kernels;

namespace {
const double kLog2e = 1.4426950408889634;

/// A [block, dim] tile of a BSHD tensor at (batch b, row, head h); the
/// pre/postprocess kernels see a packed batch as one long sequence.
Buffer rowsOf(const Tensor &t, Expr b, Expr row, Expr h, int64_t block, int64_t dim) {
  return t.tile({b, row, h, 0}, {drop, block, drop, dim});
}
} // namespace

Program tessel::kernels::flashAttentionBackwardPre(const AttentionBackwardConfig &c) {
  Program p("flash_attention_bwd_pre");
  Expr batch = p.sym("batch"), seqQ = p.sym("seqlen_q"), headsQ = p.sym("heads_q");
  const int64_t d = c.headDim, bm = c.preBlock;
  Tensor o = p.tensor("O", {batch, seqQ, headsQ, d}, c.dtype);
  Tensor dO = p.tensor("dO", {batch, seqQ, headsQ, d}, c.dtype);
  Tensor delta = p.tensor("delta", {batch, headsQ, seqQ}, DType::f32);
  p.kernel({ceil_div(seqQ, bm), headsQ, batch}, 128, [&](Expr bx, Expr h, Expr b) {
    Buffer of = alloc_fragment({bm, d}, DType::f32, "o");
    Buffer dof = alloc_fragment({bm, d}, DType::f32, "d_o");
    Buffer sum = alloc_fragment({bm}, DType::f32, "delta");
    copy(rowsOf(o, b, bx * bm, h, bm, d), of);
    copy(rowsOf(dO, b, bx * bm, h, bm, d), dof);
    parallel(bm, d, [&](Expr i, Expr j) { of(i, j) = of(i, j) * dof(i, j); });
    reduce_sum(of, sum, 1);
    copy(sum, delta.tile({b, h, bx * bm}, {drop, drop, bm}));
  });
  return p;
}

namespace {
void checkConfig(const AttentionBackwardConfig &c) {
  // head_dim 256 would need dK and dV accumulators of 256 columns: more
  // registers than a thread has beside the score tiles (and, in tensor
  // memory, more than the 512 columns beside S^T and dP^T).
  if (c.headDim != 64 && c.headDim != 128)
    throw Error(fmt::format("flash attention backward supports head_dim 64 and 128, not {}",
                            c.headDim));
  const bool tmem = c.form != BackwardForm::registers;
  if (c.queryOffset && (!c.causal || c.varlen))
    throw Error("a query offset places causal queries of a fixed-length batch; this backward is "
                "not causal or has packed sequences");
  if (tmem && (c.blockM != 128 || (c.blockN && c.blockN != 128) || c.threads != 256))
    throw Error(fmt::format("the tcgen05 attention backward computes 128 keys by 128 queries a "
                            "step on two warpgroups (block_m 128, block_n 128, 256 threads), not "
                            "block_m {}, block_n {}, {} threads",
                            c.blockM, c.blockN, c.threads));
}

/// The main kernel's parameters, in the order they are declared.
struct BackwardTensors {
  AttentionInputs in;
  Tensor dO, lse, delta, dQacc;
  // dK, dV: the output type per K/V head (direct), fp32 accumulators per
  // K/V head (atomic), or fp32 slices per query head (split).
  bool perQueryHead;
  Tensor dK, dV;
  // Causal, built with a query offset: the key position of query row 0.
  Expr queryOffset;
  // One block per block_n keys of a sequence and query head.
  Batch seqs;

  static BackwardTensors declare(Program &p, const AttentionBackwardConfig &c) {
    const int64_t d = c.headDim;
    AttentionInputs in = AttentionInputs::declare(p, c.dtype, d);
    Tensor dO = p.tensor("dO", {in.batch, in.seqQ, in.headsQ, d}, c.dtype);
    Tensor lse = p.tensor("LSE", {in.batch, in.headsQ, in.seqQ}, DType::f32);
    Tensor delta = p.tensor("delta", {in.batch, in.headsQ, in.seqQ}, DType::f32);
    Tensor dQacc = p.tensor("dQ_accum", {in.batch, in.seqQ, in.headsQ, d}, DType::f32);
    bool perQueryHead = c.kvReduction == KvReduction::split;
    DType kvType = c.kvReduction == KvReduction::direct ? c.dtype : DType::f32;
    Expr kvHeads = perQueryHead ? in.headsQ : in.headsKv;
    Tensor dK = p.tensor("dK", {in.batch, in.seqK, kvHeads, d}, kvType);
    Tensor dV = p.tensor("dV", {in.batch, in.seqK, kvHeads, d}, kvType);
    Expr queryOffset = c.queryOffset ? p.sym("query_offset") : Expr();
    Batch seqs = Batch::declare(p, c.varlen, in.batch, in.seqK, "max_seqlen_k");
    return {in, dO, lse, delta, dQacc, perQueryHead, dK, dV, queryOffset, seqs};
  }
};

/// tcgen05: key row j in tensor-memory lane j. S^T, dP^T, dV and dK take
/// 2 * 128 + 2 * head_dim of the 512 columns; dQ (query rows in the
/// lanes) reuses dP^T's once dP^T is in registers. P^T, the A operand
/// of dV's product, goes into dS^T's shared tile before dS^T does (ss;
/// a tile of its own cost 32 KiB, and ptxas kept the two tiles' common
/// swizzled addresses live between the copies, spilling), or packed
/// over S^T in tensor memory (ts).
struct Tcgen05Buffers {
  Buffer st, dpt, dv, dk, dq, p;
};

/// One thread block of the main kernel: block_n keys of a sequence and a
/// query head, walking the query blocks that see them.
class BackwardBlock {
public:
  BackwardBlock(const AttentionBackwardConfig &c, int64_t blockN, const BackwardTensors &t,
                Expr bx, Expr h, Expr b)
      : c(c), d(c.headDim), bm(c.blockM), bn(blockN), tmem(c.form != BackwardForm::registers),
        byQuery(c.queryRows), sharedDkv(!tmem && (c.dkvOperandsShared || byQuery)), t(t), h(h),
        sq(t.seqs.queries(b, t.in.seqQ)), sk(t.seqs.keys(b, t.in.seqK)),
        kvHead(h / (t.in.headsQ / t.in.headsKv)), col0(bx * bn) {}

  void build() {
    allocate();
    copy(sk.rows(t.in.k, col0, kvHead, bn, d), ks);
    copy(sk.rows(t.in.v, col0, kvHead, bn, d), vs);
    clear(tmem ? acc->dk : dk);
    clear(tmem ? acc->dv : dv);
    // Causal (query row i at key position query_offset + i): query blocks
    // entirely above this key block see none of it. A key block past its
    // (packed) sequence's end runs none.
    Expr first = !c.causal        ? Expr(0)
                 : c.queryOffset ? max(col0 - t.queryOffset, Expr(0)) / bm
                                 : col0 / bm;
    Expr blocks = max(ceil_div(sq.length, bm) - first, Expr(0));
    if (c.varlen) blocks = select(col0 < sk.length, blocks, Expr(0));
    pipelined(blocks, c.stages, {.warp_specialize = c.warpSpecialize},
              [&](Expr mt) { queryBlock((first + mt) * bm); });
    storeDkv();
  }

private:
  void allocate() {
    ks = alloc_shared({bn, d}, c.dtype, "k_tile");
    vs = alloc_shared({bn, d}, c.dtype, "v_tile");
    qs = alloc_shared({bm, d}, c.dtype, "q_tile");
    dos = alloc_shared({bm, d}, c.dtype, "do_tile");
    int64_t vectorLength = sq.alignedVectorLength(bm);
    lses = alloc_shared({vectorLength}, DType::f32, "lse_tile");
    deltas = alloc_shared({vectorLength}, DType::f32, "delta_tile");
    // By query rows, P and dS are [block_m, block_n] tiles (the products
    // that need P^T and dS^T read them transposed); by key rows, P^T and
    // dS^T are [block_n, block_m].
    if (byQuery && tmem)
      throw Error("scores by query rows are the wgmma and mma.sync kernel's (variant=registers)");
    dss = byQuery ? alloc_shared({bm, bn}, c.dtype, "ds_tile")
                  : alloc_shared({bn, bm}, c.dtype, "ds_t_tile");
    dqs = c.dqTma ? alloc_shared({bm, d}, DType::f32, "dq_tile") : Buffer();
    // P^T (and dS^T) as shared operands of dV's (and dK's) products.
    pss = !sharedDkv ? Buffer()
          : byQuery  ? alloc_shared({bm, bn}, c.dtype, "p_tile")
                     : alloc_shared({bn, bm}, c.dtype, "p_t_tile");
    // By key rows: S^T then P^T, dP^T then (in place) dS^T; by query rows
    // S then P, dP then dS.
    st = byQuery ? alloc_fragment({bm, bn}, DType::f32, "s")
                 : alloc_fragment({bn, bm}, DType::f32, "s_t");
    dpt = byQuery ? alloc_fragment({bm, bn}, DType::f32, "dp")
                  : alloc_fragment({bn, bm}, DType::f32, "dp_t");
    pt = byQuery ? Buffer() : alloc_fragment({bn, bm}, c.dtype, "p_t");
    dst = byQuery ? Buffer() : alloc_fragment({bn, bm}, c.dtype, "ds_t");
    dv = alloc_fragment({bn, d}, DType::f32, "dv");
    dk = alloc_fragment({bn, d}, DType::f32, "dk");
    dq = alloc_fragment({bm, d}, DType::f32, "dq");
    if (tmem) {
      Buffer stAcc = alloc_tmem({bn, bm}, DType::f32, "s_t_acc");
      Buffer dptAcc = alloc_tmem({bn, bm}, DType::f32, "dp_t_acc");
      acc = Tcgen05Buffers{stAcc,
                           dptAcc,
                           alloc_tmem({bn, d}, DType::f32, "dv_acc"),
                           alloc_tmem({bn, d}, DType::f32, "dk_acc"),
                           alias_tmem(dptAcc, {bm, d}, DType::f32),
                           c.form == BackwardForm::ts ? alias_tmem(stAcc, {bn, bm}, c.dtype) : dss};
    }
  }

  /// The key position of query row `row` (causal masks compare keys with it).
  Expr keyPosition(Expr row) const { return c.queryOffset ? t.queryOffset + row : row; }

  /// The query block at row0: its loads, the step, and dQ added into the
  /// accumulator.
  void queryBlock(Expr row0) const {
    copy(sq.rows(t.in.q, row0, h, bm, d), qs);
    copy(sq.rows(t.dO, row0, h, bm, d), dos);
    Sequence::AlignedVector lseRows = sq.alignedVector(t.lse, h, row0, bm);
    Expr shift = lseRows.shift;
    copy(lseRows.tile, lses);
    copy(sq.alignedVector(t.delta, h, row0, bm).tile, deltas);
    Expr scaleLog2 = t.in.scale * kLog2e;
    Expr inside = row0 + bm <= sq.length && col0 + bn <= sk.length;
    if (c.causal) inside = inside && col0 + bn <= keyPosition(row0) + 1;
    if (byQuery) queryRowStep(row0, shift, scaleLog2, inside);
    else keyRowStep(row0, shift, scaleLog2, inside);
    // Rows past the query sequence hold exact zeros.
    Buffer dqRows = sq.rows(t.dQacc, row0, h, bm, d);
    if (c.elementAtomics) {
      parallel(bm, d, [&](Expr i, Expr j) { atomic_add(dqRows(i, j), dq(i, j), c.dqOrder); });
    } else if (c.dqTma) {
      copy(dq, dqs);
      atomic_add(dqRows, dqs, c.dqOrder, AtomicPath::tma);
    } else
      atomic_add(dqRows, dq, c.dqOrder);
  }

  /// P for query row i and key column j of the step at row0 from its
  /// score (read by `score` inside the expression, as the element-wise ops
  /// are recorded in the order they are built). Rows and columns outside
  /// the sequences get P = 0, so they add nothing to dK, dV or dQ (in a
  /// packed batch they are another sequence's); only blocks at a
  /// sequence's end (or, causal, on the diagonal) need the mask (`inside`
  /// skips it).
  Expr probability(const std::function<Expr()> &score, Expr row0, Expr shift, Expr scaleLog2,
                   Expr i, Expr j, bool masked) const {
    Expr prob = exp2(score() * scaleLog2 - lses(i + shift) * kLog2e);
    if (!masked) return prob;
    Expr visible = row0 + i < sq.length && col0 + j < sk.length;
    if (c.causal) visible = visible && col0 + j <= keyPosition(row0 + i);
    return select(visible, prob, Expr(0.0));
  }

  /// One step by query rows (FlashAttention-3's order): S = Q K^T and
  /// dP = dO V^T with each warpgroup's rows its own queries, so a thread
  /// needs two rows' LSE and delta rather than a column's worth; P and dS
  /// go to shared memory, where dV += P^T dO and dK += dS^T Q read them
  /// transposed and dQ = dS K reads dS as it is.
  void queryRowStep(Expr row0, Expr shift, Expr scaleLog2, Expr inside) const {
    // [block_m, *] products: by rows where each warpgroup gets 64 of
    // them, else by columns.
    WarpPolicy queryPolicy =
        bm % (64 * (c.threads / 128)) == 0 ? WarpPolicy::full_row : WarpPolicy::full_col;
    GemmOptions byRows{.transpose_b = true, .clear_accum = true, .policy = queryPolicy};
    gemm(qs, ks, st, byRows);
    gemm(dos, vs, dpt, byRows);
    auto probabilities = [&](bool masked) {
      parallel(bm, bn, [&](Expr i, Expr j) {
        st(i, j) = probability([&] { return st(i, j); }, row0, shift, scaleLog2, i, j, masked);
      });
    };
    if_(inside, [&] { probabilities(false); }, [&] { probabilities(true); });
    // P and dS are both stored before the products that read them: one
    // barrier between the warpgroups instead of two (dV's product then
    // no longer overlaps the computation of dS; on an H200 at head_dim
    // 64 that is 2-3% faster without a mask, within 1% causal).
    copy(st, pss);
    parallel(bm, bn, [&](Expr i, Expr j) {
      dpt(i, j) = st(i, j) * (dpt(i, j) - deltas(i + shift)) * t.in.scale;
    });
    copy(dpt, dss);
    gemm(pss, dos, dv, {.transpose_a = true, .policy = WarpPolicy::full_row});
    gemm(dss, ks, dq, {.clear_accum = true, .policy = queryPolicy});
    gemm(dss, qs, dk, {.transpose_a = true, .policy = WarpPolicy::full_row});
  }

  /// One step by key rows: S^T = K Q^T and dP^T = V dO^T, so P^T and
  /// dS^T are in the accumulator layout, the A operands of dV's and dK's
  /// products in registers (or, tcgen05 and dkv_operands=shared, in
  /// shared or tensor memory).
  /// The order lets the gemms overlap the element-wise work (each waits
  /// only where its result is read): dP^T runs while P^T is computed, dV
  /// while dS^T is, dK while dQ is added to the accumulator. (tcgen05
  /// gemms complete in order here; their accumulators are read back.)
  void keyRowStep(Expr row0, Expr shift, Expr scaleLog2, Expr inside) const {
    if (tmem) {
      gemm(ks, qs, acc->st, {.transpose_b = true, .clear_accum = true});
      gemm(vs, dos, acc->dpt, {.transpose_b = true, .clear_accum = true});
      copy(acc->st, st);
    } else {
      gemm(ks, qs, st, kScores);
      gemm(vs, dos, dpt, kScores);
    }
    // P^T in the operand type: in registers for wgmma and for the ts
    // form's tensor-memory copy (which does not convert); the ss form
    // converts on the way to shared memory.
    bool needPt = c.form == BackwardForm::ts || (c.form == BackwardForm::registers && !sharedDkv);
    auto probabilities = [&](bool masked) {
      parallel(bn, bm, [&](Expr j, Expr i) {
        Expr prob = probability([&] { return st(j, i); }, row0, shift, scaleLog2, i, j, masked);
        st(j, i) = prob;
        if (needPt) pt(j, i) = cast(prob, c.dtype);
      });
    };
    // The tcgen05 forms mask every block: the second unrolled copy of the
    // loop took the ss form's consumers past their 240 registers (a
    // spill with packed batches).
    if (tmem) probabilities(true);
    else if_(inside, [&] { probabilities(false); }, [&] { probabilities(true); });
    if (tmem) {
      copy(needPt ? pt : st, acc->p);
      gemm(acc->p, dos, acc->dv);
      copy(acc->dpt, dpt);
    } else if (sharedDkv) {
      copy(st, pss);
      gemm(pss, dos, dv, kRowSplit);
    } else {
      gemm(pt, dos, dv, kRowSplit);
    }
    // tcgen05 and shared dK/dV operands: dS^T overwrites dP^T in
    // registers and is converted on its way to shared memory (no third
    // [bn, bm] tile of registers: at 240 a thread, beside S^T and dP^T,
    // it spilled).
    const bool dsInPlace = tmem || sharedDkv;
    parallel(bn, bm, [&](Expr j, Expr i) {
      Expr grad = st(j, i) * (dpt(j, i) - deltas(i + shift)) * t.in.scale;
      if (dsInPlace) dpt(j, i) = grad;
      else dst(j, i) = cast(grad, c.dtype);
    });
    copy(dsInPlace ? dpt : dst, dss);
    if (tmem) {
      gemm(dss, qs, acc->dk);
      gemm(dss, ks, acc->dq, {.transpose_a = true, .clear_accum = true});
      copy(acc->dq, dq);
    } else {
      gemm(dss, ks, dq, {.transpose_a = true, .clear_accum = true});
      gemm(sharedDkv ? dss : dst, qs, dk, kRowSplit);
    }
  }

  /// dK and dV of the block: stored, or added into the K/V head's.
  void storeDkv() const {
    if (tmem) {
      copy(acc->dk, dk);
      copy(acc->dv, dv);
    }
    Expr outHead = t.perQueryHead ? h : kvHead;
    Buffer dkRows = sk.rows(t.dK, col0, outHead, bn, d);
    Buffer dvRows = sk.rows(t.dV, col0, outHead, bn, d);
    if (c.kvReduction != KvReduction::atomic) {
      sk.store(dk, dkRows, col0);
      sk.store(dv, dvRows, col0);
    } else if (c.elementAtomics) {
      parallel(bn, d, [&](Expr j, Expr i) {
        atomic_add(dkRows(j, i), dk(j, i));
        atomic_add(dvRows(j, i), dv(j, i));
      });
    } else {
      atomic_add(dkRows, dk);
      atomic_add(dvRows, dv);
    }
  }

  static constexpr GemmOptions kRowSplit{.policy = WarpPolicy::full_row};
  static constexpr GemmOptions kScores{
      .transpose_b = true, .clear_accum = true, .policy = WarpPolicy::full_row};

  const AttentionBackwardConfig &c;
  const int64_t d, bm, bn;
  const bool tmem;      // the tcgen05 forms
  const bool byQuery;   // scores by query rows
  const bool sharedDkv; // P^T (and dS^T) as shared operands of dV's (and dK's) products
  const BackwardTensors &t;
  Expr h;
  Sequence sq, sk;
  Expr kvHead, col0;
  Buffer ks, vs, qs, dos, lses, deltas, dss, dqs, pss, st, dpt, pt, dst, dv, dk, dq;
  std::optional<Tcgen05Buffers> acc;
};
} // namespace

Program tessel::kernels::flashAttentionBackward(const AttentionBackwardConfig &c) {
  checkConfig(c);
  Program p(c.varlen ? "flash_attention_varlen_bwd" : "flash_attention_bwd");
  const int64_t bn = c.blockN ? c.blockN : 128;
  BackwardTensors t = BackwardTensors::declare(p, c);
  // Causal: the first key blocks see the most queries and go first.
  launchAttentionGrid(p, c.gridOrder, c.causal, ceil_div(t.seqs.maxLength, bn), t.in.headsQ,
                      t.seqs.sequences, c.threads, [&](Expr bx, Expr h, Expr b) {
    BackwardBlock(c, bn, t, bx, h, b).build();
  });
  return p;
}

bool tessel::kernels::backwardQueryRowsByDefault(int64_t headDim,
                                                 const std::map<std::string, std::string> &chosen) {
  // An H200 at 8k: 371 against 317 TFLOP/s by key rows at 64 a step; at
  // head_dim 128 key rows are 3% ahead.
  auto stages = chosen.find("stages");
  return headDim == 64 && !chosen.count("block_m") && !chosen.count("scores") &&
         (stages == chosen.end() || stages->second == "2");
}

Program tessel::kernels::flashAttentionBackwardPost(const AttentionBackwardConfig &c) {
  Program p("flash_attention_bwd_post");
  Expr batch = p.sym("batch"), seq = p.sym("seqlen"), headsIn = p.sym("heads_in");
  Expr headsOut = p.sym("heads_out");
  const int64_t d = c.headDim, bm = c.preBlock;
  Tensor in = p.tensor("accum", {batch, seq, headsIn, d}, DType::f32);
  Tensor out = p.tensor("grad", {batch, seq, headsOut, d}, c.dtype);
  // Output head h sums input heads h * G .. h * G + G - 1 (G = 1: a plain
  // conversion).
  p.kernel({ceil_div(seq, bm), headsOut, batch}, 128, [&](Expr bx, Expr h, Expr b) {
    Expr group = headsIn / headsOut;
    Buffer sum = alloc_fragment({bm, d}, DType::f32, "sum");
    Buffer part = alloc_fragment({bm, d}, DType::f32, "part");
    copy(rowsOf(in, b, bx * bm, h * group, bm, d), sum);
    serial(group - 1, [&](Expr g) {
      copy(rowsOf(in, b, bx * bm, h * group + g + 1, bm, d), part);
      parallel(bm, d, [&](Expr i, Expr j) { sum(i, j) = sum(i, j) + part(i, j); });
    });
    copy(sum, rowsOf(out, b, bx * bm, h, bm, d));
  });
  return p;
}
