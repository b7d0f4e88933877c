//===- TileAttrs.cpp - layout attributes ----------------------------------===//
//
// The attributes store what the layout algebra needs (packed bases); they
// print the bases as logical coordinates, which is what a reader checks.
//
//===----------------------------------------------------------------------===//
#include "tessel/Dialect/Tile/TileDialect.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

#define GET_ATTRDEF_CLASSES
#include "tessel/Dialect/Tile/TileAttrs.cpp.inc"

void TileDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "tessel/Dialect/Tile/TileAttrs.cpp.inc"
      >();
}

layout::FragmentLayout FragmentLayoutAttr::getLayout() const {
  return layout::FragmentLayout(getShape(), getReg(), getLane(), getWarp());
}

FragmentLayoutAttr FragmentLayoutAttr::get(MLIRContext *ctx,
                                           const layout::FragmentLayout &layout) {
  return get(ctx, layout.getShape(), layout.getReg(), layout.getLane(), layout.getWarp());
}

LogicalResult FragmentLayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                         ArrayRef<int64_t> shape, ArrayRef<uint64_t> reg,
                                         ArrayRef<uint64_t> lane, ArrayRef<uint64_t> warp) {
  if (shape.empty()) return emitError() << "a fragment layout needs at least one dimension";
  unsigned bits = 0;
  for (int64_t d : shape) {
    if (d <= 0) return emitError() << "fragment extents must be positive";
    bits += llvm::Log2_64_Ceil(static_cast<uint64_t>(d));
  }
  if (bits > 62) return emitError() << "fragment is too large for a layout";
  if (lane.size() != 5) return emitError() << "a fragment layout needs 5 lane bases, got " << lane.size();
  if (reg.size() > 16 || warp.size() > 5)
    return emitError() << "at most 65536 registers and 32 warps per fragment";
  uint64_t limit = 1ull << bits;
  for (ArrayRef<uint64_t> list : {reg, lane, warp})
    for (uint64_t v : list)
      if (v >= limit) return emitError() << "a basis lies outside the padded shape";
  return success();
}

/// `[[a, b], [c, d]]` against a shape: each entry is a coordinate inside the
/// padded shape.
static ParseResult parseBases(AsmParser &parser, const layout::FragmentLayout &probe,
                              SmallVectorImpl<uint64_t> &out) {
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() -> ParseResult {
    SmallVector<int64_t> coord;
    SMLoc loc = parser.getCurrentLocation();
    if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() {
          return parser.parseInteger(coord.emplace_back());
        }))
      return failure();
    if (coord.size() != probe.getRank())
      return parser.emitError(loc) << "a basis needs " << probe.getRank() << " coordinates";
    for (unsigned d = 0; d < coord.size(); ++d)
      if (coord[d] < 0 || coord[d] >= (int64_t{1} << probe.getDimBits(d)))
        return parser.emitError(loc) << "basis coordinate " << coord[d]
                                     << " lies outside the padded shape";
    out.push_back(probe.pack(coord));
    return success();
  });
}

Attribute FragmentLayoutAttr::parse(AsmParser &parser, Type) {
  SmallVector<int64_t> shape;
  if (parser.parseLess() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::Square,
                                     [&]() { return parser.parseInteger(shape.emplace_back()); }))
    return {};
  for (int64_t d : shape)
    if (d <= 0) return parser.emitError(parser.getCurrentLocation(), "extents must be positive"), Attribute();
  layout::FragmentLayout probe(shape, {}, {0, 0, 0, 0, 0}, {});
  SmallVector<uint64_t> reg, lane, warp;
  if (parser.parseComma() || parser.parseKeyword("reg") || parser.parseEqual() ||
      parseBases(parser, probe, reg) || parser.parseComma() || parser.parseKeyword("lane") ||
      parser.parseEqual() || parseBases(parser, probe, lane) || parser.parseComma() ||
      parser.parseKeyword("warp") || parser.parseEqual() || parseBases(parser, probe, warp) ||
      parser.parseGreater())
    return {};
  return getChecked([&]() { return parser.emitError(parser.getNameLoc()); },
                    parser.getContext(), shape, reg, lane, warp);
}

void FragmentLayoutAttr::print(AsmPrinter &printer) const {
  printer << "<" << getLayout().str() << ">";
}

layout::SharedLayout SharedLayoutAttr::getLayout() const {
  return layout::SharedLayout(getShape(), getElementBytes(), getSwizzleBytes(), getPad());
}

SharedLayoutAttr SharedLayoutAttr::get(MLIRContext *ctx, const layout::SharedLayout &layout) {
  return get(ctx, layout.getShape(), layout.getElementBytes(), layout.getSwizzleBytes(),
             layout.getPad());
}

LogicalResult SharedLayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                       ArrayRef<int64_t> shape, int64_t elementBytes,
                                       int64_t swizzleBytes, int64_t pad) {
  std::string why = layout::SharedLayout::check(shape, elementBytes, swizzleBytes, pad);
  if (!why.empty()) return emitError() << why;
  return success();
}
