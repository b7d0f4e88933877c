//===- Passes.h - Tessel passes ---------------------------------*- C++ -*-===//
#ifndef TESSEL_TRANSFORMS_PASSES_H
#define TESSEL_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "tessel/Dialect/Tile/TileDialect.h"
#include "tessel/Dialect/TileNV/TileNVDialect.h"
#include <string>

namespace tessel {
#define GEN_PASS_DECL
#include "tessel/Transforms/Passes.h.inc"
#define GEN_PASS_REGISTRATION
#include "tessel/Transforms/Passes.h.inc"

/// Targets Tessel compiles for.
/// Bytes at the end of dynamic shared memory that the tcgen05 emulation
/// keeps for the block's tensor-memory allocation (tessel_tcgen05_emu.h).
constexpr int64_t kEmulationRecordBytes = 16;
struct TargetInfo {
  std::string arch;        // "sm_80", "sm_90a", "sm_100a", "sm_100a-emu"
  int computeCapability;   // 80, 90, 100: the features the pipeline uses
  int64_t maxSharedBytes;  // dynamic shared memory per block
  bool tma = true;         // sm_90a/sm_100a loads may use TMA
  /// sm_100a-emu: the sm_100a pipeline with every tcgen05 op done in
  /// software (tessel_tcgen05_emu.h), compiled for sm_90a so that Blackwell
  /// kernels run on Hopper.
  bool emulatesTcgen05 = false;
  /// The architecture the CUDA is compiled for.
  std::string binaryArch() const { return emulatesTcgen05 ? "sm_90a" : arch; }
  /// TMA, mbarrier transaction counts, warpgroup register reallocation.
  bool hasTma() const { return computeCapability >= 90; }
};
/// The target for an arch name, or nullopt for an unknown one.
std::optional<TargetInfo> lookupTarget(llvm::StringRef arch);
/// The target for a pass's `arch` option, or an error at `op` naming the
/// known ones.
std::optional<TargetInfo> lookupTarget(llvm::StringRef arch, mlir::Operation *op);
/// The same, for the passes that also take a `tma` option.
std::optional<TargetInfo> lookupTarget(llvm::StringRef arch, bool tma, mlir::Operation *op);

/// Named barriers: 0 is __syncthreads, roles take 1 .. kLastRoleBarrier,
/// and the two after are the ping-pong turns of consumer warpgroups 0 and 1.
constexpr int64_t kLastRoleBarrier = 13;
constexpr int64_t kPingpongBarrier = 14;
/// Marks a consumer loop whose warpgroups take ping-pong turns.
constexpr llvm::StringLiteral kPingpongAttr = "tessel.pingpong";
/// On a warp-specialized consumer loop: the stages of its ring, for
/// tessel-release-stages-late.
constexpr llvm::StringLiteral kStageRingAttr = "tessel.stage_ring";

/// Registers per thread a kernel of `threads` threads starts with: what
/// its launch bounds let ptxas give every thread, in setmaxnreg's steps of 8.
inline int64_t entryRegisters(int64_t threads) {
  int64_t perThread = 65536 / ((threads + 127) / 128 * 128);
  return std::min<int64_t>(perThread, 256) / 8 * 8;
}

/// The pass pipeline for a target, one pass per line in order.
void buildTesselPipeline(mlir::OpPassManager &pm, const TargetInfo &target);
/// Registers the pipeline as `tessel-pipeline` for tessel-opt.
void registerTesselPipeline();
} // namespace tessel

#endif
