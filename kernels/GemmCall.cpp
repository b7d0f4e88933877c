//===- GemmCall.cpp - tessel::gemm on views --------------------------------===//
#include "LibraryCalls.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;
using rt::LaunchArg;
using rt::ScalarType;

namespace {
/// The tiles each target gets unless the caller gives a configuration:
/// sm_90a the warp-specialized 128x256x64 pipeline of four stages with
/// rasterized blocks; sm_100a tcgen05.mma into tensor memory at 128x256
/// (every TMEM lane; the widest single instruction); sm_80 mma.sync at
/// 64x64x32.
GemmConfig defaultConfig(const std::string &arch) {
  GemmConfig c;
  if (arch == "sm_90a") {
    c.blockM = 128;
    c.blockN = 256;
    c.blockK = 64;
    c.threads = 256;
    c.stages = 4;
    c.swizzlePanel = 8;
  } else if (arch.rfind("sm_100a", 0) == 0) {
    c.instruction = GemmInstruction::tcgen05;
    c.blockM = 128;
    c.blockN = 256;
    c.blockK = 64;
    c.stages = 3;
  }
  return c;
}

std::string describe(const GemmConfig &c) {
  return fmt::format("in={} out={} transpose_a={} transpose_b={} block_m={} block_n={} block_k={} "
                     "stages={} threads={} swizzle={} instruction={} warp_specialize={}",
                     name(c.in), name(c.out), int(c.transposeA), int(c.transposeB), c.blockM,
                     c.blockN, c.blockK, c.stages, c.threads, c.swizzlePanel, int(c.instruction),
                     int(c.warpSpecialize));
}
} // namespace

Choice tessel::gemm(const TensorView &a, const TensorView &b, const TensorView &c,
                    const GemmCallOptions &o, CUstream stream) {
  requireView(a, "a", 2, {ScalarType::F16, ScalarType::BF16});
  requireView(b, "b", 2, {a.dtype});
  requireView(c, "c", 2, {ScalarType::F16, ScalarType::BF16, ScalarType::F32});
  int64_t m = o.transposeA ? a.shape[1] : a.shape[0], k = o.transposeA ? a.shape[0] : a.shape[1];
  int64_t bk = o.transposeB ? b.shape[1] : b.shape[0], n = o.transposeB ? b.shape[0] : b.shape[1];
  if (bk != k)
    throw Error(fmt::format("a is {} and b is {}: op(a) has {} columns but op(b) has {} rows",
                            a.str(), b.str(), k, bk));
  requireShape(c, "c", {m, n});
  int device = commonDevice({&a, &b, &c});
  Choice choice;
  choice.arch = targetFor(o.arch, device);
  GemmConfig config = o.config.value_or(defaultConfig(choice.arch));
  config.in = dtypeOf(a.dtype);
  config.out = dtypeOf(c.dtype);
  config.transposeA = o.transposeA;
  config.transposeB = o.transposeB;
  choice.config = "gemm " + describe(config);
  std::shared_ptr<Kernel> kernel =
      cachedKernel(choice.config, choice.arch, [&] { return kernels::gemm(config); }, choice.compiled);
  std::vector<LaunchArg> args = {LaunchArg::integer(m), LaunchArg::integer(n), LaunchArg::integer(k),
                                 LaunchArg::view(a), LaunchArg::view(b), LaunchArg::view(c)};
  kernel->launch(args, stream);
  return choice;
}
