//===- Buffers.cpp - the DSL's buffers ------------------------------------===//
//
// Shared, fragment, local and tensor-memory allocations, tensor-memory
// aliases and layout annotations; element access through Ref (loads and
// stores); views of a buffer: tiles, a tensor bounded by run-time limits,
// another rank's tensor. Each checks its arguments at the user's line and
// builds one op.
//
//===----------------------------------------------------------------------===//
#include "tessel/dsl/Program.h"
#include "DslInternal.h"
#include "ExprInternal.h"
#include "tessel/Dialect/Tile/TileDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"

#include <fmt/format.h>

using namespace mlir;
using namespace tessel;
using namespace tessel::detail;

const char *tessel::detail::spaceName(Space s) {
  static const char *names[] = {"global", "shared", "fragment", "local", "tensor-memory"};
  return names[static_cast<int>(s)];
}

std::string tessel::detail::shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + (shape[i] < 0 ? std::string("?") : std::to_string(shape[i]));
  return s + "]";
}

//===----------------------------------------------------------------------===//
// Allocations
//===----------------------------------------------------------------------===//

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

//===----------------------------------------------------------------------===//
// Element access
//===----------------------------------------------------------------------===//

Value Buffer::value() const {
  if (param >= 0) return Program::current(lastLoc).paramValue(param, lastLoc);
  if (!impl) fail(lastLoc, "use of an empty Buffer");
  return Value::getFromOpaquePointer(impl);
}

Ref Buffer::operator()(Expr i, SrcLoc loc) const { return at({i}, loc); }
Ref Buffer::operator()(Expr i, Expr j, SrcLoc loc) const { return at({i, j}, loc); }
Ref Buffer::operator()(Expr i, Expr j, Expr k, SrcLoc loc) const { return at({i, j, k}, loc); }
Ref Buffer::operator()(Expr i, Expr j, Expr k, Expr l, SrcLoc loc) const {
  return at({i, j, k, l}, loc);
}
Ref Buffer::operator()(Expr i, Expr j, Expr k, Expr l, Expr m, SrcLoc loc) const {
  return at({i, j, k, l, m}, loc);
}
Ref Buffer::operator()(Expr i, Expr j, Expr k, Expr l, Expr m, Expr n, SrcLoc loc) const {
  return at({i, j, k, l, m, n}, loc);
}

Ref Buffer::at(std::vector<Expr> idx, SrcLoc loc) const {
  if (static_cast<int64_t>(idx.size()) != rank())
    fail(loc, fmt::format("a rank-{} buffer is indexed with {} indices", rank(), idx.size()));
  return Ref(*this, std::move(idx), loc);
}

SmallVector<Value> tessel::detail::indexValues(const std::vector<Expr> &idx) {
  SmallVector<Value> out;
  for (const Expr &e : idx) {
    if (isFloat(e.type()) || e.node->kind == ExprNode::FConst)
      fail(lastLoc, "buffer indices must be integers");
    // A value computed in the kernel (an i32 read from a tensor of
    // offsets, a u8 code) is converted as cast() would; constants and
    // symbols are built as indices directly.
    if (e.node->kind == ExprNode::Val && e.type() != DType::index) {
      Program &p = Program::current(lastLoc);
      out.push_back(convertTo(p.builder(), p.location(lastLoc), e.value(e.type()),
                              p.builder().getIndexType()));
      continue;
    }
    out.push_back(e.value(DType::index));
  }
  return out;
}

Ref::operator Expr() const {
  lastLoc = where;
  Program &p = Program::current(where);
  Value v = memref::LoadOp::create(p.builder(), p.location(where), buf.value(), indexValues(indices));
  return fromValue(v);
}

Ref &Ref::operator=(const Expr &v) {
  lastLoc = where;
  Program &p = Program::current(where);
  OpBuilder &b = p.builder();
  Location l = p.location(where);
  Type elt = toMlir(&p.context(), buf.dtype());
  DType src = v.node->kind == ExprNode::FConst ? buf.dtype() : v.type();
  Value value = convertTo(b, l, v.value(isHost(*v.node) ? buf.dtype() : src), elt);
  memref::StoreOp::create(b, l, value, buf.value(), indexValues(indices));
  return *this;
}

Ref &Ref::operator+=(const Expr &v) {
  Expr sum = static_cast<Expr>(*this) + v;
  return *this = sum;
}

//===----------------------------------------------------------------------===//
// Views
//===----------------------------------------------------------------------===//

Buffer Buffer::tile(std::vector<Expr> offsets, std::vector<int64_t> sizes, SrcLoc loc) const {
  lastLoc = loc;
  Program &p = Program::current(loc);
  if (offsets.size() != dims.size() || sizes.size() != dims.size())
    fail(loc, fmt::format("a tile of a rank-{} buffer needs {} offsets and sizes, got {} and {}",
                          rank(), rank(), offsets.size(), sizes.size()));
  std::vector<int64_t> window(sizes), shape;
  llvm::SmallVector<bool> dropped(sizes.size(), false);
  for (size_t d = 0; d < dims.size(); ++d) {
    if (sizes[d] == drop) window[d] = 1, dropped[d] = true;
    else shape.push_back(sizes[d]);
    if (window[d] < 0)
      fail(loc, fmt::format("tile sizes must be positive (or `drop`), got {}", shapeText(sizes)));
    int64_t off;
    if (dims[d] >= 0 && window[d] > dims[d])
      fail(loc, fmt::format("tile {} does not fit in buffer {} (dimension {})", shapeText(sizes),
                            shapeText(dims), d));
    if (dims[d] >= 0 && offsets[d].isConstant(&off) && (off < 0 || off + window[d] > dims[d]))
      fail(loc, fmt::format("tile {} at offset {} lies outside buffer {} in dimension {}",
                            shapeText(sizes), off, shapeText(dims), d));
  }
  if (shape.empty()) fail(loc, "a tile keeps at least one dimension; index the buffer instead");
  auto region = tile::RegionOp::create(p.builder(), p.location(loc), value(), indexValues(offsets),
                                       ArrayRef<int64_t>(window), dropped);
  return Buffer::wrap(region.getResult().getAsOpaquePointer(), shape, elt, where);
}

/// `source` (a kernel tensor, or a peer() of one) seen up to `limits`;
/// `what` names it in messages.
static Buffer boundedView(mlir::Value source, const std::vector<int64_t> &dims, DType elt,
                          Space where, std::vector<Expr> limits, const std::string &what,
                          SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  if (limits.size() != dims.size())
    fail(loc, fmt::format("{} has {} dimensions; bounded() takes one limit for each, got {}", what,
                          dims.size(), limits.size()));
  for (Expr &limit : limits)
    if (limit.type() != DType::index && limit.type() != DType::i32 && limit.type() != DType::i64)
      fail(loc, fmt::format("bounded(): limits are integers, got {}", tessel::name(limit.type())));
  SmallVector<Value> values;
  for (Expr &limit : limits) {
    Value v = limit.value(limit.type() == DType::index || limit.node->kind != ExprNode::Val
                              ? DType::index
                              : limit.type());
    if (!v.getType().isIndex())
      v = arith::IndexCastOp::create(p.builder(), p.location(loc), p.builder().getIndexType(), v);
    values.push_back(v);
  }
  auto bound = tile::BoundOp::create(p.builder(), p.location(loc), source.getType(), source, values);
  return Buffer::wrap(bound.getResult().getAsOpaquePointer(), dims, elt, where);
}

Buffer Tensor::bounded(std::vector<Expr> limits, SrcLoc loc) const {
  return boundedView(value(), dims, elt, where, std::move(limits),
                     fmt::format("tensor '{}'", label), loc);
}

Buffer Buffer::bounded(std::vector<Expr> limits, SrcLoc loc) const {
  lastLoc = loc;
  if (!value().getDefiningOp<tile::PeerOp>())
    fail(loc, "bounded() takes a kernel tensor or another rank's whole copy of one (peer()), not "
              "a window or a buffer of the kernel's");
  return boundedView(value(), dims, elt, where, std::move(limits), "the peer() tensor", loc);
}

Buffer tessel::peer(const Tensor &tensor, Expr rank, SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  if (rank.type() != DType::index && rank.type() != DType::i32 && rank.type() != DType::i64)
    fail(loc, fmt::format("peer(): the rank is an integer, got {}", tessel::name(rank.type())));
  Value r = rank.value(rank.type() == DType::index || rank.node->kind != ExprNode::Val ? DType::index
                                                                                      : rank.type());
  if (!r.getType().isIndex())
    r = arith::IndexCastOp::create(p.builder(), p.location(loc), p.builder().getIndexType(), r);
  Value source = tensor.value();
  if (!llvm::isa<BlockArgument>(source))
    fail(loc, fmt::format("peer(): '{}' is not a kernel tensor parameter", tensor.name()));
  auto peerOp = tile::PeerOp::create(p.builder(), p.location(loc), source.getType(), source, r);
  return Buffer::wrap(peerOp.getResult().getAsOpaquePointer(), tensor.shape(), tensor.dtype(),
                      Space::global);
}

Buffer Buffer::wrap(void *opaqueValue, std::vector<int64_t> shape, DType type, Space space) {
  Buffer b;
  b.impl = opaqueValue;
  b.dims = std::move(shape);
  b.elt = type;
  b.where = space;
  return b;
}
