//===- Communicator.cpp - ranks, NCCL and symmetric memory ----------------===//
#include "tessel/runtime/Communicator.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Error.h"

#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <unistd.h>

using namespace tessel;
using namespace tessel::rt;

Communicator::Communicator(const RankInfo &rankInfo) : info(rankInfo) {
  Driver &d = Driver::get();
  // One GPU per local rank; with fewer GPUs than ranks, ranks share them
  // (virtual ranks: the same code on one GPU, for tests).
  ordinal = info.localRank % d.deviceCount();
  d.setDefaultDevice(ordinal);
  d.setDevice(ordinal);
  channel = std::make_unique<NodeChannel>(info);
  std::vector<std::string> all = channel->allGather(std::to_string(ordinal));
  for (const std::string &s : all) devices.push_back(std::stoi(s));
  // The highest priority the device has: a transfer queued beside a long
  // kernel (a GEMM waiting on its flags) gets multiprocessors as blocks
  // free up, ahead of that kernel's later blocks.
  int lowest = 0, highest = 0;
  TESSEL_CU(d, cuCtxGetStreamPriorityRange, &lowest, &highest);
  TESSEL_CU(d, cuStreamCreateWithPriority, &commStream, CU_STREAM_NON_BLOCKING, highest);
}

std::unique_ptr<Communicator> Communicator::fromEnvironment() {
  return std::make_unique<Communicator>(rankInfoFromEnvironment());
}

Communicator::~Communicator() {
  try {
    Driver &d = Driver::get();
    if (comm) Nccl::get().api().ncclCommDestroy(comm);
    if (commStream) d.api().cuStreamDestroy(commStream);
  } catch (const Error &) {
  }
}

ncclComm_t Communicator::nccl() {
  if (comm) return comm;
  Nccl &n = Nccl::get();
  ncclUniqueId id;
  if (info.singleNode()) {
    if (info.rank == 0) TESSEL_NCCL(n, ncclGetUniqueId, &id);
    std::string mine(reinterpret_cast<const char *>(&id), info.rank == 0 ? sizeof(id) : 0);
    std::vector<std::string> all = channel->allGather(mine);
    std::memcpy(&id, all[0].data(), sizeof(id));
  } else {
    // NCCL derives the same id on every rank from NCCL_COMM_ID.
    if (!std::getenv("NCCL_COMM_ID"))
      throw Error("a job over several nodes needs NCCL_COMM_ID=host:port of rank 0 (NCCL's own "
                  "bootstrap); the node channel reaches one node only");
    TESSEL_NCCL(n, ncclGetUniqueId, &id);
  }
  Driver::get().setDevice(ordinal);
  TESSEL_NCCL(n, ncclCommInitRank, &comm, info.worldSize, id, info.rank);
  return comm;
}

//===----------------------------------------------------------------------===//
// SymmetricBuffer
//===----------------------------------------------------------------------===//

SymmetricBuffer::SymmetricBuffer(Communicator &c, size_t bytes) : comm(c), me(c.localRank()) {
  Driver &d = Driver::get();
  d.setDevice(c.device());
  int ranks = c.localSize();
  // Every rank must ask for the same size, and reach every other's device.
  std::vector<std::string> sizes = c.node().allGather(std::to_string(bytes));
  for (int r = 0; r < ranks; ++r)
    if (sizes[r] != sizes[me])
      throw Error(fmt::format("symmetric allocation: local rank {} asked for {} bytes, local rank "
                              "{} for {}",
                              me, bytes, r, sizes[r]));
  for (int r = 0; r < ranks; ++r) {
    int other = c.localDevices()[r], can = 1;
    if (other != c.device())
      TESSEL_CU(d, cuDeviceCanAccessPeer, &can, c.device(), other);
    if (!can)
      throw Error(fmt::format("symmetric allocation: device {} (local rank {}) cannot reach device "
                              "{} (local rank {}) by peer access; the GPUs need NVLink or PCIe P2P",
                              c.device(), me, other, r));
  }

  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = c.device();
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  TESSEL_CU(d, cuMemGetAllocationGranularity, &granularity, &prop,
            CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  size = bytes;
  reserved = std::max<size_t>(1, (bytes + granularity - 1) / granularity) * granularity;

  handles.assign(ranks, 0);
  mapped.assign(ranks, 0);
  TESSEL_CU(d, cuMemCreate, &handles[me], reserved, &prop, 0);
  int fd = -1;
  TESSEL_CU(d, cuMemExportToShareableHandle, &fd, handles[me],
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  std::vector<int> fds = c.node().allGatherFds(fd);
  ::close(fd);
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = c.device();
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (int r = 0; r < ranks; ++r) {
    if (r != me)
      TESSEL_CU(d, cuMemImportFromShareableHandle, &handles[r],
                reinterpret_cast<void *>(static_cast<uintptr_t>(fds[r])),
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    ::close(fds[r]);
    TESSEL_CU(d, cuMemAddressReserve, &mapped[r], reserved, granularity, 0, 0);
    TESSEL_CU(d, cuMemMap, mapped[r], reserved, 0, handles[r], 0);
    TESSEL_CU(d, cuMemSetAccess, mapped[r], reserved, &access, 1);
  }
  // Zero-filled; nobody writes into a peer before every peer has mapped it.
  TESSEL_CU(d, cuMemsetD8, mapped[me], 0, reserved);
  TESSEL_CU(d, cuCtxSynchronize);
  c.barrier();
}

SymmetricBuffer::~SymmetricBuffer() {
  try {
    // Nobody is still reading or writing a copy this rank unmaps.
    comm.barrier();
    Driver &d = Driver::get();
    d.setDevice(comm.device());
    for (size_t r = 0; r < mapped.size(); ++r) {
      if (mapped[r]) {
        d.api().cuMemUnmap(mapped[r], reserved);
        d.api().cuMemAddressFree(mapped[r], reserved);
      }
      if (handles[r]) d.api().cuMemRelease(handles[r]);
    }
  } catch (const Error &) {
  }
}

CUdeviceptr SymmetricBuffer::peer(int r) const {
  if (r < 0 || r >= static_cast<int>(mapped.size()))
    throw Error(fmt::format("symmetric buffer: no local rank {} (there are {})", r, mapped.size()));
  return mapped[r];
}
