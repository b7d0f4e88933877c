//===- RegisterPressure.cpp - fragment registers live at once ------------===//
#include "tessel/Transforms/RegisterPressure.h"

#include "mlir/Interfaces/LoopLikeInterface.h"

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

namespace {
bool isLoop(Operation *op) { return llvm::isa<LoopLikeOpInterface, PipelinedOp>(op); }

/// The innermost loop holding `op`, or null.
Operation *enclosingLoop(Operation *op) {
  for (Operation *parent = op->getParentOp(); parent; parent = parent->getParentOp())
    if (isLoop(parent)) return parent;
  return nullptr;
}
} // namespace

RegisterPeak tessel::peakFragmentRegisters(KernelOp kernel, ArrayRef<Value> fragments,
                                           function_ref<int64_t(Value)> registersOf) {
  // Program points in pre-order; an op's subtree spans [begin, end].
  DenseMap<Operation *, std::pair<int64_t, int64_t>> span;
  int64_t next = 0;
  std::function<void(Operation *)> number = [&](Operation *op) {
    int64_t begin = next++;
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (Operation &nested : block) number(&nested);
    span[op] = {begin, next - 1};
  };
  number(kernel);

  struct Interval {
    int64_t begin, end;
    Value fragment;
  };
  SmallVector<Interval> intervals;
  for (Value f : fragments) {
    if (f.use_empty()) continue;
    // The innermost loop holding every use, if any: its iterations carry
    // nothing (the fragment is rebuilt in each one).
    Operation *common = enclosingLoop(*f.getUsers().begin());
    for (Operation *user : f.getUsers())
      while (common && !common->isAncestor(user)) common = enclosingLoop(common);
    // Live from the first use to the last in program order, and through
    // every iteration of a loop inside `common` that it enters with a value.
    int64_t first = std::numeric_limits<int64_t>::max(), last = -1;
    Operation *lastUser = nullptr;
    for (Operation *user : f.getUsers()) {
      auto [begin, end] = span.lookup(user);
      first = std::min(first, begin);
      if (end > last) last = end, lastUser = user;
      for (Operation *loop = enclosingLoop(user); loop && loop != common;
           loop = enclosingLoop(loop)) {
        auto [loopBegin, loopEnd] = span.lookup(loop);
        first = std::min(first, loopBegin);
        last = std::max(last, loopEnd);
      }
    }
    // A gemm's registers stay busy until its wait: at the latest, the end
    // of the iteration.
    if (common && llvm::isa<GemmOp>(lastUser)) last = std::max(last, span.lookup(common).second);
    intervals.push_back({first, last, f});
  }

  // The peak is at the start of some interval.
  RegisterPeak peak;
  for (const Interval &at : intervals) {
    RegisterPeak here;
    for (const Interval &other : intervals)
      if (other.begin <= at.begin && at.begin <= other.end) {
        here.registers += registersOf(other.fragment);
        here.live.push_back(other.fragment);
      }
    if (here.registers > peak.registers) peak = std::move(here);
  }
  return peak;
}
