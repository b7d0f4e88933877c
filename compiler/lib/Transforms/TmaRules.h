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
/// empty when it can. Another rank's tile (tile.peer) loads by TMA through
/// a tensor map per rank; `store` (shared to global): into it, not (a TMA
/// store completes in the async proxy, unordered with the flag stores that
/// announce it to the peer).
std::string whyNoTma(mlir::Value global, mlir::Value shared, const TargetInfo &target,
                     bool store = false);
/// A shared-to-global tile.copy that lowers to a TMA store.
bool isTmaStore(tile::CopyOp copy, const TargetInfo &target);
} // namespace tessel

#endif
