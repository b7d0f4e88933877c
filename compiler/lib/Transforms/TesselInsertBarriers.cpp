//===- TesselInsertBarriers.cpp - order cross-thread shared accesses ------===//
//
// Each tile op maps elements to threads in its own way, so a shared buffer
// written by one tile op and read (or rewritten) by a later one is a
// cross-thread dependence. The pass walks block-uniform code in order,
// tracking which shared-backed buffers have been read and written since the
// last barrier, and places a barrier before the first op that conflicts:
// `__syncthreads` in code all threads run, a named barrier over the role's
// threads inside a `tile.role` (where a block barrier would deadlock).
//
// Tensor memory is shared by the block like shared memory, with two
// refinements: copies and fills that move it by rows (each thread its own
// lane of its warpgroup's columns) conflict only where warpgroups' columns
// meet, and a tcgen05 gemm that completes in place (every thread waits for
// its commit) leaves nothing pending after it.
//
// Three more rules:
//  - mbarrier initialisation is a write of the mbarrier words: the first use
//    after it is ordered by a barrier, and `fence.mbarrier_init` follows the
//    inits so that the async proxy (TMA) sees them.
//  - A buffer written by threads (the generic proxy) and read by wgmma (the
//    async proxy) gets `fence.proxy.async` after every such write.
//  - The loads that fill multi-buffered pipeline buffers (allocs with
//    `stages`: TMA copies that arrive on an mbarrier, cp.async copies) are
//    ordered by their pipeline's own protocol (mbarrier phases, or cp.async
//    groups and the barrier tessel-software-pipeline places), not by this
//    pass. Every other access of such a buffer is ordered here, per stage:
//    element code that masks or dequantises a loaded stage before a gemm
//    reads it needs a barrier like any other shared tile. Accesses in
//    consecutive iterations of a loop touch different stages (the index
//    advances by one each iteration), and a stage's reuse S iterations later
//    is ordered by the protocol that refills it.
//  - Windows with constant offsets are tracked as boxes: writes into
//    disjoint windows of one tile do not conflict.
//  - Atomic adds commute: they conflict with plain reads and writes of the
//    buffer, not with one another.
//
//===----------------------------------------------------------------------===//
#include "TmaRules.h"
#include "tessel/Transforms/BufferUtils.h"
#include "tessel/Transforms/Passes.h"

#include "llvm/ADT/SetOperations.h"
#include "llvm/ADT/TypeSwitch.h"

namespace tessel {
#define GEN_PASS_DEF_TESSELINSERTBARRIERS
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

namespace {
using BufferSet = llvm::SmallPtrSet<void *, 8>;

/// Shared-memory footprints (buffer, stage, constant window) read or
/// written since the last barrier.
struct Footprints {
  SmallVector<BufferFootprint, 4> items;
  void add(const BufferFootprint &f) {
    auto same = [&](const BufferFootprint &g) {
      return g.root == f.root && g.stage == f.stage && g.lower == f.lower && g.upper == f.upper;
    };
    if (!llvm::any_of(items, same)) items.push_back(f);
  }
  void merge(const Footprints &other) {
    for (const BufferFootprint &f : other.items) add(f);
  }
  bool overlaps(const BufferFootprint &f) const {
    return llvm::any_of(items, [&](const BufferFootprint &g) { return g.mayOverlap(f); });
  }
  bool contains(void *root) const {
    return llvm::any_of(items, [&](const BufferFootprint &g) {
      return g.root.getAsOpaquePointer() == root;
    });
  }
  /// Forgets the stages a loop iteration chose (index values computed from
  /// its induction variable or carried values): on the back edge they name
  /// the previous iteration's stage, which differs from this one's.
  void dropIterationStages(Block &body) {
    llvm::erase_if(items, [&](const BufferFootprint &f) {
      return f.stage && variesWithIteration(f.stage, body.getParentOp());
    });
  }
  bool empty() const { return items.empty(); }
};

/// A copy or fill of tensor memory by rows: thread t moves lane t % 128 of
/// its warpgroup's share of the view's columns (32-bit columns `first +
/// g * step` .. `+ share` for warpgroup g of `groups`). Two such accesses
/// need a barrier between them only where one warpgroup's columns meet
/// another's: a thread reloading, scaling and storing back its own row
/// (the attention forward's correction of O) is ordered by its own
/// tcgen05.wait.
struct RowAccess {
  int64_t first, share, step, groups;
  bool write;
  bool operator==(const RowAccess &o) const {
    return first == o.first && share == o.share && step == o.step && groups == o.groups &&
           write == o.write;
  }
  bool crossesThreads(const RowAccess &other) const {
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t h = 0; h < other.groups; ++h) {
        if (g == h) continue;
        int64_t a = first + g * step, b = other.first + h * other.step;
        if (a < b + other.share && b < a + share) return true;
      }
    return false;
  }
};
using RowAccesses = llvm::DenseMap<void *, SmallVector<RowAccess, 2>>;

struct AccessState {
  Footprints reads, writes;
  /// Atomic adds: they commute, so they conflict only with plain reads and
  /// writes (a histogram's adds from a loop's iterations need no barrier
  /// between them).
  Footprints adds;
  /// Writes that are mbarrier inits: thread 0 runs them all, so they do not
  /// conflict with one another.
  BufferSet inits;
  /// Accumulators tcgen05 gemms read and write: one thread issues every
  /// MMA and the tensor core runs them in order, so they do not conflict
  /// with one another, only with other accesses.
  BufferSet mma;
  /// Tensor memory moved by rows (see RowAccess).
  RowAccesses rows;
  void merge(const AccessState &other) {
    reads.merge(other.reads);
    writes.merge(other.writes);
    adds.merge(other.adds);
    llvm::set_union(inits, other.inits);
    llvm::set_union(mma, other.mma);
    // Each distinct access once: loops merge their entry and exit states.
    for (auto &[root, accesses] : other.rows) {
      SmallVector<RowAccess, 2> &mine = rows[root];
      for (const RowAccess &a : accesses)
        if (!llvm::is_contained(mine, a)) mine.push_back(a);
    }
  }
  bool empty() const {
    return reads.empty() && writes.empty() && adds.empty() && mma.empty() && rows.empty();
  }
};

/// The shared-backed or tensor-memory buffer an operand lives in, unless a
/// pipeline protocol orders it. Tensor memory is shared by the block like
/// shared memory: a tcgen05.st by one warp and the MMA that reads it, or
/// the MMA's result and the warps that load it, are cross-thread
/// dependences (the tcgen05 lowering adds the fences around the barrier).
static Value orderedRoot(Value buffer) {
  Value root = getRootBuffer(buffer);
  auto alloc = root.getDefiningOp<AllocOp>();
  if (alloc && getMemorySpace(alloc.getType()) == MemorySpace::tmem) return root;
  if (!isSharedBacked(root)) return {};
  return root;
}

/// A pipeline's own load into a multi-buffered buffer: its protocol orders
/// it (see the file comment).
static bool isPipelineFill(Operation *op) {
  Value dest;
  if (auto copy = llvm::dyn_cast<CopyAsyncOp>(op)) dest = copy.getDest();
  else if (auto copy = llvm::dyn_cast<CopyOp>(op); copy && copy.getAsync()) dest = copy.getDest();
  if (!dest) return false;
  auto alloc = getRootBuffer(dest).getDefiningOp<AllocOp>();
  return alloc && alloc.getStages();
}

/// The rows a tensor-memory copy or fill moves, when its view's columns are
/// constant and tessel-tmem-allocation recorded the warpgroups' step.
static std::optional<RowAccess> rowAccess(Operation *op, Value view, bool write) {
  auto step = op->getAttrOfType<IntegerAttr>("tmem_group_columns");
  if (!step) return std::nullopt;
  auto type = llvm::cast<MemRefType>(view.getType());
  int64_t values = type.getShape().back(), column = 0;
  Value root = view;
  while (auto region = root.getDefiningOp<RegionOp>()) {
    std::optional<int64_t> lane = getConstantIntValue(region.getOffsets()[0]);
    std::optional<int64_t> offset = getConstantIntValue(region.getOffsets()[1]);
    if (!lane || *lane != 0 || !offset) return std::nullopt;
    column += *offset;
    root = region.getSource();
  }
  if (auto alias = root.getDefiningOp<TmemAliasOp>()) root = alias.getSource();
  auto alloc = root.getDefiningOp<AllocOp>();
  if (!alloc) return std::nullopt;
  // Packed 16-bit values take half a column each.
  bool packed = type.getElementTypeBitWidth() == 16 && !alloc.getUnpacked();
  auto columns = [&](int64_t v) { return packed ? v / 2 : v; };
  int64_t groups = std::max<int64_t>(1, getExecutingThreads(op) / 128);
  return RowAccess{columns(column), std::max<int64_t>(1, columns(values / groups)), step.getInt(),
                   groups, write};
}

/// Whether `buffer` is tensor memory (through regions and aliases).
static bool isTmem(Value buffer) {
  return getMemorySpace(llvm::cast<MemRefType>(buffer.getType())) == MemorySpace::tmem;
}

/// Shared-backed buffers an op reads and writes, element code inside a
/// tile.parallel body included. mbarrier operations other than init are
/// atomic and count as reads.
static void collectAccesses(Operation *op, AccessState &acc) {
  auto note = [&](Value buffer, bool write) {
    if (!orderedRoot(buffer)) return;
    (write ? acc.writes : acc.reads).add(getFootprint(buffer));
  };
  auto noteAdd = [&](Value buffer) {
    if (orderedRoot(buffer)) acc.adds.add(getFootprint(buffer));
  };
  // A tensor-memory operand moved by rows, or else the whole buffer.
  auto noteTmemOrWhole = [&](Operation *o, Value buffer, bool write) {
    if (isTmem(buffer))
      if (std::optional<RowAccess> rows = rowAccess(o, buffer, write))
        if (Value root = orderedRoot(buffer))
          return acc.rows[root.getAsOpaquePointer()].push_back(*rows);
    note(buffer, write);
  };
  op->walk([&](Operation *inner) {
    llvm::TypeSwitch<Operation *>(inner)
        .Case([&](CopyOp o) {
          noteTmemOrWhole(o, o.getSource(), false);
          if (!isPipelineFill(o)) noteTmemOrWhole(o, o.getDest(), true);
        })
        // Conservative for a single-buffered TMA destination: the write is
        // ordered after earlier reads, and later reads after it, although
        // its mbarrier already orders the latter.
        .Case([&](CopyAsyncOp o) {
          note(o.getBarriers(), false);
          if (!isPipelineFill(o)) note(o.getDest(), true);
        })
        .Case([&](FillOp o) { noteTmemOrWhole(o, o.getDest(), true); })
        .Case([&](GemmOp o) {
          for (Value read : o.getOperandsRead()) note(read, false);
          if (o.getInstruction() == GemmInstruction::tcgen05) {
            if (Value root = orderedRoot(o.getC())) acc.mma.insert(root.getAsOpaquePointer());
            return;
          }
          note(o.getC(), false), note(o.getC(), true);
        })
        .Case([&](ReduceOp o) {
          note(o.getSource(), false), note(o.getDest(), false), note(o.getDest(), true);
        })
        .Case([&](AtomicAddOp o) {
          if (llvm::isa<MemRefType>(o.getValue().getType())) note(o.getValue(), false);
          noteAdd(o.getDest());
        })
        .Case([&](MbarrierInitOp o) {
          note(o.getBarriers(), true);
          if (Value root = orderedRoot(o.getBarriers())) acc.inits.insert(root.getAsOpaquePointer());
        })
        .Case<MbarrierArriveOp, MbarrierExpectTxOp, MbarrierWaitOp, MmaCommitOp>(
            [&](Operation *o) { note(o->getOperand(0), false); })
        .Case([&](memref::LoadOp o) { note(o.getMemRef(), false); })
        .Case([&](memref::StoreOp o) { note(o.getMemRef(), true); });
  });
}

static bool conflicts(const AccessState &pending, const AccessState &next) {
  auto rowWrites = [&](void *root) {
    auto it = pending.rows.find(root);
    return it != pending.rows.end() &&
           llvm::any_of(it->second, [](const RowAccess &a) { return a.write; });
  };
  for (const BufferFootprint &w : next.writes.items) {
    void *root = w.root.getAsOpaquePointer();
    bool bothInit = next.inits.contains(root) && pending.inits.contains(root);
    if (pending.reads.overlaps(w) || pending.mma.contains(root) || pending.rows.count(root) ||
        (pending.writes.overlaps(w) && !bothInit))
      return true;
  }
  for (const BufferFootprint &r : next.reads.items) {
    void *root = r.root.getAsOpaquePointer();
    if (pending.writes.overlaps(r) || pending.mma.contains(root) || rowWrites(root)) return true;
  }
  for (const BufferFootprint &a : next.adds.items)
    if (pending.reads.overlaps(a) || pending.writes.overlaps(a)) return true;
  for (const BufferFootprint &a : pending.adds.items)
    if (next.reads.overlaps(a) || next.writes.overlaps(a)) return true;
  for (void *m : next.mma)
    if (pending.reads.contains(m) || pending.writes.contains(m) || pending.rows.count(m))
      return true;
  for (auto &[root, accesses] : next.rows) {
    if (pending.mma.contains(root) || pending.writes.contains(root)) return true;
    auto earlier = pending.rows.find(root);
    for (const RowAccess &a : accesses) {
      if (a.write && pending.reads.contains(root)) return true;
      if (earlier == pending.rows.end()) continue;
      for (const RowAccess &b : earlier->second)
        if ((a.write || b.write) && a.crossesThreads(b)) return true;
    }
  }
  return false;
}

/// A tcgen05 gemm that completes in place: every thread that runs it waits
/// for its commit before going on, so nothing after it needs a barrier for
/// its accumulator or operands (what came before it still does).
static bool completesInPlace(Operation &op) {
  auto gemm = llvm::dyn_cast<GemmOp>(op);
  return gemm && gemm.getInstruction() == GemmInstruction::tcgen05 && !gemm.getIssueOnly();
}

struct BarrierPlacer {
  bool dryRun;
  /// The enclosing role's named barrier (id, threads); unset for the block.
  std::optional<std::pair<int64_t, int64_t>> named;
  llvm::DenseMap<Operation *, int64_t> *roleIds;

  void place(Operation *before) {
    if (dryRun) return;
    OpBuilder b(before);
    if (named)
      BarrierOp::create(b, before->getLoc(), b.getI64IntegerAttr(named->first),
                        b.getI64IntegerAttr(named->second));
    else
      BarrierOp::create(b, before->getLoc(), IntegerAttr(), IntegerAttr());
  }

  /// Walks one block of code its threads run uniformly; returns the state
  /// at its end.
  AccessState walkBlock(Block &block, AccessState state) {
    // Accesses of the roles since the last code every thread runs: sibling
    // roles run at the same time on other threads and order their accesses
    // to each other with mbarriers (a block barrier between a producer and
    // its consumer would deadlock them); code after them is ordered after
    // all of them.
    AccessState siblings;
    auto endRoles = [&] {
      state.merge(siblings);
      siblings = AccessState();
    };
    for (Operation &op : llvm::make_early_inc_range(block)) {
      if (llvm::isa<BarrierOp>(op)) {
        state = siblings = AccessState();
        continue;
      }
      if (!llvm::isa<RoleOp>(op) && !isMemoryEffectFree(&op)) endRoles();
      if (llvm::isa<scf::ForOp, PipelinedOp>(op)) {
        // What the loop conflicts with on entry is ordered once, before
        // it, rather than in every iteration.
        AccessState inside;
        collectAccesses(&op, inside);
        if (conflicts(state, inside)) {
          place(&op);
          state = AccessState();
        }
        Block &body = op.getRegion(0).front();
        BarrierPlacer probe = *this;
        probe.dryRun = true;
        AccessState exit = probe.walkBlock(body, state);
        exit.reads.dropIterationStages(body);
        exit.writes.dropIterationStages(body);
        exit.adds.dropIterationStages(body);
        AccessState entry = state;
        entry.merge(exit); // the back edge
        AccessState realExit = walkBlock(body, entry);
        state.merge(realExit); // zero or more iterations
        continue;
      }
      if (auto ifOp = llvm::dyn_cast<scf::IfOp>(op)) {
        // Tile-level conditions are block-uniform (no thread index exists
        // at this level), so both branches are uniform code.
        AccessState out = walkBlock(ifOp.getThenRegion().front(), state);
        if (!ifOp.getElseRegion().empty())
          out.merge(walkBlock(ifOp.getElseRegion().front(), state));
        else
          out.merge(state);
        state = out;
        continue;
      }
      if (auto role = llvm::dyn_cast<RoleOp>(op)) {
        // Threads diverge at a role: order what came before while every
        // thread is still here, then synchronise only the role's threads.
        AccessState inside;
        collectAccesses(role, inside);
        if (conflicts(state, inside)) {
          place(role);
          state = AccessState();
        }
        BarrierPlacer nested = *this;
        nested.named = {{roleIds->lookup(role), role.getThreads()}};
        nested.walkBlock(role.getBody().front(), AccessState());
        siblings.merge(inside);
        continue;
      }
      AccessState here;
      collectAccesses(&op, here);
      if (here.empty()) continue;
      if (conflicts(state, here)) {
        place(&op);
        state = AccessState();
      }
      if (!completesInPlace(op)) state.merge(here);
    }
    endRoles();
    return state;
  }
};

/// Shared buffers the async proxy accesses: wgmma operands, the sources of
/// TMA stores and reduce-adds, and the destinations of TMA loads. A TMA load
/// into memory the threads wrote (a pipeline stage that element code
/// modified in place) is ordered after those writes only through a proxy
/// fence, as a read is: the release that frees the stage orders the
/// generic proxy alone.
static DenseSet<Value> asyncProxyAccesses(KernelOp kernel, const TargetInfo &target) {
  DenseSet<Value> roots;
  auto note = [&](Value operand) {
    if (Value root = getRootBuffer(operand); isSharedBacked(root)) roots.insert(root);
  };
  kernel.walk([&](Operation *op) {
    if (auto gemm = llvm::dyn_cast<GemmOp>(op);
        gemm && (gemm.getInstruction() == GemmInstruction::wgmma ||
                 gemm.getInstruction() == GemmInstruction::tcgen05))
      for (Value read : gemm.getOperandsRead()) note(read);
    if (auto copy = llvm::dyn_cast<CopyOp>(op); copy && isTmaStore(copy, target))
      note(copy.getSource());
    if (auto load = llvm::dyn_cast<CopyAsyncOp>(op)) note(load.getDest());
    // (Without TMA, before sm_90 or built without it, the threads add.)
    if (auto atomic = llvm::dyn_cast<AtomicAddOp>(op);
        atomic && atomic.getTma() && target.hasTma() && target.tma)
      note(atomic.getValue());
  });
  return roots;
}

/// A generic-proxy write of a buffer the async proxy reads or writes is
/// followed by fence.proxy.async in the writing threads, before the barrier
/// (or the mbarrier arrival) that publishes it.
static void fenceGenericWrites(KernelOp kernel, const TargetInfo &target) {
  DenseSet<Value> asyncAccessed = asyncProxyAccesses(kernel, target);
  if (asyncAccessed.empty()) return;
  SmallVector<Operation *> writers;
  kernel.walk([&](Operation *op) {
    if (op->getParentOfType<ParallelOp>()) return; // the enclosing loop is the writer
    AccessState acc;
    // Every op whose threads write shared memory: copies, fills, element
    // code, reductions and atomic adds into a shared buffer.
    if (llvm::isa<CopyOp, FillOp, ParallelOp, memref::StoreOp, ReduceOp, AtomicAddOp>(op))
      collectAccesses(op, acc);
    for (Value root : asyncAccessed)
      if (acc.writes.contains(root.getAsOpaquePointer()) ||
          acc.adds.contains(root.getAsOpaquePointer()))
        return writers.push_back(op);
  });
  for (Operation *op : writers) {
    if (llvm::isa_and_nonnull<FenceProxyAsyncOp>(op->getNextNode())) continue;
    OpBuilder b(op->getContext());
    b.setInsertionPointAfter(op);
    FenceProxyAsyncOp::create(b, op->getLoc());
  }
}

/// fence.mbarrier_init after each run of mbarrier inits.
static void fenceMbarrierInits(KernelOp kernel) {
  // A run may interleave the scalar code that computes the inits' indices.
  auto nextInit = [](Operation *op) {
    for (op = op->getNextNode(); op; op = op->getNextNode()) {
      if (llvm::isa<MbarrierInitOp>(op)) return true;
      if (!isMemoryEffectFree(op)) return false;
    }
    return false;
  };
  SmallVector<MbarrierInitOp> lastOfRun;
  kernel.walk([&](MbarrierInitOp init) {
    if (!nextInit(init)) lastOfRun.push_back(init);
  });
  for (MbarrierInitOp init : lastOfRun) {
    OpBuilder b(init->getContext());
    b.setInsertionPointAfter(init);
    FenceMbarrierInitOp::create(b, init.getLoc());
  }
}

struct TesselInsertBarriers : tessel::impl::TesselInsertBarriersBase<TesselInsertBarriers> {
  using Base::Base;
  void runOnOperation() override {
    KernelOp kernel = getOperation();
    std::optional<TargetInfo> target = lookupTarget(arch, tma, kernel);
    if (!target) return signalPassFailure();
    // Named barrier 0 is __syncthreads; each role gets its own id.
    llvm::DenseMap<Operation *, int64_t> roleIds;
    bool tooMany = false;
    kernel.walk([&](RoleOp role) {
      int64_t id = getRoleBarrierId(role);
      if (id > kLastRoleBarrier) {
        role.emitError("more than ")
            << kLastRoleBarrier << " roles need named barriers; the GPU has 16 (0 is the "
            << "block's, the last two take ping-pong turns)";
        tooMany = true;
      }
      roleIds[role] = id;
    });
    if (tooMany) return signalPassFailure();
    fenceMbarrierInits(kernel);
    fenceGenericWrites(kernel, *target);
    BarrierPlacer{false, std::nullopt, &roleIds}.walkBlock(kernel.getBodyBlock(), AccessState());
  }
};
} // namespace
