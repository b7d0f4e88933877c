//===- SpAttention.h - sequence-parallel attention runs ---------*- C++ -*-===//
//
// What `tessel run|bench sp_attention` shares between its variants: Ulysses
// (SpAttention.cpp) and zig-zag chunked queries (ZigZagAttention.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TOOLS_SPATTENTION_H
#define TESSEL_TOOLS_SPATTENTION_H

#include "tessel/kernels/Kernels.h"
#include "tessel/harness/LibrarySupport.h"
#include "tessel/kernels/parallel/Ulysses.h"
#include "tessel/kernels/parallel/ZigZag.h"

#include <array>
#include <functional>
#include <string>
#include <vector>

namespace tessel {

struct SpProblem {
  /// The whole problem (batch, seqlen, heads, head_dim) and the ranks.
  kernels::UlyssesShape shape;
  kernels::AttentionConfig config;
  double scale = 0;
  /// Query heads of each head group of a rank (pipelined and fused forms).
  std::vector<int64_t> groupHeads;
  /// Streams the head groups' attention takes turns on (pipelined and
  /// fused forms).
  int attentionStreams = 2;
  kernels::UlyssesExchange::LocalShard localShard = kernels::UlyssesExchange::LocalShard::kernel;
  bool zigzag = false;
};

inline kernels::ZigZagShape zigzagShape(const SpProblem &sp) {
  const kernels::UlyssesShape &s = sp.shape;
  return {s.batch, s.seqlen, s.headsQ, s.headsKV, s.headDim, s.elementBytes, s.ranks};
}

/// The forward kernel's arguments: symbols, scale, Q, K, V, O, LSE.
struct AttentionExtents {
  int64_t batch, seqQ, seqK, headsQ, headsKV, headDim;
};
std::vector<rt::LaunchArg> attentionArgs(const AttentionExtents &e, double scale, CUdeviceptr q,
                                         CUdeviceptr k, CUdeviceptr v, CUdeviceptr o,
                                         CUdeviceptr lse);
/// The whole problem's Q, K, V (every rank draws the same).
std::array<harness::HostTensor, 3> wholeInputs(const kernels::UlyssesShape &s, DType t);
double medianOnStream(CUstream stream, int reps, const std::function<void()> &work);

/// A rank's output (downloaded from `result`) against the single-GPU
/// reference rows: relative error, elements bit-identical, pass.
struct OutputCheck {
  double error = 0;
  size_t identical = 0;
  bool pass = false;
};
OutputCheck checkOutput(DType dtype, std::vector<int64_t> shape, CUdeviceptr result,
                        const std::vector<double> &reference);

/// One rank of the zig-zag variant: checked against, or timed against,
/// single-GPU attention over the whole problem.
int runZigZagRank(rt::Communicator &comm, const SpProblem &sp, bool bench, int reps);

} // namespace tessel

#endif
