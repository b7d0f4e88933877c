//===- DslErrorTests.cpp - misuse of the DSL names the user's line --------===//
#include <catch2/catch.hpp>

#include "tessel/dsl/Compile.h"

#include <string>

using namespace tessel;

/// Runs `build` inside a kernel body and returns the error message.
template <class F> static std::string errorOf(F &&build) {
  Program p("misuse");
  Expr n = p.sym("N");
  Tensor x = p.tensor("x", {n, 64}, DType::f16);
  try {
    p.kernel({1}, 128, [&](Expr) { build(x); });
  } catch (const Error &e) {
    return e.what();
  }
  return "no error";
}

static std::string here(int line) { return std::string(__FILE__) + ":" + std::to_string(line) + ":"; }

TEST_CASE("copy with mismatched shapes names both shapes and the line") {
  int line = 0;
  std::string msg = errorOf([&](Tensor x) {
    Buffer s = alloc_shared({16, 32}, DType::f16);
    line = __LINE__ + 1;
    copy(x.tile({0, 0}, {16, 64}), s);
  });
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("copy source shape [16, 64] differs from destination shape [16, 32]") != std::string::npos);
}

TEST_CASE("gemm on global memory is rejected") {
  int line = 0;
  std::string msg = errorOf([&](Tensor x) {
    Buffer b = alloc_shared({64, 16}, DType::f16);
    Buffer c = alloc_fragment({16, 16}, DType::f32);
    line = __LINE__ + 1;
    gemm(x.tile({0, 0}, {16, 64}), b, c);
  });
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("gemm operand A is in global memory") != std::string::npos);
}

TEST_CASE("zero and negative tile sizes are rejected") {
  int line = 0;
  std::string msg = errorOf([&](Tensor) {
    line = __LINE__ + 1;
    alloc_fragment({16, 0}, DType::f32);
  });
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("dimensions must be positive, got [16, 0]") != std::string::npos);
  msg = errorOf([&](Tensor x) {
    line = __LINE__ + 1;
    x.tile({0, 0}, {-4, 64});
  });
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("tile sizes must be positive") != std::string::npos);
}

TEST_CASE("a region outside a static dimension is rejected") {
  int line = 0;
  std::string msg = errorOf([&](Tensor x) {
    line = __LINE__ + 1;
    x.tile({0, 48}, {16, 32});
  });
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("tile [16, 32] at offset 48 lies outside buffer [?, 64] in dimension 1") != std::string::npos);
}

TEST_CASE("gemm with mismatched K names both operands") {
  std::string msg = errorOf([&](Tensor) {
    gemm(alloc_shared({16, 32}, DType::f16), alloc_shared({16, 16}, DType::f16),
         alloc_fragment({16, 16}, DType::f32));
  });
  CHECK(msg.find("gemm K mismatch: A [16, 32] has K = 32, B [16, 16] has K = 16") != std::string::npos);
}

TEST_CASE("collective ops inside parallel are reported at the user's line by the compiler") {
  Program p("nested");
  int line = 0;
  p.kernel({1}, 128, [&](Expr) {
    Buffer s = alloc_shared({8}, DType::f32);
    parallel(8, [&](Expr) {
      line = __LINE__ + 1;
      fill(s, 0.0);
    });
  });
  try {
    compile(p, {"sm_80", ""});
    FAIL("expected an error");
  } catch (const Error &e) {
    std::string msg = e.what();
    CHECK(msg.find(here(line)) != std::string::npos);
    CHECK(msg.find("cannot appear inside tile.parallel") != std::string::npos);
  }
}

TEST_CASE("shared memory over the target's limit is a diagnostic") {
  Program p("too_big");
  int line = 0;
  p.kernel({1}, 128, [&](Expr) {
    line = __LINE__ + 1;
    alloc_shared({256, 256}, DType::f32);
  });
  try {
    compile(p, {"sm_80", ""});
    FAIL("expected an error");
  } catch (const Error &e) {
    std::string msg = e.what();
    CHECK(msg.find("kernel needs 262144 bytes of shared memory; sm_80 allows 166912") != std::string::npos);
    CHECK(msg.find(here(line) + " note: 262144 bytes") != std::string::npos);
  }
}

TEST_CASE("tile ops outside a kernel body and unknown targets are errors") {
  CHECK_THROWS_WITH(alloc_shared({4}, DType::f32), Catch::Contains("only be used inside Program::kernel"));
  Program p("k");
  p.kernel({1}, 32, [&](Expr) {});
  CHECK_THROWS_WITH(compile(p, {"sm_75", ""}), Catch::Contains("unknown target 'sm_75'"));
  CHECK_THROWS_WITH(p.kernel({1}, 32, [&](Expr) {}), Catch::Contains("already built"));
}

TEST_CASE("mbarrier ops need a buffer from alloc_barriers") {
  int line = 0;
  std::string msg = errorOf([&](Tensor) {
    Buffer s = alloc_shared({4}, DType::f32);
    line = __LINE__ + 1;
    mbarrier_wait(s, 0, 0);
  });
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("mbarriers are a buffer from alloc_barriers") != std::string::npos);
}

TEST_CASE("a role outside the kernel's threads is rejected at its line") {
  int line = 0;
  std::string msg = errorOf([&](Tensor) {
    line = __LINE__ + 1;
    role(128, 128, [] {});
  });
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("threads [128, 256) are outside the kernel's 128") != std::string::npos);
}

TEST_CASE("overlap_mma on one stage is an error at the loop") {
  int line = 0;
  std::string msg = errorOf([&](Tensor x) {
    Buffer s = alloc_shared({64, 64}, DType::f16);
    line = __LINE__ + 1;
    pipelined(4, 1, {.overlap_mma = true}, [&](Expr k) { copy(x.tile({k * 64, 0}, {64, 64}), s); });
  });
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("overlap_mma releases each stage an iteration late, which needs at least 2 stages, "
                 "got 1") != std::string::npos);
}

// The accumulator holds C's values when the loop starts (a gemm adding to
// C): the first wgmma cannot overwrite it, so the loop cannot be overlapped
// without ptxas serializing it. The compiler says so at the loop.
TEST_CASE("overlap_mma on a loop that accumulates into live values says why at the loop") {
  Program p("misuse");
  Expr n = p.sym("N");
  Tensor a = p.tensor("a", {64, n}, DType::f16), b = p.tensor("b", {n, 64}, DType::f16);
  Tensor c = p.tensor("c", {64, 64}, DType::f32);
  int line = 0;
  p.kernel({1}, 128, [&](Expr) {
    Buffer as = alloc_shared({64, 64}, DType::f16), bs = alloc_shared({64, 64}, DType::f16);
    Buffer acc = alloc_fragment({64, 64}, DType::f32);
    copy(c.tile({0, 0}, {64, 64}), acc);
    line = __LINE__ + 1;
    pipelined(ceil_div(n, 64), 3, {.warp_specialize = WarpSpecialize::on, .overlap_mma = true},
              [&](Expr k) {
                copy(a.tile({0, k * 64}, {64, 64}), as);
                copy(b.tile({k * 64, 0}, {64, 64}), bs);
                gemm(as, bs, acc);
              });
    copy(acc, c.tile({0, 0}, {64, 64}));
  });
  try {
    compile(p, {"sm_90a", ""});
    FAIL("no error");
  } catch (const Error &e) {
    std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find(here(line)) == 0);
    CHECK(msg.find("overlap_mma: this loop cannot keep its wgmmas running into the next iteration: "
                   "its accumulator is not cleared right before it by one fill") != std::string::npos);
  }
}

TEST_CASE("clusters and multicast copies are checked at the user's line") {
  int line = 0;
  std::string msg = errorOf([&](Tensor x) {
    line = __LINE__ + 1;
    cluster_dims({2, 1});
  });
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("cluster_dims takes one extent per grid dimension (1), got 2") != std::string::npos);
  msg = errorOf([&](Tensor x) {
    line = __LINE__ + 1;
    cluster_dims({16});
  });
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("a cluster holds at most 8 blocks, got 16") != std::string::npos);
  msg = errorOf([&](Tensor x) {
    Buffer s = alloc_shared({64, 64}, DType::f16);
    line = __LINE__ + 1;
    copy(x.tile({0, 0}, {64, 64}), s, {.multicast = true});
  });
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("a multicast copy needs the kernel launched in clusters of several blocks") !=
        std::string::npos);
}

TEST_CASE("persistent belongs at the top of a kernel body, once") {
  int line = 0;
  std::string msg = errorOf([&](Tensor x) {
    serial(2, [&](Expr) {
      line = __LINE__ + 1;
      persistent({4}, [&](std::vector<Expr>) {});
    });
  });
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("persistent belongs at the top of a kernel body, not inside other code") !=
        std::string::npos);
  msg = errorOf([&](Tensor x) {
    persistent({4}, [&](std::vector<Expr>) {});
    line = __LINE__ + 1;
    persistent({4}, [&](std::vector<Expr>) {});
  });
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("persistent is given once per kernel") != std::string::npos);
}

TEST_CASE("drop sizes give rank-reducing tiles; dropping every dimension is an error") {
  Program p("bshd");
  Expr b = p.sym("B"), s = p.sym("S");
  Tensor q = p.tensor("q", {b, s, 4, 64}, DType::f16);
  int line = 0;
  std::string msg = "no error";
  try {
    p.kernel({1}, 128, [&](Expr) {
      Buffer rows = q.tile({0, 16, 2, 0}, {drop, 32, drop, 64});
      CHECK(rows.shape() == std::vector<int64_t>{32, 64});
      Buffer shared = alloc_shared({32, 64}, DType::f16);
      copy(rows, shared);
      line = __LINE__ + 1;
      q.tile({0, 0, 0, 0}, {drop, drop, drop, drop});
    });
  } catch (const Error &e) {
    msg = e.what();
  }
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("a tile keeps at least one dimension") != std::string::npos);
}

TEST_CASE("min and max of symbols build min and max, not another operator") {
  // Regression: two symbolic operands once fell through to ceil_div.
  Program p("bounds");
  Expr n = p.sym("N"), m = p.sym("M");
  Tensor x = p.tensor("x", {n}, DType::f32);
  p.kernel({1}, 32, [&](Expr) {
    serial(max(ceil_div(n, 64) - m, Expr(0)), [&](Expr i) { x(i) = x(i) + 1.0; });
    serial(min(n, m), [&](Expr i) { x(i) = x(i) * 2.0; });
  });
  std::string ir = p.str();
  CHECK(ir.find("arith.maxsi") != std::string::npos);
  CHECK(ir.find("arith.minsi") != std::string::npos);
  // The only ceil_div is the one written.
  CHECK(ir.find("arith.ceildivsi") == ir.rfind("arith.ceildivsi"));
  CHECK(Expr(max(Expr(3), Expr(7))).isConstant());
}

TEST_CASE("mbarrier arrival counts beyond PTX's 2^20 - 1 are rejected at the user's line") {
  for (int64_t arrivals : {int64_t{1} << 20, int64_t{1} << 32}) {
    Program p("too_many_arrivals");
    CHECK_THROWS_WITH(p.kernel({1}, 128, [&](Expr) { alloc_barriers(2, arrivals); }),
                      Catch::Contains("DslErrorTests.cpp") &&
                          Catch::Contains("an mbarrier counts at most 2^20 - 1 arrivals"));
  }
}

TEST_CASE("tensor memory: its rules at the user's line, and only on sm_100a") {
  int line = 0;
  std::string msg = errorOf([&](Tensor) {
    line = __LINE__ + 1;
    alloc_tmem({96, 64}, DType::f32, "acc");
  });
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("a tensor-memory buffer is [64 or 128 rows (TMEM lanes), columns], got [96, 64]") !=
        std::string::npos);
  msg = errorOf([&](Tensor) {
    line = __LINE__ + 1;
    alloc_tmem({128, 64}, DType::f32, "acc", /*unpacked=*/true);
  });
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("only 16-bit values are packed or unpacked") != std::string::npos);

  // Placed by tessel-tmem-allocation; a Hopper target has none.
  Program p("tmem");
  int allocLine = 0;
  p.kernel({1}, 128, [&](Expr) {
    allocLine = __LINE__ + 1;
    alloc_tmem({128, 128}, DType::bf16, "p");
  });
  try {
    compile(p, {"sm_90a", ""});
    FAIL("compiled tensor memory for sm_90a");
  } catch (const Error &e) {
    std::string what = e.what();
    CHECK(what.find(here(allocLine)) != std::string::npos);
    CHECK(what.find("tensor memory is sm_100a's; this kernel compiles for sm_90a") !=
          std::string::npos);
  }
  // On sm_100a it is placed and allocated: warp 0 allocates the block's
  // columns and frees them at the end.
  Kernel k = compile(p, {"sm_100a", ""});
  CHECK(k.ptx().find("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32") != std::string::npos);
  CHECK(k.ptx().find("tcgen05.dealloc.cta_group::1.sync.aligned.b32") != std::string::npos);
  CHECK(k.ptx().find("tcgen05.relinquish_alloc_permit") != std::string::npos);
  // A copy from a fragment is tcgen05.st .32x32b; one from shared memory
  // has no instruction (tcgen05.cp is not lowered) and is refused at its line.
  Program used("tmem_used");
  int copyLine = 0;
  used.kernel({1}, 128, [&](Expr) {
    Buffer f = alloc_fragment({128, 32}, DType::f32, "f");
    Buffer t = alloc_tmem({128, 32}, DType::f32, "t");
    clear(f);
    copy(f, t);
  });
  CHECK(compile(used, {"sm_100a", ""}).ptx().find("tcgen05.st.sync.aligned.32x32b.x32.b32") !=
        std::string::npos);
  // One from shared memory goes through registers (ld.shared, then
  // tcgen05.st); one between two tensor-memory buffers is refused at its line.
  Program fromShared("tmem_from_shared");
  fromShared.kernel({1}, 128, [&](Expr) {
    Buffer s = alloc_shared({128, 32}, DType::f32, "s");
    Buffer t = alloc_tmem({128, 32}, DType::f32, "t");
    clear(s);
    copy(s, t);
  });
  CHECK(compile(fromShared, {"sm_100a", ""}).ptx().find("tcgen05.st.sync.aligned.32x32b.x32.b32") !=
        std::string::npos);
  Program between("tmem_to_tmem");
  between.kernel({1}, 128, [&](Expr) {
    Buffer s = alloc_tmem({128, 32}, DType::f32, "s");
    Buffer t = alloc_tmem({128, 32}, DType::f32, "t");
    copyLine = __LINE__ + 1;
    copy(s, t);
  });
  try {
    compile(between, {"sm_100a", ""});
    FAIL("lowered a copy between tensor-memory buffers");
  } catch (const Error &e) {
    std::string what = e.what();
    CHECK(what.find(here(copyLine)) != std::string::npos);
    CHECK(what.find("tensor memory is copied to and from fragments, shared or global memory") !=
          std::string::npos);
  }
  // 16-bit values move in pairs: a packed bf16 [128, 64] is 32 columns a
  // thread (.x32), an unpacked one 64 through .unpack::16b.
  Program halves("tmem_halves");
  halves.kernel({1}, 128, [&](Expr) {
    Buffer f = alloc_fragment({128, 64}, DType::bf16, "f");
    Buffer packed = alloc_tmem({128, 64}, DType::bf16, "packed");
    Buffer unpacked = alloc_tmem({128, 64}, DType::bf16, "unpacked", /*unpacked=*/true);
    clear(f);
    copy(f, packed);
    copy(f, unpacked);
  });
  std::string ptx = compile(halves, {"sm_100a", ""}).ptx();
  CHECK(ptx.find("tcgen05.st.sync.aligned.32x32b.x32.b32") != std::string::npos);
  CHECK(ptx.find("tcgen05.st.sync.aligned.32x32b.x32.unpack::16b.b32") != std::string::npos);
  // A copy that would convert is refused at its line.
  Program converts("tmem_converts");
  converts.kernel({1}, 128, [&](Expr) {
    Buffer f = alloc_fragment({128, 64}, DType::f32, "f");
    Buffer t = alloc_tmem({128, 64}, DType::bf16, "t");
    clear(f);
    copyLine = __LINE__ + 1;
    copy(f, t);
  });
  try {
    compile(converts, {"sm_100a", ""});
    FAIL("lowered a converting copy into tensor memory");
  } catch (const Error &e) {
    std::string what = e.what();
    CHECK(what.find(here(copyLine)) != std::string::npos);
    CHECK(what.find("a tensor-memory copy to or from a fragment does not convert") != std::string::npos);
  }
}

// The hand-scheduled pipeline's pieces: staged buffers, issue-only gemms.
TEST_CASE("staged buffers and issue-only gemms are checked at the user's line") {
  int line = 0;
  std::string msg = errorOf([&](Tensor) {
    line = __LINE__ + 1;
    alloc_shared_stages(0, {64, 64}, DType::f16);
  });
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("alloc_shared_stages needs at least one stage, got 0") != std::string::npos);

  msg = errorOf([&](Tensor) {
    Buffer plain = alloc_shared({64, 64}, DType::f16);
    line = __LINE__ + 1;
    plain.stage(0);
  });
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("stage() picks a copy of a buffer from alloc_shared_stages") != std::string::npos);

  msg = errorOf([&](Tensor) {
    Buffer a = alloc_shared({64, 16}, DType::f16), b = alloc_shared({16, 64}, DType::f16);
    Buffer c = alloc_fragment({64, 64}, DType::f32);
    line = __LINE__ + 1;
    gemm(a, b, c, {.issue_only = true});
  });
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("issue_only is for tcgen05 gemms") != std::string::npos);

  // A stage of a staged buffer is a whole buffer of its shape.
  CHECK(errorOf([&](Tensor x) {
          Buffer slots = alloc_shared_stages(2, {16, 64}, DType::f16);
          copy(x.tile({0, 0}, {16, 64}), slots.stage(1));
        }) == "no error");
}

TEST_CASE("a default-constructed Expr is assigned before use, and reading it unassigned says so") {
  // Assigned on each C++ path, as a kernel author picks a value by a
  // host-side setting.
  for (bool wide : {false, true}) {
    Program p("picked");
    Tensor y = p.tensor("y", {128}, DType::f32);
    p.kernel({1}, 128, [&](Expr) {
      Expr step;
      if (wide) step = Expr(2.0);
      else step = Expr(0.5);
      parallel(128, [&](Expr i) { y(i) = y(i) * step; });
    });
    CHECK_NOTHROW(compile(p, {"sm_80"}));
  }
  std::string msg = errorOf([&](Tensor x) {
    Expr never;
    Buffer s = alloc_shared({16, 64}, DType::f16);
    parallel(64, [&](Expr i) { s(0, i) = cast(x(0, i), DType::f16) + cast(never, DType::f16); });
  });
  CHECK(msg.find("an Expr is read before it is given a value") != std::string::npos);
  CHECK(msg.find(std::string(__FILE__)) == 0);
  // On the host too: a grid extent or an extent evaluated for a launch.
  Program g("unset_grid");
  Tensor o = g.tensor("o", {4}, DType::f32);
  Expr extent;
  try {
    g.kernel({extent}, 32, [&](Expr) { o(0) = 1.0; });
    FAIL("an unset grid extent was accepted");
  } catch (const Error &e) {
    CHECK_THAT(e.what(), Catch::Contains("grid dimension 0") &&
                             Catch::Contains("an Expr is read before it is given a value"));
  }
  CHECK_THROWS_WITH(evaluate(Expr(), {}), Catch::Contains("before it is given a value"));
}

TEST_CASE("exp2 on the FMA pipe rejects a share of no registers and types it cannot take") {
  int line = 0;
  std::string msg = errorOf([&](Tensor x) {
    Buffer f = alloc_fragment({16, 64}, DType::f32);
    parallel(16, 64, [&](Expr i, Expr j) {
      line = __LINE__ + 1;
      f(i, j) = exp2(f(i, j), 0);
    });
  });
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("exp2's fmaEvery counts registers: one in every 0 cannot be") != std::string::npos);
  msg = errorOf([&](Tensor x) {
    Buffer f = alloc_fragment({16, 64}, DType::f64);
    parallel(16, 64, [&](Expr i, Expr j) {
      line = __LINE__ + 1;
      f(i, j) = exp2(f(i, j), 4);
    });
  });
  CHECK(msg.find(here(line)) == 0);
  CHECK(msg.find("exp2 on the FMA pipe takes f32, f16 or bf16, got f64") != std::string::npos);
}
