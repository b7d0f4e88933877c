//===- SharedLayout.cpp - shared-memory tiles: panels and swizzles --------===//
#include "tessel/Layout/SharedLayout.h"

#include "llvm/Support/MathExtras.h"
#include <cassert>

using namespace tessel::layout;

std::string SharedLayout::check(llvm::ArrayRef<int64_t> shape, int64_t elementBytes,
                                int64_t swizzleBytes, int64_t pad) {
  if (shape.empty()) return "a shared layout needs at least one dimension";
  for (int64_t d : shape)
    if (d <= 0) return "extents must be positive";
  if (elementBytes != 1 && elementBytes != 2 && elementBytes != 4 && elementBytes != 8)
    return "element size must be 1, 2, 4 or 8 bytes";
  if (swizzleBytes != 0 && swizzleBytes != 32 && swizzleBytes != 64 && swizzleBytes != 128)
    return "swizzle must be 0, 32, 64 or 128 bytes";
  if (pad < 0) return "padding must not be negative";
  if (swizzleBytes) {
    if (pad) return "a swizzled layout cannot also be padded";
    if (shape.back() * elementBytes % swizzleBytes)
      return "a row of " + std::to_string(shape.back() * elementBytes) +
             " bytes is not a whole number of " + std::to_string(swizzleBytes) +
             "-byte swizzle panels";
  }
  return "";
}

SharedLayout::SharedLayout(llvm::ArrayRef<int64_t> shape, int64_t elementBytes,
                           int64_t swizzleBytes, int64_t pad)
    : shape(shape), elementBytes(elementBytes), swizzleBytes(swizzleBytes), pad(pad) {
  assert(check(shape, elementBytes, swizzleBytes, pad).empty() && "invalid shared layout");
}

int64_t SharedLayout::getRows() const {
  int64_t rows = 1;
  for (int64_t d : getShape().drop_back()) rows *= d;
  return rows;
}

int64_t SharedLayout::getPanelWidth() const {
  return swizzleBytes ? swizzleBytes / elementBytes : getCols();
}

int64_t SharedLayout::getStorageElements() const {
  return swizzleBytes ? getRows() * getCols() : getRows() * (getCols() + pad);
}

int64_t SharedLayout::swizzleByteOffset(int64_t byteOffset, int64_t swizzleBytes) {
  if (!swizzleBytes) return byteOffset;
  int64_t mask = swizzleBytes / 16 - 1; // 1, 3 or 7 chunk bits
  return byteOffset ^ (((byteOffset >> 7) & mask) << 4);
}

int64_t SharedLayout::unswizzledOffset(llvm::ArrayRef<int64_t> coord) const {
  int64_t row = 0;
  for (unsigned d = 0; d + 1 < shape.size(); ++d) row = row * shape[d] + coord[d];
  int64_t col = coord.back();
  if (!swizzleBytes) return row * (getCols() + pad) + col;
  int64_t w = getPanelWidth();
  return ((col / w) * getRows() + row) * w + col % w;
}

int64_t SharedLayout::apply(llvm::ArrayRef<int64_t> coord) const {
  int64_t offset = unswizzledOffset(coord);
  return swizzleByteOffset(offset * elementBytes, swizzleBytes) / elementBytes;
}

std::optional<llvm::SmallVector<int64_t>> SharedLayout::invert(int64_t offset) const {
  if (offset < 0 || offset >= getStorageElements()) return std::nullopt;
  // The swizzle only changes bits below the ones it reads: an involution.
  int64_t linear = swizzleByteOffset(offset * elementBytes, swizzleBytes) / elementBytes;
  int64_t row, col;
  if (swizzleBytes) {
    int64_t w = getPanelWidth(), panel = linear / (getRows() * w), rest = linear % (getRows() * w);
    row = rest / w;
    col = panel * w + rest % w;
  } else {
    row = linear / (getCols() + pad);
    col = linear % (getCols() + pad);
    if (col >= getCols()) return std::nullopt;
  }
  llvm::SmallVector<int64_t> coord(shape.size());
  coord.back() = col;
  for (unsigned d = shape.size() - 1; d-- > 0;) coord[d] = row % shape[d], row /= shape[d];
  return coord;
}

std::optional<LinearMap> SharedLayout::toLinear() const {
  if (pad) return std::nullopt;
  for (int64_t d : shape)
    if (!llvm::isPowerOf2_64(static_cast<uint64_t>(d))) return std::nullopt;
  // With power-of-two extents, panels are a bit permutation and the swizzle
  // an XOR of bits: the whole layout is linear.
  llvm::SmallVector<unsigned> bits;
  for (int64_t d : shape) bits.push_back(llvm::Log2_64(static_cast<uint64_t>(d)));
  unsigned total = 0;
  for (unsigned b : bits) total += b;
  llvm::SmallVector<uint64_t, 16> cols;
  for (unsigned i = 0; i < total; ++i) {
    llvm::SmallVector<int64_t> coord(shape.size());
    unsigned shift = 0;
    for (unsigned d = shape.size(); d-- > 0;) {
      if (i >= shift && i < shift + bits[d]) coord[d] = int64_t{1} << (i - shift);
      shift += bits[d];
    }
    cols.push_back(static_cast<uint64_t>(apply(coord)));
  }
  return LinearMap(total, cols);
}

std::string SharedLayout::str() const {
  std::string s = "[";
  for (unsigned d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "], elem = " + std::to_string(elementBytes) + ", swizzle = " +
         std::to_string(swizzleBytes) + ", pad = " + std::to_string(pad);
}

SharedLayout SharedLayout::forTensorCores(llvm::ArrayRef<int64_t> shape, int64_t elementBytes) {
  int64_t rowBytes = shape.back() * elementBytes;
  for (int64_t s : {128, 64, 32})
    if (rowBytes % s == 0) return SharedLayout(shape, elementBytes, s, 0);
  return SharedLayout(shape, elementBytes, 0, 0);
}
