//===- TileDialect.h - the tile dialect -------------------------*- C++ -*-===//
#ifndef TESSEL_DIALECT_TILE_TILEDIALECT_H
#define TESSEL_DIALECT_TILE_TILEDIALECT_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "tessel/Layout/FragmentLayout.h"
#include "tessel/Layout/SharedLayout.h"

#include "tessel/Dialect/Tile/TileEnums.h.inc"
#include "tessel/Dialect/Tile/TileDialect.h.inc"
#define GET_ATTRDEF_CLASSES
#include "tessel/Dialect/Tile/TileAttrs.h.inc"
#define GET_OP_CLASSES
#include "tessel/Dialect/Tile/TileOps.h.inc"

namespace tessel::tile {
/// The tile memory space of a memref; global when it has none.
MemorySpace getMemorySpace(mlir::MemRefType type);
/// A memref type in a tile memory space.
mlir::MemRefType getTileMemRefType(llvm::ArrayRef<int64_t> shape, mlir::Type elementType,
                                   MemorySpace space);
} // namespace tessel::tile

#endif
