//===- SequenceParallelAttention.cpp - Ulysses attention forms -----------===//
//
// The Ulysses forms of sequence-parallel attention: each head group's
// forward launch over the exchange's outputs, and the pipeline that queues
// them between the exchange and its way back.
//
//===----------------------------------------------------------------------===//
#include "tessel/kernels/parallel/SequenceParallelAttention.h"
#include "tessel/kernels/parallel/UlyssesPieces.h"
#include "tessel/dsl/Compile.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Error.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::rt;

ZigZagShape tessel::kernels::zigzagShape(const SequenceParallelProblem &p) {
  const UlyssesShape &s = p.shape;
  return {s.batch, s.seqlen, s.headsQ, s.headsKV, s.headDim, s.elementBytes, s.ranks};
}

DeviceSeqlens::DeviceSeqlens(const UlyssesShape &s) {
  if (!s.packed()) return;
  q = std::make_unique<DeviceBuffer>(s.cuSeqlensQ.size() * 4);
  k = std::make_unique<DeviceBuffer>(s.cuSeqlensK.size() * 4);
  q->upload(s.cuSeqlensQ.data(), s.cuSeqlensQ.size() * 4);
  k->upload(s.cuSeqlensK.data(), s.cuSeqlensK.size() * 4);
}

AttentionForwardArgs tessel::kernels::wholeSequenceArgs(const SequenceParallelProblem &p,
                                                        const DeviceSeqlens &cu, int64_t headsQ,
                                                        int64_t headsKV, CUdeviceptr q,
                                                        CUdeviceptr k, CUdeviceptr v,
                                                        CUdeviceptr o, CUdeviceptr lse) {
  const UlyssesShape &s = p.shape;
  // A packed batch is one entry of all its rows.
  AttentionForwardArgs args = AttentionForwardArgs::dense(
      s.batch, s.totalRows(0) / s.batch, s.totalRows(1) / s.batch, headsQ, headsKV, s.headDim,
      p.scale, q, k, v, o, lse);
  if (!s.packed()) return args;
  int64_t entries = s.cuSeqlensQ.size(), longest = 0;
  for (const UlyssesShape::Sequence &seq : s.sequences(0)) longest = std::max(longest, seq.length);
  args.packed = AttentionForwardArgs::Packed{entries, longest,
                                             LaunchArg::buffer(cu.q->ptr(), {entries}),
                                             LaunchArg::buffer(cu.k->ptr(), {entries})};
  return args;
}

void tessel::kernels::forEachShardRun(const UlyssesShape &s, int tensor, int rank,
                                      const std::function<void(int64_t, int64_t, int64_t)> &copy) {
  for (const UlyssesShape::Sequence &q : s.sequences(tensor)) {
    int64_t shard = q.length / s.ranks;
    copy(q.start / s.ranks, q.start + rank * shard, shard);
  }
}

UlyssesAttentionForm::UlyssesAttentionForm(std::string name, Communicator &comm,
                                           const SequenceParallelProblem &p,
                                           const DeviceSeqlens &cu, std::vector<int64_t> groupHeads,
                                           UlyssesExchange::Arrival a, Kernel &k,
                                           CUdeviceptr lseHeads)
    : formName(std::move(name)), rank(comm.localRank()),
      x(std::make_unique<UlyssesExchange>(comm, p.shape, std::move(groupHeads), p.localShard)),
      arrival(a), kernel(&k), attentionStreams(p.attentionStreams) {
  const UlyssesShape &s = p.shape;
  // Each group attends over its own heads of the whole sequences, with an
  // LSE [heads of the group, rows] of its own: a tensor argument starts on
  // 16 bytes, which a group's rows of one shared buffer need not (packed
  // rows that are not a multiple of 4; headGroupOffset aligns them).
  HeadGroups groups;
  for (int g = 0; g < x->groupCount(); ++g) groups.push_back(x->groupHeads(0, g));
  for (int g = 0; g < x->groupCount(); ++g) {
    CUdeviceptr groupLse = lseHeads + headGroupOffset(s, UlyssesTensor::logSumExp, groups, g);
    if (!lseHeads) {
      lse.push_back(std::make_unique<DeviceBuffer>(x->groupHeads(0, g) * s.totalRows(0) * 4));
      groupLse = lse.back()->ptr();
    }
    groupArgs.push_back(wholeSequenceArgs(p, cu, x->groupHeads(0, g), x->groupHeads(1, g),
                                          x->output(0, g), x->output(1, g), x->output(2, g),
                                          x->attentionOutput(g), groupLse));
    groupLists.push_back(groupArgs.back().list());
  }
}

UlyssesAttentionForm::~UlyssesAttentionForm() = default;

void UlyssesAttentionForm::upload(const WholeInputs &whole) {
  const UlyssesShape &s = x->exchangeShape();
  Driver &d = Driver::get();
  for (int t = 0; t < 3; ++t) {
    int64_t row = s.heads(t) * s.headDim * s.elementBytes;
    forEachShardRun(s, t, rank, [&](int64_t local, int64_t global, int64_t rows) {
      TESSEL_CU(d, cuMemcpyHtoD, x->input(t) + local * row, whole[t].data() + global * row,
                rows * row);
    });
  }
  // Landed before a kernel on a non-blocking stream reads it (a pageable
  // copy may return early, on the legacy stream).
  TESSEL_CU(d, cuStreamSynchronize, nullptr);
}

void UlyssesAttentionForm::run(CUstream stream) {
  x->pipeline(
      stream,
      [&](int g, CUstream st) {
        if (arrival == UlyssesExchange::Arrival::stream) return kernel->launch(groupLists[g], st);
        // The kernel waits for each source rank's shard of group g: one
        // shard per source, flagged with this call's epoch.
        const UlyssesShape &s = x->exchangeShape();
        AttentionForwardArgs withArrivals = groupArgs[g];
        withArrivals.streamed = AttentionForwardArgs::Streamed{
            s.localSeq(), s.ranks, 1, static_cast<int32_t>(x->currentEpoch()),
            LaunchArg::buffer(x->arrivalFlags(g), {s.ranks})};
        kernel->launch(withArrivals.list(), st);
      },
      arrival, attentionStreams);
}

void UlyssesAttentionForm::attentionAlone(CUstream stream) {
  for (const std::vector<LaunchArg> &a : groupLists) kernel->launch(a, stream);
}

UlyssesAttention::UlyssesAttention(Communicator &comm, const SequenceParallelProblem &p)
    : cu(p.shape) {
  const UlyssesShape &s = p.shape;
  std::string arch = nativeArch(Driver::get().computeCapability());
  Program program = flashAttentionForward(p.config);
  plain = std::make_unique<Kernel>(compile(program, {arch}));
  using Arrival = UlyssesExchange::Arrival;
  all.push_back(std::make_unique<UlyssesAttentionForm>(
      "unfused", comm, p, cu, std::vector<int64_t>{s.headsPerRank(0)}, Arrival::stream, *plain));
  all.push_back(std::make_unique<UlyssesAttentionForm>("pipelined", comm, p, cu, p.groupHeads,
                                                       Arrival::stream, *plain));
  // The fused kernel waits per shard of rows, so its shards must be whole
  // query and key tiles, and a packed batch's sequences do not line up
  // with the shards.
  AttentionConfig config = p.config;
  config.streamedShards = true;
  int64_t blockN = forwardKeyBlock(config);
  if (s.packed()) whyNoFused = "a packed batch";
  else if (s.localSeq() % config.blockM || s.localSeq() % blockN)
    whyNoFused = fmt::format("{}-row shards, not whole tiles of {} and {} rows", s.localSeq(),
                             config.blockM, blockN);
  if (whyNoFused.empty()) {
    Program streamedProgram = flashAttentionForward(config);
    streamed = std::make_unique<Kernel>(compile(streamedProgram, {arch}));
    all.push_back(std::make_unique<UlyssesAttentionForm>("fused", comm, p, cu, p.groupHeads,
                                                         Arrival::kernel, *streamed));
  }
  // Loaded now: a module load waits for running kernels, which may spin on
  // flags that this rank's streams have yet to write.
  plain->loadedKernel().resourceUsage();
  if (streamed) streamed->loadedKernel().resourceUsage();
}

UlyssesAttention::~UlyssesAttention() = default;

void UlyssesAttention::upload(const WholeInputs &whole) {
  for (auto &f : all) f->upload(whole);
}
