//===- Launch.h - device memory, module loading and launch -----*- C++ -*-===//
#ifndef TESSEL_RUNTIME_LAUNCH_H
#define TESSEL_RUNTIME_LAUNCH_H

#include "tessel/runtime/KernelSpec.h"
#include "tessel/runtime/Nvrtc.h"
#include "tessel/runtime/TensorMapCache.h"
#include "tessel/runtime/TensorView.h"

#include <atomic>
#include <cuda.h>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

namespace tessel::rt {

/// Device memory owned by the caller, on the thread's current device.
class DeviceBuffer {
public:
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  CUdeviceptr ptr() const { return p; }
  int device() const { return ordinal; }
  size_t bytes() const { return n; }
  /// Copies in (upload) or fills (fillBytes) and returns once done, so a
  /// kernel on any stream, a non-blocking one included, sees the bytes.
  void upload(const void *host, size_t bytes);
  void download(void *host, size_t bytes) const;
  /// Fills every byte (0xff makes every float a NaN); done on return.
  void fillBytes(unsigned char value);

private:
  CUdeviceptr p = 0;
  size_t n = 0;
  int ordinal = 0; // the device it lives on
};

/// A launch argument: a device buffer with its shape, or a scalar.
struct LaunchArg {
  enum Kind { Buffer, Int, Float } kind = Int;
  CUdeviceptr ptr = 0;
  std::vector<int64_t> shape;
  int64_t i = 0;
  double f = 0;
  /// Every local rank's address of a symmetric buffer, in rank order, for
  /// a parameter the kernel reaches on other ranks (peer(tensor, rank)).
  std::vector<CUdeviceptr> peers;
  /// A buffer given as a TensorView: its element type, strides and device
  /// are checked against the parameter, and the launch goes to its device.
  bool typed = false;
  ScalarType dtype = ScalarType::F32;
  std::vector<int64_t> strides;
  int device = -1;
  static LaunchArg view(const TensorView &v) {
    LaunchArg a = buffer(v.data, v.shape);
    a.typed = true;
    a.dtype = v.dtype;
    a.strides = v.strides;
    a.device = v.device;
    return a;
  }
  // Built field by field: a header users compile with -Wextra -Werror must
  // not leave members to a brace initializer's defaults.
  static LaunchArg buffer(CUdeviceptr p, std::vector<int64_t> shape) {
    LaunchArg a;
    a.kind = Buffer;
    a.ptr = p;
    a.shape = std::move(shape);
    return a;
  }
  /// This rank's copy `p` of a buffer and its `peers` (this rank's own
  /// entry included).
  static LaunchArg symmetric(CUdeviceptr p, std::vector<CUdeviceptr> peers,
                             std::vector<int64_t> shape) {
    LaunchArg a = buffer(p, std::move(shape));
    a.peers = std::move(peers);
    return a;
  }
  static LaunchArg integer(int64_t v) {
    LaunchArg a;
    a.i = v;
    return a;
  }
  static LaunchArg real(double v) {
    LaunchArg a;
    a.kind = Float;
    a.f = v;
    return a;
  }
};

/// How a launch of a persistent() kernel sizes its grid. By default it
/// takes as many blocks as the device runs at once, which leaves no
/// multiprocessor to a kernel launched beside it: one that the persistent
/// kernel waits for (a communication kernel setting its flags) would never
/// start. A budget leaves room.
struct LaunchOptions {
  /// At most this many blocks (0: no limit).
  int maxBlocks = 0;
  /// Multiprocessors left free: the blocks that fit on the others.
  int freeSms = 0;
};

/// A compiled kernel, loaded on first launch on each device (into that
/// device's primary context).
class LoadedKernel {
public:
  LoadedKernel(KernelSpec spec, std::shared_ptr<const Binary> binary, std::string arch);
  ~LoadedKernel();
  const KernelSpec &spec() const { return kernelSpec; }
  const Binary &binary() const { return *bin; }
  const std::string &arch() const { return target; }
  /// Checks the arguments against the spec (count, kinds, static extents,
  /// alignment, 32-bit indexing; element types and strides of views) and
  /// launches on `stream`, on the views' device when they name one (else the
  /// thread's device). Throws tessel::Error.
  void launch(const std::vector<LaunchArg> &args, CUstream stream = nullptr,
              const LaunchOptions &options = {});
  /// Median time of `reps` launches in milliseconds, after `warmup` launches.
  float time(const std::vector<LaunchArg> &args, int warmup = 3, int reps = 20);
  /// The same, with launch i taking argument set i % sets: inputs rotated
  /// through copies larger than L2 are timed as they come from memory.
  float time(const std::vector<std::vector<LaunchArg>> &argSets, int warmup, int reps);
  /// The kernel's function in the current device's context (its library
  /// loaded on first use), for callers that launch it themselves.
  CUfunction function() { return ensureLoaded().function; }
  /// Registers and shared memory per thread/block as the driver reports them.
  std::string resourceUsage();
  /// Blocks of this kernel one multiprocessor of `device` (an ordinal; -1:
  /// the thread's current one) holds at once, as the driver's occupancy
  /// calculator has it (at least 1).
  int residentBlocksPerSm(int device = -1);

  /// Tensor maps encoded for this kernel's launches, kept per (buffer,
  /// shape).
  const TensorMapCache &tensorMapCache() const { return mapCache; }

private:
  /// What a context's launches need: the function and, found on the first
  /// persistent launch, how many blocks a multiprocessor holds.
  struct InContext {
    CUfunction function = nullptr;
    std::atomic<int> residentPerSm{0};
  };
  /// The kernel's state in the current device's context, loading the
  /// library on first use (also inside a stream capture).
  InContext &ensureLoaded();
  /// Loads the library and the function into the current context.
  CUfunction load();
  /// Writes the kernel's launch parameters for `args` into `storage` (in
  /// 8-byte slots, each argument's first slot in `firstSlot`) and the
  /// index symbols' values into `symbols`, after checking every argument.
  void packArguments(const std::vector<LaunchArg> &args, std::vector<uint64_t> &storage,
                     std::vector<size_t> &firstSlot, std::vector<int64_t> &symbols) const;
  KernelSpec kernelSpec;
  std::shared_ptr<const Binary> bin;
  std::string target;
  std::mutex loadMutex;
  CUlibrary library = nullptr;
  std::map<CUcontext, InContext> contexts;
  TensorMapCache mapCache;
};

/// Why a TensorView argument cannot be parameter `param` (its element type
/// or its strides), or "" when it can. `what` names the argument.
std::string viewMismatch(const ParamSpec &param, const LaunchArg &arg, const std::string &what);
/// Whether viewMismatch would find nothing wrong; allocates nothing, as
/// every launch asks it.
bool viewFits(const ParamSpec &param, const LaunchArg &arg);
/// The device the typed arguments live on (-1 when none says); throws
/// tessel::Error when two disagree.
int argumentDevice(const std::vector<LaunchArg> &args, const std::string &kernel);

/// Median time in milliseconds of `reps` runs of `work` (launches on
/// `stream`), timed with CUDA events after `warmup` runs: how a sequence of
/// kernels (FlashAttention's backward) is timed as one.
float timeMedian(const std::function<void(int run)> &work, int warmup, int reps,
                 CUstream stream = nullptr);

/// Zeroes `bytes` bytes at `ptr` on `stream` (ordered with its launches):
/// what a kernel that adds into its output (a split-K gemm) needs before
/// each launch.
void clearAsync(CUdeviceptr ptr, size_t bytes, CUstream stream = nullptr);
/// Sets `bytes` bytes at `ptr` to `value` on `stream`.
void fillAsync(CUdeviceptr ptr, size_t bytes, unsigned char value, CUstream stream = nullptr);

/// Whether TMA can read the buffer argument of `map` (row strides in whole
/// 16-byte units); otherwise why not.
bool tensorMapFits(const KernelSpec &spec, const TensorMapSpec &map,
                   const std::vector<LaunchArg> &args, std::string *why = nullptr);
/// Encodes `map` for this launch's arguments (cuTensorMapEncodeTiled), over
/// the argument's own address or, given, `address` (a peer's copy of it).
void encodeTensorMap(const KernelSpec &spec, const TensorMapSpec &map,
                     const std::vector<LaunchArg> &args, CUtensorMap *out,
                     CUdeviceptr address = 0);

/// Whether a kernel built for `arch` runs on a device of compute capability
/// `cc`; otherwise the reason.
bool archRunsOn(const std::string &arch, int cc, std::string *why = nullptr);
/// Whether such a kernel runs there from its PTX (compiled by the driver
/// when loaded) rather than its cubin: an sm_80 build past 8.x, an sm_89
/// build past Ada.
bool runsThroughPtx(const std::string &arch, int cc);
/// The target to compile for a device of compute capability `cc`: sm_90a
/// on Hopper, sm_100a on Blackwell, sm_89 on Ada (FP8 mma.sync, 99 KB of
/// shared memory a block), sm_80 otherwise.
std::string nativeArch(int cc);

} // namespace tessel::rt

#endif
