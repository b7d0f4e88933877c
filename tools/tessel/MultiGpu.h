//===- MultiGpu.h - the tool's multi-GPU commands ---------------*- C++ -*-===//
#ifndef TESSEL_TOOLS_MULTIGPU_H
#define TESSEL_TOOLS_MULTIGPU_H

#include "tessel/harness/Library.h"
#include "tessel/kernels/parallel/Ulysses.h"
#include "tessel/runtime/Communicator.h"

#include <functional>
#include <string>
#include <vector>

namespace tessel {
/// The tool's arguments after the program name, kept for ranks it starts.
void setCommandLine(int argc, char **argv);
const std::vector<std::string> &commandLine();
/// `tessel run|bench all2all [--ranks N]`: checks (run) or times (bench) the
/// Ulysses all-to-all, against NCCL's where NCCL can run.
int allToAllCommand(bool bench, const harness::Params &params, int ranks, int reps);
/// `tessel run|bench sp_attention [--ranks N]`: Ulysses sequence-parallel
/// attention forward, checked (run) against single-GPU attention over the
/// gathered tensors, or timed (bench) against it.
int spAttentionCommand(bool bench, const harness::Params &params, int ranks, int reps);
/// `tessel run|bench ag_gemm|gemm_rs [--ranks N]`: the tensor-parallel
/// layers, checked (run) against float64 and the nccl transport, or timed
/// (bench) against the GEMM and NCCL's collective alone and in turn.
int tensorParallelCommand(bool bench, bool allGather, const harness::Params &params, int ranks,
                          int reps);
/// `defaults` overridden by `given`; an unknown key is an error naming
/// `command`'s parameters.
harness::Params mergeParams(const harness::Params &given, const harness::Params &defaults,
                            const char *command);
/// `defaults` (a shape that runs on one rank) grown until it runs on
/// `ranks`: `heads_kv` to a multiple of `kvHeadsPerRank` heads on every rank
/// (`heads_q` in the same ratio to it) and `seqlen` to a multiple of
/// `rowsPerRank` rows on every rank; a value that already divides stays.
harness::Params scaledUlyssesDefaults(const harness::Params &defaults, int ranks,
                                      int64_t kvHeadsPerRank, int64_t rowsPerRank);
/// A packed batch's lengths, `key` a comma-separated list ("" for none),
/// as int32 prefix sums starting at 0; empty when the list is.
std::vector<int32_t> prefixSumsParam(const harness::Params &p, const char *key);
/// A Ulysses shape's packed batch from `seqlens` and `seqlens_k` (the
/// same lengths when empty), when `seqlens` is given: batch becomes 1.
void setPackedBatch(kernels::UlyssesShape &s, const harness::Params &p);
/// "batch=2 seqlen=8192 heads_q=..." or the packed batch's sequences.
std::string shapeText(const kernels::UlyssesShape &s);
/// Parameter `local` (copy or kernel): who moves a rank's own shard.
kernels::UlyssesExchange::LocalShard localShardParam(const harness::Params &p);
/// The largest of every local rank's `mine` (collective).
double slowestRank(rt::Communicator &comm, double mine);
/// The smallest (collective).
double fastestRank(rt::Communicator &comm, double mine);
/// A multi-GPU command: as a rank (RANK set), `rank()`; otherwise
/// `validate(ranks)` first, then one rank per GPU (or `ranks`) started as
/// copies of this program. Without a GPU it says so (exit 1 for bench).
int asRanks(const char *command, bool bench, int ranks, const std::function<void(int)> &validate,
            const std::function<int()> &rank);
/// Runs this program again as `ranks` local ranks with the same arguments.
int relaunchAsRanks(int ranks);
/// `tessel launch -n N -- PROGRAM ARGS...`
int launchCommand(int ranks, const std::vector<std::string> &program);
} // namespace tessel

#endif
