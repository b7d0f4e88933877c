//===- Gemm.cpp - tiled matrix product ------------------------------------===//
#include "Kernels.h"

using namespace tessel;

Program tessel::kernels::gemm(const GemmConfig &c) {
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
