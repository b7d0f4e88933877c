//===- LaunchBench.cpp - the host cost of a launch -------------------------===//
//
// Host time is what the calling thread spends in the call, launches queued
// on a stream the GPU drains (synchronized every 64 launches, outside the
// timed calls, so the queue never fills). The kernels are small: the GPU
// time is not what is measured.
//
//===----------------------------------------------------------------------===//
#include "LaunchBench.h"
#include "tessel/Tessel.h"
#include "tessel/dsl/Compile.h"
#include "tessel/dsl/Program.h"
#include "tessel/kernels/basic/Basic.h"
#include "tessel/kernels/gemm/Gemm.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Graph.h"
#include "tessel/runtime/Launch.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fmt/format.h>
#include <functional>
#include <random>
#include <vector>

using namespace tessel;
using rt::LaunchArg;
using rt::ScalarType;

namespace {
constexpr int64_t kElements = 4096;

/// y += 1 over 256 f32 of static shape: one pointer parameter, no tensor
/// maps, so the driver's own launch of it is the floor.
Program increment() {
  Program p("increment");
  Tensor y = p.tensor("y", {256}, DType::f32);
  p.kernel({1}, 256, [&](Expr) { parallel(256, [&](Expr i) { y(i) = y(i) + 1.0; }); });
  return p;
}

struct HostTime {
  double median = 0, p90 = 0; // microseconds
};

HostTime hostTime(const std::function<void()> &launch, int reps, CUstream stream) {
  rt::Driver &d = rt::Driver::get();
  for (int i = 0; i < 32; ++i) launch();
  TESSEL_CU(d, cuStreamSynchronize, stream);
  std::vector<double> us;
  us.reserve(reps);
  for (int i = 0; i < reps; ++i) {
    auto start = std::chrono::steady_clock::now();
    launch();
    auto stop = std::chrono::steady_clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(stop - start).count());
    if (i % 64 == 63) TESSEL_CU(d, cuStreamSynchronize, stream);
  }
  TESSEL_CU(d, cuStreamSynchronize, stream);
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 9 / 10]};
}

void printRow(const char *what, HostTime t) {
  fmt::print("{:<52} {:>8.2f} {:>8.2f}\n", what, t.median, t.p90);
}

/// 100 launches of y = alpha * x + y enqueued one by one and replayed from a
/// graph captured of the same launches, from the same y: the two results
/// must agree bit for bit. Prints the GPU time per launch of each.
bool graphAgrees(Kernel &accumulate, CUstream stream) {
  rt::Driver &d = rt::Driver::get();
  std::vector<float> x(kElements), y0(kElements);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (float &v : x) v = uniform(rng);
  for (float &v : y0) v = uniform(rng);
  rt::DeviceBuffer xs(kElements * 4), ys(kElements * 4);
  xs.upload(x.data(), x.size() * 4);
  auto view = [](const rt::DeviceBuffer &b) {
    return TensorView::contiguous(b.ptr(), ScalarType::F32, {kElements}, b.device());
  };
  auto hundred = [&](CUstream s) {
    for (int i = 0; i < 100; ++i)
      accumulate.launch({LaunchArg::integer(kElements), LaunchArg::real(0.5 + 0.004 * i),
                         LaunchArg::view(view(xs)), LaunchArg::view(view(ys))},
                        s);
  };
  auto run = [&](const std::function<void()> &work) {
    ys.upload(y0.data(), y0.size() * 4);
    CUevent start, stop;
    TESSEL_CU(d, cuEventCreate, &start, 0);
    TESSEL_CU(d, cuEventCreate, &stop, 0);
    TESSEL_CU(d, cuEventRecord, start, stream);
    work();
    TESSEL_CU(d, cuEventRecord, stop, stream);
    TESSEL_CU(d, cuEventSynchronize, stop);
    float ms = 0;
    TESSEL_CU(d, cuEventElapsedTime, &ms, start, stop);
    d.api().cuEventDestroy(start);
    d.api().cuEventDestroy(stop);
    std::vector<float> out(kElements);
    ys.download(out.data(), out.size() * 4);
    return std::pair{ms, out};
  };
  auto [eagerMs, eager] = run([&] { hundred(stream); });
  rt::CapturedGraph graph(stream, hundred);
  auto [graphMs, replayed] = run([&] { graph.replay(stream); });
  bool same = std::memcmp(eager.data(), replayed.data(), eager.size() * 4) == 0;
  fmt::print("graph of 100 launches ({} nodes): {:.2f} us a launch replayed, {:.2f} us one by "
             "one; results {}\n",
             graph.nodes(), graphMs * 10, eagerMs * 10,
             same ? "identical" : "DIFFER");
  return same;
}
} // namespace

int tessel::launchBenchCommand(int reps) {
  std::string why;
  if (!rt::Driver::available(&why)) {
    fmt::print("NO GPU: cannot time launches here ({})\n", why);
    return 1;
  }
  rt::Driver &d = rt::Driver::get();
  d.makeCurrent();
  std::string arch = rt::nativeArch(d.computeCapability());
  CUstream stream;
  TESSEL_CU(d, cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
  // y = alpha * x + y over 4096 f32 (on sm_90a through 1-D tensor maps).
  Program accumulateProgram = kernels::scaledAdd({});
  Kernel accumulate = compile(accumulateProgram, {arch, ""});
  // The library gemm's tiles, with its 16-bit C through a TMA store (three
  // tensor maps on sm_90a).
  kernels::GemmConfig config = kernels::defaultGemmConfig(arch);
  config.in = config.out = DType::bf16;
  if (arch == "sm_90a") {
    config.stages = 3;
    config.tmaStore = true;
  }
  Program gemmProgram = kernels::gemm(config);
  Kernel gemm = compile(gemmProgram, {arch, ""});
  const int64_t m = 256, n = 256, k = 256;
  rt::DeviceBuffer xs(kElements * 4), ys(kElements * 4), as(m * k * 2), bs(k * n * 2),
      cs(m * n * 2);
  xs.fillBytes(0);
  ys.fillBytes(0);
  as.fillBytes(0);
  bs.fillBytes(0);
  auto vec = [](const rt::DeviceBuffer &b) {
    return LaunchArg::view(TensorView::contiguous(b.ptr(), ScalarType::F32, {kElements}, b.device()));
  };
  auto mat = [](const rt::DeviceBuffer &b, int64_t rows, int64_t cols) {
    return TensorView::contiguous(b.ptr(), ScalarType::BF16, {rows, cols}, b.device());
  };
  std::vector<LaunchArg> accumulateArgs = {LaunchArg::integer(kElements), LaunchArg::real(0.5),
                                           vec(xs), vec(ys)};
  std::vector<LaunchArg> gemmArgs = {LaunchArg::integer(m),      LaunchArg::integer(n),
                                     LaunchArg::integer(k),      LaunchArg::view(mat(as, m, k)),
                                     LaunchArg::view(mat(bs, k, n)), LaunchArg::view(mat(cs, m, n))};
  fmt::print("host time of one launch on {} ({}), {} launches each\n", d.deviceName(), arch, reps);
  fmt::print("{:<52} {:>8} {:>8}\n", "call", "median", "p90 us");
  // The floor: the driver's own launch of a one-pointer kernel, its
  // parameter built once, beside Kernel::launch of the same kernel.
  Program incrementProgram = increment();
  Kernel bump = compile(incrementProgram, {arch, ""});
  CUfunction function = bump.loadedKernel().function();
  CUdeviceptr yp = ys.ptr();
  void *params[] = {&yp};
  printRow("cuLaunchKernel, one pointer (parameters built once)", hostTime([&] {
             TESSEL_CU(d, cuLaunchKernel, function, 1, 1, 1, 256, 1, 1, 0, stream, params, nullptr);
           }, reps, stream));
  std::vector<LaunchArg> bumpArgs = {LaunchArg::view(
      TensorView::contiguous(ys.ptr(), ScalarType::F32, {256}, ys.device()))};
  printRow("Kernel::launch, the same kernel (one view)",
           hostTime([&] { bump.launch(bumpArgs, stream); }, reps, stream));
  printRow(fmt::format("Kernel::launch, 2 views and 2 scalars ({} tensor maps)",
                       accumulate.spec().tensorMaps.size()).c_str(),
           hostTime([&] { accumulate.launch(accumulateArgs, stream); }, reps, stream));
  printRow(fmt::format("Kernel::launch, gemm {}^3 ({} tensor maps)", m,
                       gemm.spec().tensorMaps.size()).c_str(),
           hostTime([&] { gemm.launch(gemmArgs, stream); }, reps, stream));
  GemmCallOptions options;
  options.tuned = false;
  printRow(fmt::format("tessel::gemm {}^3 (the library call)", m).c_str(), hostTime([&] {
             tessel::gemm(mat(as, m, k), mat(bs, k, n), mat(cs, m, n), options, stream);
           }, reps, stream));
  bool same = graphAgrees(accumulate, stream);
  d.api().cuStreamDestroy(stream);
  return same ? 0 : 1;
}
