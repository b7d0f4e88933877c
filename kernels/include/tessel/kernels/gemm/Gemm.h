//===- Gemm.h - the GEMM kernel ---------------------------------*- C++ -*-===//
//
// The GEMM kernel's configuration and builder (kernels/gemm/); the call on
// tensor views is tessel::gemm in tessel/Tessel.h.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_GEMM_GEMM_H
#define TESSEL_KERNELS_GEMM_GEMM_H

#include "tessel/dsl/Program.h"
#include "tessel/kernels/Settings.h"

namespace tessel::kernels {

/// How the product is scaled before it is stored (FP8's dequantisation):
/// `tensor` multiplies it by scale_a[0] * scale_b[0], `row` element (i, j)
/// by scale_a[i] * scale_b[j] (f32 tensors after C, [1] or [M] and [N]);
/// `block` is DeepSeek-V3's recipe: A scaled per 1 x 128 block (scale_a
/// [ceil(K / 128), M], K-block-major), B per 128 x 128 block (scale_b
/// [ceil(N / 128), ceil(K / 128)]), each K block's product promoted into
/// the f32 accumulator with its scales. `mx` is OCP's MX (MXFP8, sm_100a's
/// tcgen05.mma kind::mxf8f6f4): a ue8m0 scale per 32 of K for each row of A
/// and column of B, applied by the tensor cores, in cuBLAS's blocked layout
/// (torch's to_blocked): scale_a [ceil(M / 128), ceil(K / 128), 32, 16],
/// the scale of row r and K block j at [r / 128, j / 4, r % 32, 4 (r % 128
/// / 32) + j % 4], scale_b the same over N.
enum class GemmScale { none, tensor, row, block, mx };

/// C = op(A) x op(B); A is [M, K] ([K, M] transposed), B is [K, N] ([N, K]
/// transposed), C is [M, N], all row-major, M, N, K symbols. Inputs are
/// f16, bf16, FP8 (f8e4m3, f8e5m2: f32 accumulation, any scale) or i8 (i32
/// accumulation into an i32 C, unscaled); 8-bit inputs are K-major (A [M,
/// K], B [N, K] with transpose_b), as their tensor-core instructions read
/// them.
struct GemmConfig {
  DType in = DType::f16;
  DType out = DType::f32;
  bool transposeA = false, transposeB = false;
  int64_t blockM = 64, blockN = 64, blockK = 32;
  int stages = 2;
  int threads = 128;
  WarpPolicy policy = WarpPolicy::square;
  GemmInstruction instruction = GemmInstruction::automatic;
  WarpSpecialize warpSpecialize = WarpSpecialize::automatic;
  /// Block rasterization: rows of tiles per panel (0 = launch order).
  int swizzlePanel = 0;
  /// Warp-specialized sm_90a: each k step's wgmmas run on while the next
  /// step issues (PipelineOptions::overlap_mma).
  bool overlapMma = false;
  /// Warp-specialized sm_90a with two consumer warpgroups: they take turns
  /// at the tensor cores (PipelineOptions::pingpong), so that one's
  /// element-wise work (a block-scaled loop's promotions) runs while the
  /// other's wgmmas do.
  bool pingpong = false;
  /// sm_90a and newer: blocks per cluster along M (1 or 2). The blocks of a
  /// cluster take vertically adjacent tiles of one column of C and share
  /// each B tile, loaded once by TMA multicast.
  int clusterM = 1;
  /// One block per resident slot walking the output tiles (persistent):
  /// the producer loads the next tile's stages under the current epilogue.
  bool persistent = false;
  /// The epilogue goes through a [block_m, block_n] shared tile and a TMA
  /// store, which runs on under the next tile's mainloop (persistent) or
  /// the block's exit, instead of every thread storing its fragment.
  bool tmaStore = false;
  /// K cut into this many slices, one block each (the grid's third
  /// dimension), every slice adding its partial product into C with
  /// atomics (a TMA reduce-add with tmaStore): for problems with too few
  /// output tiles to fill the GPU. C must be zero before the launch.
  int splitK = 1;
  GemmScale scale = GemmScale::none;
};
Program gemm(const GemmConfig &config);
/// The tiles tessel::gemm takes on `arch` without a configuration or a
/// tuned record (before its adjustments for 8-bit inputs and 16-bit C).
GemmConfig defaultGemmConfig(const std::string &arch);
/// What tessel::gemm runs for an M x N problem on `arch` with `sms` SMs
/// when no configuration and no tuned record is given: `problem`'s types,
/// scale and transposes on defaultGemmConfig's tiles, adjusted for 8-bit
/// inputs (tiles by C's size against the SMs) and for a 16-bit C (a TMA
/// store). `tessel bench gemm` times the same per shape (config=library).
GemmConfig chooseGemmConfig(const std::string &arch, const GemmConfig &problem, int64_t m,
                            int64_t n, int sms);
/// GemmConfig as settings: in, out, transpose_a, transpose_b, block_m,
/// block_n, block_k, stages, threads, swizzle, instruction, warp_specialize,
/// overlap_mma, pingpong, cluster_m, persistent, tma_store, policy, split_k,
/// scale.
const SettingsTable<GemmConfig> &gemmSettings();
/// What a gemm multiplies: f16, bf16, FP8 (named e4m3, e5m2 or by their
/// DType names) and i8; and what it writes: f16, bf16, f32, i32.
const Choices<DType> &gemmInputChoices();
const Choices<DType> &gemmOutputChoices();

} // namespace tessel::kernels

#endif
