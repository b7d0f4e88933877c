//===- Snippet.cpp - a fuzz spec as C++ that builds its program -----------===//
//
// Prints the program Build.cpp builds, template by template, as a function
// a test can paste: `Program fuzzProgram(const std::string &arch)`.
//
//===----------------------------------------------------------------------===//
#include "Spec.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::fuzz;

namespace {

/// A floating-point literal the DSL reads as a float constant.
std::string lit(double v) {
  std::string t = fmt::format("{}", v);
  if (t.find_first_of(".en") == std::string::npos) t += ".0";
  return "Expr(" + t + ")";
}

std::string dtype(DType t) { return fmt::format("DType::{}", name(t)); }

const char *orderName(MemoryOrder o) {
  static const char *names[] = {"relaxed", "acquire", "release", "acq_rel", "seq_cst"};
  return names[static_cast<int>(o)];
}

const char *reduceName(ReduceKind k) {
  static const char *names[] = {"reduce_sum", "reduce_max", "reduce_min", "reduce_absmax"};
  return names[static_cast<int>(k)];
}

std::string update(const Spec &s, const std::string &value, int indent = 4) {
  return fmt::format("{:{}}parallel({}, {}, [&](Expr i, Expr j) {{ w(i, j) = {}; }});\n", "", indent, s.tm, s.tn,
                     value);
}

std::string stmtText(const Spec &s, const Stmt &st) {
  switch (st.kind) {
  case StmtKind::scaleShift: return update(s, fmt::format("w(i, j) * {} + {}", lit(st.a), lit(st.b)));
  case StmtKind::selectBelow:
    return update(s, fmt::format("select(w(i, j) > {}, w(i, j), w(i, j) * {})", lit(st.a), lit(st.b)));
  case StmtKind::roundTrip: return update(s, fmt::format("cast(cast(w(i, j), {}), DType::f32)", dtype(st.via)));
  case StmtKind::clampMax: return update(s, fmt::format("min(max(w(i, j), {}), {})", lit(-st.a), lit(st.a)));
  case StmtKind::integerPath:
    return update(s, fmt::format("cast(cast(w(i, j) * Expr(4.0), {0}) * cast(Expr(3), {0}) + cast(j, {0}), "
                                 "DType::f32) * Expr(0.25)",
                                 dtype(st.via)));
  case StmtKind::integerDivide:
    return update(s, fmt::format("cast(cast(w(i, j) * Expr(4.0), {0}) / cast(Expr({1}), {0}) + "
                                 "cast(w(i, j) * Expr(4.0), {0}) % cast(Expr({1}), {0}), DType::f32)",
                                 dtype(st.via), st.divisor));
  case StmtKind::carried:
    return "    {\n      Expr c = serial(4, cast(Expr(0.0), DType::f32), [&](Expr i, Expr acc) { return acc + v(i); });\n" +
           update(s, "w(i, j) + c", 6) + "    }\n";
  case StmtKind::rowReduce: {
    std::string t = fmt::format("    {{\n      Buffer r = alloc_fragment({{{}}}, DType::f32, \"r\");\n      {}(w, r, 1);\n",
                                s.tm, reduceName(st.reduce)) +
                    update(s, "w(i, j) - r(i)", 6);
    if (st.rowAtomic)
      t += fmt::format("      atomic_add(R.tile({{row0}}, {{{}}}), r, MemoryOrder::{});\n", s.tm, orderName(st.order));
    return t + "    }\n";
  }
  case StmtKind::integerReduce:
    return fmt::format("    {{\n      Buffer q = {}({{{}, {}}}, DType::i32, \"q\");\n"
                       "      parallel({}, {}, [&](Expr i, Expr j) {{ q(i, j) = cast(w(i, j) * Expr(4.0), DType::i32); }});\n"
                       "      Buffer r = alloc_fragment({{{}}}, DType::i32, \"r\");\n      {}(q, r, 1);\n",
                       s.work == Space::shared ? "alloc_shared" : "alloc_fragment", s.tm, s.tn, s.tm, s.tn, s.tm,
                       reduceName(st.reduce)) +
           update(s, "w(i, j) - cast(r(i), DType::f32) * Expr(0.25)", 6) + "    }\n";
  case StmtKind::allReduce:
    return fmt::format("    {{\n      Buffer r = alloc_fragment({{{}}}, DType::f32, \"r\"), t = alloc_fragment({{1}}, "
                       "DType::f32, \"t\");\n      {}(w, r, 1);\n      {}(r, t, 0);\n",
                       s.tm, reduceName(st.reduce), reduceName(st.reduce)) +
           update(s, "w(i, j) - t(0)", 6) + "    }\n";
  case StmtKind::scalarAtomic:
    return fmt::format("    parallel({}, {}, [&](Expr i, Expr j) {{ atomic_add(S(0), w(i, j), MemoryOrder::{}); }});\n",
                       s.tm, s.tn, orderName(st.order));
  case StmtKind::firstColumn:
    return "    if_(col0 == Expr(0), [&] {\n" + update(s, fmt::format("w(i, j) * {} + {}", lit(st.a), lit(st.b)), 6) +
           "    });\n";
  case StmtKind::exponent:
    return update(s, st.fmaEvery ? fmt::format("exp2(w(i, j) * {}, {})", lit(st.a), st.fmaEvery)
                                 : fmt::format("exp(w(i, j) * {})", lit(st.a)));
  case StmtKind::columnParts: {
    int64_t columns = s.tn / st.parts;
    return fmt::format("    serial({}, [&](Expr q) {{\n      Buffer part = w.tile({{0, q * {}}}, {{{}, {}}});\n"
                       "      parallel({}, {}, [&](Expr i, Expr j) {{ part(i, j) = part(i, j) * {} + ({} + "
                       "cast(q, DType::f32)); }});\n    }});\n",
                       st.parts, columns, s.tm, columns, s.tm, columns, lit(st.a), lit(st.b));
  }
  }
  return "";
}

std::string shape2(bool swap, int64_t a, int64_t b) {
  return swap ? fmt::format("{{{}, {}}}", b, a) : fmt::format("{{{}, {}}}", a, b);
}

const char *policyName(WarpPolicy p) {
  static const char *names[] = {"square", "full_row", "full_col"};
  return names[static_cast<int>(p)];
}
const char *instructionName(GemmInstruction g) {
  static const char *names[] = {"automatic", "mma_sync", "wgmma", "tcgen05"};
  return names[static_cast<int>(g)];
}
const char *wsName(WarpSpecialize w) {
  static const char *names[] = {"automatic", "on", "off"};
  return names[static_cast<int>(w)];
}

/// The loop over a row's column tiles that runs `step` (rowSum, paged).
std::string rowLoopText(const Spec &s) {
  return s.pipelinedLoop
             ? fmt::format("    pipelined(ceil_div(N, {}), {}, {{.warp_specialize = WarpSpecialize::{}}}, step);\n",
                           s.tn, s.stages, wsName(s.ws))
             : fmt::format("    serial(ceil_div(N, {}), step);\n", s.tn);
}

std::string loadText(const Spec &s) {
  std::string t = fmt::format("    Buffer w = {}({{{}, {}}}, DType::f32, \"w\");\n",
                              s.work == Space::shared ? "alloc_shared" : "alloc_fragment", s.tm, s.tn);
  std::string tile = fmt::format("X.tile({{row0, col0}}, {{{}, {}}})", s.tm, s.tn);
  if (s.load == Load::direct) return t + fmt::format("    copy({}, w);\n", tile);
  t += fmt::format("    Buffer staged = {}({{{}, {}}}, {}, \"{}\");\n",
                   s.load == Load::fragment ? "alloc_fragment" : "alloc_shared", s.tm, s.tn, dtype(s.in),
                   s.load == Load::fragment ? "xf" : "xs");
  if (s.load == Load::rowSum) {
    t += fmt::format("    clear(w);\n    auto step = [&](Expr kt) {{\n"
                     "      copy(X.tile({{row0, kt * {1}}}, {{{0}, {1}}}), staged);\n"
                     "      parallel({0}, {1}, [&](Expr i, Expr j) {{ w(i, j) = w(i, j) + cast(staged(i, j), "
                     "DType::f32); }});\n    }};\n",
                     s.tm, s.tn);
    return t + rowLoopText(s);
  }
  if (s.load == Load::paged) {
    int64_t width = s.tn / s.pageParts;
    t += "    clear(w);\n    auto step = [&](Expr kt) {\n";
    for (int64_t q = 0; q < s.pageParts; ++q)
      t += fmt::format("      copy(X.tile({{row0, P(kt * {0} + {1}) * {2}}}, {{{3}, {2}}}), {4});\n", s.pageParts, q,
                       width, s.tm,
                       s.pageParts == 1 ? std::string("staged")
                                        : fmt::format("staged.tile({{0, {} * {}}}, {{{}, {}}})", q, width, s.tm, width));
    t += fmt::format("      parallel({}, {}, [&](Expr i, Expr j) {{\n"
                     "        w(i, j) = w(i, j) + cast(staged(i, j), DType::f32) * cast(kt + 1, DType::f32);\n"
                     "      }});\n    }};\n",
                     s.tm, s.tn);
    return t + rowLoopText(s);
  }
  int64_t half = s.tm / 2;
  if (s.load == Load::twoHops)
    t += fmt::format("    Buffer hop = alloc_fragment({{{}, {}}}, {}, \"xf\");\n    copy({}, staged);\n"
                     "    copy(staged, hop);\n    staged = hop;\n",
                     s.tm, s.tn, dtype(s.in), tile);
  else if (s.load == Load::windowed)
    t += fmt::format("    copy(X.tile({{row0, col0}}, {{{0}, {1}}}), staged.tile({{0, 0}}, {{{0}, {1}}}));\n"
                     "    copy(X.tile({{row0 + {0}, col0}}, {{{0}, {1}}}), staged.tile({{{0}, 0}}, {{{0}, {1}}}));\n",
                     half, s.tn);
  else if (s.load == Load::bounded)
    t += fmt::format("    copy(X.bounded({{L, N}}).tile({{row0, col0}}, {{{}, {}}}), staged);\n", s.tm, s.tn);
  else t += fmt::format("    copy({}, staged);\n", tile);
  return t + fmt::format("    parallel({}, {}, [&](Expr i, Expr j) {{ w(i, j) = cast(staged(i, j), DType::f32); }});\n",
                         s.tm, s.tn);
}

std::string gemmText(const Spec &s) {
  std::string t = fmt::format("    bool inTmem = {} && arch.rfind(\"sm_100a\", 0) == 0;\n"
                              "    Buffer as = {}({}, {}, \"as\");\n",
                              s.tmem ? "true" : "false", s.aInRegisters ? "alloc_fragment" : "alloc_shared",
                              shape2(s.transposeA, s.tm, s.tk), dtype(s.in));
  if (s.aInRegisters)
    t += fmt::format("    Buffer aOperand = as;\n    if (inTmem) aOperand = alloc_tmem({}, {}, \"a\");\n",
                     shape2(s.transposeA, s.tm, s.tk), dtype(s.in));
  t += fmt::format("    Buffer bs = alloc_shared({}, {}, \"bs\");\n"
                   "    Buffer acc = inTmem ? alloc_tmem({{{}, {}}}, {}, \"acc\")\n"
                   "                        : alloc_fragment({{{}, {}}}, {}, \"acc\");\n    clear(acc);\n",
                   shape2(s.transposeB, s.tk, s.tn), dtype(s.in), s.tm, s.tn, dtype(s.accumulator()), s.tm,
                   s.tn, dtype(s.accumulator()));
  std::string step = "    auto step = [&](Expr kt) {\n";
  step += fmt::format("      copy({}, as);\n", s.transposeA ? fmt::format("A.tile({{kt * {0}, row0}}, {{{0}, {1}}})", s.tk, s.tm)
                                                             : fmt::format("A.tile({{row0, kt * {0}}}, {{{1}, {0}}})", s.tk, s.tm));
  if (s.aInRegisters) step += "      if (inTmem) copy(as, aOperand);\n";
  step += fmt::format("      copy({}, bs);\n", s.transposeB ? fmt::format("B.tile({{col0, kt * {0}}}, {{{1}, {0}}})", s.tk, s.tn)
                                                             : fmt::format("B.tile({{kt * {0}, col0}}, {{{0}, {1}}})", s.tk, s.tn));
  int64_t r0 = s.transposeB ? s.tn : s.tk, r1 = s.transposeB ? s.tk : s.tn;
  bool integer = s.in == DType::i8; // integer tiles take integer constants
  if (s.staged == StagedEdit::maskTail)
    step += fmt::format("      parallel({}, {}, [&](Expr i, Expr j) {{ bs(i, j) = select(kt * {} + {} < K, bs(i, j), "
                        "Expr({})); }});\n",
                        r0, r1, s.tk, s.transposeB ? "j" : "i", integer ? "0" : "0.0");
  else if (s.staged == StagedEdit::scale)
    step += fmt::format("      parallel({}, {}, [&](Expr i, Expr j) {{ bs(i, j) = bs(i, j) * Expr({}); }});\n", r0,
                        r1, integer ? "2" : "2.0");
  std::string instruction = fmt::format("GemmInstruction::{}", instructionName(s.instruction));
  if (s.instruction == GemmInstruction::wgmma)
    instruction = "arch == \"sm_90a\" ? GemmInstruction::wgmma : GemmInstruction::automatic";
  step += fmt::format("      gemm({}, bs, acc, {{.transpose_a = {}, .transpose_b = {}, .policy = WarpPolicy::{},\n"
                      "                         .instruction = {}}});\n    }};\n",
                      s.aInRegisters ? "aOperand" : "as", s.transposeA, s.transposeB, policyName(s.policy),
                      instruction);
  t += step;
  if (s.pipelinedLoop)
    t += fmt::format("    pipelined(ceil_div(K, {}), {}, {{.warp_specialize = WarpSpecialize::{}}}, step);\n", s.tk,
                     s.stages, wsName(s.ws));
  else t += fmt::format("    serial(ceil_div(K, {}), step);\n", s.tk);
  if (s.accumulator() == DType::f16) {
    t += fmt::format("    Buffer w = alloc_fragment({{{}, {}}}, DType::f32, \"w\");\n    copy(acc, w);\n", s.tm, s.tn);
    return t;
  }
  if (s.accumulator() == DType::f32) {
    t += fmt::format("    Buffer w = acc;\n    if (inTmem) {{\n      w = alloc_fragment({{{}, {}}}, DType::f32, \"w\");\n"
                     "      copy(acc, w);\n    }}\n",
                     s.tm, s.tn);
    return t;
  }
  t += fmt::format("    Buffer w = alloc_fragment({{{0}, {1}}}, DType::f32, \"w\");\n"
                   "    Buffer sums = acc;\n    if (inTmem) {{\n"
                   "      sums = alloc_fragment({{{0}, {1}}}, DType::i32, \"sums\");\n      copy(acc, sums);\n    }}\n"
                   "    parallel({0}, {1}, [&](Expr i, Expr j) {{ w(i, j) = cast(sums(i, j), DType::f32); }});\n",
                   s.tm, s.tn);
  return t;
}

std::string storeText(const Spec &s) {
  std::string tile = fmt::format("Y.tile({{row0, col0}}, {{{}, {}}})", s.tm, s.tn);
  switch (s.store) {
  case Store::direct: return fmt::format("    copy(w, {});\n", tile);
  case Store::bounded: return fmt::format("    copy(w, Y.bounded({{L, N}}).tile({{row0, col0}}, {{{}, {}}}));\n", s.tm, s.tn);
  case Store::atomic: return fmt::format("    atomic_add({}, w, MemoryOrder::{});\n", tile, orderName(s.storeOrder));
  case Store::shared:
  case Store::atomicTma:
    return fmt::format("    Buffer ys = alloc_shared({{{}, {}}}, DType::f32, \"ys\");\n    copy(w, ys);\n", s.tm, s.tn) +
           (s.store == Store::shared
                ? fmt::format("    copy(ys, {});\n", tile)
                : fmt::format("    atomic_add({}, ys, MemoryOrder::relaxed,\n"
                              "               arch == \"sm_80\" || arch == \"sm_89\" ? AtomicPath::threads\n"
                              "                                                      : AtomicPath::tma);\n",
                              tile));
  }
  return "";
}

} // namespace

std::string tessel::fuzz::snippet(const Spec &s) {
  std::string t = fmt::format("// tessel-fuzz seed {}\nProgram fuzzProgram(const std::string &arch) {{\n"
                              "  Program p(\"fuzz_{}\");\n"
                              "  Expr M = p.sym(\"M\"), N = p.sym(\"N\"), K = p.sym(\"K\"), L = p.sym(\"L\");\n",
                              s.seed, s.seed);
  if (s.family == Family::elementwise) {
    t += fmt::format("  Tensor X = p.tensor(\"X\", {{M, N}}, {});\n", dtype(s.in));
    if (s.load == Load::paged)
      t += fmt::format("  Tensor P = p.tensor(\"P\", {{ceil_div(N, {}) * {}}}, DType::i32);\n", s.tn, s.pageParts);
  } else
    t += fmt::format("  Tensor A = p.tensor(\"A\", {}, {});\n  Tensor B = p.tensor(\"B\", {}, {});\n",
                     s.transposeA ? "{K, M}" : "{M, K}", dtype(s.in), s.transposeB ? "{N, K}" : "{K, N}", dtype(s.in));
  t += "  Tensor v = p.tensor(\"V\", {4}, DType::f32), Y = p.tensor(\"Y\", {M, N}, DType::f32);\n"
       "  Tensor R = p.tensor(\"R\", {M}, DType::f32), S = p.tensor(\"S\", {1}, DType::f32);\n";
  if (s.chain) t += fmt::format("  Tensor C = p.tensor(\"C\", {{{0}, {0}}}, {1});\n", s.tn, dtype(s.in));
  t += fmt::format("  Expr gx = ceil_div(N, {}), gy = ceil_div(M, {});\n", s.tn, s.tm);
  t += "  auto body = [&](Expr bx, Expr by) {\n";
  if (s.swizzlePanel) t += fmt::format("    std::tie(bx, by) = use_swizzle(bx, by, gx, gy, {});\n", s.swizzlePanel);
  t += fmt::format("    Expr row0 = by * {}, col0 = bx * {};\n", s.tm, s.tn);
  t += s.family == Family::gemm ? gemmText(s) : loadText(s);
  for (const Stmt &st : s.stmts) t += stmtText(s, st);
  if (s.chain)
    t += fmt::format("    {{\n      Buffer operand = alloc_fragment({{{0}, {1}}}, {2}, \"p\");\n"
                     "      parallel({0}, {1}, [&](Expr i, Expr j) {{ operand(i, j) = cast(w(i, j), {2}); }});\n"
                     "      Buffer cs = alloc_shared({{{1}, {1}}}, {2}, \"cs\");\n"
                     "      copy(C.tile({{0, 0}}, {{{1}, {1}}}), cs);\n"
                     "      Buffer product = alloc_fragment({{{0}, {1}}}, DType::f32, \"w2\");\n"
                     "      gemm(operand, cs, product, {{.clear_accum = true}});\n"
                     "      w = product;\n    }}\n",
                     s.tm, s.tn, dtype(s.in));
  t += storeText(s) + "  };\n";
  if (s.persistent)
    t += fmt::format("  p.kernel({{gx, gy}}, {}, [&](Expr, Expr) {{\n"
                     "    persistent({{gx, gy}}, [&](std::vector<Expr> tile) {{ body(tile[0], tile[1]); }});\n  }});\n",
                     s.threads);
  else t += fmt::format("  p.kernel({{gx, gy}}, {}, [&](Expr bx, Expr by) {{ body(bx, by); }});\n", s.threads);
  t += "  return p;\n}\n";
  auto sym = symbolValues(s);
  t += fmt::format("// M = {}, N = {}, K = {}, L = {}\n", sym[0], sym[1], sym[2], sym[3]);
  return t;
}

std::string tessel::fuzz::snippetCases(uint64_t first, int64_t count) {
  std::string t = "// Generated by tessel-fuzz --print-cases: each program's C++ snippet.\n"
                  "#include \"SnippetCases.h\"\n\nusing namespace tessel;\n\n";
  std::string table;
  for (uint64_t seed = first; seed < first + uint64_t(count); ++seed) {
    t += fmt::format("namespace case_{} {{\n{}}}\n\n", seed, snippet(generate(seed)));
    table += fmt::format("    {{{}, case_{}::fuzzProgram}},\n", seed, seed);
  }
  return t + "const std::vector<tessel::fuzz::SnippetCase> &tessel::fuzz::fuzzCases() {\n"
             "  static const std::vector<SnippetCase> cases = {\n" +
         table + "  };\n  return cases;\n}\n";
}
