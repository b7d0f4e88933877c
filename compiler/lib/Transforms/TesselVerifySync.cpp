//===- TesselVerifySync.cpp - prove that shared accesses are ordered ------===//
//
// After barrier placement, every pair of accesses to shared or tensor memory
// by different threads where one writes must be ordered by something the
// IR holds, or the compile fails at the user's line. The pass re-derives
// each ordering from the IR; it trusts no pass's intent, so hand-scheduled
// kernels (roles, mbarriers, copy_async written by their author) pass for
// the same reasons generated ones do.
//
// Code that a group of threads runs in order (the kernel's top level, or a
// role's body) is walked like the program runs it, loops twice (the back
// edge), keeping:
//  - the accesses since the group's last barrier (`tile.barrier`, named
//    with the role's id inside a role). A later conflicting access by
//    another op needs a barrier in between: "missing barrier".
//  - TMA loads (copy_async) in flight: nothing but a wait on the mbarrier
//    their bytes arrive on completes them, so an access of their buffer
//    before such a wait is "missing mbarrier wait" (a barrier does not do).
//    cp.async loads stay in flight until a cp_async_wait retires their
//    commit group, and then need a barrier like any write.
//  - generic-proxy writes not yet followed by fence_proxy_async: an
//    async-proxy read (wgmma or tcgen05 operands, TMA store sources) of
//    them is "missing proxy fence".
//  - mbarrier inits not yet published by a barrier, or not fenced
//    (fence_mbarrier_init) before TMA completes on them.
// Pipeline stages are told apart by their index values: a stage index and
// an mbarrier index of the same form ((base + c) mod S) + d are provably the
// same or different stages. A read of a stage that a TMA pipeline fills
// waits first on the fill's mbarrier at the same stage ("stage mix-up"
// otherwise), a producer's fill arrives on its own stage's mbarrier, and
// refilling a stage that another role reads waits for that role's release.
// Across a loop's back edge, accesses whose stage is computed from the
// iteration are dropped: the next iteration's index names another stage,
// and the stage's reuse is ordered by the release and refill rules.
// A loop's loads ahead, issued only for iterations that run (under
// `iv + c < upper` in the body, `lower + c < upper` before the loop) and
// waited for unconditionally by its body, are not in flight after it. The
// stage rule covers fills of the access's own loop (and its prologue) and
// other roles' fills; a fill by another loop the same threads run before
// or after (two loops staging through one buffer) is ordered by what is in
// flight at the loops' bounds.
//
// Between sibling roles (threads running at once), a conflicting pair must
// be ordered by an mbarrier one side arrives on (or a TMA load completes
// on) after its access and the other waits on before its access. A flag
// wait a role runs before its first wait on a pipeline's mbarrier orders
// that pipeline's loads in program order, so the role that issues them must
// wait on the same flags first ("wait in the wrong role"). Issue-only
// tcgen05 gemms are in flight until tile.mma_wait; the others complete in
// place (every thread waits for their commit).
//
// Not proved: races in global memory between blocks or GPUs, the phase
// parity of mbarrier waits and the exact cp.async group count across loop
// iterations (loads issued before a loop are taken as retired by the body's
// first cp_async_wait; loads issued inside are counted), and tensor memory moved by rows across warpgroups
// (tessel-insert-barriers orders those by their columns).
//
//===----------------------------------------------------------------------===//
#include "SyncModel.h"
#include "tessel/Transforms/Remarks.h"
#include "tessel/Transforms/Passes.h"

namespace tessel {
#define GEN_PASS_DEF_TESSELVERIFYSYNC
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;
using namespace tessel::sync;

namespace {

/// An mbarrier wait: the array and index waited on. An index the previous
/// iteration of a loop computed is `shift` iterations old: its form, read
/// in this iteration's terms, has the loop's induction variable lowered by
/// `shift` steps.
struct Waited {
  Value barrier, index;
  Value iv;
  int64_t shift = 0;
  bool operator==(const Waited &o) const {
    return barrier == o.barrier && index == o.index && iv == o.iv && shift == o.shift;
  }
  IndexForm form() const {
    IndexForm f = getIndexForm(index);
    if (iv && f.base == iv) f.inner -= shift;
    return f;
  }
};

/// What one group of threads has done that is not ordered yet.
struct GroupState {
  SmallVector<const Access *> pending, inFlight, unfenced;
  /// mbarrier waits that hold here; and those made, in this iteration, only
  /// when a next iteration follows (hand-scheduled code waits for the next
  /// stage ahead of the loop's back edge).
  SmallVector<Waited> waited, waitedForNext;
  /// Waits made under a condition: they hold again under the same one.
  SmallVector<std::pair<Value, Waited>> waitedUnder;
  /// Induction variables of loops walked in their first iteration, with
  /// their (constant) first value.
  DenseMap<Value, int64_t> firstIteration;
  /// cp.async commit groups closed, and per in-flight cp.async load the
  /// number of groups closed before it.
  int64_t commits = 0;
  DenseMap<const Access *, int64_t> cpGroup;
  /// mbarrier arrays initialised but not published by a barrier, or not
  /// fenced for the async proxy.
  SmallVector<Value> unpublishedInits, unfencedInits;

  void merge(const GroupState &other) {
    auto add = [](auto &into, const auto &from) {
      for (const auto &x : from)
        if (!llvm::is_contained(into, x)) into.push_back(x);
    };
    add(pending, other.pending);
    add(inFlight, other.inFlight);
    add(unfenced, other.unfenced);
    add(unpublishedInits, other.unpublishedInits);
    add(unfencedInits, other.unfencedInits);
    // A wait counts only where every path made it.
    llvm::erase_if(waited, [&](auto &w) { return !llvm::is_contained(other.waited, w); });
    add(waitedForNext, other.waitedForNext);
    add(waitedUnder, other.waitedUnder);
    for (auto [access, group] : other.cpGroup) cpGroup.try_emplace(access, group);
    commits = std::max(commits, other.commits);
  }
};

struct RoleEvents;

/// Whether two values are computed the same way from the same values (the
/// tile level repeats side-effect-free scalar code rather than sharing it).
static bool sameComputation(Value a, Value b, int depth = 8) {
  if (a == b) return true;
  std::optional<int64_t> ca = getConstantIntValue(a), cb = getConstantIntValue(b);
  if (ca || cb) return ca == cb;
  Operation *da = a.getDefiningOp(), *db = b.getDefiningOp();
  if (!da || !db || depth == 0 || da->getName() != db->getName() ||
      da->getAttrDictionary() != db->getAttrDictionary() || !isMemoryEffectFree(da) ||
      da->getNumOperands() != db->getNumOperands() || da->getNumRegions() || db->getNumRegions())
    return false;
  for (auto [x, y] : llvm::zip(da->getOperands(), db->getOperands()))
    if (!sameComputation(x, y, depth - 1)) return false;
  return true;
}

/// Whether `condition` is `iv + step < upper` of the scf.for around it:
/// true exactly when another iteration follows this one.
static bool testsForNextIteration(Value condition) {
  auto cmp = condition.getDefiningOp<arith::CmpIOp>();
  if (!cmp || (cmp.getPredicate() != arith::CmpIPredicate::slt &&
               cmp.getPredicate() != arith::CmpIPredicate::ult))
    return false;
  auto loop = cmp->getParentOfType<scf::ForOp>();
  auto add = cmp.getLhs().getDefiningOp<arith::AddIOp>();
  if (!loop || !add || !sameComputation(cmp.getRhs(), loop.getUpperBound())) return false;
  Value iv = loop.getInductionVar(), step = loop.getStep();
  auto isStep = [&](Value v) {
    return v == step || (getConstantIntValue(v) && getConstantIntValue(v) == getConstantIntValue(step));
  };
  return (add.getLhs() == iv && isStep(add.getRhs())) || (add.getRhs() == iv && isStep(add.getLhs()));
}

/// Whether `v` is `base + c` for a constant c >= `least`, or `base + step
/// * c` for the loop's step and such a c (scf.for's step is positive).
static bool offsetFrom(Value v, Value base, Value step, int64_t least) {
  auto add = v.getDefiningOp<arith::AddIOp>();
  if (!add) return false;
  auto atLeast = [&](Value x) {
    if (std::optional<int64_t> c = getConstantIntValue(x)) return *c >= least;
    auto mul = x.getDefiningOp<arith::MulIOp>();
    if (!mul) return false;
    for (auto [s, c] : {std::pair(mul.getLhs(), mul.getRhs()), std::pair(mul.getRhs(), mul.getLhs())})
      if (sameComputation(s, step) && getConstantIntValue(c) && *getConstantIntValue(c) >= least)
        return true;
    return false;
  };
  return (add.getLhs() == base && atLeast(add.getRhs())) ||
         (add.getRhs() == base && atLeast(add.getLhs()));
}

/// Whether the load `a` is consumed by `loop` whatever its trip count: it
/// is issued under `if (x < upper)` for x an iteration of the loop (lower
/// + c before it, iv + c with c > 0 in its body), so only for an iteration
/// that runs, and the loop's body waits for its loads unconditionally (on
/// the mbarrier a TMA load completes on; any cp_async_wait for cp.async).
/// Such a load is not in flight when the loop exits: a software pipeline's
/// loads ahead, issued in its prologue and its iterations.
static bool consumedByLoop(const Access &a, scf::ForOp loop) {
  auto guard = a.op->getParentOfType<scf::IfOp>();
  if (!guard || (loop->isAncestor(guard) && guard->getParentOp() != loop.getOperation()))
    return false;
  if (!loop->isAncestor(guard) && guard->getBlock() != loop->getBlock()) return false;
  auto cmp = guard.getCondition().getDefiningOp<arith::CmpIOp>();
  if (!cmp || (cmp.getPredicate() != arith::CmpIPredicate::slt &&
               cmp.getPredicate() != arith::CmpIPredicate::ult) ||
      !sameComputation(cmp.getRhs(), loop.getUpperBound()))
    return false;
  bool inside = loop->isAncestor(guard);
  Value from = inside ? loop.getInductionVar() : loop.getLowerBound();
  if (!offsetFrom(cmp.getLhs(), from, loop.getStep(), inside ? 1 : 0) &&
      !(!inside && sameComputation(cmp.getLhs(), from)))
    return false;
  for (Operation &op : loop.getBody()->getOperations()) {
    if (auto wait = llvm::dyn_cast<MbarrierWaitOp>(op);
        wait && a.fill == Fill::tma && getRootBuffer(wait.getBarriers()) == a.barrier)
      return true;
    if (llvm::isa<CpAsyncWaitOp>(op) && a.fill == Fill::cpAsync) return true;
  }
  return false;
}

/// The loop whose pipeline the fill `f` feeds: the innermost loop around
/// it, or the loop whose prologue it is (a later scf.for of its block that
/// consumes it); null when neither.
static Operation *ownerLoop(const Access &f) {
  for (Operation *p = f.op->getParentOp(); p && !llvm::isa<KernelOp>(p); p = p->getParentOp())
    if (llvm::isa<scf::ForOp, scf::WhileOp, PipelinedOp>(p)) return p;
  auto guard = f.op->getParentOfType<scf::IfOp>();
  if (!guard) return nullptr;
  for (Operation *next = guard->getNextNode(); next; next = next->getNextNode())
    if (auto forOp = llvm::dyn_cast<scf::ForOp>(next); forOp && consumedByLoop(f, forOp))
      return forOp;
  return nullptr;
}

/// Whether the stage rule orders the fill `f` before the access `a`: the
/// threads that run them differ (roles), or `a` lies in the loop whose
/// pipeline `f` feeds (or no such loop is known). Otherwise the same
/// threads run `f`'s loop and then, apart from it, `a` (two loops staging
/// through one buffer), and what is in flight at the loops' bounds orders
/// them.
static bool stageRuleApplies(const Access &f, const Access &a) {
  Operation *fa = f.op, *aa = nullptr;
  while (fa && !(aa = fa->getBlock()->findAncestorOpInBlock(*a.op))) fa = fa->getParentOp();
  if (!fa || llvm::isa<RoleOp>(fa) || llvm::isa<RoleOp>(aa)) return true;
  Operation *owner = ownerLoop(f);
  return !owner || owner->isAncestor(a.op);
}

class SyncVerifier {
public:
  SyncVerifier(KernelOp kernel, const TargetInfo &target) : kernel(kernel), target(target) {
    kernel.walk([&](Operation *op) {
      if (op->getParentOfType<ParallelOp>()) return; // the loop is the access
      SmallVector<Access> found;
      collectAccesses(op, target, found);
      for (Access &a : found) {
        accesses.push_back(std::make_unique<Access>(a));
        byOp[op].push_back(accesses.back().get());
        if (a.fill == Fill::tma) {
          tmaFilled[a.where.root].insert(a.barrier);
          tmaFills[a.where.root].push_back(accesses.back().get());
          // How far the fill's mbarrier index sits from its stage (the
          // second copy of a prologue buffer completes on a later one).
          if (a.where.stage) {
            IndexForm stage = getIndexForm(a.where.stage), index = getIndexForm(a.barrierIndex);
            if (sameCycle(stage, index))
              barrierOffsets[{a.where.root, a.barrier}].insert(index.outer - stage.outer);
          }
        }
        if (a.fill == Fill::cpAsync) cpFilled.insert(a.where.root);
      }
    });
  }

  LogicalResult run() {
    walkBlock(kernel.getBodyBlock(), GroupState(), RoleOp());
    if (failed) return failure();
    checkRoles();
    return failure(failed);
  }

private:
  KernelOp kernel;
  const TargetInfo &target;
  std::vector<std::unique_ptr<Access>> accesses;
  DenseMap<Operation *, SmallVector<Access *>> byOp;
  /// Buffers TMA loads fill, and the mbarriers those loads complete on;
  /// buffers cp.async loads fill.
  DenseMap<Value, llvm::SmallDenseSet<Value, 2>> tmaFilled;
  DenseMap<Value, SmallVector<const Access *>> tmaFills;
  /// Per filled buffer and mbarrier array, the offsets between a fill's
  /// mbarrier index and its stage.
  DenseMap<std::pair<Value, Value>, llvm::SmallDenseSet<int64_t, 2>> barrierOffsets;
  DenseSet<Value> cpFilled;
  bool failed = false;

  InFlightDiagnostic error(Operation *at, const Twine &what) {
    failed = true;
    return at->emitError("unsynchronised shared memory: ") << what;
  }

  GroupState walkBlock(Block &block, GroupState state, RoleOp role);
  void visitOp(Operation &op, GroupState &state, RoleOp role);
  void visitLoop(Operation &loop, GroupState &state, RoleOp role);
  void visitRoles(ArrayRef<RoleOp> roles, GroupState &state);
  void checkAccess(const Access &a, GroupState &state, RoleOp role);
  void checkStageWait(const Access &a, GroupState &state);
  void useBarrier(Operation *op, Value barriers, GroupState &state, bool byTma);
  void checkRoles();
  void checkRolePair(const RoleEvents &a, const RoleEvents &b);
  void checkFlagWaits(const RoleEvents &issuer, const RoleEvents &waiter);
};

GroupState SyncVerifier::walkBlock(Block &block, GroupState state, RoleOp role) {
  SmallVector<RoleOp> roles;
  for (Operation &op : block) {
    if (auto r = llvm::dyn_cast<RoleOp>(op)) {
      roles.push_back(r);
      continue;
    }
    if (!roles.empty() && !isMemoryEffectFree(&op)) {
      visitRoles(roles, state);
      roles.clear();
    }
    visitOp(op, state, role);
    if (failed) return state;
  }
  if (!roles.empty()) visitRoles(roles, state);
  return state;
}

void SyncVerifier::visitOp(Operation &op, GroupState &state, RoleOp role) {
  if (llvm::isa<BarrierOp>(op)) {
    // (A block-wide one inside a role is rejected by tile.barrier's own
    // verifier, and tessel-verify-barriers checks the lowered code.)
    state.pending.clear();
    state.unpublishedInits.clear();
    return;
  }
  if (llvm::isa<FenceProxyAsyncOp>(op)) return state.unfenced.clear();
  if (llvm::isa<FenceMbarrierInitOp>(op)) return state.unfencedInits.clear();
  if (auto init = llvm::dyn_cast<MbarrierInitOp>(op)) {
    Value root = getRootBuffer(init.getBarriers());
    state.unpublishedInits.push_back(root);
    state.unfencedInits.push_back(root);
    return;
  }
  if (auto wait = llvm::dyn_cast<MbarrierWaitOp>(op)) {
    useBarrier(&op, wait.getBarriers(), state, false);
    Value root = getRootBuffer(wait.getBarriers());
    state.waited.push_back({root, wait.getIndex()});
    // The group sees the TMA loads that complete on this mbarrier.
    llvm::erase_if(state.inFlight, [&](const Access *a) {
      return a->fill == Fill::tma && a->barrier == root &&
             !provablyDifferent(a->barrierIndex, wait.getIndex());
    });
    return;
  }
  if (auto arrive = llvm::dyn_cast<MbarrierArriveOp>(op))
    return useBarrier(&op, arrive.getBarriers(), state, false);
  if (auto expect = llvm::dyn_cast<MbarrierExpectTxOp>(op))
    return useBarrier(&op, expect.getBarriers(), state, false);
  if (auto commit = llvm::dyn_cast<MmaCommitOp>(op))
    return useBarrier(&op, commit->getOperand(0), state, false);
  if (llvm::isa<MmaWaitOp>(op)) {
    llvm::erase_if(state.inFlight, [](const Access *a) { return a->fill == Fill::mma; });
    return;
  }
  if (llvm::isa<CpAsyncCommitOp>(op)) {
    ++state.commits;
    return;
  }
  if (auto wait = llvm::dyn_cast<CpAsyncWaitOp>(op)) {
    // Retires every commit group but the newest `pending`; their loads
    // become ordinary writes of the generic proxy, which a barrier
    // publishes and, for an async-proxy reader, a fence.proxy.async first.
    int64_t keep = wait.getPending();
    llvm::erase_if(state.inFlight, [&](const Access *a) {
      if (a->fill != Fill::cpAsync || state.cpGroup.lookup(a) >= state.commits - keep) return false;
      state.pending.push_back(a);
      state.unfenced.push_back(a);
      return true;
    });
    return;
  }
  if (llvm::isa<scf::ForOp, PipelinedOp, scf::WhileOp>(op)) return visitLoop(op, state, role);
  if (auto ifOp = llvm::dyn_cast<scf::IfOp>(op)) {
    Value condition = ifOp.getCondition();
    GroupState thenEntry = state;
    for (auto &[c, w] : state.waitedUnder)
      if (sameComputation(c, condition) && !llvm::is_contained(thenEntry.waited, w))
        thenEntry.waited.push_back(w);
    GroupState then = walkBlock(ifOp.getThenRegion().front(), thenEntry, role);
    GroupState out = then;
    if (!ifOp.getElseRegion().empty())
      out.merge(walkBlock(ifOp.getElseRegion().front(), state, role));
    else
      out.merge(state);
    // The branch's waits hold under the same condition later, and under
    // "a next iteration follows", in that iteration.
    for (const Waited &w : then.waited) {
      if (llvm::is_contained(thenEntry.waited, w)) continue;
      out.waitedUnder.push_back({condition, w});
      if (testsForNextIteration(condition)) out.waitedForNext.push_back(w);
    }
    state = out;
    return;
  }
  if (auto copy = llvm::dyn_cast<CopyAsyncOp>(op))
    useBarrier(&op, copy.getBarriers(), state, true);
  for (Access *a : byOp.lookup(&op)) {
    checkAccess(*a, state, role);
    if (failed) return; // one error per op
  }
}

void SyncVerifier::visitLoop(Operation &loop, GroupState &state, RoleOp role) {
  Block &body = loop.getRegion(loop.getNumRegions() - 1).front();
  // A while loop's condition region runs before each body: walk it as
  // part of the iteration.
  auto iterate = [&](GroupState entry) {
    if (auto whileOp = llvm::dyn_cast<scf::WhileOp>(loop))
      entry = walkBlock(whileOp.getBefore().front(), entry, role);
    return walkBlock(body, entry, role);
  };
  // cp.async loads issued before the loop (a pipeline's prologue) are
  // retired by the body's first cp_async_wait: the count of groups that
  // proves it runs over the iterations (see the file comment).
  for (const Access *a : state.inFlight)
    if (a->fill == Fill::cpAsync) state.cpGroup[a] = std::numeric_limits<int64_t>::min() / 2;
  // The first iteration, then the back edge: what the previous iteration
  // left unordered, less what names its own stages.
  Value iv;
  std::optional<int64_t> lower;
  if (auto forOp = llvm::dyn_cast<scf::ForOp>(loop)) {
    iv = forOp.getInductionVar();
    lower = getConstantIntValue(forOp.getLowerBound());
  }
  GroupState firstEntry = state;
  if (iv && lower) firstEntry.firstIteration[iv] = *lower;
  GroupState first = iterate(firstEntry);
  if (failed) return;
  first.firstIteration.erase(iv);
  auto ofThisIteration = [&](const Access *a) {
    return a->where.stage && variesWithIteration(a->where.stage, &loop);
  };
  GroupState back = first;
  llvm::erase_if(back.pending, ofThisIteration);
  llvm::erase_if(back.inFlight, ofThisIteration);
  llvm::erase_if(back.unfenced, ofThisIteration);
  // Waits before the loop hold in every iteration; waits inside hold in
  // the next only for an index the iteration does not change.
  llvm::erase_if(back.waited, [&](auto &w) { return variesWithIteration(w.index, &loop); });
  // What the iteration waited for on behalf of the next one holds there, its
  // index one step older.
  if (auto forOp = llvm::dyn_cast<scf::ForOp>(loop); forOp && getConstantIntValue(forOp.getStep()) == 1)
    for (Waited w : first.waitedForNext)
      if (getIndexForm(w.index).base == forOp.getInductionVar()) {
        w.iv = forOp.getInductionVar();
        w.shift = 1;
        back.waited.push_back(w);
      }
  back.waitedForNext.clear();
  llvm::erase_if(back.waitedUnder, [&](auto &u) {
    return variesWithIteration(u.first, &loop) || variesWithIteration(u.second.index, &loop);
  });
  GroupState entry = state;
  entry.merge(back);
  for (const Waited &w : back.waited)
    if (w.shift && !llvm::is_contained(entry.waited, w)) entry.waited.push_back(w);
  GroupState again = iterate(entry);
  again.waitedForNext.clear();
  state.merge(again); // zero or more iterations
  // A pipeline's loads ahead are for iterations that run and wait for
  // them: none is in flight after the loop.
  if (auto forOp = llvm::dyn_cast<scf::ForOp>(loop))
    llvm::erase_if(state.inFlight, [&](const Access *a) {
      return (a->fill == Fill::tma || a->fill == Fill::cpAsync) && consumedByLoop(*a, forOp);
    });
}

void SyncVerifier::useBarrier(Operation *op, Value barriers, GroupState &state, bool byTma) {
  Value root = getRootBuffer(barriers);
  if (llvm::is_contained(state.unpublishedInits, root))
    error(op, "this mbarrier is used before a barrier orders it after its initialisation by "
              "thread 0");
  else if (byTma && llvm::is_contained(state.unfencedInits, root))
    error(op, "a TMA load completes on an mbarrier whose initialisation no "
              "fence.mbarrier_init has made visible to the async proxy");
}

void SyncVerifier::checkAccess(const Access &a, GroupState &state, RoleOp role) {
  // Two loads in flight into one place do not race with each other in a
  // way anyone sees: each read is checked against both.
  // (tcgen05 MMAs run in the order they are issued, too.)
  for (const Access *earlier : state.inFlight) {
    bool loadOverLoad = a.fill == Fill::tma || a.fill == Fill::cpAsync;
    bool mmaAfterMma = a.fill == Fill::mma && earlier->fill == Fill::mma;
    if (loadOverLoad || mmaAfterMma || !mayOverlap(*earlier, a)) continue;
    if (earlier->fill == Fill::mma) {
      error(a.op, "missing tcgen05 wait: ")
          << describeBuffer(a.where.root) << " is used by the issued MMA at "
          << describeLocation(earlier->op->getLoc())
          << ", which may still run; wait for it (tile.mma_wait) first";
      return;
    }
    InFlightDiagnostic diag = error(a.op, "missing ");
    diag << (earlier->fill == Fill::tma ? "mbarrier wait" : "cp.async wait") << ": "
         << describeBuffer(a.where.root) << " is still being loaded by the "
         << (earlier->fill == Fill::tma ? "TMA copy" : "cp.async copy") << " at "
         << describeLocation(earlier->op->getLoc()) << " when this op " << (a.write ? "writes" : "reads") << " it";
    if (earlier->fill == Fill::tma) diag << "; wait on the mbarrier the copy arrives on first";
    return;
  }
  for (const Access *earlier : state.pending) {
    if (!needsOrdering(*earlier, a)) continue;
    error(a.op, "missing barrier: ")
        << describeBuffer(a.where.root) << " is " << (earlier->write ? "written" : "read")
        << " at " << describeLocation(earlier->op->getLoc()) << " and " << (a.write ? "written" : "read")
        << " here by other threads with no " << (role ? "barrier of the role's threads" : "barrier")
        << " between them";
    return;
  }
  if (a.proxy == Proxy::async && !a.write)
    for (const Access *earlier : state.unfenced)
      if (mayOverlap(*earlier, a)) {
        error(a.op, "missing proxy fence: ")
            << describeBuffer(a.where.root) << " is written by threads at " << describeLocation(earlier->op->getLoc())
            << " and read here through the async proxy with no fence.proxy.async after the write";
        return;
      }
  checkStageWait(a, state);
  if (failed) return;
  if (a.fill == Fill::tma || a.fill == Fill::mma) {
    state.inFlight.push_back(&a);
    return;
  }
  if (a.completesInPlace) return;
  if (a.fill == Fill::cpAsync) {
    state.inFlight.push_back(&a);
    state.cpGroup[&a] = state.commits;
    return;
  }
  state.pending.push_back(&a);
  // Tensor memory has no generic proxy: tcgen05.st and the MMA that reads
  // it are ordered by the tcgen05 fences the lowering puts around the
  // barrier.
  if (a.write && a.proxy == Proxy::generic && isSharedBacked(a.where.root))
    state.unfenced.push_back(&a);
}

/// A stage of a TMA-filled buffer is read or written only after a wait on
/// the fill's mbarrier at that stage; a fill arrives on its own stage's.
void SyncVerifier::checkStageWait(const Access &a, GroupState &state) {
  if (!a.where.stage) return;
  auto filled = tmaFilled.find(a.where.root);
  if (filled == tmaFilled.end()) return;
  if (a.fill == Fill::tma) {
    IndexForm stage = getIndexForm(a.where.stage), index = getIndexForm(a.barrierIndex);
    if (!sameCycle(stage, index))
      error(a.op, "stage mix-up: this TMA copy fills stage ")
          << a.where.stage << " of " << describeBuffer(a.where.root)
          << " but completes on the mbarrier of index " << a.barrierIndex;
    return;
  }
  bool anyWait = false;
  // In a loop's first iteration its induction variable is a constant.
  auto evaluate = [&](IndexForm f) {
    auto known = f.base ? state.firstIteration.find(f.base) : state.firstIteration.end();
    if (known == state.firstIteration.end()) return f;
    int64_t v = known->second + f.inner;
    if (f.modulus) v = (v % f.modulus + f.modulus) % f.modulus;
    return IndexForm{{}, 0, 0, v + f.outer};
  };
  // Fills made by the same threads apart from this access (another loop
  // staging through the buffer) are ordered by what is in flight.
  llvm::SmallDenseSet<Value, 2> barriers;
  for (const Access *fill : tmaFills.lookup(a.where.root))
    if (stageRuleApplies(*fill, a)) barriers.insert(fill->barrier);
  if (barriers.empty()) return;
  IndexForm stage = evaluate(getIndexForm(a.where.stage));
  for (const Waited &w : state.waited) {
    if (!barriers.contains(w.barrier)) continue;
    anyWait = true;
    IndexForm index = evaluate(w.form());
    if (!sameCycle(stage, index)) continue;
    auto offsets = barrierOffsets.find({a.where.root, w.barrier});
    int64_t offset = index.outer - stage.outer;
    if (offsets == barrierOffsets.end() ? offset == 0 : offsets->second.contains(offset)) return;
  }
  if (anyWait)
    error(a.op, "stage mix-up: ")
        << describeBuffer(a.where.root) << " is accessed at stage " << a.where.stage
        << " after waiting for the TMA loads of another stage";
  else
    error(a.op, "missing mbarrier wait: ")
        << describeBuffer(a.where.root)
        << " is filled by TMA loads, but this iteration accesses its stage with no wait on the "
           "mbarrier they complete on";
}

void SyncVerifier::visitRoles(ArrayRef<RoleOp> roles, GroupState &state) {
  // Code before the split is ordered before each role by a block barrier
  // reached while every thread is still together.
  for (RoleOp role : roles) {
    role.walk([&](Operation *op) {
      if (failed) return;
      for (Access *a : byOp.lookup(op))
        for (const Access *earlier : state.pending)
          if (needsOrdering(*earlier, *a)) {
            error(op, "missing barrier before the threads split into roles: ")
                << describeBuffer(a->where.root) << " is accessed at " << describeLocation(earlier->op->getLoc())
                << " by all threads and here by the role's";
            return;
          }
    });
  }
  GroupState joined = state;
  joined.pending.clear();
  for (RoleOp role : roles) {
    GroupState inner = state;
    inner.pending.clear();
    joined.merge(walkBlock(role.getBody().front(), inner, role));
    if (failed) return;
  }
  // After the roles, everything they did awaits a block barrier.
  for (RoleOp role : roles)
    role.walk([&](Operation *op) {
      for (Access *a : byOp.lookup(op))
        if (a->fill == Fill::none) joined.pending.push_back(a);
    });
  joined.waited.clear();
  state = joined;
}

//===----------------------------------------------------------------------===//
// Sibling roles
//===----------------------------------------------------------------------===//

/// A role's synchronisation events in its walk (pre-)order: where it
/// arrives on (or a TMA load completes on) each mbarrier, where it waits
/// on each, and where its flag waits stand.
struct RoleEvents {
  RoleOp role;
  DenseMap<Operation *, int64_t> position;
  SmallVector<std::pair<Value, int64_t>> releases, acquires;
  /// The ops of `releases`, in the same order.
  SmallVector<Operation *> releaseOps;
  /// Flag waits: the op, the flags it waits on, its position.
  SmallVector<std::tuple<Operation *, Value, int64_t>> flagWaits;
  SmallVector<std::pair<Access *, int64_t>> accesses;

  std::string threads() const {
    RoleOp r = role;
    return "threads " + std::to_string(r.getFirst()) + ".." +
           std::to_string(r.getFirst() + r.getThreads() - 1);
  }
  /// A release on `barrier` after the access `op` at `at`: later in the
  /// walk, or anywhere in a loop of the role around both (it comes round
  /// in the next iteration).
  bool releasesAfter(Value barrier, Operation *op, int64_t at) const {
    for (auto [i, r] : llvm::enumerate(releases)) {
      if (r.first != barrier) continue;
      if (r.second > at || sharesLoop(releaseOps[i], op)) return true;
    }
    return false;
  }
  bool sharesLoop(Operation *a, Operation *b) const {
    Operation *top = RoleOp(role).getOperation();
    for (Operation *p = a->getParentOp(); p && p != top; p = p->getParentOp())
      if (llvm::isa<scf::ForOp, scf::WhileOp, PipelinedOp>(p) && p->isAncestor(b)) return true;
    return false;
  }
  bool acquiresBefore(Value barrier, int64_t at) const {
    return llvm::any_of(acquires, [&](auto &r) { return r.first == barrier && r.second < at; });
  }
  /// Ordered after `other`'s access at `otherAt` through an mbarrier, for
  /// this role's access at `at`.
  bool orderedAfter(const RoleEvents &other, const Access &otherAccess, int64_t otherAt,
                    int64_t at) const {
    for (auto &[barrier, where] : acquires) {
      if (where >= at) continue;
      if (otherAccess.fill == Fill::tma && otherAccess.barrier == barrier) return true;
      if (other.releasesAfter(barrier, otherAccess.op, otherAt)) return true;
    }
    return false;
  }
};

/// Whether `op` sits in a loop inside `role`.
static bool repeatsInRole(Operation *op, RoleOp role) {
  for (Operation *p = op->getParentOp(); p && p != role.getOperation(); p = p->getParentOp())
    if (llvm::isa<scf::ForOp, scf::WhileOp, PipelinedOp>(p)) return true;
  return false;
}

static RoleEvents collectRoleEvents(RoleOp role,
                                    const DenseMap<Operation *, SmallVector<Access *>> &byOp) {
  RoleEvents events;
  events.role = role;
  int64_t next = 0;
  role.getBody().walk<WalkOrder::PreOrder>([&](Operation *op) {
    int64_t at = next++;
    events.position[op] = at;
    if (auto arrive = llvm::dyn_cast<MbarrierArriveOp>(op)) {
      events.releases.push_back({getRootBuffer(arrive.getBarriers()), at});
      events.releaseOps.push_back(op);
    } else if (auto commit = llvm::dyn_cast<MmaCommitOp>(op)) {
      events.releases.push_back({getRootBuffer(commit->getOperand(0)), at});
      events.releaseOps.push_back(op);
    } else if (auto copy = llvm::dyn_cast<CopyAsyncOp>(op)) {
      events.releases.push_back({getRootBuffer(copy.getBarriers()), at});
      events.releaseOps.push_back(op);
    } else if (auto wait = llvm::dyn_cast<MbarrierWaitOp>(op))
      events.acquires.push_back({getRootBuffer(wait.getBarriers()), at});
    else if (auto flag = llvm::dyn_cast<WaitOp>(op))
      events.flagWaits.push_back({op, getRootBuffer(flag.getFlags()), at});
    auto found = byOp.find(op);
    if (found != byOp.end())
      for (Access *a : found->second) events.accesses.push_back({a, at});
  });
  return events;
}

void SyncVerifier::checkRoles() {
  DenseMap<Block *, SmallVector<RoleOp>> siblings;
  kernel.walk([&](RoleOp role) { siblings[role->getBlock()].push_back(role); });
  for (auto &[block, roles] : siblings) {
    std::vector<RoleEvents> events;
    for (RoleOp role : roles) events.push_back(collectRoleEvents(role, byOp));
    for (size_t i = 0; i < events.size(); ++i)
      for (size_t j = 0; j < events.size(); ++j) {
        if (i == j || failed) continue;
        checkFlagWaits(events[i], events[j]);
        if (i < j) checkRolePair(events[i], events[j]);
      }
  }
}

/// Every conflicting pair of accesses of two roles that run at once is
/// ordered by an mbarrier one releases after its access and the other
/// acquires before its own.
void SyncVerifier::checkRolePair(const RoleEvents &a, const RoleEvents &b) {
  for (auto &[x, xAt] : a.accesses)
    for (auto &[y, yAt] : b.accesses) {
      if (!needsOrdering(*x, *y)) continue;
      // Accesses that both repeat (in loops of their roles) meet in both
      // orders: this iteration's read and the next iteration's refill too.
      bool forward = b.orderedAfter(a, *x, xAt, yAt), backward = a.orderedAfter(b, *y, yAt, xAt);
      bool bothRepeat = repeatsInRole(x->op, a.role) && repeatsInRole(y->op, b.role);
      if (bothRepeat ? forward && backward : forward || backward) continue;
      InFlightDiagnostic diag = error(y->op, "no mbarrier orders two roles' accesses: ");
      diag << describeBuffer(y->where.root) << " is " << (x->write ? "written" : "read") << " at "
           << describeLocation(x->op->getLoc()) << " by " << a.threads() << " and " << (y->write ? "written" : "read")
           << " here by " << b.threads()
           << "; one role must arrive on an mbarrier after its access that the other waits on "
              "before its own"
           << (bothRepeat ? " (in both directions: both accesses repeat in loops)" : "");
      return;
    }
}

/// A flag wait that a role runs before it first waits for a pipeline's TMA
/// loads comes, in program order, before those loads: the role that issues
/// them must wait on the same flags before its first load.
void SyncVerifier::checkFlagWaits(const RoleEvents &issuer, const RoleEvents &waiter) {
  for (auto &[barrier, firstWait] : waiter.acquires) {
    // The issuer's first TMA load completing on this mbarrier.
    std::optional<int64_t> firstLoad;
    Operation *load = nullptr;
    for (auto &[access, at] : issuer.accesses)
      if (access->fill == Fill::tma && access->barrier == barrier && (!firstLoad || at < *firstLoad))
        firstLoad = at, load = access->op;
    if (!firstLoad) continue;
    for (auto &[flag, flags, at] : waiter.flagWaits) {
      if (at >= firstWait) continue;
      bool guarded = llvm::any_of(issuer.flagWaits, [&, flags = flags](auto &w) {
        return std::get<2>(w) < *firstLoad && std::get<1>(w) == flags;
      });
      if (guarded) continue;
      error(flag, "wait in the wrong role: this flag wait comes before the TMA loads at ")
          << describeLocation(load->getLoc()) << " in program order, but " << issuer.threads()
          << ", which issue them, do not wait on these flags first: the loads may read data "
             "that has not arrived";
      return;
    }
  }
}

} // namespace

namespace {
struct TesselVerifySync : tessel::impl::TesselVerifySyncBase<TesselVerifySync> {
  using Base::Base;
  void runOnOperation() override {
    KernelOp kernel = getOperation();
    std::optional<TargetInfo> target = lookupTarget(arch, tma, kernel);
    if (!target) return signalPassFailure();
    if (failed(SyncVerifier(kernel, *target).run())) signalPassFailure();
  }
};
} // namespace
