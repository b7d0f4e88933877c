//===- OutsideTrainingKernelTests.cpp - training kernels through every target -===//
//
// The kernels of tests/common/OutsideTrainingKernels.h through the
// pipeline, NVRTC and ptxas for sm_80, sm_90a and sm_100a: they compile
// without spills, every `pipelined` loop of several stages is pipelined (no
// remark says otherwise), and the warnings are only the expected ones.
//
// TESSEL_OUTSIDE_DUMP=<dir> writes each kernel's CUDA there, per target,
// and TESSEL_OUTSIDE_REMARKS=1 prints every compile's remarks.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "ErrorOf.h"
#include "OutsideChecks.h"
#include "OutsideTrainingKernels.h"
#include "tessel/dsl/Compile.h"

#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <functional>
#include <unistd.h>

using namespace tessel;

namespace {

const char *const kArchs[] = {"sm_80", "sm_90a", "sm_100a"};

using test::compileQuiet;
using test::count;
using test::remarksText;
using test::saysNotPipelined;
using test::unexpectedWarnings;

struct Case {
  std::string what;
  std::function<Program()> build;
  /// Warnings expected on sm_90a.
  std::vector<std::string> allowedWarnings;
  /// Whether the sm_90a build's loads are TMA.
  bool tmaOnHopper;
  /// Whether the sm_80 build loads global tiles with cp.async.
  bool cpAsyncOnAmpere = true;
};

std::vector<Case> cases() {
  // sm_80 gives no warnings. sm_90a (and sm_100a, which plans its
  // pipelines the same way) warns where a loop that would be split into a
  // TMA producer and consumers is not: a two-pass kernel has two pipelined
  // loops; a staged tile wider than 256 elements (one unswizzled panel; 1-D
  // chunks included) is a cp.async copy, not TMA.
  const std::string twoLoops = "the kernel has more than one pipelined loop";
  const std::string notAllTma = "its loads are not all TMA";
  return {
      {"layernorm bwd 4 rows x 256 cols, 128 threads, 3 stages",
       [] { return test::layerNormBackward(4, 256, 128, 3); }, {twoLoops}, true},
      {"layernorm bwd 8 rows x 128 cols, 256 threads, 2 stages",
       [] { return test::layerNormBackward(8, 128, 256, 2); }, {twoLoops}, true},
      {"cross entropy 2048 a chunk, 256 threads", [] { return test::crossEntropyFwdBwd(2048, 256, 3); },
       {notAllTma}, false},
      {"cross entropy 1024 a chunk, 128 threads", [] { return test::crossEntropyFwdBwd(1024, 128, 2); },
       {notAllTma}, false},
      {"cross entropy 256 a chunk, 128 threads", [] { return test::crossEntropyFwdBwd(256, 128, 4); },
       {twoLoops}, true},
      {"histogram 256 bins, 256 a chunk", [] { return test::histogram(256, 256, 16, 256); }, {}, true},
      {"histogram 256 bins, 1024 a chunk", [] { return test::histogram(256, 1024, 8, 256); }, {notAllTma},
       false},
      {"histogram 1000 bins", [] { return test::histogram(1000, 2048, 4, 256); }, {notAllTma}, false},
      // Copies outside pipelined loops: thread copies, no cp.async on sm_80.
      {"transpose 64x64, 128 threads", [] { return test::transpose2d(64, 128); }, {}, false, false},
      {"transpose 32x32, 256 threads", [] { return test::transpose2d(32, 256); }, {}, false, false},
      {"bshd->bhsd d64", [] { return test::bshdToBhsd(64, 32, 2, 128); }, {}, false, false},
      {"bshd->bhsd d128", [] { return test::bshdToBhsd(128, 16, 4, 256); }, {}, false, false},
      {"causal conv1d 32 rows x 4 steps, 128 channels",
       [] { return test::causalConv1dSilu(32, 4, 128, 128, 3); }, {}, true},
      {"causal conv1d 16 rows x 8 steps, 64 channels",
       [] { return test::causalConv1dSilu(16, 8, 64, 128, 2); }, {}, true},
      {"gemv bf16 split-K 8 rows x 256", [] { return test::gemvSplitK(DType::bf16, 8, 256, 128, 4); }, {},
       true},
      {"gemv bf16 split-K 8 rows x 512", [] { return test::gemvSplitK(DType::bf16, 8, 512, 128, 4); },
       {notAllTma}, false},
      {"gemv int8 split-K 16 rows x 256", [] { return test::gemvSplitK(DType::i8, 16, 256, 256, 4); }, {},
       true},
      {"gemv int8 split-K 16 rows x 512", [] { return test::gemvSplitK(DType::i8, 16, 512, 256, 4); },
       {notAllTma}, false},
      {"moe router E 64 top-2", [] { return test::moeRouterTopK(64, 2, 8, 128); }, {}, false, false},
      {"moe router E 160 top-8", [] { return test::moeRouterTopK(160, 8, 4, 128); }, {}, false, false},
  };
}

} // namespace

TEST_CASE("outside training kernels compile for every target, pipelined, without spills", "[outside]") {
  for (const Case &c : cases())
    for (std::string arch : kArchs) {
      Program p = c.build();
      Kernel k = compileQuiet(p, arch);
      INFO(c.what << " on " << arch << "\n" << remarksText(k));
      CHECK(k.cubin().size() > 0);
      CHECK(k.spillBytes() == 0);
      CHECK_FALSE(saysNotPipelined(k));
      if (arch == "sm_80") {
        CHECK(unexpectedWarnings(k, {}).empty());
        if (c.cpAsyncOnAmpere) CHECK(k.cuda().find("cp_async") != std::string::npos);
      }
      if (arch == "sm_90a") {
        CHECK(unexpectedWarnings(k, c.allowedWarnings).empty());
        if (c.tmaOnHopper) CHECK(k.cuda().find("tma_load") != std::string::npos);
        // A single pipelined loop whose loads are all TMA gets a producer
        // warpgroup; the consumers release each stage on its `empty`
        // mbarrier. (setmaxnreg budgets come only with two consumer
        // warpgroups.)
        if (c.tmaOnHopper && c.allowedWarnings.empty())
          CHECK(k.cuda().find("tessel::mbarrier_arrive(") != std::string::npos);
      }
      if (arch == "sm_100a") CHECK(unexpectedWarnings(k, c.allowedWarnings).empty());
    }
}

// The defects these kernels met, each as small as it reproduces. Open ones
// are marked DEFECT: they assert what happens now and say what should
// happen instead (the kernels work around them).

// Fixed: reduce_absmax over an i32
// fragment failed in the CUDA emitter ("the CUDA emitter cannot print
// 'math.absi'": integer reductions lower |x| to math.absi), while
// reduce_max, reduce_min and reduce_sum over the same fragment compiled.
// It compiles now, on every target, and folds in integers.
TEST_CASE("reduce_absmax over i32 compiles (once: the emitter could not print math.absi)", "[outside]") {
  Program p("absmax_i32");
  Tensor x = p.tensor("x", {4, 256}, DType::i32), out = p.tensor("out", {4}, DType::i32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer xf = alloc_fragment({4, 256}, DType::i32), r = alloc_fragment({4}, DType::i32);
    copy(x.tile({0, 0}, {4, 256}), xf);
    reduce_absmax(xf, r, 1);
    copy(r, out.tile({0}, {4}));
  });
  for (std::string arch : kArchs) {
    Kernel k = compileQuiet(p, arch);
    INFO(arch << "\n" << k.cuda());
    CHECK(k.cuda().find("max(") != std::string::npos);
    CHECK(k.cuda().find("fabsf(") == std::string::npos);
    CHECK(k.cuda().find("fmaxf(") == std::string::npos);
  }
}

// DEFECT: a window wider than a tensor's constant extent is refused when
// the program is built, though the README says a window of a global
// tensor may reach outside it (reading 0, dropping writes), and the same
// window past a symbolic extent is accepted. The MoE router's [rows, 256]
// window of [T, 160] logits met it (it stages a [rows, 160] tile instead).
// So is a constant offset before the tensor (`x.tile({-3, 0}, ...)`), where
// `t0 - 3` at t0 = 0 at run time is fine.
TEST_CASE("DEFECT: a window past a constant extent is refused, past a symbolic one it reads 0", "[outside]") {
  auto build = [](bool constantExtent, bool before) {
    Program p(std::string("wide_window_") + (constantExtent ? "const" : "sym") + (before ? "_before" : ""));
    Expr e = constantExtent ? Expr(160) : p.sym("E");
    Tensor x = p.tensor("x", {4, e}, DType::f32), y = p.tensor("y", {8, 256}, DType::f32);
    p.kernel({1}, 128, [&](Expr) {
      Buffer f = alloc_fragment({4, 256}, DType::f32);
      copy(before ? x.tile({-3, 0}, {4, 128}) : x.tile({0, 0}, {4, 256}),
           before ? f.tile({0, 0}, {4, 128}) : f);
      copy(f, y.tile({0, 0}, {4, 256}));
    });
    return p;
  };
  Program symbolic = build(false, false);
  CHECK(compileQuiet(symbolic, "sm_80").cubin().size() > 0);
  std::string wide = test::errorOf([&] { build(true, false); });
  CHECK_THAT(wide, Catch::Contains("tile [4, 256] does not fit in buffer [4, 160] (dimension 1)"));
  std::string before = test::errorOf([&] { build(true, true); });
  CHECK_THAT(before, Catch::Contains("lies outside buffer"));
}

// Atomic adds into a shared buffer from a loop's iterations commute and
// need no barrier between them: only one between the fill before the loop
// and the first adds, and one before the buffer is read after it. They
// were ordered by a block barrier every iteration (the histogram met it: a
// `bar.sync` per chunk among the consumers on sm_90a).
TEST_CASE("outside: shared atomics in a loop get no barrier between iterations", "[outside]") {
  Program p("shared_atomics_loop");
  Expr n = p.sym("N");
  Tensor v = p.tensor("v", {n}, DType::i32), out = p.tensor("out", {64}, DType::i32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer h = alloc_shared({64}, DType::i32, "h");
    fill(h, 0);
    serial(ceil_div(n, 128), [&](Expr c) {
      Buffer t = v.tile({c * 128}, {128});
      parallel(128, [&](Expr i) { atomic_add(h(t(i) & 63), 1); });
    });
    copy(h, out.tile({0}, {64}));
  });
  Kernel k = compileQuiet(p, "sm_80");
  const std::string &cu = k.cuda();
  size_t add = cu.find("tessel::atomic_add");
  REQUIRE(add != std::string::npos);
  size_t loop = cu.rfind("for (int", cu.rfind("for (int", add) - 1); // the serial loop
  size_t barrier = cu.rfind("__syncthreads()", add);
  INFO(cu);
  // The last barrier before the adds is the fill's, before the loop.
  REQUIRE(barrier != std::string::npos);
  CHECK(barrier < loop);
  // And one after the loop, before the copy reads the counts.
  CHECK(cu.find("__syncthreads()", add) != std::string::npos);
}

// A shared tile padded with annotate_layout (stride 72 bf16 = 144 bytes, the
// usual cure for a transposed read's bank conflicts) keeps 16-byte vector
// copies: it lost them to an element-by-element copy, with a remark that
// its destination "is not contiguous along the tile's last dimension (or
// has an affine layout)" though its last dimension has stride 1 (measured
// on an H200, transpose of 8192 x 8192 bf16 in 64 x 64 tiles: 2771 GB/s
// unpadded, 1946 GB/s padded). A stride that breaks 16-byte rows (65) still
// vectorizes the rows that are aligned and checks each vector; a map that
// transposes the tile moves one element at a time, and says so.
TEST_CASE("outside: padded shared rows are copied in 16-byte vectors", "[outside]") {
  Program plain = test::transpose2d(64, 128), padded = test::transpose2d(64, 128, 72),
          odd = test::transpose2d(64, 128, 65);
  for (std::string arch : kArchs) {
    INFO(arch);
    Kernel kp = compileQuiet(plain, arch), kq = compileQuiet(padded, arch),
           ko = compileQuiet(odd, arch);
    CHECK(kp.cuda().find("cp_async<16>") != std::string::npos);
    CHECK(kq.cuda().find("cp_async<16>") != std::string::npos);
    CHECK(ko.cuda().find("cp_async<16>") != std::string::npos);
    CHECK_THAT(remarksText(kq), !Catch::Contains("is not moved in 16-byte vectors"));
  }
  Program p("transposing_layout");
  Tensor x = p.tensor("x", {64, 64}, DType::bf16), y = p.tensor("y", {64, 64}, DType::bf16);
  p.kernel({1}, 128, [&](Expr) {
    Buffer s = alloc_shared({64, 64}, DType::bf16, "s");
    annotate_layout(s, {1, 64}); // column-major
    copy(x.tile({0, 0}, {64, 64}), s);
    copy(s, y.tile({0, 0}, {64, 64}));
  });
  Kernel k = compileQuiet(p, "sm_80");
  CHECK(k.cuda().find("cp_async<16>") == std::string::npos);
  CHECK_THAT(remarksText(k), Catch::Contains("its affine layout does not step by one element"));
}

// A fragment reduced into a shared buffer (to stage LayerNorm's column sums
// for a TMA reduce-add) goes through a fragment of the buffer's shape; it
// was refused ("the reduction of a fragment goes into a fragment") though
// the header says reductions work on shared or fragment buffers. A TMA
// reduce-add on sm_80 is made by the threads' atomics, with a remark (it
// was an error, "TMA copies need sm_90a", where a pipelined loop's TMA
// loads fall back to cp.async).
TEST_CASE("outside: a fragment reduced into shared memory, and a TMA reduce-add on sm_80", "[outside]") {
  Program p("reduce_into_shared");
  Tensor x = p.tensor("x", {4, 256}, DType::f32), out = p.tensor("out", {256}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer f = alloc_fragment({4, 256}, DType::f32), cs = alloc_shared({256}, DType::f32);
    copy(x.tile({0, 0}, {4, 256}), f);
    fill(cs, 1.0);
    reduce_sum(f, cs, 0, /*clear=*/false); // adds to the buffer's ones
    copy(cs, out.tile({0}, {256}));
  });
  for (std::string arch : kArchs) {
    Kernel k = compileQuiet(p, arch);
    INFO(arch << "\n" << k.cuda());
    CHECK(k.spillBytes() == 0);
  }
  Program q("reduce_add_on_every_target");
  Tensor sums = q.tensor("out", {256}, DType::i32);
  q.kernel({1}, 256, [&](Expr) {
    Buffer h = alloc_shared({256}, DType::i32, "h");
    fill(h, 1);
    atomic_add(sums.tile({0}, {256}), h, MemoryOrder::relaxed, AtomicPath::tma);
  });
  CHECK(compileQuiet(q, "sm_90a").cuda().find("tessel::tma_reduce_add") != std::string::npos);
  Kernel ampere = compileQuiet(q, "sm_80");
  CHECK(ampere.cuda().find("tessel::tma_reduce_add") == std::string::npos);
  CHECK(ampere.cuda().find("atomic") != std::string::npos);
  CHECK(ampere.cuda().find("fence.proxy.async") == std::string::npos);
  CHECK_THAT(remarksText(ampere), Catch::Contains("this TMA reduce-add is made by the threads' "
                                                  "atomics: sm_80 has no TMA"));
}

// A full reduction's [1] fragment read in scalar code (to carry an online
// softmax's maximum and sum through serial(), say) is refused at the
// user's line with a message that says where fragments are read: inside
// parallel(), where one every thread holds whole is read at any index. It
// said "its elements are spread over the threads", which is not so for
// this fragment. (Reading it in scalar code is not supported; the
// cross-entropy kernel keeps its running values in [1] fragments updated
// by parallel(1, ...).)
TEST_CASE("a fully reduced fragment read in scalar code is refused, pointing to parallel()",
          "[outside]") {
  std::string msg = test::errorOf([&] {
    Program p("scalar_of_reduction");
    Tensor x = p.tensor("x", {256}, DType::f32), y = p.tensor("y", {1}, DType::f32);
    p.kernel({1}, 128, [&](Expr) {
      Buffer f = alloc_fragment({256}, DType::f32), s = alloc_fragment({1}, DType::f32);
      copy(x.tile({0}, {256}), f);
      reduce_sum(f, s, 0);
      Expr total = s(0); // the line the error names
      Buffer o = y.tile({0}, {1});
      parallel(1, [&](Expr z) { o(z) = total * 2.0; });
    });
    compileQuiet(p, "sm_90a");
  });
  INFO(msg);
  CHECK_THAT(msg, Catch::Contains("OutsideTrainingKernelTests.cpp") &&
                      Catch::Contains("a fragment is read or written outside parallel()") &&
                      Catch::Contains("a full reduction's result, is read there at any index"));
}

// On sm_90a and sm_100a a reduction of a shared tile into a shared buffer,
// then a copy of that buffer to global memory (a TMA store, the async
// proxy), is fenced after the reduction's thread writes as element code's
// are. The fence was missing and tessel-verify-sync rejected the program
// ("missing proxy fence: 'sums' is written by threads at ..."); running
// the GPU suite met it in "integer reductions are exact past 2^24".
TEST_CASE("a shared-to-shared reduction stored by TMA is fenced", "[outside]") {
  auto build = [](bool reduction) {
    Program p(reduction ? "reduce_shared_then_store" : "element_code_shared_then_store");
    Tensor x = p.tensor("x", {4, 256}, DType::f32), out = p.tensor("out", {4}, DType::f32);
    p.kernel({1}, 128, [&](Expr) {
      Buffer xs = alloc_shared({4, 256}, DType::f32, "xs");
      copy(x.tile({0, 0}, {4, 256}), xs);
      Buffer s = alloc_shared({4}, DType::f32, "sums");
      if (reduction) reduce_sum(xs, s, 1);
      else parallel(4, [&](Expr i) { s(i) = xs(i, 0) + xs(i, 1); });
      copy(s, out.tile({0}, {4}));
    });
    return p;
  };
  Program elementCode = build(false), reduction = build(true);
  CHECK(compileQuiet(elementCode, "sm_90a").cuda().find("fence.proxy.async") != std::string::npos);
  CHECK(compileQuiet(reduction, "sm_80").cubin().size() > 0);
  for (std::string arch : {"sm_90a", "sm_100a"}) {
    Kernel k = compileQuiet(reduction, arch);
    INFO(arch << "\n" << k.cuda());
    CHECK(k.cuda().find("fence.proxy.async") != std::string::npos);
  }
}
