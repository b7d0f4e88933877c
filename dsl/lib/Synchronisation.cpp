//===- Synchronisation.cpp - clusters, roles, mbarriers and flags ---------===//
//
// The DSL calls by which threads, blocks and ranks wait for one another:
// thread-block clusters, hand-scheduled roles (a range of threads with its
// own body and register budget), mbarriers with the TMA copies and MMA
// commits that arrive on them, and signal/wait flags in global memory.
//
//===----------------------------------------------------------------------===//
#include "tessel/dsl/Program.h"
#include "DslInternal.h"
#include "tessel/Dialect/Tile/TileDialect.h"

#include "mlir/IR/Builders.h"

#include <fmt/format.h>

using namespace mlir;
using namespace tessel;
using namespace tessel::detail;

void tessel::cluster_dims(std::vector<int64_t> dims, SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  tile::KernelOp kernel = enclosingKernel(p, loc);
  if (kernel.getCluster()) fail(loc, "cluster_dims is given once per kernel");
  size_t rank = kernel.getGrid().getNumResults();
  if (dims.size() != rank)
    fail(loc, fmt::format("cluster_dims takes one extent per grid dimension ({}), got {}", rank,
                          dims.size()));
  int64_t blocks = 1;
  for (int64_t d : dims) {
    if (d < 1) fail(loc, fmt::format("cluster extents must be positive, got {}", d));
    blocks *= d;
  }
  if (blocks > 8) fail(loc, fmt::format("a cluster holds at most 8 blocks, got {}", blocks));
  kernel.setClusterAttr(p.builder().getDenseI64ArrayAttr(dims));
}

Buffer tessel::alloc_barriers(int64_t count, int64_t arrivals, std::string name, SrcLoc loc) {
  if (count < 1 || arrivals < 1)
    fail(loc, fmt::format("alloc_barriers needs a positive count and arrival count, got {} and {}",
                          count, arrivals));
  // PTX's mbarrier.init takes an arrival count below 2^20.
  if (arrivals >= (int64_t{1} << 20))
    fail(loc, fmt::format("alloc_barriers: an mbarrier counts at most 2^20 - 1 arrivals, got {}",
                          arrivals));
  Buffer bars = alloc_shared({count}, DType::i64, std::move(name), loc);
  Program &p = Program::current(loc);
  for (int64_t i = 0; i < count; ++i)
    tile::MbarrierInitOp::create(p.builder(), p.location(loc), bars.value(), Expr(i).value(),
                                 p.builder().getI64IntegerAttr(arrivals));
  return bars;
}

void tessel::role(int64_t first, int64_t threads, std::function<void()> body,
                  int64_t maxRegisters, SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  OpBuilder &b = p.builder();
  auto op = tile::RoleOp::create(b, p.location(loc), b.getI64IntegerAttr(first),
                                 b.getI64IntegerAttr(threads),
                                 maxRegisters ? b.getI64IntegerAttr(maxRegisters) : IntegerAttr());
  Block *block = &op.getBody().emplaceBlock();
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(block);
  body();
}

static void checkBarriers(const Buffer &bars, SrcLoc loc) {
  if (bars.space() != Space::shared || bars.dtype() != DType::i64 || bars.rank() != 1)
    fail(loc, "mbarriers are a buffer from alloc_barriers");
}

void tessel::mbarrier_expect_tx(const Buffer &bars, Expr index, int64_t bytes, SrcLoc loc) {
  checkBarriers(bars, loc);
  Program &p = Program::current(loc);
  tile::MbarrierExpectTxOp::create(p.builder(), p.location(loc), bars.value(), index.value(),
                                   p.builder().getI64IntegerAttr(bytes));
}

void tessel::mbarrier_arrive(const Buffer &bars, Expr index, SrcLoc loc) {
  checkBarriers(bars, loc);
  Program &p = Program::current(loc);
  tile::MbarrierArriveOp::create(p.builder(), p.location(loc), bars.value(), index.value(),
                                 /*each_thread=*/false);
}

void tessel::mbarrier_arrive_each(const Buffer &bars, Expr index, SrcLoc loc) {
  checkBarriers(bars, loc);
  Program &p = Program::current(loc);
  tile::MbarrierArriveOp::create(p.builder(), p.location(loc), bars.value(), index.value(),
                                 /*each_thread=*/true);
}

void tessel::mbarrier_wait(const Buffer &bars, Expr index, Expr parity, SrcLoc loc) {
  checkBarriers(bars, loc);
  Program &p = Program::current(loc);
  tile::MbarrierWaitOp::create(p.builder(), p.location(loc), bars.value(), index.value(),
                               parity.value());
}

void tessel::mma_commit(const Buffer &bars, Expr index, SrcLoc loc) {
  checkBarriers(bars, loc);
  Program &p = Program::current(loc);
  tile::MmaCommitOp::create(p.builder(), p.location(loc), bars.value(), index.value());
}

void tessel::copy_async(const Buffer &src, const Buffer &dst, const Buffer &bars, Expr index,
                        SrcLoc loc) {
  checkBarriers(bars, loc);
  if (src.space() != Space::global || dst.space() != Space::shared)
    fail(loc, "copy_async copies a global window into a shared buffer");
  Program &p = Program::current(loc);
  tile::CopyAsyncOp::create(p.builder(), p.location(loc), src.value(), dst.value(), bars.value(),
                            index.value());
}

static void checkFlags(const Buffer &flags, const std::vector<Expr> &index, const char *what,
                       SrcLoc loc) {
  if (flags.space() != Space::global || flags.dtype() != DType::i32)
    fail(loc, fmt::format("{}: flags are an i32 global tensor, got {} {}", what,
                          spaceName(flags.space()), tessel::name(flags.dtype())));
  if (index.size() != static_cast<size_t>(flags.rank()))
    fail(loc, fmt::format("{}: one index per dimension of the flags ({}), got {}", what,
                          flags.rank(), index.size()));
}

static void createSignal(const Buffer &flags, std::vector<Expr> index, Expr value, bool add,
                         SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  checkFlags(flags, index, add ? "signal_add" : "signal", loc);
  tile::SignalOp::create(p.builder(), p.location(loc), value.value(DType::i32), flags.value(),
                         indexValues(index), add);
}

void tessel::signal(const Buffer &flags, std::vector<Expr> index, Expr value, SrcLoc loc) {
  createSignal(flags, std::move(index), value, /*add=*/false, loc);
}

void tessel::signal_add(const Buffer &flags, std::vector<Expr> index, Expr value, SrcLoc loc) {
  createSignal(flags, std::move(index), value, /*add=*/true, loc);
}

void tessel::wait(const Buffer &flags, std::vector<Expr> index, Expr value, int64_t timeout_ms,
                  SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  checkFlags(flags, index, "wait", loc);
  if (timeout_ms <= 0 || timeout_ms > 3600 * 1000)
    fail(loc, fmt::format("wait: timeout_ms must be in (0, 3600000], got {}", timeout_ms));
  tile::WaitOp::create(p.builder(), p.location(loc), flags.value(), indexValues(index),
                       value.value(DType::i32), p.builder().getI64IntegerAttr(timeout_ms));
}
