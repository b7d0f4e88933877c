//===- LowerTmem.cpp - tensor memory's allocation protocol ----------------===//
//
// Part of tessel-lower-tile-ops. A kernel with tensor-memory buffers
// allocates the columns tessel-tmem-allocation chose once per block: warp 0
// runs tcgen05.alloc into a shared word, and tcgen05.fence::before, a
// barrier and tcgen05.fence::after publish the base address to every
// thread (the PTX ISA's rule for ordering tcgen05 ops across a barrier). At
// the end, after the same fences and barrier, warp 0 frees the columns and
// relinquishes the permit so other blocks on the SM may allocate. Each
// tcgen05 gemm gets a commit mbarrier, initialised with the allocation, and
// a per-thread phase; LowerTcgen05.cpp lowers the tile ops themselves.
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
  for (AllocOp alloc : buffers)
    if (!alloc.getOffset())
      return alloc.emitError("tensor-memory buffer has no column; run tessel-tmem-allocation");
  // A completion barrier for each gemm that completes in place and each
  // tile.mma_wait (for the issue_only gemms before it).
  kernel.walk([&](Operation *op) {
    auto gemm = llvm::dyn_cast<GemmOp>(op);
    if ((gemm && gemm.getInstruction() == GemmInstruction::tcgen05 && !gemm.getIssueOnly()) ||
        llvm::isa<MmaWaitOp>(op))
      tcgen05GemmIndex.try_emplace(op, tcgen05GemmIndex.size());
  });
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointAfter(threadId.getDefiningOp());
  auto shared = [&](Type type, int64_t count, StringRef name) {
    return AllocOp::create(b, loc, getTileMemRefType({count}, type, MemorySpace::shared),
                           IntegerAttr(), Attribute(), b.getStringAttr(name), IntegerAttr());
  };
  tmemBaseWord = shared(b.getI32Type(), 1, "tmem_base");
  if (!tcgen05GemmIndex.empty()) {
    int64_t count = tcgen05GemmIndex.size();
    tcgen05Barriers = shared(b.getI64Type(), count, "tcgen05_done");
    tcgen05Phases = allocLocal(count, b.getI32Type());
  }
  return success();
}

void TileLowering::allocateTensorMemory() {
  if (!tmemBaseWord) return;
  int64_t columns = kernel->getAttrOfType<IntegerAttr>("tmem_columns").getInt();
  Value word = storage.lookup(tmemBaseWord.getResult()).first;
  OpBuilder::InsertionGuard g(b);
  // After the word and the gemms' barriers and phases (allocated after it).
  b.setInsertionPointAfter(tcgen05Phases ? storage.lookup(tcgen05Phases).first.getDefiningOp()
                                         : word.getDefiningOp());
  Value address = tilenv::SmemAddressOp::create(b, loc, b.getI32Type(), word);
  Value warp0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, blockThreadId,
                                      arith::ConstantIndexOp::create(b, loc, 32));
  auto allocate = scf::IfOp::create(b, loc, warp0, /*withElseRegion=*/false);
  {
    OpBuilder::InsertionGuard inside(b);
    b.setInsertionPointToStart(allocate.thenBlock());
    tilenv::Tcgen05AllocOp::create(b, loc, address, b.getI64IntegerAttr(columns));
  }
  // Fresh constants: the pass's shared ones are defined further down.
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  if (tcgen05Barriers) {
    // Thread 0 initialises the gemms' commit barriers (one arrival: the
    // commit); every thread starts waiting for phase 0.
    Value barriers = storage.lookup(tcgen05Barriers).first;
    Value phases = storage.lookup(tcgen05Phases).first;
    Value thread0 = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, blockThreadId, zero);
    auto init = scf::IfOp::create(b, loc, thread0, /*withElseRegion=*/false);
    Value zero32 = arith::ConstantIntOp::create(b, loc, b.getI32Type(), 0);
    for (int64_t i = 0, e = tcgen05GemmIndex.size(); i < e; ++i) {
      Value slot = arith::ConstantIndexOp::create(b, loc, i);
      memref::StoreOp::create(b, loc, zero32, phases, ValueRange{slot});
      OpBuilder::InsertionGuard inside(b);
      b.setInsertionPointToStart(init.thenBlock());
      Value at = arith::AddIOp::create(
          b, loc, tilenv::SmemAddressOp::create(b, loc, b.getI32Type(), barriers),
          arith::ConstantIntOp::create(b, loc, b.getI32Type(), 8 * i));
      tilenv::MbarrierInitOp::create(b, loc, at, b.getI64IntegerAttr(1));
    }
    {
      OpBuilder::InsertionGuard inside(b);
      b.setInsertionPoint(init.thenBlock()->getTerminator());
      tilenv::FenceMbarrierInitOp::create(b, loc);
    }
  }
  tilenv::Tcgen05FenceBeforeOp::create(b, loc);
  tilenv::SyncThreadsOp::create(b, loc);
  tilenv::Tcgen05FenceAfterOp::create(b, loc);
  Value base = memref::LoadOp::create(b, loc, word, ValueRange{zero});
  tmemBase = base;

  b.setInsertionPointToEnd(&kernel.getBodyBlock());
  tilenv::Tcgen05FenceBeforeOp::create(b, loc);
  tilenv::SyncThreadsOp::create(b, loc);
  auto release = scf::IfOp::create(b, loc, warp0, /*withElseRegion=*/false);
  b.setInsertionPointToStart(release.thenBlock());
  tilenv::Tcgen05DeallocOp::create(b, loc, base, b.getI64IntegerAttr(columns));
  tilenv::Tcgen05RelinquishOp::create(b, loc);
}
