//===- TileDialect.cpp - the tile dialect ---------------------------------===//
#include "tessel/Dialect/Tile/TileDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace tessel::tile;

#include "tessel/Dialect/Tile/TileDialect.cpp.inc"
#include "tessel/Dialect/Tile/TileEnums.cpp.inc"

void TileDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "tessel/Dialect/Tile/TileOps.cpp.inc"
      >();
}

MemorySpace tessel::tile::getMemorySpace(MemRefType type) {
  if (auto space = llvm::dyn_cast_or_null<MemorySpaceAttr>(type.getMemorySpace()))
    return space.getValue();
  return MemorySpace::global;
}

MemRefType tessel::tile::getTileMemRefType(ArrayRef<int64_t> shape, Type elementType,
                                           MemorySpace space) {
  return MemRefType::get(shape, elementType, MemRefLayoutAttrInterface(),
                         MemorySpaceAttr::get(elementType.getContext(), space));
}
