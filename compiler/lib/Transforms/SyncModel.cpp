//===- SyncModel.cpp - accesses and orderings tessel-verify-sync reasons about -===//
#include "SyncModel.h"
#include "tessel/Transforms/Remarks.h"

#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;
using namespace tessel::sync;

/// Shared-backed and tensor-memory buffers are the ones threads share.
static bool isSharedOrTmem(Value buffer) {
  Value root = getRootBuffer(buffer);
  auto alloc = root.getDefiningOp<AllocOp>();
  if (!alloc) return false;
  MemorySpace space = getMemorySpace(alloc.getType());
  return space == MemorySpace::tmem || isSharedBacked(root);
}

void sync::collectAccesses(Operation *op, const TargetInfo &target,
                           SmallVectorImpl<Access> &out) {
  auto note = [&](Value buffer, bool write, Proxy proxy = Proxy::generic) -> Access * {
    if (!isSharedOrTmem(buffer)) return nullptr;
    out.push_back(Access{op, getFootprint(buffer), write, proxy});
    return &out.back();
  };
  auto noteAtomicAdd = [&](Value dest) {
    for (bool write : {false, true})
      if (Access *a = note(dest, write)) a->atomicAdd = true;
  };
  bool rows = op->hasAttr("tmem_group_columns");
  llvm::TypeSwitch<Operation *>(op)
      .Case([&](CopyOp o) {
        Proxy source = isTmaStore(o, target) ? Proxy::async : Proxy::generic;
        if (Access *a = note(o.getSource(), false, source)) a->tmemRows = rows;
        if (Access *a = note(o.getDest(), true)) {
          a->tmemRows = rows;
          if (o.getAsync()) a->fill = Fill::cpAsync;
        }
      })
      .Case([&](CopyAsyncOp o) {
        if (Access *a = note(o.getDest(), true, Proxy::async)) {
          a->fill = Fill::tma;
          a->barrier = getRootBuffer(o.getBarriers());
          a->barrierIndex = o.getIndex();
        }
      })
      .Case([&](FillOp o) {
        if (Access *a = note(o.getDest(), true)) a->tmemRows = rows;
      })
      .Case([&](GemmOp o) {
        bool asyncOperands = o.getInstruction() == GemmInstruction::wgmma ||
                             o.getInstruction() == GemmInstruction::tcgen05;
        Proxy proxy = asyncOperands ? Proxy::async : Proxy::generic;
        for (Value read : o.getOperandsRead()) note(read, false, proxy);
        bool mma = o.getInstruction() == GemmInstruction::tcgen05;
        if (Access *a = note(o.getC(), false)) a->mmaAccumulator = mma;
        if (Access *a = note(o.getC(), true)) a->mmaAccumulator = mma;
        if (!mma) return;
        for (Access &a : out) {
          if (a.op != op) continue;
          if (o.getIssueOnly()) a.fill = Fill::mma;
          else a.completesInPlace = true;
        }
      })
      .Case([&](ReduceOp o) {
        note(o.getSource(), false);
        note(o.getDest(), false);
        note(o.getDest(), true);
      })
      .Case([&](AtomicAddOp o) {
        if (llvm::isa<MemRefType>(o.getValue().getType()))
          note(o.getValue(), false,
               o.getTma() && target.hasTma() && target.tma ? Proxy::async : Proxy::generic);
        noteAtomicAdd(o.getDest());
      })
      .Case([&](ParallelOp o) {
        o.getBody().walk([&](Operation *inner) {
          if (auto load = llvm::dyn_cast<memref::LoadOp>(inner)) note(load.getMemRef(), false);
          else if (auto store = llvm::dyn_cast<memref::StoreOp>(inner)) note(store.getMemRef(), true);
          else if (auto atomic = llvm::dyn_cast<AtomicAddOp>(inner))
            noteAtomicAdd(atomic.getDest());
        });
      })
      .Case([&](memref::LoadOp o) { note(o.getMemRef(), false); })
      .Case([&](memref::StoreOp o) { note(o.getMemRef(), true); });
}

bool sync::needsOrdering(const Access &a, const Access &b) {
  if (a.op == b.op || (!a.write && !b.write)) return false;
  if (a.mmaAccumulator && b.mmaAccumulator) return false;
  if (a.tmemRows && b.tmemRows) return false;
  if (a.atomicAdd && b.atomicAdd) return false;
  return mayOverlap(a, b);
}

IndexForm sync::getIndexForm(Value index) {
  if (std::optional<int64_t> c = getConstantIntValue(index)) return IndexForm{{}, 0, 0, *c};
  auto constantSide = [](Operation *op) -> std::optional<std::pair<Value, int64_t>> {
    for (unsigned i = 0; i < 2; ++i)
      if (std::optional<int64_t> c = getConstantIntValue(op->getOperand(i)))
        return std::make_pair(op->getOperand(1 - i), *c);
    return std::nullopt;
  };
  if (auto add = index.getDefiningOp<arith::AddIOp>())
    if (auto split = constantSide(add)) {
      IndexForm form = getIndexForm(split->first);
      (form.modulus ? form.outer : form.inner) += split->second;
      if (!form.base) form = IndexForm{{}, 0, 0, form.inner + form.outer};
      return form;
    }
  // A signed remainder used as an index (stage or mbarrier) is in range,
  // so its dividend was not negative: the same as the unsigned one.
  Operation *rem = index.getDefiningOp();
  if (rem && llvm::isa<arith::RemUIOp, arith::RemSIOp>(rem))
    if (std::optional<int64_t> m = getConstantIntValue(rem->getOperand(1)); m && *m > 0) {
      IndexForm form = getIndexForm(rem->getOperand(0));
      if (!form.base) return IndexForm{{}, 0, 0, form.outer % *m};
      if (!form.modulus && !form.outer) return IndexForm{form.base, form.inner % *m, *m, 0};
    }
  return IndexForm{index, 0, 0, 0};
}

bool sync::sameCycle(const IndexForm &a, const IndexForm &b) {
  if (a.base != b.base || a.modulus != b.modulus) return false;
  if (!a.modulus) return a.inner == b.inner;
  return (a.inner - b.inner) % a.modulus == 0;
}

bool sync::provablyEqual(Value a, Value b) {
  if (a == b) return true;
  IndexForm fa = getIndexForm(a), fb = getIndexForm(b);
  return sameCycle(fa, fb) && fa.outer == fb.outer;
}

bool sync::provablyDifferent(Value a, Value b) {
  IndexForm fa = getIndexForm(a), fb = getIndexForm(b);
  if (fa.base != fb.base || fa.modulus != fb.modulus) return false;
  if (!fa.modulus) return fa.inner + fa.outer != fb.inner + fb.outer;
  // Two remainders of one base (outer offsets alike): differ when the
  // inner offsets differ modulo the stage count.
  return fa.outer == fb.outer && (fa.inner - fb.inner) % fa.modulus != 0;
}

bool sync::mayOverlap(const Access &a, const Access &b) {
  if (a.where.root != b.where.root) return false;
  if (a.where.stage && b.where.stage && provablyDifferent(a.where.stage, b.where.stage))
    return false;
  // Windows: the footprint's own box test (stages already compared).
  BufferFootprint left = a.where, right = b.where;
  left.stage = right.stage = Value();
  return left.mayOverlap(right);
}

std::string sync::describeBuffer(Value root) {
  std::string text;
  llvm::raw_string_ostream os(text);
  if (auto alloc = root.getDefiningOp<AllocOp>()) {
    if (auto name = alloc->getAttrOfType<StringAttr>("name")) {
      os << "'" << name.getValue() << "'";
      return text;
    }
    os << "the buffer allocated at " << describeLocation(alloc.getLoc());
    return text;
  }
  os << "a buffer";
  return text;
}
