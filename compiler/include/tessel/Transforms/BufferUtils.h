//===- BufferUtils.h - facts about tile buffers shared by passes -*- C++ -*-===//
#ifndef TESSEL_TRANSFORMS_BUFFERUTILS_H
#define TESSEL_TRANSFORMS_BUFFERUTILS_H

#include "llvm/ADT/MapVector.h"
#include "tessel/Dialect/Tile/TileDialect.h"

namespace tessel {
/// Follows tile.region, tile.stage and tile.bound ops back to the buffer
/// they window.
mlir::Value getRootBuffer(mlir::Value buffer);
/// For each dimension of a (window of a) buffer, the root buffer's dimension
/// it walks; rank-reducing windows leave some root dimensions out.
llvm::SmallVector<unsigned> getRootDims(mlir::Value buffer);
/// The part of a root buffer a view of it covers, as far as the IR says it
/// statically: the pipeline stage (the index of a tile.stage on the way, or
/// null for every stage) and the box of root coordinates that constant
/// windows cut out (empty `lower` for the whole buffer).
struct BufferFootprint {
  mlir::Value root;
  mlir::Value stage;
  llvm::SmallVector<int64_t> lower, upper; // half-open, per root dimension
  /// Whether the two may touch a common element of one stage. Stages with
  /// different index values may still be the same stage; callers that
  /// know better (a loop's consecutive iterations) compare `stage`
  /// themselves.
  bool mayOverlap(const BufferFootprint &other) const;
};
BufferFootprint getFootprint(mlir::Value view);
/// Whether `value` is computed inside `loop` from its iteration (the
/// induction variable or carried values): a pipeline stage index that names
/// another stage in the next iteration.
bool variesWithIteration(mlir::Value value, mlir::Operation *loop);
/// True for buffers that lower to shared memory (fragments live in
/// registers).
bool isSharedBacked(mlir::Value rootBuffer);
/// Bytes one element takes in generated code (index lowers to 32-bit int).
int64_t getElementBytes(mlir::Type elementType);
/// The tile.annotate_layout applied to an allocation, if any.
tile::AnnotateLayoutOp getAnnotatedLayout(tile::AllocOp alloc);
/// Number of elements of storage an allocation needs under its layout.
int64_t getStorageElements(tile::AllocOp alloc);
/// Bytes between two pipeline stages of a multi-buffered shared allocation
/// (its storage, aligned so that every stage keeps the swizzle's alignment).
int64_t getStageBytes(tile::AllocOp alloc);
/// The buffer and indices of an element access (memref.load, memref.store,
/// scalar tile.atomic_add); a null buffer for any other op.
std::pair<mlir::Value, mlir::ValueRange> getElementAccess(mlir::Operation *op);
/// Places every shared-backed allocation of a kernel in dynamic shared memory
/// (128-byte aligned, 1024 for swizzled layouts, in program order) and
/// returns the total bytes.
/// `place` is called with each allocation and its byte offset.
int64_t planSharedMemory(tile::KernelOp kernel,
                         llvm::function_ref<void(tile::AllocOp, int64_t)> place = {});
/// Elements per thread of the shared scratch a fragment reduction needs
/// when the reduced dimension spans warps (0 when it stays inside each warp,
/// or the layouts are not inferred yet): the destination's registers.
int64_t getReductionScratchRegisters(tile::ReduceOp op);
/// The reductions' shared scratch, one buffer per group of threads that
/// runs reductions (a role, or the whole block of `threads` outside roles;
/// the key is the RoleOp or null): f32 elements for the threads of the group
/// times the widest destination's registers. Reductions of one group share
/// it, since each starts with a barrier of the group (every earlier read of
/// the scratch is done); groups that run at once each need their own.
llvm::MapVector<mlir::Operation *, int64_t> getReductionScratchGroups(tile::KernelOp kernel,
                                                                      int64_t threads);
/// Bytes of reduction scratch tile-op lowering will add to a kernel that
/// runs `threads` threads then.
int64_t getReductionScratchBytes(tile::KernelOp kernel, int64_t threads);
/// Errors (with a note per shared buffer) when the kernel's shared memory
/// exceeds `maxBytes`.
mlir::LogicalResult verifySharedMemory(tile::KernelOp kernel, llvm::StringRef arch,
                                       int64_t maxBytes);
/// Whether an index is at least 0 whatever the kernel's arguments: built
/// from non-negative constants, index parameters (symbols, which a launch
/// refuses below 0), block and thread indices, loop counters that start at
/// 0 or above, and arithmetic that keeps the sign (an index that overflows
/// 32 bits is out of every tensor anyway). `known` names other values that
/// are never negative.
bool isProvablyNonNegative(mlir::Value v, llvm::function_ref<bool(mlir::Value)> known = {});
/// The largest value an index can take, where it can be bounded from its
/// definition: constants, element-loop and loop counters of constant
/// extent, thread indices (below the threads that run them), values
/// zero-extended from a narrower integer, and arithmetic over those that
/// keeps a bound (sums and products of non-negative bounds, remainders and
/// masks, quotients and shifts). Nothing for a value read from memory or a
/// kernel argument. An access whose index is bounded inside its buffer
/// needs no run-time check against the buffer's end.
std::optional<int64_t> provableUpperBound(mlir::Value v);
/// The named barrier a tile.role synchronises its threads with: roles are
/// numbered 1, 2, ... in the kernel's walk order (0 is __syncthreads).
int64_t getRoleBarrierId(tile::RoleOp role);
/// The threads that run `op`: its enclosing tile.role's, or its kernel's
/// (`op` may be the kernel itself).
int64_t getExecutingThreads(mlir::Operation *op);
/// Whether `map` (logical indices to one element offset, an affine shared
/// layout) is linear, with no mod or division, and steps by one element
/// along its last index: consecutive elements of a row are consecutive in
/// memory, so rows move in vectors (each one's alignment checked).
bool isUnitStrideAlongLastDim(mlir::AffineMap map);
} // namespace tessel

#endif
