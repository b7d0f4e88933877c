//===- TileOps.cpp - the DSL's tile operations ----------------------------===//
//
// copy, fill, gemm, reductions and atomics: each checks its operands at the
// user's line and builds one tile op.
//
//===----------------------------------------------------------------------===//
#include "tessel/dsl/Program.h"
#include "DslInternal.h"
#include "ExprInternal.h"
#include "tessel/Dialect/Tile/TileDialect.h"
#include "tessel/Transforms/BufferUtils.h"

#include "mlir/IR/Builders.h"

#include <fmt/format.h>

using namespace mlir;
using namespace tessel;
using namespace tessel::detail;

//===----------------------------------------------------------------------===//
// Tile operations
//===----------------------------------------------------------------------===//

static void requireStatic(const Buffer &b, const char *what, SrcLoc loc) {
  for (int64_t d : b.shape())
    if (d < 0)
      fail(loc, fmt::format("{} needs a tile of static shape; take tensor.tile(offsets, sizes)", what));
}

void tessel::copy(const Buffer &src, const Buffer &dst, SrcLoc loc) { copy(src, dst, {}, loc); }

void tessel::copy(const Buffer &src, const Buffer &dst, CopyOptions options, SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  requireStatic(src, "copy", loc);
  requireStatic(dst, "copy", loc);
  if (src.shape() != dst.shape())
    fail(loc, fmt::format("copy source shape {} differs from destination shape {}",
                          shapeText(src.shape()), shapeText(dst.shape())));
  if (src.space() == Space::local || dst.space() == Space::local)
    fail(loc, "local buffers are private to a thread; access them element by element");
  if (options.multicast) {
    if (src.space() != Space::global || dst.space() != Space::shared)
      fail(loc, "a multicast copy moves a global tile into shared memory");
    if (enclosingKernel(p, loc).getClusterSize() < 2)
      fail(loc, "a multicast copy needs the kernel launched in clusters of several blocks "
                "(cluster_dims)");
  }
  tile::CopyOp::create(p.builder(), p.location(loc), src.value(), dst.value(), /*async=*/false,
                       options.multicast);
}

void tessel::fill(const Buffer &dst, Expr value, SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  requireStatic(dst, "fill", loc);
  Value v = isHost(*value.node) || value.node->kind == ExprNode::FConst
                ? value.value(dst.dtype())
                : convertTo(p.builder(), p.location(loc), value.value(value.type()),
                            toMlir(&p.context(), dst.dtype()));
  tile::FillOp::create(p.builder(), p.location(loc), dst.value(), v);
}

void tessel::clear(const Buffer &dst, SrcLoc loc) {
  fill(dst, isFloat(dst.dtype()) ? Expr(0.0) : Expr(0), loc);
}

Expr tessel::register_k_position(Expr k) {
  // The bits of k within its 16: e (bit 0), q (bits 1-2), b (bit 3); the
  // position's: e, b, q.
  return (k & ~Expr(15)) | (k & 1) | ((k >> 3 & 1) << 1) | ((k >> 1 & 3) << 2);
}

void tessel::gemm(const Buffer &a, const Buffer &b, const Buffer &c, GemmOptions o, SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  // The accumulator is a fragment, or tensor memory on sm_100a (tcgen05);
  // A may be in tensor memory for the latter too (the compiler says where
  // that is not lowered).
  auto check = [&](const Buffer &x, const char *which, bool acc) {
    bool ok = acc ? x.space() == Space::fragment || x.space() == Space::tmem
                  : x.space() == Space::shared || x.space() == Space::fragment ||
                        x.space() == Space::tmem;
    if (!ok)
      fail(loc, fmt::format("gemm operand {} is in {} memory; it must be in {}", which,
                            spaceName(x.space()),
                            acc ? "a fragment or tensor memory" : "shared, fragment or tensor memory"));
    if (x.rank() != 2) fail(loc, fmt::format("gemm operand {} must be 2-D, got {}", which, shapeText(x.shape())));
  };
  check(a, "A", false);
  check(b, "B", false);
  check(c, "C", true);
  int64_t m = o.transpose_a ? a.shape()[1] : a.shape()[0], ka = o.transpose_a ? a.shape()[0] : a.shape()[1];
  int64_t kb = o.transpose_b ? b.shape()[1] : b.shape()[0], n = o.transpose_b ? b.shape()[0] : b.shape()[1];
  if (ka != kb)
    fail(loc, fmt::format("gemm K mismatch: A {} has K = {}, B {} has K = {}", shapeText(a.shape()), ka,
                          shapeText(b.shape()), kb));
  if (c.shape()[0] != m || c.shape()[1] != n)
    fail(loc, fmt::format("gemm accumulator C {} must be {} for A {} and B {}", shapeText(c.shape()),
                          shapeText({m, n}), shapeText(a.shape()), shapeText(b.shape())));
  MLIRContext *ctx = &p.context();
  tile::WarpPolicy policy = o.policy == WarpPolicy::full_row   ? tile::WarpPolicy::full_row
                            : o.policy == WarpPolicy::full_col ? tile::WarpPolicy::full_col
                                                               : tile::WarpPolicy::square;
  Value scaleA, scaleB;
  if (o.scale_a || o.scale_b) {
    if (!o.scale_a || !o.scale_b)
      fail(loc, "a block-scaled gemm takes both scale_a and scale_b");
    for (auto [scales, which] : {std::pair{&*o.scale_a, "scale_a"}, std::pair{&*o.scale_b, "scale_b"}})
      if (scales->space() != Space::shared)
        fail(loc, fmt::format("gemm {} is in {} memory; block scales are read from shared memory",
                              which, spaceName(scales->space())));
    scaleA = o.scale_a->value();
    scaleB = o.scale_b->value();
  }
  auto op = tile::GemmOp::create(p.builder(), p.location(loc), a.value(), b.value(), c.value(),
                                 scaleA, scaleB, UnitAttr(), UnitAttr(), UnitAttr(),
                                 tile::WarpPolicyAttr::get(ctx, policy),
                                 tile::GemmInstructionAttr(), DenseI64ArrayAttr(), UnitAttr(),
                                 UnitAttr());
  if (o.instruction != GemmInstruction::automatic)
    op.setInstructionAttr(tile::GemmInstructionAttr::get(
        ctx, o.instruction == GemmInstruction::wgmma     ? tile::GemmInstruction::wgmma
             : o.instruction == GemmInstruction::tcgen05 ? tile::GemmInstruction::tcgen05
                                                         : tile::GemmInstruction::mma_sync));
  if (o.transpose_a) op.setTransposeA(true);
  if (o.transpose_b) op.setTransposeB(true);
  if (o.clear_accum) op.setClearAccum(true);
  if (o.issue_only) {
    if (c.space() != Space::tmem)
      fail(loc, "issue_only is for tcgen05 gemms (accumulator in tensor memory)");
    op.setIssueOnly(true);
  }
  if (o.b_register_k_order) {
    if (a.space() != Space::fragment || byteSize(a.dtype()) != 1 || ka % 16)
      fail(loc, fmt::format("b_register_k_order says B's K is stored in the order an 8-bit A in "
                            "registers reads it (K a multiple of 16); A is {} in {} memory, K = {}",
                            name(a.dtype()), spaceName(a.space()), ka));
    op.setBRegisterKOrder(true);
  }
}

static void reduce(tile::ReduceKind kind, const Buffer &src, const Buffer &dst, int dim, bool clear,
                   SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  if (dim < 0 || dim >= src.rank())
    fail(loc, fmt::format("reduce dim {} is out of range for {}", dim, shapeText(src.shape())));
  std::vector<int64_t> expected = src.shape();
  expected.erase(expected.begin() + dim);
  if (expected.empty()) expected.push_back(1);
  if (dst.shape() != expected)
    fail(loc, fmt::format("reduce destination {} must be {} for source {} along dim {}",
                          shapeText(dst.shape()), shapeText(expected), shapeText(src.shape()), dim));
  for (const Buffer *b : {&src, &dst})
    if (b->space() != Space::shared && b->space() != Space::fragment)
      fail(loc, fmt::format("reduce works on shared or fragment buffers, not {}", spaceName(b->space())));
  // A fragment's reduction lands in registers laid out like the fragment;
  // into a shared buffer it goes through such a fragment (holding the
  // buffer's values first when the reduction adds to them).
  if (src.space() == Space::fragment && dst.space() == Space::shared) {
    Buffer staged = alloc_fragment(dst.shape(), dst.dtype(), "", loc);
    if (!clear) copy(dst, staged, loc);
    reduce(kind, src, staged, dim, clear, loc);
    copy(staged, dst, loc);
    return;
  }
  tile::ReduceOp::create(p.builder(), p.location(loc), kind, src.value(), dst.value(),
                         static_cast<int64_t>(dim), clear);
}

void tessel::reduce_sum(const Buffer &s, const Buffer &d, int dim, bool clear, SrcLoc loc) {
  reduce(tile::ReduceKind::sum, s, d, dim, clear, loc);
}
void tessel::reduce_max(const Buffer &s, const Buffer &d, int dim, bool clear, SrcLoc loc) {
  reduce(tile::ReduceKind::max, s, d, dim, clear, loc);
}
void tessel::reduce_min(const Buffer &s, const Buffer &d, int dim, bool clear, SrcLoc loc) {
  reduce(tile::ReduceKind::min, s, d, dim, clear, loc);
}
void tessel::reduce_absmax(const Buffer &s, const Buffer &d, int dim, bool clear, SrcLoc loc) {
  reduce(tile::ReduceKind::absmax, s, d, dim, clear, loc);
}

static tile::MemoryOrder toOrder(MemoryOrder o) { return static_cast<tile::MemoryOrder>(static_cast<int>(o)); }

void tessel::atomic_add(const Buffer &dst, const Buffer &src, MemoryOrder order, SrcLoc loc) {
  atomic_add(dst, src, order, AtomicPath::threads, loc);
}

void tessel::atomic_add(const Buffer &dst, const Buffer &src, MemoryOrder order, AtomicPath path,
                        SrcLoc loc) {
  lastLoc = loc;
  if (path == AtomicPath::tma && (src.space() != Space::shared || dst.space() != Space::global))
    fail(loc, "a TMA reduce-add adds a shared buffer into a global window");
  if (path == AtomicPath::tma && order != MemoryOrder::relaxed)
    fail(loc, "a TMA reduce-add is relaxed; use MemoryOrder::relaxed, or AtomicPath::threads for "
              "ordered adds");
  Program &p = Program::current(loc);
  requireStatic(dst, "atomic_add", loc);
  if (dst.shape() != src.shape())
    fail(loc, fmt::format("atomic_add source {} differs from destination {}", shapeText(src.shape()),
                          shapeText(dst.shape())));
  if (dst.space() != Space::global && dst.space() != Space::shared)
    fail(loc, fmt::format("atomic_add destination must be global or shared, not {}", spaceName(dst.space())));
  auto op = tile::AtomicAddOp::create(p.builder(), p.location(loc), src.value(), dst.value(),
                                      ValueRange{}, toOrder(order));
  if (path == AtomicPath::tma) op.setTma(true);
}

void tessel::atomic_add(const Ref &dst, Expr value, MemoryOrder order, SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  const Buffer &buf = dst.buffer();
  if (buf.space() != Space::global && buf.space() != Space::shared)
    fail(loc, fmt::format("atomic_add destination must be global or shared, not {}", spaceName(buf.space())));
  Type elt = toMlir(&p.context(), buf.dtype());
  Value v = isHost(*value.node) || value.node->kind == ExprNode::FConst
                ? value.value(buf.dtype())
                : convertTo(p.builder(), p.location(loc), value.value(value.type()), elt);
  tile::AtomicAddOp::create(p.builder(), p.location(loc), v, buf.value(), indexValues(dst.index()),
                            toOrder(order));
}
