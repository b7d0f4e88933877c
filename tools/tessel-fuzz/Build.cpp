//===- Build.cpp - a fuzz spec as a tessel::Program -----------------------===//
//
// Builds the program a Spec describes through the public DSL, exactly as
// Snippet.cpp prints it: keep the two in step, template by template.
//
//===----------------------------------------------------------------------===//
#include "Spec.h"

#include <fmt/format.h>
#include <tuple>

using namespace tessel;
using namespace tessel::fuzz;

namespace {

/// The kernel's parameters, declared in the order tensors() lists them.
struct Params {
  Expr m = 0, n = 0, k = 0, limit = 0;
  Tensor x, pages, a, b, v, y, r, s, c;
};

void reduceInto(ReduceKind kind, const Buffer &src, const Buffer &dst, int dim) {
  switch (kind) {
  case ReduceKind::sum: reduce_sum(src, dst, dim); break;
  case ReduceKind::max: reduce_max(src, dst, dim); break;
  case ReduceKind::min: reduce_min(src, dst, dim); break;
  case ReduceKind::absmax: reduce_absmax(src, dst, dim); break;
  }
}

/// W = f(W(i, j), i, j) over the whole tile. `f` gets the element as a
/// Ref, read where the expression reads it, as in the printed C++.
void update(const Spec &s, const Buffer &w, const std::function<Expr(const Ref &, Expr, Expr)> &f) {
  parallel(s.tm, s.tn, [&](Expr i, Expr j) { w(i, j) = f(w(i, j), i, j); });
}

void buildStmt(const Spec &s, const Stmt &st, const Params &p, const Buffer &w, Expr row0, Expr col0) {
  switch (st.kind) {
  case StmtKind::scaleShift:
    update(s, w, [&](const Ref &x, Expr, Expr) { return x * Expr(st.a) + Expr(st.b); });
    return;
  case StmtKind::selectBelow:
    update(s, w, [&](const Ref &x, Expr, Expr) { return select(x > Expr(st.a), x, x * Expr(st.b)); });
    return;
  case StmtKind::roundTrip:
    update(s, w, [&](const Ref &x, Expr, Expr) { return cast(cast(x, st.via), DType::f32); });
    return;
  case StmtKind::clampMax:
    update(s, w, [&](const Ref &x, Expr, Expr) { return min(max(x, Expr(-st.a)), Expr(st.a)); });
    return;
  case StmtKind::integerPath:
    update(s, w, [&](const Ref &x, Expr, Expr j) {
      return cast(cast(x * Expr(4.0), st.via) * cast(Expr(3), st.via) + cast(j, st.via), DType::f32) * Expr(0.25);
    });
    return;
  case StmtKind::integerDivide:
    update(s, w, [&](const Ref &x, Expr, Expr) {
      return cast(cast(x * Expr(4.0), st.via) / cast(Expr(st.divisor), st.via) +
                      cast(x * Expr(4.0), st.via) % cast(Expr(st.divisor), st.via),
                  DType::f32);
    });
    return;
  case StmtKind::carried: {
    Expr c = serial(4, cast(Expr(0.0), DType::f32), [&](Expr i, Expr acc) { return acc + p.v(i); });
    update(s, w, [&](const Ref &x, Expr, Expr) { return x + c; });
    return;
  }
  case StmtKind::rowReduce: {
    Buffer r = alloc_fragment({s.tm}, DType::f32, "r");
    reduceInto(st.reduce, w, r, 1);
    update(s, w, [&](const Ref &x, Expr i, Expr) { return x - r(i); });
    if (st.rowAtomic) atomic_add(p.r.tile({row0}, {s.tm}), r, st.order);
    return;
  }
  case StmtKind::integerReduce: {
    Buffer q = s.work == Space::shared ? alloc_shared({s.tm, s.tn}, DType::i32, "q")
                                       : alloc_fragment({s.tm, s.tn}, DType::i32, "q");
    parallel(s.tm, s.tn, [&](Expr i, Expr j) { q(i, j) = cast(w(i, j) * Expr(4.0), DType::i32); });
    Buffer r = alloc_fragment({s.tm}, DType::i32, "r");
    reduceInto(st.reduce, q, r, 1);
    update(s, w, [&](const Ref &x, Expr i, Expr) { return x - cast(r(i), DType::f32) * Expr(0.25); });
    return;
  }
  case StmtKind::allReduce: {
    Buffer r = alloc_fragment({s.tm}, DType::f32, "r"), t = alloc_fragment({1}, DType::f32, "t");
    reduceInto(st.reduce, w, r, 1);
    reduceInto(st.reduce, r, t, 0);
    update(s, w, [&](const Ref &x, Expr, Expr) { return x - t(0); });
    return;
  }
  case StmtKind::scalarAtomic:
    parallel(s.tm, s.tn, [&](Expr i, Expr j) { atomic_add(p.s(0), w(i, j), st.order); });
    return;
  case StmtKind::firstColumn:
    if_(col0 == Expr(0), [&] { update(s, w, [&](const Ref &x, Expr, Expr) { return x * Expr(st.a) + Expr(st.b); }); });
    return;
  case StmtKind::exponent:
    update(s, w, [&](const Ref &x, Expr, Expr) {
      return st.fmaEvery ? exp2(x * Expr(st.a), st.fmaEvery) : exp(x * Expr(st.a));
    });
    return;
  case StmtKind::columnParts: {
    int64_t columns = s.tn / st.parts;
    serial(st.parts, [&](Expr q) {
      Buffer part = w.tile({0, q * columns}, {s.tm, columns});
      parallel(s.tm, columns, [&](Expr i, Expr j) {
        part(i, j) = part(i, j) * Expr(st.a) + (Expr(st.b) + cast(q, DType::f32));
      });
    });
    return;
  }
  }
}

/// The loop over a row's column tiles that runs `step` (rowSum, paged).
void rowLoop(const Spec &s, const Params &p, const std::function<void(Expr)> &step) {
  if (s.pipelinedLoop) pipelined(ceil_div(p.n, s.tn), s.stages, {.warp_specialize = s.ws}, step);
  else serial(ceil_div(p.n, s.tn), step);
}

/// W for an elementwise program: X's tile, converted to f32.
Buffer loadTile(const Spec &s, const Params &p, Expr row0, Expr col0) {
  Buffer w = s.work == Space::shared ? alloc_shared({s.tm, s.tn}, DType::f32, "w")
                                     : alloc_fragment({s.tm, s.tn}, DType::f32, "w");
  auto tile = [&] { return p.x.tile({row0, col0}, {s.tm, s.tn}); };
  if (s.load == Load::direct) {
    copy(tile(), w);
    return w;
  }
  Buffer staged = s.load == Load::fragment ? alloc_fragment({s.tm, s.tn}, s.in, "xf")
                                           : alloc_shared({s.tm, s.tn}, s.in, "xs");
  if (s.load == Load::rowSum) {
    clear(w);
    auto step = [&](Expr kt) {
      copy(p.x.tile({row0, kt * s.tn}, {s.tm, s.tn}), staged);
      parallel(s.tm, s.tn, [&](Expr i, Expr j) { w(i, j) = w(i, j) + cast(staged(i, j), DType::f32); });
    };
    rowLoop(s, p, step);
    return w;
  }
  if (s.load == Load::paged) {
    clear(w);
    int64_t width = s.tn / s.pageParts;
    auto step = [&](Expr kt) {
      // One call expression each, as the snippet prints it: the order in
      // which its arguments build IR is the C++ compiler's.
      for (int64_t q = 0; q < s.pageParts; ++q) {
        if (s.pageParts == 1) copy(p.x.tile({row0, p.pages(kt * s.pageParts + q) * width}, {s.tm, width}), staged);
        else
          copy(p.x.tile({row0, p.pages(kt * s.pageParts + q) * width}, {s.tm, width}),
               staged.tile({0, q * width}, {s.tm, width}));
      }
      parallel(s.tm, s.tn, [&](Expr i, Expr j) {
        w(i, j) = w(i, j) + cast(staged(i, j), DType::f32) * cast(kt + 1, DType::f32);
      });
    };
    rowLoop(s, p, step);
    return w;
  }
  int64_t half = s.tm / 2;
  switch (s.load) {
  case Load::windowed:
    copy(p.x.tile({row0, col0}, {half, s.tn}), staged.tile({0, 0}, {half, s.tn}));
    copy(p.x.tile({row0 + half, col0}, {half, s.tn}), staged.tile({half, 0}, {half, s.tn}));
    break;
  case Load::bounded: copy(p.x.bounded({p.limit, p.n}).tile({row0, col0}, {s.tm, s.tn}), staged); break;
  case Load::twoHops: {
    Buffer hop = alloc_fragment({s.tm, s.tn}, s.in, "xf");
    copy(tile(), staged);
    copy(staged, hop);
    staged = hop;
    break;
  }
  default: copy(tile(), staged); break;
  }
  parallel(s.tm, s.tn, [&](Expr i, Expr j) { w(i, j) = cast(staged(i, j), DType::f32); });
  return w;
}

/// W for a gemm program: the (row0, col0) tile of A B.
Buffer gemmTile(const Spec &s, const Params &p, const std::string &arch, Expr row0, Expr col0) {
  bool inTmem = s.tmem && arch.rfind("sm_100a", 0) == 0;
  std::vector<int64_t> aShape = s.transposeA ? std::vector<int64_t>{s.tk, s.tm} : std::vector<int64_t>{s.tm, s.tk};
  Buffer as = s.aInRegisters ? alloc_fragment(aShape, s.in, "as") : alloc_shared(aShape, s.in, "as");
  Buffer aOperand = as;
  if (s.aInRegisters && inTmem) aOperand = alloc_tmem(aShape, s.in, "a");
  Buffer bs = alloc_shared(s.transposeB ? std::vector<int64_t>{s.tn, s.tk} : std::vector<int64_t>{s.tk, s.tn},
                           s.in, "bs");
  Buffer acc = inTmem ? alloc_tmem({s.tm, s.tn}, s.accumulator(), "acc")
                      : alloc_fragment({s.tm, s.tn}, s.accumulator(), "acc");
  clear(acc);
  // Integer tiles take integer constants.
  bool integer = s.in == DType::i8;
  Expr zero = integer ? Expr(0) : Expr(0.0), two = integer ? Expr(2) : Expr(2.0);
  auto step = [&](Expr kt) {
    copy(s.transposeA ? p.a.tile({kt * s.tk, row0}, {s.tk, s.tm}) : p.a.tile({row0, kt * s.tk}, {s.tm, s.tk}), as);
    if (s.aInRegisters && inTmem) copy(as, aOperand);
    copy(s.transposeB ? p.b.tile({col0, kt * s.tk}, {s.tn, s.tk}) : p.b.tile({kt * s.tk, col0}, {s.tk, s.tn}), bs);
    if (s.staged == StagedEdit::maskTail)
      parallel(bs.shape()[0], bs.shape()[1], [&](Expr i, Expr j) {
        bs(i, j) = select(kt * s.tk + (s.transposeB ? j : i) < p.k, bs(i, j), zero);
      });
    else if (s.staged == StagedEdit::scale)
      parallel(bs.shape()[0], bs.shape()[1], [&](Expr i, Expr j) { bs(i, j) = bs(i, j) * two; });
    GemmInstruction instruction = s.instruction;
    if (instruction == GemmInstruction::wgmma && arch != "sm_90a") instruction = GemmInstruction::automatic;
    gemm(aOperand, bs, acc, {.transpose_a = s.transposeA, .transpose_b = s.transposeB, .policy = s.policy,
                       .instruction = instruction});
  };
  if (s.pipelinedLoop) pipelined(ceil_div(p.k, s.tk), s.stages, {.warp_specialize = s.ws}, step);
  else serial(ceil_div(p.k, s.tk), step);
  bool exact = s.accumulator() == DType::i32;
  if (!inTmem && s.accumulator() == DType::f32) return acc;
  Buffer w = alloc_fragment({s.tm, s.tn}, DType::f32, "w");
  if (!exact) { // from tensor memory, or f16 registers
    copy(acc, w);
    return w;
  }
  // i8: the exact i32 sums as f32 (below 2^24).
  Buffer sums = acc;
  if (inTmem) {
    sums = alloc_fragment({s.tm, s.tn}, DType::i32, "sums");
    copy(acc, sums);
  }
  parallel(s.tm, s.tn, [&](Expr i, Expr j) { w(i, j) = cast(sums(i, j), DType::f32); });
  return w;
}

/// W rounded to `in`, times C by a gemm reading it from registers.
Buffer chainedProduct(const Spec &s, const Params &p, const Buffer &w) {
  Buffer operand = alloc_fragment({s.tm, s.tn}, s.in, "p");
  parallel(s.tm, s.tn, [&](Expr i, Expr j) { operand(i, j) = cast(w(i, j), s.in); });
  Buffer cs = alloc_shared({s.tn, s.tn}, s.in, "cs");
  copy(p.c.tile({0, 0}, {s.tn, s.tn}), cs);
  Buffer product = alloc_fragment({s.tm, s.tn}, DType::f32, "w2");
  gemm(operand, cs, product, {.clear_accum = true});
  return product;
}

void storeTile(const Spec &s, const Params &p, const std::string &arch, const Buffer &w, Expr row0, Expr col0) {
  auto tile = [&] { return p.y.tile({row0, col0}, {s.tm, s.tn}); };
  switch (s.store) {
  case Store::direct: copy(w, tile()); return;
  case Store::bounded: copy(w, p.y.bounded({p.limit, p.n}).tile({row0, col0}, {s.tm, s.tn})); return;
  case Store::atomic: atomic_add(tile(), w, s.storeOrder); return;
  case Store::shared:
  case Store::atomicTma: {
    Buffer ys = alloc_shared({s.tm, s.tn}, DType::f32, "ys");
    copy(w, ys);
    if (s.store == Store::shared) copy(ys, tile());
    // TMA reduce-adds are sm_90a's and newer; sm_80 and sm_89 add with
    // their threads.
    else atomic_add(tile(), ys, MemoryOrder::relaxed,
                    arch == "sm_80" || arch == "sm_89" ? AtomicPath::threads : AtomicPath::tma);
    return;
  }
  }
}

} // namespace

Program tessel::fuzz::buildProgram(const Spec &s, const std::string &arch) {
  Program prog(fmt::format("fuzz_{}", s.seed));
  Params p;
  p.m = prog.sym("M");
  p.n = prog.sym("N");
  p.k = prog.sym("K");
  p.limit = prog.sym("L");
  if (s.family == Family::elementwise) {
    p.x = prog.tensor("X", {p.m, p.n}, s.in);
    if (s.load == Load::paged) p.pages = prog.tensor("P", {ceil_div(p.n, s.tn) * s.pageParts}, DType::i32);
  } else {
    p.a = prog.tensor("A", s.transposeA ? std::vector<Expr>{p.k, p.m} : std::vector<Expr>{p.m, p.k}, s.in);
    p.b = prog.tensor("B", s.transposeB ? std::vector<Expr>{p.n, p.k} : std::vector<Expr>{p.k, p.n}, s.in);
  }
  p.v = prog.tensor("V", {4}, DType::f32);
  p.y = prog.tensor("Y", {p.m, p.n}, DType::f32);
  p.r = prog.tensor("R", {p.m}, DType::f32);
  p.s = prog.tensor("S", {1}, DType::f32);
  if (s.chain) p.c = prog.tensor("C", {s.tn, s.tn}, s.in);
  Expr gx = ceil_div(p.n, s.tn), gy = ceil_div(p.m, s.tm);
  auto body = [&](Expr bx, Expr by) {
    if (s.swizzlePanel) std::tie(bx, by) = use_swizzle(bx, by, gx, gy, s.swizzlePanel);
    Expr row0 = by * s.tm, col0 = bx * s.tn;
    Buffer w = s.family == Family::gemm ? gemmTile(s, p, arch, row0, col0) : loadTile(s, p, row0, col0);
    for (const Stmt &st : s.stmts) buildStmt(s, st, p, w, row0, col0);
    if (s.chain) w = chainedProduct(s, p, w);
    storeTile(s, p, arch, w, row0, col0);
  };
  prog.kernel({gx, gy}, s.threads, [&](Expr bx, Expr by) {
    if (!s.persistent) return body(bx, by);
    persistent({gx, gy}, [&](std::vector<Expr> tile) { body(tile[0], tile[1]); });
  });
  return prog;
}
