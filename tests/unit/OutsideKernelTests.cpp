//===- OutsideKernelTests.cpp - a new user's kernels through every target -===//
//
// The kernels of tests/common/OutsideKernels.h through the pipeline, NVRTC
// and ptxas for sm_80, sm_90a and sm_100a: they compile without spills,
// every `pipelined` loop of several stages is pipelined (no remark says
// otherwise), and the warnings are only the expected ones. Then the
// defects the kernels met, each written as small as it reproduces: those
// fixed assert the fix; those still open are marked DEFECT, assert what
// happens now and say what should happen instead (the kernels work around
// them).
//
// TESSEL_OUTSIDE_DUMP=<dir> writes each kernel's CUDA there, per target.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "ErrorOf.h"
#include "OutsideChecks.h"
#include "OutsideKernels.h"
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
  /// Warnings expected on sm_90a (a two-pass kernel has two pipelined
  /// loops, which are never warp-specialized; loads TMA cannot carry).
  std::vector<std::string> allowedWarnings;
  /// Whether the sm_90a build's loads are TMA.
  bool tmaOnHopper;
  /// Whether the sm_80 build loads global tiles with cp.async (a staged
  /// copy; a copy straight into registers has none).
  bool cpAsyncOnAmpere = true;
  /// Spill bytes ptxas may report on sm_80 (0 elsewhere).
  int64_t spillOnAmpere = 0;
};

std::vector<Case> cases() {
  const std::string twoLoops = "the kernel has more than one pipelined loop";
  const std::string notAllTma = "its loads are not all TMA";
  return {
      {"rmsnorm 4 rows x 256 cols, 128 threads", [] { return test::rmsNormResidual(4, 256, 128, 3); },
       {twoLoops}, true},
      {"rmsnorm 1 row x 1024 cols, 256 threads", [] { return test::rmsNormResidual(1, 1024, 256, 2); },
       {notAllTma}, false},
      {"rope 4 heads, f32 tables, 128 threads", [] { return test::ropeInPlace(4, DType::f32, 128); }, {},
       false},
      {"rope 8 heads, bf16 tables, 256 threads", [] { return test::ropeInPlace(8, DType::bf16, 256); },
       {}, false},
      // Rough edge: on sm_80 (mma.sync, 64 x 128 f32 accumulator over 128
      // threads, 64 gathered row addresses a step) ptxas spills ~100 bytes.
      {"moe grouped gemm, 3 stages", [] { return test::moeGroupedGemm(3); }, {notAllTma}, false,
       true, 128},
      {"int8 quantize bf16 8 x 256, 256 threads",
       [] { return test::quantizeRowsInt8(DType::bf16, 8, 256, 256); }, {twoLoops}, true},
      {"int8 quantize f16 2 x 512, 128 threads",
       [] { return test::quantizeRowsInt8(DType::f16, 2, 512, 128); }, {notAllTma}, false},
      {"int8 dequantize to bf16", [] { return test::dequantizeRowsInt8(DType::bf16, 128); }, {}, false,
       false},
      {"int8 dequantize to f32", [] { return test::dequantizeRowsInt8(DType::f32, 256); }, {}, false,
       false},
      {"softmax top-1 bf16, 2048 a chunk, 256 threads",
       [] { return test::softmaxTop1(DType::bf16, 2048, 256); }, {notAllTma}, false},
      {"softmax top-1 f32, 256 a chunk, 128 threads",
       [] { return test::softmaxTop1(DType::f32, 256, 128); }, {twoLoops}, true},
  };
}

} // namespace

TEST_CASE("outside kernels compile for every target, pipelined, without spills", "[outside]") {
  for (const Case &c : cases())
    for (std::string arch : kArchs) {
      Program p = c.build();
      Kernel k = compileQuiet(p, arch);
      INFO(c.what << " on " << arch << "\n" << remarksText(k));
      CHECK(k.cubin().size() > 0);
      CHECK(k.spillBytes() <= (arch == "sm_80" ? c.spillOnAmpere : 0));
      // Every `pipelined` loop here has 2 or 3 stages: none may fall back
      // to loads in place.
      CHECK_FALSE(saysNotPipelined(k));
      if (arch == "sm_80") {
        CHECK(unexpectedWarnings(k, {}).empty());
        if (c.cpAsyncOnAmpere) CHECK(k.cuda().find("cp_async") != std::string::npos);
      }
      if (arch == "sm_90a") {
        CHECK(unexpectedWarnings(k, c.allowedWarnings).empty());
        if (c.tmaOnHopper) CHECK(k.cuda().find("tma_load") != std::string::npos);
      }
    }
}

TEST_CASE("outside kernels: the MoE gemm runs on wgmma and gathers with cp.async", "[outside]") {
  Program p = test::moeGroupedGemm(3);
  Kernel k = compileQuiet(p, "sm_90a");
  INFO(remarksText(k));
  CHECK(k.cuda().find("wgmma.mma_async") != std::string::npos);
  CHECK(k.cuda().find("cp_async<16>") != std::string::npos);
  // The weights (a whole shared buffer) still come by TMA.
  CHECK(k.cuda().find("tma_load") != std::string::npos);
}

TEST_CASE("outside kernels: the MoE scatter through the token index is guarded", "[outside]") {
  Program p = test::moeGroupedGemm(3);
  Kernel k = compileQuiet(p, "sm_90a");
  // The epilogue's scatter store: a row past the expert's end is token T
  // (past y) and the columns of the last block may pass N, so it must be
  // guarded by both extents.
  const std::string &cu = k.cuda();
  size_t store = cu.rfind("p10[");
  REQUIRE(store != std::string::npos);
  CHECK(cu.rfind("if (", store) > cu.rfind("#pragma unroll", store));
}

// The README's promise: an index that may leave its tensor reads 0 there
// and drops a write. That holds for windows (x.tile(...)) and bounded
// views, and for element code that indexes a kernel tensor directly
// (`table(off(i))`, a scalar `idx(m0 + 5)` in the kernel body), which was
// once emitted as a plain `p0[v4]`: TileLowering::lowerElementAccesses
// rewrote only accesses of tile buffers, not of kernel arguments.
TEST_CASE("element code indexing a tensor directly is bounds-checked", "[outside]") {
  auto build = [](bool window) {
    Program p(window ? "gather_window" : "gather_direct");
    Tensor table = p.tensor("table", {256}, DType::f32);
    Tensor off = p.tensor("off", {128}, DType::i32);
    Tensor y = p.tensor("y", {128}, DType::f32);
    p.kernel({1}, 128, [&](Expr) {
      if (window) {
        Buffer t = table.tile({0}, {256});
        parallel(128, [&](Expr i) { y(i) = t(off(i)); });
      } else {
        parallel(128, [&](Expr i) { y(i) = table(off(i)); });
      }
    });
    return p;
  };
  Program windowed = build(true), direct = build(false);
  Kernel kw = compileQuiet(windowed, "sm_90a"), kd = compileQuiet(direct, "sm_90a");
  INFO(kd.cuda());
  CHECK(kw.cuda().find("if (") != std::string::npos); // the window's read is guarded
  // Guarded the same way: off(i) may point past the table.
  CHECK(kd.cuda().find("if (") != std::string::npos);
}

// A fragment first written by a parallel loop that also reads a
// reduction's result at the row index (`yf(i, j) = xs(i, j) * s(i)`, s =
// reduce_sum(xf, ...)) takes the reduced fragment's layout, which holds
// s(i) wherever it holds row i. It once took s's layout extended by
// registers over j, so every thread held whole rows: a compile error
// ("fragments need 256 32-bit registers per thread") at 256 columns and 32
// times the work at 32.
TEST_CASE("a fragment written beside a reduction's result takes the reduced fragment's layout", "[outside]") {
  auto build = [](int64_t cols) {
    Program p("broadcast_replicates_" + std::to_string(cols));
    Expr m = p.sym("M");
    Tensor x = p.tensor("x", {m, cols}, DType::f32), y = p.tensor("y", {m, cols}, DType::f32);
    p.kernel({ceil_div(m, 4)}, 128, [&](Expr bx) {
      Buffer xs = alloc_shared({4, cols}, DType::f32, "xs");
      Buffer xf = alloc_fragment({4, cols}, DType::f32, "xf");
      Buffer s = alloc_fragment({4}, DType::f32, "s");
      Buffer yf = alloc_fragment({4, cols}, DType::f32, "yf");
      copy(x.tile({bx * 4, 0}, {4, cols}), xs);
      copy(xs, xf);
      reduce_sum(xf, s, 1);
      parallel(4, cols, [&](Expr i, Expr j) { yf(i, j) = xs(i, j) * s(i); });
      copy(yf, y.tile({bx * 4, 0}, {4, cols}));
    });
    return p;
  };
  // 4 x cols floats over 128 threads: cols / 32 a thread, as xf holds them.
  for (int64_t cols : {32, 256}) {
    Program p = build(cols);
    Kernel k = compileQuiet(p, "sm_90a");
    std::string xf, yf;
    for (const BufferLayout &l : k.layouts()) {
      if (l.name == "xf") xf = l.layout;
      if (l.name == "yf") yf = l.layout;
    }
    INFO(cols << " columns: xf " << xf << ", yf " << yf);
    CHECK(!xf.empty());
    CHECK(yf == xf);
    CHECK(yf.find("lane = [[0, 0], [0, 0], [0, 0], [0, 0], [0, 0]]") == std::string::npos);
  }
}

// Two pipelined loops that stage through the same shared buffer (a
// two-pass row kernel: absmax, then quantise) are both pipelined: each
// rewrites the buffer before reading it, so neither can see a stage of the
// other's, and the buffer's stages serve both (one allocation). The second
// loop's first loads wait at a barrier for every thread to be done with
// the first loop. (Both were once refused: "its buffer is used outside the
// loop by 'memref.load'".) A read after a loop that no write of the whole
// buffer precedes would see whichever stage was loaded last: that loop is
// still refused, and the remark names the read as the user wrote it.
TEST_CASE("a staging buffer shared by two pipelined loops serves both", "[outside]") {
  enum Form { shared, separate, readAfter };
  auto build = [](Form form) {
    Program p(form == shared ? "shared_staging" : form == separate ? "separate_staging"
                                                                   : "shared_staging_read_after");
    Expr m = p.sym("M"), c = p.sym("C");
    Tensor x = p.tensor("x", {m, c}, DType::f16), y = p.tensor("y", {m, c}, DType::f16);
    p.kernel({ceil_div(m, 2)}, 128, [&](Expr bx) {
      Buffer xs = alloc_shared({2, 256}, DType::f16, "x");
      Buffer xs2 = form == separate ? alloc_shared({2, 256}, DType::f16, "x_again") : xs;
      Buffer xf = alloc_fragment({2, 256}, DType::f32, "xf");
      Buffer amax = alloc_fragment({2}, DType::f32, "amax");
      fill(amax, 0.0);
      pipelined(ceil_div(c, 256), 3, [&](Expr kt) {
        copy(x.tile({bx * 2, kt * 256}, {2, 256}), xs);
        copy(xs, xf);
        reduce_absmax(xf, amax, 1, false);
      });
      if (form == readAfter) copy(xs, xf); // the last stage loaded, whichever it is
      pipelined(ceil_div(c, 256), 4, [&](Expr kt) {
        // Two windows that together write the whole buffer.
        copy(x.tile({bx * 2, kt * 256}, {1, 256}), xs2.tile({0, 0}, {1, 256}));
        copy(x.tile({bx * 2 + 1, kt * 256}, {1, 256}), xs2.tile({1, 0}, {1, 256}));
        copy(xs2, xf);
        parallel(2, 256, [&](Expr i, Expr j) { xf(i, j) = xf(i, j) / amax(i); });
        copy(xf, y.tile({bx * 2, kt * 256}, {2, 256}));
      });
    });
    return p;
  };
  for (std::string arch : kArchs) {
    Program one = build(shared), two = build(separate);
    Kernel k = compileQuiet(one, arch), k2 = compileQuiet(two, arch);
    std::string text = remarksText(k);
    INFO(arch << "\n" << text);
    CHECK_FALSE(saysNotPipelined(k));
    CHECK(count(text, "is not loaded ahead") == 0);
    // One allocation of the deeper loop's 4 stages, where buffers of their
    // own take 3 more stages of 2 x 256 halves.
    CHECK(k.spec().sharedBytes + 3 * 2 * 256 * 2 == k2.spec().sharedBytes);
    Program after = build(readAfter);
    Kernel r = compileQuiet(after, arch);
    std::string refused = remarksText(r);
    INFO(refused);
    CHECK(count(refused, "this loop of 3 stages is not pipelined") == 1);
    CHECK(count(refused, "this loop of 4 stages is not pipelined") == 0);
    CHECK(refused.find("its buffer is read after the loop by the copy at") != std::string::npos);
    CHECK(refused.find("OutsideKernelTests.cpp") != std::string::npos);
  }
}

// A pipelined loop whose cp.async loads fill a gemm operand that wgmma
// reads (sm_90a) fences the proxies after its cp.async wait: cp.async and
// the copies' unaligned fallback (rows of a K that is not a multiple of 8)
// write through the generic proxy, wgmma reads through the async one.
// (tessel-software-pipeline once asked whether wgmma reads the stages after
// moving the loop body away, found no gemm, and left the fence out;
// tessel-verify-sync now rejects the kernel without it.)
TEST_CASE("cp.async-fed wgmma operands are fenced after each wait", "[outside]") {
  Program p = test::moeGroupedGemm(3);
  Kernel k = compileQuiet(p, "sm_90a");
  CHECK(k.cuda().find("wgmma.mma_async") != std::string::npos);
  CHECK(k.cuda().find("cp.async.wait_group") != std::string::npos);
  CHECK(k.cuda().find("fence.proxy.async") != std::string::npos);
  // The same with a whole-tile cp.async load (a bounded tensor).
  Program q("bounded_a_wgmma");
  Expr m = q.sym("M"), kk = q.sym("K");
  Tensor a = q.tensor("a", {m, kk}, DType::bf16), b = q.tensor("b", {kk, 128}, DType::bf16);
  Tensor c = q.tensor("c", {64, 128}, DType::f32);
  q.kernel({1}, 128, [&](Expr) {
    Buffer as = alloc_shared({64, 64}, DType::bf16), bs = alloc_shared({64, 128}, DType::bf16);
    Buffer acc = alloc_fragment({64, 128}, DType::f32);
    clear(acc);
    pipelined(ceil_div(kk, 64), 3, [&](Expr kt) {
      copy(a.bounded({m, kk}).tile({0, kt * 64}, {64, 64}), as);
      copy(b.tile({kt * 64, 0}, {64, 128}), bs);
      gemm(as, bs, acc);
    });
    copy(acc, c.tile({0, 0}, {64, 128}));
  });
  Kernel kq = compileQuiet(q, "sm_90a");
  CHECK(kq.cuda().find("wgmma.mma_async") != std::string::npos);
  CHECK(kq.cuda().find("fence.proxy.async") != std::string::npos);
}

// Integer reductions stay in integers: an argmin over i32 indices (the
// softmax's top-1 reduces i32 now) compiles for every target and folds with
// integer min, where reducing through f32 would round indices past 2^24.
// A float reduced into an integer buffer is refused at the user's line.
TEST_CASE("reduce_min over i32 indices reduces in integers", "[outside]") {
  Program p("argmin_i32");
  Tensor x = p.tensor("x", {256}, DType::f32), out = p.tensor("out", {1}, DType::i32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer ix = alloc_fragment({256}, DType::i32), best = alloc_fragment({1}, DType::i32);
    Buffer xt = x.tile({0}, {256});
    parallel(256, [&](Expr j) { ix(j) = select(xt(j) > 0.0, cast(j, DType::i32), Expr(1 << 30)); });
    reduce_min(ix, best, 0);
    copy(best, out.tile({0}, {1}));
    Buffer largest = alloc_fragment({1}, DType::i32);
    reduce_absmax(ix, largest, 0); // |x| of an integer, in integers
    copy(largest, out.tile({0}, {1}));
  });
  for (std::string arch : kArchs) {
    Kernel k = compileQuiet(p, arch);
    INFO(k.cuda());
    CHECK(k.cuda().find("min(") != std::string::npos);
    CHECK(k.cuda().find("fminf(") == std::string::npos);
    CHECK(k.cuda().find("__int_as_float") != std::string::npos); // partials across warps
  }
  std::string msg = test::errorOf([&] {
    Program q("float_into_int");
    q.kernel({1}, 128, [&](Expr) {
      Buffer v = alloc_fragment({256}, DType::f32), n = alloc_fragment({1}, DType::i32);
      fill(v, 1.0);
      reduce_sum(v, n, 0); // refused here, as the program is built
    });
  });
  CHECK_THAT(msg, Catch::Contains("OutsideKernelTests.cpp") &&
                      Catch::Contains("reduce works on floating-point buffers, or on signed integer") &&
                      Catch::Contains("'f32' into 'i32'"));
}

// Remarks of a gather: the 64 row copies into windows of the staged tile
// are made at one line of the program and declined for one reason, which
// is said once (it was said 64 times a target). A [rows, 512] bf16 tile
// (1 KB rows, whole 16-byte units) is refused TMA because its unswizzled
// rows are wider than a box's 256 elements, and the remark says so (it
// once said the rows were not whole 16-byte units); the loop then runs
// without a producer.
TEST_CASE("a gather's row copies say their reason once; a wide row names the box limit", "[outside]") {
  Program moe = test::moeGroupedGemm(3);
  Kernel k = compileQuiet(moe, "sm_90a");
  INFO(remarksText(k));
  CHECK(count(remarksText(k), "this load is a cp.async copy, not TMA") == 1);
  Program rms = test::rmsNormResidual(4, 512, 128, 3);
  Kernel r = compileQuiet(rms, "sm_90a");
  CHECK(count(remarksText(r), "its rows are 512 elements wide in one unswizzled panel, and a TMA box "
                              "row holds at most 256") >= 4);
  CHECK(count(remarksText(r), "not whole 16-byte units") == 0);
}
