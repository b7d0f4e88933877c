//===- TmaRules.h - when a copy can be a TMA transfer -----------*- C++ -*-===//
//
// One rule shared by the passes that choose TMA (pipeline planning), fence
// for it (tessel-insert-barriers) and lower to it (tessel-lower-tile-ops),
// so that they always agree.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TRANSFORMS_TMARULES_H
#define TESSEL_TRANSFORMS_TMARULES_H

#include "tessel/Layout/SharedLayout.h"
#include "tessel/Transforms/Passes.h"

#include <optional>

namespace tessel {
/// Why a transfer between the window `global` of a kernel tensor and the
/// shared buffer `shared` cannot be one TMA box per swizzle panel; empty
/// when it can. A load may write a window of rows of a two-dimensional
/// buffer (whyNoTmaWindow): a paged cache's pages into a staged tile.
/// Another rank's tile (tile.peer) loads by TMA through a tensor map per
/// rank; `store` (shared to global): into it, not (a TMA store completes
/// in the async proxy, unordered with the flag stores that announce it to
/// the peer).
std::string whyNoTma(mlir::Value global, mlir::Value shared, const TargetInfo &target,
                     bool store = false);
/// Where a window of a shared buffer starts, in rows, when a TMA box can
/// write it: every column of a two-dimensional buffer, from a row whose
/// address within each panel is a multiple of kTmaWindowAlignment. A box
/// lands with the swizzle of its destination's address bits; from such a
/// row that is the buffer's own layout (and the alignment TMA needs).
constexpr int64_t kTmaWindowAlignment = 1024;
std::optional<int64_t> tmaWindowFirstRow(llvm::ArrayRef<int64_t> rootShape,
                                         llvm::ArrayRef<int64_t> windowShape,
                                         llvm::ArrayRef<std::optional<int64_t>> windowStart,
                                         const layout::SharedLayout &layout, int64_t elementBytes);
/// Why the window `shared` of a shared buffer cannot be a TMA box's
/// destination (empty when it can): tmaWindowFirstRow's rule, for the view
/// before lowering (its offsets constants through every tile.region); its
/// shape alone where the buffer's layout is not known yet.
std::string whyNoTmaWindow(mlir::Value shared, const layout::SharedLayout *layout,
                           int64_t elementBytes);
/// A shared-to-global tile.copy that lowers to a TMA store.
bool isTmaStore(tile::CopyOp copy, const TargetInfo &target);
} // namespace tessel

#endif
