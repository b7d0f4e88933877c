//===- TileNVDialect.h - NVIDIA thread-level intrinsics ---------*- C++ -*-===//
#ifndef TESSEL_DIALECT_TILENV_TILENVDIALECT_H
#define TESSEL_DIALECT_TILENV_TILENVDIALECT_H

#include "tessel/Dialect/Tile/TileDialect.h"

#include "tessel/Dialect/TileNV/TileNVEnums.h.inc"
#include "tessel/Dialect/TileNV/TileNVDialect.h.inc"
#define GET_OP_CLASSES
#include "tessel/Dialect/TileNV/TileNVOps.h.inc"

#endif
