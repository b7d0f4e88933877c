//===- TesselVerifyKernel.cpp - whole-kernel checks -----------------------===//
#include "tessel/Transforms/BufferUtils.h"
#include "tessel/Transforms/Passes.h"

namespace tessel {
#define GEN_PASS_DEF_TESSELVERIFYKERNEL
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

namespace {
struct TesselVerifyKernel : tessel::impl::TesselVerifyKernelBase<TesselVerifyKernel> {
  using Base::Base;

  void runOnOperation() override {
    KernelOp kernel = getOperation();
    std::optional<TargetInfo> target = lookupTarget(arch, kernel);
    if (!target) return signalPassFailure();
    bool ok = true;
    int64_t threads = kernel.getThreads();
    if (threads % 32 != 0 || threads > 1024) {
      kernel.emitError("threads must be a multiple of 32 and at most 1024, got ") << threads;
      ok = false;
    }
    // Collective ops are executed by every thread together; inside an
    // element-wise body each thread runs a different number of iterations.
    kernel.walk([&](ParallelOp parallel) {
      parallel.getBody().walk([&](Operation *op) {
        bool collective = llvm::isa<CopyOp, FillOp, GemmOp, ReduceOp, ParallelOp, PipelinedOp,
                                    BarrierOp, AllocOp, SignalOp, WaitOp>(op);
        if (auto atomic = llvm::dyn_cast<AtomicAddOp>(op))
          collective = llvm::isa<MemRefType>(atomic.getValue().getType());
        if (collective) {
          op->emitError("'") << op->getName()
                             << "' is a whole-block operation and cannot appear inside "
                                "tile.parallel, which runs element code per thread";
          ok = false;
        }
      });
    });
    // The Hopper machinery has no sm_80 form.
    if (target->computeCapability < 90) {
      if (kernel.getCluster()) {
        kernel.emitError("thread block clusters need sm_90a; the target is ") << target->arch;
        ok = false;
      }
      kernel.walk([&](Operation *op) {
        const char *what = nullptr;
        if (llvm::isa<CopyAsyncOp>(op)) what = "TMA copies (copy_async)";
        else if (llvm::isa<MbarrierInitOp, MbarrierArriveOp, MbarrierExpectTxOp, MbarrierWaitOp>(op))
          what = "mbarriers";
        else if (auto role = llvm::dyn_cast<RoleOp>(op); role && role.getMaxRegisters())
          what = "register budgets (setmaxnreg)";
        if (!what) return;
        op->emitError() << what << " need sm_90a; the target is " << target->arch;
        ok = false;
      });
    }
    if (failed(verifySharedMemory(kernel, target->arch, target->maxSharedBytes))) ok = false;
    if (!ok) signalPassFailure();
  }
};
} // namespace
