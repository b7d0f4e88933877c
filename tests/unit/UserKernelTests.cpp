//===- UserKernelTests.cpp - kernels from outside the library -------------===//
//
// The kernels of tests/common/UserKernels.h through the whole pipeline, NVRTC
// and ptxas for every target; on sm_90a they must stay warp-specialized, with
// the consumers' collective ops synchronising over the consumers only.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "ErrorOf.h"
#include "UserKernels.h"
#include "tessel/dsl/Compile.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <regex>
#include <unistd.h>

using namespace tessel;

static Kernel compileChecked(Program &p, const std::string &arch) {
  Kernel k = compile(p, {arch, ""});
  auto ptx = std::filesystem::temp_directory_path() / fmt::format("tessel-user-{}-{}-{}.ptx",
                                                                  p.name(), arch, ::getpid());
  std::ofstream(ptx) << k.ptx();
  std::string cmd = fmt::format("{} -arch={} {} -o /dev/null", TESSEL_PTXAS, arch, ptx.string());
  CHECK(std::system(cmd.c_str()) == 0);
  std::filesystem::remove(ptx);
  return k;
}

/// Occurrences of `what` in `text`.
static size_t count(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_CASE("a reduction across warps in the consumer role uses the role's barrier") {
  for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
    Program p = test::reduceInConsumer();
    Kernel k = compileChecked(p, arch);
    INFO(arch << "\n" << k.loweredIr());
    if (arch != "sm_90a") continue;
    // Split into a producer and 128 consumer threads ...
    CHECK(k.loweredIr().find("threads(256)") != std::string::npos);
    // ... whose scratch exchange waits on the consumers' named barrier,
    // never on __syncthreads, which the producer does not reach.
    CHECK(count(k.loweredIr(), "tilenv.named_barrier 2, 128") >= 2); // the consumers are role 2
    CHECK(count(k.loweredIr(), "tilenv.sync_threads") == 1); // the mbarrier inits, before the roles
  }
}

TEST_CASE("reductions share one scratch buffer sized by the threads that run them") {
  Program p = test::twoReductions();
  Kernel kernel = compileChecked(p, "sm_90a");
  const std::string &ir = kernel.loweredIr();
  INFO(ir);
  REQUIRE(ir.find("threads(256)") != std::string::npos); // a producer and 128 consumers
  // One buffer for both reductions, of the 128 consumer threads' partials
  // only: 128 x 2 registers (a thread holds rows l / 4 and l / 4 + 8 of the
  // m16n8 accumulator pattern). Sized per reduction for the whole block it
  // was 2 x 256 x 2 floats.
  std::regex scratch(R"(name = "reduction_scratch"[^}]*\} : memref<(\d+)xf32)");
  std::vector<int64_t> sizes;
  for (auto it = std::sregex_iterator(ir.begin(), ir.end(), scratch); it != std::sregex_iterator(); ++it)
    sizes.push_back(std::stoll((*it)[1]));
  REQUIRE(sizes.size() == 1);
  CHECK(sizes[0] == 128 * 2);
}

TEST_CASE("addresses computed before a warp-specialized loop stay visible to the producer") {
  for (test::RowSource source : test::allRowSources)
    for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
      Program p = test::offsetRowsSum(source);
      Kernel k = compileChecked(p, arch);
      INFO(test::name(source) << " on " << arch << "\n" << k.loweredIr());
      if (arch == "sm_90a") CHECK(k.loweredIr().find("threads(256)") != std::string::npos);
    }
}

TEST_CASE("a serial loop carries values") {
  for (std::string arch : {"sm_80", "sm_90a"}) {
    Program p = test::offsetRowsSum(test::RowSource::carriedScan);
    Kernel k = compileChecked(p, arch);
    INFO(arch << "\n" << k.tileIr());
    CHECK(k.tileIr().find("iter_args") != std::string::npos);
  }
  Program p("bad_carry");
  Tensor x = p.tensor("x", {4}, DType::f32);
  CHECK_THROWS_WITH(p.kernel({1}, 32,
                             [&](Expr) {
                               serial(4, cast(Expr(0), DType::i32),
                                      [&](Expr i, Expr acc) { return x(i); });
                             }),
                    Catch::Contains("carried value 0 is i32 but the body returned f32"));
}

TEST_CASE("a reduction's result is read inside parallel at any index") {
  for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
    Program p = test::vectorSoftmax();
    compileChecked(p, arch);
  }
  // A fragment spread over the threads cannot be read at a fixed index.
  Program p("spread_broadcast");
  Tensor x = p.tensor("x", {256}, DType::f32);
  p.kernel({1}, 128, [&](Expr) {
    Buffer l = alloc_fragment({256}, DType::f32);
    copy(x.tile({0}, {256}), l);
    parallel(256, [&](Expr j) { l(j) = l(j) - l(0); });
    copy(l, x.tile({0}, {256}));
  });
  CHECK_THROWS_WITH(compile(p, {"sm_90a", ""}),
                    Catch::Contains("UserKernelTests.cpp") &&
                        Catch::Contains("every thread must hold all of it"));
}

TEST_CASE("windows of a fragment name registers: no local memory, on every target") {
  Program p = test::fragmentWindows();
  for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
    INFO(arch);
    Kernel k = compileChecked(p, arch);
    // A register array indexed at run time would live in local memory.
    CHECK(k.ptx().find(".local") == std::string::npos);
    CHECK(k.spillBytes() == 0);
    // sm_100a keeps the gemm on tcgen05: the accumulator leaves tensor
    // memory a row a thread, which holds any window of columns.
    if (arch == "sm_100a") CHECK(k.ptx().find("tcgen05.mma") != std::string::npos);
  }
}

TEST_CASE("a window of a fragment that other threads hold part of is an error at its line") {
  int line = 0;
  std::string msg = test::errorOf([&] {
    Program p("narrow_window");
    Tensor y = p.tensor("Y", {128, 128}, DType::f32);
    p.kernel({1}, 128, [&](Expr) {
      Buffer a = alloc_shared({128, 64}, DType::f16), b = alloc_shared({64, 128}, DType::f16);
      Buffer acc = alloc_fragment({128, 128}, DType::f32);
      gemm(a, b, acc, {.clear_accum = true});
      line = __LINE__ + 1;
      fill(acc.tile({0, 2}, {128, 2}), 1.0);
      copy(acc, y.tile({0, 0}, {128, 128}));
    });
    compile(p, {"sm_90a", ""});
  });
  CHECK(msg.find(fmt::format("{}:{}", __FILE__, line)) != std::string::npos);
  CHECK(msg.find("this window of a fragment is not a part of each thread's registers") !=
        std::string::npos);
  CHECK(msg.find("windows of this fragment take dimension 1 at least 8") != std::string::npos);
  // An offset only known at run time.
  msg = test::errorOf([&] {
    Program p("runtime_window");
    Expr n = p.sym("N");
    Tensor y = p.tensor("Y", {n, 128}, DType::f32);
    p.kernel({1}, 128, [&](Expr) {
      Buffer acc = alloc_fragment({128, 128}, DType::f32);
      fill(acc, 0.0);
      line = __LINE__ + 1;
      fill(acc.tile({0, n % 4 * 32}, {128, 32}), 1.0);
      copy(acc, y.tile({0, 0}, {128, 128}));
    });
    compile(p, {"sm_90a", ""});
  });
  CHECK(msg.find(fmt::format("{}:{}", __FILE__, line)) != std::string::npos);
  CHECK(msg.find("needs offsets known at compile time") != std::string::npos);
}

TEST_CASE("fragments live at different times share registers") {
  Program p = test::twoPhases();
  // 128 registers each: together over the 224 that fit, one after the
  // other well within.
  Kernel k = compileChecked(p, "sm_90a");
  CHECK(k.cubin().size() > 0);
}

TEST_CASE("bounded tensors mask loads and stores at run-time limits") {
  for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
    Program p = test::boundedCache();
    Kernel k = compileChecked(p, arch);
    INFO(arch << "\n" << k.loweredIr());
    // Bounded tiles never go through TMA.
    CHECK(k.loweredIr().find("tilenv.tma_load") == std::string::npos);
    CHECK(k.loweredIr().find("tile.bound") == std::string::npos);
  }
  Program p("bad_bound");
  Expr n = p.sym("N");
  Tensor x = p.tensor("x", {n, 64}, DType::f16);
  CHECK_THROWS_WITH(p.kernel({1}, 32, [&](Expr) { x.bounded({n}); }),
                    Catch::Contains("bounded() takes one limit for each, got 1"));
}

TEST_CASE("tensor extents may be expressions of symbols, checked at launch") {
  Program p = test::extentExpression();
  Kernel k = compileChecked(p, "sm_90a");
  // The extent check runs before anything reaches the driver.
  std::vector<rt::LaunchArg> args = {rt::LaunchArg::integer(4), rt::LaunchArg::buffer(0, {4}),
                                     rt::LaunchArg::buffer(0, {1})};
  CHECK_THROWS_WITH(k.launch(args), Catch::Contains("tensor 'offs' has extent 4 in dimension 0, "
                                                    "but its declared extent evaluates to 5 for "
                                                    "groups = 4"));
  Program q("bad_extent");
  Expr s = q.scalar("scale", DType::f32);
  CHECK_THROWS_WITH(q.tensor("t", {s}, DType::f32),
                    Catch::Contains("must be computed from constants and index symbols"));
  CHECK(evaluate(ceil_div(Expr(7), Expr(2)) * 3 - 1, {}) == 11);
}

TEST_CASE("signal and wait publish and await flags at system scope") {
  for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
    Program producer = test::flagProducer(), consumer = test::flagConsumer();
    Kernel p = compileChecked(producer, arch), c = compileChecked(consumer, arch);
    INFO(arch << "\n" << p.cuda() << "\n" << c.cuda());
    CHECK(p.cuda().find("tessel::flag_store(") != std::string::npos);
    CHECK(c.cuda().find("tessel::flag_wait(") != std::string::npos);
    CHECK(c.cuda().find("the flags of kernel parameter #3") != std::string::npos);
    // TMA loads after a wait see the guarded data.
    CHECK((c.cuda().find("fence.proxy.async.global") != std::string::npos) == (arch != "sm_80"));
  }
  Program p("bad_flags");
  Tensor f = p.tensor("f", {4}, DType::f32);
  CHECK_THROWS_WITH(p.kernel({1}, 32, [&](Expr) { wait(f, {0}, Expr(1)); }),
                    Catch::Contains("wait: flags are an i32 global tensor, got global f32"));
  Program q("bad_timeout");
  Tensor g = q.tensor("g", {4}, DType::i32);
  CHECK_THROWS_WITH(q.kernel({1}, 32, [&](Expr) { wait(g, {0}, Expr(1), 0); }),
                    Catch::Contains("timeout_ms must be in (0, 3600000], got 0"));
}

TEST_CASE("fragment copies into windows of a swizzled tile address by thread and register") {
  for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
    Program p = test::swappedHalves();
    Kernel k = compileChecked(p, arch);
    INFO(arch << "\n" << k.loweredIr());
    // The staging tile is swizzled (copies alone touch it), so the window
    // copies go through the split addressing with the window's origin.
    auto staged = std::find_if(k.layouts().begin(), k.layouts().end(),
                               [](const BufferLayout &b) { return b.name == "staged"; });
    REQUIRE(staged != k.layouts().end());
    CHECK(staged->layout.find("swizzle = 128") != std::string::npos);
  }
}

TEST_CASE("a window that may start before its tensor checks each index against 0") {
  for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
    Program p = test::causalConvolution();
    Kernel k = compileChecked(p, arch);
    INFO(arch << "\n" << k.loweredIr());
    // The first window's thread copies (bx * 64 - 8 may be negative) check
    // the lower bound: its load and its store (a TMA store whose box starts
    // before the tensor is an illegal instruction). TMA loads the pipelined
    // loop's windows (a load zero-fills rows outside the tensor, on both
    // sides) and stores its outputs, whose offsets are never negative.
    CHECK(count(k.loweredIr(), "arith.cmpi sge") >= 2u);
    if (arch != "sm_80") {
      CHECK(k.loweredIr().find("tilenv.tma_load") != std::string::npos);
      CHECK(k.loweredIr().find("tilenv.tma_store") != std::string::npos);
    }
  }
}

TEST_CASE("a gemm's K may be any multiple of the instruction's K: 576 = 512 + 64") {
  for (std::string arch : {"sm_80", "sm_90a"}) {
    Program p = test::latentScores();
    Kernel k = compileChecked(p, arch);
    INFO(arch);
    if (arch == "sm_90a") {
      // 36 k-steps of 16 on one warpgroup: the first clears the
      // accumulator, an unrolled loop of 35 the rest.
      INFO(k.cuda());
      CHECK(count(k.cuda(), "wgmma.mma_async.sync.aligned.m64n32k16") == 2);
      // The loop's trip count is the index constant 35 in the lowered IR
      // (no other extent of this kernel is 35).
      INFO(k.loweredIr());
      CHECK(count(k.loweredIr(), "arith.constant 35 : index") >= 1);
      CHECK(count(k.loweredIr(), "arith.constant 36 : index") == 0);
    } else {
      // Four warps each take 16 rows and all 32 columns: 4 m16n8k16 a k-step.
      CHECK(count(k.cuda(), "mma.sync.aligned.m16n8k16") >= 1);
    }
  }
  // Off wgmma, N stays a power of two: the accumulator's registers map
  // index bits.
  Program p("wide_scores");
  Tensor q = p.tensor("q", {64, 64}, DType::bf16), kv = p.tensor("kv", {96, 64}, DType::bf16);
  int line = 0;
  try {
    p.kernel({1}, 128, [&](Expr) {
      Buffer qs = alloc_shared({64, 64}, DType::bf16), ks = alloc_shared({96, 64}, DType::bf16);
      Buffer acc = alloc_fragment({64, 96}, DType::f32);
      copy(q.tile({0, 0}, {64, 64}), qs);
      copy(kv.tile({0, 0}, {96, 64}), ks);
      line = __LINE__ + 1;
      gemm(qs, ks, acc, {.transpose_b = true, .clear_accum = true});
    });
    compile(p, {"sm_80", ""});
    FAIL("a gemm with N = 96 compiled for mma.sync");
  } catch (const Error &e) {
    CHECK_THAT(e.what(), Catch::Contains(fmt::format("UserKernelTests.cpp:{}", line)) &&
                             Catch::Contains("M and N must be powers of two") &&
                             Catch::Contains("N = 96"));
  }
}

TEST_CASE("a register accumulator runs on tcgen05 on sm_100a through tensor memory") {
  Program p = test::scoresRowMax();
  Kernel k = compileChecked(p, "sm_100a");
  INFO(k.cuda());
  CHECK(count(k.cuda(), "tcgen05.mma.") >= 1);
  CHECK(count(k.cuda(), "mma.sync") == 0);
  CHECK(count(k.cuda(), "tcgen05.ld") >= 1);
  bool said = false;
  for (const Remark &r : k.remarks())
    said |= r.pass == "tessel-tmem-accumulators" && r.category == "tensor-cores" &&
            r.message.find("moves through tensor memory") != std::string::npos &&
            r.location.find("UserKernels.h") != std::string::npos;
  CHECK(said);
  // The program is the same one sm_90a runs on wgmma.
  Program hopper = test::scoresRowMax();
  CHECK(count(compileChecked(hopper, "sm_90a").cuda(), "wgmma.mma_async") >= 1);
  // A gemm tcgen05 cannot take (64 rows) stays on mma.sync and says why.
  Program narrow = test::latentScores();
  Kernel n = compile(narrow, {"sm_100a", ""});
  bool why = false;
  for (const Remark &r : n.remarks())
    why |= r.message.find("runs on mma.sync on sm_100a, not tcgen05.mma: tcgen05.mma computes 128 "
                         "rows") != std::string::npos;
  CHECK(why);
}

TEST_CASE("a program whose accumulator feeds a register operand compiles for every target") {
  for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
    INFO(arch);
    Program p = test::twoProducts();
    Kernel k = compileChecked(p, arch);
    if (arch == "sm_90a") continue; // wgmma splits along M by itself
    // mma.sync's square split of S would put P's rows on other warps than
    // P x V reads them from: S is split along M, and a remark says why.
    bool said = false;
    for (const Remark &r : k.remarks())
      said |= r.pass == "tessel-layout-inference" &&
              r.message.find("warps split along M only (full_row), not square") != std::string::npos &&
              r.location.find("UserKernels.h") != std::string::npos;
    CHECK(said);
  }
}

TEST_CASE("a paged GQA decode kernel compiles for every target from one program") {
  for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
    INFO(arch);
    Program p = test::pagedDecode();
    Kernel k = compileChecked(p, arch);
    CHECK(k.cubin().size() > 0);
  }
}

TEST_CASE("wgmma takes N in steps of 8: 96, 192 and 200 on one warpgroup") {
  for (auto [rows, keys] : {std::pair<int64_t, int64_t>{128, 96}, {64, 192}, {64, 200}}) {
    Program p = test::wideScores(rows, keys);
    Kernel k = compileChecked(p, "sm_90a");
    INFO(rows << " x " << keys << "\n" << k.cuda());
    // Each 64-row tile of the warpgroup takes one m64nNk16 a k-step.
    CHECK(count(k.cuda(), fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16", keys)) >= 1);
  }
}

TEST_CASE("int4 weights unpacked by element code into a register operand compile everywhere") {
  for (std::string arch : {"sm_80", "sm_90a"}) {
    INFO(arch);
    Program p = test::int4Weights();
    Kernel k = compileChecked(p, arch);
    INFO(k.cuda());
    // The weights never pass through shared memory as bf16: A is read from
    // registers by the tensor-core instruction.
    CHECK(count(k.cuda(), arch == "sm_90a" ? "wgmma.mma_async" : "mma.sync") >= 1);
  }
}

TEST_CASE("8-bit operands stored MN-major get K-major copies and a remark") {
  struct Case { DType in; bool aMnMajor; std::string arch; };
  for (Case c : {Case{DType::f8e4m3, false, "sm_90a"}, Case{DType::i8, true, "sm_90a"},
                 Case{DType::i8, true, "sm_80"}, Case{DType::f8e4m3, true, "sm_100a"},
                 Case{DType::i8, false, "sm_100a"}}) {
    INFO(name(c.in) << (c.aMnMajor ? " with A and B" : " with B") << " MN-major on " << c.arch);
    Program p = test::mnMajorEightBit(c.in, c.aMnMajor);
    Kernel k = compileChecked(p, c.arch);
    bool blackwell = c.arch == "sm_100a";
    CHECK(count(k.cuda(), blackwell            ? "tcgen05.mma"
                          : c.arch == "sm_90a" ? "wgmma.mma_async"
                                               : "mma.sync.aligned.m16n8k32") >= 1);
    int copies = 0;
    for (const Remark &r : k.remarks())
      copies += r.pass == "tessel-k-major-operands" && r.location.find("UserKernels.h") != std::string::npos;
    // tcgen05.mma reads the operands as stored: no copy.
    CHECK(copies == (blackwell ? 0 : c.aMnMajor ? 2 : 1));
    CHECK((k.loweredIr().find("k_major") == std::string::npos) == blackwell);
  }
}

TEST_CASE("f16 accumulators run on the tensor cores' .f16 forms, in registers") {
  struct Case { DType in; std::string arch, instruction; };
  for (Case c : {Case{DType::f8e4m3, "sm_90a", "wgmma.mma_async.sync.aligned.m64n128k32.f16.e4m3.e4m3"},
                 Case{DType::f16, "sm_90a", "wgmma.mma_async.sync.aligned.m64n128k16.f16.f16.f16"},
                 Case{DType::f8e5m2, "sm_89", "mma.sync.aligned.m16n8k32.row.col.f16.e5m2.e5m2.f16"},
                 Case{DType::f16, "sm_80", "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16"},
                 // Tensor memory holds 32-bit accumulators: mma.sync.
                 Case{DType::f8e4m3, "sm_100a", "mma.sync.aligned.m16n8k32.row.col.f16.e4m3.e4m3.f16"}}) {
    INFO(name(c.in) << " on " << c.arch);
    Program p = test::halfAccumulator(c.in);
    Kernel k = compileChecked(p, c.arch);
    INFO(k.cuda());
    CHECK(count(k.ptx(), c.instruction) >= 1);
    // Two f16 elements a 32-bit register, which stays a register, and
    // wgmmas that ptxas neither serialises nor fences apart.
    CHECK(k.ptx().find(".local") == std::string::npos);
    CHECK(k.performanceWarnings() == "");
  }
  // Element code writes the accumulator between products: its pairs are
  // packed before the wgmma fence, not between the fence and the wgmma.
  for (DType in : {DType::f8e4m3, DType::f16}) {
    Program p = test::halfAccumulator(in, /*doubleEachStep=*/true);
    Kernel k = compileChecked(p, "sm_90a");
    INFO(k.cuda());
    CHECK(count(k.cuda(), "tessel::fence_registers(") >= 2);
    CHECK(k.ptx().find(".local") == std::string::npos);
    CHECK(k.performanceWarnings() == "");
  }
  // bf16 products have no f16 form.
  Program p("bf16_into_f16");
  Tensor a = p.tensor("a", {128, 32}, DType::bf16), c = p.tensor("c", {128, 128}, DType::f16);
  p.kernel({1}, 256, [&](Expr) {
    Buffer as = alloc_shared({128, 32}, DType::bf16, "a");
    Buffer cf = alloc_fragment({128, 128}, DType::f16, "c");
    copy(a.tile({0, 0}, {128, 32}), as);
    gemm(as, as, cf, {.transpose_b = true, .clear_accum = true});
    copy(cf, c.tile({0, 0}, {128, 128}));
  });
  CHECK_THROWS_WITH(compile(p, {"sm_90a", ""}),
                    Catch::Contains("tensor-core gemm of 'bf16' operands accumulates in f32, got 'f16'") &&
                        Catch::Contains("UserKernelTests.cpp"));
}

TEST_CASE("three consumer warpgroups: 192-row tiles on the layouts of four") {
  for (std::string arch : {"sm_80", "sm_90a", "sm_100a"})
    for (WarpPolicy policy : {WarpPolicy::full_row, WarpPolicy::square}) {
      Program p = test::threeWarpgroups(policy);
      Kernel k = compileChecked(p, arch);
      const std::string &ir = k.loweredIr();
      INFO(arch << "\n" << ir);
      // The rows past 192 belong to threads that do not exist: no access
      // checks them.
      static const std::regex rowCheck("cmpi (slt|ult), %[^,]+, %c192(_[0-9]+)?[^0-9_]");
      CHECK(std::distance(std::sregex_iterator(ir.begin(), ir.end(), rowCheck),
                          std::sregex_iterator()) == 0);
      // sm_100a's tcgen05.mma computes 128 rows: the 192-row product
      // stays on mma.sync, and says so.
      if (arch == "sm_100a")
        CHECK(std::any_of(k.remarks().begin(), k.remarks().end(), [](const Remark &r) {
          return r.message.find("runs on mma.sync on sm_100a") != std::string::npos;
        }));
      if (arch != "sm_90a") continue;
      // A producer warpgroup beside the three, whose barriers count 384.
      CHECK(ir.find("threads(512)") != std::string::npos);
      CHECK(count(ir, "tilenv.named_barrier 2, 384") >= 2);
      CHECK(count(ir, "tilenv.wgmma ") >= 1);
    }
}

TEST_CASE("a peer's tensor bounded at run-time limits compiles everywhere; other buffers are refused") {
  for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
    INFO(arch);
    Program p = test::boundedPeerRows();
    Kernel k = compileChecked(p, arch);
    INFO(k.cuda());
    // The rows are another rank's (its address from the peer table, at
    // the rank symbol p1), cut at the run-time limit (the scalar p3) and
    // at the tensor's extent.
    CHECK(count(k.cuda(), "p4_peers.\n  at[p1]") + count(k.cuda(), "p4_peers.at[p1]") == 1);
    CHECK(count(k.cuda(), "= int(p3);") == 1);
    CHECK(count(k.cuda(), "= p4_d0;") >= 1);
  }
  Program q("bounded_window");
  Tensor t = q.tensor("t", {128, 64}, DType::f16);
  Expr len = q.scalar("len", DType::i32);
  std::string msg;
  try {
    q.kernel({1}, 128, [&](Expr) { t.tile({0, 0}, {64, 64}).bounded({len, 64}); });
  } catch (const Error &e) {
    msg = e.what();
  }
  CHECK(msg.find("another rank's whole copy of one (peer())") != std::string::npos);
}

TEST_CASE("values read in the kernel index buffers (i32 and u8, loads and atomics)") {
  // They were passed to memref.load and tile.atomic_add as they were, and
  // the verifier's "operand must be variadic of index" was the user's error.
  for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
    Program p = test::gatherAndHistogram();
    Kernel k = compileChecked(p, arch);
    INFO(arch << "\n" << k.loweredIr());
    CHECK(k.loweredIr().find("arith.index_cast") != std::string::npos);
    CHECK(k.loweredIr().find("arith.index_castui") != std::string::npos); // the u8 codes
  }
}

TEST_CASE("a shared window at a run-time offset that may leave its buffer traps with a report") {
  // A block-indexed window of a shared buffer: past it, its copies would
  // read and write other buffers' shared memory, so the kernel checks.
  Program p("shared_window");
  Tensor x = p.tensor("x", {128}, DType::f32);
  int line = 0;
  p.kernel({4}, 64, [&](Expr bx) {
    Buffer s = alloc_shared({128}, DType::f32);
    line = __LINE__ + 1;
    Buffer w = s.tile({bx * 64}, {64});
    copy(x.tile({0}, {64}), w);
    copy(w, x.tile({64}, {64}));
  });
  Kernel k = compileChecked(p, "sm_80");
  std::string expected = fmt::format("tessel::trap_with_report(\"UserKernelTests.cpp:{}: a shared "
                                     "window leaves its buffer in dim 0 (offset, last start)\"",
                                     line);
  INFO(k.cuda());
  CHECK(k.cuda().find(expected) != std::string::npos);
}
