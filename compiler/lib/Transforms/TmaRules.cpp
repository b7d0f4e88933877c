//===- TmaRules.cpp - when a copy can be a TMA transfer -------------------===//
#include "TmaRules.h"
#include "tessel/Transforms/BufferUtils.h"

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

std::string tessel::whyNoTma(Value global, Value shared, const TargetInfo &target) {
  if (target.computeCapability != 90) return "TMA needs sm_90a";
  if (!target.tma) return "TMA is turned off for this compile";
  auto globalType = llvm::cast<MemRefType>(global.getType());
  auto sharedType = llvm::cast<MemRefType>(shared.getType());
  if (getMemorySpace(globalType) != MemorySpace::global ||
      !llvm::isa<BlockArgument>(getRootBuffer(global)))
    return "the global side is not a window of a kernel tensor";
  auto globalRoot = llvm::cast<MemRefType>(getRootBuffer(global).getType());
  if (getRootDims(global).back() + 1 != globalRoot.getRank())
    return "the tile's rows are not contiguous in the tensor";
  if (globalRoot.getRank() > 5) return "TMA boxes have at most 5 dimensions";
  auto buffer = getRootBuffer(shared).getDefiningOp<AllocOp>();
  if (!buffer || getRootBuffer(shared).getType() != shared.getType() ||
      !isSharedBacked(buffer.getResult()))
    return "the shared side is not a whole shared buffer";
  if (globalType.getElementType() != sharedType.getElementType())
    return "the copy converts its element type";
  if (getAnnotatedLayout(buffer)) return "the buffer has an annotated layout";
  auto layout = llvm::dyn_cast_or_null<SharedLayoutAttr>(buffer.getLayoutAttr());
  if (!layout || layout.getPad()) return "the buffer's layout is padded";
  int64_t eb = getElementBytes(sharedType.getElementType());
  ArrayRef<int64_t> shape = sharedType.getShape();
  int64_t inner = layout.getSwizzleBytes() ? layout.getLayout().getPanelWidth() : shape.back();
  if ((inner * eb) % 16 || inner > 256)
    return "its rows are not whole 16-byte units of at most 256 elements";
  if (shape.size() > 5) return "TMA boxes have at most 5 dimensions";
  for (size_t d = 0; d + 2 < shape.size(); ++d)
    if (shape[d] > 256) return "a box dimension is above 256";
  return "";
}

bool tessel::isTmaStore(CopyOp copy, const TargetInfo &target) {
  auto src = llvm::cast<MemRefType>(copy.getSource().getType());
  return getMemorySpace(src) == MemorySpace::shared &&
         whyNoTma(copy.getDest(), copy.getSource(), target).empty();
}
