//===- LinearMap.cpp - linear maps between bit vectors over GF(2) ---------===//
#include "tessel/Layout/LinearMap.h"

#include <bit>
#include <cassert>

using namespace tessel::layout;

LinearMap::LinearMap(unsigned outBits, llvm::ArrayRef<uint64_t> cols)
    : outBits(outBits), columns(cols.begin(), cols.end()) {
  assert(outBits <= 64 && columns.size() <= 64 && "bit vectors are at most 64 bits");
  [[maybe_unused]] uint64_t mask = outBits == 64 ? ~0ull : (1ull << outBits) - 1;
  for ([[maybe_unused]] uint64_t c : columns) assert((c & ~mask) == 0 && "column out of range");
}

LinearMap LinearMap::identity(unsigned bits) {
  llvm::SmallVector<uint64_t, 16> cols;
  for (unsigned i = 0; i < bits; ++i) cols.push_back(1ull << i);
  return LinearMap(bits, cols);
}

uint64_t LinearMap::apply(uint64_t input) const {
  uint64_t out = 0;
  for (unsigned i = 0; i < columns.size(); ++i)
    if (input >> i & 1) out ^= columns[i];
  return out;
}

LinearMap LinearMap::compose(const LinearMap &inner) const {
  assert(inner.getOutBits() <= getInBits() && "inner map's result does not fit");
  llvm::SmallVector<uint64_t, 16> cols;
  for (uint64_t c : inner.getColumns()) cols.push_back(apply(c));
  return LinearMap(outBits, cols);
}

namespace {
/// Row echelon form of a set of columns, remembering for each basis vector
/// which original columns it combines.
struct Echelon {
  llvm::SmallVector<uint64_t, 16> basis, combo;
  explicit Echelon(llvm::ArrayRef<uint64_t> columns) {
    for (unsigned i = 0; i < columns.size(); ++i) {
      uint64_t v = columns[i], c = 1ull << i;
      for (unsigned j = 0; j < basis.size(); ++j)
        if (v & std::bit_floor(basis[j])) v ^= basis[j], c ^= combo[j];
      if (v) basis.push_back(v), combo.push_back(c);
    }
  }
  std::optional<uint64_t> solve(uint64_t y) const {
    uint64_t x = 0;
    for (unsigned j = 0; j < basis.size(); ++j)
      if (y & std::bit_floor(basis[j])) y ^= basis[j], x ^= combo[j];
    if (y) return std::nullopt;
    return x;
  }
};
} // namespace

unsigned LinearMap::rank() const { return Echelon(columns).basis.size(); }

std::optional<uint64_t> LinearMap::solve(uint64_t output) const {
  return Echelon(columns).solve(output);
}

std::optional<LinearMap> LinearMap::inverse() const {
  if (getInBits() != outBits || !isInjective()) return std::nullopt;
  Echelon e(columns);
  llvm::SmallVector<uint64_t, 16> cols;
  for (unsigned i = 0; i < outBits; ++i) cols.push_back(*e.solve(1ull << i));
  return LinearMap(getInBits(), cols);
}
