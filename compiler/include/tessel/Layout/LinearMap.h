//===- LinearMap.h - linear maps between bit vectors over GF(2) -*- C++ -*-===//
//
// Tessel's layouts are linear over GF(2): an index of a power-of-two extent is
// a bit vector, and a layout sends each input bit to an output bit vector; the
// image of an index is the XOR of the images of its set bits. Register tiles
// of the tensor-core instructions, thread splits and XOR swizzles of shared
// memory are all of this form, so one small piece of linear algebra gives
// composition, inverses and equality for every layout Tessel infers.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_LAYOUT_LINEARMAP_H
#define TESSEL_LAYOUT_LINEARMAP_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include <cstdint>
#include <optional>

namespace tessel::layout {

/// A linear map from `inBits` bits to `outBits` bits (both at most 64): the
/// column for input bit i is the image of 1 << i.
class LinearMap {
public:
  LinearMap(unsigned outBits, llvm::ArrayRef<uint64_t> columns);
  static LinearMap identity(unsigned bits);

  unsigned getInBits() const { return columns.size(); }
  unsigned getOutBits() const { return outBits; }
  llvm::ArrayRef<uint64_t> getColumns() const { return columns; }

  uint64_t apply(uint64_t input) const;
  /// this ∘ inner: first `inner`, then this map.
  LinearMap compose(const LinearMap &inner) const;
  unsigned rank() const;
  bool isInjective() const { return rank() == getInBits(); }
  bool isSurjective() const { return rank() == outBits; }
  /// The inverse of a bijection.
  std::optional<LinearMap> inverse() const;
  /// Some input with apply(input) == output (the one with the fewest high
  /// bits set), or nothing when `output` is not in the image.
  std::optional<uint64_t> solve(uint64_t output) const;

  bool operator==(const LinearMap &other) const {
    return outBits == other.outBits && columns == other.columns;
  }
  bool operator!=(const LinearMap &other) const { return !(*this == other); }

private:
  unsigned outBits;
  llvm::SmallVector<uint64_t, 16> columns;
};

} // namespace tessel::layout

#endif
