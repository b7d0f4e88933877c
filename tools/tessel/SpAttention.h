//===- SpAttention.h - sequence-parallel attention runs ---------*- C++ -*-===//
//
// What `tessel run|bench sp_attention` shares between its variants: Ulysses
// (SpAttention.cpp) and zig-zag chunked queries (ZigZagAttention.cpp). The
// forms themselves are the library's (SequenceParallelAttention.h); the
// command draws the inputs, checks against single-GPU attention and times.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TOOLS_SPATTENTION_H
#define TESSEL_TOOLS_SPATTENTION_H

#include "tessel/harness/LibrarySupport.h"
#include "tessel/kernels/parallel/SequenceParallelAttention.h"

#include <array>
#include <functional>
#include <string>
#include <vector>

namespace tessel {

/// The problem as the parameters give it: the library's description and
/// which exchange spreads it.
struct SpProblem : kernels::SequenceParallelProblem {
  bool zigzag = false;
  /// The library calls' transport ("" for theirs, symmetric, nccl).
  std::string transport;
};

/// The whole problem's Q, K, V (every rank draws the same), and their bytes
/// as the library's forms take them.
std::array<harness::HostTensor, 3> wholeInputs(const kernels::UlyssesShape &s, DType t);
kernels::WholeInputs wholeBytes(const std::array<harness::HostTensor, 3> &whole);
double medianOnStream(CUstream stream, int reps, const std::function<void()> &work);
/// Rank 0's lines for a training step (forward with the LSE, then backward)
/// on `ranks` GPUs against one GPU; `flops` the forward's.
void printTrainingStep(const std::string &what, int ranks, double flops, double ms,
                       const std::string &config, double singleMs);

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
