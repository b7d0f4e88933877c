//===- SpAttentionProblem.h - what sp_attention's calls share ----*- C++ -*-===//
//
// The checks the sequence-parallel calls make on each rank's views, the
// agreement of every rank on one problem before anything moves, and each
// communicator's plans (forms whose exchanges hold symmetric memory), made
// once per problem and freed by sp_attention::release.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_PARALLEL_SPATTENTIONPROBLEM_H
#define TESSEL_KERNELS_PARALLEL_SPATTENTIONPROBLEM_H

#include "tessel/Tessel.h"
#include "tessel/kernels/parallel/PieceExchange.h"
#include "tessel/kernels/parallel/PlanCache.h"
#include "tessel/kernels/parallel/SequenceParallelAttention.h"

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace tessel::kernels {

/// One communicator's plans, under a lock of their own: making a plan is
/// collective, so one lock held across communicators could deadlock two
/// processes whose threads reach them in different orders.
struct CommunicatorPlans {
  std::mutex mutex;
  PlanCache plans{kPlansKept};
};
CommunicatorPlans &plansOf(const rt::Communicator &comm);
/// Waits for everything on `comm`'s device: a plan's exchanges (copies into
/// and out of peers' memory, handshake kernels) may still run on the
/// caller's streams when it is freed, and freeing unmaps their memory.
void quiesce(const rt::Communicator &comm);
/// `comm`'s plan for `key`, made by `make` (collective: every rank makes
/// it at the same call) the first time, under the communicator's lock;
/// the least recently used past kPlansKept are freed first, once the
/// device is done with them.
template <class Plan, class Make>
Plan &planOf(const rt::Communicator &comm, const std::string &key, Make &&make) {
  CommunicatorPlans &plans = plansOf(comm);
  std::lock_guard<std::mutex> lock(plans.mutex);
  return static_cast<Plan &>(plans.plans.get(
      key, [&]() -> std::unique_ptr<SpPlan> { return make(); }, [&] { quiesce(comm); }));
}
/// Frees `comm`'s plans, in the same order on every rank (collective).
void releasePlans(const rt::Communicator &comm);

/// The whole problem this rank's q, k, v and out make on `comm`'s ranks;
/// throws tessel::Error naming the value that cannot run.
SequenceParallelProblem spProblemOf(rt::Communicator &comm, const TensorView &q,
                                    const TensorView &k, const TensorView &v,
                                    const TensorView &out, const sp_attention::Options &o,
                                    const std::string &arch);
/// What every rank must agree on.
std::string describeSpProblem(const SequenceParallelProblem &p, bool zigzag,
                              const std::string &arch);
/// Throws unless `lse` is f32 [batch, heads_q, rows of an entry / N] for
/// the problem (the rank's shard of the log-sum-exp); `what` names it.
void requireShardLse(const TensorView &lse, const char *what, const UlyssesShape &s);

/// `bytes` from `from` to `to` on `stream` (the calls' copies of shards in
/// and out of their exchanges).
void copyDevice(CUdeviceptr to, CUdeviceptr from, int64_t bytes, CUstream stream);

/// Runs `check` on this rank (it returns the description of the problem,
/// or throws), then learns every rank's answer: a rank's failure, or ranks
/// that describe different problems, are an error on all of them, naming
/// `call`, the rank and the value.
std::string agreeOnProblem(rt::Communicator &comm, const char *call,
                           const std::function<std::string()> &check);

/// The transport `o` asks for, checked; `why` says what decided it.
Transport spTransport(rt::Communicator &comm, const sp_attention::Options &o, std::string &why);

/// One rank's views of a backward call (sp_attention::backward's).
struct ZigZagGradientViews {
  const TensorView &q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv;
};
/// sp_attention::backward with placement zigzag (ZigZagBackward.cpp), once
/// the ranks agree on `problem` (`description`).
Choice zigzagBackward(rt::Communicator &comm, SequenceParallelProblem problem,
                      const std::string &description, const std::string &arch,
                      const ZigZagGradientViews &views, CUstream stream);

} // namespace tessel::kernels

#endif
