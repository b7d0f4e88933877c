//===- TileNVDialect.cpp - NVIDIA thread-level intrinsics -----------------===//
#include "tessel/Dialect/TileNV/TileNVDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace tessel::tilenv;

#include "tessel/Dialect/TileNV/TileNVDialect.cpp.inc"
#include "tessel/Dialect/TileNV/TileNVEnums.cpp.inc"

void TileNVDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "tessel/Dialect/TileNV/TileNVOps.cpp.inc"
      >();
}

#define GET_OP_CLASSES
#include "tessel/Dialect/TileNV/TileNVOps.cpp.inc"
