//===- LowerParallel.cpp - tile.parallel and tile.pipelined ---------------===//
//
// Part of tessel-lower-tile-ops. An element loop over fragments becomes an
// unrolled loop over each thread's registers (the logical index of register
// r from its layout; two registers an iteration where conversions to FP8,
// bf16 or f16 can go in pairs); over memory alone, a thread-strided loop. A pipelined
// loop that no pipelining pass took becomes a plain scf.for.
//
//===----------------------------------------------------------------------===//
#include "TileLowering.h"
#include "TmaRules.h"
#include "tessel/Transforms/BufferUtils.h"

#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"
#include <numeric>

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;
using layout::FragmentLayout;
using layout::LinearMap;

//===----------------------------------------------------------------------===//
// Element loops and pipelines
//===----------------------------------------------------------------------===//

/// Which loop dimensions index each fragment access of `body`, read before
/// the indices are replaced (~0u for an index that is not a loop variable).
static DenseMap<Operation *, SmallVector<unsigned>> fragmentAccessDims(Block &body) {
  DenseMap<Operation *, SmallVector<unsigned>> accessDims;
  body.walk([&](Operation *nested) {
    auto [memref, indices] = getElementAccess(nested);
    if (!memref || llvm::isa<AtomicAddOp>(nested)) return;
    SmallVector<unsigned> &dims = accessDims[nested];
    for (Value i : indices) {
      auto arg = llvm::dyn_cast<BlockArgument>(i);
      dims.push_back(arg && arg.getOwner() == &body ? arg.getArgNumber() : ~0u);
    }
  });
  return accessDims;
}

/// Whether `t` is a conversion tilenv.convert_pair takes two at a time:
/// f32 to FP8, and where `sixteenBit`, to bf16 or f16.
static bool isPairableConversion(Operation *op, bool sixteenBit = true) {
  auto t = llvm::dyn_cast<arith::TruncFOp>(op);
  if (!t || !t.getIn().getType().isF32()) return false;
  return llvm::isa<Float8E4M3FNType, Float8E5M2Type>(t.getType()) ||
         (sixteenBit && llvm::isa<BFloat16Type, Float16Type>(t.getType()));
}

bool TileLowering::feedsWgmmaRegisters(Value fragment) {
  // The tile ops stay until every one is lowered (lowerCollectiveOps erases
  // them last), so each gemm's operands are still there to see; a fragment
  // copied into another reaches whatever that one feeds.
  SmallVector<Value> roots = {getRootBuffer(fragment)};
  llvm::DenseSet<Value> seen;
  while (!roots.empty()) {
    Value root = roots.pop_back_val();
    if (!seen.insert(root).second) continue;
    bool feeds = false;
    kernel.walk([&](Operation *op) {
      if (auto gemm = llvm::dyn_cast<GemmOp>(op))
        feeds |= getRootBuffer(gemm.getA()) == root &&
                 gemm.getInstruction() == GemmInstruction::wgmma;
      else if (auto copy = llvm::dyn_cast<CopyOp>(op);
               copy && getRootBuffer(copy.getSource()) == root &&
               getMemorySpace(llvm::cast<MemRefType>(copy.getDest().getType())) ==
                   MemorySpace::fragment)
        roots.push_back(getRootBuffer(copy.getDest()));
    });
    if (feeds) return true;
  }
  return false;
}

/// Whether the element loop `op` over layout `l` may run two registers an
/// iteration, their ops interleaved, with its conversions in pairs:
/// it has one to pair, every register is inside the extents and owned by
/// its thread (no guards), and its body is straight-line code that writes
/// only fragments (the two elements' ops may then interleave: a parallel
/// loop's elements are independent, and reads of other memory, which the
/// loop does not write, give the same values in either order).
static bool pairsConversions(ParallelOp op, const FragmentLayout &l, bool owned,
                             bool sixteenBit) {
  if (l.getNumRegisters() < 2 || l.getNumRegisters() % 2 || !owned) return false;
  if (!llvm::all_of(op.getExtents(), [](int64_t e) { return llvm::isPowerOf2_64(e); }))
    return false;
  bool conversion = false;
  for (Operation &inner : op.getBody().front()) {
    if (inner.getNumRegions()) return false;
    conversion |= isPairableConversion(&inner, sixteenBit);
    Value memref = getElementAccess(&inner).first;
    if (memref) {
      bool fragment =
          getMemorySpace(llvm::cast<MemRefType>(memref.getType())) == MemorySpace::fragment;
      if (!llvm::isa<memref::LoadOp>(inner) && !(llvm::isa<memref::StoreOp>(inner) && fragment))
        return false;
    } else if (!isMemoryEffectFree(&inner)) {
      return false;
    }
  }
  return conversion;
}

void TileLowering::lowerRegisterAccess(Operation *nested, const FragmentLayout &l,
                                       ArrayRef<unsigned> dims, Value r, Value owner) {
  Value memref = getElementAccess(nested).first;
  if (!memref) return;
  // Everything an access builds goes right before it: the point the
  // previous access left may be an op erased since, or one moved into an
  // owner's conditional.
  b.setInsertionPoint(nested);
  auto type = llvm::cast<MemRefType>(memref.getType());
  if (getMemorySpace(type) != MemorySpace::fragment) {
    if (owner && !llvm::isa<memref::LoadOp>(nested)) {
      auto ifOp = scf::IfOp::create(b, loc, owner, /*withElseRegion=*/false);
      nested->moveBefore(ifOp.thenBlock()->getTerminator());
    }
    return;
  }
  auto it = storage.find(memref);
  auto fragAttr = llvm::cast<FragmentLayoutAttr>(it->second.second);
  if (llvm::is_contained(dims, ~0u)) {
    // A broadcast read (layout inference checked that every thread holds
    // the whole fragment): the register of the element itself.
    auto ld = llvm::dyn_cast<memref::LoadOp>(nested);
    std::optional<Value> reg =
        ld ? replicatedRegister(fragAttr.getLayout(), ld.getIndices()) : std::nullopt;
    if (!reg) {
      fail(nested, "a fragment read at an index other than the loop's own must be held whole "
                   "by every thread; run tessel-layout-inference");
      return;
    }
    Value v = memref::LoadOp::create(b, loc, it->second.first, ValueRange{*reg});
    ld.getResult().replaceAllUsesWith(v);
    nested->erase();
    return;
  }
  std::optional<LinearMap> map;
  if (!(map = l.registerMapTo(fragAttr.getLayout(), dims))) {
    fail(nested, "a fragment in this parallel loop does not follow the loop's layout; run "
                 "tessel-layout-inference");
    return;
  }
  Value reg = applyMap(*map, r);
  if (auto ld = llvm::dyn_cast<memref::LoadOp>(nested)) {
    Value v = memref::LoadOp::create(b, loc, it->second.first, ValueRange{reg});
    ld.getResult().replaceAllUsesWith(v);
  } else {
    auto st = llvm::cast<memref::StoreOp>(nested);
    memref::StoreOp::create(b, loc, st.getValue(), it->second.first, ValueRange{reg});
  }
  nested->erase();
}

void TileLowering::lowerParallelPairs(ParallelOp op, const FragmentLayout &l, bool sixteenBit) {
  Block &body = op.getBody().front();
  DenseMap<Operation *, SmallVector<unsigned>> accessDims = fragmentAccessDims(body);
  unrolledFor(l.getNumRegisters() / 2, [&](Value pair) {
    OpBuilder::InsertionGuard g(b);
    Value r[2] = {mul(pair, idx(2)), add(mul(pair, idx(2)), idx(1))};
    IRMapping mapping[2];
    for (int e = 0; e < 2; ++e)
      for (auto [arg, c] : llvm::zip(body.getArguments(), coordsAt(op.getLayoutAttr(), r[e])))
        mapping[e].map(arg, c);
    // The two elements' ops, interleaved, each with the original it copies.
    SmallVector<std::pair<Operation *, Operation *>> copies[2];
    for (Operation &inner : body)
      for (int e = 0; e < 2; ++e)
        copies[e].push_back({&inner, b.clone(inner, mapping[e])});
    SmallVector<std::pair<Operation *, Operation *>> conversions;
    for (auto [first, second] : llvm::zip(copies[0], copies[1]))
      if (isPairableConversion(first.second, sixteenBit))
        conversions.push_back({first.second, second.second});
    for (int e = 0; e < 2; ++e)
      for (auto [original, copy] : copies[e]) {
        if (auto exp2 = llvm::dyn_cast<Exp2Op>(copy)) {
          // Register 2 p + e: modulo 1 or 2 that is e itself, a constant.
          lowerExp2(exp2, r[e],
                    2 % exp2.getFmaEvery() == 0 ? std::optional<int64_t>(e) : std::nullopt);
          continue;
        }
        lowerRegisterAccess(copy, l, accessDims.lookup(original), r[e], Value());
      }
    // Each pair at its second conversion, which follows the first and comes
    // before every use of either.
    for (auto [first, second] : conversions) {
      b.setInsertionPoint(second);
      auto converted = tilenv::ConvertPairOp::create(
          b, loc, first->getResult(0).getType(), first->getResult(0).getType(),
          first->getOperand(0), second->getOperand(0));
      first->getResult(0).replaceAllUsesWith(converted.getLoResult());
      second->getResult(0).replaceAllUsesWith(converted.getHiResult());
      first->erase();
      second->erase();
    }
  });
}

void TileLowering::lowerParallel(ParallelOp op) {
  Block &body = op.getBody().front();
  auto splice = [&](ArrayRef<Value> index) {
    for (auto [arg, i] : llvm::zip(body.getArguments(), index)) arg.replaceAllUsesWith(i);
    Block *dest = b.getInsertionBlock();
    dest->getOperations().splice(b.getInsertionPoint(), body.getOperations());
  };
  FragmentLayoutAttr attr = op.getLayoutAttr();
  if (!attr) return forEachElement(op.getExtents(), 1, splice);

  // Each thread runs the points its registers hold.
  FragmentLayout l = attr.getLayout();
  Value threadOwner = threadOwns(l);
  // A 16-bit pair is one 32-bit register, which ptxas hands to a wgmma as
  // it is: defined while a group runs (the overlapped attention forward
  // converts P under the next scores' wgmmas), it makes ptxas serialize
  // every wgmma (C7513). Values converted one at a time are packed at the
  // wgmma instead, so fragments that feed one keep single conversions.
  bool sixteenBit = true;
  body.walk([&](memref::StoreOp store) {
    if (sixteenBit && feedsWgmmaRegisters(store.getMemRef())) sixteenBit = false;
  });
  if (pairsConversions(op, l, !threadOwner && !registerOwns(l, zeroIdx), sixteenBit))
    return lowerParallelPairs(op, l, sixteenBit);
  SmallVector<Operation *> bodyOps;
  for (Operation &inner : body) bodyOps.push_back(&inner);
  DenseMap<Operation *, SmallVector<unsigned>> accessDims = fragmentAccessDims(body);
  unrolledFor(l.getNumRegisters(), [&](Value r) {
    OpBuilder::InsertionGuard g(b);
    SmallVector<Value> coords = coordsAt(attr, r);
    guard(insideShape(coords, op.getExtents(), attr));
    Value owner = andI(threadOwner, registerOwns(l, r));
    splice(coords);
    // Fragment accesses become register accesses; side effects outside the
    // thread happen once, in the element's owner.
    SmallVector<Exp2Op> exp2s;
    for (Operation *inner : bodyOps)
      inner->walk([&](Operation *nested) {
        if (auto exp2 = llvm::dyn_cast<Exp2Op>(nested)) exp2s.push_back(exp2);
        lowerRegisterAccess(nested, l, accessDims.lookup(nested), r, owner);
      });
    for (Exp2Op exp2 : exp2s) lowerExp2(exp2, r);
  });
}

void TileLowering::lowerExp2(Exp2Op op, Value reg, std::optional<int64_t> residue) {
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPoint(op);
  Location at = op.getLoc();
  int64_t every = op.getFmaEvery();
  auto fma = [&]() -> Value { return tilenv::Exp2FmaOp::create(b, at, op.getType(), op.getX()); };
  auto sfu = [&]() -> Value { return math::Exp2Op::create(b, at, op.getX()); };
  Value result;
  if (every == 1) {
    result = fma();
  } else if (!reg) {
    result = sfu();
  } else if (std::optional<int64_t> r = residue ? residue : getConstantIntValue(reg)) {
    result = *r % every == every - 1 ? fma() : sfu();
  } else {
    // The register index is the unrolled loop's: the condition is a
    // constant in each copy the CUDA compiler unrolls, and the other
    // form is dead there.
    Value rem = arith::RemUIOp::create(b, at, reg, idx(every));
    Value pick = arith::CmpIOp::create(b, at, arith::CmpIPredicate::eq, rem, idx(every - 1));
    Value onFma = fma(), onSfu = sfu();
    result = arith::SelectOp::create(b, at, pick, onFma, onSfu);
  }
  op.replaceAllUsesWith(result);
  op.erase();
}

void TileLowering::lowerPipelined(PipelinedOp op) {
  // Software pipelining comes with tessel-software-pipeline; until then the
  // loop runs its stages one after another.
  auto loop = scf::ForOp::create(b, loc, op.getLower(), op.getUpper(), op.getStep());
  Block &body = op.getBody().front();
  body.getArgument(0).replaceAllUsesWith(loop.getInductionVar());
  Block *dest = loop.getBody();
  dest->getOperations().splice(dest->begin(), body.getOperations());
}

std::optional<Value> TileLowering::replicatedRegister(const FragmentLayout &l, ValueRange coords) {
  auto zero = [](uint64_t column) { return column == 0; };
  if (!llvm::all_of(l.getLane(), zero) || !llvm::all_of(l.getWarp(), zero) || !l.isSurjective() ||
      coords.size() != l.getRank())
    return std::nullopt;
  // The packed logical index, then a register whose image it is: a right
  // inverse of the register map, one logical bit at a time.
  LinearMap regMap(l.getLogicalBits(), l.getReg());
  SmallVector<uint64_t> columns;
  for (unsigned bit = 0; bit < l.getLogicalBits(); ++bit) {
    std::optional<uint64_t> r = regMap.solve(uint64_t{1} << bit);
    if (!r) return std::nullopt;
    columns.push_back(*r);
  }
  Value packed = zeroIdx;
  for (unsigned d = 0; d < l.getRank(); ++d) {
    Value bits = andI(coords[d], idx((int64_t{1} << l.getDimBits(d)) - 1));
    packed = arith::OrIOp::create(
        b, loc, packed,
        arith::ShLIOp::create(b, loc, bits, idx(l.getDimShift(d))).getResult());
  }
  return applyMap(LinearMap(l.getReg().size(), columns), packed);
}

