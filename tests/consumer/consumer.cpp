// Compiles a library kernel and a kernel of its own to cubin through an
// installed libtessel.so, and checks that a mistyped launch is refused
// with a message, as a program embedding Tessel would see it.
#include <tessel/Tessel.h>
#include <tessel/dsl/Compile.h>

#include <cstdio>
#include <exception>
#include <vector>
#include <string>

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
  return 0;
}
