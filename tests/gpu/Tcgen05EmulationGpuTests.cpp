//===- Tcgen05EmulationGpuTests.cpp - sm_100a kernels emulated on Hopper --===//
//
// The sm_100a-emu target runs the sm_100a pipeline unchanged on an sm_90
// GPU, every tcgen05 op done in software (tessel_tcgen05_emu.h). The
// library gemm's tcgen05 build is checked against the CPU reference here,
// and one check shows the emulation catches the seed's column-offset bug.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "tessel/harness/Library.h"
#include "tessel/kernels/Kernels.h"
#include "tessel/harness/LibrarySupport.h"
#include "ChildProcess.h"
#include "UserKernels.h"
#include "tessel/Dialect/Tile/TileDialect.h"
#include "tessel/runtime/Driver.h"

#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <random>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::harness;

namespace {
constexpr const char *kEmulated = "sm_100a-emu";

bool hopper() {
  if (rt::Driver::get().computeCapability() == 90) return true;
  WARN("SKIPPED: the tcgen05 emulation compiles for sm_90a; this GPU is sm_"
       << rt::Driver::get().computeCapability());
  return false;
}

CheckResult checkEmulatedGemm(const Params &overrides, const CompileOptions &options) {
  const LibraryKernel &entry = findKernel("gemm");
  Params p = withDefaults(entry, overrides, kEmulated);
  Program program = entry.build(p);
  Kernel k = compile(program, options);
  REQUIRE(k.cuda().find("tessel::emu::tcgen05_mma") != std::string::npos);
  uint64_t seed = std::random_device{}();
  CheckResult r = entry.check(k, p, seed);
  std::string config;
  for (auto &[key, value] : overrides) config += fmt::format(" {}={}", key, value);
  fmt::print("emulated tcgen05 gemm{} {}: rel error {:.3e} (tolerance {:.0e}) {:.2f} ms seed {}\n",
             config, r.shape, r.relError, r.tolerance, r.ms, seed);
  return r;
}
} // namespace

TEST_CASE("the emulated sm_100a gemm matches the reference", "[gpu][tcgen05]") {
  if (!hopper()) return;
  CompileOptions emulated{kEmulated};
  // Tile multiples and not; the plain pipeline and the warp-specialized one;
  // 16-bit and 32-bit outputs; K- and MN-major operands.
  for (std::string ws : {"off", "on"}) {
    for (auto [m, n, k] : {std::tuple{"256", "512", "256"}, {"300", "200", "136"}, {"128", "256", "64"}})
      CHECK(checkEmulatedGemm({{"warp_specialize", ws}, {"M", m}, {"N", n}, {"K", k}}, emulated).passed);
    CHECK(checkEmulatedGemm({{"warp_specialize", ws}, {"in", "bf16"}, {"out", "bf16"}, {"transpose_a", "1"},
                             {"M", "200"}, {"N", "300"}, {"K", "192"}},
                            emulated)
              .passed);
    CHECK(checkEmulatedGemm({{"warp_specialize", ws}, {"out", "f16"}, {"transpose_b", "1"},
                             {"block_n", "128"}, {"threads", "256"}, {"M", "130"}, {"N", "250"},
                             {"K", "100"}},
                            emulated)
              .passed);
     // The epilogue's column chunks through a staged tile and a TMA store,
    // and split-K adding each chunk (atomics, or TMA reduce-add) into C.
    CHECK(checkEmulatedGemm({{"warp_specialize", ws}, {"out", "f16"}, {"tma_store", "1"},
                             {"M", "300"}, {"N", "256"}, {"K", "136"}},
                            emulated)
              .passed);
    for (std::string tma : {"0", "1"})
      CHECK(checkEmulatedGemm({{"warp_specialize", ws}, {"out", "f32"}, {"split_k", "3"},
                               {"tma_store", tma}, {"M", "130"}, {"N", "128"}, {"K", "520"}},
                              emulated)
                .passed);
  }
}

// 8-bit inputs on tcgen05: kind::f8f6f4 (e4m3 and e5m2, each scale, f32 and
// 16-bit outputs) and kind::i8 into s32 tensor memory, against the float64
// reference of the values the device holds. K tiles of 128 bytes (four MMAs)
// and of 64 (a 64-byte swizzle), K past the last tile, MN-major operands
// (which tcgen05 reads as they are, unlike wgmma), warp-specialized and not,
// and the epilogue's scaled chunks through a TMA store.
TEST_CASE("8-bit gemms built for sm_100a match the reference", "[gpu][tcgen05][fp8]") {
  if (!hopper()) return;
  CompileOptions emulated{kEmulated};
  for (std::string ws : {"off", "on"}) {
    for (std::string in : {"e4m3", "e5m2"})
      for (std::string scale : {"none", "tensor", "row"})
        CHECK(checkEmulatedGemm({{"warp_specialize", ws}, {"in", in}, {"out", "bf16"},
                                 {"scale", scale}, {"transpose_b", "1"}, {"block_k", "128"},
                                 {"M", "300"}, {"N", "200"}, {"K", "160"}},
                                emulated)
                  .passed);
    CHECK(checkEmulatedGemm({{"warp_specialize", ws}, {"in", "e4m3"}, {"out", "f32"},
                             {"scale", "row"}, {"transpose_b", "1"}, {"block_k", "64"},
                             {"block_n", "128"}, {"threads", "256"}, {"M", "130"}, {"N", "250"},
                             {"K", "200"}},
                            emulated)
              .passed);
    CHECK(checkEmulatedGemm({{"warp_specialize", ws}, {"in", "i8"}, {"out", "i32"},
                             {"transpose_b", "1"}, {"block_k", "128"}, {"M", "256"}, {"N", "256"},
                             {"K", "384"}},
                            emulated)
              .passed);
  }
  // MN-major operands: A [K, M], B [K, N] (a row-major weight).
  for (auto [ta, tb] : {std::pair{"1", "1"}, {"0", "0"}, {"1", "0"}})
    CHECK(checkEmulatedGemm({{"in", "e4m3"}, {"out", "f16"}, {"scale", "tensor"},
                             {"transpose_a", ta}, {"transpose_b", tb}, {"block_k", "128"},
                             {"M", "200"}, {"N", "256"}, {"K", "256"}},
                            emulated)
              .passed);
  CHECK(checkEmulatedGemm({{"in", "i8"}, {"out", "i32"}, {"transpose_b", "0"}, {"block_k", "128"},
                           {"M", "128"}, {"N", "144"}, {"K", "200"}},
                          emulated)
            .passed);
  CHECK(checkEmulatedGemm({{"in", "e5m2"}, {"out", "bf16"}, {"scale", "tensor"},
                           {"transpose_b", "1"}, {"block_k", "128"}, {"tma_store", "1"},
                           {"M", "300"}, {"N", "256"}, {"K", "256"}},
                          emulated)
            .passed);
}

// MXFP8 (scale = mx): a ue8m0 scale per 32 of K for each row of A and
// column of B, in cuBLAS's blocked layout, moved into tensor memory by
// tcgen05.cp and applied by kind::mxf8f6f4, against the float64 reference
// of the scaled products: several K tiles (each its own scale group), M, N
// and K past their last tile (scales and operands read as zero there), one
// and two 128-column atoms of B's scales, both formats, warp-specialized or
// not, and split-K.
TEST_CASE("MX gemms built for sm_100a match the reference", "[gpu][tcgen05][fp8]") {
  if (!hopper()) return;
  CompileOptions emulated{kEmulated};
  for (std::string ws : {"off", "on"})
    for (std::string in : {"e4m3", "e5m2"})
      CHECK(checkEmulatedGemm({{"warp_specialize", ws}, {"in", in}, {"out", "bf16"},
                               {"scale", "mx"}, {"transpose_b", "1"}, {"block_k", "128"},
                               {"M", "300"}, {"N", "260"}, {"K", "416"}},
                              emulated)
                .passed);
  CHECK(checkEmulatedGemm({{"in", "e4m3"}, {"out", "f32"}, {"scale", "mx"}, {"transpose_b", "1"},
                           {"block_k", "128"}, {"block_n", "128"}, {"M", "128"}, {"N", "128"},
                           {"K", "256"}},
                          emulated)
            .passed);
  CHECK(checkEmulatedGemm({{"in", "e4m3"}, {"out", "f32"}, {"scale", "mx"}, {"transpose_b", "1"},
                           {"block_k", "128"}, {"split_k", "2"}, {"M", "200"}, {"N", "256"},
                           {"K", "512"}},
                          emulated)
            .passed);
}

// The seed's bug: warpgroup 1 of a 2-warpgroup copy out of tensor memory
// started at twice the right column. tessel-tmem-allocation records the step
// on each copy; doubling it on the first epilogue copy (columns 0-63, so
// warpgroup 1 reads columns 64-95 instead of 32-63, still inside the
// allocation) must make the emulated result wrong.
TEST_CASE("the emulation catches the seed's doubled warpgroup column base", "[gpu][tcgen05]") {
  if (!hopper()) return;
  Params shape = {{"threads", "256"}, {"block_n", "128"}, {"warp_specialize", "off"},
                  {"M", "256"}, {"N", "256"}, {"K", "128"}};
  CompileOptions right{kEmulated};
  CheckResult good = checkEmulatedGemm(shape, right);
  CHECK(good.passed);

  CompileOptions wrong{kEmulated};
  int64_t rightStep = 0;
  wrong.afterPass = [&](const std::string &pass, mlir::Operation *kernel) {
    if (pass != "tessel-tmem-allocation") return;
    mlir::Operation *first = nullptr;
    kernel->walk([&](tile::CopyOp copy) {
      if (!first && copy->hasAttr("tmem_group_columns")) first = copy;
    });
    REQUIRE(first);
    auto step = first->getAttrOfType<mlir::IntegerAttr>("tmem_group_columns");
    rightStep = step.getInt();
    first->setAttr("tmem_group_columns", mlir::IntegerAttr::get(step.getType(), 2 * rightStep));
  };
  CheckResult bad = checkEmulatedGemm(shape, wrong);
  fmt::print("warpgroup 1 at column {} (right) gives rel error {:.3e}; at column {} (the seed's) "
             "{:.3e}\n",
             rightStep, good.relError, 2 * rightStep, bad.relError);
  CHECK(rightStep == 32);
  CHECK_FALSE(bad.passed);
  CHECK(bad.relError > 0.1);
}

namespace {
/// Y = X through tensor memory: [128, 128] bf16 from global into a
/// fragment, stored packed into tensor memory by two warpgroups (the seed's
/// P), loaded back and written out. A spare f32 buffer keeps the allocation
/// wide enough that a wrong column stays inside it.
Program bf16RoundTrip() {
  Program p("tmem_bf16_round_trip");
  Tensor x = p.tensor("X", {128, 128}, DType::bf16);
  Tensor y = p.tensor("Y", {128, 128}, DType::bf16);
  p.kernel({1}, 256, [&](Expr) {
    Buffer spare = alloc_tmem({128, 128}, DType::f32, "spare");
    Buffer tp = alloc_tmem({128, 128}, DType::bf16, "p");
    Buffer in = alloc_fragment({128, 128}, DType::bf16, "in");
    Buffer out = alloc_fragment({128, 128}, DType::bf16, "out");
    clear(spare);
    copy(x.tile({0, 0}, {128, 128}), in);
    copy(in, tp);
    copy(tp, out);
    copy(out, y.tile({0, 0}, {128, 128}));
  });
  return p;
}

/// The largest |Y - X| of one run (NaN, an unwritten element, counts as
/// infinite).
double roundTripError(const CompileOptions &options) {
  Program p = bf16RoundTrip();
  Kernel k = compile(p, options);
  std::mt19937_64 rng(7);
  HostTensor x(DType::bf16, {128, 128}), y(DType::bf16, {128, 128});
  randomize(x, rng);
  std::vector<double> ref(x.values.begin(), x.values.end());
  DeviceRun run;
  run.addTensor(x, false);
  run.addTensor(y, true);
  CheckResult r = launchAndCompare(k, run, 1, y, ref, 0.0, {});
  return r.relError;
}
} // namespace

// The seed's exact case: P [128, 128] bf16 packed, written by 256 threads;
// warpgroup 1 starts at column 32. Written at 64 (the seed's step) and
// read back at 32, the values come back wrong.
TEST_CASE("packed bf16 goes through tensor memory and back, and the seed's column is caught",
          "[gpu][tcgen05]") {
  if (!hopper()) return;
  CompileOptions right{kEmulated};
  double good = roundTripError(right);
  CompileOptions wrong{kEmulated};
  int64_t step = 0;
  wrong.afterPass = [&](const std::string &pass, mlir::Operation *kernel) {
    if (pass != "tessel-tmem-allocation") return;
    kernel->walk([&](tile::CopyOp copy) {
      auto attr = copy->getAttrOfType<mlir::IntegerAttr>("tmem_group_columns");
      // The store into P only: its destination is tensor memory.
      if (!attr || !llvm::isa<mlir::MemRefType>(copy.getDest().getType()) ||
          tile::getMemorySpace(llvm::cast<mlir::MemRefType>(copy.getDest().getType())) !=
              tile::MemorySpace::tmem)
        return;
      step = attr.getInt();
      copy->setAttr("tmem_group_columns", mlir::IntegerAttr::get(attr.getType(), 2 * step));
    });
  };
  double bad = roundTripError(wrong);
  fmt::print("bf16 P through tensor memory: warpgroup 1 at column {} gives rel error {:.3e}, at "
             "column {} (the seed's) {:.3e}\n",
             step, good, 2 * step, bad);
  CHECK(step == 32);
  CHECK(good == 0.0);
  CHECK(bad > 0.1);
}

// The ts form: A stored into tensor memory from registers (packed bf16, as
// FlashAttention's P), B from shared memory, D = A x B in tensor memory.
TEST_CASE("a gemm with A in tensor memory matches the reference", "[gpu][tcgen05]") {
  if (!hopper()) return;
  Program p = test::tsGemm();
  Kernel k = compile(p, {kEmulated});
  REQUIRE(k.cuda().find("tessel::emu::tcgen05_mma<") != std::string::npos);
  std::mt19937_64 rng(11);
  HostTensor hx(DType::bf16, {128, 64}), hw(DType::bf16, {64, 128}), hy(DType::f32, {128, 128});
  randomize(hx, rng);
  randomize(hw, rng);
  std::vector<double> ref(128 * 128, 0.0);
  for (int i = 0; i < 128; ++i)
    for (int j = 0; j < 128; ++j)
      for (int l = 0; l < 64; ++l) ref[i * 128 + j] += double(hx.values[i * 64 + l]) * hw.values[l * 128 + j];
  DeviceRun run;
  run.addTensor(hx, false);
  run.addTensor(hw, false);
  run.addTensor(hy, true);
  CheckResult r = launchAndCompare(k, run, 2, hy, ref, 1e-5, {});
  fmt::print("ts gemm [128, 64] x [64, 128] through tensor memory: rel error {:.3e}\n", r.relError);
  CHECK(r.passed);
}

// The attention kernels as sm_100a builds them, run through the emulation
// target: the forward pass in the tcgen05 `ss` and `ts` forms (S and O in
// tensor memory, P through shared or tensor memory, and `ws`, warp-
// specialized with two query tiles in flight) and the backward pass in the
// ss and ts forms. MHA and GQA (groups 1, 2, 4, 8), causal and full,
// packed sequences with a length of 1.
TEST_CASE("attention built for sm_100a matches the reference", "[gpu][tcgen05]") {
  if (!hopper()) return;
  for (auto [name, overrides] :
       {std::pair<std::string, Params>{"flash_attention_fwd", {}},
        {"flash_attention_fwd", {{"causal", "1"}, {"head_dim", "64"}, {"heads_kv", "4"}}},
        {"flash_attention_fwd", {{"heads_q", "8"}, {"heads_kv", "1"}, {"warp_specialize", "off"}}},
        {"flash_attention_fwd", {{"heads_q", "8"}, {"heads_kv", "2"}, {"variant", "ts"}, {"causal", "1"}}},
        {"flash_attention_fwd", {{"varlen", "1"}, {"causal", "1"}}},
        // ts: P packed in tensor memory by two warpgroups (the seed's form).
        {"flash_attention_fwd", {{"variant", "ts"}}},
        {"flash_attention_fwd", {{"variant", "ts"}, {"causal", "1"}, {"heads_q", "8"}, {"heads_kv", "1"},
                                 {"varlen", "1"}, {"head_dim", "64"}}},
        // ws: two query tiles in flight, roles handing off through
        // mbarriers; two and three K/V slots, each reused several times
        // (the slots' second round is where the seed's priming deadlocked).
        {"flash_attention_fwd", {{"variant", "ws"}, {"heads_kv", "4"}}},
        {"flash_attention_fwd", {{"variant", "ws"}, {"causal", "1"}, {"heads_q", "8"},
                                 {"heads_kv", "1"}, {"head_dim", "64"}, {"varlen", "1"}}},
        {"flash_attention_fwd", {{"variant", "ws"}, {"stages", "3"}, {"heads_q", "8"},
                                 {"heads_kv", "2"}, {"causal", "1"}, {"seqlen_q", "700"},
                                 {"seqlen_k", "700"}, {"head_dim", "64"}}},
        // The backward pass: S^T, dP^T, dK, dV and dQ in tensor memory,
        // P^T through shared memory (ss, the default) or over S^T (ts),
        // two stages of Q and dO (one at head_dim 128 with packed
        // batches), GQA dK/dV by region atomics or split slices.
        {"flash_attention_bwd", {}},
        {"flash_attention_bwd", {{"heads_q", "4"}, {"heads_kv", "4"}, {"kv_reduction", "direct"},
                                 {"head_dim", "64"}, {"causal", "1"}}},
        {"flash_attention_bwd", {{"causal", "1"}, {"varlen", "1"}, {"kv_reduction", "split"}}},
        {"flash_attention_bwd", {{"variant", "ts"}, {"heads_q", "8"}, {"heads_kv", "1"}}},
        {"flash_attention_bwd", {{"variant", "ts"}, {"heads_q", "8"}, {"heads_kv", "2"},
                                 {"causal", "1"}, {"head_dim", "64"}, {"varlen", "1"}}},
        {"flash_attention_bwd", {{"variant", "ts"}, {"varlen", "1"}, {"dq_atomics", "tma"},
                                 {"head_dim", "64"}}},
        {"flash_attention_bwd", {{"warp_specialize", "off"}, {"heads_kv", "1"}}}}) {
    const LibraryKernel &entry = findKernel(name);
    Params p = withDefaults(entry, overrides, kEmulated);
    Program program = entry.build(p);
    Kernel k = compile(program, {kEmulated});
    CHECK(k.cuda().find("tessel::emu::tcgen05_mma<") != std::string::npos);
    uint64_t seed = std::random_device{}();
    CheckResult r = entry.check(k, p, seed);
    fmt::print("{} for sm_100a (emulated) {}: rel error {:.3e} (tolerance {:.0e}) seed {}\n", name,
               r.shape, r.relError, r.tolerance, seed);
    CHECK(r.passed);
  }
}

namespace {
/// Y (bf16) = X (f32, [128, N]) through a [128, 128] tensor-memory tile by
/// two warpgroups. The tile is [128, 128]: with N = 96, reads past X's
/// columns are zero and writes past Y's are dropped.
Program globalRoundTrip() {
  Program p("tmem_global_round_trip");
  Expr n = p.sym("N");
  Tensor x = p.tensor("X", {128, n}, DType::f32);
  Tensor y = p.tensor("Y", {128, n}, DType::bf16);
  p.kernel({1}, 256, [&](Expr) {
    Buffer t = alloc_tmem({128, 128}, DType::f32, "t");
    copy(x.tile({0, 0}, {128, 128}), t);
    copy(t, y.tile({0, 0}, {128, 128}));
  });
  return p;
}
} // namespace

// Tensor memory to and from global memory directly (through registers, row
// by row): f32 in, bf16 out, converted on the way.
TEST_CASE("tensor memory is copied from and to global memory", "[gpu][tcgen05]") {
  if (!hopper()) return;
  Program p = globalRoundTrip();
  Kernel k = compile(p, {kEmulated});
  std::mt19937_64 rng(5);
  HostTensor hx(DType::f32, {128, 96}), hy(DType::bf16, {128, 96});
  randomize(hx, rng);
  std::vector<double> ref(hx.values.begin(), hx.values.end());
  DeviceRun run;
  run.args.push_back(rt::LaunchArg::integer(96));
  run.addTensor(hx, false);
  run.addTensor(hy, true);
  CheckResult r = launchAndCompare(k, run, 2, hy, ref, 1e-2, {});
  fmt::print("global -> tensor memory -> global (f32 -> bf16): rel error {:.3e}\n", r.relError);
  CHECK(r.passed);
}

// Run by the test below in a child process: the trap kills the context.
// The store into tensor memory is given a warpgroup step of 1024 columns,
// far outside the block's 128.
TEST_CASE("an access outside the tensor-memory allocation traps", "[.tmem_trap_child]") {
  Program p = globalRoundTrip();
  CompileOptions broken{kEmulated};
  broken.afterPass = [](const std::string &pass, mlir::Operation *kernel) {
    if (pass != "tessel-tmem-allocation") return;
    kernel->walk([](tile::CopyOp copy) {
      if (auto step = copy->getAttrOfType<mlir::IntegerAttr>("tmem_group_columns"))
        copy->setAttr("tmem_group_columns", mlir::IntegerAttr::get(step.getType(), 1024));
    });
  };
  Kernel k = compile(p, broken);
  HostTensor hx(DType::f32, {128, 96}), hy(DType::bf16, {128, 96});
  DeviceRun run;
  run.args.push_back(rt::LaunchArg::integer(96));
  run.addTensor(hx, false);
  run.addTensor(hy, true);
  k.launch(run.args);
  try {
    TESSEL_CU(rt::Driver::get(), cuCtxSynchronize);
  } catch (const Error &e) {
    fmt::print("child caught: {}\n", e.what());
    throw;
  }
}

TEST_CASE("the emulation traps on a column outside the allocation, and the error says so",
          "[gpu][tcgen05]") {
  if (!hopper()) return;
  auto [status, output] = test::runTaggedChild("[.tmem_trap_child]");
  INFO(output);
  CHECK(status != 0);
  CHECK_THAT(output, Catch::Contains("child caught: cuCtxSynchronize failed"));
  CHECK_THAT(output, Catch::Contains(
                         "tcgen05.ld/st: a column outside the block's tensor-memory allocation"));
}

TEST_CASE("a register-accumulator program runs on emulated tcgen05 and matches the reference",
          "[gpu][tcgen05]") {
  if (!hopper()) return;
  Program p = test::scoresRowMax();
  Kernel k = compile(p, {kEmulated});
  REQUIRE(k.cuda().find("tessel::emu::tcgen05_mma") != std::string::npos);
  const int64_t keys = 320; // five steps of 64, more than the two stages
  std::mt19937_64 rng(100);
  HostTensor q(DType::bf16, {128, 64}), kv(DType::bf16, {keys, 64}), out(DType::f32, {128}),
      sum(DType::f32, {128, 64});
  randomize(q, rng);
  randomize(kv, rng);
  std::vector<double> refMax(128, -INFINITY), refSum(128 * 64, 0.0);
  for (int64_t i = 0; i < 128; ++i)
    for (int64_t j = 0; j < keys; ++j) {
      double s = 0;
      for (int64_t c = 0; c < 64; ++c) s += double(q.values[i * 64 + c]) * kv.values[j * 64 + c];
      refMax[i] = std::max(refMax[i], s);
      refSum[i * 64 + j % 64] += s;
    }
  DeviceRun run;
  run.args.push_back(rt::LaunchArg::integer(keys));
  run.addTensor(q, false);
  run.addTensor(kv, false);
  run.addTensor(out, true);
  run.addTensor(sum, true);
  k.launch(run.args);
  synchronize();
  run.download(3, out);
  run.download(4, sum);
  double maxError = relativeError(out.values, refMax), sumError = relativeError(sum.values, refSum);
  INFO(fmt::format("row maximum: rel error {:.3e}; running sum: rel error {:.3e}", maxError, sumError));
  CHECK(maxError < 1e-5);
  CHECK(sumError < 1e-5);
}
