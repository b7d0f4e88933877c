//===- Pipeline.cpp - the pass pipeline per target ------------------------===//
#include "tessel/Transforms/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

std::optional<tessel::TargetInfo> tessel::lookupTarget(llvm::StringRef arch) {
  // Per-block dynamic shared memory limits: 163 KB on sm_80, 99 KB on sm_89
  // (Ada), 227 KB on sm_90 and sm_100. sm_89 is sm_80's pipeline with FP8
  // mma.sync.
  if (arch == "sm_80") return TargetInfo{"sm_80", 80, 166912};
  if (arch == "sm_89") return TargetInfo{"sm_89", 89, 101376};
  if (arch == "sm_90a") return TargetInfo{"sm_90a", 90, 232448};
  if (arch == "sm_100a") return TargetInfo{"sm_100a", 100, 232448};
  // The H100/H200 it runs on has the same 227 KB; the emulation's record of
  // the block's tensor-memory allocation comes out of it.
  if (arch == "sm_100a-emu")
    return TargetInfo{"sm_100a-emu", 100, 232448 - kEmulationRecordBytes, true, true};
  return std::nullopt;
}

std::optional<tessel::TargetInfo> tessel::lookupTarget(llvm::StringRef arch, Operation *op) {
  std::optional<TargetInfo> target = lookupTarget(arch);
  if (!target) op->emitError("unknown target '") << arch << "'; use sm_80, sm_89, sm_90a, sm_100a or sm_100a-emu";
  return target;
}

std::optional<tessel::TargetInfo> tessel::lookupTarget(llvm::StringRef arch, bool tma,
                                                      Operation *op) {
  std::optional<TargetInfo> target = lookupTarget(arch, op);
  if (target) target->tma = tma;
  return target;
}

void tessel::buildTesselPipeline(OpPassManager &pm, const TargetInfo &target) {
  OpPassManager &kernel = pm.nest<tile::KernelOp>();
  kernel.addPass(createTesselVerifyKernel(TesselVerifyKernelOptions{target.arch}));
  // Accumulators move to tensor memory first: a gemm into tensor memory
  // (tcgen05) reads 8-bit operands MN-major as they are stored, so only the
  // gemms left on wgmma or mma.sync get K-major copies.
  kernel.addPass(createTesselTmemAccumulators(TesselTmemAccumulatorsOptions{target.arch}));
  kernel.addPass(createTesselKMajorOperands());
  kernel.addPass(createTesselTmemAllocation(TesselTmemAllocationOptions{target.arch}));
  kernel.addPass(createTesselFragmentWindows());
  kernel.addPass(createTesselLayoutInference(TesselLayoutInferenceOptions{target.arch}));
  kernel.addPass(createTesselWarpSpecialize(TesselWarpSpecializeOptions{target.arch, target.tma}));
  kernel.addPass(createTesselSoftwarePipeline(TesselSoftwarePipelineOptions{target.arch, target.tma}));
  kernel.addPass(createTesselInsertBarriers(TesselInsertBarriersOptions{target.arch, target.tma}));
  kernel.addPass(createTesselVerifySync(TesselVerifySyncOptions{target.arch, target.tma}));
  kernel.addPass(createTesselLowerTileOps(TesselLowerTileOpsOptions{target.arch, target.tma}));
  // The lowered kernels are structured control flow with no CFG blocks to
  // merge or arguments to drop: region simplification finds nothing there
  // but walks every region again on each iteration (40% of the
  // canonicalizer's time on the 512-thread tcgen05 attention forward).
  GreedyRewriteConfig canonicalize;
  canonicalize.setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
  kernel.addPass(createCanonicalizerPass(canonicalize));
  kernel.addPass(createCSEPass());
  kernel.addPass(createTesselDeferWgmmaWaits());
  kernel.addPass(createTesselReleaseStagesLate());
  kernel.addPass(createTesselSchedulePingpong());
  kernel.addPass(createTesselDeferBulkWaits());
  kernel.addPass(createTesselVerifyBarriers());
}

namespace {
struct PipelineOptions : PassPipelineOptions<PipelineOptions> {
  Option<std::string> arch{*this, "arch", llvm::cl::desc("sm_80, sm_89, sm_90a, sm_100a or sm_100a-emu"),
                           llvm::cl::init("sm_90a")};
};
} // namespace

void tessel::registerTesselPipeline() {
  // Registered by hand rather than with PassPipelineRegistration so that an
  // unknown arch is an error, not a silent sm_90a.
  registerPassPipeline(
      "tessel-pipeline", "The full Tessel lowering for one target",
      [](OpPassManager &pm, StringRef text, function_ref<LogicalResult(const Twine &)> error) {
        PipelineOptions options;
        if (failed(options.parseFromString(text))) return failure();
        std::optional<TargetInfo> target = lookupTarget(options.arch);
        if (!target)
          return error("tessel-pipeline: unknown arch '" + options.arch +
                       "'; use sm_80, sm_89, sm_90a, sm_100a or sm_100a-emu");
        buildTesselPipeline(pm, *target);
        return success();
      },
      [](function_ref<void(const detail::PassOptions &)> print) { print(PipelineOptions()); });
}
