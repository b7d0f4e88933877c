//===- LowerTmem.cpp - tensor memory's allocation protocol ----------------===//
//
// Part of tessel-lower-tile-ops. A kernel with tensor-memory buffers
// allocates the columns tessel-tmem-allocation chose once per block: warp 0
// runs tcgen05.alloc into a shared word, and tcgen05.fence::before, a
// barrier and tcgen05.fence::after publish the base address to every
// thread (the PTX ISA's rule for ordering tcgen05 ops across a barrier). At
// the end, after the same fences and barrier, warp 0 frees the columns and
// relinquishes the permit so other blocks on the SM may allocate. Tile ops
// on tensor memory (copies, gemm) have no tcgen05 lowering yet and are
// refused.
//
//===----------------------------------------------------------------------===//
#include "TileLowering.h"
#include "tessel/Transforms/BufferUtils.h"

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

LogicalResult TileLowering::prepareTensorMemory() {
  SmallVector<AllocOp> buffers;
  kernel.walk([&](AllocOp alloc) {
    if (getMemorySpace(alloc.getType()) == MemorySpace::tmem) buffers.push_back(alloc);
  });
  if (buffers.empty()) return success();
  if (target.computeCapability < 100)
    return buffers.front().emitError("tensor memory is sm_100a's; this kernel compiles for ")
           << target.arch;
  if (!kernel->getAttrOfType<IntegerAttr>("tmem_columns"))
    return kernel.emitError("tensor memory is not placed; run tessel-tmem-allocation first");
  for (AllocOp alloc : buffers) {
    if (!alloc.getOffset())
      return alloc.emitError("tensor-memory buffer has no column; run tessel-tmem-allocation");
    for (Operation *user : alloc->getUsers())
      return user->emitError("tile ops on tensor memory are not lowered to tcgen05 yet; this "
                             "kernel cannot be compiled");
  }
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointAfter(threadId.getDefiningOp());
  tmemBaseWord = AllocOp::create(b, loc, getTileMemRefType({1}, b.getI32Type(), MemorySpace::shared),
                                 IntegerAttr(), Attribute(), b.getStringAttr("tmem_base"),
                                 IntegerAttr());
  return success();
}

void TileLowering::allocateTensorMemory() {
  if (!tmemBaseWord) return;
  int64_t columns = kernel->getAttrOfType<IntegerAttr>("tmem_columns").getInt();
  Value word = storage.lookup(tmemBaseWord.getResult()).first;
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointAfter(word.getDefiningOp());
  Value address = tilenv::SmemAddressOp::create(b, loc, b.getI32Type(), word);
  Value warp0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, blockThreadId,
                                      arith::ConstantIndexOp::create(b, loc, 32));
  auto allocate = scf::IfOp::create(b, loc, warp0, /*withElseRegion=*/false);
  {
    OpBuilder::InsertionGuard inside(b);
    b.setInsertionPointToStart(allocate.thenBlock());
    tilenv::Tcgen05AllocOp::create(b, loc, address, b.getI64IntegerAttr(columns));
  }
  tilenv::Tcgen05FenceBeforeOp::create(b, loc);
  tilenv::SyncThreadsOp::create(b, loc);
  tilenv::Tcgen05FenceAfterOp::create(b, loc);
  // A fresh constant: the pass's shared ones are defined further down.
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value base = memref::LoadOp::create(b, loc, word, ValueRange{zero});

  b.setInsertionPointToEnd(&kernel.getBodyBlock());
  tilenv::Tcgen05FenceBeforeOp::create(b, loc);
  tilenv::SyncThreadsOp::create(b, loc);
  auto release = scf::IfOp::create(b, loc, warp0, /*withElseRegion=*/false);
  b.setInsertionPointToStart(release.thenBlock());
  tilenv::Tcgen05DeallocOp::create(b, loc, base, b.getI64IntegerAttr(columns));
  tilenv::Tcgen05RelinquishOp::create(b, loc);

  // The buffers themselves are columns of that allocation, with no use left.
  SmallVector<AllocOp> placed;
  kernel.walk([&](AllocOp alloc) {
    if (getMemorySpace(alloc.getType()) == MemorySpace::tmem) placed.push_back(alloc);
  });
  for (AllocOp alloc : placed) alloc->erase();
}
