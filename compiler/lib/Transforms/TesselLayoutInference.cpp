//===- TesselLayoutInference.cpp - layouts for fragments and shared tiles -===//
//
// Strict constraints (annotations; gemm accumulators and tensor-memory
// copies, placed by LayoutInferenceGemms.cpp) are placed first, then
// propagated through parallel loops, reductions and copies until nothing
// changes, then every fragment still free gets an element-wise layout and
// propagation runs again. Each layout remembers the op that fixed it, so a
// conflict names both ops.
//
//===----------------------------------------------------------------------===//
#include "LayoutInference.h"
#include "tessel/Transforms/BufferUtils.h"
#include "tessel/Transforms/Remarks.h"
#include "tessel/Transforms/Passes.h"
#include "tessel/Transforms/RegisterPressure.h"

#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "llvm/Support/MathExtras.h"

namespace tessel {
#define GEN_PASS_DEF_TESSELLAYOUTINFERENCE
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;
using layout::FragmentLayout;
using layout::SharedLayout;
using namespace tessel::layout_inference;

static std::string str(const FragmentLayout &l) { return "#tile.fragment<" + l.str() + ">"; }

LogicalResult LayoutInference::assign(Value fragment, const FragmentLayout &layout,
                                      Operation *origin) {
  auto it = fragments.find(fragment);
  if (it == fragments.end()) {
    fragments.try_emplace(fragment, Placed{layout, origin});
    return success();
  }
  if (it->second.layout == layout) return success();
  InFlightDiagnostic diag = origin->emitError("layout conflict on a fragment: '")
                            << origin->getName() << "' needs " << str(layout) << " but '"
                            << it->second.origin->getName() << "' gave it "
                            << str(it->second.layout);
  diag.attachNote(it->second.origin->getLoc()) << "the other layout comes from here";
  diag.attachNote(fragment.getLoc()) << "the fragment is allocated here";
  return failure();
}

LogicalResult LayoutInference::collectFragmentThreads() {
  // Uses in program order, so that a mismatch is reported at the later one.
  DenseMap<Value, Operation *> firstUse;
  for (Value f : fragmentOrder) firstUse[f] = nullptr;
  WalkResult walk = kernel.walk<WalkOrder::PreOrder>([&](Operation *user) -> WalkResult {
    if (llvm::isa<AnnotateLayoutOp>(user)) return WalkResult::advance();
    for (Value operand : user->getOperands()) {
      auto it = firstUse.find(operand);
      if (it == firstUse.end()) continue;
      Operation *first = it->second;
      if (!first) {
        it->second = user;
        continue;
      }
      if (getExecutingThreads(user) == getExecutingThreads(first)) continue;
      InFlightDiagnostic diag =
          user->emitError("this fragment is used by ")
          << getExecutingThreads(user) << " threads here and by " << getExecutingThreads(first)
          << " threads elsewhere; a fragment belongs to the threads of one role (allocate one "
             "for each)";
      diag.attachNote(first->getLoc()) << "the other use";
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (walk.wasInterrupted()) return failure();
  for (Value f : fragmentOrder) {
    Operation *first = firstUse.lookup(f);
    int64_t count = first ? getExecutingThreads(first) : kernel.getThreads();
    if (count < 32 || count % 32)
      return (first ? first : f.getDefiningOp())->emitError(
                 "fragments need whole warps, at least 32 threads (layouts split threads into "
                 "lanes and warps); these run on ")
             << count;
    fragmentThreads[f] = count;
  }
  return success();
}

LogicalResult LayoutInference::collectLoopAccesses() {
  WalkResult result = kernel.walk([&](ParallelOp loop) -> WalkResult {
    Block &body = loop.getBody().front();
    SmallVector<LoopAccess> &accesses = loopAccesses[loop];
    WalkResult inner = loop.getBody().walk([&](Operation *op) -> WalkResult {
      auto [memref, indices] = getElementAccess(op);
      if (!memref || !isFragment(memref)) return WalkResult::advance();
      if (!memref.getDefiningOp<AllocOp>())
        return op->emitError("fragments are indexed directly, not through tile.region");
      if (llvm::isa<AtomicAddOp>(op))
        return op->emitError("atomic_add into a fragment: fragments are private to threads; "
                             "use plain arithmetic");
      LoopAccess access{memref, {}};
      bool loopIndexed = true;
      for (Value index : indices) {
        auto arg = llvm::dyn_cast<BlockArgument>(index);
        if (!arg || arg.getOwner() != &body ||
            (!access.dims.empty() && arg.getArgNumber() <= access.dims.back()))
          loopIndexed = false;
        else
          access.dims.push_back(arg.getArgNumber());
      }
      if (loopIndexed) {
        accesses.push_back(access);
        return WalkResult::advance();
      }
      // Any other index reads a fragment every thread holds whole (a
      // replicated layout, such as a reduction over all its dimensions
      // gives): a broadcast value.
      if (!llvm::isa<memref::LoadOp>(op))
        return op->emitError("a fragment written inside tile.parallel is indexed by the "
                             "loop's own indices, in loop order (each thread holds only its "
                             "part)");
      broadcastReads.push_back(op);
      return WalkResult::advance();
    });
    return inner.wasInterrupted() ? WalkResult::interrupt() : WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

LogicalResult LayoutInference::checkFragmentUses() {
  // Fragments live in registers: only tile ops and parallel bodies, which
  // know the layout, may touch them.
  WalkResult result = kernel.walk([&](AllocOp alloc) -> WalkResult {
    if (!isFragment(alloc.getResult())) return WalkResult::advance();
    fragmentOrder.push_back(alloc.getResult());
    for (Operation *user : alloc->getUsers()) {
      if (llvm::isa<CopyOp, FillOp, GemmOp, ReduceOp, AtomicAddOp, AnnotateLayoutOp>(user))
        continue;
      if (llvm::isa<memref::LoadOp, memref::StoreOp>(user) && user->getParentOfType<ParallelOp>())
        continue;
      if (auto region = llvm::dyn_cast<RegionOp>(user)) {
        if (failed(collectWindowCopies(region))) return WalkResult::interrupt();
        continue;
      }
      return user->emitError(
          "a fragment is read or written outside parallel(): element code reaches a "
          "fragment's registers only inside parallel(), where each thread touches what it "
          "holds (a fragment every thread holds whole, such as a full reduction's result, is "
          "read there at any index, as in parallel(1, ...))");
    }
    return WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

LogicalResult LayoutInference::collectWindowCopies(RegionOp region) {
  for (Operation *user : region->getUsers()) {
    auto copy = llvm::dyn_cast<CopyOp>(user);
    Value other = copy ? (copy.getSource() == region.getResult() ? copy.getDest()
                                                                 : copy.getSource())
                       : Value();
    if (!copy || !other.getDefiningOp<AllocOp>() || !isFragment(other))
      return user->emitError("a window of a fragment is used by '")
             << user->getName() << "' here; tessel-fragment-windows gives each use registers "
             << "of its own (run it before tessel-layout-inference)";
    if (!llvm::all_of(region.getOffsets(), [](Value v) { return getConstantIntValue(v); }))
      return region.emitError("a window of a fragment needs constant offsets; run "
                              "tessel-fragment-windows first");
    windowCopies[copy] = {region, other};
    windowFragments.insert(other);
  }
  return success();
}

LogicalResult LayoutInference::propagateWindow(CopyOp copy, bool &changed) {
  auto [region, window] = windowCopies.lookup(copy);
  Value parent = region.getSource();
  SmallVector<int64_t> offsets = llvm::map_to_vector(
      region.getOffsets(), [](Value v) { return *getConstantIntValue(v); });
  SmallVector<unsigned> kept = *region.getKeptDims();
  auto placedParent = fragments.find(parent);
  if (placedParent != fragments.end()) {
    std::string why;
    std::optional<layout::FragmentWindow> part =
        placedParent->second.layout.window(offsets, region.getSizes(), kept, &why);
    if (!part) {
      InFlightDiagnostic diag = region.emitError("this window of a fragment is not a part of "
                                                 "each thread's registers: ")
                                << why;
      diag.attachNote(placedParent->second.origin->getLoc())
          << "the fragment's layout " << str(placedParent->second.layout) << " comes from here";
      return diag;
    }
    if (!fragments.count(window)) changed = true;
    return assign(window, part->layout, copy);
  }
  auto placedWindow = fragments.find(window);
  if (placedWindow == fragments.end()) return success();
  changed = true;
  auto type = llvm::cast<MemRefType>(parent.getType());
  return assign(parent,
                FragmentLayout::aroundWindow(placedWindow->second.layout, type.getShape(),
                                             region.getSizes(), kept),
                copy);
}

/// Extends a layout over some loop dimensions to all of them: the missing
/// dimensions' bits become registers.
static FragmentLayout extendToLoop(const FragmentLayout &part, ArrayRef<unsigned> dims,
                            ArrayRef<int64_t> extents) {
  FragmentLayout probe(extents, {}, {0, 0, 0, 0, 0}, {});
  auto lift = [&](uint64_t packed) {
    SmallVector<int64_t> coord(extents.size(), 0), small = part.unpack(packed);
    for (auto [i, d] : llvm::enumerate(dims)) coord[d] = small[i];
    return probe.pack(coord);
  };
  SmallVector<uint64_t> reg, lane, warp;
  for (uint64_t c : part.getReg()) reg.push_back(lift(c));
  for (uint64_t c : part.getLane()) lane.push_back(lift(c));
  for (uint64_t c : part.getWarp()) warp.push_back(lift(c));
  for (unsigned d = 0; d < extents.size(); ++d) {
    if (llvm::is_contained(dims, d)) continue;
    for (unsigned bit = 0; bit < probe.getDimBits(d); ++bit)
      reg.push_back(1ull << (probe.getDimShift(d) + bit));
  }
  return FragmentLayout(extents, reg, lane, warp);
}

LogicalResult LayoutInference::propagateLoop(ParallelOp loop, bool &changed) {
  SmallVector<LoopAccess> &accesses = loopAccesses[loop];
  if (accesses.empty()) return success();
  ArrayRef<int64_t> extents = loop.getExtents();
  if (!loops.count(loop)) {
    // The loop takes the layout of its highest-rank placed fragment.
    const LoopAccess *best = nullptr;
    for (const LoopAccess &a : accesses)
      if (fragments.count(a.fragment) && (!best || a.dims.size() > best->dims.size())) best = &a;
    if (!best) return success();
    const FragmentLayout &l = fragments.find(best->fragment)->second.layout;
    FragmentLayout loopLayout = best->dims.size() == extents.size()
                                    ? l
                                    : extendToLoop(l, best->dims, extents);
    // A lower-rank fragment read beside one of the loop's rank that is not
    // placed yet (`y(i, j) = x(i, j) * s(i)`, s a reduction's result or
    // computed from one): extended, its replicas would give every thread
    // whole rows. A placed fragment of the loop's shape whose threads hold
    // s(i) wherever they hold row i (the reduced fragment) spreads the loop
    // over the threads instead; the first in program order is taken.
    if (best->dims.size() < extents.size()) {
      WalkResult found = kernel.walk([&](AllocOp alloc) {
        auto other = fragments.find(alloc.getResult());
        if (other == fragments.end() || alloc.getType().getShape() != extents ||
            !other->second.layout.registerMapTo(l, best->dims))
          return WalkResult::advance();
        loopLayout = other->second.layout;
        return WalkResult::interrupt();
      });
      (void)found;
    }
    loops.try_emplace(loop, Placed{loopLayout, loop});
    changed = true;
  }
  const FragmentLayout &loopLayout = loops.find(loop)->second.layout;
  for (const LoopAccess &a : accesses) {
    auto it = fragments.find(a.fragment);
    if (it == fragments.end()) {
      fragments.try_emplace(a.fragment, Placed{loopLayout.project(a.dims), loop});
      changed = true;
      continue;
    }
    if (!loopLayout.registerMapTo(it->second.layout, a.dims)) {
      InFlightDiagnostic diag =
          loop.emitError("layout conflict: this 'tile.parallel' runs with ")
          << str(loopLayout) << " but a fragment it indexes has " << str(it->second.layout)
          << " from '" << it->second.origin->getName() << "'; the elements would be in "
          << "other threads";
      diag.attachNote(it->second.origin->getLoc()) << "the fragment's layout comes from here";
      return failure();
    }
  }
  return success();
}

FragmentLayout LayoutInference::replicated(ArrayRef<int64_t> shape) const {
  FragmentLayout probe(shape, {}, {0, 0, 0, 0, 0}, {});
  SmallVector<uint64_t> reg;
  for (unsigned bit = 0; bit < probe.getLogicalBits(); ++bit) reg.push_back(uint64_t{1} << bit);
  SmallVector<uint64_t> warp(llvm::Log2_64_Ceil(threads / 32), 0);
  return FragmentLayout(shape, reg, {0, 0, 0, 0, 0}, warp);
}

LogicalResult LayoutInference::checkBroadcastReads() {
  for (Operation *op : broadcastReads) {
    Value fragment = getElementAccess(op).first;
    const Placed &placed = fragments.find(fragment)->second;
    const FragmentLayout &l = placed.layout;
    auto zero = [](uint64_t column) { return column == 0; };
    if (llvm::all_of(l.getLane(), zero) && llvm::all_of(l.getWarp(), zero) && l.isSurjective())
      continue;
    InFlightDiagnostic diag =
        op->emitError("this fragment is read inside tile.parallel at an index that is not the "
                      "loop's own, so every thread must hold all of it, but its layout ")
        << str(l) << " spreads it over the threads; index it with the loop's indices (for a "
        << "constant offset, as in f(i, j + 64), index a window of it with them: "
        << "f.tile({0, 64}, ...)(i, j)), or read a reduction's result (which every thread holds)";
    diag.attachNote(placed.origin->getLoc()) << "the fragment's layout comes from here";
    return failure();
  }
  return success();
}

LogicalResult LayoutInference::propagate(bool &changed) {
  WalkResult result = kernel.walk([&](Operation *op) -> WalkResult {
    threads = getExecutingThreads(op);
    if (auto loop = llvm::dyn_cast<ParallelOp>(op))
      return failed(propagateLoop(loop, changed)) ? WalkResult::interrupt()
                                                  : WalkResult::advance();
    if (auto reduce = llvm::dyn_cast<ReduceOp>(op)) {
      if (!isFragment(reduce.getSource())) return WalkResult::advance();
      if (!isFragment(reduce.getDest()))
        return reduce.emitError("the reduction of a fragment goes into a fragment");
      auto src = fragments.find(reduce.getSource());
      if (src == fragments.end()) return WalkResult::advance();
      SmallVector<unsigned> kept;
      for (unsigned d = 0; d < src->second.layout.getRank(); ++d)
        if (d != reduce.getDim()) kept.push_back(d);
      // Reducing the only dimension leaves one element that every thread
      // ends up holding.
      FragmentLayout result =
          kept.empty() ? replicated({1}) : src->second.layout.project(kept);
      if (!fragments.count(reduce.getDest())) changed = true;
      return failed(assign(reduce.getDest(), result, reduce)) ? WalkResult::interrupt()
                                                              : WalkResult::advance();
    }
    if (auto copy = llvm::dyn_cast<CopyOp>(op)) {
      if (windowCopies.count(copy))
        return failed(propagateWindow(copy, changed)) ? WalkResult::interrupt()
                                                      : WalkResult::advance();
      if (!isFragment(copy.getSource()) || !isFragment(copy.getDest()))
        return WalkResult::advance();
      auto src = fragments.find(copy.getSource()), dst = fragments.find(copy.getDest());
      if (src != fragments.end() && dst == fragments.end()) {
        changed = true;
        return failed(assign(copy.getDest(), src->second.layout, copy)) ? WalkResult::interrupt()
                                                                        : WalkResult::advance();
      }
      if (dst != fragments.end()) {
        if (src == fragments.end()) changed = true;
        return failed(assign(copy.getSource(), dst->second.layout, copy))
                   ? WalkResult::interrupt()
                   : WalkResult::advance();
      }
    }
    return WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

int64_t LayoutInference::preferredVector(Value fragment) {
  // 16-byte accesses of the narrowest element the fragment exchanges with
  // memory: an f32 fragment loaded from f16 takes 8 elements per access.
  int64_t bytes = getElementBytes(llvm::cast<MemRefType>(fragment.getType()).getElementType());
  for (Operation *user : fragment.getUsers()) {
    auto copy = llvm::dyn_cast<CopyOp>(user);
    if (!copy) continue;
    Value other = copy.getSource() == fragment ? copy.getDest() : copy.getSource();
    bytes = std::min(bytes,
                     getElementBytes(llvm::cast<MemRefType>(other.getType()).getElementType()));
  }
  return 16 / bytes;
}

void LayoutInference::placeSharedLayouts() {
  DenseSet<Value> tensorCoreOperands;
  kernel.walk([&](GemmOp gemm) {
    if (!isFragment(gemm.getA())) tensorCoreOperands.insert(getRootBuffer(gemm.getA()));
    tensorCoreOperands.insert(getRootBuffer(gemm.getB()));
  });
  // A buffer that registers write (an epilogue staged for a TMA store)
  // takes the tensor cores' swizzle too: an accumulator fragment writes a
  // few bytes of each of 8 rows per warp instruction, and unswizzled rows a
  // multiple of 128 bytes apart would put them all in the same banks. Only
  // where copies alone touch the buffer, or a region atomic_add reads it (a
  // TMA reduce-add, or thread atomics), so every access goes through the
  // layout's address map.
  DenseSet<Value> writtenFromRegisters;
  // The first op that touches each buffer other than by a copy.
  DenseMap<Value, Operation *> touchedOtherwise;
  kernel.walk([&](Operation *op) {
    if (llvm::isa<RegionOp, StageOp>(op)) return;
    auto copy = llvm::dyn_cast<CopyOp>(op);
    auto atomic = llvm::dyn_cast<AtomicAddOp>(op);
    for (Value operand : op->getOperands()) {
      if (!llvm::isa<MemRefType>(operand.getType())) continue;
      Value root = getRootBuffer(operand);
      if (atomic && operand == atomic.getValue()) continue;
      if (!copy) touchedOtherwise.try_emplace(root, op);
      else if (operand == copy.getDest() && isFragment(copy.getSource()))
        writtenFromRegisters.insert(root);
    }
  });
  kernel.walk([&](AllocOp alloc) {
    MemRefType type = alloc.getType();
    if (getMemorySpace(type) != MemorySpace::shared || alloc.getLayout()) return;
    AnnotateLayoutOp annotated = getAnnotatedLayout(alloc);
    if (annotated) {
      if (auto shared = llvm::dyn_cast<SharedLayoutAttr>(annotated.getLayout()))
        alloc.setLayoutAttr(shared);
      return; // an affine annotation stays on its op
    }
    int64_t bytes = getElementBytes(type.getElementType());
    Value buffer = alloc.getResult();
    bool fromRegisters = type.getRank() >= 2 && writtenFromRegisters.contains(buffer);
    bool stagedTile = fromRegisters && !touchedOtherwise.contains(buffer);
    if (fromRegisters && !stagedTile && !tensorCoreOperands.contains(buffer)) {
      Operation *other = touchedOtherwise.lookup(buffer);
      emitMissed(alloc, "tessel-layout-inference", missed::kSwizzle)
          << "this shared buffer is not swizzled, though registers write it (a swizzle keeps "
             "their rows out of each other's banks): '"
          << other->getName() << "' at " << describeLocation(other->getLoc())
          << " accesses it other than by a copy, and only copies follow a swizzled layout";
    }
    SharedLayout l = tensorCoreOperands.contains(buffer) || stagedTile
                         ? SharedLayout::forTensorCores(type.getShape(), bytes)
                         : SharedLayout(type.getShape(), bytes, 0, 0);
    alloc.setLayoutAttr(SharedLayoutAttr::get(ctx, l));
  });
}

LogicalResult LayoutInference::run() {
  threads = kernel.getThreads();
  if (failed(checkFragmentUses()) || failed(collectFragmentThreads()) ||
      failed(collectLoopAccesses()))
    return failure();
  collectTies();

  // Strict constraints.
  WalkResult strict = kernel.walk([&](Operation *op) -> WalkResult {
    // Placed for the threads that run the op (a role's, inside one).
    threads = getExecutingThreads(op);
    if (auto annotate = llvm::dyn_cast<AnnotateLayoutOp>(op)) {
      if (auto f = llvm::dyn_cast<FragmentLayoutAttr>(annotate.getLayout())) {
        FragmentLayout l = f.getLayout();
        int64_t users = fragmentThreads.lookup(annotate.getBuffer());
        if (l.getNumThreads() != int64_t(llvm::PowerOf2Ceil(users)))
          return annotate.emitError("the annotated layout is for ")
                 << l.getNumThreads() << " threads, the fragment's users run on " << users;
        if (!l.isOwnedWithin(users))
          return annotate.emitError("the annotated layout gives elements to threads past the ")
                 << users << " that run the fragment's users (only padding or replicas may be "
                 << "held there)";
        return failed(assign(annotate.getBuffer(), l, annotate)) ? WalkResult::interrupt()
                                                                 : WalkResult::advance();
      }
    }
    if (auto gemm = llvm::dyn_cast<GemmOp>(op))
      return failed(placeGemm(gemm)) ? WalkResult::interrupt() : WalkResult::advance();
    if (auto copy = llvm::dyn_cast<CopyOp>(op);
        copy && (inTmem(copy.getSource()) || inTmem(copy.getDest())))
      return failed(placeTmemCopy(copy)) ? WalkResult::interrupt() : WalkResult::advance();
    return WalkResult::advance();
  });
  if (strict.wasInterrupted()) return failure();

  // Propagation, then free choices one fragment at a time.
  while (true) {
    bool changed = true;
    while (changed) {
      changed = false;
      if (failed(propagate(changed))) return failure();
    }
    // Windows first, the smallest first, so that the fragments around them
    // keep the threads inside every window.
    Value free;
    for (Value f : fragmentOrder)
      if (!fragments.count(f) && windowFragments.contains(f) &&
          (!free || llvm::cast<MemRefType>(f.getType()).getNumElements() <
                        llvm::cast<MemRefType>(free.getType()).getNumElements()))
        free = f;
    if (!free)
      for (Value f : fragmentOrder)
        if (!fragments.count(f) &&
            (!free || llvm::cast<MemRefType>(f.getType()).getRank() >
                          llvm::cast<MemRefType>(free.getType()).getRank()))
          free = f;
    if (!free) break;
    auto type = llvm::cast<MemRefType>(free.getType());
    threads = fragmentThreads.lookup(free);
    // Replicated only when nothing indexes it element-wise: a fragment
    // computed in parallel loops keeps those loops' spread layout (and a
    // broadcast read of it is then an error).
    bool loopIndexed = llvm::any_of(loopAccesses, [&](auto &entry) {
      return llvm::any_of(entry.second, [&](const LoopAccess &a) { return a.fragment == free; });
    });
    bool broadcast = !loopIndexed && llvm::any_of(broadcastReads, [&](Operation *op) {
      return getElementAccess(op).first == free;
    });
    fragments.try_emplace(free, Placed{broadcast ? replicated(type.getShape())
                                                 : FragmentLayout::elementwise(
                                                       type.getShape(), threads,
                                                       preferredVector(free)),
                                       free.getDefiningOp()});
  }
  if (failed(checkBroadcastReads())) return failure();

  // Registers: 16-bit elements pack in pairs.
  auto registersOf = [&](Value f) {
    auto type = llvm::cast<MemRefType>(f.getType());
    return llvm::divideCeil(fragments.find(f)->second.layout.getNumRegisters() *
                                getElementBytes(type.getElementType()),
                            4);
  };
  // A window's registers are its fragment's once the CUDA compiler
  // forwards the copies between them.
  SmallVector<Value> ownRegisters = llvm::filter_to_vector(
      fragmentOrder, [&](Value f) { return !windowFragments.contains(f); });
  RegisterPeak peak = peakFragmentRegisters(kernel, ownRegisters, registersOf);
  if (peak.registers > 224) {
    InFlightDiagnostic diag = kernel.emitError("fragments need ")
                              << peak.registers << " 32-bit registers per thread; at most 224 fit "
                              << "beside addresses and temporaries (255 per thread)";
    for (Value f : peak.live)
      diag.attachNote(f.getLoc()) << registersOf(f) << " registers for " << f.getType();
    return failure();
  }

  // An element loop's iterations are unrolled per thread: more than the
  // layout's 65536 registers is an error at the loop, not a lowering that
  // never ends.
  for (auto &[op, placed] : loops)
    if (placed.layout.getReg().size() > 16)
      return op->emitError("this parallel loop gives each of its ")
             << getExecutingThreads(op) << " threads 2^" << placed.layout.getReg().size()
             << " iterations, unrolled; at most 65536 (2^16) fit";
  for (auto &[value, placed] : fragments)
    value.getDefiningOp<AllocOp>().setLayoutAttr(FragmentLayoutAttr::get(ctx, placed.layout));
  for (auto &[op, placed] : loops)
    llvm::cast<ParallelOp>(op).setLayoutAttr(FragmentLayoutAttr::get(ctx, placed.layout));
  placeSharedLayouts();
  return success();
}

namespace {
struct TesselLayoutInference
    : tessel::impl::TesselLayoutInferenceBase<TesselLayoutInference> {
  using Base::Base;
  void runOnOperation() override {
    std::optional<TargetInfo> target = lookupTarget(arch, getOperation());
    if (!target) return signalPassFailure();
    if (failed(LayoutInference(getOperation(), *target).run())) signalPassFailure();
  }
};
} // namespace
