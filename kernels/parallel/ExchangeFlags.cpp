//===- ExchangeFlags.cpp - the epoch flag protocol of an exchange ---------===//
#include "tessel/kernels/parallel/ExchangeFlags.h"

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::rt;

static StreamFlagOps streamOps(Communicator &comm, SymmetricBuffer &flags, CUstream stream) {
  return {stream, [&flags](int owner, int slot) { return flags.peer(owner) + 4 * slot; },
          comm.localRank()};
}

uint32_t tessel::kernels::startExchangeCall(Communicator &comm, SymmetricBuffer &flags,
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
  StreamFlagOps ops = streamOps(comm, flags, stream);
  announceAndAwait(ops, comm.size(), comm.localRank(), /*base=*/0, next.epoch);
  return next.epoch;
}

void tessel::kernels::finishExchangeCall(Communicator &comm, SymmetricBuffer &flags,
                                         uint32_t epoch, CUstream stream) {
  StreamFlagOps ops = streamOps(comm, flags, stream);
  announceAndAwait(ops, comm.size(), comm.localRank(), /*base=*/comm.size(), epoch);
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

CopyLanes::CopyLanes(int count, int marksPer) : marksPerLane(marksPer) {
  Driver &d = Driver::get();
  TESSEL_CU(d, cuEventCreate, &forkEvent, CU_EVENT_DISABLE_TIMING);
  lanes.resize(count);
  joinEvents.resize(count);
  marks.resize(count * marksPer);
  for (CUstream &l : lanes) TESSEL_CU(d, cuStreamCreate, &l, CU_STREAM_NON_BLOCKING);
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
