//===- ZigZagAttention.cpp - zig-zag chunked-query attention forms --------===//
//
// Rank r keeps its queries (chunks r and 2N-1-r of the sequence, all
// heads), gathers K and V of the whole sequence by the copy engines, and
// runs causal attention per chunk with the queries placed at their key
// positions: unfused (the gather, then attention) or fused (attention
// queued once the rank's own chunks are in, the kernel waiting for each
// peer's).
//
//===----------------------------------------------------------------------===//
#include "tessel/kernels/parallel/SequenceParallelAttention.h"
#include "tessel/kernels/parallel/ExchangeFlags.h"
#include "tessel/dsl/Compile.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Error.h"

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::rt;

static int64_t chunksBytesOf(const ZigZagShape &z, int64_t heads) {
  return z.batch * 2 * z.chunk() * heads * z.headDim * z.elementBytes;
}

/// The forward kernel as the chunks need it: under a causal mask each
/// chunk's queries sit at their own key positions.
static AttentionConfig chunkedConfig(const AttentionConfig &config, bool streamedShards) {
  AttentionConfig chunked = config;
  chunked.queryOffset = config.causal;
  chunked.streamedShards = streamedShards;
  return chunked;
}

static std::unique_ptr<Kernel> compileForward(const AttentionConfig &config) {
  Program program = flashAttentionForward(config);
  return std::make_unique<Kernel>(
      compile(program, {nativeArch(Driver::get().computeCapability())}));
}

ZigZagAttention::ZigZagAttention(Communicator &comm, const SequenceParallelProblem &p)
    : problem(p), z(zigzagShape(p)), rank(comm.localRank()),
      chunked(compileForward(chunkedConfig(p.config, false))),
      streamed(compileForward(chunkedConfig(p.config, true))),
      gather(std::make_unique<ZigZagKvGather>(comm, z)), q(chunksBytesOf(z, z.headsQ)),
      o(chunksBytesOf(z, z.headsQ)), lse(2 * z.batch * z.headsQ * z.chunk() * 4) {
  // Loaded now: a module load waits for running kernels, which may spin on
  // flags that this rank's streams have yet to write.
  chunked->loadedKernel().resourceUsage();
  streamed->loadedKernel().resourceUsage();
}

ZigZagAttention::~ZigZagAttention() = default;

int64_t ZigZagAttention::chunksBytes(int64_t heads) const { return chunksBytesOf(z, heads); }

void ZigZagAttention::uploadChunks(std::span<const char> whole, CUdeviceptr local,
                                   int64_t heads) const {
  Driver &d = Driver::get();
  int64_t chunk = z.chunk(), row = heads * z.headDim * z.elementBytes;
  for (int64_t b = 0; b < z.batch; ++b)
    for (int part = 0; part < 2; ++part) {
      const char *host = whole.data() + (b * z.seqlen + z.globalChunk(rank, part) * chunk) * row;
      TESSEL_CU(d, cuMemcpyHtoD, local + (b * 2 + part) * chunk * row, host, chunk * row);
    }
  // Landed before a kernel on a non-blocking stream reads it (a pageable
  // copy may return early, on the legacy stream).
  TESSEL_CU(d, cuStreamSynchronize, nullptr);
}

void ZigZagAttention::upload(const WholeInputs &whole) {
  uploadChunks(whole[0], q.ptr(), z.headsQ);
  for (int t = 0; t < 2; ++t) uploadChunks(whole[1 + t], gather->input(t), z.headsKV);
}

void ZigZagAttention::load(CUdeviceptr queries, CUdeviceptr keys, CUdeviceptr values,
                           CUstream stream) {
  Driver &d = Driver::get();
  TESSEL_CU(d, cuMemcpyAsync, q.ptr(), queries, size_t(chunksBytesOf(z, z.headsQ)), stream);
  TESSEL_CU(d, cuMemcpyAsync, gather->input(0), keys, size_t(chunksBytesOf(z, z.headsKV)), stream);
  TESSEL_CU(d, cuMemcpyAsync, gather->input(1), values, size_t(chunksBytesOf(z, z.headsKV)),
            stream);
}

void ZigZagAttention::copyLogSumExp(CUdeviceptr to, CUstream stream) const {
  // The kernels write each (batch, chunk) launch's [heads_q, chunk].
  int64_t chunk = z.chunk(), bytes = chunk * 4;
  for (int64_t b = 0; b < z.batch; ++b)
    for (int part = 0; part < 2; ++part)
      copyPitched(lse.ptr() + (b * 2 + part) * z.headsQ * bytes, bytes,
                  to + (b * z.headsQ * 2 + part) * bytes, 2 * bytes, bytes, z.headsQ, stream);
}

void ZigZagAttention::unfused(CUstream stream) {
  gather->gather(stream);
  attend(*chunked, gather->gathered(0), gather->gathered(1), stream);
}

void ZigZagAttention::fused(CUstream stream) {
  gather->gatherStreamed(stream, [&](CUstream st, CUdeviceptr arrivals, uint32_t epoch) {
    attend(*streamed, gather->gathered(0), gather->gathered(1), st, arrivals, epoch);
  });
}

void ZigZagAttention::attentionAlone(CUstream stream) {
  attend(*chunked, gather->gathered(0), gather->gathered(1), stream);
}

void ZigZagAttention::attend(Kernel &kernel, CUdeviceptr keys, CUdeviceptr values,
                             CUstream stream, CUdeviceptr arrivals, uint32_t epoch) {
  int64_t chunk = z.chunk();
  int64_t rowQ = z.headsQ * z.headDim * z.elementBytes;
  int64_t rowKV = z.headsKV * z.headDim * z.elementBytes;
  // The chunk whose keys are nearest (fewest peers' chunks needed) first.
  for (int part = 0; part < 2; ++part)
    for (int64_t b = 0; b < z.batch; ++b) {
      int c = z.globalChunk(rank, part);
      // Under a causal mask a chunk sees the keys up to its own end.
      int64_t seqK = problem.config.causal ? (c + 1) * chunk : z.seqlen;
      int64_t at = (b * 2 + part) * chunk * rowQ;
      AttentionForwardArgs args = AttentionForwardArgs::dense(
          1, chunk, seqK, z.headsQ, z.headsKV, z.headDim, problem.scale, q.ptr() + at,
          keys + b * z.seqlen * rowKV, values + b * z.seqlen * rowKV, o.ptr() + at,
          lse.ptr() + (b * 2 + part) * z.headsQ * chunk * 4);
      // Every chunk of the sequence is a shard the kernel may wait for.
      if (arrivals)
        args.streamed = AttentionForwardArgs::Streamed{
            chunk, int64_t(2 * z.ranks), 1, static_cast<int32_t>(epoch),
            LaunchArg::buffer(arrivals, {2 * z.ranks})};
      if (problem.config.causal) args.queryOffset = c * chunk;
      kernel.launch(args.list(), stream);
    }
}
