//===- WarpSpecializationGpuTests.cpp - kernels written from outside ------===//
//
// Kernels a user writes, not the library's: collective ops inside the
// consumer role of a warp-specialized loop, and producer addresses computed
// before the loop from local or shared memory. Each loop runs for more
// iterations than it has stages, so a barrier only some threads reach, or a
// producer reading an address the consumers never computed for it, hangs or
// reads the wrong rows here.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "tessel/harness/LibrarySupport.h"
#include "ChildProcess.h"
#include "UserKernels.h"

#include <cstdio>
#include <filesystem>
#include <fmt/format.h>

using namespace tessel;
using namespace tessel::harness;

/// The largest |out - ref|; NaN (an unwritten poisoned element) counts as
/// infinite.
static double maxDifference(const std::vector<float> &out, const std::vector<double> &ref) {
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    double d = std::abs(double(out[i]) - ref[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst;
}

static std::string deviceArch() {
  return rt::nativeArch(rt::Driver::get().computeCapability());
}

/// Runs a kernel of one input `x` and two outputs `y`, `z` (in that
/// order): checks y against `yRef` within `tolerance` and leaves z
/// downloaded for the caller's checks.
static CheckResult runOneInTwoOut(Kernel &k, HostTensor &x, HostTensor &y, HostTensor &z,
                                  const std::vector<double> &yRef, double tolerance) {
  DeviceRun run;
  run.addTensor(x, false);
  run.addTensor(y, true);
  run.addTensor(z, true);
  CheckResult r = launchAndCompare(k, run, 1, y, yRef, tolerance, {});
  run.download(2, z);
  return r;
}

TEST_CASE("a cross-warp reduction inside the consumer role runs past the stage count", "[gpu][user]") {
  for (int64_t n : {64 * 5, 1000}) {
    Program p = test::reduceInConsumer();
    Kernel k = compile(p, {deviceArch()});
    std::mt19937_64 rng(n);
    HostTensor q(DType::bf16, {16, 64}), key(DType::bf16, {n, 64}), out(DType::f32, {16});
    randomize(q, rng);
    randomize(key, rng);
    std::vector<double> ref(16);
    for (int64_t i = 0; i < 16; ++i) {
      // Rows past N read as zero, so a partial last tile scores 0.
      double best = n % 64 ? 0.0 : -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t d = 0; d < 64; ++d) s += double(q.values[i * 64 + d]) * key.values[j * 64 + d];
        best = std::max(best, s);
      }
      ref[i] = best;
    }
    DeviceRun run;
    run.args.push_back(rt::LaunchArg::integer(n));
    run.addTensor(q, false);
    run.addTensor(key, false);
    run.addTensor(out, true);
    CheckResult r = launchAndCompare(k, run, 3, out, ref, 1e-2, {});
    INFO(fmt::format("N={}: rel error {:.3e}", n, r.relError));
    CHECK(r.passed);
  }
}

TEST_CASE("two cross-warp reductions share one scratch buffer iteration after iteration",
          "[gpu][user]") {
  Program p = test::twoReductions();
  Kernel k = compile(p, {deviceArch()});
  const int64_t keys = 64 * 7; // seven steps: each reuses the buffer twice
  std::mt19937_64 rng(2);
  HostTensor q(DType::bf16, {16, 64}), kv(DType::bf16, {keys, 64}), out(DType::f32, {16});
  randomize(q, rng);
  randomize(kv, rng);
  std::vector<double> ref(16, 0.0);
  for (int64_t i = 0; i < 16; ++i)
    for (int64_t block = 0; block < keys; block += 64) {
      std::vector<double> s(64);
      for (int64_t j = 0; j < 64; ++j)
        for (int64_t c = 0; c < 64; ++c) s[j] += double(q.values[i * 64 + c]) * kv.values[(block + j) * 64 + c];
      double mx = *std::max_element(s.begin(), s.end());
      for (double v : s) ref[i] += std::exp(v - mx);
    }
  DeviceRun run;
  run.args.push_back(rt::LaunchArg::integer(keys));
  run.addTensor(q, false);
  run.addTensor(kv, false);
  run.addTensor(out, true);
  CheckResult r = launchAndCompare(k, run, 3, out, ref, 1e-4, {});
  INFO(fmt::format("rel error {:.3e}", r.relError));
  CHECK(r.passed);
}

TEST_CASE("FlashAttention two products without a warp policy on this GPU and on sm_80",
          "[gpu][user]") {
  const int64_t keys = 64 * 5;
  std::mt19937_64 rng(5);
  HostTensor q(DType::bf16, {64, 64}), kt(DType::bf16, {keys, 64}), v(DType::bf16, {keys, 64});
  randomize(q, rng);
  randomize(kt, rng);
  randomize(v, rng);
  std::vector<double> ref(64 * 64, 0.0);
  for (int64_t i = 0; i < 64; ++i)
    for (int64_t block = 0; block < keys; block += 64) {
      std::vector<double> s(64, 0.0);
      for (int64_t j = 0; j < 64; ++j)
        for (int64_t c = 0; c < 64; ++c) s[j] += double(q.values[i * 64 + c]) * kt.values[(block + j) * 64 + c];
      double mx = *std::max_element(s.begin(), s.end());
      for (int64_t j = 0; j < 64; ++j) {
        // P is rounded to bf16 before the second product, as the kernel does.
        double pj = testing::roundTo(DType::bf16, float(std::exp(s[j] - mx)));
        for (int64_t c = 0; c < 64; ++c) ref[i * 64 + c] += pj * v.values[(block + j) * 64 + c];
      }
    }
  // sm_80's build runs on an sm_90 GPU through its PTX.
  for (std::string arch : {deviceArch(), std::string("sm_80")}) {
    Program p = test::twoProducts();
    Kernel k = compile(p, {arch});
    HostTensor o(DType::f32, {64, 64});
    DeviceRun run;
    run.args.push_back(rt::LaunchArg::integer(keys));
    run.addTensor(q, false);
    run.addTensor(kt, false);
    run.addTensor(v, false);
    run.addTensor(o, true);
    // exp is the hardware approximation, so P may round to the neighbouring
    // bf16 now and then; a misplaced row or warp would be off by far more.
    CheckResult r = launchAndCompare(k, run, 4, o, ref, 1e-2, {});
    INFO(fmt::format("{}: rel error {:.3e}", arch, r.relError));
    CHECK(r.passed);
  }
}

TEST_CASE("producer addresses computed before the loop reach the producer", "[gpu][user]") {
  for (test::RowSource source : test::allRowSources) {
    Program p = test::offsetRowsSum(source);
    Kernel k = compile(p, {deviceArch()});
    const int64_t rows = 640;
    std::mt19937_64 rng(int(source) + 1);
    HostTensor x(DType::bf16, {rows, 64}), off(DType::i32, {4}), y(DType::f32, {64, 64});
    randomize(x, rng);
    for (int64_t i = 0; i < 4; ++i) off.set(i, float(16 * (i + 1))); // row0 = 160 by a scan
    int64_t row0 = test::expectedRowStart(source, rows, off.values);
    std::vector<double> ref(64 * 64, 0.0);
    for (int64_t it = 0; it < 4; ++it)
      for (int64_t i = 0; i < 64; ++i)
        for (int64_t j = 0; j < 64; ++j) ref[i * 64 + j] += x.values[(row0 + it * 64 + i) * 64 + j];
    DeviceRun run;
    run.args.push_back(rt::LaunchArg::integer(rows));
    run.addTensor(x, false);
    run.addTensor(off, false);
    run.addTensor(y, true);
    CheckResult r = launchAndCompare(k, run, 3, y, ref, 1e-5, {});
    INFO(fmt::format("{}: row start {}, rel error {:.3e}", test::name(source), row0, r.relError));
    CHECK(r.passed);
  }
}

TEST_CASE("a reduction's result read by every thread: vector softmax", "[gpu][user]") {
  Program p = test::vectorSoftmax();
  Kernel k = compile(p, {deviceArch()});
  std::mt19937_64 rng(7);
  HostTensor x(DType::f32, {256}), y(DType::f32, {256});
  randomize(x, rng, -4, 4);
  double mx = -INFINITY, sum = 0;
  for (float v : x.values) mx = std::max(mx, double(v));
  std::vector<double> ref(256);
  for (int i = 0; i < 256; ++i) sum += ref[i] = std::exp(x.values[i] - mx);
  for (double &r : ref) r /= sum;
  DeviceRun run;
  run.addTensor(x, false);
  run.addTensor(y, true);
  CheckResult r = launchAndCompare(k, run, 1, y, ref, 1e-5, {});
  INFO(fmt::format("rel error {:.3e}", r.relError));
  CHECK(r.passed);
}

// Three warps: a 64-element fragment spreads over two of them and the
// third holds replicas, so the total of its values must take the missing
// fourth warp's partial from the warp it replicates, not the identity (the
// differential fuzzer's seed 4602: a third of Y was off by the second
// warp's sum).
TEST_CASE("a reduction over a fragment that three warps replicate", "[gpu][user]") {
  Program p("replicated_total");
  Expr m = p.sym("M"), n = p.sym("N");
  Tensor x = p.tensor("X", {m, n}, DType::f32), y = p.tensor("Y", {m, n}, DType::f32);
  p.kernel({ceil_div(n, 32), ceil_div(m, 64)}, 96, [&](Expr bx, Expr by) {
    Buffer w = alloc_shared({64, 32}, DType::f32, "w");
    copy(x.tile({by * 64, bx * 32}, {64, 32}), w);
    Buffer r = alloc_fragment({64}, DType::f32, "r"), t = alloc_fragment({1}, DType::f32, "t");
    reduce_sum(w, r, 1);
    reduce_sum(r, t, 0);
    parallel(64, 32, [&](Expr i, Expr j) { w(i, j) = w(i, j) - t(0); });
    copy(w, y.tile({by * 64, bx * 32}, {64, 32}));
  });
  const int64_t rows = 57, cols = 78;
  std::mt19937_64 rng(4602);
  HostTensor hx(DType::f32, {rows, cols}), hy(DType::f32, {rows, cols});
  randomize(hx, rng, -1, 1);
  std::vector<double> ref(rows * cols);
  for (int64_t r0 = 0; r0 < rows; r0 += 64)
    for (int64_t c0 = 0; c0 < cols; c0 += 32) {
      double total = 0; // the tile's elements past M or N read as zero
      for (int64_t i = r0; i < std::min(rows, r0 + 64); ++i)
        for (int64_t j = c0; j < std::min(cols, c0 + 32); ++j) total += hx.values[i * cols + j];
      for (int64_t i = r0; i < std::min(rows, r0 + 64); ++i)
        for (int64_t j = c0; j < std::min(cols, c0 + 32); ++j)
          ref[i * cols + j] = hx.values[i * cols + j] - total;
    }
  for (std::string arch : {deviceArch(), std::string("sm_80")}) {
    if (!rt::archRunsOn(arch, rt::Driver::get().computeCapability())) continue;
    Kernel k = compile(p, {arch});
    DeviceRun run;
    run.args.push_back(rt::LaunchArg::integer(rows));
    run.args.push_back(rt::LaunchArg::integer(cols));
    run.addTensor(hx, false);
    run.addTensor(hy, true);
    CheckResult r = launchAndCompare(k, run, 3, hy, ref, 1e-5, {});
    INFO(arch << fmt::format(": rel error {:.3e}", r.relError));
    CHECK(r.passed);
  }
}

TEST_CASE("fragments live one after the other", "[gpu][user]") {
  Program p = test::twoPhases();
  Kernel k = compile(p, {deviceArch()});
  std::mt19937_64 rng(8);
  HostTensor x(DType::f32, {128, 128}), y(DType::f32, {128, 128}), z(DType::f32, {128, 128});
  randomize(x, rng);
  std::vector<double> twice(x.values.begin(), x.values.end()), thrice = twice;
  for (double &v : twice) v *= 2;
  for (double &v : thrice) v *= 3;
  CHECK(runOneInTwoOut(k, x, y, z, twice, 1e-6).passed);
  CHECK(relativeError(z.values, thrice) < 1e-6);
}

TEST_CASE("fragment copies into windows of a swizzled shared tile", "[gpu][user]") {
  Program p = test::swappedHalves();
  Kernel k = compile(p, {deviceArch()});
  std::mt19937_64 rng(9);
  HostTensor x(DType::f32, {64, 128}), y(DType::f32, {64, 128}), z(DType::f32, {64, 64});
  randomize(x, rng);
  std::vector<double> swapped(64 * 128), left(64 * 64);
  for (int64_t i = 0; i < 64; ++i)
    for (int64_t j = 0; j < 64; ++j) {
      swapped[i * 128 + j] = x.values[i * 128 + 64 + j];
      swapped[i * 128 + 64 + j] = x.values[i * 128 + j];
      left[i * 64 + j] = x.values[i * 128 + j];
    }
  CHECK(runOneInTwoOut(k, x, y, z, swapped, 1e-9).passed);
  // Moved, not computed: bit-exact.
  CHECK(maxDifference(y.values, swapped) == 0);
  CHECK(maxDifference(z.values, left) == 0);
}

TEST_CASE("bounded tensors read zero and drop writes past their limits", "[gpu][user]") {
  const int64_t n = 300;
  for (int64_t len : {0, 1, 77, 128, 200, 300}) {
    Program p = test::boundedCache();
    Kernel k = compile(p, {deviceArch()});
    std::mt19937_64 rng(len + 1);
    HostTensor cache(DType::f16, {n, 64}), y(DType::f16, {128, 64}), out(DType::f16, {n, 64});
    randomize(cache, rng);
    for (int64_t i = 0; i < n * 64; ++i) out.set(i, 5.0f); // rows past len must keep this
    std::vector<double> yRef(128 * 64), outRef(n * 64);
    for (int64_t r = 0; r < 128; ++r)
      for (int64_t c = 0; c < 64; ++c) yRef[r * 64 + c] = r < len ? cache.values[r * 64 + c] : 0.0;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < 64; ++c)
        outRef[r * 64 + c] = r < len ? 2.0 * cache.values[r * 64 + c] : 5.0;
    DeviceRun run;
    run.args.push_back(rt::LaunchArg::integer(n));
    run.args.push_back(rt::LaunchArg::integer(len));
    run.addTensor(cache, false);
    run.addTensor(y, true);
    run.addTensor(out, false);
    k.launch(run.args);
    synchronize();
    run.download(3, y);
    run.download(4, out);
    INFO("len " << len);
    // Exact: copies and a doubling in f16 (a zero reference too).
    CHECK(maxDifference(y.values, yRef) == 0);
    CHECK(maxDifference(out.values, outRef) == 0);
  }
}

TEST_CASE("a causal convolution's halo before t = 0 reads zero and writes nothing there",
          "[gpu][user]") {
  Program p = test::causalConvolution();
  Kernel k = compile(p, {deviceArch()});
  // Each tensor lies between guard rows of its own allocation: 1000s before
  // x (a read before the tensor would add them in), sentinels around back
  // (a write outside the tensor would replace them).
  const int64_t guard = 8 * 32, sentinel = -7;
  for (int64_t steps : {1, 16, 200, 256}) {
    const int64_t n = steps * 32;
    std::mt19937_64 rng(steps);
    std::vector<float> x(guard + n, 1000.0f), back(guard + n + guard, float(sentinel)), y(n);
    // Small integers: every sum is exact.
    for (int64_t i = 0; i < n; ++i) x[guard + i] = float(int64_t(rng() % 17) - 8);
    rt::DeviceBuffer dx(x.size() * 4), dy(n * 4), dback(back.size() * 4);
    dx.upload(x.data(), x.size() * 4);
    dback.upload(back.data(), back.size() * 4);
    dy.fillBytes(0xff);
    k.launch({rt::LaunchArg::integer(steps), rt::LaunchArg::buffer(dx.ptr() + guard * 4, {steps, 32}),
              rt::LaunchArg::buffer(dy.ptr(), {steps, 32}),
              rt::LaunchArg::buffer(dback.ptr() + guard * 4, {steps, 32})});
    synchronize();
    dy.download(y.data(), n * 4);
    dback.download(back.data(), back.size() * 4);
    INFO("T " << steps);
    int64_t wrongSums = 0, wrongBack = 0;
    for (int64_t t = 0; t < steps; ++t)
      for (int64_t c = 0; c < 32; ++c) {
        double sum = 0;
        for (int64_t s = std::max<int64_t>(t - 8, 0); s <= t; ++s) sum += x[guard + s * 32 + c];
        wrongSums += y[t * 32 + c] != sum;
      }
    // Block b < ceil(T / 64) copies rows [64 b - 8, 64 b + 16) of x to
    // back, clipped to the tensor; every other element keeps its sentinel.
    const int64_t blocks = (steps + 63) / 64;
    for (int64_t row = -8; row < steps + 8; ++row) {
      bool copied = row >= 0 && row < steps && (row + 8) / 64 < blocks && (row + 8) % 64 < 24;
      for (int64_t c = 0; c < 32; ++c) {
        float want = copied ? x[guard + row * 32 + c] : float(sentinel);
        wrongBack += back[guard + row * 32 + c] != want;
      }
    }
    CHECK(wrongSums == 0);
    CHECK(wrongBack == 0);
  }
  // Symbols are never negative (window offsets built from them need no
  // check against 0): a launch with T = -1 is refused.
  rt::DeviceBuffer small(32 * 4);
  rt::LaunchArg view = rt::LaunchArg::buffer(small.ptr(), {1, 32});
  CHECK_THROWS_WITH(k.launch({rt::LaunchArg::integer(-1), view, view, view}),
                    Catch::Contains("is an index symbol (Program::sym), which is never negative"));
}

TEST_CASE("a tensor whose extent is an expression of a symbol", "[gpu][user]") {
  Program p = test::extentExpression();
  Kernel k = compile(p, {deviceArch()});
  for (int64_t groups : {1, 7}) {
    HostTensor offs(DType::i32, {groups + 1}), out(DType::i32, {1});
    int64_t total = 0;
    for (int64_t i = 0; i <= groups; ++i) offs.set(i, float(3 * i + 1)), total += 3 * i + 1;
    DeviceRun run;
    run.args.push_back(rt::LaunchArg::integer(groups));
    run.addTensor(offs, false);
    run.addTensor(out, true);
    k.launch(run.args);
    synchronize();
    run.download(2, out);
    CHECK(out.values[0] == float(total));
  }
}

TEST_CASE("a kernel waits for another's signal, on two streams", "[gpu][user]") {
  Program producer = test::flagProducer(), consumer = test::flagConsumer();
  Kernel p = compile(producer, {deviceArch()}), c = compile(consumer, {deviceArch()});
  auto &d = rt::Driver::get();
  // Load both before either runs: loading a module while the waiter spins
  // would wait for the waiter.
  p.loadedKernel().resourceUsage();
  c.loadedKernel().resourceUsage();
  CUstream first, second;
  TESSEL_CU(d, cuStreamCreate, &first, CU_STREAM_NON_BLOCKING);
  TESSEL_CU(d, cuStreamCreate, &second, CU_STREAM_NON_BLOCKING);
  std::mt19937_64 rng(9);
  HostTensor x(DType::f32, {4096}), data(DType::f32, {4096}), out(DType::f32, {4096});
  HostTensor flags(DType::i32, {4});
  randomize(x, rng);
  DeviceRun run;
  run.addTensor(x, false);
  run.addTensor(data, true);
  run.addTensor(out, true);
  run.addTensor(flags, false); // zeros
  std::vector<double> ref;
  for (float v : x.values) ref.push_back(2.0 * v + 1.0);
  // Three epochs through the same flag, no reset: the consumer is launched
  // first each time and spins until the producer's signal.
  for (int epoch = 1; epoch <= 3; ++epoch) {
    c.launch({rt::LaunchArg::integer(epoch), run.args[1], run.args[2], run.args[3]}, first);
    p.launch({rt::LaunchArg::integer(epoch), run.args[0], run.args[1], run.args[3]}, second);
    TESSEL_CU(d, cuStreamSynchronize, first);
    TESSEL_CU(d, cuStreamSynchronize, second);
    run.download(2, out);
    INFO("epoch " << epoch);
    CHECK(relativeError(out.values, ref) < 1e-6);
    run.buffers[2]->fillBytes(0xff); // poison the output again
  }
  d.api().cuStreamDestroy(first);
  d.api().cuStreamDestroy(second);
}

// Run by the test below in a child process: the trap kills the context.
TEST_CASE("a wait that is never signalled traps", "[.trap_child]") {
  Program consumer = test::flagConsumer(/*timeoutMs=*/200);
  Kernel c = compile(consumer, {deviceArch()});
  DeviceRun run;
  HostTensor data(DType::f32, {4096}), out(DType::f32, {4096}), flags(DType::i32, {4});
  run.addTensor(data, false);
  run.addTensor(out, true);
  run.addTensor(flags, false); // zeros: epoch 5 never comes
  c.launch({rt::LaunchArg::integer(5), run.args[0], run.args[1], run.args[2]});
  auto &d = rt::Driver::get();
  try {
    TESSEL_CU(d, cuCtxSynchronize);
  } catch (const Error &e) {
    fmt::print("child caught: {}\n", e.what());
    throw;
  }
}

TEST_CASE("a wait that times out traps, and the error says which flag and why",
          "[gpu][user]") {
  auto [status, output] = test::runTaggedChild("[.trap_child]");
  INFO(output);
  CHECK(status != 0);
  CHECK_THAT(output, Catch::Contains("child caught: cuCtxSynchronize failed"));
  CHECK_THAT(output, Catch::Contains("its wait on the flags of kernel parameter #3 timed out "
                                     "after 200 ms"));
  CHECK_THAT(output, Catch::Contains("held 0, block (0, 0, 0) waited for 5"));
}

// A kernel launched in clusters of two blocks (no multicast): it runs as
// written when the grid divides into whole clusters, and a grid that does
// not is an error at launch that names both shapes, not a driver code.
TEST_CASE("a kernel in clusters of two runs, and an uneven grid is a launch error", "[gpu][user]") {
  if (deviceArch() != "sm_90a") {
    WARN("skipped: thread block clusters need sm_90a, the device is " << deviceArch());
    return;
  }
  Program p("clustered");
  Expr n = p.sym("N");
  Tensor x = p.tensor("x", {n}, DType::f32);
  p.kernel({ceil_div(n, 128)}, 128, [&](Expr bx) {
    cluster_dims({2});
    parallel(128, [&](Expr i) { x(bx * 128 + i) = x(bx * 128 + i) + 1.0; });
  });
  Kernel k = compile(p, {deviceArch()});
  REQUIRE(k.spec().cluster == std::array<unsigned, 3>{2, 1, 1});
  for (int64_t blocks : {2, 6}) {
    HostTensor v(DType::f32, {blocks * 128});
    std::vector<double> ref(blocks * 128);
    for (int64_t i = 0; i < blocks * 128; ++i) v.set(i, float(i)), ref[i] = double(i) + 1;
    DeviceRun run;
    run.args.push_back(rt::LaunchArg::integer(blocks * 128));
    run.addTensor(v, false);
    k.launch(run.args);
    synchronize();
    run.download(1, v);
    CHECK(maxDifference(v.values, ref) == 0);
  }
  HostTensor v(DType::f32, {3 * 128});
  DeviceRun run;
  run.args.push_back(rt::LaunchArg::integer(3 * 128));
  run.addTensor(v, true);
  try {
    k.launch(run.args);
    FAIL("no error");
  } catch (const Error &e) {
    CHECK(std::string(e.what()) ==
          "kernel clustered: the grid (3, 1, 1) does not divide into clusters of (2, 1, 1) blocks");
  }
}

TEST_CASE("three consumer warpgroups: 192-row tiles, row and column reductions", "[gpu][user]") {
  const int64_t keys = 64 * 5 - 17; // five steps, the last one partial (rows read as zero)
  std::mt19937_64 rng(192);
  HostTensor q(DType::bf16, {192, 64}), k(DType::bf16, {keys, 64});
  randomize(q, rng);
  randomize(k, rng);
  const int64_t steps = (keys + 63) / 64;
  std::vector<double> s(192 * 64 * steps, 0.0);
  for (int64_t i = 0; i < 192; ++i)
    for (int64_t j = 0; j < steps * 64; ++j)
      for (int64_t d = 0; d < 64 && j < keys; ++d)
        s[(j / 64) * 192 * 64 + i * 64 + j % 64] += double(q.values[i * 64 + d]) * k.values[j * 64 + d];
  std::vector<double> rowmax(192, -INFINITY), colsum(64, 0.0), last(192 * 64);
  for (int64_t t = 0; t < steps; ++t)
    for (int64_t i = 0; i < 192; ++i) {
      for (int64_t j = 0; j < 64; ++j) rowmax[i] = std::max(rowmax[i], s[t * 192 * 64 + i * 64 + j]);
      for (int64_t j = 0; j < 64; ++j) colsum[j] += std::exp(s[t * 192 * 64 + i * 64 + j] - rowmax[i]);
    }
  std::copy(s.end() - 192 * 64, s.end(), last.begin());
  for (std::string arch : {deviceArch(), std::string("sm_80")})
    for (WarpPolicy policy : {WarpPolicy::full_row, WarpPolicy::square}) {
      Program p = test::threeWarpgroups(policy);
      Kernel kernel = compile(p, {arch});
      HostTensor outMax(DType::f32, {192}), outSum(DType::f32, {64}), outLast(DType::f32, {192, 64});
      DeviceRun run;
      run.args.push_back(rt::LaunchArg::integer(keys));
      run.addTensor(q, false);
      run.addTensor(k, false);
      run.addTensor(outMax, true);
      run.addTensor(outSum, true);
      run.addTensor(outLast, true);
      CheckResult r = launchAndCompare(kernel, run, 3, outMax, rowmax, 1e-4, {});
      run.download(4, outSum);
      run.download(5, outLast);
      std::vector<float> sums(outSum.values.begin(), outSum.values.end());
      std::vector<float> lasts(outLast.values.begin(), outLast.values.end());
      double sumError = maxDifference(sums, colsum) / *std::max_element(colsum.begin(), colsum.end());
      double lastError = maxDifference(lasts, last);
      INFO(fmt::format("{} {}: row max rel error {:.3e}, column sums {:.3e}, last scores {:.3e}",
                       arch, p.name(), r.relError, sumError, lastError));
      CHECK(r.passed);
      // exp is the hardware approximation; a missing warpgroup's rows or a
      // garbage partial would be off by whole rows' sums.
      CHECK(sumError < 1e-3);
      CHECK(lastError < 1e-3);
    }
}
