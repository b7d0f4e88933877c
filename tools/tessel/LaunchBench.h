//===- LaunchBench.h - the host cost of a launch ----------------*- C++ -*-===//
#ifndef TESSEL_TOOLS_LAUNCHBENCH_H
#define TESSEL_TOOLS_LAUNCHBENCH_H

namespace tessel {
/// `tessel bench launch`: the host time of one launch (the driver's own
/// cuLaunchKernel, Kernel::launch without and with tensor maps, the
/// library's gemm call) and a CUDA graph of 100 launches against the same
/// launches made one by one. Returns the exit code.
int launchBenchCommand(int reps);
} // namespace tessel

#endif
