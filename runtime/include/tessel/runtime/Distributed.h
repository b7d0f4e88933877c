//===- Distributed.h - ranks, their launch and the node bootstrap -*- C++ -*-===//
//
// One process per GPU, as torchrun starts them: each process learns its rank
// from the environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE). The
// ranks of one node meet over a Unix-domain socket (abstract, so nothing is
// left in the file system and the launcher's TCP port is never touched) to
// exchange small records and file descriptors (SCM_RIGHTS): the NCCL unique
// id and the handles of symmetric memory travel this way.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_RUNTIME_DISTRIBUTED_H
#define TESSEL_RUNTIME_DISTRIBUTED_H

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tessel::rt {

/// Where this process stands among the ranks of a job.
struct RankInfo {
  int rank = 0, worldSize = 1;
  int localRank = 0, localWorldSize = 1;
  /// Names the job's bootstrap socket: TESSEL_JOB_ID, else TORCHELASTIC_RUN_ID
  /// with MASTER_PORT, else MASTER_ADDR:MASTER_PORT.
  std::string jobId;
  bool singleNode() const { return worldSize == localWorldSize; }
};

/// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (and the job id) from
/// `getenv`, strictly: a missing or malformed variable, or values that do not
/// fit together, is a tessel::Error naming it. Without RANK at all, a
/// single-rank job.
RankInfo rankInfoFromEnvironment(
    const std::function<const char *(const char *)> &getenv = ::getenv);

/// The ranks of one node, connected through local rank 0. Every call is
/// collective: each local rank makes the same calls in the same order. A
/// peer that exits or stays silent past the timeout is an error naming it,
/// never a hang.
class NodeChannel {
public:
  /// Local rank 0 listens on `@tessel-<jobId>`; the others connect, retrying
  /// until `timeoutSeconds` ($TESSEL_BOOTSTRAP_TIMEOUT, default 120).
  explicit NodeChannel(const RankInfo &info, double timeoutSeconds = -1);
  ~NodeChannel();
  NodeChannel(const NodeChannel &) = delete;
  NodeChannel &operator=(const NodeChannel &) = delete;

  int localRank() const { return rank; }
  int size() const { return ranks; }
  /// Every local rank's `bytes`, indexed by local rank.
  std::vector<std::string> allGather(const std::string &bytes);
  /// Every local rank's descriptor, indexed by local rank: new descriptors
  /// the caller owns (its own slot too, a duplicate).
  std::vector<int> allGatherFds(int fd);
  void barrier() { allGather(""); }

private:
  int rank = 0, ranks = 1;
  double timeout = 120;
  std::string name;
  int listener = -1;
  /// Local rank 0: a connection per other rank (index = rank). Others: [0]
  /// is the connection to rank 0.
  std::vector<int> peers;
};

/// Starts `ranks` copies of `argv` on this node with the torchrun variables
/// set (and a fresh TESSEL_JOB_ID), waits for all of them, and returns 0 if
/// every one exited 0, else the first failure's exit code (128 + signal for a
/// signal). When one fails, the others are stopped rather than left waiting
/// for it.
int launchLocalRanks(int ranks, const std::vector<std::string> &argv);

/// The same with `body` run in each forked rank in place of a program (its
/// return value is the rank's exit code): for tests.
int runLocalRanks(int ranks, const std::function<int(const RankInfo &)> &body);

} // namespace tessel::rt

#endif
