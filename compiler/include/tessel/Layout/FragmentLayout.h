//===- FragmentLayout.h - register tiles distributed over threads -*- C++ -*-===//
//
// A fragment layout says which thread holds which element of a register tile
// and in which of its registers. It is a LinearMap from the bits of
// (register, lane, warp) to the bits of the logical index, dimension by
// dimension with the last dimension in the lowest bits. Extents that are not
// powers of two are padded to the next one; threads whose index falls in the
// padding skip it (predication). A zero column means replication: the threads
// (or registers) that differ only in that bit hold the same element.
//
// Thread counts that are not powers of two (three warpgroups: 384 threads)
// use the layout of the next power of two whose last threads hold only
// padding or replicas (isOwnedWithin): the threads that do not exist then
// miss nothing. A [192, n] accumulator on three warpgroups is the [256, n]
// layout of four, the fourth warpgroup's rows all padding.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_LAYOUT_FRAGMENTLAYOUT_H
#define TESSEL_LAYOUT_FRAGMENTLAYOUT_H

#include "tessel/Layout/LinearMap.h"

#include <string>

namespace tessel::layout {

struct FragmentWindow;

class FragmentLayout {
public:
  /// `reg`, `lane` and `warp` hold the packed logical index of each input
  /// bit's image (see pack()). There are always 5 lane bits.
  FragmentLayout(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<uint64_t> reg,
                 llvm::ArrayRef<uint64_t> lane, llvm::ArrayRef<uint64_t> warp);

  llvm::ArrayRef<int64_t> getShape() const { return shape; }
  unsigned getRank() const { return shape.size(); }
  llvm::ArrayRef<uint64_t> getReg() const { return reg; }
  llvm::ArrayRef<uint64_t> getLane() const { return lane; }
  llvm::ArrayRef<uint64_t> getWarp() const { return warp; }
  int64_t getNumRegisters() const { return int64_t{1} << reg.size(); }
  int64_t getNumThreads() const { return int64_t{32} << warp.size(); }
  /// Bits of dimension `d` in the packed index, and where they start.
  unsigned getDimBits(unsigned d) const;
  unsigned getDimShift(unsigned d) const;
  unsigned getLogicalBits() const;

  uint64_t pack(llvm::ArrayRef<int64_t> coord) const;
  llvm::SmallVector<int64_t> unpack(uint64_t packed) const;
  /// Inside the real (unpadded) shape.
  bool contains(llvm::ArrayRef<int64_t> coord) const;

  /// The map from (register | lane << R | warp << (R + 5)) to packed index.
  LinearMap getMap() const;
  /// The element held by register `r` of thread `thread`.
  llvm::SmallVector<int64_t> apply(int64_t r, int64_t thread) const;
  /// The packed index contributed by the thread bits alone.
  uint64_t threadPart(int64_t thread) const;
  uint64_t registerPart(int64_t r) const;
  /// The (register, thread) that owns an element: of its replicas, the one
  /// whose replicated bits are zero. Nothing when no thread holds it.
  std::optional<std::pair<int64_t, int64_t>> locate(llvm::ArrayRef<int64_t> coord) const;
  /// Whether a thread is the owner of its copy of every element it holds
  /// (replicas other than the owner must not write to memory).
  bool isOwner(int64_t thread) const;
  /// Whether threads 0..threads-1 own every element of the real shape: a
  /// layout for a count of threads that is not a power of two is built for
  /// the next power of two, and the threads past the count, which do not
  /// exist, may hold only padding or replicas.
  bool isOwnedWithin(int64_t threads) const;
  /// Every element of the padded shape has a holder.
  bool isSurjective() const { return getMap().rank() == getLogicalBits(); }

  /// The layout of a tile of the kept dimensions: their bits only. Register
  /// bits left without an image are dropped; lane and warp bits stay (as
  /// replication).
  FragmentLayout project(llvm::ArrayRef<unsigned> keptDims) const;
  /// For a layout `target` over a projection of this layout's shape, the
  /// register of `target` that holds register r's element, as a map from
  /// this layout's register bits to target's. Fails when the threads do not
  /// agree (the element would live in another thread).
  std::optional<LinearMap> registerMapTo(const FragmentLayout &target,
                                         llvm::ArrayRef<unsigned> keptDims) const;
  /// The window of `sizes` at `offsets` (one of each per dimension), its
  /// shape the sizes of `keptDims`. Each dimension is whole, or a power of
  /// two at a multiple of it, and the layout must keep the window in the
  /// registers of every thread: the register bits that step past the
  /// window's edges are then fixed by the offsets and the others are the
  /// window's registers, in order. Otherwise nothing, and `why` says what
  /// stands in the way.
  std::optional<FragmentWindow> window(llvm::ArrayRef<int64_t> offsets,
                                       llvm::ArrayRef<int64_t> sizes,
                                       llvm::ArrayRef<unsigned> keptDims,
                                       std::string *why = nullptr) const;
  /// A layout over `shape` whose windows of `sizes` (kept: `keptDims`) are
  /// `window`: the window's bits as they are, and a register bit for each
  /// bit of the shape past the window's edges.
  static FragmentLayout aroundWindow(const FragmentLayout &window, llvm::ArrayRef<int64_t> shape,
                                     llvm::ArrayRef<int64_t> sizes,
                                     llvm::ArrayRef<unsigned> keptDims);
  /// Register bits 0..n-1 that step the last dimension by 1, 2, 4, ...: the
  /// number of contiguous elements each register group holds (a power of 2).
  int64_t getContiguousRegisters() const;

  bool operator==(const FragmentLayout &o) const {
    return shape == o.shape && reg == o.reg && lane == o.lane && warp == o.warp;
  }
  bool operator!=(const FragmentLayout &o) const { return !(*this == o); }
  std::string str() const;

  // Layouts of the tensor-core instructions and the default choice.
  /// The accumulator of mma.sync m16n8k16 over an [m, n] tile split into
  /// warpsM x warpsN warps (warp index = wm * warpsN + wn). Each warp takes
  /// m / warpsM contiguous rows, except where the warps split M only and in
  /// fours (isMmaInterleaved): then, as wgmma's warpgroups do, warp q of
  /// each four takes rows 16q to 16q + 15 of every 64 of the four's rows.
  static FragmentLayout mmaAccumulator(int64_t m, int64_t n, int64_t warpsM, int64_t warpsN);
  static bool isMmaInterleaved(int64_t warpsM, int64_t warpsN) {
    return warpsN == 1 && warpsM % 4 == 0;
  }
  /// The accumulator of wgmma m64nNk16 over an [m, n] tile split into
  /// groupsM x groupsN warpgroups.
  static FragmentLayout wgmmaAccumulator(int64_t m, int64_t n, int64_t groupsM, int64_t groupsN);
  /// A [128, n] tile as tcgen05.ld/st .32x32b moves it to and from tensor
  /// memory with `groups` warpgroups: thread t of warp w holds row
  /// 32 * (w % 4) + t (its TMEM lane), warpgroup g columns g * n / groups
  /// onwards, one per register.
  static FragmentLayout tmemRows(int64_t n, int64_t groups);
  /// A layout for element-wise code over `shape` with `threads` threads:
  /// `vector` contiguous elements per register group along the last
  /// dimension, lanes next along the fastest dimensions, warps on the slowest
  /// dimensions (so that row reductions stay inside a warp); threads left
  /// over replicate. A count that is not a power of two spreads over the
  /// next power of two where the missing threads would hold only padding,
  /// and otherwise over the power of two below it, the rest replicating.
  static FragmentLayout elementwise(llvm::ArrayRef<int64_t> shape, int64_t threads,
                                    int64_t vector);

private:
  llvm::SmallVector<int64_t, 4> shape;
  llvm::SmallVector<uint64_t, 8> reg, lane, warp;
};

/// A window of a fragment: its own layout, and where each of its registers
/// sits among the fragment's (register r of the window is register
/// `registers.apply(r) ^ base` of the fragment, in every thread).
struct FragmentWindow {
  FragmentLayout layout;
  LinearMap registers;
  uint64_t base;
};

} // namespace tessel::layout

#endif
