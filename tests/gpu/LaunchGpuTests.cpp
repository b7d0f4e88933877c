//===- LaunchGpuTests.cpp - launches: cached tensor maps and CUDA graphs ---===//
//
// A launch reuses the tensor maps it encoded for the same buffer and shape,
// and launches can be captured into a CUDA graph and replayed. Wrong reuse
// (a map kept for another shape or buffer) or a wrongly captured argument
// shows up as a result that differs from a float64 reference computed on
// the host, not only from the same launches made one by one.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "GpuHelpers.h"
#include "ScopedCacheDir.h"
#include "tessel/Tessel.h"
#include "tessel/kernels/Tuned.h"
#include "tessel/Testing.h"
#include "tessel/dsl/Compile.h"
#include "tessel/kernels/basic/Basic.h"
#include "tessel/kernels/gemm/Gemm.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Graph.h"

#include <cstring>
#include <fmt/format.h>

using namespace tessel;
using namespace tessel::testing;
using rt::LaunchArg;

namespace {
std::string deviceArch() { return rt::nativeArch(rt::Driver::get().computeCapability()); }

/// C [M, N] f32 = A [M, K] B [K, N] in bf16, the three extents symbols;
/// on sm_90a with TMA loads (a tensor map for A and one for B).
Kernel compileGemm() {
  kernels::GemmConfig c;
  c.in = DType::bf16;
  c.out = DType::f32;
  if (deviceArch() == "sm_90a") {
    c.blockM = 128;
    c.blockN = 128;
    c.blockK = 64;
    c.threads = 256;
    c.stages = 3;
  }
  Program p = kernels::gemm(c);
  return compile(p, {deviceArch()});
}

} // namespace

TEST_CASE("tensor maps are encoded once per buffer and shape, and a new shape gets its own",
          "[gpu][launch]") {
  Kernel gemm = compileGemm();
  const rt::TensorMapCache &cache = gemm.loadedKernel().tensorMapCache();
  size_t maps = gemm.spec().tensorMaps.size();
  std::mt19937_64 rng(11);
  const int64_t m = 256, n = 128, k = 192;
  HostTensor a(DType::bf16, {m, k}), a2(DType::bf16, {m, k}), b(DType::bf16, {k, n});
  randomize(a, rng);
  randomize(a2, rng);
  randomize(b, rng);
  auto da = upload(a), da2 = upload(a2), db = upload(b);
  HostTensor c(DType::f32, {m, n});
  auto dc = poisoned(c);
  auto run = [&](rt::DeviceBuffer &aBuffer, const HostTensor &aHost, int64_t rows) {
    HostTensor aView(DType::bf16, {rows, k}), cView(DType::f32, {rows, n});
    dc->fillBytes(0xff);
    gemm.launch({LaunchArg::integer(rows), LaunchArg::integer(n), LaunchArg::integer(k),
                 launchArg(aBuffer, aView), launchArg(*db, b), launchArg(*dc, cView)});
    synchronize();
    download(*dc, cView);
    HostTensor aRows(DType::bf16, {rows, k},
                     std::vector<float>(aHost.values.begin(), aHost.values.begin() + rows * k));
    return relativeError(cView, test::referenceGemm(aRows, b));
  };
  uint64_t before = cache.insertions();
  for (int i = 0; i < 3; ++i) CHECK(run(*da, a, m) < 1e-5);
  CHECK(cache.insertions() - before == maps); // the first launch encodes them all
  // Another A: only A's map is new (on sm_90a; sm_80 builds have no maps).
  CHECK(run(*da2, a2, m) < 1e-5);
  CHECK(run(*da, a, m) < 1e-5);
  // The same buffers as fewer rows: A's map with the old extents would
  // read rows past the new M as real rows, and C's is not TMA.
  CHECK(run(*da, a, 64) < 1e-5);
  if (maps > 0) {
    INFO(fmt::format("{} maps, {} insertions", maps, cache.insertions() - before));
    CHECK(cache.insertions() - before == maps + 2);
  }
}

TEST_CASE("launches captured into a CUDA graph replay with the results of launching them one by one",
          "[gpu][launch][graph]") {
  Kernel gemm = compileGemm();
  Program addProgram = kernels::scaledAdd({});
  Kernel add = compile(addProgram, {deviceArch()});
  const int64_t m = 128, n = 128, k = 64, launches = 100;
  std::mt19937_64 rng(5);
  HostTensor a0(DType::bf16, {m, k}), a1(DType::bf16, {m, k}), b(DType::bf16, {k, n}),
      y0(DType::f32, {m * n}), c(DType::f32, {m, n});
  for (HostTensor *t : {&a0, &a1, &b, &y0}) randomize(*t, rng);
  auto da0 = upload(a0), da1 = upload(a1), db = upload(b), dy = upload(y0), dc = poisoned(c);
  HostTensor cFlat(DType::f32, {m * n});
  // 50 times: C = A_i B, then y += alpha_i C, alternating A and changing
  // alpha, so that every launch's arguments matter.
  auto enqueue = [&](CUstream s) {
    for (int i = 0; i < launches; i += 2) {
      rt::DeviceBuffer &ai = i % 4 == 0 ? *da0 : *da1;
      gemm.launch({LaunchArg::integer(m), LaunchArg::integer(n), LaunchArg::integer(k),
                   launchArg(ai, a0), launchArg(*db, b), launchArg(*dc, c)},
                  s);
      add.launch({LaunchArg::integer(m * n), LaunchArg::real(0.25 + 0.01 * i),
                  launchArg(*dc, cFlat), launchArg(*dy, y0)},
                 s);
    }
  };
  test::Stream own;
  auto result = [&](const std::function<void()> &work) {
    upload(y0, *dy);
    work();
    own.sync();
    HostTensor y(DType::f32, {m * n});
    download(*dy, y);
    return y;
  };
  HostTensor eager = result([&] { enqueue(own.s); });
  rt::CapturedGraph graph(own.s, enqueue);
  CHECK(graph.nodes() == size_t(launches));
  HostTensor replayed = result([&] { graph.replay(own.s); });
  HostTensor again = result([&] { graph.replay(own.s); });
  CHECK(std::memcmp(eager.values.data(), replayed.values.data(), eager.values.size() * 4) == 0);
  CHECK(std::memcmp(eager.values.data(), again.values.data(), eager.values.size() * 4) == 0);
  std::vector<double> ref(y0.values.begin(), y0.values.end());
  std::vector<double> c0 = test::referenceGemm(a0, b), c1 = test::referenceGemm(a1, b);
  for (int i = 0; i < launches; i += 2)
    for (int64_t e = 0; e < m * n; ++e) ref[e] += (0.25 + 0.01 * i) * (i % 4 == 0 ? c0 : c1)[e];
  double error = relativeError(replayed, ref);
  INFO(fmt::format("replayed graph: rel error {:.3e}", error));
  CHECK(error < 1e-5);
}

TEST_CASE("a kernel first launched inside a capture loads there and replays", "[gpu][launch][graph]") {
  // A configuration no other test launches: this Kernel's library is
  // loaded by the launch inside the capture.
  kernels::ScaledAddConfig config;
  config.block = 384;
  config.threads = 128;
  Program p = kernels::scaledAdd(config);
  Kernel add = compile(p, {deviceArch()});
  const int64_t n = 1000;
  std::mt19937_64 rng(3);
  HostTensor x(DType::f32, {n}), y(DType::f32, {n});
  randomize(x, rng);
  randomize(y, rng);
  auto dx = upload(x), dy = upload(y);
  test::Stream own;
  rt::CapturedGraph graph(own.s, [&](CUstream s) {
    add.launch({LaunchArg::integer(n), LaunchArg::real(2.0), launchArg(*dx, x), launchArg(*dy, y)}, s);
  });
  graph.replay(own.s);
  graph.replay(own.s);
  own.sync();
  HostTensor out(DType::f32, {n});
  download(*dy, out);
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = y.values[i] + 4.0 * x.values[i];
  CHECK(relativeError(out, ref) < 1e-6);
}

TEST_CASE("a call that cannot be captured says so and ends the capture", "[gpu][launch][graph]") {
  test::Stream own;
  try {
    rt::CapturedGraph graph(own.s, [&](CUstream) { rt::DeviceBuffer inside(4096); });
    FAIL("an allocation inside a capture was accepted");
  } catch (const Error &e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find("cannot be captured into a CUDA graph") != std::string::npos);
  }
  CHECK_FALSE(rt::isCapturing(own.s));
  // The stream takes work again.
  rt::CapturedGraph fine(own.s, [](CUstream) {});
  CHECK(fine.nodes() == 0);
  CHECK_THROWS_WITH(rt::CapturedGraph(nullptr, [](CUstream) {}),
                    Catch::Contains("legacy default stream cannot be captured"));
}

TEST_CASE("a persistent kernel's block budget limits its blocks and it still walks every tile",
          "[gpu][launch]") {
  // Each tile's block marks itself: the marks count the blocks launched.
  Program p("walk_marks");
  Expr tiles = p.sym("tiles");
  Tensor marks = p.tensor("marks", {tiles}, DType::i32);
  Tensor walked = p.tensor("walked", {tiles}, DType::i32);
  p.kernel({tiles}, 128, [&](Expr bx) {
    persistent({tiles}, [&](std::vector<Expr> t) {
      parallel(128, [&](Expr i) {
        if_(i == 0, [&] {
          marks(bx) = Expr(1);
          walked(t[0]) = walked(t[0]) + 1;
        });
      });
    });
  });
  Kernel k = compile(p, {deviceArch()});
  const int64_t count = 4000;
  int sms = rt::Driver::get().multiprocessors(rt::Driver::get().currentDevice());
  auto run = [&](const rt::LaunchOptions &options) {
    HostTensor zeros(DType::i32, {count});
    auto dm = upload(zeros), dw = upload(zeros);
    k.launch({LaunchArg::integer(count), launchArg(*dm, zeros), launchArg(*dw, zeros)}, nullptr,
             options);
    synchronize();
    HostTensor m(DType::i32, {count}), w(DType::i32, {count});
    download(*dm, m);
    download(*dw, w);
    int64_t blocks = 0;
    for (float v : m.values) blocks += v != 0;
    for (float v : w.values) REQUIRE(v == 1); // every tile once
    return blocks;
  };
  int64_t everything = run({});
  CHECK(everything >= sms);
  rt::LaunchOptions capped;
  capped.maxBlocks = 7;
  CHECK(run(capped) == 7);
  rt::LaunchOptions leave;
  leave.freeSms = 16;
  int64_t fewer = run(leave);
  INFO(fmt::format("{} blocks by default, {} leaving 16 of {} SMs", everything, fewer, sms));
  CHECK(fewer == everything / sms * (sms - 16));
  rt::LaunchOptions all;
  all.freeSms = sms;
  CHECK_THROWS_WITH(run(all), Catch::Contains("at least one must run the kernel"));
}

TEST_CASE("tessel::gemm plans a problem once, and plans again for a new shape, record or option",
          "[gpu][launch][api]") {
  test::ScopedCacheDir cache("tessel-gemm-plans-test");
  rt::Driver &d = rt::Driver::get();
  test::Stream stream;
  std::mt19937_64 rng(17);
  test::DeviceTensor a(DType::bf16, {200, 96}, &rng), b(DType::bf16, {96, 300}, &rng);
  test::DeviceTensor c(DType::f32, {200, 300});
  std::vector<double> ref = test::referenceGemm(a.host, b.host);
  auto run = [&](const GemmCallOptions &o = {}) {
    c.device.fillBytes(0xff); // NaN: every element must be written again
    Choice choice = tessel::gemm(a.view(), b.view(), c.view(), o, stream.s);
    stream.sync();
    c.fetch();
    CHECK(relativeError(c.host.values, ref) < 1e-3);
    return choice;
  };
  Choice first = run();
  Choice again = run();
  CHECK_FALSE(again.compiled);
  CHECK(again.config == first.config);
  CHECK(again.arch == first.arch);
  CHECK_THAT(first.config, !Catch::Contains("tuned on"));

  // Another shape is another problem, with its own tiles and launch.
  test::DeviceTensor a2(DType::bf16, {600, 96}, &rng), c2(DType::f32, {600, 300});
  c2.device.fillBytes(0xff);
  tessel::gemm(a2.view(), b.view(), c2.view(), {}, stream.s);
  stream.sync();
  c2.fetch();
  CHECK(relativeError(c2.host.values, test::referenceGemm(a2.host, b.host)) < 1e-3);

  {
    // Records live in the kernel cache's directory: in another one, this
    // shape's record runs (a plan kept from the first directory would hide
    // it), and a call that asks for no record still gets the defaults.
    test::ScopedCacheDir other("tessel-gemm-plans-test-tuned");
    std::string bucket = kernels::tunedBucket(
        {{"in", "bf16"}, {"out", "f32"}, {"transpose_a", "0"}, {"transpose_b", "0"}},
        {{"M", 200}, {"N", 300}, {"K", 96}});
    kernels::recordTuned("gemm", d.deviceName(), bucket,
                         {{"block_m", "64"}, {"block_n", "64"}, {"block_k", "32"}, {"stages", "3"},
                          {"threads", "128"}, {"swizzle", "0"}});
    Choice tuned = run();
    CHECK_THAT(tuned.config, Catch::Contains("block_m=64 block_n=64 block_k=32") &&
                                 Catch::Contains("(tuned on " + d.deviceName() + ")"));
    CHECK(run().config == tuned.config);
    GemmCallOptions untuned;
    untuned.tuned = false;
    CHECK(run(untuned).config == first.config);
  }
  // Back in the first directory, its plan again.
  CHECK(run().config == first.config);
}
