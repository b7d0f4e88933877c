//===- SharedLayout.h - shared-memory tiles: panels and swizzles -*- C++ -*-===//
//
// A shared layout maps the logical index of a tile to an element offset. The
// tile is seen as rows x cols (cols = the last extent). Unswizzled rows may be
// padded. Swizzled tiles are cut into panels of `swizzle` bytes of columns
// (a panel is a rows x W row-major block, W = swizzle / element bytes), and
// inside the tile the 16-byte chunk bits [4, 4+b) of the byte offset are
// XORed with bits [7, 7+b) (b = 1, 2, 3 for 32, 64, 128 bytes). This is the
// pattern of the TMA and wgmma swizzle modes, so a tile laid out this way can
// be read by wgmma through a matrix descriptor, and eight rows of one 16-byte
// column chunk fall in eight different bank groups (ldmatrix without
// conflicts).
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_LAYOUT_SHAREDLAYOUT_H
#define TESSEL_LAYOUT_SHAREDLAYOUT_H

#include "tessel/Layout/LinearMap.h"

#include <string>

namespace tessel::layout {

class SharedLayout {
public:
  SharedLayout(llvm::ArrayRef<int64_t> shape, int64_t elementBytes, int64_t swizzleBytes,
               int64_t pad);
  /// Why a layout is not valid, or empty.
  static std::string check(llvm::ArrayRef<int64_t> shape, int64_t elementBytes,
                           int64_t swizzleBytes, int64_t pad);

  llvm::ArrayRef<int64_t> getShape() const { return shape; }
  int64_t getElementBytes() const { return elementBytes; }
  int64_t getSwizzleBytes() const { return swizzleBytes; }
  int64_t getPad() const { return pad; }
  int64_t getRows() const;
  int64_t getCols() const { return shape.back(); }
  /// Columns per panel (all of them when unswizzled).
  int64_t getPanelWidth() const;
  /// Elements of storage.
  int64_t getStorageElements() const;

  /// The XOR swizzle on a byte offset.
  static int64_t swizzleByteOffset(int64_t byteOffset, int64_t swizzleBytes);
  /// Element offset of a logical index, before the swizzle (what a wgmma
  /// matrix descriptor's start address is computed from).
  int64_t unswizzledOffset(llvm::ArrayRef<int64_t> coord) const;
  int64_t apply(llvm::ArrayRef<int64_t> coord) const;
  /// The logical index stored at an element offset, if any.
  std::optional<llvm::SmallVector<int64_t>> invert(int64_t offset) const;
  /// The 4-byte bank of an element.
  int64_t bank(llvm::ArrayRef<int64_t> coord) const { return apply(coord) * elementBytes / 4 % 32; }
  /// As a linear map from packed logical index bits (last dimension lowest)
  /// to element-offset bits; only for unpadded power-of-two shapes.
  std::optional<LinearMap> toLinear() const;

  bool operator==(const SharedLayout &o) const {
    return shape == o.shape && elementBytes == o.elementBytes &&
           swizzleBytes == o.swizzleBytes && pad == o.pad;
  }
  std::string str() const;

  /// The widest swizzle that suits a tile whose rows are read in 16-byte
  /// chunks (ldmatrix, cp.async, wgmma): 128, 64 or 32 bytes when the row
  /// holds that many, unswizzled otherwise.
  static SharedLayout forTensorCores(llvm::ArrayRef<int64_t> shape, int64_t elementBytes);

private:
  llvm::SmallVector<int64_t, 4> shape;
  int64_t elementBytes, swizzleBytes, pad;
};

} // namespace tessel::layout

#endif
