//===- FragmentLayout.cpp - register tiles distributed over threads -------===//
#include "tessel/Layout/FragmentLayout.h"

#include "llvm/Support/MathExtras.h"
#include <cassert>

using namespace tessel::layout;

FragmentLayout::FragmentLayout(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<uint64_t> reg,
                               llvm::ArrayRef<uint64_t> lane, llvm::ArrayRef<uint64_t> warp)
    : shape(shape), reg(reg), lane(lane), warp(warp) {
  assert(lane.size() == 5 && "a warp has 32 lanes");
}

unsigned FragmentLayout::getDimBits(unsigned d) const {
  return llvm::Log2_64_Ceil(static_cast<uint64_t>(shape[d]));
}

unsigned FragmentLayout::getDimShift(unsigned d) const {
  unsigned shift = 0;
  for (unsigned e = d + 1; e < shape.size(); ++e) shift += getDimBits(e);
  return shift;
}

unsigned FragmentLayout::getLogicalBits() const {
  unsigned bits = 0;
  for (unsigned d = 0; d < shape.size(); ++d) bits += getDimBits(d);
  return bits;
}

uint64_t FragmentLayout::pack(llvm::ArrayRef<int64_t> coord) const {
  uint64_t packed = 0;
  for (unsigned d = 0; d < shape.size(); ++d) packed |= static_cast<uint64_t>(coord[d]) << getDimShift(d);
  return packed;
}

llvm::SmallVector<int64_t> FragmentLayout::unpack(uint64_t packed) const {
  llvm::SmallVector<int64_t> coord;
  for (unsigned d = 0; d < shape.size(); ++d)
    coord.push_back(static_cast<int64_t>(packed >> getDimShift(d) & ((1ull << getDimBits(d)) - 1)));
  return coord;
}

bool FragmentLayout::contains(llvm::ArrayRef<int64_t> coord) const {
  for (unsigned d = 0; d < shape.size(); ++d)
    if (coord[d] < 0 || coord[d] >= shape[d]) return false;
  return true;
}

LinearMap FragmentLayout::getMap() const {
  llvm::SmallVector<uint64_t, 16> cols(reg.begin(), reg.end());
  cols.append(lane.begin(), lane.end());
  cols.append(warp.begin(), warp.end());
  return LinearMap(getLogicalBits(), cols);
}

uint64_t FragmentLayout::registerPart(int64_t r) const {
  return LinearMap(getLogicalBits(), reg).apply(static_cast<uint64_t>(r));
}

uint64_t FragmentLayout::threadPart(int64_t thread) const {
  llvm::SmallVector<uint64_t, 16> cols(lane.begin(), lane.end());
  cols.append(warp.begin(), warp.end());
  return LinearMap(getLogicalBits(), cols).apply(static_cast<uint64_t>(thread));
}

llvm::SmallVector<int64_t> FragmentLayout::apply(int64_t r, int64_t thread) const {
  return unpack(registerPart(r) ^ threadPart(thread));
}

std::optional<std::pair<int64_t, int64_t>>
FragmentLayout::locate(llvm::ArrayRef<int64_t> coord) const {
  std::optional<uint64_t> input = getMap().solve(pack(coord));
  if (!input) return std::nullopt;
  int64_t r = static_cast<int64_t>(*input & (getNumRegisters() - 1));
  return std::make_pair(r, static_cast<int64_t>(*input >> reg.size()));
}

bool FragmentLayout::isOwner(int64_t thread) const {
  // An input bit is a replica bit when its column depends on the columns
  // before it (registers first); the owner of an element has them all zero,
  // which is the solution LinearMap::solve picks.
  LinearMap map = getMap();
  uint64_t input = static_cast<uint64_t>(thread) << reg.size();
  llvm::ArrayRef<uint64_t> cols = map.getColumns();
  for (unsigned i = reg.size(); i < cols.size(); ++i) {
    if (!(input >> i & 1)) continue;
    if (LinearMap(map.getOutBits(), cols.take_front(i)).rank() ==
        LinearMap(map.getOutBits(), cols.take_front(i + 1)).rank())
      return false;
  }
  return true;
}

bool FragmentLayout::isOwnedWithin(int64_t threads) const {
  for (int64_t t = threads; t < getNumThreads(); ++t) {
    if (!isOwner(t)) continue;
    for (int64_t r = 0; r < getNumRegisters(); ++r)
      if (contains(apply(r, t))) return false;
  }
  return true;
}

FragmentLayout FragmentLayout::project(llvm::ArrayRef<unsigned> keptDims) const {
  llvm::SmallVector<int64_t> newShape;
  for (unsigned d : keptDims) newShape.push_back(shape[d]);
  FragmentLayout target(newShape, {}, lane, warp);
  auto projectMask = [&](uint64_t packed) {
    llvm::SmallVector<int64_t> coord = unpack(packed), kept;
    for (unsigned d : keptDims) kept.push_back(coord[d]);
    return target.pack(kept);
  };
  llvm::SmallVector<uint64_t> newReg, newLane, newWarp;
  for (uint64_t c : reg)
    if (uint64_t p = projectMask(c)) newReg.push_back(p);
  for (uint64_t c : lane) newLane.push_back(projectMask(c));
  for (uint64_t c : warp) newWarp.push_back(projectMask(c));
  return FragmentLayout(newShape, newReg, newLane, newWarp);
}

std::optional<LinearMap> FragmentLayout::registerMapTo(const FragmentLayout &target,
                                                       llvm::ArrayRef<unsigned> keptDims) const {
  if (target.getRank() != keptDims.size() || target.warp.size() != warp.size()) return std::nullopt;
  for (unsigned i = 0; i < keptDims.size(); ++i)
    if (target.shape[i] != shape[keptDims[i]]) return std::nullopt;
  auto projectMask = [&](uint64_t packed) {
    llvm::SmallVector<int64_t> coord = unpack(packed), kept;
    for (unsigned d : keptDims) kept.push_back(coord[d]);
    return target.pack(kept);
  };
  for (unsigned i = 0; i < 5; ++i)
    if (projectMask(lane[i]) != target.lane[i]) return std::nullopt;
  for (unsigned i = 0; i < warp.size(); ++i)
    if (projectMask(warp[i]) != target.warp[i]) return std::nullopt;
  LinearMap targetRegs(target.getLogicalBits(), target.reg);
  llvm::SmallVector<uint64_t, 16> cols;
  for (uint64_t c : reg) {
    std::optional<uint64_t> r = targetRegs.solve(projectMask(c));
    if (!r) return std::nullopt;
    cols.push_back(*r);
  }
  return LinearMap(target.reg.size(), cols);
}

namespace {
/// The bits of a parent layout's packed index inside a window (`inside`) and
/// past its edges (`outside`), and the packing of the window's own shape.
struct WindowBits {
  uint64_t inside = 0, outside = 0;
  FragmentLayout windowShape;
  llvm::SmallVector<unsigned> keptDims;
  const FragmentLayout &parent;

  WindowBits(const FragmentLayout &parent, llvm::ArrayRef<int64_t> sizes,
             llvm::ArrayRef<unsigned> kept)
      : windowShape(keptShape(sizes, kept), {}, {0, 0, 0, 0, 0}, {}),
        keptDims(kept.begin(), kept.end()), parent(parent) {
    for (unsigned d = 0; d < parent.getRank(); ++d) {
      unsigned bits = parent.getDimBits(d);
      unsigned in = sizes[d] == parent.getShape()[d] ? bits : llvm::Log2_64_Ceil(sizes[d]);
      uint64_t dimMask = ((1ull << bits) - 1) << parent.getDimShift(d);
      uint64_t inMask = ((1ull << in) - 1) << parent.getDimShift(d);
      inside |= inMask;
      outside |= dimMask & ~inMask;
    }
  }
  static llvm::SmallVector<int64_t> keptShape(llvm::ArrayRef<int64_t> sizes,
                                              llvm::ArrayRef<unsigned> kept) {
    llvm::SmallVector<int64_t> shape;
    for (unsigned d : kept) shape.push_back(sizes[d]);
    return shape;
  }
  /// A parent index with bits inside the window only, in the window's packing.
  uint64_t toWindow(uint64_t packed) const {
    llvm::SmallVector<int64_t> coord = parent.unpack(packed), kept;
    for (unsigned d : keptDims) kept.push_back(coord[d]);
    return windowShape.pack(kept);
  }
  uint64_t fromWindow(uint64_t packed) const {
    llvm::SmallVector<int64_t> kept = windowShape.unpack(packed), coord(parent.getRank(), 0);
    for (auto [i, d] : llvm::enumerate(keptDims)) coord[d] = kept[i];
    return parent.pack(coord);
  }
};

std::string coordText(const FragmentLayout &l, uint64_t packed) {
  std::string s = "[";
  for (auto [i, c] : llvm::enumerate(l.unpack(packed))) s += (i ? ", " : "") + std::to_string(c);
  return s + "]";
}
} // namespace

std::optional<FragmentWindow> FragmentLayout::window(llvm::ArrayRef<int64_t> offsets,
                                                     llvm::ArrayRef<int64_t> sizes,
                                                     llvm::ArrayRef<unsigned> keptDims,
                                                     std::string *why) const {
  auto refuse = [&](std::string reason) -> std::optional<FragmentWindow> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  for (unsigned d = 0; d < shape.size(); ++d) {
    if (sizes[d] == shape[d] && offsets[d] == 0) continue;
    std::string dim = "dimension " + std::to_string(d);
    if (sizes[d] <= 0 || offsets[d] < 0 || offsets[d] + sizes[d] > shape[d])
      return refuse("the window " + std::to_string(sizes[d]) + " at " +
                    std::to_string(offsets[d]) + " lies outside the fragment's " +
                    std::to_string(shape[d]) + " elements in " + dim);
    if (!llvm::isPowerOf2_64(sizes[d]) || offsets[d] % sizes[d])
      return refuse("in " + dim + " a window of a fragment is the whole extent or a power of "
                    "two at a multiple of its size (registers come in powers of two); this one "
                    "is " + std::to_string(sizes[d]) + " at " + std::to_string(offsets[d]));
  }
  WindowBits bits(*this, sizes, keptDims);
  // Each thread must hold part of every window: no lane or warp bit may
  // step past a window's edge.
  auto threadBits = [&](const char *kind, llvm::ArrayRef<uint64_t> cols) -> std::string {
    for (auto [i, c] : llvm::enumerate(cols)) {
      if (!(c & bits.outside)) continue;
      std::string smallest;
      for (unsigned d = 0; d < shape.size(); ++d) {
        uint64_t dimMask = ((1ull << getDimBits(d)) - 1) << getDimShift(d);
        uint64_t top = 0;
        for (uint64_t t : lane) top |= t & dimMask;
        for (uint64_t t : warp) top |= t & dimMask;
        if (top & bits.outside & dimMask)
          smallest += (smallest.empty() ? "" : ", ") + std::string("dimension ") +
                      std::to_string(d) + " at least " +
                      std::to_string(int64_t{1} << (llvm::Log2_64(top >> getDimShift(d)) + 1));
      }
      return std::string("the fragment's layout gives its elements past the window's edge to "
                         "other threads (") + kind + " bit " + std::to_string(i) + " steps to " +
             coordText(*this, c) + "), so no thread holds the window alone; windows of this "
             "fragment take " + smallest;
    }
    return "";
  };
  if (std::string r = threadBits("lane", lane); !r.empty()) return refuse(r);
  if (std::string r = threadBits("warp", warp); !r.empty()) return refuse(r);
  llvm::SmallVector<uint64_t, 8> windowRegs, selectors;
  llvm::SmallVector<unsigned, 8> windowRegIndex, selectorIndex;
  for (auto [i, c] : llvm::enumerate(reg)) {
    if ((c & bits.outside) && (c & bits.inside))
      return refuse("register bit " + std::to_string(i) + " of the fragment's layout steps to " +
                    coordText(*this, c) + ", across the window's edge");
    if (c & bits.outside) {
      selectors.push_back(c);
      selectorIndex.push_back(i);
    } else {
      windowRegs.push_back(bits.toWindow(c));
      windowRegIndex.push_back(i);
    }
  }
  llvm::SmallVector<int64_t> origin(offsets.begin(), offsets.end());
  std::optional<uint64_t> pick = LinearMap(getLogicalBits(), selectors).solve(pack(origin));
  if (!pick) return refuse("no register of the fragment's layout holds the window at this offset");
  uint64_t base = 0;
  for (auto [j, i] : llvm::enumerate(selectorIndex))
    if (*pick >> j & 1) base |= 1ull << i;
  llvm::SmallVector<uint64_t, 8> regCols, laneCols, warpCols;
  for (unsigned i : windowRegIndex) regCols.push_back(1ull << i);
  for (uint64_t c : lane) laneCols.push_back(bits.toWindow(c));
  for (uint64_t c : warp) warpCols.push_back(bits.toWindow(c));
  FragmentLayout layout(WindowBits::keptShape(sizes, keptDims), windowRegs, laneCols, warpCols);
  return FragmentWindow{layout, LinearMap(reg.size(), regCols), base};
}

FragmentLayout FragmentLayout::aroundWindow(const FragmentLayout &window,
                                            llvm::ArrayRef<int64_t> shape,
                                            llvm::ArrayRef<int64_t> sizes,
                                            llvm::ArrayRef<unsigned> keptDims) {
  FragmentLayout probe(shape, {}, {0, 0, 0, 0, 0}, {});
  WindowBits bits(probe, sizes, keptDims);
  llvm::SmallVector<uint64_t, 8> reg, lane, warp;
  for (uint64_t c : window.getReg()) reg.push_back(bits.fromWindow(c));
  for (unsigned b = 0; b < 64; ++b)
    if (bits.outside >> b & 1) reg.push_back(1ull << b);
  for (uint64_t c : window.getLane()) lane.push_back(bits.fromWindow(c));
  for (uint64_t c : window.getWarp()) warp.push_back(bits.fromWindow(c));
  return FragmentLayout(shape, reg, lane, warp);
}

int64_t FragmentLayout::getContiguousRegisters() const {
  unsigned n = 0;
  unsigned lastBits = getDimBits(shape.size() - 1);
  while (n < reg.size() && n < lastBits && reg[n] == (1ull << n)) ++n;
  return int64_t{1} << n;
}

std::string FragmentLayout::str() const {
  std::string s = "[";
  for (unsigned d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  s += "]";
  auto list = [&](const char *name, llvm::ArrayRef<uint64_t> cols) {
    s += std::string(", ") + name + " = [";
    for (unsigned i = 0; i < cols.size(); ++i) {
      llvm::SmallVector<int64_t> c = unpack(cols[i]);
      s += i ? ", [" : "[";
      for (unsigned d = 0; d < c.size(); ++d) s += (d ? ", " : "") + std::to_string(c[d]);
      s += "]";
    }
    s += "]";
  };
  list("reg", reg);
  list("lane", lane);
  list("warp", warp);
  return s;
}

namespace {
/// Packed [row, col] coordinates of a 2-D tile with `cols` columns.
struct Coords2D {
  unsigned colBits;
  explicit Coords2D(int64_t cols) : colBits(llvm::Log2_64_Ceil(static_cast<uint64_t>(cols))) {}
  uint64_t operator()(int64_t r, int64_t c) const {
    return static_cast<uint64_t>(r) << colBits | static_cast<uint64_t>(c);
  }
};

/// Within a warp, the m16n8 accumulator pattern of mma.sync and wgmma: lane
/// l holds rows l / 4 (+ 8) and columns 2 * (l % 4) (+ 1).
llvm::SmallVector<uint64_t> accumulatorLanes(const Coords2D &at) {
  return {at(0, 2), at(0, 4), at(1, 0), at(2, 0), at(4, 0)};
}
} // namespace

FragmentLayout FragmentLayout::mmaAccumulator(int64_t m, int64_t n, int64_t warpsM,
                                              int64_t warpsN) {
  int64_t tileM = m / warpsM, tileN = n / warpsN;
  // A warp count that is not a power of two pads the tile to the next one
  // (the warps that do not exist hold the padding).
  assert(tileM % 16 == 0 && tileN % 8 == 0 && llvm::isPowerOf2_64(tileM) &&
         llvm::isPowerOf2_64(tileN) && m == tileM * warpsM && n == tileN * warpsN &&
         (llvm::isPowerOf2_64(warpsN) || warpsM == 1) && "the pass checks the warp tile first");
  Coords2D at(n);
  llvm::SmallVector<uint64_t> reg = {at(0, 1), at(8, 0)}, warp;
  for (int64_t s = 8; s < tileN; s *= 2) reg.push_back(at(0, s));
  if (isMmaInterleaved(warpsM, warpsN)) {
    // Warps along M in fours, as wgmma's warpgroups split rows: warp q of
    // a four takes rows 16q.. of each 64, so that a program whose gemms
    // run on different instructions (or targets) has one layout.
    int64_t group = 4 * tileM;
    for (int64_t s = 64; s < group; s *= 2) reg.push_back(at(s, 0));
    warp = {at(16, 0), at(32, 0)};
    for (int64_t s = group; s < m; s *= 2) warp.push_back(at(s, 0));
    return FragmentLayout({m, n}, reg, accumulatorLanes(at), warp);
  }
  for (int64_t s = 16; s < tileM; s *= 2) reg.push_back(at(s, 0));
  for (int64_t s = tileN; s < n; s *= 2) warp.push_back(at(0, s));
  for (int64_t s = tileM; s < m; s *= 2) warp.push_back(at(s, 0));
  return FragmentLayout({m, n}, reg, accumulatorLanes(at), warp);
}

FragmentLayout FragmentLayout::wgmmaAccumulator(int64_t m, int64_t n, int64_t groupsM,
                                                int64_t groupsN) {
  int64_t tileM = m / groupsM, tileN = n / groupsN;
  // An N that is not a power of two is padded (one warpgroup column only):
  // wgmma's registers are its 8-column chunks in order, the layout's first.
  // So is M over a count of warpgroups that is not a power of two: the
  // missing warpgroups hold the padding rows.
  assert(tileM % 64 == 0 && tileN % 8 == 0 && llvm::isPowerOf2_64(tileM) &&
         m == tileM * groupsM && n == tileN * groupsN &&
         (llvm::isPowerOf2_64(tileN) || groupsN == 1) &&
         (llvm::isPowerOf2_64(groupsN) || groupsM == 1) &&
         "the pass checks the warpgroup tile first");
  Coords2D at(n);
  llvm::SmallVector<uint64_t> reg = {at(0, 1), at(8, 0)}, warp = {at(16, 0), at(32, 0)};
  for (int64_t s = 8; s < tileN; s *= 2) reg.push_back(at(0, s));
  for (int64_t s = 64; s < tileM; s *= 2) reg.push_back(at(s, 0));
  for (int64_t s = tileN; s < n; s *= 2) warp.push_back(at(0, s));
  for (int64_t s = tileM; s < m; s *= 2) warp.push_back(at(s, 0));
  return FragmentLayout({m, n}, reg, accumulatorLanes(at), warp);
}

FragmentLayout FragmentLayout::tmemRows(int64_t n, int64_t groups) {
  int64_t share = n / groups;
  assert(llvm::isPowerOf2_64(n) && llvm::isPowerOf2_64(groups) && share >= 1 &&
         "tessel-layout-inference checks the tile first");
  Coords2D at(n);
  llvm::SmallVector<uint64_t> reg, lane, warp = {at(32, 0), at(64, 0)};
  for (int64_t s = 1; s < share; s *= 2) reg.push_back(at(0, s));
  for (int64_t s = 1; s < 32; s *= 2) lane.push_back(at(s, 0));
  for (int64_t s = share; s < n; s *= 2) warp.push_back(at(0, s));
  return FragmentLayout({128, n}, reg, lane, warp);
}

/// The element-wise layout over exactly 2^warpBits warps.
static FragmentLayout elementwiseOnWarps(llvm::ArrayRef<int64_t> shape, unsigned warpBits,
                                         int64_t vector) {
  FragmentLayout probe(shape, {}, {0, 0, 0, 0, 0}, {});
  unsigned total = probe.getLogicalBits();
  unsigned lastBits = probe.getDimBits(shape.size() - 1);
  unsigned vectorBits = std::min<unsigned>(llvm::Log2_64(static_cast<uint64_t>(vector)), lastBits);
  // Give threads work before giving a thread wide vectors.
  while (vectorBits > 0 && vectorBits + 5 + warpBits > total) --vectorBits;
  llvm::SmallVector<bool> used(total, false);
  llvm::SmallVector<uint64_t> reg, lane, warp;
  unsigned next = 0;
  for (; next < vectorBits; ++next) reg.push_back(1ull << next), used[next] = true;
  for (unsigned i = 0; i < 5; ++i) {
    if (next < total) lane.push_back(1ull << next), used[next++] = true;
    else lane.push_back(0);
  }
  // Warps take the slowest bits that are left.
  llvm::SmallVector<uint64_t> warpTop;
  for (unsigned bit = total; bit-- > next && warpTop.size() < warpBits;)
    warpTop.push_back(1ull << bit), used[bit] = true;
  for (auto it = warpTop.rbegin(); it != warpTop.rend(); ++it) warp.push_back(*it);
  while (warp.size() < warpBits) warp.push_back(0);
  for (unsigned bit = 0; bit < total; ++bit)
    if (!used[bit]) reg.push_back(1ull << bit);
  return FragmentLayout(shape, reg, lane, warp);
}

FragmentLayout FragmentLayout::elementwise(llvm::ArrayRef<int64_t> shape, int64_t threads,
                                           int64_t vector) {
  unsigned warpBits = llvm::Log2_64_Ceil(static_cast<uint64_t>(threads / 32));
  FragmentLayout spread = elementwiseOnWarps(shape, warpBits, vector);
  if (llvm::isPowerOf2_64(threads / 32) || spread.isOwnedWithin(threads)) return spread;
  // The missing warps would hold real elements: spread over the power of
  // two below the count; the warps past it replicate the first ones.
  FragmentLayout lower = elementwiseOnWarps(shape, warpBits - 1, vector);
  llvm::SmallVector<uint64_t> warp(lower.getWarp());
  warp.push_back(0);
  return FragmentLayout(shape, lower.getReg(), lower.getLane(), warp);
}
