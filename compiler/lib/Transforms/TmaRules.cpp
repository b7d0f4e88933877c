//===- TmaRules.cpp - when a copy can be a TMA transfer -------------------===//
#include "TmaRules.h"
#include "tessel/Transforms/BufferUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

namespace {
const int64_t kAnyMultiple = int64_t(1) << 30;

/// The largest power of two `v` is known to be a multiple of (1 when
/// nothing is known, kAnyMultiple for zero).
int64_t knownMultiple(Value v, int depth = 0) {
  if (std::optional<int64_t> c = getConstantIntValue(v))
    return *c == 0 ? kAnyMultiple : std::min(kAnyMultiple, *c & -*c);
  Operation *def = v.getDefiningOp();
  if (!def || depth > 16) return 1;
  auto of = [&](unsigned i) { return knownMultiple(def->getOperand(i), depth + 1); };
  if (llvm::isa<arith::AddIOp, arith::SubIOp, arith::MinSIOp, arith::MaxSIOp, arith::MinUIOp,
                arith::MaxUIOp>(def))
    return std::min(of(0), of(1));
  if (llvm::isa<arith::SelectOp>(def)) return std::min(of(1), of(2));
  if (llvm::isa<arith::AndIOp>(def)) return std::max(of(0), of(1));
  if (llvm::isa<arith::MulIOp>(def)) return std::min(kAnyMultiple, of(0) * of(1));
  if (llvm::isa<arith::IndexCastOp, arith::IndexCastUIOp, arith::ExtSIOp, arith::ExtUIOp>(def))
    return of(0);
  return 1;
}

/// What the offset of `window` along its root tensor's innermost dimension
/// is known to be a multiple of (summed over nested windows).
int64_t innermostOffsetMultiple(Value window) {
  unsigned innermost = llvm::cast<MemRefType>(getRootBuffer(window).getType()).getRank() - 1;
  int64_t multiple = kAnyMultiple;
  for (Value v = window;;) {
    if (auto stage = v.getDefiningOp<StageOp>()) {
      v = stage.getBuffer();
      continue;
    }
    auto region = v.getDefiningOp<RegionOp>();
    if (!region) return multiple;
    SmallVector<unsigned> sourceDims = getRootDims(region.getSource());
    for (auto [k, dim] : llvm::enumerate(sourceDims))
      if (dim == innermost) multiple = std::min(multiple, knownMultiple(region.getOffsets()[k]));
    v = region.getSource();
  }
}
} // namespace

std::optional<int64_t> tessel::tmaWindowFirstRow(ArrayRef<int64_t> rootShape,
                                                 ArrayRef<int64_t> windowShape,
                                                 ArrayRef<std::optional<int64_t>> windowStart,
                                                 const layout::SharedLayout &layout, int64_t elementBytes) {
  if (rootShape.size() != 2 || windowShape.size() != 2 || windowStart.size() != 2) return std::nullopt;
  if (!windowStart[0] || windowStart[1] != 0 || windowShape[1] != rootShape[1]) return std::nullopt;
  int64_t panel = layout.getSwizzleBytes() ? layout.getPanelWidth() : rootShape[1];
  if ((*windowStart[0] * panel * elementBytes) % kTmaWindowAlignment) return std::nullopt;
  return *windowStart[0];
}

std::string tessel::whyNoTmaWindow(Value shared, const layout::SharedLayout *layout, int64_t elementBytes) {
  BufferFootprint print = getFootprint(shared);
  auto rootShape = llvm::cast<MemRefType>(print.root.getType()).getShape();
  auto windowShape = llvm::cast<MemRefType>(shared.getType()).getShape();
  if (print.lower.empty()) return "the shared side is a window of its buffer at offsets that are not constants";
  if (rootShape.size() != 2)
    return "the shared side is a window of a buffer that is not two-dimensional";
  // A window that drops a dimension (`{drop, n}`: one row) has the right
  // buffer; saying the buffer is wrong would send the user after it.
  if (windowShape.size() != 2)
    return "the shared side is a " + std::to_string(windowShape.size()) +
           "-dimensional window of a two-dimensional buffer (a TMA window is whole rows, [rows, " +
           std::to_string(rootShape[1]) + "], as a window of size 1 rather than `drop` gives)";
  SmallVector<std::optional<int64_t>> start(print.lower.begin(), print.lower.end());
  if (start[1] != 0 || windowShape[1] != rootShape[1])
    return "the shared side is a window of some of its buffer's columns (a TMA window takes whole rows)";
  if (layout && !tmaWindowFirstRow(rootShape, windowShape, start, *layout, elementBytes))
    return "the shared window starts at row " + std::to_string(print.lower[0]) +
           ", whose address within each panel is not a multiple of " +
           std::to_string(kTmaWindowAlignment) + " bytes (the swizzle's period)";
  return "";
}

std::string tessel::whyNoTma(Value global, Value shared, const TargetInfo &target, bool store) {
  if (!target.hasTma()) return "TMA needs sm_90a or sm_100a";
  if (!target.tma) return "TMA is turned off for this compile";
  auto globalType = llvm::cast<MemRefType>(global.getType());
  auto sharedType = llvm::cast<MemRefType>(shared.getType());
  Value root = getRootBuffer(global);
  if (auto peer = root.getDefiningOp<PeerOp>()) {
    if (store)
      return "the tensor is another rank's (tile.peer): TMA loads from peers, but a TMA store's "
             "completion is not ordered with the flags that announce it";
    root = peer.getSource();
  }
  if (getMemorySpace(globalType) != MemorySpace::global || !llvm::isa<BlockArgument>(root))
    return "the global side is not a window of a kernel tensor";
  Value window = global;
  while (auto region = window.getDefiningOp<RegionOp>()) window = region.getSource();
  if (window.getDefiningOp<BoundOp>())
    return "the tensor is bounded by run-time limits (tile.bound), which a tensor map cannot hold";
  auto globalRoot = llvm::cast<MemRefType>(root.getType());
  if (getRootDims(global).back() + 1 != globalRoot.getRank())
    return "the tile's rows are not contiguous in the tensor";
  if (globalRoot.getRank() > 5) return "TMA boxes have at most 5 dimensions";
  // A box must start on a 16-byte boundary of its rows (an unaligned start
  // is an illegal instruction).
  int64_t rowStartBytes =
      innermostOffsetMultiple(global) * getElementBytes(globalType.getElementType());
  if (rowStartBytes % 16)
    return "the tile's start within a row is not known to be a multiple of 16 bytes";
  auto buffer = getRootBuffer(shared).getDefiningOp<AllocOp>();
  if (!buffer || !isSharedBacked(buffer.getResult())) return "the shared side is not a shared buffer";
  bool sharedWindow = getRootBuffer(shared).getType() != shared.getType();
  if (sharedWindow && store) return "the shared side is a window of its buffer (TMA stores read whole buffers)";
  int64_t eb = getElementBytes(sharedType.getElementType());
  if (sharedWindow)
    if (std::string why = whyNoTmaWindow(shared, nullptr, eb); !why.empty()) return why;
  if (globalType.getElementType() != sharedType.getElementType())
    return "the copy converts its element type";
  if (getAnnotatedLayout(buffer)) return "the buffer has an annotated layout";
  auto layout = llvm::dyn_cast_or_null<SharedLayoutAttr>(buffer.getLayoutAttr());
  if (!layout || layout.getPad()) return "the buffer's layout is padded";
  ArrayRef<int64_t> shape = sharedType.getShape();
  if (sharedWindow) {
    layout::SharedLayout l = layout.getLayout();
    if (std::string why = whyNoTmaWindow(shared, &l, eb); !why.empty()) return why;
    shape = llvm::cast<MemRefType>(buffer.getType()).getShape(); // the panels' width is the buffer's
  }
  int64_t inner = layout.getSwizzleBytes() ? layout.getLayout().getPanelWidth() : shape.back();
  if ((inner * eb) % 16) return "its rows are not whole 16-byte units";
  if (inner > 256)
    return "its rows are " + std::to_string(inner) +
           " elements wide in one unswizzled panel, and a TMA box row holds at most 256";
  if (shape.size() > 5) return "TMA boxes have at most 5 dimensions";
  for (size_t d = 0; d + 2 < shape.size(); ++d)
    if (shape[d] > 256) return "a box dimension is above 256";
  return "";
}

bool tessel::isTmaStore(CopyOp copy, const TargetInfo &target) {
  auto src = llvm::cast<MemRefType>(copy.getSource().getType());
  return getMemorySpace(src) == MemorySpace::shared &&
         whyNoTma(copy.getDest(), copy.getSource(), target, /*store=*/true).empty();
}
