//===- LowerSync.cpp - roles, barriers, flags, mbarriers and TMA -----------===//
//
// Part of tessel-lower-tile-ops: what orders threads and asynchronous
// copies. Roles become conditionals on the thread index (with setmaxnreg
// budgets); collective ops inside a role synchronise on its named barrier.
// tile.signal/tile.wait become system-scope release stores and acquire
// spins; mbarriers, TMA loads, stores and reduce-adds become tilenv ops with
// tensor maps recorded on the kernel.
//
//===----------------------------------------------------------------------===//
#include "TileLowering.h"
#include "TmaRules.h"
#include "tessel/Transforms/BufferUtils.h"

#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;
using layout::FragmentLayout;
using layout::LinearMap;

void TileLowering::lowerRole(RoleOp op) {
  // No lower bound for a role from thread 0 (an unsigned `>= 0` is a
  // pointless comparison to the CUDA compiler, which warns).
  Value fromFirst = op.getFirst() ? arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge,
                                                          blockThreadId, idx(op.getFirst()))
                                  : Value();
  Value inside = andI(fromFirst, lt(blockThreadId, idx(op.getFirst() + op.getThreads())));
  auto ifOp = scf::IfOp::create(b, loc, inside, /*withElseRegion=*/false);
  b.setInsertionPointToStart(ifOp.thenBlock());
  if (std::optional<int64_t> regs = op.getMaxRegisters()) {
    if (!target.hasTma())
      return fail(op, "max_registers (setmaxnreg) needs sm_90a or sm_100a");
    // A warpgroup starts with the registers ptxas gives every thread under
    // the kernel's launch bounds; a role that asks for more increases, one
    // that asks for less releases.
    int64_t start = entryRegisters(blockThreads);
    if (*regs != start)
      tilenv::SetMaxNRegOp::create(b, loc, b.getI64IntegerAttr(*regs),
                                   *regs > start ? b.getUnitAttr() : UnitAttr());
  }
  roleThreadIds[op] = op.getFirst() ? arith::SubIOp::create(b, loc, blockThreadId,
                                                            idx(op.getFirst())).getResult()
                                    : blockThreadId;
  Block &body = op.getBody().front();
  Block *dest = ifOp.thenBlock();
  dest->getOperations().splice(std::prev(dest->end()), body.getOperations());
}

void TileLowering::lowerFlag(Operation *op) {
  if (auto signal = llvm::dyn_cast<SignalOp>(op)) {
    // Every thread's earlier writes are done before one thread publishes;
    // its release store is cumulative over what the barrier ordered.
    syncExecutingThreads(op);
    OpBuilder::InsertionGuard g(b);
    guard(eq(threadId, zeroIdx));
    Access flags = resolve(signal.getFlags());
    tilenv::FlagStoreOp::create(b, loc, signal.getValue(), flags.root,
                                operandIndices(flags, rootIndices(flags, signal.getIndices())),
                                signal.getAdd());
    return;
  }
  auto wait = llvm::cast<WaitOp>(op);
  Access flags = resolve(wait.getFlags());
  std::string name = "a flag";
  if (auto param = llvm::dyn_cast<BlockArgument>(flags.root))
    name = "the flags of kernel parameter #" + std::to_string(param.getArgNumber());
  {
    OpBuilder::InsertionGuard g(b);
    guard(eq(threadId, zeroIdx));
    tilenv::FlagWaitOp::create(b, loc, flags.root,
                               operandIndices(flags, rootIndices(flags, wait.getIndices())),
                               wait.getValue(), b.getI64IntegerAttr(wait.getTimeoutMs()),
                               b.getStringAttr(name));
  }
  // The others wait for the spinning thread; its acquire and the barrier
  // make the guarded data visible to them, and the proxy fence to TMA.
  syncExecutingThreads(op);
  if (target.computeCapability >= 90) tilenv::FenceProxyAsyncGlobalOp::create(b, loc);
}

void TileLowering::syncExecutingThreads(Operation *op) {
  if (RoleOp role = roleOf.lookup(op))
    tilenv::NamedBarrierOp::create(b, loc, getRoleBarrierId(role), role.getThreads());
  else
    tilenv::SyncThreadsOp::create(b, loc);
}

void TileLowering::enterRoleOf(Operation *op) {
  threadId = blockThreadId;
  threads = blockThreads;
  if (RoleOp role = roleOf.lookup(op)) {
    threadId = roleThreadIds.lookup(role);
    threads = role.getThreads();
  }
  numThreads = idx(threads);
}

int64_t TileLowering::tensorMapIndex(BlockArgument param, ArrayRef<int64_t> box, int64_t swizzle,
                                     bool perRank) {
  MLIRContext *ctx = kernel.getContext();
  SmallVector<Attribute> maps;
  if (ArrayAttr existing = kernel.getTmaDescriptorsAttr()) maps.assign(existing.begin(), existing.end());
  SmallVector<NamedAttribute> fields = {
      {StringAttr::get(ctx, "box"), DenseI64ArrayAttr::get(ctx, box)},
      {StringAttr::get(ctx, "param"), b.getI64IntegerAttr(param.getArgNumber())},
      {StringAttr::get(ctx, "swizzle"), b.getI64IntegerAttr(swizzle)}};
  // A map per rank of a symmetric tensor, for tiles of tile.peer.
  if (perRank) fields.push_back({StringAttr::get(ctx, "peers"), b.getUnitAttr()});
  auto dict = DictionaryAttr::get(ctx, fields);
  for (auto [i, m] : llvm::enumerate(maps))
    if (m == dict) return i;
  maps.push_back(dict);
  kernel.setTmaDescriptorsAttr(ArrayAttr::get(ctx, maps));
  return maps.size() - 1;
}

bool TileLowering::forEachTmaBox(Operation *op, const Access &global, const Access &shared,
                                 function_ref<void(int64_t, Value, Value, ArrayRef<Value>)> issue) {
  // Another rank's tile: the tensor's map for that rank.
  Value root = global.root, peerRank;
  if (auto peer = root.getDefiningOp<PeerOp>()) {
    root = peer.getSource();
    peerRank = peer.getRank();
  }
  auto param = llvm::dyn_cast<BlockArgument>(root);
  auto layoutAttr = llvm::dyn_cast_or_null<SharedLayoutAttr>(shared.layout);
  if (target.computeCapability < 90) {
    fail(op, "TMA copies need sm_90a");
    return false;
  }
  if (!global.limits.empty()) {
    fail(op, "TMA cannot honour the run-time limits of a tile.bound tensor (a tensor map holds "
             "fixed extents); copy with threads instead");
    return false;
  }
  if (!param || !layoutAttr || layoutAttr.getPad()) {
    fail(op, "TMA moves a window of a global tensor parameter to or from a shared buffer with an "
             "unpadded #tile.shared layout");
    return false;
  }
  layout::SharedLayout l = layoutAttr.getLayout();
  int64_t eb = getElementBytes(shared.elementType);
  ArrayRef<int64_t> shape = shared.tileShape;
  // A window of rows (tmaWindowFirstRow) starts `firstRow` rows into each
  // panel.
  int64_t firstRow = 0;
  if (shape != ArrayRef<int64_t>(shared.rootShape)) {
    SmallVector<std::optional<int64_t>> start =
        llvm::map_to_vector(shared.offsets, [](Value v) { return getConstantIntValue(v); });
    std::optional<int64_t> row = tmaWindowFirstRow(shared.rootShape, shape, start, l, eb);
    if (!row) {
      fail(op, "TMA writes a window of a shared buffer only when it holds whole rows from a row "
               "aligned to the swizzle's period");
      return false;
    }
    firstRow = *row;
  }
  int64_t rank = shape.size(), cols = shape.back();
  // A swizzled buffer is a row of panels `swizzle` bytes wide: one box per
  // panel. Boxes are at most 256 elements along every dimension.
  int64_t panel = l.getSwizzleBytes() ? l.getPanelWidth() : cols;
  const int64_t rowChunk = 256;
  if (rank > 5 || (panel * eb) % 16 || panel > 256 ||
      llvm::any_of(shape.drop_back(std::min<int64_t>(rank, 2)), [](int64_t d) { return d > 256; })) {
    fail(op, "TMA boxes are whole 16-byte rows of at most 256 elements, at most 256 elements in "
             "every other dimension and at most 5 dimensions");
    return false;
  }
  int64_t rows = rank >= 2 ? shape[rank - 2] : 1;
  // The box spans the global tensor's rank; dimensions a rank-reducing
  // window leaves out are one element deep.
  ArrayRef<unsigned> dims = global.rootDims;
  if (dims.back() + 1 != global.rootShape.size() || global.rootShape.size() > 5) {
    fail(op, "TMA needs the tile's rows contiguous in the tensor (its last dimension the "
             "tensor's last) and a tensor of at most 5 dimensions");
    return false;
  }
  SmallVector<int64_t> box(global.rootShape.size(), 1);
  for (auto [k, d] : llvm::enumerate(dims)) box[d] = shape[k];
  box[dims.back()] = panel;
  if (rank >= 2) box[dims[rank - 2]] = std::min(rows, rowChunk);
  int64_t descriptor = tensorMapIndex(param, box, l.getSwizzleBytes(), /*perRank=*/bool(peerRank));
  // Leading dims beyond rank-2 (a window of rows, which is smaller than
  // its buffer, has none).
  int64_t innerRows = shape != ArrayRef<int64_t>(shared.rootShape)
                          ? 1
                          : l.getRows() / std::max<int64_t>(rows, 1);
  for (int64_t p = 0; p < cols / panel; ++p) {
    for (int64_t r = 0; r < rows; r += rowChunk) {
      SmallVector<Value> coords(global.offsets);
      Value &col = coords[dims.back()];
      col = add(col, idx(p * panel));
      if (rank >= 2 && r) coords[dims[rank - 2]] = add(coords[dims[rank - 2]], idx(r));
      // Panel p holds all rows `panel` elements wide, one after another.
      int64_t element = (p * l.getRows() + firstRow + r * innerRows) * panel;
      issue(descriptor, peerRank, sharedAddress(shared, idx(element)), coords);
    }
  }
  return true;
}

void TileLowering::lowerCopyAsync(CopyAsyncOp op) {
  Access src = resolve(op.getSource()), dst = resolve(op.getDest());
  OpBuilder::InsertionGuard g(b);
  guard(eq(threadId, zeroIdx));
  Value barrier = mbarrierAddress(op.getBarriers(), op.getIndex());
  // Multicast: block r of the cluster issues boxes r, r + size, ... and each
  // box lands at the same offsets in every block, completing on each
  // block's barrier.
  int64_t size = op.getMulticast() ? kernel.getClusterSize() : 1;
  Value rank = size > 1 ? tilenv::ClusterRankOp::create(b, loc, b.getIndexType()).getResult() : Value();
  IntegerAttr mask = size > 1 ? b.getI64IntegerAttr((int64_t{1} << size) - 1) : IntegerAttr();
  int64_t box = 0;
  forEachTmaBox(op, src, dst,
                [&](int64_t descriptor, Value peer, Value smem, ArrayRef<Value> coords) {
                  OpBuilder::InsertionGuard perBox(b);
                  if (size > 1) guard(eq(rank, idx(box++ % size)));
                  tilenv::TmaLoadOp::create(b, loc, b.getI64IntegerAttr(descriptor), peer, smem,
                                            barrier, coords, mask);
                });
}

/// Whether the kernel touches `tensor` (through windows of it) only as the
/// destination of copies, so that nothing in it reads back what a TMA store
/// writes.
static bool onlyCopiedInto(Value tensor) {
  for (OpOperand &use : tensor.getUses()) {
    Operation *user = use.getOwner();
    if (llvm::isa<RegionOp, BoundOp>(user) && use.getOperandNumber() == 0) {
      if (!onlyCopiedInto(user->getResult(0))) return false;
      continue;
    }
    auto copy = llvm::dyn_cast<CopyOp>(user);
    if (!copy || copy.getDest() != use.get()) return false;
  }
  return true;
}

void TileLowering::storeWithTma(Operation *op, const Access &src, const Access &dst, bool add,
                                Value onlyIf) {
  // One thread issues every box and waits for the group, so that the
  // barrier before the buffer is written again also orders the TMA reads.
  OpBuilder::InsertionGuard g(b);
  guard(eq(threadId, zeroIdx));
  bool ok = forEachTmaBox(
      op, dst, src, [&](int64_t descriptor, Value peer, Value smem, ArrayRef<Value> coords) {
        OpBuilder::InsertionGuard inBox(b);
        guard(onlyIf);
        tilenv::TmaStoreOp::create(b, loc, b.getI64IntegerAttr(descriptor), peer, smem, coords,
                                   add ? b.getUnitAttr() : UnitAttr());
      });
  if (!ok) return;
  tilenv::BulkCommitOp::create(b, loc);
  // Into another rank's tile (a reduce-add: TMA stores into peers are not
  // issued): the writes complete and are fenced against the thread's later
  // generic accesses, so that a flag it then releases orders them for the
  // peer.
  if (dst.root.getDefiningOp<PeerOp>()) {
    tilenv::BulkWaitOp::create(b, loc, UnitAttr());
    tilenv::FenceProxyAsyncGlobalOp::create(b, loc);
    return;
  }
  // A reduce-add is not read back by the kernel (atomics promise no order
  // with later loads), nor is a tensor the kernel only stores into (a gemm's
  // C), so only the shared source must be free again: the wait can then
  // move past the work that follows (tessel-defer-bulk-waits).
  bool readOnly = add || onlyCopiedInto(getRootBuffer(llvm::cast<CopyOp>(op).getDest()));
  tilenv::BulkWaitOp::create(b, loc, readOnly ? b.getUnitAttr() : UnitAttr());
}

Value TileLowering::mbarrierAddress(Value barriers, Value index) {
  Access bars = resolve(barriers);
  return sharedAddress(bars, index);
}

void TileLowering::fenceMbarrierInits(FenceMbarrierInitOp op) {
  tilenv::FenceMbarrierInitOp::create(b, loc);
  if (kernel.getClusterSize() == 1) return;
  // Peers arrive on this block's barriers and multicast into them: every
  // block's inits must precede every block's first use, which takes all
  // threads of the cluster.
  if (op->getParentOp() != kernel.getOperation()) {
    fail(op, "a kernel launched in clusters initialises its mbarriers at its top level, where "
             "every thread runs (a cluster barrier follows the inits)");
    return;
  }
  // One cluster barrier after the last run of inits covers them all.
  for (Operation *later = op->getNextNode(); later; later = later->getNextNode())
    if (llvm::isa<FenceMbarrierInitOp>(later)) return;
  tilenv::ClusterBarrierOp::create(b, loc);
}

void TileLowering::lowerMbarrier(Operation *op) {
  OpBuilder::InsertionGuard g(b);
  if (auto init = llvm::dyn_cast<MbarrierInitOp>(op)) {
    guard(eq(threadId, zeroIdx));
    tilenv::MbarrierInitOp::create(b, loc, mbarrierAddress(init.getBarriers(), init.getIndex()),
                                   init.getArrivals());
  } else if (auto arrive = llvm::dyn_cast<MbarrierArriveOp>(op)) {
    // One arrival per warp, after the whole warp is done (or per thread).
    if (!arrive.getEachThread()) {
      tilenv::SyncWarpOp::create(b, loc);
      guard(eq(remC(threadId, 32), zeroIdx));
    }
    Value address = mbarrierAddress(arrive.getBarriers(), arrive.getIndex());
    if (!arrive.getCluster()) {
      tilenv::MbarrierArriveOp::create(b, loc, address, IntegerAttr());
    } else {
      // The same barrier in every block of the cluster, this one included.
      for (int64_t r = 0; r < kernel.getClusterSize(); ++r)
        tilenv::MbarrierArriveRemoteOp::create(b, loc, address, idx(r));
    }
  } else if (auto expect = llvm::dyn_cast<MbarrierExpectTxOp>(op)) {
    guard(eq(threadId, zeroIdx));
    tilenv::MbarrierArriveOp::create(b, loc, mbarrierAddress(expect.getBarriers(), expect.getIndex()),
                                     b.getI64IntegerAttr(expect.getBytes()));
  } else if (auto wait = llvm::dyn_cast<MbarrierWaitOp>(op)) {
    tilenv::MbarrierWaitOp::create(b, loc, mbarrierAddress(wait.getBarriers(), wait.getIndex()),
                                   wait.getParity());
    // In a kernel with tensor memory the wait may hand over columns (an
    // MMA's result, a softmax's P): tcgen05 accesses after it are ordered
    // by tcgen05.fence::after_thread_sync, as after a barrier.
    if (tmemBaseWord) tilenv::Tcgen05FenceAfterOp::create(b, loc);
  }
}
