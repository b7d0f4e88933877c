//===- Generate.cpp - random valid programs and their shrinking -----------===//
//
// Every value a program computes stays a multiple of 2^-F below a bound B
// with log2(B) + F within f32's 24 bits wherever values are summed (gemms,
// sum reductions, atomics): such sums are exact in any order, so builds
// that schedule them differently must agree bit for bit. The generator
// tracks (B, F) through the statements and only draws those that keep it;
// the shrinker keeps only variants that still do.
//
//===----------------------------------------------------------------------===//
#include "Spec.h"

#include "tessel/runtime/Error.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <random>
#include <string_view>

using namespace tessel;
using namespace tessel::fuzz;

namespace {

/// Bits after the binary point of a constant (0.25 has 2).
int fractionBits(double v) {
  int bits = 0;
  while (v != std::floor(v) && bits < 30) v *= 2, ++bits;
  return bits;
}

/// Magnitude bound and fraction bits of the working tile's values.
struct Range {
  double bound;
  int frac;
  /// Whether a sum of `count` such values is exact in f32.
  bool sums(double count) const { return std::log2(bound * count + 1) + frac <= 23; }
  bool representable() const { return std::log2(bound + 1) + frac <= 23; }
};

int64_t padded(int64_t extent, int64_t tile) { return (extent + tile - 1) / tile * tile; }

Range initialRange(const Spec &s) {
  if (s.family == Family::elementwise) {
    double steps = double(padded(s.n, s.tn) / s.tn);
    // rowSum adds a value below 2 per step; paged weights step kt by kt + 1.
    if (s.load == Load::rowSum) return {2 * steps, 2};
    if (s.load == Load::paged) return {steps * (steps + 1), 2};
    return {2, 2};
  }
  // Products of quarters are sixteenths below 4 (8 when the staged tile is
  // doubled); i8's products of integers to 8 are integers to 64. The
  // accumulator sums every K tile's products.
  bool integer = s.in == DType::i8;
  double perProduct = (integer ? 64 : 4) * (s.staged == StagedEdit::scale ? 2 : 1);
  return {perProduct * padded(s.k, s.tk), integer ? 0 : 4};
}

/// Applies `st` to `r`; false when the result would not be exact where it
/// must be.
bool apply(const Spec &s, const Stmt &st, Range &r) {
  double tile = double(s.tm) * s.tn;
  double tiles = double(padded(s.m, s.tm)) * padded(s.n, s.tn) / tile;
  switch (st.kind) {
  case StmtKind::scaleShift:
  case StmtKind::firstColumn: { // the branch's tiles change, the others keep theirs
    double bound = std::abs(st.a) * r.bound + std::abs(st.b);
    if (st.kind == StmtKind::firstColumn) bound = std::max(bound, r.bound);
    r = {bound, std::max(r.frac + fractionBits(st.a), fractionBits(st.b))};
    break;
  }
  case StmtKind::selectBelow:
    r = {r.bound * std::max(1.0, std::abs(st.b)), r.frac + fractionBits(st.b)};
    break;
  case StmtKind::roundTrip:
    // Rounding to nearest keeps multiples of 2^-frac (a coarser quantum is
    // a multiple of it, a finer one leaves them as they are) and grows a
    // magnitude by at most half a quantum: 2^-8 of bf16's, 2^-4 of e4m3's,
    // 2^-3 of e5m2's. FP8 saturates at its largest finite value; f16 would
    // overflow to infinity.
    if (st.via == DType::f16 && r.bound > 60000) return false;
    r.bound *= st.via == DType::f8e4m3 ? 1.07 : st.via == DType::f8e5m2 ? 1.13 : 1.01;
    break;
  case StmtKind::clampMax: r = {std::min(r.bound, st.a), std::max(r.frac, fractionBits(st.a))}; break;
  case StmtKind::integerPath:
    if (r.frac > 2 || r.bound * 4 > double(1 << 28)) return false;
    r = {(12 * r.bound + s.tn) / 4, 2};
    break;
  case StmtKind::integerDivide:
    if (r.frac > 2 || r.bound * 4 > double(1 << 28)) return false;
    r = {4 * r.bound + std::abs(double(st.divisor)), 0};
    break;
  case StmtKind::carried: r = {r.bound + 8, std::max(r.frac, 2)}; break;
  case StmtKind::rowReduce: {
    bool sum = st.reduce == ReduceKind::sum;
    if (sum && !r.sums(s.tn + 1)) return false;
    if (st.rowAtomic && !r.sums(double(s.tn) * padded(s.n, s.tn) / s.tn)) return false;
    r.bound *= sum ? s.tn + 1 : 2;
    break;
  }
  case StmtKind::integerReduce: {
    // q is W * 4 truncated; a sum of a row of them must fit an i32.
    bool sum = st.reduce == ReduceKind::sum;
    if (r.bound * 4 * double(s.tn + 1) > double(1 << 30)) return false;
    if (sum && !r.sums(s.tn + 1)) return false;
    r = {r.bound * (sum ? s.tn + 1 : 2), std::max(r.frac, 2)};
    break;
  }
  case StmtKind::allReduce: {
    bool sum = st.reduce == ReduceKind::sum;
    if (sum && !r.sums(tile + 1)) return false;
    r.bound *= sum ? tile + 1 : 2;
    break;
  }
  case StmtKind::scalarAtomic:
    if (!r.sums(tile * tiles)) return false;
    break;
  case StmtKind::columnParts: {
    // A gemm's accumulator holds windows of 8 columns or more in each
    // thread's registers when its warps split the rows only; an
    // element-wise tile's layout is chosen around its windows.
    // A chained tile takes the register operand's layout, whose lanes
    // step columns 2 and 4 too.
    int64_t columns = s.tn / st.parts;
    if (s.family == Family::gemm && s.policy != WarpPolicy::full_row) return false;
    if ((s.family == Family::gemm || s.chain) && columns < 8) return false;
    r = {std::abs(st.a) * r.bound + std::abs(st.b) + double(st.parts - 1),
         std::max(r.frac + fractionBits(st.a), fractionBits(st.b))};
    break;
  }
  case StmtKind::exponent:
    // Last by construction: nothing sums its inexact results.
    if (r.bound * std::abs(st.a) > 20) return false;
    r = {std::exp(20.0), 0};
    return true;
  }
  return r.representable();
}

std::mt19937_64 &rng() {
  static std::mt19937_64 engine;
  return engine;
}
int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng()); }
bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng()) < p; }
template <typename T> T pick(std::initializer_list<T> options) {
  return *(options.begin() + uniform(0, int64_t(options.size()) - 1));
}

Stmt randomStmt() {
  Stmt st;
  st.kind = pick({StmtKind::scaleShift, StmtKind::scaleShift, StmtKind::selectBelow, StmtKind::roundTrip,
                  StmtKind::clampMax, StmtKind::integerPath, StmtKind::integerDivide, StmtKind::carried,
                  StmtKind::rowReduce, StmtKind::firstColumn,
                  StmtKind::rowReduce, StmtKind::allReduce, StmtKind::scalarAtomic, StmtKind::exponent,
                  StmtKind::columnParts, StmtKind::integerReduce});
  st.reduce = pick({ReduceKind::sum, ReduceKind::max, ReduceKind::min, ReduceKind::absmax});
  st.order = pick({MemoryOrder::relaxed, MemoryOrder::relaxed, MemoryOrder::acquire, MemoryOrder::release,
                   MemoryOrder::acq_rel, MemoryOrder::seq_cst});
  st.via = st.kind == StmtKind::roundTrip
               ? pick({DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64, DType::f8e4m3,
                       DType::f8e5m2})
               : pick({DType::i32, DType::i64});
  st.divisor = pick<int64_t>({3, 4, -3, 7});
  st.rowAtomic = chance(0.5);
  st.parts = pick<int64_t>({2, 4});
  switch (st.kind) {
  case StmtKind::scaleShift:
  case StmtKind::firstColumn:
  case StmtKind::columnParts:
    st.a = pick({0.5, 2.0, -1.0, 0.25, 1.5, -3.0});
    st.b = pick({0.0, 0.25, -1.0, 0.5, 2.0});
    break;
  case StmtKind::selectBelow:
    st.a = pick({0.0, 0.5, -1.0});
    st.b = pick({0.5, -2.0, 0.25});
    break;
  case StmtKind::clampMax: st.a = pick({0.5, 1.0, 2.0, 4.0}); break;
  case StmtKind::exponent:
    st.a = pick({0.5, 1.0, -1.0, 0.25});
    st.fmaEvery = pick<int64_t>({0, 0, 1, 2, 3, 4});
    break;
  default: break;
  }
  return st;
}

/// Appends up to `count` random statements that keep the values exact;
/// an inexact statement (exp) can only be last, and nothing sums after it.
void addStatements(Spec &s, int count) {
  for (int n = 0; n < count; ++n) {
    bool added = false;
    for (int attempt = 0; attempt < 20 && !added; ++attempt) {
      s.stmts.push_back(randomStmt());
      added = feasible(s);
      if (!added) s.stmts.pop_back();
    }
  }
}

void generateElementwise(Spec &s) {
  // 96 and 384: counts that are not powers of two (three warps, three
  // warpgroups), whose layouts are those of the next power of two.
  s.threads = pick({64, 96, 128, 128, 256, 384});
  s.tm = pick({16, 32, 64, 128});
  s.tn = pick({16, 32, 64, 128});
  while (s.tm * s.tn > 4096) (chance(0.5) ? s.tm : s.tn) /= 2;
  s.in = pick({DType::f32, DType::bf16, DType::f16});
  s.work = chance(0.3) ? Space::shared : Space::fragment;
  s.load = pick({Load::direct, Load::fragment, Load::shared, Load::windowed, Load::bounded, Load::twoHops,
                 Load::rowSum, Load::rowSum, Load::paged, Load::paged});
  if (s.load == Load::direct && s.in != DType::f32) s.load = Load::shared;
  s.pageParts = pick<int64_t>({1, 2, 4});
  s.pipelinedLoop = chance(0.8);
  s.stages = int(uniform(1, 4));
  // `on` where the threads are not whole warpgroups: a warning, not an error.
  s.ws = pick({WarpSpecialize::automatic, WarpSpecialize::on, WarpSpecialize::off});
}

void generateGemm(Spec &s) {
  s.in = chance(0.3) ? pick({DType::f8e4m3, DType::f8e5m2, DType::i8}) : pick({DType::bf16, DType::f16});
  s.tmem = chance(0.3);
  if (s.tmem) {
    s.threads = 128;
    s.tm = 128;
    s.tn = pick({16, 32, 64});
  } else {
    // 384: three warpgroups on FlashAttention-3's 192-row tile.
    s.threads = pick({128, 256, 384});
    s.tm = s.threads == 384 ? 192 : s.threads == 256 ? 128 : pick({64, 128});
    // (192 x 128 f32 alone would fill the shared-memory budget below.)
    s.tn = s.threads == 384 ? pick({32, 64}) : pick({32, 64, 128});
    while (s.tm * s.tn / s.threads > 64) s.tn /= 2;
    if (chance(0.3)) s.instruction = pick({GemmInstruction::mma_sync, GemmInstruction::wgmma});
  }
  // 8-bit tensor-core instructions take K in steps of 32.
  s.tk = s.eightBit() ? pick({32, 64, 128}) : pick({16, 32, 64});
  // mma.sync splits full_row over warps of 16 rows, full_col over warps
  // of 8 columns (wgmma's warpgroups fit wherever these do).
  int64_t warps = s.threads / 32;
  s.policy = pick({WarpPolicy::square, WarpPolicy::full_row, WarpPolicy::full_col});
  if (s.policy == WarpPolicy::full_row && s.tm < 16 * warps) s.policy = WarpPolicy::square;
  if (s.policy == WarpPolicy::full_col && s.tn < 8 * warps) s.policy = WarpPolicy::square;
  s.pipelinedLoop = chance(0.8);
  s.stages = int(uniform(1, 4));
  // Within every target's shared memory (sm_89's 99 KB the least), with
  // room for the store's tile, a row reduction's scratch (a float for
  // each warp sharing a row: up to 8, or 32 where the warps split the
  // columns) and, for 8-bit operands, the K-major copies
  // tessel-k-major-operands may make of both.
  int64_t scratchPerRow = s.policy == WarpPolicy::full_col ? 32 : 8;
  auto sharedBytes = [&] {
    int64_t operands = (s.tm * s.tk + s.tk * s.tn) * byteSize(s.in);
    return (s.pipelinedLoop ? s.stages : 1) * operands + (s.eightBit() ? operands : 0) +
           s.tm * s.tn * 4 + s.tm * scratchPerRow * 4;
  };
  while (sharedBytes() > 99 * 1024 && (s.stages > 1 || s.tk > (s.eightBit() ? 32 : 16)))
    (s.stages > 1 ? s.stages -= 1 : s.tk /= 2);
  s.ws = pick({WarpSpecialize::automatic, WarpSpecialize::on, WarpSpecialize::off});
  // 8-bit operands stored MN-major get K-major copies before wgmma and
  // mma.sync (tessel-k-major-operands), and are read as stored by
  // tcgen05.mma from tensor memory; B [N, K] is the common case.
  s.transposeA = chance(0.25);
  s.transposeB = chance(s.eightBit() ? 0.75 : 0.25);
  s.staged = pick({StagedEdit::none, StagedEdit::none, StagedEdit::maskTail, StagedEdit::scale});
  // An A operand in registers is split along M only and read as stored.
  s.aInRegisters = chance(0.2) && !s.transposeA && s.policy != WarpPolicy::full_col &&
                   !(s.eightBit() && s.tmem);
  // FP8: K within the accumulator's 13 bits (feasible()): products of
  // quarters are sixteenths below 4 (8 with the staged tile doubled).
  s.k = uniform(1, s.fp8() ? std::min<int64_t>(4 * s.tk, s.staged == StagedEdit::scale ? 64 : 128)
                           : 4 * s.tk);
  // An f16 accumulator keeps 11 bits: products of quarters (sixteenths
  // below 4, or 8 scaled) summed over one K tile of at most 32.
  // (With the staged tile doubled, one tile of 16: FP8 tiles are 32 deep,
  // so FP8 drops the doubling.)
  if ((s.fp8() || s.in == DType::f16) && !s.tmem && chance(0.3)) {
    s.halfAccumulator = true;
    if (s.fp8() && s.staged == StagedEdit::scale) s.staged = StagedEdit::none;
    s.tk = std::min<int64_t>(s.tk, s.staged == StagedEdit::scale ? 16 : 32);
    s.k = uniform(1, s.tk);
  }
}

} // namespace

/// Whether the chained gemm can take W's layout (see Spec::chain): 16-bit
/// operands, warps split along M only in 16-row steps (the register A
/// operand's rule) over a power of two of them, an accumulator in
/// registers, and room in shared memory for C.
bool chainAllowed(const Spec &s) {
  if (s.in != DType::bf16 && s.in != DType::f16) return false;
  if (s.threads & (s.threads - 1) || s.tm < 16 * (s.threads / 32)) return false;
  if (s.family == Family::gemm && (s.tmem || s.policy == WarpPolicy::full_col || s.tn > 64))
    return false;
  return !s.inexact();
}

/// W through the chained gemm. Rounding W to `in` is the same function in
/// every build and the reference (to nearest, ties to even) and keeps its
/// values multiples of 2^-frac below the bound, so only the sums of tn
/// products with C's quarters (below 2) need to be exact in f32, and f16
/// must not overflow.
bool applyChain(const Spec &s, Range &r) {
  if (!chainAllowed(s)) return false;
  if (s.in == DType::f16 && r.bound > 60000) return false;
  Range product{2 * r.bound, r.frac + 2};
  if (!product.sums(double(s.tn))) return false;
  r = {product.bound * double(s.tn), product.frac};
  return r.representable();
}

bool tessel::fuzz::feasible(const Spec &s) {
  // 8-bit operands come in K steps of 32; tensor memory holds an A
  // operand of 16 bits only (the ts form).
  if (s.eightBit() && s.tk % 32) return false;
  if (s.eightBit() && s.tmem && s.aInRegisters) return false;
  // FP8 tensor cores before sm_100a accumulate with about 14 significant
  // bits, not f32's 24: every partial sum must fit 13 (in units of the
  // products' quantum), or wgmma and mma.sync may round where the CPU does
  // not.
  if (s.family == Family::gemm && s.fp8()) {
    Range g = initialRange(s);
    if (g.bound * std::ldexp(1.0, g.frac) > 8192) return false;
  }
  // An f16 accumulator: FP8 or f16 products in a fragment (tensor memory
  // holds 32 bits), every partial sum within f16's 11 bits.
  if (s.halfAccumulator) {
    if (s.family != Family::gemm || !(s.fp8() || s.in == DType::f16) || s.tmem) return false;
    Range g = initialRange(s);
    if (g.bound * std::ldexp(1.0, g.frac) > 2048) return false;
  }
  Range r = initialRange(s);
  if (!r.representable()) return false;
  for (size_t i = 0; i < s.stmts.size(); ++i) {
    if (s.stmts[i].kind == StmtKind::exponent && i + 1 != s.stmts.size()) return false;
    if (!apply(s, s.stmts[i], r)) return false;
  }
  if (s.chain && !applyChain(s, r)) return false;
  bool sumsInto = s.store == Store::atomic || s.store == Store::atomicTma;
  return !(sumsInto && s.inexact());
}

bool Spec::inexact() const {
  return std::any_of(stmts.begin(), stmts.end(), [](const Stmt &st) { return st.kind == StmtKind::exponent; });
}

float Spec::tolerance() const {
  if (!inexact()) return 0;
  bool polynomial = std::any_of(stmts.begin(), stmts.end(), [](const Stmt &st) {
    return st.kind == StmtKind::exponent && st.fmaEvery;
  });
  return polynomial ? 2e-4f : 1e-5f;
}

Spec tessel::fuzz::generate(uint64_t seed) {
  rng().seed(seed);
  Spec s;
  s.seed = seed;
  s.family = chance(0.4) ? Family::gemm : Family::elementwise;
  if (s.family == Family::gemm) generateGemm(s);
  else generateElementwise(s);
  s.m = uniform(1, 3 * s.tm);
  s.n = uniform(1, 3 * s.tn);
  s.limit = uniform(0, s.m);
  s.persistent = chance(0.25);
  bool sharedWork = s.work == Space::shared;
  s.store = sharedWork ? pick({Store::direct, Store::bounded, Store::atomic})
                       : pick({Store::direct, Store::shared, Store::bounded, Store::atomic, Store::atomicTma});
  s.storeOrder = pick({MemoryOrder::relaxed, MemoryOrder::release, MemoryOrder::seq_cst});
  // Chosen first, so that the statements drawn keep its sums exact.
  s.chain = chance(0.35);
  if (!feasible(s)) s.chain = false;
  addStatements(s, int(uniform(0, 5)));
  s.swizzlePanel = chance(0.2) ? int(pick<int64_t>({2, 4, 8})) : 0;
  if (!feasible(s)) s.store = Store::direct; // an inexact last statement
  return s;
}

std::vector<Spec> tessel::fuzz::shrinkCandidates(const Spec &s) {
  std::vector<Spec> out;
  auto add = [&](Spec c) {
    c.limit = std::min(c.limit, c.m);
    if (feasible(c)) out.push_back(std::move(c));
  };
  for (size_t i = 0; i < s.stmts.size(); ++i) {
    Spec c = s;
    c.stmts.erase(c.stmts.begin() + i);
    add(c);
  }
  for (int64_t Spec::*extent : {&Spec::m, &Spec::n, &Spec::k})
    if (s.*extent > 1) {
      Spec c = s;
      c.*extent = (s.*extent + 1) / 2;
      add(c);
    }
  auto reset = [&](auto field, auto value) {
    if (s.*field == value) return;
    Spec c = s;
    c.*field = value;
    add(c);
  };
  reset(&Spec::persistent, false);
  reset(&Spec::swizzlePanel, 0);
  reset(&Spec::staged, StagedEdit::none);
  reset(&Spec::store, Store::direct);
  reset(&Spec::work, Space::fragment);
  reset(&Spec::pipelinedLoop, false);
  reset(&Spec::stages, 1);
  reset(&Spec::transposeA, false);
  reset(&Spec::aInRegisters, false);
  reset(&Spec::transposeB, false);
  reset(&Spec::instruction, GemmInstruction::automatic);
  reset(&Spec::chain, false);
  reset(&Spec::halfAccumulator, false);
  if (s.eightBit()) { // the same program in 16 bits, where 8 bits are not the cause
    Spec c = s;
    c.in = s.halfAccumulator ? DType::f16 : DType::bf16; // bf16 has no f16 accumulator
    if (c.instruction == GemmInstruction::wgmma) c.instruction = GemmInstruction::automatic;
    add(c);
  }
  if (s.in == DType::f32) reset(&Spec::load, Load::direct);
  else reset(&Spec::load, Load::shared);
  for (size_t i = 0; i < s.stmts.size(); ++i)
    if (s.stmts[i].rowAtomic) {
      Spec c = s;
      c.stmts[i].rowAtomic = false;
      add(c);
    }
  return out;
}

std::vector<int64_t> tessel::fuzz::symbolValues(const Spec &s) {
  return {s.m, s.n, s.family == Family::gemm ? s.k : 1, s.limit};
}

std::vector<TensorInfo> tessel::fuzz::tensors(const Spec &s) {
  std::vector<TensorInfo> t;
  if (s.family == Family::elementwise) {
    t.push_back({"X", {s.m, s.n}, s.in, TensorInfo::input});
  } else {
    t.push_back({"A", s.transposeA ? std::vector<int64_t>{s.k, s.m} : std::vector<int64_t>{s.m, s.k}, s.in,
                 TensorInfo::input});
    t.push_back({"B", s.transposeB ? std::vector<int64_t>{s.n, s.k} : std::vector<int64_t>{s.k, s.n}, s.in,
                 TensorInfo::input});
  }
  if (s.load == Load::paged && s.family == Family::elementwise)
    t.push_back({"P", {padded(s.n, s.tn) / s.tn * s.pageParts}, DType::i32, TensorInfo::input});
  t.push_back({"V", {4}, DType::f32, TensorInfo::input});
  bool adds = s.store == Store::atomic || s.store == Store::atomicTma;
  t.push_back({"Y", {s.m, s.n}, DType::f32, adds ? TensorInfo::zeroed : TensorInfo::poisoned});
  t.push_back({"R", {s.m}, DType::f32, TensorInfo::zeroed});
  t.push_back({"S", {1}, DType::f32, TensorInfo::zeroed});
  if (s.chain) t.push_back({"C", {s.tn, s.tn}, s.in, TensorInfo::input});
  return t;
}

Spec tessel::fuzz::plainForm(const Spec &s) {
  Spec plain = s;
  plain.pipelinedLoop = false;
  plain.stages = 1;
  plain.ws = WarpSpecialize::automatic;
  plain.persistent = false;
  plain.swizzlePanel = 0;
  plain.instruction = GemmInstruction::mma_sync;
  plain.tmem = false;
  if (plain.store == Store::atomicTma) plain.store = Store::atomic, plain.storeOrder = MemoryOrder::relaxed;
  return plain;
}

Program tessel::fuzz::buildProgram(const Spec &s, const Build &b) {
  return buildProgram(b.plain ? plainForm(s) : s, b.arch);
}

bool tessel::fuzz::targets(const Spec &s, const Build &b) { return !s.fp8() || b.arch != "sm_80"; }

Build tessel::fuzz::parseBuild(const std::string &text) {
  Build b{text};
  for (bool stripped = true; stripped;) {
    stripped = false;
    for (auto [suffix, flag] : {std::pair{"-notma", &Build::tma}, {"-plain", &Build::plain}}) {
      std::string_view end(suffix);
      if (b.arch.size() > end.size() && b.arch.ends_with(end)) {
        b.arch.resize(b.arch.size() - end.size());
        b.*flag = flag == &Build::plain;
        stripped = true;
      }
    }
  }
  if (b.arch != "sm_80" && b.arch != "sm_89" && b.arch != "sm_90a" && b.arch != "sm_100a" &&
      b.arch != "sm_100a-emu")
    throw Error(fmt::format("unknown build '{}' (sm_80, sm_89, sm_90a, sm_100a or sm_100a-emu, then optionally -notma "
                            "and -plain)",
                            text));
  return b;
}

const char *tessel::fuzz::name(StmtKind k) {
  static const char *names[] = {"scaleShift", "selectBelow",  "roundTrip", "clampMax",
                                "integerPath", "integerDivide", "carried",  "rowReduce",
                                "allReduce",  "scalarAtomic", "firstColumn", "exponent",
                                "columnParts", "integerReduce"};
  return names[static_cast<int>(k)];
}
