//===- Compile.h - Program to a launchable kernel ---------------*- C++ -*-===//
#ifndef TESSEL_DSL_COMPILE_H
#define TESSEL_DSL_COMPILE_H

#include "tessel/dsl/Program.h"
#include "tessel/runtime/Launch.h"

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace mlir {
class Operation;
} // namespace mlir

namespace tessel {

struct CompileOptions {
  std::string arch = "sm_90a"; // sm_80, sm_89, sm_90a, sm_100a or sm_100a-emu
  std::string dumpIrDir;       // IR after every pass, the CUDA and the PTX
  bool tma = true;             // sm_90a/sm_100a pipelines may load with TMA
  /// Called with each pass's flag and the kernel it ran on, after it ran:
  /// for tools and tests that inspect the IR, or alter it to show what a
  /// pass's result decides. The kernel is then cached like any other.
  std::function<void(const std::string &pass, mlir::Operation *kernel)> afterPass = {};
  /// Print the compile's warning remarks (see Remark) to stderr.
  bool printWarnings = true;
};

/// Something the compiler did not do that the program asked for or would
/// normally get (pipelining a `pipelined` loop, TMA for a copy, warp
/// specialization, a copy's vector width, a swizzle), and why. Warnings are
/// for what the program asked for (a `pipelined` loop of several stages
/// that is not pipelined, warp specialization or TMA dropped from a loop
/// that asked for it or would get it on the target); they are printed to
/// stderr once per compile. A compile served from the cache gives the same
/// remarks, at the locations of the program compiled.
struct Remark {
  std::string pass;     // the pass that declined, e.g. tessel-software-pipeline
  std::string category; // pipelining, tma, warp-specialization, vectorization, swizzle,
                        // tensor-cores
  std::string location; // file:line of the DSL call
  std::string message;  // the reason
  bool isWarning = false;
  /// "file:line: warning: pass [category]: message" ("remark" for the rest).
  std::string str() const;
};

struct CompileTimes {
  double passesMs = 0, emitMs = 0, nvrtcMs = 0, totalMs = 0;
  bool nvrtcCalled = false; // false on a cache hit
  /// The passes and the emitter were skipped: this tile IR was compiled
  /// for the target before (in memory or the disk cache).
  bool irCacheHit = false;
  /// Each pass of the pipeline in order, with its wall time (`passesMs`
  /// also counts cloning the program and recording its layouts).
  std::vector<std::pair<std::string, double>> passMs;
};

/// The layout tessel-layout-inference gave one buffer of the kernel.
struct BufferLayout {
  std::string name;   // the author's name, or "buffer N" in program order
  std::string where;  // file:line of the allocation
  std::string type;   // e.g. memref<64x64xf32, #tile.space<fragment>>
  std::string layout; // the #tile.fragment / #tile.shared attribute
  /// A picture of the owner thread and register, or the bank, of each
  /// element; drawn on request (drawing every buffer's took most of a
  /// compile), empty for a buffer without such a layout.
  std::string svg() const { return draw ? draw() : std::string(); }
  std::function<std::string()> draw;
};

/// A compiled kernel: the generated code and a launchable binary. Copies
/// share the binary. launch() may be called from several threads at once.
class Kernel {
public:
  const std::string &tileIr() const { return tile; }
  const std::string &loweredIr() const { return lowered ? lowered->get() : tile; }
  const std::string &cuda() const { return source ? *source : tile; }
  const std::string &ptx() const { return loaded->binary().ptxText(); }
  const std::string &cubin() const { return loaded->binary().cubin; }
  /// ptxas's "Potential Performance Loss" notes for this kernel, one per
  /// line; empty when it compiled as written. Also printed to stderr.
  const std::string &performanceWarnings() const {
    return loaded->binary().performanceWarnings;
  }
  /// Bytes of register spills ptxas reports (stores + loads); 0 when the
  /// kernel fits its registers.
  int64_t spillBytes() const {
    return loaded->binary().spillStoreBytes + loaded->binary().spillLoadBytes;
  }
  const rt::KernelSpec &spec() const { return loaded->spec(); }
  const std::vector<ParamInfo> &params() const { return info; }
  const CompileTimes &times() const { return timing; }
  /// Every fragment's and shared buffer's inferred layout.
  const std::vector<BufferLayout> &layouts() const { return bufferLayouts; }
  /// What the compiler declined to do, and why, in the order the passes said it.
  const std::vector<Remark> &remarks() const { return declined; }
  rt::LoadedKernel &loadedKernel() { return *loaded; }
  /// The build that can take these arguments: the kernel itself, or, where
  /// a TMA load cannot read an argument (row strides that are not whole
  /// 16-byte units), the same program built without TMA, compiled on first
  /// need.
  rt::LoadedKernel &loadedFor(const std::vector<rt::LaunchArg> &args);

  /// Throws tessel::Error unless `args` fit the parameters in order: their
  /// count, a buffer for each tensor with the element type, strides and
  /// extents its declaration and the symbols passed give, no negative
  /// index symbol. Touches no device, so a caller's argument lists can be
  /// checked anywhere.
  void checkArguments(const std::vector<rt::LaunchArg> &args) const;
  /// Launches with arguments in parameter order, checked as above.
  /// `options`: a persistent() kernel's block budget.
  void launch(const std::vector<rt::LaunchArg> &args, CUstream stream = nullptr,
              const rt::LaunchOptions &options = {});

private:
  friend Kernel compile(Program &, const CompileOptions &);
  std::string tile;
  /// Shared with the compile cache's entry (a warm compile copies nothing;
  /// the lowered IR is read from the entry when first asked for).
  std::shared_ptr<rt::LazyText> lowered;
  std::shared_ptr<const std::string> source;
  std::vector<BufferLayout> bufferLayouts;
  std::vector<Remark> declined;
  std::vector<ParamInfo> info;
  std::shared_ptr<rt::LoadedKernel> loaded, withoutTma;
  /// Guards building `withoutTma`: copies of a Kernel share it, and
  /// launches may come from several threads.
  std::shared_ptr<std::mutex> rebuild = std::make_shared<std::mutex>();
  CompileOptions compiledWith;
  CompileTimes timing;
};

/// Runs Tessel's pipeline for the target, emits CUDA and compiles it through
/// the kernel cache. The Program is not modified. Throws tessel::Error.
/// A program compiled before (same tile IR, target and build of Tessel, in
/// this process or, through the disk cache, an earlier one) skips the
/// passes and NVRTC; CompileTimes::irCacheHit says so.
Kernel compile(Program &program, const CompileOptions &options = {});

/// Drops the compile caches' in-memory entries (pipeline results and
/// binaries); the disk cache stays. Kernels already compiled keep theirs.
void clearCompileCacheMemory();

} // namespace tessel

#endif
