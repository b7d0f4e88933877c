//===- Communicator.h - ranks, NCCL and symmetric memory ---------*- C++ -*-===//
//
// A Communicator is this process's place in a multi-GPU job: its rank, its
// device (LOCAL_RANK, modulo the devices there are), the node channel, a
// communication stream, and an NCCL communicator created on first use.
// SymmetricBuffer is the same allocation on every rank of a node, mapped on
// every rank, so a kernel or the copy engine can read and write a peer's
// copy by address.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_RUNTIME_COMMUNICATOR_H
#define TESSEL_RUNTIME_COMMUNICATOR_H

#include "tessel/runtime/Distributed.h"
#include "tessel/runtime/Nccl.h"

#include <cuda.h>
#include <memory>
#include <vector>

namespace tessel::rt {

class Communicator {
public:
  /// Joins the job the environment describes (see rankInfoFromEnvironment)
  /// and makes this rank's device the process default.
  explicit Communicator(const RankInfo &info);
  static std::unique_ptr<Communicator> fromEnvironment();
  ~Communicator();
  Communicator(const Communicator &) = delete;
  Communicator &operator=(const Communicator &) = delete;

  int rank() const { return info.rank; }
  int size() const { return info.worldSize; }
  int localRank() const { return info.localRank; }
  int localSize() const { return info.localWorldSize; }
  int device() const { return ordinal; }
  /// Every local rank's device ordinal.
  const std::vector<int> &localDevices() const { return devices; }
  NodeChannel &node() { return *channel; }
  /// A stream of this rank's device for transfers, of the highest priority
  /// the device schedules (its blocks start ahead of queued blocks of
  /// default-priority streams).
  CUstream stream() const { return commStream; }
  /// The NCCL communicator over all ranks, created on first use: one NCCL id
  /// from rank 0 through the node channel on a single node; beyond one node
  /// NCCL_COMM_ID must name rank 0's host and port.
  ncclComm_t nccl();
  /// Host barrier over the node's ranks.
  void barrier() { channel->barrier(); }

private:
  RankInfo info;
  int ordinal = 0;
  std::vector<int> devices;
  std::unique_ptr<NodeChannel> channel;
  CUstream commStream = nullptr;
  ncclComm_t comm = nullptr;
};

/// `bytes` of zero-filled device memory on every local rank, each rank's copy mapped
/// into every rank's address space (CUDA VMM, handles passed as file
/// descriptors). Constructing and destroying one are collective over the
/// node. Ranks whose devices cannot reach each other are an error before
/// anything is mapped.
class SymmetricBuffer {
public:
  SymmetricBuffer(Communicator &comm, size_t bytes);
  ~SymmetricBuffer();
  SymmetricBuffer(const SymmetricBuffer &) = delete;
  SymmetricBuffer &operator=(const SymmetricBuffer &) = delete;

  size_t bytes() const { return size; }
  /// This rank's copy.
  CUdeviceptr local() const { return mapped[me]; }
  /// Local rank `r`'s copy, as mapped here.
  CUdeviceptr peer(int r) const;

private:
  Communicator &comm;
  int me = 0;
  size_t size = 0, reserved = 0;
  std::vector<CUmemGenericAllocationHandle> handles;
  std::vector<CUdeviceptr> mapped;
};

} // namespace tessel::rt

#endif
