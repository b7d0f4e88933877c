//===- TmaRules.h - when a copy can be a TMA transfer -----------*- C++ -*-===//
//
// One rule shared by the passes that choose TMA (pipeline planning), fence
// for it (tessel-insert-barriers) and lower to it (tessel-lower-tile-ops),
// so that they always agree.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TRANSFORMS_TMARULES_H
#define TESSEL_TRANSFORMS_TMARULES_H

#include "tessel/Transforms/Passes.h"

namespace tessel {
/// Why a transfer between the window `global` of a kernel tensor and the
/// whole shared buffer `shared` cannot be one TMA box per swizzle panel;
/// empty when it can.
std::string whyNoTma(mlir::Value global, mlir::Value shared, const TargetInfo &target);
/// A shared-to-global tile.copy that lowers to a TMA store.
bool isTmaStore(tile::CopyOp copy, const TargetInfo &target);
} // namespace tessel

#endif
