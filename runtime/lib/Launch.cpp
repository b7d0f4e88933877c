//===- Launch.cpp - device memory, module loading and launch --------------===//
#include "tessel/runtime/Launch.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Error.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <fmt/format.h>

using namespace tessel;
using namespace tessel::rt;

DeviceBuffer::DeviceBuffer(size_t bytes) : n(bytes) {
  Driver &d = Driver::get();
  d.makeCurrent();
  ordinal = d.currentDevice();
  TESSEL_CU(d, cuMemAlloc, &p, std::max<size_t>(bytes, 1));
}

DeviceBuffer::~DeviceBuffer() {
  if (!p) return;
  // Freed in the context it came from, whatever the thread's device is now;
  // a destructor reports nothing.
  try {
    Driver &d = Driver::get();
    d.api().cuCtxSetCurrent(d.context(ordinal));
    d.api().cuMemFree(p);
    d.api().cuCtxSetCurrent(d.context());
  } catch (const Error &) {
  }
}

void DeviceBuffer::upload(const void *host, size_t bytes) {
  if (bytes > n) throw Error(fmt::format("upload of {} bytes into a {}-byte buffer", bytes, n));
  Driver &d = Driver::get();
  d.makeCurrent();
  TESSEL_CU(d, cuMemcpyHtoD, p, host, bytes);
  // From pageable memory the copy may return before it lands, and a
  // non-blocking stream does not wait for the legacy stream it ran on.
  TESSEL_CU(d, cuStreamSynchronize, nullptr);
}

void DeviceBuffer::download(void *host, size_t bytes) const {
  if (bytes > n) throw Error(fmt::format("download of {} bytes from a {}-byte buffer", bytes, n));
  Driver &d = Driver::get();
  d.makeCurrent();
  TESSEL_CU(d, cuMemcpyDtoH, host, p, bytes);
}

void DeviceBuffer::fillBytes(unsigned char value) {
  Driver &d = Driver::get();
  d.makeCurrent();
  TESSEL_CU(d, cuMemsetD8, p, value, n);
  // cuMemsetD8 returns before the fill is done, on the legacy stream,
  // which a non-blocking stream's kernels do not wait for: without this a
  // kernel launched next could write its output before the fill does.
  TESSEL_CU(d, cuStreamSynchronize, nullptr);
}

void tessel::rt::clearAsync(CUdeviceptr ptr, size_t bytes, CUstream stream) {
  fillAsync(ptr, bytes, 0, stream);
}

void tessel::rt::fillAsync(CUdeviceptr ptr, size_t bytes, unsigned char value, CUstream stream) {
  Driver &d = Driver::get();
  d.makeCurrent();
  TESSEL_CU(d, cuMemsetD8Async, ptr, value, bytes, stream);
}

int tessel::rt::scalarBytes(ScalarType t) {
  switch (t) {
  case ScalarType::I1: case ScalarType::I8: case ScalarType::U8: case ScalarType::F8E4M3:
  case ScalarType::F8E5M2: case ScalarType::UE8M0: return 1;
  case ScalarType::F16: case ScalarType::BF16: return 2;
  case ScalarType::I32: case ScalarType::Index: case ScalarType::F32: return 4;
  case ScalarType::I64: case ScalarType::F64: return 8;
  }
  return 4;
}

const char *tessel::rt::scalarName(ScalarType t) {
  static const char *names[] = {"i1",  "i32", "i64", "index", "f16",    "bf16",  "f32",
                                "f64", "i8",  "u8",  "f8e4m3", "f8e5m2", "ue8m0"};
  return names[static_cast<int>(t)];
}

std::array<unsigned, 3> KernelSpec::evaluateGrid(const std::vector<int64_t> &symbols) const {
  std::array<unsigned, 3> out = {1, 1, 1};
  for (size_t d = 0; d < grid.size(); ++d) {
    std::vector<int64_t> stack;
    for (const GridToken &t : grid[d]) {
      if (t.kind == GridToken::Const) { stack.push_back(t.value); continue; }
      if (t.kind == GridToken::Symbol) { stack.push_back(symbols.at(t.value)); continue; }
      int64_t r = stack.back(); stack.pop_back();
      int64_t l = stack.back(); stack.pop_back();
      auto floorDiv = [](int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); };
      // A divisor from the symbols (semi-affine grids) is checked here:
      // dividing by zero would kill the process.
      bool divides = t.kind == GridToken::FloorDiv || t.kind == GridToken::CeilDiv ||
                     t.kind == GridToken::Mod;
      if (divides && r <= 0)
        throw Error(fmt::format("kernel {}: grid dimension {} divides by {}, which the symbols "
                                "passed make; a divisor must be at least 1",
                                name, d, r));
      switch (t.kind) {
      case GridToken::Add: stack.push_back(l + r); break;
      case GridToken::Mul: stack.push_back(l * r); break;
      case GridToken::FloorDiv: stack.push_back(floorDiv(l, r)); break;
      case GridToken::CeilDiv: stack.push_back(-floorDiv(-l, r)); break;
      case GridToken::Mod: stack.push_back(l - floorDiv(l, r) * r); break;
      default: break;
      }
    }
    int64_t v = stack.empty() ? 1 : stack.back();
    if (v <= 0 || v > (d == 0 ? 2147483647LL : 65535LL))
      throw Error(fmt::format("kernel {}: grid dimension {} evaluates to {}, outside the range the "
                              "GPU allows", name, d, v));
    out[d] = static_cast<unsigned>(v);
  }
  return out;
}

std::string tessel::rt::nativeArch(int cc) {
  return cc == 90 ? "sm_90a" : cc >= 100 ? "sm_100a" : cc == 89 ? "sm_89" : "sm_80";
}

bool tessel::rt::runsThroughPtx(const std::string &arch, int cc) {
  return (arch == "sm_80" && cc / 10 > 8) || (arch == "sm_89" && cc > 89);
}

bool tessel::rt::archRunsOn(const std::string &arch, int cc, std::string *why) {
  // Arch-specific ('a') cubins run only on their exact compute capability;
  // plain sm_80 SASS runs on every 8.x part, and its PTX, compiled by the
  // driver, on every later one; sm_89's on 8.9 and, through PTX, later.
  bool ok = arch == "sm_80"     ? cc >= 80
            : arch == "sm_89"   ? cc >= 89
            : arch == "sm_90a"  ? cc == 90
            : arch == "sm_100a" ? cc == 100
                                : false;
  if (!ok && why)
    *why = fmt::format("this kernel needs {}, the device is sm_{}", arch, cc);
  return ok;
}

LoadedKernel::LoadedKernel(KernelSpec spec, std::shared_ptr<const Binary> binary, std::string arch)
    : kernelSpec(std::move(spec)), bin(std::move(binary)), target(std::move(arch)) {}

LoadedKernel::~LoadedKernel() {
  if (library) Driver::get().api().cuLibraryUnload(library);
}

namespace {
/// Lets this thread make calls a stream capture forbids (loading a
/// library, a synchronous copy) while it lasts: a kernel first launched
/// inside a capture loads as it would outside one.
class RelaxedCapture {
public:
  RelaxedCapture() { Driver::get().api().cuThreadExchangeStreamCaptureMode(&mode); }
  ~RelaxedCapture() { Driver::get().api().cuThreadExchangeStreamCaptureMode(&mode); }
  RelaxedCapture(const RelaxedCapture &) = delete;
  RelaxedCapture &operator=(const RelaxedCapture &) = delete;

private:
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
};

/// Buffers one thread's launches reuse: a launch allocates nothing once
/// they have grown to its arguments.
struct LaunchScratch {
  std::vector<uint64_t> storage;
  std::vector<size_t> firstSlot;
  std::vector<int64_t> symbols;
  std::vector<void *> params;
  std::vector<CUtensorMap> maps;
  /// Per-rank maps (TensorMapSpec::peers), one set per such map.
  std::vector<std::array<CUtensorMap, kMaxPeers>> peerMaps;
};
} // namespace

LoadedKernel::InContext &LoadedKernel::ensureLoaded() {
  Driver &d = Driver::get();
  d.makeCurrent();
  std::lock_guard<std::mutex> lock(loadMutex);
  CUcontext ctx = d.context();
  if (auto it = contexts.find(ctx); it != contexts.end()) return it->second;
  CUfunction function = load();
  InContext &state = contexts[ctx];
  state.function = function;
  return state;
}

CUfunction LoadedKernel::load() {
  Driver &d = Driver::get();
  std::string why;
  if (!archRunsOn(target, d.computeCapability(), &why))
    throw Error(fmt::format("{} (device {}: {})", why, d.currentDevice(), d.deviceName()));
  RelaxedCapture relaxed;
  // A library belongs to no context; each device's context gets its own
  // function handle (and shared-memory limit).
  // An sm_80 build on a later GPU loads its PTX (for the same code on
  // Hopper, say, beside the sm_90a build: a reference without TMA, wgmma
  // or warp specialization).
  if (!library) {
    const void *image = runsThroughPtx(target, d.computeCapability())
                            ? static_cast<const void *>(bin->ptxText().c_str())
                            : static_cast<const void *>(bin->cubin.data());
    TESSEL_CU(d, cuLibraryLoadData, &library, image, nullptr, nullptr, 0, nullptr, nullptr, 0);
  }
  CUkernel kernel;
  TESSEL_CU(d, cuLibraryGetKernel, &kernel, library, kernelSpec.name.c_str());
  CUfunction function;
  TESSEL_CU(d, cuKernelGetFunction, &function, kernel);
  if (kernelSpec.sharedBytes > 48 * 1024)
    TESSEL_CU(d, cuFuncSetAttribute, function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
              static_cast<int>(kernelSpec.sharedBytes));
  // Kernels that can trap with a report (flag waits) get its address; the
  // compiler drops the slot from kernels that never use it. The copy goes
  // on a stream of its own that waits for nothing: the legacy stream would
  // join a capture under way on a blocking stream.
  CUdeviceptr slot = 0;
  size_t slotBytes = 0;
  if (d.api().cuLibraryGetGlobal(&slot, &slotBytes, library, "tessel_trap_report_slot") ==
          CUDA_SUCCESS &&
      slotBytes == sizeof(CUdeviceptr)) {
    CUdeviceptr report = d.trapReportAddress();
    CUstream own;
    TESSEL_CU(d, cuStreamCreate, &own, CU_STREAM_NON_BLOCKING);
    CUresult copied = d.api().cuMemcpyHtoDAsync(slot, &report, sizeof(report), own);
    CUresult synced = copied == CUDA_SUCCESS ? d.api().cuStreamSynchronize(own) : copied;
    d.api().cuStreamDestroy(own);
    d.check(synced, "cuMemcpyHtoDAsync (the trap report's address)");
  }
  return function;
}

void LoadedKernel::packArguments(const std::vector<LaunchArg> &args, std::vector<uint64_t> &storage,
                                 std::vector<size_t> &firstSlot,
                                 std::vector<int64_t> &symbols) const {
  const KernelSpec &s = kernelSpec;
  storage.clear();
  firstSlot.clear();
  symbols.clear();
  // Every argument gets 8-byte aligned slots (a peer table eight of them);
  // the driver reads each by its declared size from its first slot.
  auto push = [&](const void *value, size_t bytes) {
    firstSlot.push_back(storage.size());
    storage.resize(storage.size() + (bytes + 7) / 8, 0);
    std::memcpy(&storage[firstSlot.back()], value, bytes);
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const ParamSpec &p = s.params[i];
    const LaunchArg &a = args[i];
    if (p.isBuffer) {
      if (a.kind != LaunchArg::Buffer)
        throw Error(fmt::format("kernel {}: argument {} must be a buffer", s.name, i));
      if (a.shape.size() != p.shape.size())
        throw Error(fmt::format("kernel {}: argument {} has rank {}, expected {}", s.name, i,
                                a.shape.size(), p.shape.size()));
      if (!viewFits(p, a))
        throw Error(fmt::format("kernel {}: {}", s.name,
                                viewMismatch(p, a, fmt::format("argument {}", i))));
      if (a.ptr % 16)
        throw Error(fmt::format("kernel {}: argument {} is not 16-byte aligned", s.name, i));
      int64_t count = 1;
      for (size_t d = 0; d < p.shape.size(); ++d) {
        if (p.shape[d] >= 0 && a.shape[d] != p.shape[d])
          throw Error(fmt::format("kernel {}: argument {} has extent {} in dimension {}, the kernel "
                                  "was compiled for {}", s.name, i, a.shape[d], d, p.shape[d]));
        if (a.shape[d] <= 0)
          throw Error(fmt::format("kernel {}: argument {} has empty dimension {}", s.name, i, d));
        count *= a.shape[d];
      }
      if (count > INT32_MAX)
        throw Error(fmt::format("kernel {}: argument {} has {} elements; generated code indexes with "
                                "32-bit ints", s.name, i, count));
      push(&a.ptr, sizeof(a.ptr));
      for (size_t d = 0; d < p.shape.size(); ++d)
        if (p.shape[d] < 0) {
          int extent = static_cast<int>(a.shape[d]);
          push(&extent, sizeof(extent));
        }
      if (p.peers) {
        if (a.peers.empty() || a.peers.size() > size_t(kMaxPeers))
          throw Error(fmt::format("kernel {}: argument {} is reached on other ranks (peer()); pass "
                                  "every rank's address of it (LaunchArg::symmetric, 1 to {} ranks)",
                                  s.name, i, kMaxPeers));
        std::array<uint64_t, kMaxPeers> table{};
        for (size_t r = 0; r < a.peers.size(); ++r) {
          if (a.peers[r] % 16)
            throw Error(fmt::format("kernel {}: argument {}'s copy on rank {} is not 16-byte aligned",
                                    s.name, i, r));
          table[r] = a.peers[r];
        }
        push(table.data(), sizeof(table));
      }
      continue;
    }
    if (a.kind == LaunchArg::Buffer)
      throw Error(fmt::format("kernel {}: argument {} must be a {} scalar", s.name, i, scalarName(p.type)));
    double f = a.kind == LaunchArg::Float ? a.f : static_cast<double>(a.i);
    int64_t n = a.kind == LaunchArg::Int ? a.i : static_cast<int64_t>(a.f);
    switch (p.type) {
    case ScalarType::Index: case ScalarType::I32: {
      if (n < INT32_MIN || n > INT32_MAX)
        throw Error(fmt::format("kernel {}: argument {} = {} does not fit 32 bits", s.name, i, n));
      // The compiler counts on it: a window offset built from symbols,
      // block indices and positive constants needs no check against 0.
      if (p.type == ScalarType::Index && n < 0)
        throw Error(fmt::format("kernel {}: argument {} = {} is an index symbol (Program::sym), "
                                "which is never negative; pass a signed value as a scalar of an "
                                "integer type",
                                s.name, i, n));
      int v = static_cast<int>(n);
      push(&v, 4);
      if (p.type == ScalarType::Index) symbols.push_back(n);
      break;
    }
    case ScalarType::I64: push(&n, 8); break;
    case ScalarType::I1: { bool v = n != 0; push(&v, 1); break; }
    case ScalarType::F32: { float v = static_cast<float>(f); push(&v, 4); break; }
    case ScalarType::F64: push(&f, 8); break;
    default:
      throw Error(fmt::format("kernel {}: {} scalar parameters are not supported (pass an f32 "
                              "or a one-element tensor)",
                              s.name, scalarName(p.type)));
    }
  }
}

void LoadedKernel::launch(const std::vector<LaunchArg> &args, CUstream stream,
                          const LaunchOptions &options) {
  const KernelSpec &s = kernelSpec;
  if ((options.maxBlocks || options.freeSms) && !s.persistent)
    throw Error(fmt::format("kernel {}: a block budget (LaunchOptions) sizes persistent() "
                            "kernels; this kernel's grid is its tiles",
                            s.name));
  if (options.maxBlocks < 0 || options.freeSms < 0)
    throw Error(fmt::format("kernel {}: LaunchOptions maxBlocks = {} and freeSms = {} must not be "
                            "negative",
                            s.name, options.maxBlocks, options.freeSms));
  if (args.size() != s.params.size())
    throw Error(fmt::format("kernel {} takes {} arguments, got {}", s.name, s.params.size(), args.size()));
  int device = argumentDevice(args, s.name);
  static thread_local LaunchScratch scratch;
  packArguments(args, scratch.storage, scratch.firstSlot, scratch.symbols);
  std::vector<void *> &params = scratch.params;
  params.clear();
  for (size_t first : scratch.firstSlot) params.push_back(&scratch.storage[first]);
  // Tensor maps go by value, after the parameters; each is encoded once per
  // (buffer, shape).
  scratch.maps.resize(s.tensorMaps.size());
  scratch.peerMaps.resize(s.tensorMaps.size());
  for (size_t m = 0; m < s.tensorMaps.size(); ++m) {
    const LaunchArg &a = args.at(s.tensorMaps[m].param);
    if (s.tensorMaps[m].peers) {
      if (!s.params.at(s.tensorMaps[m].param).peers)
        throw Error(fmt::format("kernel {}: tensor map {} is per rank but argument {} has no peer "
                                "table (a damaged kernel spec)",
                                s.name, m, s.tensorMaps[m].param));
      // One map per rank's copy (the peer table was checked above); a rank
      // past the table gets a zero map, which faults rather than reading
      // another rank's copy. Each is cached under its own key past the
      // kernel's maps, by that copy's address.
      std::array<CUtensorMap, kMaxPeers> &set = scratch.peerMaps[m];
      set = {};
      for (size_t r = 0; r < a.peers.size(); ++r) {
        int key = int(s.tensorMaps.size() + m * kMaxPeers + r);
        if (!mapCache.find(key, a.peers[r], a.shape, &set[r])) {
          encodeTensorMap(s, s.tensorMaps[m], args, &set[r], a.peers[r]);
          mapCache.insert(key, a.peers[r], a.shape, set[r]);
        }
      }
      params.push_back(set.data());
      continue;
    }
    if (!mapCache.find(int(m), a.ptr, a.shape, &scratch.maps[m])) {
      encodeTensorMap(s, s.tensorMaps[m], args, &scratch.maps[m]);
      mapCache.insert(int(m), a.ptr, a.shape, scratch.maps[m]);
    }
    params.push_back(&scratch.maps[m]);
  }
  std::array<unsigned, 3> grid = s.evaluateGrid(scratch.symbols);
  ScopedDevice onDevice(device);
  InContext &state = ensureLoaded();
  Driver &d = Driver::get();
  if (s.persistent) {
    // As many blocks as run at once (never more than there are tiles), in
    // whole clusters; the kernel walks the tiles.
    uint64_t tiles = uint64_t(grid[0]) * grid[1] * grid[2];
    // The launch's device (a negative ordinal: the thread's current one).
    int sms = d.multiprocessors(device >= 0 ? device : d.currentDevice());
    if (options.freeSms >= sms)
      throw Error(fmt::format("kernel {}: LaunchOptions leaves {} of the device's {} "
                              "multiprocessors free; at least one must run the kernel",
                              s.name, options.freeSms, sms));
    uint64_t resident =
        uint64_t(residentBlocksPerSm(device)) * uint64_t(std::max(sms - options.freeSms, 1));
    if (options.maxBlocks) resident = std::min<uint64_t>(resident, options.maxBlocks);
    uint64_t blocks = std::max<uint64_t>(1, std::min(tiles, resident));
    blocks = std::max<uint64_t>(s.cluster[0], blocks / s.cluster[0] * s.cluster[0]);
    grid = {unsigned(blocks), 1, 1};
  }
  if (s.cluster == std::array<unsigned, 3>{1, 1, 1}) {
    TESSEL_CU(d, cuLaunchKernel, state.function, grid[0], grid[1], grid[2], s.threads, 1, 1,
              static_cast<unsigned>(s.sharedBytes), stream, params.data(), nullptr);
    return;
  }
  for (int i = 0; i < 3; ++i)
    if (grid[i] % s.cluster[i])
      throw Error(fmt::format("kernel {}: the grid ({}, {}, {}) does not divide into clusters of "
                              "({}, {}, {}) blocks",
                              s.name, grid[0], grid[1], grid[2], s.cluster[0], s.cluster[1],
                              s.cluster[2]));
  CUlaunchAttribute cluster{};
  cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cluster.value.clusterDim.x = s.cluster[0];
  cluster.value.clusterDim.y = s.cluster[1];
  cluster.value.clusterDim.z = s.cluster[2];
  CUlaunchConfig config{};
  config.gridDimX = grid[0];
  config.gridDimY = grid[1];
  config.gridDimZ = grid[2];
  config.blockDimX = s.threads;
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = static_cast<unsigned>(s.sharedBytes);
  config.hStream = stream;
  config.attrs = &cluster;
  config.numAttrs = 1;
  TESSEL_CU(d, cuLaunchKernelEx, &config, state.function, params.data(), nullptr);
}

namespace {
CUtensorMapDataType tensorMapType(ScalarType t) {
  switch (t) {
  case ScalarType::F16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  case ScalarType::BF16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  case ScalarType::F32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  case ScalarType::F64: return CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
  case ScalarType::I32: case ScalarType::Index: return CU_TENSOR_MAP_DATA_TYPE_INT32;
  case ScalarType::I64: return CU_TENSOR_MAP_DATA_TYPE_INT64;
  default: return CU_TENSOR_MAP_DATA_TYPE_UINT8;
  }
}
} // namespace

bool tessel::rt::tensorMapFits(const KernelSpec &s, const TensorMapSpec &map,
                               const std::vector<LaunchArg> &args, std::string *why) {
  const LaunchArg &a = args.at(map.param);
  int bytes = scalarBytes(s.params.at(map.param).type);
  // TMA reads rows whose byte strides are multiples of 16 (and below 2^40).
  int64_t stride = bytes;
  for (size_t d = a.shape.size(); d-- > 1;) {
    stride *= a.shape[d];
    if (stride % 16 || stride >= (int64_t(1) << 40)) {
      if (why)
        *why = fmt::format("argument {} is read with TMA, whose row strides must be multiples of "
                           "16 bytes; dimension {} has a stride of {} bytes (extent {} of {})",
                           map.param, d - 1, stride, a.shape[d], scalarName(s.params[map.param].type));
      return false;
    }
  }
  return true;
}

void tessel::rt::encodeTensorMap(const KernelSpec &s, const TensorMapSpec &map,
                                 const std::vector<LaunchArg> &args, CUtensorMap *out,
                                 CUdeviceptr address) {
  std::string why;
  if (!tensorMapFits(s, map, args, &why)) throw Error(fmt::format("kernel {}: {}", s.name, why));
  const LaunchArg &a = args.at(map.param);
  ScalarType type = s.params.at(map.param).type;
  cuuint32_t rank = a.shape.size();
  // The driver takes dimensions innermost first.
  std::vector<cuuint64_t> dims, strides;
  std::vector<cuuint32_t> box, elementStrides(rank, 1);
  int64_t stride = scalarBytes(type);
  for (size_t d = rank; d-- > 0;) {
    dims.push_back(a.shape[d]);
    box.push_back(static_cast<cuuint32_t>(map.box[d]));
    stride *= a.shape[d];
    if (d > 0) strides.push_back(stride);
  }
  // A one-dimensional map has no strides; the array is still passed (a
  // null one is refused).
  if (strides.empty()) strides.push_back(stride);
  CUtensorMapSwizzle swizzle = map.swizzle == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                               : map.swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                               : map.swizzle == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                                   : CU_TENSOR_MAP_SWIZZLE_NONE;
  Driver &d = Driver::get();
  // Out-of-bounds elements of a box (partial tiles) are filled with zeros.
  TESSEL_CU(d, cuTensorMapEncodeTiled, out, tensorMapType(type), rank,
            reinterpret_cast<void *>(address ? address : a.ptr), dims.data(), strides.data(), box.data(),
            elementStrides.data(), CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

float LoadedKernel::time(const std::vector<LaunchArg> &args, int warmup, int reps) {
  return time(std::vector<std::vector<LaunchArg>>{args}, warmup, reps);
}

float LoadedKernel::time(const std::vector<std::vector<LaunchArg>> &argSets, int warmup, int reps) {
  return timeMedian([&](int run) { launch(argSets[run % argSets.size()]); }, warmup, reps);
}

float tessel::rt::timeMedian(const std::function<void(int)> &work, int warmup, int reps,
                             CUstream stream) {
  Driver &d = Driver::get();
  // TESSEL_TIME_BATCH=n times n runs back to back per sample (the median
  // then per run): the gaps between launches, which a single run between
  // two events includes, are hidden behind the previous run, as in a CUDA
  // graph or a busy stream. The default, 1, is how the references time.
  int batch = 1;
  if (const char *text = std::getenv("TESSEL_TIME_BATCH"); text && *text) {
    char *end = nullptr;
    long value = std::strtol(text, &end, 10);
    if (*end || value < 1 || value > 1000)
      throw Error(fmt::format("TESSEL_TIME_BATCH={}: expected a count from 1 to 1000", text));
    batch = int(value);
  }
  for (int i = 0; i < warmup; ++i) work(i);
  TESSEL_CU(d, cuCtxSynchronize);
  std::vector<float> times;
  CUevent start, stop;
  TESSEL_CU(d, cuEventCreate, &start, 0);
  TESSEL_CU(d, cuEventCreate, &stop, 0);
  for (int i = 0; i < reps; ++i) {
    TESSEL_CU(d, cuEventRecord, start, stream);
    for (int j = 0; j < batch; ++j) work(warmup + i * batch + j);
    TESSEL_CU(d, cuEventRecord, stop, stream);
    TESSEL_CU(d, cuEventSynchronize, stop);
    float ms = 0;
    TESSEL_CU(d, cuEventElapsedTime, &ms, start, stop);
    times.push_back(ms / float(batch));
  }
  d.api().cuEventDestroy(start);
  d.api().cuEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int LoadedKernel::residentBlocksPerSm(int device) {
  ScopedDevice onDevice(device);
  InContext &state = ensureLoaded();
  // Asked once per context: persistent launches need it every time.
  if (int known = state.residentPerSm.load(std::memory_order_relaxed)) return known;
  int perSm = 0;
  TESSEL_CU(Driver::get(), cuOccupancyMaxActiveBlocksPerMultiprocessor, &perSm, state.function,
            kernelSpec.threads, size_t(kernelSpec.sharedBytes));
  perSm = std::max(perSm, 1);
  state.residentPerSm.store(perSm, std::memory_order_relaxed);
  return perSm;
}

std::string LoadedKernel::resourceUsage() {
  CUfunction function = ensureLoaded().function;
  Driver &d = Driver::get();
  int regs = 0, staticSmem = 0, local = 0;
  TESSEL_CU(d, cuFuncGetAttribute, &regs, CU_FUNC_ATTRIBUTE_NUM_REGS, function);
  TESSEL_CU(d, cuFuncGetAttribute, &staticSmem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function);
  TESSEL_CU(d, cuFuncGetAttribute, &local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, function);
  return fmt::format("{} registers/thread, {} B dynamic + {} B static shared, {} B local",
                     regs, kernelSpec.sharedBytes, staticSmem, local);
}
