//===- OutsideServingKernelTests.cpp - serving kernels through every target -===//
//
// The kernels of tests/common/OutsideServingKernels.h through the pipeline,
// NVRTC and ptxas for sm_80, sm_90a and sm_100a: they compile without
// spills, every `pipelined` loop of several stages is pipelined (no remark
// says otherwise), and the warnings are only the expected ones.
//
// TESSEL_OUTSIDE_DUMP=<dir> writes each kernel's CUDA there, per target,
// and TESSEL_OUTSIDE_REMARKS=1 prints every compile's remarks.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "OutsideChecks.h"
#include "OutsideServingKernels.h"
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

struct Case {
  std::string what;
  std::function<Program()> build;
  /// Warnings expected on sm_90a and sm_100a.
  std::vector<std::string> allowedWarnings;
  /// Whether the sm_90a build's loads are TMA.
  bool tmaOnHopper;
  /// Whether the sm_80 build loads global tiles with cp.async.
  bool cpAsyncOnAmpere = true;
};

std::vector<Case> cases() {
  // sm_80 gives no warnings. sm_90a (and sm_100a, which plans its
  // pipelines the same way) warns where a loop that would be split into a
  // TMA producer and consumers is not: GroupNorm has three pipelined loops;
  // a 1-D chunk wider than 256 elements, a bounded tensor and rows gathered
  // into the rows of a shared tile are cp.async copies, not TMA.
  const std::string manyLoops = "the kernel has more than one pipelined loop";
  const std::string notAllTma = "its loads are not all TMA";
  return {
      {"cumsum f32 4 x 256 threads", [] { return test::cumsumRows(DType::f32, 4, 256, 3); }, {notAllTma},
       false},
      {"cumsum f32 2 x 128 threads", [] { return test::cumsumRows(DType::f32, 2, 128, 3); }, {}, true},
      {"cumsum i32 8 x 128 threads", [] { return test::cumsumRows(DType::i32, 8, 128, 2); }, {notAllTma},
       false},
      {"cumsum i32 2 x 128 threads", [] { return test::cumsumRows(DType::i32, 2, 128, 4); }, {}, true},
      // No pipelined loop: copies through registers only.
      {"paged kv append 8 heads x 128", [] { return test::pagedKvAppend(8, 128, 16, 128); }, {}, false,
       false},
      {"paged kv append 6 heads x 80", [] { return test::pagedKvAppend(6, 80, 16, 128); }, {}, false, false},
      {"segment mean 16 x 128, select", [] { return test::segmentMeanPool(16, 128, 128, 3, false); }, {},
       true},
      {"segment mean 32 x 64, select", [] { return test::segmentMeanPool(32, 64, 128, 4, false); }, {}, true},
      {"segment mean 16 x 128, bounded", [] { return test::segmentMeanPool(16, 128, 128, 3, true); },
       {notAllTma}, false},
      {"group norm 8 groups x 10", [] { return test::groupNormNhwc(8, 10, 16, 128, 2); }, {manyLoops}, true},
      {"group norm 4 groups x 30", [] { return test::groupNormNhwc(4, 30, 8, 128, 2); }, {manyLoops}, true},
      {"group norm 2 groups x 20", [] { return test::groupNormNhwc(2, 20, 32, 128, 3); }, {manyLoops}, true},
      {"embedding 4 tokens x 256", [] { return test::embeddingLookup(4, 256, 128, 3); }, {notAllTma}, false},
      {"embedding 8 tokens x 128", [] { return test::embeddingLookup(8, 128, 256, 4); }, {notAllTma}, false},
      {"greedy sample 2048 a chunk", [] { return test::greedySample(2048, 256, 256, 3); }, {notAllTma},
       false},
      {"greedy sample 256 a chunk", [] { return test::greedySample(256, 64, 128, 4); }, {}, true},
  };
}

} // namespace

TEST_CASE("outside serving kernels compile for every target, pipelined, without spills",
          "[outside][serving]") {
  for (const Case &c : cases())
    for (std::string arch : kArchs) {
      Program p = c.build();
      Kernel k = compileQuiet(p, arch);
      INFO(c.what << " on " << arch << "\n" << remarksText(k));
      CHECK(k.cubin().size() > 0);
      CHECK(k.spillBytes() == 0);
      CHECK_FALSE(saysNotPipelined(k));
      // No local memory: the serial loops' carried values, the [1]
      // fragments and the grouped fragments stay in registers.
      CHECK(k.ptx().find("ld.local") == std::string::npos);
      if (arch == "sm_80") {
        CHECK(unexpectedWarnings(k, {}).empty());
        if (c.cpAsyncOnAmpere) CHECK(k.cuda().find("cp_async") != std::string::npos);
      }
      if (arch == "sm_90a") {
        CHECK(unexpectedWarnings(k, c.allowedWarnings).empty());
        if (c.tmaOnHopper) CHECK(k.cuda().find("tma_load") != std::string::npos);
        // A single pipelined loop whose loads are all TMA gets a producer
        // warpgroup; the consumers release each stage on its `empty`
        // mbarrier.
        if (c.tmaOnHopper && c.allowedWarnings.empty())
          CHECK(k.cuda().find("tessel::mbarrier_arrive(") != std::string::npos);
      }
      if (arch == "sm_100a") CHECK(unexpectedWarnings(k, c.allowedWarnings).empty());
    }
}

// The paged append moves each token's rows through registers: no shared
// memory, so no barrier; the block-table read is guarded (a position past
// the table's width must not read 0 and overwrite block 0).
TEST_CASE("outside: the paged KV append needs no barrier and checks the table's width",
          "[outside][serving]") {
  Program p = test::pagedKvAppend(8, 128, 16, 128);
  Kernel k = compileQuiet(p, "sm_80");
  INFO(k.cuda());
  CHECK(count(k.cuda(), "__syncthreads") == 0);
  CHECK(count(k.ptx(), "bar.sync") == 0);
  // The sequence search is a loop over B; 16-byte vectors move the rows.
  CHECK(k.cuda().find("copy_bytes<16>") != std::string::npos);
}

// A one-row window of a shared tile written with `drop` (`rows.tile({i,
// 0}, {drop, 256})`, the natural way to name row i) is a cp.async copy on
// sm_90a. The remark said "the shared side is a window of a buffer that is
// not two-dimensional", though the buffer is [4, 256]: it is the window
// that has one dimension. The remark now says so and what TMA takes.
TEST_CASE("a one-row window of a shared tile says why it is not TMA", "[outside][serving]") {
  Program p("one_row_windows");
  Expr t = p.sym("T"), d = p.sym("D");
  Tensor ids = p.tensor("ids", {t}, DType::i32), table = p.tensor("table", {t, d}, DType::bf16);
  Tensor out = p.tensor("out", {t, d}, DType::bf16);
  p.kernel({ceil_div(t, 4)}, 128, [&](Expr bx) {
    Buffer rows = alloc_shared({4, 256}, DType::bf16, "rows");
    Buffer o = alloc_fragment({4, 256}, DType::bf16);
    pipelined(ceil_div(d, 256), 3, [&](Expr kc) {
      for (int i = 0; i < 4; ++i)
        copy(table.tile({cast(ids(bx * 4 + i), DType::index), kc * 256}, {drop, 256}),
             rows.tile({i, 0}, {drop, 256}));
      parallel(4, 256, [&](Expr i, Expr j) { o(i, j) = rows(i, j); });
      copy(o, out.tile({bx * 4, kc * 256}, {4, 256}));
    });
  });
  Kernel k = compileQuiet(p, "sm_90a");
  std::string text = remarksText(k);
  INFO(text);
  CHECK_FALSE(saysNotPipelined(k));
  CHECK(text.find("a window of a buffer that is not two-dimensional") == std::string::npos);
  CHECK_THAT(text, Catch::Contains("the shared side is a 1-dimensional window of a two-dimensional "
                                   "buffer (a TMA window is whole rows, [rows, 256]"));
}

// DEFECT (performance): a copy smaller than the block runs on the block's
// first threads, every copy the same ones. The embedding lookup gathers a
// 512-byte row per token into a shared tile (32 16-byte vectors): all 8
// row copies of a stage are issued by warp 0 (threads 0-31, 8 cp.async
// each) while warps 1-3 issue none. TileLowering::forEachElement
// (TesselLowerTileOps.cpp) starts every thread-strided loop at threadIdx.x;
// starting each copy at a rotating offset would spread them.
TEST_CASE("DEFECT: small copies in a row all run on the block's first warp", "[outside][serving]") {
  Program p = test::embeddingLookup(4, 256, 128, 3);
  Kernel k = compileQuiet(p, "sm_80");
  const std::string &cu = k.cuda();
  // Every copy loop is `for (int vN = <threadIdx.x>; vN < <32>; vN += <128>)`.
  auto constantNamed = [&](const std::string &value) {
    size_t at = cu.find(" = " + value + ";");
    REQUIRE(at != std::string::npos);
    size_t start = cu.rfind(' ', at - 1) + 1;
    return cu.substr(start, at - start);
  };
  std::string tid = constantNamed("threadIdx.x"), vectors = constantNamed("32"),
              threads = constantNamed("128");
  size_t loops = 0;
  for (size_t at = cu.find("for (int "); at != std::string::npos; at = cu.find("for (int ", at + 1)) {
    std::string head = cu.substr(at, cu.find(')', at) - at);
    loops += head.find(" = " + tid + ";") != std::string::npos &&
             head.find(" < " + vectors + ";") != std::string::npos &&
             head.find(" += " + threads) != std::string::npos;
  }
  INFO(cu);
  // Now: 2 tables x 4 tokens x (2 prologue stages + the loop's) = 24 copies,
  // each on threads [0, 32).
  CHECK(loops == 24);
}

// The greedy sampler patches penalised logits into the stage its TMA load
// filled; the producer later refills that stage by TMA (the async proxy).
// The consumers' generic writes were released by the mbarrier arrival
// alone, with no fence.proxy.async, so the refill was not ordered after
// them (tessel-verify-sync checks async-proxy reads of generic writes, not
// async-proxy writes). The writes are now fenced, as before an async read;
// sm_80's cp.async refills are generic-proxy writes and need no fence.
TEST_CASE("a TMA stage rewritten by threads is fenced before its refill", "[outside][serving]") {
  for (std::string arch : {"sm_90a", "sm_100a"}) {
    Program p = test::greedySample(256, 64, 128, 4);
    Kernel k = compileQuiet(p, arch);
    const std::string &cu = k.cuda();
    INFO(arch << "\n" << cu);
    REQUIRE(cu.find("tma_load") != std::string::npos);
    // The fence follows the patching loop (the only generic write of the
    // stage) and precedes the stage's release.
    size_t fence = cu.find("fence.proxy.async.shared::cta");
    REQUIRE(fence != std::string::npos);
    CHECK(cu.find("tessel::mbarrier_arrive(", fence) != std::string::npos);
  }
  Program p = test::greedySample(256, 64, 128, 4);
  CHECK(compileQuiet(p, "sm_80").cuda().find("fence.proxy.async") == std::string::npos);
}
