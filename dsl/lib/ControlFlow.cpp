//===- ControlFlow.cpp - loops and conditionals in the DSL ----------------===//
//
// The DSL calls that build control flow: element loops (parallel),
// pipelined, persistent and serial loops (with carried values), block
// rasterization (use_swizzle), and conditionals.
//
//===----------------------------------------------------------------------===//
#include "tessel/dsl/Program.h"
#include "DslInternal.h"
#include "ExprInternal.h"
#include "tessel/Dialect/Tile/TileDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"

#include <fmt/format.h>

using namespace mlir;
using namespace tessel;
using namespace tessel::detail;

void tessel::parallel(std::vector<int64_t> extents, std::function<void(std::vector<Expr>)> body,
                      SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  if (extents.empty()) fail(loc, "parallel needs at least one extent");
  for (int64_t e : extents)
    if (e <= 0) fail(loc, fmt::format("parallel extents must be positive, got {}", shapeText(extents)));
  OpBuilder &b = p.builder();
  OperationState state(p.location(loc), tile::ParallelOp::getOperationName());
  state.addAttribute("extents", b.getDenseI64ArrayAttr(extents));
  Block *block = new Block();
  state.addRegion()->push_back(block);
  std::vector<Expr> ivs;
  for (size_t i = 0; i < extents.size(); ++i)
    ivs.push_back(fromValue(block->addArgument(b.getIndexType(), p.location(loc))));
  b.create(state);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(block);
  body(ivs);
}

void tessel::parallel(int64_t n, std::function<void(Expr)> body, SrcLoc loc) {
  parallel(std::vector<int64_t>{n}, [&](std::vector<Expr> i) { body(i[0]); }, loc);
}
void tessel::parallel(int64_t m, int64_t n, std::function<void(Expr, Expr)> body, SrcLoc loc) {
  parallel(std::vector<int64_t>{m, n}, [&](std::vector<Expr> i) { body(i[0], i[1]); }, loc);
}

void tessel::pipelined(Expr count, int stages, std::function<void(Expr)> body, SrcLoc loc) {
  pipelined(count, stages, PipelineOptions{}, std::move(body), loc);
}

void tessel::pipelined(Expr count, int stages, PipelineOptions options,
                       std::function<void(Expr)> body, SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  if (stages < 1) fail(loc, fmt::format("pipelined needs at least 1 stage, got {}", stages));
  OpBuilder &b = p.builder();
  Location l = p.location(loc);
  Value lb = Expr(0).value(), ub = count.value(DType::index), step = Expr(1).value();
  OperationState state(l, tile::PipelinedOp::getOperationName());
  state.addOperands({lb, ub, step});
  state.addAttribute("num_stages", b.getI64IntegerAttr(stages));
  if (options.warp_specialize != WarpSpecialize::automatic)
    state.addAttribute("warp_specialize",
                       b.getBoolAttr(options.warp_specialize == WarpSpecialize::on));
  if (options.pingpong) state.addAttribute("pingpong", b.getUnitAttr());
  if (options.overlap_mma) {
    if (stages < 2)
      fail(loc, fmt::format("overlap_mma releases each stage an iteration late, which needs at "
                            "least 2 stages, got {}",
                            stages));
    state.addAttribute("overlap_mma", b.getUnitAttr());
  }
  Block *block = new Block();
  state.addRegion()->push_back(block);
  Expr iv = fromValue(block->addArgument(b.getIndexType(), l));
  b.create(state);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(block);
  body(iv);
}

std::pair<Expr, Expr> tessel::use_swizzle(Expr bx, Expr by, Expr gridX, Expr gridY, int panel,
                                          SrcLoc loc) {
  if (panel < 1) fail(loc, fmt::format("use_swizzle needs a panel of at least 1 row, got {}", panel));
  // Blocks launch x-fastest; group `panel` rows of tiles and walk each
  // group column by column, so the blocks in flight share A rows and B
  // columns in L2.
  Expr linear = by * gridX + bx;
  Expr perGroup = gridX * Expr(int64_t(panel));
  Expr firstRow = (linear / perGroup) * Expr(int64_t(panel));
  Expr rows = min(gridY - firstRow, Expr(int64_t(panel)));
  Expr inGroup = linear % perGroup;
  return {inGroup / rows, firstRow + inGroup % rows};
}

void tessel::persistent(std::vector<Expr> tiles, std::function<void(std::vector<Expr>)> body,
                        SrcLoc loc) {
  persistent(std::move(tiles), TileWalk::round_robin, std::move(body), loc);
}

void tessel::persistent(std::vector<Expr> tiles, TileWalk walk,
                        std::function<void(std::vector<Expr>)> body, SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  OpBuilder &b = p.builder();
  Location l = p.location(loc);
  auto kernel = llvm::dyn_cast<tile::KernelOp>(b.getInsertionBlock()->getParentOp());
  if (!kernel) fail(loc, "persistent belongs at the top of a kernel body, not inside other code");
  if (kernel.getPersistent()) fail(loc, "persistent is given once per kernel");
  if (tiles.empty() || tiles.size() > 3)
    fail(loc, fmt::format("persistent takes 1 to 3 tile counts, got {}", tiles.size()));
  kernel.setPersistent(true);
  Expr total = tiles[0];
  for (size_t i = 1; i < tiles.size(); ++i) total = total * tiles[i];
  // The launch is one-dimensional: block b takes tiles b, b + blocks, ...
  Value first = kernel.getBlockIndices().front();
  Value step = tile::NumBlocksOp::create(b, l, b.getIndexType());
  auto loop = scf::ForOp::create(b, l, first, total.value(DType::index), step);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(loop.getBody()->getTerminator());
  Expr t = fromValue(loop.getInductionVar());
  if (walk == TileWalk::serpentine) {
    // Round r covers tiles [r * blocks, (r + 1) * blocks). Counting the
    // direction from the last round keeps that one forward, so the loop's
    // own bound (t < total) still tells which blocks have a tile in it.
    Expr blocks = fromValue(step), block = fromValue(first);
    Expr round = t / blocks, lastRound = (total - 1) / blocks;
    t = select((lastRound - round) % 2 == Expr(1), round * blocks + (blocks - 1 - block), t);
  }
  std::vector<Expr> index;
  for (size_t i = 0; i + 1 < tiles.size(); ++i) {
    index.push_back(t % tiles[i]);
    t = t / tiles[i];
  }
  index.push_back(t);
  body(index);
}

void tessel::serial(Expr count, std::function<void(Expr)> body, SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  OpBuilder &b = p.builder();
  Location l = p.location(loc);
  auto loop = scf::ForOp::create(b, l, Expr(0).value(), count.value(DType::index), Expr(1).value());
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(loop.getBody()->getTerminator());
  body(fromValue(loop.getInductionVar()));
}

std::vector<Expr> tessel::serial(Expr count, std::vector<Expr> init,
                                 std::function<std::vector<Expr>(Expr, std::vector<Expr>)> body,
                                 SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  OpBuilder &b = p.builder();
  Location l = p.location(loc);
  if (init.empty()) fail(loc, "serial with carried values needs at least one initial value");
  SmallVector<Value> inits;
  std::vector<DType> types;
  for (Expr &e : init) {
    types.push_back(e.type());
    inits.push_back(e.value(e.type()));
  }
  auto loop = scf::ForOp::create(b, l, Expr(0).value(), count.value(DType::index),
                                 Expr(1).value(), inits);
  {
    OpBuilder::InsertionGuard guard(b);
    Block *block = loop.getBody();
    // Built without a body builder: the block has no terminator yet.
    b.setInsertionPointToEnd(block);
    std::vector<Expr> carried;
    for (Value arg : loop.getRegionIterArgs()) carried.push_back(fromValue(arg));
    std::vector<Expr> next = body(fromValue(loop.getInductionVar()), carried);
    lastLoc = loc;
    if (next.size() != init.size())
      fail(loc, fmt::format("serial carries {} values but its body returned {}", init.size(),
                            next.size()));
    SmallVector<Value> yields;
    for (size_t i = 0; i < next.size(); ++i) {
      Value v = next[i].value(types[i]);
      if (v.getType() != inits[i].getType())
        fail(loc, fmt::format("serial: carried value {} is {} but the body returned {}; cast it",
                              i, name(types[i]), name(next[i].type())));
      yields.push_back(v);
    }
    scf::YieldOp::create(b, l, yields);
  }
  std::vector<Expr> out;
  for (Value r : loop.getResults()) out.push_back(fromValue(r));
  return out;
}

Expr tessel::serial(Expr count, Expr init, std::function<Expr(Expr, Expr)> body, SrcLoc loc) {
  return serial(
      count, std::vector<Expr>{init},
      [&](Expr i, std::vector<Expr> carried) { return std::vector<Expr>{body(i, carried[0])}; },
      loc)[0];
}

void tessel::if_(Expr cond, std::function<void()> then, std::function<void()> otherwise, SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  if (cond.type() != DType::i1) fail(loc, "if_ needs a comparison as its condition");
  OpBuilder &b = p.builder();
  auto op = scf::IfOp::create(b, p.location(loc), cond.value(DType::i1), static_cast<bool>(otherwise));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(op.thenBlock()->getTerminator());
  then();
  if (otherwise) {
    b.setInsertionPoint(op.elseBlock()->getTerminator());
    otherwise();
  }
}
