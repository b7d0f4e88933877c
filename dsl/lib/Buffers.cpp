//===- Buffers.cpp - the DSL's buffers ------------------------------------===//
//
// Shared, fragment, local and tensor-memory allocations, tensor-memory
// aliases and layout annotations: each checks its arguments at the user's
// line and builds one tile op.
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

static Buffer allocate(Space space, std::vector<int64_t> shape, DType type, const std::string &name,
                       SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  if (shape.empty()) fail(loc, "a buffer needs at least one dimension");
  for (int64_t d : shape)
    if (d <= 0) fail(loc, fmt::format("{} buffer dimensions must be positive, got {}", spaceName(space), shapeText(shape)));
  auto alloc = tile::AllocOp::create(
      p.builder(), p.location(loc),
      tile::getTileMemRefType(shape, toMlir(&p.context(), type), static_cast<tile::MemorySpace>(static_cast<int>(space))), IntegerAttr(),
      Attribute(), name.empty() ? StringAttr() : p.builder().getStringAttr(name), IntegerAttr());
  return Buffer::wrap(alloc.getResult().getAsOpaquePointer(), shape, type, space);
}

Buffer tessel::alloc_shared(std::vector<int64_t> s, DType t, std::string name, SrcLoc loc) {
  return allocate(Space::shared, s, t, name, loc);
}
Buffer tessel::alloc_shared_stages(int64_t stages, std::vector<int64_t> s, DType t,
                                   std::string name, SrcLoc loc) {
  if (stages < 1)
    fail(loc, fmt::format("alloc_shared_stages needs at least one stage, got {}", stages));
  Buffer b = allocate(Space::shared, s, t, name, loc);
  mlir::cast<tile::AllocOp>(b.value().getDefiningOp())
      .setStagesAttr(Program::current(loc).builder().getI64IntegerAttr(stages));
  return b;
}
Buffer Buffer::stage(Expr index, SrcLoc loc) const {
  lastLoc = loc;
  Program &p = Program::current(loc);
  auto alloc = value().getDefiningOp<tile::AllocOp>();
  if (!alloc || !alloc.getStages())
    fail(loc, "stage() picks a copy of a buffer from alloc_shared_stages");
  auto op = tile::StageOp::create(p.builder(), p.location(loc), value().getType(), value(),
                                  index.value(DType::index));
  return Buffer::wrap(op.getResult().getAsOpaquePointer(), dims, elt, where);
}
Buffer tessel::alloc_fragment(std::vector<int64_t> s, DType t, std::string name, SrcLoc loc) {
  return allocate(Space::fragment, s, t, name, loc);
}
Buffer tessel::alloc_local(std::vector<int64_t> s, DType t, std::string name, SrcLoc loc) {
  return allocate(Space::local, s, t, name, loc);
}
Buffer tessel::alloc_tmem(std::vector<int64_t> s, DType t, std::string name, bool unpacked,
                          SrcLoc loc) {
  Buffer b = allocate(Space::tmem, s, t, name, loc);
  auto alloc = mlir::cast<tile::AllocOp>(b.value().getDefiningOp());
  if (unpacked) alloc.setUnpacked(true);
  // The verifier names the rule broken (rows, element type, columns), at
  // the user's line.
  verifyAtUserLine(alloc);
  return b;
}

Buffer tessel::alias_tmem(const Buffer &of, std::vector<int64_t> s, DType t, SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  if (of.space() != Space::tmem) fail(loc, "alias_tmem aliases a tensor-memory buffer");
  auto alias = tile::TmemAliasOp::create(
      p.builder(), p.location(loc),
      tile::getTileMemRefType(s, toMlir(&p.context(), t), tile::MemorySpace::tmem), of.value());
  // The verifier names the rule broken (rows, columns), at the user's line.
  verifyAtUserLine(alias);
  return Buffer::wrap(alias.getResult().getAsOpaquePointer(), s, t, Space::tmem);
}

void tessel::annotate_layout(const Buffer &buf, std::vector<int64_t> strides, SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  if (buf.space() != Space::shared)
    fail(loc, fmt::format("strided layouts are annotated on shared buffers, not {} (fragment "
                          "layouts are inferred)", spaceName(buf.space())));
  if (static_cast<int64_t>(strides.size()) != buf.rank())
    fail(loc, fmt::format("a rank-{} buffer needs {} strides, got {}", buf.rank(), buf.rank(), strides.size()));
  MLIRContext *ctx = &p.context();
  AffineExpr e = getAffineConstantExpr(0, ctx);
  for (size_t d = 0; d < strides.size(); ++d) {
    if (strides[d] <= 0) fail(loc, "layout strides must be positive");
    e = e + getAffineDimExpr(d, ctx) * strides[d];
  }
  tile::AnnotateLayoutOp::create(p.builder(), p.location(loc), buf.value(),
                                 AffineMapAttr::get(AffineMap::get(strides.size(), 0, e)));
}

