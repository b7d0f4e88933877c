//===- Gemm.cpp - tiled matrix product ------------------------------------===//
#include "tessel/kernels/gemm/Gemm.h"

#include <fmt/format.h>
#include <functional>
#include <optional>

using namespace tessel;
using kernels::GemmConfig;

namespace {
/// Scales a fragment of the product, [rows, cols] at (row, col) of C, on
/// its way out; empty for an unscaled gemm.
using ScaleTile = std::function<void(const Buffer &tile, Expr row, Expr col)>;

/// Where a block's accumulator lives and how it leaves: `accumulator`
/// allocates and clears it, `store` writes it to the output tile at (row,
/// col), each fragment scaled by `scale` when there is one.
struct Accumulation {
  std::function<Buffer()> accumulator;
  GemmInstruction instruction = GemmInstruction::automatic;
  /// `add`: the block holds one K slice's partial product, added into C
  /// (split-K) rather than stored.
  std::function<void(const Buffer &acc, const Tensor &out, Expr row, Expr col, bool add,
                     const ScaleTile &scale)>
      store;
};

/// Multiplies a fragment of the product by its scales (one of each per
/// tensor, or scale_a per row and scale_b per column); windows of the scale
/// vectors read 0 past M or N, where nothing is stored.
void scaleProduct(const GemmConfig &c, const Buffer &tile, const Tensor &scaleA,
                  const Tensor &scaleB, Expr row, Expr col) {
  const int64_t rows = tile.shape()[0], cols = tile.shape()[1];
  if (c.scale == kernels::GemmScale::tensor) {
    Buffer sa = scaleA.tile({0}, {1}), sb = scaleB.tile({0}, {1});
    Expr factor = sa(0) * sb(0);
    parallel(rows, cols, [&](Expr i, Expr j) { tile(i, j) = tile(i, j) * factor; });
    return;
  }
  Buffer sa = scaleA.tile({row}, {rows}), sb = scaleB.tile({col}, {cols});
  parallel(rows, cols, [&](Expr i, Expr j) { tile(i, j) = tile(i, j) * (sa(i) * sb(j)); });
}

/// acc += partial * a_scale[row] * b_scale[column / 128]: one K block's
/// product promoted into the f32 accumulator with its scales.
void promoteBlock(const Buffer &acc, const Buffer &partial, const Buffer &aScales,
                  const Buffer &bScales) {
  // One B scale a 128-column tile: read once, not at every element.
  if (acc.shape()[1] == 128) {
    Expr b = bScales(0);
    parallel(acc.shape()[0], acc.shape()[1], [&](Expr i, Expr j) {
      acc(i, j) = acc(i, j) + partial(i, j) * (aScales(i) * b);
    });
    return;
  }
  parallel(acc.shape()[0], acc.shape()[1], [&](Expr i, Expr j) {
    acc(i, j) = acc(i, j) + partial(i, j) * (aScales(i) * bScales(j / 128));
  });
}

/// A block-scaled gemm's operands: A [M, K], B [N, K], A's scales [K /
/// 128, M], B's [N / 128, K / 128].
struct BlockScaledOperands {
  const Tensor &a, &b, &scaleA, &scaleB;
};

/// The main loop of a block-scaled gemm. Each 128-wide K block's product
/// lands in a partial accumulator and is promoted into acc with its scales,
/// so that no more than 128 of K accumulate at FP8 wgmma's precision
/// (DeepGEMM's promotion). With block_k = 256 a stage holds two K blocks in
/// two partials: the second block's wgmmas run while the first is promoted
/// (the wait before the promotion leaves the later group in flight).
void blockScaledLoop(const GemmConfig &c, const BlockScaledOperands &x, const Buffer &acc, Expr col,
                     Expr row, Expr firstK, Expr steps) {
  const int64_t bm = c.blockM, bn = c.blockN, halves = c.blockK / 128;
  std::vector<Buffer> as, bs, aScales, partials;
  for (int64_t h = 0; h < halves; ++h) {
    std::string suffix = halves > 1 ? std::to_string(h) : "";
    as.push_back(alloc_shared({bm, 128}, c.in, "a_tile" + suffix));
    bs.push_back(alloc_shared({bn, 128}, c.in, "b_tile" + suffix));
    aScales.push_back(alloc_shared({bm}, DType::f32, "a_scales" + suffix));
    partials.push_back(alloc_fragment({bm, bn}, DType::f32, "partial" + suffix));
  }
  pipelined(steps, c.stages, {.warp_specialize = c.warpSpecialize, .pingpong = c.pingpong, .overlap_mma = c.overlapMma},
            [&](Expr step) {
              for (int64_t h = 0; h < halves; ++h) {
                Expr kb = (firstK + step) * halves + h; // the K block
                copy(x.a.tile({row, kb * 128}, {bm, 128}), as[h]);
                copy(x.b.tile({col, kb * 128}, {bn, 128}), bs[h]);
                copy(x.scaleA.tile({kb, row}, {drop, bm}), aScales[h]);
              }
              for (int64_t h = 0; h < halves; ++h)
                gemm(as[h], bs[h], partials[h],
                     {.transpose_b = true, .clear_accum = true, .policy = c.policy});
              for (int64_t h = 0; h < halves; ++h) {
                Expr kb = (firstK + step) * halves + h;
                promoteBlock(acc, partials[h], aScales[h],
                             x.scaleB.tile({col / 128, kb}, {bn / 128, drop}));
              }
            });
}

/// The checks of the types and scales a gemm computes with.
void checkTypes(const GemmConfig &c) {
  bool integer = c.in == DType::i8, fp8 = c.in == DType::f8e4m3 || c.in == DType::f8e5m2;
  if (integer && (c.out != DType::i32 || c.scale != kernels::GemmScale::none))
    throw Error(fmt::format("an i8 gemm writes its i32 accumulator unscaled: out = i32 and scale = "
                            "none, got out = {}",
                            name(c.out)));
  if (c.scale == kernels::GemmScale::block &&
      (!fp8 || (c.blockK != 128 && c.blockK != 256) || c.blockN % 128 || c.splitK != 1 ||
       c.clusterM != 1 || c.instruction == GemmInstruction::tcgen05))
    throw Error(fmt::format("a block-scaled gemm multiplies FP8 inputs in K tiles of one or two "
                            "128-wide scale blocks (block_k = 128 or 256) and column tiles of whole "
                            "128-column scale blocks, without split-K or clusters; got in = {}, "
                            "block_k = {}, block_n = {}",
                            name(c.in), c.blockK, c.blockN));
  if (c.scale == kernels::GemmScale::mx &&
      (!fp8 || c.instruction != GemmInstruction::tcgen05 || c.blockK != 128 || c.blockN % 128))
    throw Error(fmt::format("an MX gemm (scale = mx) multiplies FP8 inputs on tcgen05.mma "
                            "(sm_100a) in K tiles of one 128-wide scale group (block_k = 128) "
                            "and column tiles of whole 128-column scale atoms; got in = {}, "
                            "block_k = {}, block_n = {}{}",
                            name(c.in), c.blockK, c.blockN,
                            c.instruction == GemmInstruction::tcgen05 ? "" : ", not tcgen05"));
  if (!integer && c.out == DType::i32)
    throw Error(fmt::format("a gemm of {} inputs accumulates in f32: out is f16, bf16 or f32, not "
                            "i32",
                            name(c.in)));
  // tcgen05.mma reads 8-bit operands either way round; wgmma and mma.sync
  // K-major only.
  if ((integer || fp8) && (c.transposeA || !c.transposeB) &&
      c.instruction != GemmInstruction::tcgen05)
    throw Error(fmt::format("a gemm of {} inputs reads both operands K-major, as the 8-bit tensor-core "
                            "instructions before sm_100a do: A as [M, K] (transpose_a = 0) and B "
                            "as [N, K] (transpose_b = 1)",
                            name(c.in)));
}

/// The tiled gemm every target shares: one block per [block_m, block_n]
/// output tile, A and B tiles loaded by a pipelined loop over K.
Program tiledGemm(const GemmConfig &c, const Accumulation &how) {
  checkTypes(c);
  Program p("gemm");
  Expr m = p.sym("M"), n = p.sym("N"), k = p.sym("K");
  Tensor a = p.tensor("A", c.transposeA ? std::vector<Expr>{k, m} : std::vector<Expr>{m, k}, c.in);
  Tensor b = p.tensor("B", c.transposeB ? std::vector<Expr>{n, k} : std::vector<Expr>{k, n}, c.in);
  Tensor out = p.tensor("C", {m, n}, c.out);
  std::optional<Tensor> scaleA, scaleB;
  const bool blockScaled = c.scale == kernels::GemmScale::block;
  const bool mx = c.scale == kernels::GemmScale::mx;
  if (mx) {
    // cuBLAS's blocked MX layout: one 512-byte atom per 128 rows and 128
    // of K, which tcgen05.cp moves into tensor memory as it is.
    scaleA = p.tensor("scale_a", {ceil_div(m, 128), ceil_div(k, 128), 32, 16}, DType::ue8m0);
    scaleB = p.tensor("scale_b", {ceil_div(n, 128), ceil_div(k, 128), 32, 16}, DType::ue8m0);
  } else if (blockScaled) {
    // DeepSeek-V3's layout: A's 1 x 128 scales stored K-block-major ([K /
    // 128, M], one contiguous row a K block, as a block's copy reads them),
    // B's 128 x 128 scales [N / 128, K / 128].
    scaleA = p.tensor("scale_a", {ceil_div(k, 128), m}, DType::f32);
    scaleB = p.tensor("scale_b", {ceil_div(n, 128), ceil_div(k, 128)}, DType::f32);
  } else if (c.scale != kernels::GemmScale::none) {
    bool rows = c.scale == kernels::GemmScale::row;
    scaleA = p.tensor("scale_a", {rows ? m : Expr(1)}, DType::f32);
    scaleB = p.tensor("scale_b", {rows ? n : Expr(1)}, DType::f32);
  }
  const int64_t bm = c.blockM, bn = c.blockN, bk = c.blockK, cm = c.clusterM;
  if (cm != 1 && cm != 2)
    throw Error(fmt::format("gemm clusters hold 1 or 2 blocks along M, got {}", cm));
  Expr gridX = ceil_div(n, bn), gridY = ceil_div(m, bm);
  // With clusters the grid is (cm, columns of C, groups of cm tile rows):
  // the first index is the block's rank, the cluster's blocks share a
  // column (and so every B tile), and rasterization walks the groups. A
  // last group that runs past M leaves its extra block no rows to store.
  Expr groupsY = ceil_div(gridY, Expr(cm));
  const int64_t splits = c.splitK;
  if (splits < 1 || splits > 64)
    throw Error(fmt::format("split_k is between 1 and 64, got {}", splits));
  if (splits > 1 && c.out == DType::bf16)
    throw Error("split_k adds each K slice's partial product into C, rounding it to C's type; bf16 "
                "keeps 8 bits of each, so split-K takes an f32 or f16 C");
  if (splits > 1 && (cm != 1 || c.persistent))
    throw Error("a split-K gemm runs one block per (tile, K slice): no clusters, not persistent");
  // The block's output tile is column bx, row by of C's tiles; with split-K
  // it multiplies the K tiles of slice `split` only.
  Expr kTiles = ceil_div(k, bk);
  Expr perSplit = ceil_div(kTiles, Expr(splits));
  auto body = [&](Expr bx, Expr by, Expr split = Expr(0)) {
    Expr firstK = split * perSplit;
    Expr steps = splits > 1 ? max(min(perSplit, kTiles - firstK), Expr(0)) : kTiles;
    ScaleTile scale;
    if (scaleA && !blockScaled && !mx)
      scale = [&](const Buffer &tile, Expr row, Expr col) {
        scaleProduct(c, tile, *scaleA, *scaleB, row, col);
      };
    if (blockScaled) {
      Buffer acc = how.accumulator();
      blockScaledLoop(c, {a, b, *scaleA, *scaleB}, acc, bx * bn, by * bm, firstK, steps);
      how.store(acc, out, by * bm, bx * bn, splits > 1, scale);
      return;
    }
    Buffer as = alloc_shared(c.transposeA ? std::vector<int64_t>{bk, bm} : std::vector<int64_t>{bm, bk},
                             c.in, "a_tile");
    Buffer bs = alloc_shared(c.transposeB ? std::vector<int64_t>{bn, bk} : std::vector<int64_t>{bk, bn},
                             c.in, "b_tile");
    Buffer acc = how.accumulator();
    // MX: the K tile's scale atoms, A's one and B's one per 128 columns.
    std::optional<Buffer> as_scales, bs_scales;
    if (mx) {
      as_scales = alloc_shared({32, 16}, DType::ue8m0, "a_scales");
      bs_scales = alloc_shared({bn / 128, 32, 16}, DType::ue8m0, "b_scales");
    }
    pipelined(steps, c.stages, {.warp_specialize = c.warpSpecialize, .pingpong = c.pingpong, .overlap_mma = c.overlapMma}, [&](Expr step) {
      Expr kt = splits > 1 ? firstK + step : step;
      copy(c.transposeA ? a.tile({kt * bk, by * bm}, {bk, bm}) : a.tile({by * bm, kt * bk}, {bm, bk}), as);
      copy(c.transposeB ? b.tile({bx * bn, kt * bk}, {bn, bk}) : b.tile({kt * bk, bx * bn}, {bk, bn}), bs,
           {.multicast = cm > 1});
      if (mx) {
        copy(scaleA->tile({by, kt, 0, 0}, {drop, drop, 32, 16}), *as_scales);
        copy(scaleB->tile({bx * (bn / 128), kt, 0, 0}, {bn / 128, drop, 32, 16}), *bs_scales);
      }
      gemm(as, bs, acc, {.transpose_a = c.transposeA, .transpose_b = c.transposeB,
                         .policy = c.policy, .instruction = how.instruction,
                         .scale_a = as_scales, .scale_b = bs_scales});
    });
    how.store(acc, out, by * bm, bx * bn, splits > 1, scale);
  };
  if (c.persistent && cm != 1)
    throw Error("a persistent gemm runs without clusters (cluster_m = 1)");
  if (c.persistent && c.warpSpecialize == WarpSpecialize::off)
    throw Error("a persistent gemm is warp-specialized: its pipeline runs on across tiles");
  if (c.persistent) {
    // One block per resident slot, each walking tiles in launch order (the
    // rasterization applies to the tile index as it does to a block's).
    p.kernel({gridX, gridY}, c.threads, [&](Expr, Expr) {
      persistent({gridX, gridY}, [&](std::vector<Expr> tile) {
        Expr bx = tile[0], by = tile[1];
        if (c.swizzlePanel) std::tie(bx, by) = use_swizzle(bx, by, gridX, gridY, c.swizzlePanel);
        body(bx, by);
      });
    });
    return p;
  }
  if (splits > 1) {
    // The K slices are the grid's third dimension; every slice adds its
    // partial product into C, which the launch must have cleared.
    p.kernel({gridX, gridY, Expr(splits)}, c.threads, [&](Expr bx, Expr by, Expr split) {
      if (c.swizzlePanel) std::tie(bx, by) = use_swizzle(bx, by, gridX, gridY, c.swizzlePanel);
      body(bx, by, split);
    });
    return p;
  }
  if (cm == 1) {
    p.kernel({gridX, gridY}, c.threads, [&](Expr bx, Expr by) {
      if (c.swizzlePanel) std::tie(bx, by) = use_swizzle(bx, by, gridX, gridY, c.swizzlePanel);
      body(bx, by);
    });
    return p;
  }
  p.kernel({Expr(cm), gridX, groupsY}, c.threads, [&](Expr rank, Expr column, Expr group) {
    cluster_dims({cm, 1, 1});
    if (c.swizzlePanel)
      std::tie(column, group) = use_swizzle(column, group, gridX, groupsY, c.swizzlePanel);
    body(column, group * Expr(cm) + rank);
  });
  return p;
}
} // namespace

Program tessel::kernels::gemm(const GemmConfig &c) {
  const int64_t bm = c.blockM, bn = c.blockN;
  if (c.instruction != GemmInstruction::tcgen05) {
    // The accumulator in registers (mma.sync, wgmma).
    return tiledGemm(c, {[&] {
                           Buffer acc = alloc_fragment(
                               {bm, bn}, c.in == DType::i8 ? DType::i32 : DType::f32, "acc");
                           clear(acc);
                           return acc;
                         },
                         c.instruction,
                         [&](const Buffer &acc, const Tensor &out, Expr row, Expr col, bool add,
                             const ScaleTile &scale) {
                           if (scale) scale(acc, row, col);
                           Buffer tile = out.tile({row, col}, {bm, bn});
                           if (!c.tmaStore) {
                             if (add) atomic_add(tile, acc, MemoryOrder::relaxed);
                             else copy(acc, tile);
                             return;
                           }
                           // Staged in shared memory and stored by TMA (a
                           // TMA reduce-add for split-K): the consumers go
                           // on to the next tile while the copy engine
                           // writes this one.
                           Buffer staged = alloc_shared({bm, bn}, c.out, "c_tile");
                           copy(acc, staged);
                           if (add) atomic_add(tile, staged, MemoryOrder::relaxed, AtomicPath::tma);
                           else copy(staged, tile);
                         }});
  }
  // sm_100a: the accumulator in tensor memory, the tcgen05.mma instructions
  // (kind::f16, f8f6f4 or i8 by the inputs) reading both operands from
  // shared memory; the epilogue moves it out in column chunks through
  // registers (a whole [128, 256] f32 tile would be 256 registers a
  // thread), scaling each chunk.
  if (bm != 128 || c.threads % 128 || bn % (c.threads / 128))
    throw Error(fmt::format("a tcgen05 gemm takes block_m = 128 (every tensor-memory lane) and "
                            "whole warpgroups that split block_n; got block_m = {}, block_n = {}, "
                            "threads = {}",
                            bm, bn, c.threads));
  const int64_t chunk = std::min<int64_t>(bn, 32 * (c.threads / 128));
  // kind::i8 accumulates in s32 tensor memory, every float kind in f32.
  const DType accType = c.in == DType::i8 ? DType::i32 : DType::f32;
  return tiledGemm(c, {[&] {
                         Buffer acc = alloc_tmem({bm, bn}, accType, "acc");
                         clear(acc);
                         return acc;
                       },
                       GemmInstruction::tcgen05,
                       [&](const Buffer &acc, const Tensor &out, Expr row, Expr col, bool add,
                           const ScaleTile &scale) {
                         Buffer part = alloc_fragment({bm, chunk}, accType, "acc_part");
                         // tma_store: each chunk through one shared tile and
                         // a TMA store (reduce-add for split-K); the next
                         // chunk's write waits only for the copy engine to
                         // have read the last one.
                         std::optional<Buffer> staged;
                         if (c.tmaStore) staged = alloc_shared({bm, chunk}, c.out, "c_chunk");
                         for (int64_t at = 0; at < bn; at += chunk) {
                           copy(acc.tile({0, at}, {bm, chunk}), part);
                           if (scale) scale(part, row, col + at);
                           Buffer tile = out.tile({row, col + at}, {bm, chunk});
                           if (!staged) {
                             if (add) atomic_add(tile, part, MemoryOrder::relaxed);
                             else copy(part, tile);
                             continue;
                           }
                           copy(part, *staged);
                           if (add) atomic_add(tile, *staged, MemoryOrder::relaxed, AtomicPath::tma);
                           else copy(*staged, tile);
                         }
                       }});
}
