//===- LayoutInference.h - tessel-layout-inference's state ------*- C++ -*-===//
//
// Not installed: the pass's working state, shared by the file that runs it
// (TesselLayoutInference.cpp: propagation, free choices, shared layouts)
// and the one that places gemms and tensor-memory copies
// (LayoutInferenceGemms.cpp: instruction, warp grid, accumulator layout).
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TRANSFORMS_LAYOUTINFERENCE_H
#define TESSEL_TRANSFORMS_LAYOUTINFERENCE_H

#include "tessel/Dialect/Tile/TileDialect.h"
#include "tessel/Layout/FragmentLayout.h"
#include "tessel/Transforms/Passes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/EquivalenceClasses.h"

namespace tessel::layout_inference {

using mlir::ArrayRef;
using mlir::DenseMap;
using mlir::FailureOr;
using mlir::LogicalResult;
using mlir::MemRefType;
using mlir::MLIRContext;
using mlir::Operation;
using mlir::SmallVector;
using mlir::Value;
using layout::FragmentLayout;
using namespace tile;

/// A fragment access inside a parallel body: the fragment and which loop
/// dimensions index it.
struct LoopAccess {
  Value fragment;
  SmallVector<unsigned> dims;
};

struct Placed {
  FragmentLayout layout;
  Operation *origin;
};

class LayoutInference {
public:
  LayoutInference(KernelOp kernel, const TargetInfo &target)
      : kernel(kernel), target(target), ctx(kernel.getContext()) {}
  LogicalResult run();

private:
  KernelOp kernel;
  TargetInfo target;
  MLIRContext *ctx;
  int64_t threads = 0;
  DenseMap<Value, Placed> fragments;
  DenseMap<Operation *, Placed> loops;
  DenseMap<Operation *, SmallVector<LoopAccess>> loopAccesses;
  /// Loads of a fragment at indices other than the loop's own.
  SmallVector<Operation *> broadcastReads;
  SmallVector<Value> fragmentOrder;

  static bool isFragment(Value v) {
    auto type = llvm::dyn_cast<MemRefType>(v.getType());
    return type && getMemorySpace(type) == MemorySpace::fragment;
  }
  /// Each fragment's threads: those of the code that uses it, which must
  /// be one role (or none); layouts are placed for that many threads.
  LogicalResult collectFragmentThreads();
  DenseMap<Value, int64_t> fragmentThreads;
  LogicalResult collectLoopAccesses();
  /// Fragments whose layouts are tied (indexed by one parallel loop, or
  /// copied one to the other), and the ties that reach a gemm's register
  /// operand A, whose layout splits warps along M only.
  void collectTies();
  llvm::EquivalenceClasses<Value> tied;
  DenseMap<Value, GemmOp> registerOperandTie; // tie leader -> the gemm reading it as A
  /// The policy a gemm places its warps by: `square` becomes full_row where
  /// the accumulator is tied to a register operand A (FlashAttention's S,
  /// exponentiated into P for P x V), so that the program's layouts agree
  /// on every target: wgmma splits a warpgroup's warps along M anyway,
  /// mma.sync's square split would not.
  WarpPolicy effectivePolicy(GemmOp gemm);
  /// `square`, or the split along one dimension where the accumulator has
  /// windows narrower in the other.
  WarpPolicy windowedPolicy(GemmOp gemm);
  LogicalResult checkFragmentUses();
  /// The copies tessel-fragment-windows placed between a window of a
  /// fragment and the window's own registers: each copy's window and
  /// registers.
  LogicalResult collectWindowCopies(RegionOp region);
  DenseMap<Operation *, std::pair<RegionOp, Value>> windowCopies;
  llvm::DenseSet<Value> windowFragments;
  /// The window's registers take the fragment's layout restricted to the
  /// window; a fragment still free, the window's extended by registers.
  LogicalResult propagateWindow(CopyOp copy, bool &changed);
  LogicalResult assign(Value fragment, const FragmentLayout &layout, Operation *origin);
  LogicalResult placeGemm(GemmOp gemm);
  /// FP8 and 8-bit integer operands: wgmma k32, both operands K-major.
  LogicalResult placeEightBitGemm(GemmOp gemm);
  /// 8-bit integer operands on mma.sync m16n8k32.
  LogicalResult placeEightBitMmaSync(GemmOp gemm, int64_t m, int64_t n, int64_t k);
  /// Places `gemm` on wgmma with the first warpgroup grid of `policy` that
  /// splits [m, n]; false when none does.
  FailureOr<bool> placeOnWgmma(GemmOp gemm, int64_t m, int64_t n, int64_t k, WarpPolicy policy,
                               bool aInRegisters);
  /// A gemm whose accumulator is in tensor memory: tcgen05.mma.
  LogicalResult placeTcgen05Gemm(GemmOp gemm);
  /// A fragment copied to or from tensor memory takes the .32x32b layout.
  LogicalResult placeTmemCopy(CopyOp copy);
  LogicalResult propagate(bool &changed);
  LogicalResult propagateLoop(ParallelOp loop, bool &changed);
  /// Every thread holding every element: the layout broadcast reads need.
  FragmentLayout replicated(ArrayRef<int64_t> shape) const;
  LogicalResult checkBroadcastReads();
  int64_t preferredVector(Value fragment);
  void placeSharedLayouts();
};

inline bool inTmem(Value v) {
  return getMemorySpace(llvm::cast<mlir::MemRefType>(v.getType())) == MemorySpace::tmem;
}

/// Warp grids [along M, along N] for a gemm, best first by the policy.
SmallVector<std::pair<int64_t, int64_t>> warpGrids(int64_t units, int64_t m, int64_t n,
                                                    WarpPolicy policy);

} // namespace tessel::layout_inference

#endif
