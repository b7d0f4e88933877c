//===- SyncModel.h - accesses and orderings tessel-verify-sync reasons about -===//
//
// The facts tessel-verify-sync works from, kept apart from its rules: which
// shared or tensor memory each tile op touches, through which proxy, and
// how a pipeline stage index relates to an mbarrier index.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TRANSFORMS_SYNCMODEL_H
#define TESSEL_TRANSFORMS_SYNCMODEL_H

#include "TmaRules.h"
#include "tessel/Transforms/BufferUtils.h"

namespace tessel::sync {

/// How an access reaches memory: threads' own loads and stores (generic),
/// or the async proxy (TMA, wgmma and tcgen05 operand reads).
enum class Proxy { generic, async };

/// An access that completes later than the op that issues it: a TMA load
/// (at its mbarrier), a cp.async load (at a cp_async_wait), or an
/// issue-only tcgen05 gemm's operands and accumulator (at tile.mma_wait).
enum class Fill { none, tma, cpAsync, mma };

/// One access of shared or tensor memory by a tile op.
struct Access {
  mlir::Operation *op;
  BufferFootprint where;
  bool write;
  Proxy proxy;
  Fill fill = Fill::none;
  /// For TMA fills: the mbarrier array and index its bytes complete on.
  mlir::Value barrier, barrierIndex;
  /// Accesses that need no ordering between one another whatever threads
  /// run them: tcgen05 gemms' accumulators (one thread issues every MMA,
  /// the tensor core runs them in order) and tensor memory moved by rows
  /// (each thread its own lane).
  bool mmaAccumulator = false, tmemRows = false;
  /// Atomic adds: they commute, so two of them need no ordering between
  /// them (only against plain reads and writes).
  bool atomicAdd = false;
  /// A tcgen05 gemm whose lowering has every executing thread wait for its
  /// commit: complete, for all of them, when the op is.
  bool completesInPlace = false;
};

/// The accesses of `op` itself (a tile.parallel's body counted as its
/// own), for shared-backed and tensor-memory buffers.
void collectAccesses(mlir::Operation *op, const TargetInfo &target,
                     llvm::SmallVectorImpl<Access> &out);

/// Whether the two accesses need an ordering: different ops (one op maps
/// each element to the same thread every time), one of them writes, they
/// may overlap, and neither exemption applies.
bool needsOrdering(const Access &a, const Access &b);

/// An index value as ((base + inner) mod modulus) + outer, as far as
/// constant additions and remainders show it (modulus 0: no remainder).
/// Pipeline stage indices and the mbarrier indices beside them take this
/// form, so two of them can be proved equal or different.
struct IndexForm {
  mlir::Value base; // null for a constant
  int64_t inner = 0, modulus = 0, outer = 0;
};
IndexForm getIndexForm(mlir::Value index);
/// Same base and remainder: the two differ by `outer` alone.
bool sameCycle(const IndexForm &a, const IndexForm &b);
/// Provably the same value.
bool provablyEqual(mlir::Value a, mlir::Value b);
/// Provably different values.
bool provablyDifferent(mlir::Value a, mlir::Value b);

/// May the two accesses touch one element of one stage, as far as their
/// stage indices show (stages with provably different indices do not)?
bool mayOverlap(const Access &a, const Access &b);

/// How the IR names a buffer in a message: its `name`, or where it was
/// allocated.
std::string describeBuffer(mlir::Value root);

} // namespace tessel::sync

#endif
