//===- ExchangeFlags.cpp - the epoch flag protocol of an exchange ---------===//
#include "tessel/kernels/parallel/ExchangeFlags.h"
#include "tessel/dsl/Compile.h"
#include "tessel/kernels/Settings.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::rt;

int64_t tessel::kernels::exchangeTimeoutMs() {
  const char *env = std::getenv("TESSEL_EXCHANGE_TIMEOUT_S");
  if (!env || !*env) return 600 * 1000;
  return parseInteger(env, 1, 3600, "TESSEL_EXCHANGE_TIMEOUT_S (seconds)") * 1000;
}

Program tessel::kernels::exchangeHandshake(int64_t timeoutMs) {
  Program p("exchange_handshake");
  Expr slots = p.sym("slots"), ranks = p.sym("ranks"), me = p.sym("me"), base = p.sym("base"),
       epoch = p.sym("epoch");
  Tensor flags = p.tensor("flags", {slots}, DType::i32);
  // Block r announces to rank r and waits for rank r's announcement: the
  // protocol of announceAndAwait, every peer's store and wait at once.
  p.kernel({ranks}, 32, [&](Expr r) {
    signal(peer(flags, r), {base + me}, epoch);
    wait(flags, {base + r}, epoch, timeoutMs);
  });
  return p;
}

namespace {
/// This process's handshake kernel on `device`, compiled and loaded once
/// (never unloaded: exchanges live until exit, past the driver's own end).
Kernel &handshakeKernel(int device) {
  static std::mutex mutex;
  static auto &kernels = *new std::map<int, std::unique_ptr<Kernel>>;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Kernel> &kernel = kernels[device];
  if (!kernel) {
    Driver &d = Driver::get();
    d.setDevice(device);
    Program program = exchangeHandshake();
    kernel = std::make_unique<Kernel>(compile(program, {nativeArch(d.computeCapability())}));
    kernel->loadedKernel().resourceUsage();
  }
  return *kernel;
}

/// The handshake of `epoch` in slots [base, base + N) of every rank's flags,
/// over the N ranks of the node (those that share symmetric memory).
void handshake(Communicator &comm, SymmetricBuffer &flags, int base, uint32_t epoch,
               CUstream stream) {
  int n = comm.localSize();
  std::vector<CUdeviceptr> peers;
  for (int r = 0; r < n; ++r) peers.push_back(flags.peer(r));
  int64_t slots = int64_t(flags.bytes() / sizeof(uint32_t));
  std::vector<LaunchArg> args;
  for (int64_t v : {slots, int64_t(n), int64_t(comm.localRank()), int64_t(base), int64_t(epoch)})
    args.push_back(LaunchArg::integer(v));
  args.push_back(LaunchArg::symmetric(flags.local(), peers, {slots}));
  handshakeKernel(comm.device()).launch(args, stream);
}
} // namespace

std::unique_ptr<SymmetricBuffer> tessel::kernels::exchangeFlags(Communicator &comm, size_t bytes) {
  // Loaded before the allocation, which every rank makes together: no rank
  // loads a module (which waits for running kernels) while another's
  // handshake spins.
  handshakeKernel(comm.device());
  return std::make_unique<SymmetricBuffer>(comm, bytes);
}

NextEpoch tessel::kernels::advanceEpoch(Communicator &comm, SymmetricBuffer &flags,
                                        uint32_t lastEpoch, CUstream stream) {
  Driver &d = Driver::get();
  d.setDevice(comm.device());
  NextEpoch next = nextEpoch(lastEpoch);
  if (next.reset) {
    // Every rank reaches this call: with all work done everywhere, the
    // flags start over.
    TESSEL_CU(d, cuStreamSynchronize, stream);
    comm.barrier();
    TESSEL_CU(d, cuMemsetD8Async, flags.local(), 0, flags.bytes(), stream);
    TESSEL_CU(d, cuStreamSynchronize, stream);
    comm.barrier();
  }
  return next;
}

uint32_t tessel::kernels::startExchangeCall(Communicator &comm, SymmetricBuffer &flags,
                                            uint32_t lastEpoch, CUstream stream) {
  uint32_t epoch = advanceEpoch(comm, flags, lastEpoch, stream).epoch;
  handshake(comm, flags, /*base=*/0, epoch, stream);
  return epoch;
}

void tessel::kernels::finishExchangeCall(Communicator &comm, SymmetricBuffer &flags,
                                         uint32_t epoch, CUstream stream) {
  handshake(comm, flags, /*base=*/comm.localSize(), epoch, stream);
}

void tessel::kernels::copyPitched(CUdeviceptr src, int64_t srcPitch, CUdeviceptr dst,
                                  int64_t dstPitch, int64_t width, int64_t rows, CUstream stream) {
  if (width == 0 || rows == 0) return;
  Driver &d = Driver::get();
  CUDA_MEMCPY2D copy{};
  copy.srcMemoryType = copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = src;
  copy.srcPitch = srcPitch;
  copy.dstDevice = dst;
  copy.dstPitch = dstPitch;
  copy.WidthInBytes = width;
  copy.Height = rows;
  TESSEL_CU(d, cuMemcpy2DAsync, &copy, stream);
}

CopyLanes::CopyLanes(int count, int marksPer, bool urgent) : marksPerLane(marksPer) {
  Driver &d = Driver::get();
  int lowest = 0, highest = 0;
  if (urgent) TESSEL_CU(d, cuCtxGetStreamPriorityRange, &lowest, &highest);
  TESSEL_CU(d, cuEventCreate, &forkEvent, CU_EVENT_DISABLE_TIMING);
  lanes.resize(count);
  joinEvents.resize(count);
  marks.resize(count * marksPer);
  for (CUstream &l : lanes)
    TESSEL_CU(d, cuStreamCreateWithPriority, &l, CU_STREAM_NON_BLOCKING, urgent ? highest : 0);
  for (CUevent &e : joinEvents) TESSEL_CU(d, cuEventCreate, &e, CU_EVENT_DISABLE_TIMING);
  for (CUevent &e : marks) TESSEL_CU(d, cuEventCreate, &e, CU_EVENT_DISABLE_TIMING);
}

CopyLanes::~CopyLanes() {
  Driver &d = Driver::get();
  for (CUstream l : lanes) d.api().cuStreamDestroy(l);
  for (CUevent e : joinEvents) d.api().cuEventDestroy(e);
  for (CUevent e : marks) d.api().cuEventDestroy(e);
  if (forkEvent) d.api().cuEventDestroy(forkEvent);
}

void CopyLanes::fork(CUstream stream) {
  Driver &d = Driver::get();
  TESSEL_CU(d, cuEventRecord, forkEvent, stream);
  for (CUstream l : lanes) TESSEL_CU(d, cuStreamWaitEvent, l, forkEvent, 0);
}

void CopyLanes::join(CUstream stream) {
  Driver &d = Driver::get();
  for (size_t i = 0; i < lanes.size(); ++i) {
    TESSEL_CU(d, cuEventRecord, joinEvents[i], lanes[i]);
    TESSEL_CU(d, cuStreamWaitEvent, stream, joinEvents[i], 0);
  }
}

void CopyLanes::mark(int lane, int mark) {
  Driver &d = Driver::get();
  TESSEL_CU(d, cuEventRecord, marks[lane * marksPerLane + mark], lanes[lane]);
}

void CopyLanes::waitForMark(CUstream stream, int lane, int mark) {
  Driver &d = Driver::get();
  TESSEL_CU(d, cuStreamWaitEvent, stream, marks[lane * marksPerLane + mark], 0);
}
