//===- LayoutSvg.h - pictures of layouts ------------------------*- C++ -*-===//
//
// A picture beats a printed attribute when checking a layout: one cell per
// logical element, rows and columns as in the tile (leading extents
// flattened into rows).
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_LAYOUT_LAYOUTSVG_H
#define TESSEL_LAYOUT_LAYOUTSVG_H

#include "tessel/Layout/FragmentLayout.h"
#include "tessel/Layout/SharedLayout.h"

#include <string>

namespace tessel::layout {
/// Each element shows the thread that owns it and the register it is in,
/// coloured by thread, with the number of replicas when there are several.
std::string renderFragmentSvg(const FragmentLayout &layout, const std::string &title);
/// Each element shows the shared-memory bank its first byte falls in,
/// coloured by bank: a conflict-free column of 16-byte chunks shows eight
/// different colours.
std::string renderSharedSvg(const SharedLayout &layout, const std::string &title);
} // namespace tessel::layout

#endif
