//===- Spec.h - a random DSL program as data --------------------*- C++ -*-===//
//
// tessel-fuzz describes each random program as a small value: its extents,
// its tiles and a list of statements drawn from templates. The same value
// builds the tessel::Program (Build.cpp), prints itself as a C++ snippet
// that builds the same program (Snippet.cpp), and shrinks (Generate.cpp):
// every template is valid by construction, so a compile error, a crash or
// two builds that disagree is the compiler's defect.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_FUZZ_SPEC_H
#define TESSEL_FUZZ_SPEC_H

#include "tessel/dsl/Program.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::fuzz {

/// What the kernel computes into its working tile W ([tm, tn] f32).
enum class Family {
  /// W is a tile of X, read at (by * tm, bx * tn).
  elementwise,
  /// W is the (by, bx) tile of A B, accumulated over K tiles by a
  /// pipelined or serial loop.
  gemm,
};

/// How X's tile reaches W (elementwise).
enum class Load {
  direct,    // copy(X tile, W), X f32 only
  fragment,  // copy(X tile, xf fragment of X's type), W = cast(xf)
  shared,    // copy(X tile, xs shared of X's type), W = cast(xs)
  windowed,  // as shared, in two copies into the row halves of xs
  bounded,   // as shared, through X.bounded({L, N})
  twoHops,   // copy(X tile, xs); copy(xs, xf fragment); W = cast(xf)
  /// W = the sum of X's tiles along the row (every column tile), loaded by
  /// a pipelined loop into xs and added by element code.
  rowSum,
  /// As rowSum, but each step's columns come in pageParts pages named by
  /// the i32 page table P (a permutation), read in the loop: page
  /// P(kt * parts + q) fills the window [q w, (q + 1) w) of xs, w = tn /
  /// parts, and W += xs * (kt + 1). The paged KV cache's pattern: copy
  /// addresses from memory read in a pipelined loop, into windows of a
  /// staged tile.
  paged,
};

/// How W reaches Y.
enum class Store {
  direct,   // copy(W, Y tile)
  shared,   // copy(W, ys shared); copy(ys, Y tile)
  bounded,  // copy(W, Y.bounded({L, N}) tile)
  atomic,   // atomic_add(Y tile, W, order): Y starts at zero
  atomicTma // copy(W, ys); atomic_add(Y tile, ys, relaxed, AtomicPath::tma)
};

/// One statement on W, between the load and the store.
enum class StmtKind {
  scaleShift,   // W = W * a + b
  selectBelow,  // W = select(W > a, W, W * b)
  roundTrip,    // W = cast(cast(W, via), f32), via a float (FP8 too) or integer type
  clampMax,     // W = min(max(W, -a), a)
  integerPath,  // W = cast(cast(W * 4, via) * 3 + j, f32) / 4
  /// W = cast(q / d + q % d, f32) for q = cast(W * 4, via): integer
  /// division and remainder (flooring) of negative and positive operands.
  integerDivide,
  carried,      // c = serial(4, 0, acc + V(i)); W = W + c
  rowReduce,    // r = reduce(W, 1); W = W - r(i); optionally atomic_add(R tile, r)
  allReduce,    // r = reduce(W, 1); t = reduce(r, 0); W = W - t(0)
  scalarAtomic, // parallel: atomic_add(S(0), W(i, j), order)
  firstColumn,  // if_(col0 == 0, W = W * a + b): a block-uniform branch
  exponent,     // W = exp(W * a), or 2^(W * a) with fmaEvery (inexact: compared within a bound)
  /// serial(parts, q): the window of W's columns [q C, (q + 1) C), C =
  /// tn / parts, = window * a + (b + q): windows of a fragment, each
  /// naming registers (the loop unrolled).
  columnParts,
  /// q = cast(W * 4, i32) in W's space; r = reduce(q, 1) in i32; W = W -
  /// cast(r(i), f32) / 4: integer reductions (exact past 2^24).
  integerReduce,
};

enum class ReduceKind { sum, max, min, absmax };

struct Stmt {
  StmtKind kind = StmtKind::scaleShift;
  double a = 1, b = 0;
  DType via = DType::bf16;
  int64_t divisor = 3; // integerDivide
  ReduceKind reduce = ReduceKind::sum;
  MemoryOrder order = MemoryOrder::relaxed;
  bool rowAtomic = false; // rowReduce: also add r into R
  int64_t parts = 2;      // columnParts
  int64_t fmaEvery = 0;   // exponent: exp2(W * a, fmaEvery) where nonzero, else exp
};

/// An edit of the staged B tile inside the K loop, before the gemm reads it
/// (element stores into a pipelined shared tile: the pattern that raced).
enum class StagedEdit { none, maskTail, scale };

struct Spec {
  uint64_t seed = 0;
  Family family = Family::elementwise;
  /// Run-time extents: X/Y are [m, n]; A [m, k], B [k, n]; L bounds rows.
  int64_t m = 1, n = 1, k = 1, limit = 1;
  /// The tile: W is [tm, tn]; gemm K tiles are tk deep.
  int64_t tm = 16, tn = 16, tk = 16;
  int threads = 128;
  DType in = DType::f32; // X's type, or A's and B's
  bool persistent = false;
  /// Blocks (or a persistent walk's tiles) remapped by use_swizzle with
  /// this panel; 0: in grid order.
  int swizzlePanel = 0;
  Space work = Space::fragment; // W's space
  Load load = Load::direct;
  int64_t pageParts = 1; // Load::paged: pages per step
  Store store = Store::direct;
  MemoryOrder storeOrder = MemoryOrder::relaxed;
  std::vector<Stmt> stmts;
  // gemm, and the rowSum and paged loads' loop
  bool pipelinedLoop = true;
  int stages = 2;
  WarpSpecialize ws = WarpSpecialize::automatic;
  WarpPolicy policy = WarpPolicy::square;
  /// `wgmma` is forced on sm_90a builds only (the others choose).
  GemmInstruction instruction = GemmInstruction::automatic;
  bool transposeA = false, transposeB = false;
  /// On sm_100a targets the accumulator lives in tensor memory (tcgen05);
  /// elsewhere the same program accumulates in a fragment.
  bool tmem = false;
  StagedEdit staged = StagedEdit::none;
  /// A's tile goes to a fragment, the gemm's A operand from registers; on
  /// sm_100a with the accumulator in tensor memory, on into tensor memory
  /// (the ts form).
  bool aInRegisters = false;
  /// After the statements, W rounded to `in` is the register A operand of
  /// a second gemm with C [tn, tn] (shared), into a fresh accumulator that
  /// becomes W: FlashAttention's P V, the first gemm's accumulator (gemm
  /// family) feeding the second.
  bool chain = false;

  /// Whether some statement is inexact (outputs compared within a bound).
  bool inexact() const;
  /// The relative bound outputs are compared within: 0 where exact, wider
  /// where an exp2 puts registers on the FMA pipe (a polynomial within
  /// 8.6e-5, which two builds may apply to different elements).
  float tolerance() const;
  /// Gemm inputs of one byte: FP8 (e4m3, e5m2) or i8, K-major or not (the
  /// compiler copies MN-major ones K-major for wgmma and mma.sync); i8
  /// accumulates exactly in i32.
  bool fp8() const { return in == DType::f8e4m3 || in == DType::f8e5m2; }
  bool eightBit() const { return fp8() || in == DType::i8; }
  /// FP8 or f16 products into an f16 fragment (the tensor cores' .f16
  /// forms), converted to f32 for the statements; K stays small enough
  /// that every partial sum is exact in f16 (feasible()).
  bool halfAccumulator = false;
  /// The accumulator's type: i32 for i8 inputs, f16 with halfAccumulator,
  /// else f32.
  DType accumulator() const {
    return in == DType::i8 ? DType::i32 : halfAccumulator ? DType::f16 : DType::f32;
  }
};

/// One build of a program: a target, whether its pipelines use TMA, and
/// whether the program is its plain form (plainForm).
struct Build {
  std::string arch; // as CompileOptions::arch
  bool tma = true;
  bool plain = false;
  std::string label() const { return arch + (tma ? "" : "-notma") + (plain ? "-plain" : ""); }
};
/// Whether build `b` can compile `s` at all: FP8 tensor cores are sm_89's
/// and newer (an FP8 gemm for sm_80 is an error by design, not a defect).
bool targets(const Spec &s, const Build &b);
/// "sm_90a-notma" is sm_90a with CompileOptions::tma = false;
/// "sm_80-plain" builds plainForm(s) for sm_80.
Build parseBuild(const std::string &text);

/// The same computation with every optimization the program asks for
/// taken out: serial loops instead of pipelined ones, one block per tile
/// instead of a persistent walk, mma.sync gemms into registers (never
/// tensor memory), reduce-adds by the threads. Built without TMA, it is the
/// reference the other builds are compared with.
Spec plainForm(const Spec &s);
/// The program build `b` compiles: plainForm(s) for a plain build.
Program buildProgram(const Spec &s, const Build &b);

/// A random program for `seed` (the same seed gives the same program).
Spec generate(uint64_t seed);
/// Whether every sum `s` computes is exact (see Generate.cpp), so that
/// builds must agree bit for bit.
bool feasible(const Spec &s);
/// Smaller variants of `s`, most promising first: statements dropped,
/// extents halved, options reset to their defaults. Each stays valid.
std::vector<Spec> shrinkCandidates(const Spec &s);

/// The kernel's tensors in parameter order, with what a run puts in them.
struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;
  DType type;
  enum Role { input, poisoned, zeroed } role;
};
std::vector<TensorInfo> tensors(const Spec &s);
/// The symbols' values in parameter order (M, N, K, L).
std::vector<int64_t> symbolValues(const Spec &s);

/// The program for `s` as built for `arch` (tensor memory only on sm_100a).
Program buildProgram(const Spec &s, const std::string &arch);
/// C++ that builds the same program (for a reproduction).
std::string snippet(const Spec &s);
/// The snippets of programs first..first+count-1 as one C++ file defining
/// `fuzzCases`, a table of (seed, builder), which SnippetCheck.cpp
/// compares with buildProgram.
std::string snippetCases(uint64_t first, int64_t count);

const char *name(StmtKind k);

} // namespace tessel::fuzz

#endif
