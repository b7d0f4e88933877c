//===- TileOps.cpp - tile dialect operations ------------------------------===//
//
// Verifiers name the offending operand and print both shapes, so that a DSL
// user reading the message at their source line knows what to change.
//
//===----------------------------------------------------------------------===//
#include "tessel/Dialect/Tile/TileDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace tessel::tile;

static std::string shapeString(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(shape)) {
    if (i) s += ", ";
    s += ShapedType::isDynamic(d) ? "?" : std::to_string(d);
  }
  return s + "]";
}

static MemRefType memrefOf(Value v) { return llvm::cast<MemRefType>(v.getType()); }
static MemorySpace spaceOf(Value v) { return getMemorySpace(memrefOf(v)); }

//===----------------------------------------------------------------------===//
// KernelOp
//===----------------------------------------------------------------------===//

SmallVector<BlockArgument> KernelOp::getSymbolParams() {
  SmallVector<BlockArgument> symbols;
  for (BlockArgument arg : getParams())
    if (arg.getType().isIndex()) symbols.push_back(arg);
  return symbols;
}

ParseResult KernelOp::parse(OpAsmParser &parser, OperationState &result) {
  StringAttr name;
  if (parser.parseSymbolName(name, SymbolTable::getSymbolAttrName(), result.attributes))
    return failure();
  SmallVector<OpAsmParser::Argument> args;
  if (parser.parseArgumentList(args, OpAsmParser::Delimiter::Paren, /*allowType=*/true))
    return failure();
  int64_t numParams = args.size();
  SmallVector<OpAsmParser::Argument> blockIdx;
  AffineMapAttr grid;
  int64_t threads;
  if (parser.parseKeyword("grid") ||
      parser.parseArgumentList(blockIdx, OpAsmParser::Delimiter::Paren) ||
      parser.parseEqual() || parser.parseAttribute(grid, "grid", result.attributes) ||
      parser.parseKeyword("threads") || parser.parseLParen() ||
      parser.parseInteger(threads) || parser.parseRParen())
    return failure();
  Builder &b = parser.getBuilder();
  for (auto &idx : blockIdx) {
    idx.type = b.getIndexType();
    args.push_back(idx);
  }
  result.addAttribute("threads", b.getI64IntegerAttr(threads));
  result.addAttribute("num_params", b.getI64IntegerAttr(numParams));
  if (parser.parseOptionalAttrDictWithKeyword(result.attributes)) return failure();
  Region *body = result.addRegion();
  if (parser.parseRegion(*body, args)) return failure();
  if (body->empty()) body->emplaceBlock();
  return success();
}

void KernelOp::print(OpAsmPrinter &p) {
  p << ' ';
  p.printSymbolName(getSymName());
  p << '(';
  llvm::interleaveComma(getParams(), p, [&](BlockArgument a) {
    p.printRegionArgument(a);
  });
  p << ") grid(";
  llvm::interleaveComma(getBlockIndices(), p, [&](BlockArgument a) { p.printOperand(a); });
  p << ") = ";
  p.printAttributeWithoutType(getGridAttr());
  p << " threads(" << getThreads() << ")";
  p.printOptionalAttrDictWithKeyword(
      (*this)->getAttrs(), {getSymNameAttrName(), getGridAttrName(), getThreadsAttrName(),
                            getNumParamsAttrName()});
  p << ' ';
  p.printRegion(getBody(), /*printEntryBlockArgs=*/false);
}

LogicalResult KernelOp::verify() {
  AffineMap grid = getGrid();
  if (grid.getNumResults() < 1 || grid.getNumResults() > 3)
    return emitOpError("grid must have 1 to 3 dimensions, got ") << grid.getNumResults();
  if (grid.getNumDims() != 0)
    return emitOpError("grid map must have no dimensions, only symbols (the index parameters)");
  int64_t numParams = getNumParams();
  if (numParams < 0 || numParams > (int64_t)getBodyBlock().getNumArguments())
    return emitOpError("num_params out of range");
  if (getBlockIndices().size() != grid.getNumResults())
    return emitOpError("has ") << getBlockIndices().size() << " block indices but the grid has "
                               << grid.getNumResults() << " dimensions";
  for (BlockArgument idx : getBlockIndices())
    if (!idx.getType().isIndex()) return emitOpError("block indices must be of index type");
  size_t numSymbols = getSymbolParams().size();
  if (grid.getNumSymbols() != numSymbols)
    return emitOpError("grid map has ") << grid.getNumSymbols()
                                        << " symbols but the kernel has " << numSymbols
                                        << " index parameters";
  // A CUDA block holds at most 1024 threads; passes that walk the threads'
  // warps or registers rely on it.
  if (getThreads() <= 0 || getThreads() > 1024)
    return emitOpError("threads must be positive and at most 1024 (a CUDA block's limit), got ")
           << getThreads();
  if (std::optional<ArrayRef<int64_t>> cluster = getCluster()) {
    if (cluster->size() != grid.getNumResults())
      return emitOpError("cluster has ") << cluster->size() << " extents but the grid has "
                                         << grid.getNumResults() << " dimensions";
    if (llvm::any_of(*cluster, [](int64_t d) { return d < 1; }))
      return emitOpError("cluster extents must be positive");
    // 8 blocks is the portable cluster size on every sm_90 and sm_100 part.
    if (getClusterSize() > 8)
      return emitOpError("a cluster holds at most 8 blocks, got ") << getClusterSize();
  }
  for (BlockArgument param : getParams()) {
    Type t = param.getType();
    if (auto m = llvm::dyn_cast<MemRefType>(t)) {
      if (getMemorySpace(m) != MemorySpace::global)
        return emitOpError("buffer parameter #") << param.getArgNumber()
                                                << " must be in global memory";
      if (!m.getLayout().isIdentity())
        return emitOpError("buffer parameter #") << param.getArgNumber()
                                                << " must be row-major (identity layout)";
      continue;
    }
    if (!t.isIntOrIndexOrFloat())
      return emitOpError("parameter #") << param.getArgNumber()
                                        << " must be a global memref or a scalar, got " << t;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// AllocOp, RegionOp
//===----------------------------------------------------------------------===//

/// A layout attribute fits a buffer: the right kind for its memory space and
/// the buffer's shape (and element size).
static LogicalResult checkLayoutFits(Operation *op, Attribute layout, MemRefType type) {
  MemorySpace s = getMemorySpace(type);
  if (auto f = llvm::dyn_cast<FragmentLayoutAttr>(layout)) {
    if (s != MemorySpace::fragment)
      return op->emitOpError("a #tile.fragment layout needs a fragment buffer, not ")
             << stringifyMemorySpace(s);
    if (f.getShape() != type.getShape())
      return op->emitOpError("fragment layout shape ")
             << shapeString(f.getShape()) << " differs from buffer shape "
             << shapeString(type.getShape());
    return success();
  }
  if (auto sh = llvm::dyn_cast<SharedLayoutAttr>(layout)) {
    if (s != MemorySpace::shared)
      return op->emitOpError("a #tile.shared layout needs a shared buffer, not ")
             << stringifyMemorySpace(s);
    if (sh.getShape() != type.getShape())
      return op->emitOpError("shared layout shape ")
             << shapeString(sh.getShape()) << " differs from buffer shape "
             << shapeString(type.getShape());
    if (sh.getElementBytes() * 8 != type.getElementTypeBitWidth())
      return op->emitOpError("shared layout is for ")
             << sh.getElementBytes() << "-byte elements, the buffer holds " << type.getElementType();
    return success();
  }
  return success();
}

LogicalResult PeerOp::verify() {
  auto arg = llvm::dyn_cast<BlockArgument>(getSource());
  auto kernel = (*this)->getParentOfType<KernelOp>();
  if (!arg || !kernel || arg.getOwner() != &kernel.getBodyBlock() ||
      arg.getArgNumber() >= kernel.getNumParams())
    return emitOpError("takes a tensor parameter of the kernel, whose every rank's address the "
                       "launch passes");
  if (getMemorySpace(getType()) != MemorySpace::global)
    return emitOpError("takes a global tensor");
  return success();
}

int64_t AllocOp::getTmemColumns() {
  MemRefType type = getType();
  int64_t values = type.getShape().back();
  if (type.getElementTypeBitWidth() == 32 || getUnpacked()) return values;
  return (values + 1) / 2;
}

LogicalResult AllocOp::verifyTmemBuffer() {
  MemRefType type = getType();
  if (type.getRank() != 2 || (type.getShape()[0] != 64 && type.getShape()[0] != 128))
    return emitOpError("a tensor-memory buffer is [64 or 128 rows (TMEM lanes), columns], got ")
           << shapeString(type.getShape());
  Type element = type.getElementType();
  bool wide = element.isF32() || element.isInteger(32);
  if (!wide && !element.isF16() && !element.isBF16())
    return emitOpError("tensor memory holds 32-bit (f32, i32) or 16-bit (f16, bf16) values, not ")
           << element;
  if (wide && getUnpacked())
    return emitOpError("only 16-bit values are packed or unpacked");
  if (getTmemColumns() > 512)
    return emitOpError("spans ") << getTmemColumns()
                                 << " 32-bit columns; tensor memory has 512 per block";
  if (getLayout()) return emitOpError("tensor-memory buffers have no register or shared layout");
  if (std::optional<int64_t> column = getOffset())
    if (*column < 0 || *column + getTmemColumns() > 512)
      return emitOpError("placed at column ")
             << *column << ", its " << getTmemColumns() << " columns pass the 512 there are";
  return success();
}

LogicalResult AllocOp::verify() {
  MemRefType type = getType();
  if (getMemorySpace(type) == MemorySpace::global)
    return emitOpError("cannot allocate global memory in a kernel; use shared, fragment or local");
  for (int64_t d : type.getShape())
    if (d <= 0) return emitOpError("buffer dimensions must be positive, got ")
                       << shapeString(type.getShape());
  if (!type.getLayout().isIdentity())
    return emitOpError("allocations are row-major; use tile.annotate_layout for other layouts");
  if (getMemorySpace(type) == MemorySpace::tmem) {
    if (failed(verifyTmemBuffer())) return failure();
  } else if (getUnpacked()) {
    return emitOpError("only tensor-memory buffers are packed or unpacked");
  }
  if (std::optional<int64_t> stages = getStages()) {
    if (getMemorySpace(type) != MemorySpace::shared)
      return emitOpError("only shared buffers have pipeline stages");
    if (*stages < 1) return emitOpError("stages must be at least 1, got ") << *stages;
  }
  if (std::optional<Attribute> layout = getLayout())
    return checkLayoutFits(*this, *layout, type);
  return success();
}

void RegionOp::build(OpBuilder &b, OperationState &state, Value source, ValueRange offsets,
                     ArrayRef<int64_t> sizes, ArrayRef<bool> dropped) {
  auto srcType = memrefOf(source);
  SmallVector<int64_t> dynOffsets(offsets.size(), ShapedType::kDynamic);
  SmallVector<int64_t> unitStrides(offsets.size(), 1);
  SmallVector<int64_t> shape;
  for (auto [d, size] : llvm::enumerate(sizes))
    if (dropped.empty() || !dropped[d]) shape.push_back(size);
  MemRefType resultType =
      shape.size() == sizes.size()
          ? memref::SubViewOp::inferResultType(srcType, dynOffsets, sizes, unitStrides)
          : memref::SubViewOp::inferRankReducedResultType(shape, srcType, dynOffsets, sizes,
                                                          unitStrides);
  build(b, state, resultType, source, offsets, sizes);
}

std::optional<SmallVector<unsigned>> RegionOp::getKeptDims() {
  ArrayRef<int64_t> sizes = getSizes(), shape = memrefOf(getResult()).getShape();
  SmallVector<unsigned> kept;
  for (auto [d, size] : llvm::enumerate(sizes)) {
    if (kept.size() < shape.size() && shape[kept.size()] == size) kept.push_back(d);
    else if (size != 1) return std::nullopt;
  }
  if (kept.size() != shape.size()) return std::nullopt;
  return kept;
}

LogicalResult BoundOp::verify() {
  MemRefType type = memrefOf(getSource());
  // A kernel tensor, or another rank's copy of one: both have the
  // tensor's extents, which the limits cut.
  Value source = getSource();
  if (auto peer = source.getDefiningOp<PeerOp>()) source = peer.getSource();
  if (getMemorySpace(type) != MemorySpace::global || !llvm::isa<BlockArgument>(source))
    return emitOpError("bounds a kernel tensor parameter or a tile.peer of one, not a window or "
                       "another buffer");
  if ((int64_t)getLimits().size() != type.getRank())
    return emitOpError("needs one limit per dimension: ")
           << getLimits().size() << " for a rank-" << type.getRank() << " tensor";
  return success();
}

LogicalResult RegionOp::verify() {
  MemRefType src = memrefOf(getSource());
  ArrayRef<int64_t> sizes = getSizes();
  if ((int64_t)getOffsets().size() != src.getRank() || (int64_t)sizes.size() != src.getRank())
    return emitOpError("region of a rank-") << src.getRank() << " buffer needs "
                                            << src.getRank() << " offsets and sizes, got "
                                            << getOffsets().size() << " and " << sizes.size();
  for (auto [i, size] : llvm::enumerate(sizes)) {
    if (size <= 0)
      return emitOpError("region sizes must be positive, got ") << shapeString(sizes);
    int64_t dim = src.getDimSize(i);
    if (ShapedType::isDynamic(dim)) continue;
    if (size > dim)
      return emitOpError("region ") << shapeString(sizes) << " is larger than its buffer "
                                    << shapeString(src.getShape()) << " in dimension " << i;
    if (auto off = getConstantIntValue(getOffsets()[i]))
      if (*off < 0 || *off + size > dim)
        return emitOpError("region at offset ")
               << *off << " of size " << size << " lies outside dimension " << i
               << " of buffer " << shapeString(src.getShape());
  }
  if (!getKeptDims())
    return emitOpError("result shape ") << shapeString(memrefOf(getResult()).getShape())
                                        << " is not the region sizes " << shapeString(sizes)
                                        << " less some dimensions of size 1";
  return success();
}

//===----------------------------------------------------------------------===//
// CopyOp, FillOp
//===----------------------------------------------------------------------===//

/// `what` needs a kernel launched in clusters of more than one block.
static LogicalResult verifyInCluster(Operation *op, StringRef what) {
  auto kernel = op->getParentOfType<KernelOp>();
  if (kernel && kernel.getClusterSize() > 1) return success();
  return op->emitOpError() << what
                           << " needs a kernel launched in clusters of several blocks (cluster)";
}

LogicalResult CopyOp::verify() {
  auto src = memrefOf(getSource()), dst = memrefOf(getDest());
  if (src.getShape() != dst.getShape())
    return emitOpError("source shape ") << shapeString(src.getShape())
                                        << " differs from destination shape "
                                        << shapeString(dst.getShape());
  if (src.getNumDynamicDims() || dst.getNumDynamicDims())
    return emitOpError("copy needs static tile shapes; take a tile.region of the tensor");
  if (spaceOf(getSource()) == MemorySpace::local || spaceOf(getDest()) == MemorySpace::local)
    return emitOpError("local buffers are private to a thread; copy them inside tile.parallel");
  if (getMulticast()) {
    if (spaceOf(getSource()) != MemorySpace::global || spaceOf(getDest()) != MemorySpace::shared)
      return emitOpError("multicast copies a global tile into shared memory");
    if (failed(verifyInCluster(*this, "a multicast copy"))) return failure();
  }
  return success();
}

LogicalResult FillOp::verify() {
  auto dst = memrefOf(getDest());
  if (dst.getNumDynamicDims())
    return emitOpError("fill needs a static tile shape; take a tile.region of the tensor");
  if (getValue().getType() != dst.getElementType())
    return emitOpError("value type ") << getValue().getType()
                                      << " differs from the buffer element type "
                                      << dst.getElementType();
  return success();
}

//===----------------------------------------------------------------------===//
// GemmOp
//===----------------------------------------------------------------------===//

LogicalResult GemmOp::verify() {
  auto a = memrefOf(getA()), b = memrefOf(getB()), c = memrefOf(getC());
  auto checkSpace = [&](Value v, StringRef name, bool accumulator) -> LogicalResult {
    MemorySpace s = spaceOf(v);
    // Tensor memory: tcgen05's accumulator, and its A in the ts form.
    bool ok = s == MemorySpace::fragment || s == MemorySpace::tmem ||
              (!accumulator && s == MemorySpace::shared);
    if (!ok)
      return emitOpError("operand ")
             << name << " is in " << stringifyMemorySpace(s) << " memory; gemm needs "
             << (accumulator ? "a fragment or tensor memory" : "shared, fragment or tensor memory");
    return success();
  };
  if (failed(checkSpace(getA(), "A", false)) || failed(checkSpace(getB(), "B", false)) ||
      failed(checkSpace(getC(), "C", true)))
    return failure();
  if (getIssueOnly() && spaceOf(getC()) != MemorySpace::tmem)
    return emitOpError("only a gemm into tensor memory (tcgen05) completes later (issue_only)");
  if (a.getRank() != 2 || b.getRank() != 2 || c.getRank() != 2)
    return emitOpError("operands must be 2-D, got A ")
           << shapeString(a.getShape()) << ", B " << shapeString(b.getShape()) << ", C "
           << shapeString(c.getShape());
  int64_t m = getTransposeA() ? a.getDimSize(1) : a.getDimSize(0);
  int64_t ka = getTransposeA() ? a.getDimSize(0) : a.getDimSize(1);
  int64_t kb = getTransposeB() ? b.getDimSize(1) : b.getDimSize(0);
  int64_t n = getTransposeB() ? b.getDimSize(0) : b.getDimSize(1);
  if (ka != kb)
    return emitOpError("K of operand A ") << shapeString(a.getShape()) << " is " << ka
                                          << " but K of operand B " << shapeString(b.getShape())
                                          << " is " << kb;
  if (c.getDimSize(0) != m || c.getDimSize(1) != n)
    return emitOpError("accumulator C ") << shapeString(c.getShape()) << " must be "
                                         << shapeString({m, n}) << " for A "
                                         << shapeString(a.getShape()) << " and B "
                                         << shapeString(b.getShape());
  // Integer products (i8, u8) accumulate in i32, floating ones in f32/f16.
  bool integer = a.getElementType().isInteger(8);
  if (integer && !c.getElementType().isInteger(32))
    return emitOpError("an 8-bit integer product accumulates in i32, got ") << c.getElementType();
  if (!integer && !c.getElementType().isF32() && !c.getElementType().isF16())
    return emitOpError("accumulator C must be f32 or f16, got ") << c.getElementType();
  if (a.getElementType() != b.getElementType())
    return emitOpError("operand A element type ") << a.getElementType()
                                                  << " differs from operand B element type "
                                                  << b.getElementType();
  if (getBRegisterKOrder()) {
    if (a.getElementTypeBitWidth() != 8 || spaceOf(getA()) != MemorySpace::fragment)
      return emitOpError("b_register_k_order matches B's K to an 8-bit A in registers; A is ")
             << a.getElementType() << " in " << stringifyMemorySpace(spaceOf(getA()))
             << " memory";
    if (ka % 16)
      return emitOpError("b_register_k_order permutes K within groups of 16; K is ") << ka;
  }
  if (!getScaleA() && !getScaleB()) return success();
  return verifyBlockScales(m, n, ka);
}

LogicalResult GemmOp::verifyBlockScales(int64_t m, int64_t n, int64_t k) {
  // MX: e4m3/e5m2 operands, one ue8m0 per 32 of K, in 512-byte atoms of 128
  // rows x 4 K blocks (see the op's description).
  if (!getScaleA() || !getScaleB())
    return emitOpError("a block-scaled gemm takes both scale_a and scale_b");
  Type in = memrefOf(getA()).getElementType();
  if (!llvm::isa<Float8E4M3FNType, Float8E5M2Type>(in))
    return emitOpError("block scales (kind::mxf8f6f4) multiply e4m3 or e5m2 operands, not ") << in;
  if (!memrefOf(getC()).getElementType().isF32())
    return emitOpError("a block-scaled product accumulates in f32");
  if (k % 128)
    return emitOpError("a block-scaled gemm's K (") << k << ") is a multiple of 128: its scales "
                                                        "come in atoms of 4 K blocks of 32";
  int64_t groups = k / 128;
  for (auto [scales, which, rows] : {std::tuple{getScaleA(), "scale_a", m},
                                     std::tuple{getScaleB(), "scale_b", n}}) {
    auto type = memrefOf(scales);
    if (!llvm::isa<Float8E8M0FNUType>(type.getElementType()))
      return emitOpError(which) << " holds ue8m0 (f8E8M0FNU) scales, not "
                                << type.getElementType();
    // Any shape of the right size: the bytes are read in order, atom by
    // atom ([K / 128, ceil(rows / 128), 512], or [atoms, 32, 16] for one
    // K group, as cuBLAS's blocked layout tiles them).
    int64_t atoms = (rows + 127) / 128;
    if (type.getNumElements() != groups * atoms * 512)
      return emitOpError(which) << " is " << shapeString(type.getShape()) << ", "
                                << type.getNumElements() << " scales; for " << rows
                                << (which == StringRef("scale_a") ? " rows" : " columns")
                                << " and K = " << k << " it holds " << groups * atoms * 512
                                << " (K / 128 groups of 512-byte atoms, one per 128)";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// ReduceOp, AtomicAddOp, AnnotateLayoutOp
//===----------------------------------------------------------------------===//

LogicalResult ReduceOp::verify() {
  auto src = memrefOf(getSource()), dst = memrefOf(getDest());
  int64_t dim = getDim();
  if (dim < 0 || dim >= src.getRank())
    return emitOpError("dim ") << dim << " is out of range for source "
                               << shapeString(src.getShape());
  for (Value v : {getSource(), getDest()})
    if (spaceOf(v) != MemorySpace::shared && spaceOf(v) != MemorySpace::fragment)
      return emitOpError("reduce operands must be shared or fragment buffers, ")
             << (v == getSource() ? "source" : "destination") << " is in "
             << stringifyMemorySpace(spaceOf(v)) << " memory";
  SmallVector<int64_t> expected(src.getShape());
  expected.erase(expected.begin() + dim);
  if (expected.empty()) expected.push_back(1);
  if (dst.getShape() != ArrayRef<int64_t>(expected))
    return emitOpError("destination ") << shapeString(dst.getShape()) << " must be "
                                       << shapeString(expected) << " to reduce source "
                                       << shapeString(src.getShape()) << " along dim " << dim;
  // Integers reduce in i32 (signed): signless ones of at most 32 bits.
  auto reducible = [](Type t) {
    return llvm::isa<FloatType>(t) ||
           (t.isSignlessInteger() && t.getIntOrFloatBitWidth() > 1 && t.getIntOrFloatBitWidth() <= 32);
  };
  Type srcElt = src.getElementType(), dstElt = dst.getElementType();
  if (!reducible(srcElt) || !reducible(dstElt) ||
      llvm::isa<FloatType>(srcElt) != llvm::isa<FloatType>(dstElt))
    return emitOpError("reduce works on floating-point buffers, or on signed integer buffers of "
                       "8 to 32 bits on both sides; got ")
           << srcElt << " into " << dstElt;
  return success();
}

LogicalResult AtomicAddOp::verify() {
  auto dst = memrefOf(getDest());
  MemorySpace dstSpace = spaceOf(getDest());
  if (dstSpace != MemorySpace::global && dstSpace != MemorySpace::shared)
    return emitOpError("atomic_add destination must be global or shared, got ")
           << stringifyMemorySpace(dstSpace);
  Type elt = dst.getElementType();
  if (!elt.isF32() && !elt.isF16() && !elt.isBF16() && !elt.isInteger(32) && !elt.isF64())
    return emitOpError("atomic_add supports f32, f16, bf16, f64 and i32, got ") << elt;
  if (auto src = llvm::dyn_cast<MemRefType>(getValue().getType())) {
    if (!getIndices().empty())
      return emitOpError("the region form takes no indices");
    if (src.getShape() != dst.getShape())
      return emitOpError("source tile ") << shapeString(src.getShape())
                                         << " differs from destination tile "
                                         << shapeString(dst.getShape());
    if (dst.getNumDynamicDims())
      return emitOpError("region atomic_add needs static tile shapes");
    return success();
  }
  if ((int64_t)getIndices().size() != dst.getRank())
    return emitOpError("scalar atomic_add into a rank-")
           << dst.getRank() << " buffer needs " << dst.getRank() << " indices, got "
           << getIndices().size();
  if (getValue().getType() != elt)
    return emitOpError("value type ") << getValue().getType()
                                      << " differs from destination element type " << elt;
  return success();
}

/// Flags are 32-bit integers in global memory, indexed in full.
static LogicalResult verifyFlag(Operation *op, Value flags, ValueRange indices) {
  MemRefType type = memrefOf(flags);
  if (getMemorySpace(type) != MemorySpace::global || !type.getElementType().isInteger(32))
    return op->emitOpError("flags are i32 elements of a global buffer, got ") << type;
  if ((int64_t)indices.size() != type.getRank())
    return op->emitOpError("names one flag: ") << type.getRank() << " indices, got "
                                               << indices.size();
  return success();
}

LogicalResult SignalOp::verify() { return verifyFlag(*this, getFlags(), getIndices()); }

LogicalResult WaitOp::verify() {
  if (getTimeoutMs() <= 0 || getTimeoutMs() > 3600 * 1000)
    return emitOpError("timeout_ms must be in (0, 3600000], got ") << getTimeoutMs();
  return verifyFlag(*this, getFlags(), getIndices());
}

LogicalResult AnnotateLayoutOp::verify() {
  auto type = memrefOf(getBuffer());
  MemorySpace s = spaceOf(getBuffer());
  if (s != MemorySpace::shared && s != MemorySpace::fragment)
    return emitOpError("layouts are annotated on shared or fragment buffers, not ")
           << stringifyMemorySpace(s);
  if (!getBuffer().getDefiningOp<AllocOp>())
    return emitOpError("annotate the buffer returned by tile.alloc, not a region of it");
  auto mapAttr = llvm::dyn_cast<AffineMapAttr>(getLayout());
  if (!mapAttr) return checkLayoutFits(*this, getLayout(), type);
  if (s != MemorySpace::shared)
    return emitOpError("an affine layout needs a shared buffer; annotate fragments with #tile.fragment");
  AffineMap map = mapAttr.getValue();
  if (map.getNumDims() != type.getRank() || map.getNumResults() != 1 || map.getNumSymbols())
    return emitOpError("layout must map the ")
           << type.getRank() << " logical indices to one offset, got " << mapAttr;
  // Storage is sized by the offset of the last element, which is only the
  // largest offset when no coefficient is negative.
  for (int64_t d = 0; d < type.getRank(); ++d) {
    SmallVector<int64_t> probe(type.getRank(), 0), base(type.getRank(), 0);
    probe[d] = 1;
    if (map.compose(probe)[0] < map.compose(base)[0] || map.compose(base)[0] != 0)
      return emitOpError("layout offsets must start at 0 and grow with every index");
  }
  return success();
}

//===----------------------------------------------------------------------===//
// ParallelOp, PipelinedOp
//===----------------------------------------------------------------------===//

ParseResult ParallelOp::parse(OpAsmParser &parser, OperationState &result) {
  SmallVector<OpAsmParser::Argument> ivs;
  if (parser.parseArgumentList(ivs, OpAsmParser::Delimiter::Paren) || parser.parseKeyword("in"))
    return failure();
  SmallVector<int64_t> extents;
  if (parser.parseCommaSeparatedList(OpAsmParser::Delimiter::Square, [&]() {
        return parser.parseInteger(extents.emplace_back());
      }))
    return failure();
  for (auto &iv : ivs) iv.type = parser.getBuilder().getIndexType();
  result.addAttribute("extents", parser.getBuilder().getDenseI64ArrayAttr(extents));
  if (parser.parseOptionalAttrDictWithKeyword(result.attributes)) return failure();
  Region *body = result.addRegion();
  if (parser.parseRegion(*body, ivs)) return failure();
  if (body->empty()) body->emplaceBlock();
  return success();
}

void ParallelOp::print(OpAsmPrinter &p) {
  p << " (";
  llvm::interleaveComma(getBody().getArguments(), p, [&](BlockArgument a) { p.printOperand(a); });
  p << ") in [";
  llvm::interleaveComma(getExtents(), p);
  p << "]";
  p.printOptionalAttrDictWithKeyword((*this)->getAttrs(), {getExtentsAttrName()});
  p << ' ';
  p.printRegion(getBody(), /*printEntryBlockArgs=*/false);
}

LogicalResult ParallelOp::verify() {
  if (getExtents().empty()) return emitOpError("needs at least one extent");
  for (int64_t e : getExtents())
    if (e <= 0)
      return emitOpError("extents must be positive, got ") << shapeString(getExtents());
  if (getBody().getNumArguments() != getExtents().size())
    return emitOpError("has ") << getBody().getNumArguments() << " indices for "
                               << getExtents().size() << " extents";
  return success();
}

ParseResult PipelinedOp::parse(OpAsmParser &parser, OperationState &result) {
  OpAsmParser::Argument iv;
  OpAsmParser::UnresolvedOperand lb, ub, step;
  int64_t stages;
  Type index = parser.getBuilder().getIndexType();
  if (parser.parseArgument(iv) || parser.parseEqual() || parser.parseOperand(lb) ||
      parser.parseKeyword("to") || parser.parseOperand(ub) || parser.parseKeyword("step") ||
      parser.parseOperand(step) || parser.parseKeyword("stages") || parser.parseLParen() ||
      parser.parseInteger(stages) || parser.parseRParen() ||
      parser.resolveOperands({lb, ub, step}, index, result.operands))
    return failure();
  iv.type = index;
  result.addAttribute("num_stages", parser.getBuilder().getI64IntegerAttr(stages));
  if (parser.parseOptionalAttrDictWithKeyword(result.attributes)) return failure();
  Region *body = result.addRegion();
  if (parser.parseRegion(*body, {iv})) return failure();
  if (body->empty()) body->emplaceBlock();
  return success();
}

void PipelinedOp::print(OpAsmPrinter &p) {
  p << ' ';
  p.printOperand(getBody().getArgument(0));
  p << " = " << getLower() << " to " << getUpper() << " step " << getStep() << " stages("
    << getNumStages() << ")";
  p.printOptionalAttrDictWithKeyword((*this)->getAttrs(), {getNumStagesAttrName()});
  p << ' ';
  p.printRegion(getBody(), /*printEntryBlockArgs=*/false);
}

LogicalResult PipelinedOp::verify() {
  if (getNumStages() < 1) return emitOpError("num_stages must be at least 1, got ")
                                 << getNumStages();
  if (getBody().getNumArguments() != 1 || !getBody().getArgument(0).getType().isIndex())
    return emitOpError("body must take one index argument");
  if (auto step = getConstantIntValue(getStep()); step && *step <= 0)
    return emitOpError("step must be positive, got ") << *step;
  if (getOverlapMma() && getNumStages() < 2)
    return emitOpError("overlap_mma releases each stage an iteration late, which needs at least 2 "
                       "stages, got ")
           << getNumStages();
  return success();
}

//===----------------------------------------------------------------------===//
// Barriers, pipeline stages, mbarriers and roles
//===----------------------------------------------------------------------===//

LogicalResult BarrierOp::verify() {
  if (getId().has_value() != getThreads().has_value())
    return emitOpError("a named barrier needs both an id and a thread count");
  if (std::optional<int64_t> id = getId(); id && (*id < 1 || *id > 15))
    return emitOpError("named barrier ids are 1 to 15 (0 is __syncthreads), got ") << *id;
  if (std::optional<int64_t> n = getThreads(); n && (*n <= 0 || *n % 32))
    return emitOpError("a named barrier counts whole warps, got ") << *n << " threads";
  if (!getId() && (*this)->getParentOfType<RoleOp>())
    return emitOpError("a block-wide barrier inside a role would wait for threads that never "
                       "reach it; give it the role's id and thread count");
  return success();
}

LogicalResult StageOp::verify() {
  auto alloc = getBuffer().getDefiningOp<AllocOp>();
  if (!alloc || !alloc.getStages())
    return emitOpError("needs a shared alloc with `stages` (a multi-buffered pipeline buffer)");
  if (std::optional<int64_t> i = getConstantIntValue(getIndex());
      i && (*i < 0 || *i >= *alloc.getStages()))
    return emitOpError("stage ") << *i << " is outside the buffer's " << *alloc.getStages()
                                 << " stages";
  return success();
}

/// mbarriers are 8-byte words in shared memory.
static LogicalResult verifyBarriers(Operation *op, Value barriers) {
  MemRefType type = memrefOf(barriers);
  if (getMemorySpace(type) != MemorySpace::shared || type.getRank() != 1 ||
      !type.getElementType().isInteger(64))
    return op->emitOpError("mbarriers must be a rank-1 shared buffer of i64, got ") << type;
  return success();
}

LogicalResult CopyAsyncOp::verify() {
  if (failed(verifyBarriers(*this, getBarriers()))) return failure();
  MemRefType src = memrefOf(getSource()), dst = memrefOf(getDest());
  if (spaceOf(getSource()) != MemorySpace::global || spaceOf(getDest()) != MemorySpace::shared)
    return emitOpError("copies from global to shared memory");
  if (src.getShape() != dst.getShape())
    return emitOpError("source tile ") << shapeString(src.getShape())
                                       << " and destination " << shapeString(dst.getShape())
                                       << " differ";
  if (src.getElementType() != dst.getElementType())
    return emitOpError("cannot convert element types asynchronously (")
           << src.getElementType() << " to " << dst.getElementType() << ")";
  if (getMulticast()) return verifyInCluster(*this, "a multicast copy");
  return success();
}

LogicalResult MbarrierInitOp::verify() {
  // PTX: the expected arrival count is in [1, 2^20 - 1].
  if (getArrivals() <= 0 || getArrivals() >= (1 << 20))
    return emitOpError("arrival count must be in [1, 2^20 - 1], got ") << getArrivals();
  return verifyBarriers(*this, getBarriers());
}
LogicalResult MbarrierArriveOp::verify() {
  if (failed(verifyBarriers(*this, getBarriers()))) return failure();
  if (getCluster()) return verifyInCluster(*this, "an arrival on every block's barrier");
  return success();
}
LogicalResult MmaCommitOp::verify() { return verifyBarriers(*this, getBarriers()); }

LogicalResult TmemAliasOp::verify() {
  auto source = memrefOf(getSource()), result = memrefOf(getResult());
  if (spaceOf(getSource()) != MemorySpace::tmem || spaceOf(getResult()) != MemorySpace::tmem)
    return emitOpError("aliases tensor memory with tensor memory");
  auto alloc = getSource().getDefiningOp<AllocOp>();
  if (!alloc) return emitOpError("aliases a tensor-memory allocation, not a view of one");
  if (result.getRank() != 2 || result.getDimSize(0) != source.getDimSize(0))
    return emitOpError("the alias has the source's ") << source.getDimSize(0) << " rows, got "
                                                     << shapeString(result.getShape());
  int bits = result.getElementTypeBitWidth();
  if (bits != 32 && bits != 16) return emitOpError("tensor memory holds 32-bit or 16-bit values");
  // 16-bit values packed two to a column.
  int64_t columns = bits == 32 ? result.getDimSize(1) : (result.getDimSize(1) + 1) / 2;
  if (columns > alloc.getTmemColumns())
    return emitOpError("the alias needs ")
           << columns << " columns; its source has " << alloc.getTmemColumns();
  return success();
}
LogicalResult MbarrierExpectTxOp::verify() {
  if (getBytes() <= 0 || getBytes() >= (1 << 20))
    return emitOpError("transaction bytes must be in (0, 2^20), got ") << getBytes();
  return verifyBarriers(*this, getBarriers());
}
LogicalResult MbarrierWaitOp::verify() { return verifyBarriers(*this, getBarriers()); }

LogicalResult RoleOp::verify() {
  if (getFirst() < 0 || getFirst() % 32 || getThreads() <= 0 || getThreads() % 32)
    return emitOpError("a role is whole warps: first thread ")
           << getFirst() << " and count " << getThreads() << " must be multiples of 32";
  if (auto kernel = (*this)->getParentOfType<KernelOp>();
      kernel && getFirst() + getThreads() > kernel.getThreads())
    return emitOpError("threads [") << getFirst() << ", " << getFirst() + getThreads()
                                    << ") are outside the kernel's " << kernel.getThreads();
  if (std::optional<int64_t> regs = getMaxRegisters()) {
    if (*regs < 24 || *regs > 256 || *regs % 8)
      return emitOpError("max_registers must be a multiple of 8 in [24, 256], got ") << *regs;
    if (getFirst() % 128 || getThreads() % 128)
      return emitOpError("setmaxnreg applies to whole warpgroups: the role must start and "
                         "end on a multiple of 128 threads");
  }
  return success();
}

#define GET_OP_CLASSES
#include "tessel/Dialect/Tile/TileOps.cpp.inc"
