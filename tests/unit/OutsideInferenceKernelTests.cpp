//===- OutsideInferenceKernelTests.cpp - inference kernels through every target -===//
//
// The kernels of tests/common/OutsideInferenceKernels.h through the
// pipeline, NVRTC and ptxas for sm_80, sm_90a and sm_100a: they compile
// without spills, every `pipelined` loop of several stages is pipelined (no
// remark says otherwise), each gemm runs on the instruction its target
// should give it, and the warnings are only the expected ones. Then the
// defects the kernels met, each as small as it reproduces.
//
// TESSEL_OUTSIDE_DUMP=<dir> writes each kernel's CUDA there, per target,
// and TESSEL_OUTSIDE_REMARKS=1 prints every compile's remarks.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "ErrorOf.h"
#include "OutsideChecks.h"
#include "OutsideInferenceKernels.h"
#include "tessel/dsl/Compile.h"

#include <functional>

using namespace tessel;

namespace {

const char *const kArchs[] = {"sm_80", "sm_90a", "sm_100a"};

using test::compileQuiet;
using test::count;
using test::remarksText;
using test::saysNotPipelined;
using test::unexpectedWarnings;

/// How many of `k`'s remarks contain `what`.
size_t remarksSaying(const Kernel &k, const std::string &what) {
  size_t n = 0;
  for (const Remark &r : k.remarks()) n += r.message.find(what) != std::string::npos;
  return n;
}

/// What sm_100a does with a kernel's register-accumulator gemms.
enum class Blackwell {
  /// Every gemm on tcgen05.mma, its accumulator moved through tensor memory.
  tcgen05,
  /// Every gemm on mma.sync, each saying why in a remark.
  mmaSync,
};

struct Case {
  std::string what;
  std::function<Program()> build;
  /// The gemms in the kernel's source.
  size_t gemms;
  Blackwell blackwell;
  /// Whether the sm_90a build's loop is split into a TMA producer and
  /// consumers (two consumer warpgroups get setmaxnreg budgets).
  bool pingpong = false;
};

std::vector<Case> cases() {
  using test::GemmTiles;
  using test::WindowAttentionConfig;
  // No warnings anywhere: every kernel has one pipelined loop whose loads
  // are all TMA on sm_90a and sm_100a. Attention's gemms stay on mma.sync
  // on sm_100a: P x V reads P from registers, which tcgen05 takes only
  // from tensor memory, and S's accumulator feeds it.
  return {
      {"window attention d128, 128 rows, 256 threads",
       [] { return test::windowSoftcapAttention(WindowAttentionConfig{128, 128, 64, 256, 2}); }, 2,
       Blackwell::mmaSync},
      {"window attention d128, edges masked, ping-pong",
       [] { return test::windowSoftcapAttention(WindowAttentionConfig{128, 128, 64, 256, 2, true, true}); },
       2, Blackwell::mmaSync, true},
      {"window attention d64, 64 rows, 128 threads, 3 stages, edges masked",
       [] { return test::windowSoftcapAttention(WindowAttentionConfig{64, 64, 64, 128, 3, true}); }, 2,
       Blackwell::mmaSync},
      {"swiglu 128x64x64, 256 threads", [] { return test::swigluGemm(GemmTiles{128, 64, 64, 256, 3}); }, 2,
       Blackwell::tcgen05},
      {"swiglu 64x64x64, 128 threads", [] { return test::swigluGemm(GemmTiles{64, 64, 64, 128, 3}); }, 2,
       Blackwell::mmaSync},
      // One warpgroup: on sm_100a each thread holds a whole row of the
      // tensor-memory accumulator, so the windows of its halves work.
      {"swiglu merged gate/up 128x(2x64)x64, 128 threads",
       [] { return test::swigluMergedGemm(GemmTiles{128, 64, 64, 128, 3}); }, 1, Blackwell::tcgen05},
      {"bias gelu 128x128x64, 256 threads",
       [] { return test::biasGeluGemm(GemmTiles{128, 128, 64, 256, 3}); }, 1, Blackwell::tcgen05},
      {"bias gelu 64x128x32, 128 threads",
       [] { return test::biasGeluGemm(GemmTiles{64, 128, 32, 128, 4}); }, 1, Blackwell::mmaSync},
      {"split-K from registers", [] { return test::splitKGemm(GemmTiles{128, 128, 64, 256, 3}, false); }, 1,
       Blackwell::tcgen05},
      {"split-K through a TMA reduce-add",
       [] { return test::splitKGemm(GemmTiles{128, 128, 64, 256, 3}, true); }, 1, Blackwell::tcgen05},
      {"split-K with overlap_mma",
       [] { return test::splitKGemm(GemmTiles{128, 128, 64, 256, 3}, false, true); }, 1, Blackwell::tcgen05},
  };
}

/// The checks of one case on one target.
void checkCase(const Case &c, const std::string &arch) {
  Program p = c.build();
  Kernel k = compileQuiet(p, arch);
  INFO(c.what << " on " << arch << "\n" << remarksText(k));
  const std::string &cu = k.cuda();
  CHECK(k.cubin().size() > 0);
  CHECK(k.spillBytes() == 0);
  CHECK_FALSE(saysNotPipelined(k));
  CHECK(unexpectedWarnings(k, {}).empty());
  if (arch == "sm_80") {
    CHECK(count(cu, "mma.sync.aligned.m16n8k16") >= c.gemms);
    CHECK(count(cu, "tessel::cp_async") > 0);
  }
  if (arch == "sm_90a") {
    // Each gemm on wgmma, fed by a TMA producer warpgroup whose stages the
    // consumers release on `empty`.
    CHECK(count(cu, "wgmma.mma_async") >= c.gemms);
    CHECK(count(cu, "mma.sync") == 0);
    CHECK(count(cu, "tessel::tma_load") > 0);
    CHECK(count(cu, "tessel::mbarrier_arrive(") > 0);
    CHECK((count(cu, "bar.sync 14, 256") > 0) == c.pingpong);
  }
  if (arch == "sm_100a") {
    CHECK(count(cu, "tessel::tma_load") > 0);
    if (c.blackwell == Blackwell::tcgen05) {
      CHECK(count(cu, "tcgen05.mma") >= c.gemms);
      CHECK(count(cu, "mma.sync") == 0);
      CHECK(remarksSaying(k, "the accumulator moves through tensor memory") == c.gemms);
    } else {
      CHECK(count(cu, "tcgen05.mma") == 0);
      CHECK(remarksSaying(k, "runs on mma.sync on sm_100a") == c.gemms);
    }
  }
}

} // namespace

TEST_CASE("outside inference kernels compile for every target, pipelined, without spills",
          "[outside][inference]") {
  for (const Case &c : cases())
    for (std::string arch : kArchs) checkCase(c, arch);
}

// The split-K loop with overlap_mma keeps one wgmma group running into the
// next iteration on sm_90a (wait_group 1), and a slice that walks no K step
// still adds the zero fill (the fill is kept for a loop that does not run).
TEST_CASE("outside: split-K with overlap_mma keeps a wgmma group in flight", "[outside][inference]") {
  Program p = test::splitKGemm({128, 128, 64, 256, 3}, false, true);
  Kernel k = compileQuiet(p, "sm_90a");
  INFO(k.cuda());
  CHECK(count(k.cuda(), "wgmma.wait_group.sync.aligned 1;") == 1);
}

// Fixed: PipelineOptions::overlap_mma says it is ignored off sm_90a, but on
// sm_100a it failed the compile: tessel-warp-specialize marked the loop
// for tessel-release-stages-late whatever the target, and that pass then
// found tcgen05 MMAs (the register accumulator moved through tensor
// memory), not wgmmas: "overlap_mma: this loop cannot keep its wgmmas
// running into the next iteration: its body does more than wgmmas from
// shared memory". The split-K kernel met it; the loop is marked only on
// sm_90a now (WarpSpecializeRoles.cpp, and
// tessel-warp-specialize-blackwell.mlir's @overlap_ignored).
TEST_CASE("overlap_mma is ignored on sm_100a (it failed the compile there)", "[outside][inference]") {
  for (test::GemmTiles tiles : {test::GemmTiles{128, 128, 64, 256, 3}, test::GemmTiles{64, 64, 64, 128, 2}}) {
    Program p = test::splitKGemm(tiles, false, true);
    Kernel k = compileQuiet(p, "sm_100a");
    INFO(remarksText(k));
    CHECK(k.cubin().size() > 0);
    CHECK(count(k.cuda(), "wgmma") == 0);
  }
}

// Fixed (message): reading an accumulator at a constant offset from the
// loop's index, as a merged gate/up weight's epilogue does (`acc(i, j +
// 64)`), is refused where the offset crosses threads. The error offered
// only "index it with the loop's indices, or read a reduction's result";
// it now names the form that works, a window of the fragment indexed with
// the loop's indices (swigluMergedGemm's).
TEST_CASE("an accumulator read at an offset is refused, pointing to windows", "[outside][inference]") {
  Program p("offset_read_of_accumulator");
  Expr m = p.sym("M"), kk = p.sym("K");
  Tensor x = p.tensor("x", {m, kk}, DType::bf16), w = p.tensor("w", {128, kk}, DType::bf16);
  Tensor out = p.tensor("out", {m, 64}, DType::bf16);
  p.kernel({ceil_div(m, 128)}, 256, [&](Expr by) {
    Buffer xs = alloc_shared({128, 64}, DType::bf16), ws = alloc_shared({128, 64}, DType::bf16);
    Buffer acc = alloc_fragment({128, 128}, DType::f32), res = alloc_fragment({128, 64}, DType::bf16);
    clear(acc);
    pipelined(ceil_div(kk, 64), 2, [&](Expr kt) {
      copy(x.tile({by * 128, kt * 64}, {128, 64}), xs);
      copy(w.tile({0, kt * 64}, {128, 64}), ws);
      gemm(xs, ws, acc, {.transpose_b = true});
    });
    parallel(128, 64, [&](Expr i, Expr j) {
      res(i, j) = cast(test::silu(acc(i, j)) * acc(i, j + 64), DType::bf16);
    });
    copy(res, out.tile({by * 128, 0}, {128, 64}));
  });
  for (std::string arch : kArchs) {
    std::string msg = test::errorOf([&] { compileQuiet(p, arch); });
    INFO(arch << ": " << msg);
    CHECK_THAT(msg, Catch::Contains("every thread must hold all of it") &&
                        Catch::Contains("index a window of it with them: f.tile({0, 64}, ...)(i, j)"));
  }
}

// Fixed (remark): on sm_100a with two warpgroups, the merged gate/up
// kernel's gemm stays on mma.sync. Moved to tensor memory, the accumulator
// would be read back a row a thread with each warpgroup holding half of
// the columns, so no thread holds a whole 64-column window. The remark
// said only "the accumulator's register layout is fixed by other code",
// which names neither the windows nor the way out (one warpgroup, or two
// accumulators as swigluGemm has); it now quotes the layout conflict the
// trial move met.
TEST_CASE("a gemm kept off tcgen05 by its accumulator's windows says so", "[outside][inference]") {
  Program p = test::swigluMergedGemm({128, 64, 64, 256, 3});
  Kernel k = compileQuiet(p, "sm_100a");
  INFO(remarksText(k));
  CHECK(k.spillBytes() == 0);
  CHECK(count(k.cuda(), "tcgen05.mma") == 0);
  CHECK(remarksSaying(k, "runs on mma.sync on sm_100a") == 1);
  CHECK(remarksSaying(k, "windows of this fragment take dimension 1 at least 128") == 1);
  // The same kernel on one warpgroup runs on tcgen05 (the case list).
}

// tanh is an Expr function (soft-capping and GELU wrote it with exp, as
// 1 - 2 / (e^2x + 1), for want of one): CUDA's tanhf on every target, in
// f32 for 16-bit operands, and refused for integers.
TEST_CASE("tanh is CUDA's tanhf on every target", "[outside][inference]") {
  Program p("tanh_of_bf16");
  Tensor x = p.tensor("x", {128}, DType::bf16), y = p.tensor("y", {128}, DType::bf16);
  p.kernel({1}, 128, [&](Expr) {
    Buffer f = alloc_fragment({128}, DType::bf16);
    copy(x.tile({0}, {128}), f);
    parallel(128, [&](Expr i) { f(i) = tanh(f(i) * 0.5); });
    copy(f, y.tile({0}, {128}));
  });
  for (std::string arch : kArchs) {
    INFO(arch);
    Kernel k = compileQuiet(p, arch);
    CHECK(k.cuda().find("tanhf(float(") != std::string::npos);
  }
  Program q("tanh_of_int");
  Tensor n = q.tensor("n", {32}, DType::i32);
  CHECK_THROWS_WITH(q.kernel({1}, 32, [&](Expr) {
    parallel(32, [&](Expr i) { n(i) = tanh(n(i)); });
  }),
                    Catch::Contains("this function needs a floating-point operand, got i32"));
}
