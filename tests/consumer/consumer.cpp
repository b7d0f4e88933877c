// Compiles a library kernel and a kernel of its own to cubin through an
// installed libtessel.so, and checks that a mistyped launch is refused
// with a message, as a program embedding Tessel would see it. Then tests
// its own kernel the way <tessel/Testing.h> offers: host tensors rounded
// as the device rounds, their bytes, the relative error, and where a GPU
// is present an upload, a launch into a poisoned output and a download.
#include <tessel/Tessel.h>
#include <tessel/Testing.h>
#include <tessel/dsl/Compile.h>
#include <tessel/runtime/Driver.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <vector>
#include <string>

namespace {
/// The host side of <tessel/Testing.h>: a bf16 tensor's rounding and
/// bytes, and the relative error of a result against a double reference.
bool checkHostTensors() {
  using tessel::DType;
  namespace testing = tessel::testing;
  // 1 + 2^-8 is a tie between two bf16 values: the even one, 1, is kept.
  testing::HostTensor x(DType::bf16, {4}, {1.0f + 0x1p-8f, -2.5f, 3.0e38f, 0.1f});
  testing::HostTensor back(DType::bf16, {4});
  back.bytes = x.bytes;
  back.decode();
  bool same = back.values == x.values && x.values[0] == 1.0f && x.values[3] == 0.10009765625f &&
              x.bytes.size() == 8;
  std::vector<double> ref = {1.0, -2.5, 3.0e38, 0.1};
  double error = testing::relativeError(x, ref);
  std::printf("bf16 host tensor: values %g %g %g %g, relative error %.2e (tolerance %g)\n",
              x.values[0], x.values[1], x.values[2], x.values[3], error,
              testing::toleranceFor(DType::bf16));
  return same && error < testing::toleranceFor(DType::bf16) &&
         std::isinf(testing::relativeError({NAN, 0, 0, 0}, ref));
}

/// The device side: `scale` doubles x in place; its result is downloaded
/// and compared. A poisoned buffer nothing wrote must read as NaN: an
/// infinite error.
bool checkOnDevice(tessel::Kernel &scale) {
  using tessel::DType;
  namespace testing = tessel::testing;
  const int64_t n = 1000;
  std::mt19937_64 rng(1);
  testing::HostTensor x(DType::f32, {n});
  testing::randomize(x, rng);
  std::vector<double> ref(x.values.begin(), x.values.end());
  for (double &v : ref) v *= 2;
  testing::DeviceRun run;
  run.args.push_back(tessel::rt::LaunchArg::integer(n));
  run.addTensor(x, /*poison=*/false);
  scale.launch(run.args);
  testing::synchronize();
  testing::HostTensor y(DType::f32, {n});
  run.download(1, y);
  double error = testing::relativeError(y, ref);
  std::printf("scale on the device: relative error %.2e\n", error);

  testing::HostTensor z(DType::f32, {n});
  auto unwritten = testing::poisoned(z);
  testing::download(*unwritten, z);
  bool poisonShows = std::isinf(testing::relativeError(z, ref));
  return error < testing::toleranceFor(DType::f32) && poisonShows;
}
} // namespace

int main(int argc, char **argv) {
  std::string arch = argc > 1 ? argv[1] : "sm_90a";
  std::printf("tessel %s\n", tessel::version());

  tessel::kernels::GemmConfig config;
  config.in = tessel::DType::bf16;
  config.blockM = 128;
  config.blockN = 128;
  config.blockK = 64;
  config.stages = 3;
  tessel::Program gemm = tessel::kernels::gemm(config);
  tessel::Kernel kernel = tessel::compile(gemm, {.arch = arch});
  std::printf("gemm for %s: %zu bytes of cubin, %zu of PTX\n", arch.c_str(), kernel.cubin().size(),
              kernel.ptx().size());
  if (kernel.cubin().empty()) return 1;

  tessel::Program scale("scale");
  tessel::Expr n = scale.sym("N");
  tessel::Tensor x = scale.tensor("x", {n}, tessel::DType::f32);
  scale.kernel({tessel::ceil_div(n, 256)}, 128, [&](tessel::Expr bx) {
    tessel::Buffer t = x.tile({bx * 256}, {256});
    tessel::parallel({256}, [&](tessel::Expr i) { t(i) = t(i) * 2.0; });
  });
  tessel::Kernel own = tessel::compile(scale, {.arch = arch});
  std::printf("own kernel: %zu bytes of cubin\n", own.cubin().size());

  try {
    auto half = tessel::TensorView::contiguous(0x10000, tessel::rt::ScalarType::F16, {100});
    own.launch({tessel::rt::LaunchArg::integer(100), tessel::rt::LaunchArg::view(half)});
    std::printf("a mistyped launch was not refused\n");
    return 1;
  } catch (const tessel::Error &e) {
    std::printf("refused: %s\n", e.what());
  }
  // The library carries its own C++ runtime: its exceptions must still be
  // caught as std::exception by a program built with another.
  try {
    auto bf16 = [](std::vector<int64_t> shape) {
      return tessel::TensorView::contiguous(0x10000, tessel::rt::ScalarType::BF16, shape);
    };
    auto lse = tessel::TensorView::contiguous(0x10000, tessel::rt::ScalarType::F32, {1, 4, 64});
    tessel::attention::forward(bf16({1, 64, 4, 64}), bf16({1, 64, 3, 64}), bf16({1, 64, 3, 64}),
                               bf16({1, 64, 4, 64}), lse);
    std::printf("a GQA mismatch was not refused\n");
    return 1;
  } catch (const std::exception &e) {
    std::printf("refused: %s\n", e.what());
  }

  // The sequence-parallel call is exported and declared for consumers
  // (running it takes a communicator over GPUs: tessel-gpu-tests does).
  tessel::Choice (*spForward)(tessel::rt::Communicator &, const tessel::TensorView &,
                              const tessel::TensorView &, const tessel::TensorView &,
                              const tessel::TensorView &, const tessel::sp_attention::Options &,
                              CUstream) = &tessel::sp_attention::forward;
  std::printf("sp_attention::forward at %p\n", reinterpret_cast<void *>(spForward));
  using View = const tessel::TensorView &;
  tessel::Choice (*spBackward)(tessel::rt::Communicator &, View, View, View, View, View, View, View,
                               View, View, const tessel::sp_attention::Options &, CUstream) =
      &tessel::sp_attention::backward;
  std::printf("sp_attention::backward at %p\n", reinterpret_cast<void *>(spBackward));

  if (!checkHostTensors()) {
    std::printf("host tensors from <tessel/Testing.h> are wrong\n");
    return 1;
  }
  std::string why;
  if (!tessel::rt::Driver::available(&why)) {
    std::printf("no GPU (%s): device checks skipped\n", why.c_str());
    return 0;
  }
  int cc = tessel::rt::Driver::get().computeCapability();
  tessel::Kernel native = tessel::compile(scale, {.arch = tessel::rt::nativeArch(cc)});
  if (!checkOnDevice(native)) {
    std::printf("the kernel's result on the device is wrong\n");
    return 1;
  }
  return 0;
}
