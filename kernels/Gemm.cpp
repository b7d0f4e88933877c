//===- Gemm.cpp - tiled matrix product ------------------------------------===//
#include "Kernels.h"

#include <fmt/format.h>

using namespace tessel;

/// sm_100a: the accumulator lives in tensor memory, the tcgen05.mma
/// instructions read both operands from shared memory, and the epilogue
/// moves the accumulator out in column chunks through registers (a whole
/// [128, 256] f32 tile would be 256 registers a thread).
static Program gemmTcgen05(const kernels::GemmConfig &c) {
  if (c.blockM != 128 || c.threads % 128 || c.blockN % (c.threads / 128))
    throw Error(fmt::format("a tcgen05 gemm takes block_m = 128 (every tensor-memory lane) and "
                            "whole warpgroups that split block_n; got block_m = {}, block_n = {}, "
                            "threads = {}",
                            c.blockM, c.blockN, c.threads));
  Program p("gemm");
  Expr m = p.sym("M"), n = p.sym("N"), k = p.sym("K");
  Tensor a = p.tensor("A", c.transposeA ? std::vector<Expr>{k, m} : std::vector<Expr>{m, k}, c.in);
  Tensor b = p.tensor("B", c.transposeB ? std::vector<Expr>{n, k} : std::vector<Expr>{k, n}, c.in);
  Tensor out = p.tensor("C", {m, n}, c.out);
  const int64_t bm = c.blockM, bn = c.blockN, bk = c.blockK;
  const int64_t chunk = std::min<int64_t>(bn, 32 * (c.threads / 128));
  Expr gridX = ceil_div(n, bn), gridY = ceil_div(m, bm);
  p.kernel({gridX, gridY}, c.threads, [&](Expr bx, Expr by) {
    if (c.swizzlePanel) std::tie(bx, by) = use_swizzle(bx, by, gridX, gridY, c.swizzlePanel);
    Buffer as = alloc_shared(c.transposeA ? std::vector<int64_t>{bk, bm} : std::vector<int64_t>{bm, bk},
                             c.in, "a_tile");
    Buffer bs = alloc_shared(c.transposeB ? std::vector<int64_t>{bn, bk} : std::vector<int64_t>{bk, bn},
                             c.in, "b_tile");
    Buffer acc = alloc_tmem({bm, bn}, DType::f32, "acc");
    clear(acc);
    pipelined(ceil_div(k, bk), c.stages, {.warp_specialize = c.warpSpecialize}, [&](Expr kt) {
      copy(c.transposeA ? a.tile({kt * bk, by * bm}, {bk, bm}) : a.tile({by * bm, kt * bk}, {bm, bk}), as);
      copy(c.transposeB ? b.tile({bx * bn, kt * bk}, {bn, bk}) : b.tile({kt * bk, bx * bn}, {bk, bn}), bs);
      gemm(as, bs, acc, {.transpose_a = c.transposeA, .transpose_b = c.transposeB,
                         .instruction = GemmInstruction::tcgen05});
    });
    Buffer part = alloc_fragment({bm, chunk}, DType::f32, "acc_part");
    for (int64_t col = 0; col < bn; col += chunk) {
      copy(acc.tile({0, col}, {bm, chunk}), part);
      copy(part, out.tile({by * bm, bx * bn + col}, {bm, chunk}));
    }
  });
  return p;
}

Program tessel::kernels::gemm(const GemmConfig &c) {
  if (c.instruction == GemmInstruction::tcgen05) return gemmTcgen05(c);
  Program p("gemm");
  Expr m = p.sym("M"), n = p.sym("N"), k = p.sym("K");
  Tensor a = p.tensor("A", c.transposeA ? std::vector<Expr>{k, m} : std::vector<Expr>{m, k}, c.in);
  Tensor b = p.tensor("B", c.transposeB ? std::vector<Expr>{n, k} : std::vector<Expr>{k, n}, c.in);
  Tensor out = p.tensor("C", {m, n}, c.out);
  const int64_t bm = c.blockM, bn = c.blockN, bk = c.blockK;
  Expr gridX = ceil_div(n, bn), gridY = ceil_div(m, bm);
  p.kernel({gridX, gridY}, c.threads, [&](Expr bx, Expr by) {
    if (c.swizzlePanel) std::tie(bx, by) = use_swizzle(bx, by, gridX, gridY, c.swizzlePanel);
    Buffer as = alloc_shared(c.transposeA ? std::vector<int64_t>{bk, bm} : std::vector<int64_t>{bm, bk},
                             c.in, "a_tile");
    Buffer bs = alloc_shared(c.transposeB ? std::vector<int64_t>{bn, bk} : std::vector<int64_t>{bk, bn},
                             c.in, "b_tile");
    Buffer acc = alloc_fragment({bm, bn}, DType::f32, "acc");
    clear(acc);
    pipelined(ceil_div(k, bk), c.stages, {.warp_specialize = c.warpSpecialize}, [&](Expr kt) {
      copy(c.transposeA ? a.tile({kt * bk, by * bm}, {bk, bm}) : a.tile({by * bm, kt * bk}, {bm, bk}), as);
      copy(c.transposeB ? b.tile({bx * bn, kt * bk}, {bn, bk}) : b.tile({kt * bk, bx * bn}, {bk, bn}), bs);
      gemm(as, bs, acc, {.transpose_a = c.transposeA, .transpose_b = c.transposeB,
                         .policy = c.policy, .instruction = c.instruction});
    });
    copy(acc, out.tile({by * bm, bx * bn}, {bm, bn}));
  });
  return p;
}
