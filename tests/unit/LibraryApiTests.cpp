//===- LibraryApiTests.cpp - views, DLPack, library calls, threads --------===//
//
// What can be checked without a GPU: a TensorView's layout, DLPack import,
// launch-time checks of views against a kernel's parameters (made before
// the driver is touched), the library calls' argument checks, and
// compiling from several threads at once.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "ErrorOf.h"
#include "tessel/Tessel.h"
#include "tessel/dsl/Compile.h"

#include <dlpack/dlpack.h>
#include <thread>

using namespace tessel;
using rt::ScalarType;

namespace {
using test::errorOf;

/// A DLPack tensor over caller-owned shape and stride arrays.
struct FakeDLPack {
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed{};
  FakeDLPack(DLDeviceType device, DLDataType dtype, std::vector<int64_t> s, std::vector<int64_t> st)
      : shape(std::move(s)), strides(std::move(st)) {
    DLTensor &t = managed.dl_tensor;
    t.data = reinterpret_cast<void *>(uintptr_t(0x10000));
    t.device = {device, 1};
    t.ndim = int32_t(shape.size());
    t.dtype = dtype;
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
    t.byte_offset = 256;
  }
};

TensorView view(ScalarType t, std::vector<int64_t> shape, uint64_t at = 0x10000) {
  return TensorView::contiguous(at, t, std::move(shape));
}

/// y = 2 * x over N elements (one tensor parameter of each side).
Program doubler() {
  Program p("doubler");
  Expr n = p.sym("N");
  Tensor x = p.tensor("x", {n}, DType::f32);
  Tensor y = p.tensor("y", {n}, DType::f32);
  p.kernel({ceil_div(n, 256)}, 128, [&](Expr bx) {
    Buffer xs = x.tile({bx * 256}, {256});
    Buffer ys = y.tile({bx * 256}, {256});
    parallel({256}, [&](Expr i) { ys(i) = xs(i) * 2.0; });
  });
  return p;
}
} // namespace

TEST_CASE("a TensorView knows whether it is row-major contiguous", "[views]") {
  TensorView v = view(ScalarType::BF16, {2, 3, 4});
  CHECK(v.isContiguous());
  CHECK(v.numel() == 24);
  CHECK(v.contiguousStrides() == std::vector<int64_t>{12, 4, 1});
  v.strides = {12, 4, 1};
  CHECK(v.isContiguous());
  // Frameworks give extent-1 dimensions any stride.
  TensorView one = view(ScalarType::F32, {1, 3, 1});
  one.strides = {99, 1, 7};
  CHECK(one.isContiguous());
  v.strides = {24, 4, 1}; // every other row block: a slice
  CHECK_FALSE(v.isContiguous());
  CHECK(v.str() == "bf16[2, 3, 4] with strides [24, 4, 1] on device 0");
  v.strides = {12, 1, 3}; // transposed inner dimensions
  CHECK_FALSE(v.isContiguous());
}

TEST_CASE("DLPack tensors become views, with errors for what Tessel cannot take", "[views]") {
  FakeDLPack bf16(kDLCUDA, {kDLBfloat, 16, 1}, {2, 5, 8}, {});
  TensorView v = rt::fromDLPack(bf16.managed);
  CHECK(v.dtype == ScalarType::BF16);
  CHECK(v.shape == std::vector<int64_t>{2, 5, 8});
  CHECK(v.strides.empty());
  CHECK(v.device == 1);
  CHECK(v.data == 0x10000 + 256); // byte_offset included

  FakeDLPack strided(kDLCUDA, {kDLFloat, 32, 1}, {4, 4}, {8, 1});
  TensorView s = rt::fromDLPack(strided.managed);
  CHECK(s.dtype == ScalarType::F32);
  CHECK_FALSE(s.isContiguous());

  FakeDLPack host(kDLCPU, {kDLFloat, 32, 1}, {4}, {});
  CHECK_THAT(errorOf([&] { rt::fromDLPack(host.managed); }),
             Catch::Contains("device type 1") && Catch::Contains("CUDA device memory"));
  FakeDLPack complex(kDLCUDA, {kDLComplex, 64, 1}, {4}, {});
  CHECK_THAT(errorOf([&] { rt::fromDLPack(complex.managed); }),
             Catch::Contains("code 5, 64 bits") && Catch::Contains("not supported"));
  FakeDLPack fp8(kDLCUDA, {kDLFloat, 8, 1}, {4}, {});
  CHECK_THAT(errorOf([&] { rt::fromDLPack(fp8.managed); }), Catch::Contains("8 bits"));
  FakeDLPack lanes(kDLCUDA, {kDLFloat, 16, 4}, {4}, {});
  CHECK_THAT(errorOf([&] { rt::fromDLPack(lanes.managed); }), Catch::Contains("4 lanes"));
}

TEST_CASE("a launch checks each view's dtype, strides and device before the GPU", "[views]") {
  Program p = doubler();
  Kernel k = compile(p, {.arch = "sm_80"});
  auto launch = [&](TensorView x, TensorView y) {
    return errorOf([&] {
      k.launch({rt::LaunchArg::integer(1000), rt::LaunchArg::view(x), rt::LaunchArg::view(y)});
    });
  };
  CHECK_THAT(launch(view(ScalarType::BF16, {1000}), view(ScalarType::F32, {1000}, 0x20000)),
             Catch::Contains("argument 1 ('x') is bf16, the kernel takes f32"));
  TensorView gappy = view(ScalarType::F32, {1000}, 0x20000);
  gappy.strides = {2};
  CHECK_THAT(launch(view(ScalarType::F32, {1000}), gappy),
             Catch::Contains("argument 2 ('y') has strides [2]") &&
                 Catch::Contains("row-major contiguous (strides [1])"));
  TensorView elsewhere = view(ScalarType::F32, {1000}, 0x20000);
  elsewhere.device = 3;
  CHECK_THAT(launch(view(ScalarType::F32, {1000}), elsewhere),
             Catch::Contains("argument 1 is on device 0, argument 2 on device 3"));
  CHECK_THAT(launch(view(ScalarType::F32, {999}), view(ScalarType::F32, {1000}, 0x20000)),
             Catch::Contains("tensor 'x' has extent 999"));
}

TEST_CASE("attention and gemm calls say which argument is wrong", "[views]") {
  auto bf16 = [](std::vector<int64_t> s) { return view(ScalarType::BF16, std::move(s)); };
  TensorView q = bf16({2, 256, 8, 128}), kv = bf16({2, 256, 2, 128}), out = bf16({2, 256, 8, 128});
  TensorView lse = view(ScalarType::F32, {2, 8, 256});
  auto forward = [&](TensorView q2, TensorView k2, TensorView lse2, attention::ForwardOptions o = {}) {
    return errorOf([&] { attention::forward(q2, k2, k2, out, lse2, o); });
  };
  CHECK_THAT(forward(q, view(ScalarType::F16, {2, 256, 2, 128}), lse),
             Catch::Contains("k is f16[2, 256, 2, 128] on device 0: it must be bf16"));
  CHECK_THAT(forward(bf16({2, 256, 8}), kv, lse), Catch::Contains("q is bf16[2, 256, 8] on device 0: it needs 4 dimensions"));
  CHECK_THAT(forward(q, bf16({2, 256, 3, 128}), lse),
             Catch::Contains("heads_q = 8 is not a multiple of heads_kv = 3"));
  CHECK_THAT(forward(q, kv, view(ScalarType::F32, {2, 256, 8})),
             Catch::Contains("lse is f32[2, 256, 8] on device 0: expected shape [2, 8, 256]"));
  TensorView transposed = q;
  transposed.strides = {256 * 8 * 128, 128, 256 * 128, 1}; // BHSD memory seen as BSHD
  CHECK_THAT(forward(transposed, kv, lse), Catch::Contains("pass a contiguous copy"));
  attention::ForwardOptions varlen;
  varlen.cuSeqlensQ = view(ScalarType::I32, {3});
  CHECK_THAT(forward(q, kv, lse, varlen), Catch::Contains("need both cuSeqlensQ and cuSeqlensK"));
  attention::ForwardOptions negative;
  negative.scale = -1;
  CHECK_THAT(forward(q, kv, lse, negative), Catch::Contains("scale = -1"));
  TensorView misaligned = bf16({2, 256, 8, 128});
  misaligned.data += 2;
  CHECK_THAT(forward(misaligned, kv, lse), Catch::Contains("not 16-byte aligned"));

  attention::BackwardOptions direct;
  direct.config = kernels::AttentionBackwardConfig{};
  direct.config->kvReduction = kernels::KvReduction::direct;
  CHECK_THAT(errorOf([&] { attention::backwardWorkspaceBytes(q, kv, direct); }),
             Catch::Contains("needs heads_q == heads_kv (got 8 and 2)"));
  // GQA by atomics: delta, dQ and fp32 dK/dV accumulators.
  size_t bytes = attention::backwardWorkspaceBytes(q, kv, {});
  CHECK(bytes == 4 * size_t(2 * 8 * 256 + 2 * 256 * 8 * 128 + 2 * (2 * 256 * 2 * 128)));

  TensorView a = view(ScalarType::F16, {128, 64}), b = view(ScalarType::F16, {32, 256});
  TensorView c = view(ScalarType::F32, {128, 256});
  CHECK_THAT(errorOf([&] { tessel::gemm(a, b, c); }),
             Catch::Contains("op(a) has 64 columns but op(b) has 32 rows"));
  CHECK_THAT(errorOf([&] { tessel::gemm(a, view(ScalarType::BF16, {64, 256}), c); }),
             Catch::Contains("b is bf16[64, 256] on device 0: it must be f16"));
  GemmCallOptions transposed2;
  transposed2.transposeB = true;
  CHECK_THAT(errorOf([&] { tessel::gemm(a, view(ScalarType::F16, {64, 256}), c, transposed2); }),
             Catch::Contains("op(a) has 64 columns but op(b) has 256 rows"));

  // 8-bit inputs: i8 accumulates into i32 only, FP8 into a float C; scales
  // come in pairs, one element each or one per row of A and column of B.
  TensorView fa = view(ScalarType::F8E4M3, {128, 64}), fb = view(ScalarType::F8E4M3, {256, 64});
  TensorView ia = view(ScalarType::I8, {128, 64}), ib = view(ScalarType::I8, {256, 64});
  CHECK_THAT(errorOf([&] { tessel::gemm(fa, fb, view(ScalarType::I32, {128, 256}), transposed2); }),
             Catch::Contains("c is i32[128, 256] on device 0"));
  CHECK_THAT(errorOf([&] { tessel::gemm(ia, ib, c, transposed2); }),
             Catch::Contains("c is f32[128, 256] on device 0: it must be i32"));
  CHECK_THAT(errorOf([&] { tessel::gemm(fa, view(ScalarType::F8E5M2, {256, 64}), c, transposed2); }),
             Catch::Contains("b is f8e5m2[256, 64] on device 0: it must be f8e4m3"));
  GemmCallOptions halfScaled = transposed2;
  halfScaled.scaleA = view(ScalarType::F32, {1});
  CHECK_THAT(errorOf([&] { tessel::gemm(fa, fb, c, halfScaled); }),
             Catch::Contains("give both scaleA and scaleB"));
  GemmCallOptions rowScaled = transposed2;
  rowScaled.scaleA = view(ScalarType::F32, {128});
  rowScaled.scaleB = view(ScalarType::F32, {255});
  CHECK_THAT(errorOf([&] { tessel::gemm(fa, fb, c, rowScaled); }),
             Catch::Contains("scaleB is f32[255] on device 0: expected shape [256]"));
  rowScaled.scaleB = view(ScalarType::F16, {256});
  CHECK_THAT(errorOf([&] { tessel::gemm(fa, fb, c, rowScaled); }),
             Catch::Contains("scaleB is f16[256] on device 0: it must be f32"));
}

TEST_CASE("quantize says which view is wrong and why", "[views]") {
  TensorView x = view(ScalarType::BF16, {7, 512}), q = view(ScalarType::F8E4M3, {7, 512});
  TensorView rows = view(ScalarType::F32, {7});
  auto error = [&](const TensorView &x2, const TensorView &q2, const TensorView &scales) {
    return errorOf([&] { tessel::quantize(x2, q2, scales); });
  };
  CHECK_THAT(error(view(ScalarType::F8E4M3, {7, 512}), q, rows),
             Catch::Contains("x is f8e4m3[7, 512] on device 0: it must be f32 or f16 or bf16"));
  CHECK_THAT(error(view(ScalarType::BF16, {7, 4, 128}), q, rows),
             Catch::Contains("x is bf16[7, 4, 128] on device 0: it needs 2 dimensions"));
  CHECK_THAT(error(x, view(ScalarType::BF16, {7, 512}), rows),
             Catch::Contains("q is bf16[7, 512] on device 0: it must be f8e4m3 or f8e5m2"));
  CHECK_THAT(error(x, view(ScalarType::F8E5M2, {7, 256}), rows),
             Catch::Contains("q is f8e5m2[7, 256] on device 0: expected shape [7, 512]"));
  CHECK_THAT(error(x, q, view(ScalarType::BF16, {7})),
             Catch::Contains("scales is bf16[7] on device 0: it must be f32"));
  CHECK_THAT(error(x, q, view(ScalarType::F32, {8})),
             Catch::Contains("scales is f32[8] on device 0: expected shape [7]"));
  CHECK_THAT(error(x, q, view(ScalarType::F32, {7, 8})),
             Catch::Contains("scales is f32[7, 8] on device 0: expected shape [7, 4]"));
  CHECK_THAT(error(x, q, view(ScalarType::F32, {7, 4, 1})),
             Catch::Contains("scales is f32[7, 4, 1] on device 0: it needs 1 dimension ([7], a "
                             "scale per row) or 2 ([7, cols / 128]"));
  // Block scales need whole blocks.
  CHECK_THAT(error(view(ScalarType::F32, {7, 500}), view(ScalarType::F8E4M3, {7, 500}),
                   view(ScalarType::F32, {7, 3})),
             Catch::Contains("needs x's rows in whole blocks of 128, and x has 500 columns"));
  TensorView strided = x;
  strided.strides = {1024, 1}; // every other row of a wider matrix
  CHECK_THAT(error(strided, q, rows), Catch::Contains("pass a contiguous copy"));
  TensorView misaligned = q;
  misaligned.data += 8;
  CHECK_THAT(error(x, misaligned, rows), Catch::Contains("q is f8e4m3[7, 512]"));
  CHECK_THAT(error(x, misaligned, rows), Catch::Contains("not 16-byte aligned"));
  TensorView elsewhere = rows;
  elsewhere.device = 1;
  CHECK_THAT(error(x, q, elsewhere), Catch::Contains("tensors on devices 0 and 1"));
  // MX (ue8m0) scales: [M, cols / 32] or the gemm's blocked layout.
  CHECK_THAT(error(x, q, view(ScalarType::UE8M0, {7, 4})),
             Catch::Contains("scales is ue8m0[7, 4] on device 0: expected shape [7, 16]"));
  CHECK_THAT(error(x, q, view(ScalarType::UE8M0, {1, 1, 32, 16})),
             Catch::Contains("scales is ue8m0[1, 1, 32, 16] on device 0: expected shape [1, 4, "
                             "32, 16]"));
  CHECK_THAT(error(x, q, view(ScalarType::UE8M0, {7, 16, 1})),
             Catch::Contains("ue8m0 (MX) scales are [7, 16] (a scale per 32 elements of a row) or "
                             "[1, 4, 32, 16]"));
  CHECK_THAT(error(view(ScalarType::BF16, {7, 500}), view(ScalarType::F8E4M3, {7, 500}),
                   view(ScalarType::UE8M0, {7, 15})),
             Catch::Contains("x has 500 columns, not a multiple of 32"));
  TensorView gappy = view(ScalarType::UE8M0, {1, 4, 32, 16});
  gappy.strides = {4096, 1024, 16, 1}; // atoms 1 KiB apart
  CHECK_THAT(error(x, q, gappy), Catch::Contains("pass a contiguous copy")); // padding is filled
  QuantizeOptions kMajor;
  kMajor.kMajorScales = true;
  CHECK_THAT(errorOf([&] { tessel::quantize(x, q, view(ScalarType::UE8M0, {7, 16}), kMajor); }),
             Catch::Contains("kMajorScales lays out 1x128 f32 block scales, not MX scales"));
}

TEST_CASE("eight threads compile at once and get what one thread gets", "[threads]") {
  // Four configurations, each compiled by two threads, with the caches
  // off so that every compile runs the passes and NVRTC concurrently.
  auto build = [](int i) {
    kernels::GemmConfig c;
    c.blockM = i % 2 ? 64 : 128;
    c.blockN = i / 2 % 2 ? 64 : 128;
    c.stages = 3;
    c.threads = 128;
    return kernels::gemm(c);
  };
  std::vector<std::string> expected(4);
  for (int i = 0; i < 4; ++i) {
    Program p = build(i);
    expected[i] = compile(p, {.arch = "sm_90a"}).cuda();
  }
  ::setenv("TESSEL_CACHE", "none", 1);
  std::vector<std::string> cuda(8), cubins(8), errors(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      try {
        Program p = build(t % 4);
        Kernel k = compile(p, {.arch = "sm_90a"});
        cuda[t] = k.cuda();
        cubins[t] = k.cubin();
      } catch (const std::exception &e) {
        errors[t] = e.what();
      }
    });
  for (std::thread &t : threads) t.join();
  ::unsetenv("TESSEL_CACHE");
  for (int t = 0; t < 8; ++t) {
    INFO("thread " << t << ": " << errors[t]);
    CHECK(errors[t].empty());
    CHECK(cuda[t] == expected[t % 4]);
    CHECK(cubins[t].size() > 1000);
  }
}

TEST_CASE("the configurations the library calls pick compile for every target", "[views]") {
  // The calls compile before they launch: without a GPU (or with one of
  // another target) the launch is what fails, naming why.
  auto launchRefused = [](const std::string &error) {
    return error.find("no CUDA driver") != std::string::npos ||
           error.find("this kernel needs") != std::string::npos;
  };
  auto bf16 = [](std::vector<int64_t> s) { return view(ScalarType::BF16, std::move(s)); };
  TensorView q = bf16({1, 256, 4, 128}), kv = bf16({1, 256, 2, 128}), o = bf16({1, 256, 4, 128});
  TensorView lse = view(ScalarType::F32, {1, 4, 256});
  for (std::string arch : {"sm_80", "sm_100a"}) {
    INFO(arch);
    attention::ForwardOptions fo;
    fo.arch = arch;
    fo.causal = true;
    CHECK(launchRefused(errorOf([&] { attention::forward(q, kv, kv, o, lse, fo); })));
    attention::BackwardOptions bo;
    bo.arch = arch;
    bo.workspace = 0x100000;
    bo.workspaceBytes = attention::backwardWorkspaceBytes(q, kv, bo);
    CHECK(launchRefused(errorOf([&] { attention::backward(q, kv, kv, o, lse, o, o, kv, kv, bo); })));
    GemmCallOptions go;
    go.arch = arch;
    CHECK(launchRefused(errorOf([&] {
      tessel::gemm(bf16({256, 128}), bf16({128, 256}), view(ScalarType::F32, {256, 256}), go);
    })));
  }
  // tessel::quantize on both paths of the FP8 conversion (the software
  // encoder on sm_80, cvt from sm_89), per row and per 128-element block
  // (whose views the call reshapes to [M, cols / 128, 128]; the launch
  // checks them against the kernel before it finds no driver), and the
  // default blocking of a long row.
  for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
    INFO(arch);
    QuantizeOptions qo;
    qo.arch = arch;
    CHECK(launchRefused(errorOf([&] {
      tessel::quantize(bf16({300, 4096}), view(ScalarType::F8E4M3, {300, 4096}),
                       view(ScalarType::F32, {300}), qo);
    })));
    CHECK(launchRefused(errorOf([&] {
      tessel::quantize(bf16({300, 7168}), view(ScalarType::F8E4M3, {300, 7168}),
                       view(ScalarType::F32, {300, 56}), qo);
    })));
    CHECK(launchRefused(errorOf([&] {
      tessel::quantize(view(ScalarType::F32, {3, 18432}), view(ScalarType::F8E5M2, {3, 18432}),
                       view(ScalarType::F32, {3, 144}), qo);
    })));
    // MX, both scale layouts (the blocked one with padding to fill first).
    CHECK(launchRefused(errorOf([&] {
      tessel::quantize(bf16({300, 4096}), view(ScalarType::F8E4M3, {300, 4096}),
                       view(ScalarType::UE8M0, {300, 128}), qo);
    })));
    CHECK(launchRefused(errorOf([&] {
      tessel::quantize(bf16({300, 7168}), view(ScalarType::F8E4M3, {300, 7168}),
                       view(ScalarType::UE8M0, {3, 56, 32, 16}), qo);
    })));
  }
}

TEST_CASE("decode calls say which view is wrong and why before anything runs", "[views]") {
  TensorView q = view(ScalarType::BF16, {4, 32, 128}), cache = view(ScalarType::BF16, {50, 16, 8, 128});
  TensorView table = view(ScalarType::I32, {4, 13}), lengths = view(ScalarType::I32, {4});
  auto paged = [&](const TensorView &q2, const TensorView &k2, const TensorView &t2,
                   const TensorView &l2, const TensorView &o2, double scale = 0) {
    decode::PagedOptions o;
    o.scale = scale;
    return errorOf([&] { decode::paged(q2, k2, k2, t2, l2, o2, o); });
  };
  CHECK_THAT(paged(view(ScalarType::F32, {4, 32, 128}), cache, table, lengths, q),
             Catch::Contains("q is f32[4, 32, 128] on device 0: it must be f16 or bf16"));
  CHECK_THAT(paged(q, view(ScalarType::BF16, {50, 16, 6, 128}), table, lengths, q),
             Catch::Contains("q has 32 heads and k_cache 6 (dimension 2): heads_q must be a "
                             "multiple of heads_kv"));
  CHECK_THAT(paged(q, view(ScalarType::BF16, {50, 16, 8, 64}), table, lengths, q),
             Catch::Contains("its head_dim (dimension 3) must be q's, 128"));
  CHECK_THAT(paged(q, view(ScalarType::BF16, {50, 24, 8, 128}), table, lengths, q),
             Catch::Contains("its page size (dimension 1) is 24; decode takes pages of 16, 32, "
                             "64, 128 or 256 keys"));
  CHECK_THAT(paged(q, cache, view(ScalarType::I32, {3, 13}), lengths, q),
             Catch::Contains("block_table is i32[3, 13] on device 0: it needs a row per sequence"));
  CHECK_THAT(paged(q, cache, view(ScalarType::I64, {4, 13}), lengths, q),
             Catch::Contains("block_table is i64[4, 13] on device 0: it must be i32"));
  CHECK_THAT(paged(q, cache, table, view(ScalarType::I32, {5}), q),
             Catch::Contains("lengths is i32[5] on device 0: expected shape [4]"));
  CHECK_THAT(paged(q, cache, table, lengths, view(ScalarType::BF16, {4, 32, 64})),
             Catch::Contains("out is bf16[4, 32, 64] on device 0: expected shape [4, 32, 128]"));
  CHECK_THAT(paged(q, cache, table, lengths, q, -1.0),
             Catch::Contains("scale=-1 is not a finite positive number"));
  decode::PagedOptions tooMany;
  tooMany.splits = 300;
  CHECK_THAT(errorOf([&] { decode::paged(q, cache, cache, table, lengths, q, tooMany); }),
             Catch::Contains("splits=300 is not in [0, 256]"));
  // An e4m3 cache takes both K and V in e4m3, and finite positive scales.
  TensorView fp8 = view(ScalarType::F8E4M3, {50, 16, 8, 128});
  CHECK_THAT(errorOf([&] { decode::paged(q, fp8, cache, table, lengths, q); }),
             Catch::Contains("v_cache is bf16[50, 16, 8, 128] on device 0: it must be f8e4m3"));
  decode::PagedOptions negative;
  negative.kScale = -2;
  CHECK_THAT(errorOf([&] { decode::paged(q, fp8, fp8, table, lengths, q, negative); }),
             Catch::Contains("kScale=-2 is not a finite positive number"));

  TensorView mq = view(ScalarType::BF16, {4, 128, 576}), latent = view(ScalarType::BF16, {9, 64, 576});
  auto mla = [&](const TensorView &q2, const TensorView &c2, const TensorView &o2, int64_t lat = 512) {
    decode::MlaOptions o;
    o.latent = lat;
    return errorOf([&] { decode::mla(q2, c2, table, lengths, o2, o); });
  };
  TensorView mo = view(ScalarType::BF16, {4, 128, 512});
  CHECK_THAT(mla(mq, view(ScalarType::BF16, {9, 64, 512}), mo),
             Catch::Contains("its rows (dimension 2) must be as wide as q's, 576"));
  CHECK_THAT(mla(mq, latent, mo, 500),
             Catch::Contains("latent=500 with rows of 576: the latent part must be a multiple of 64"));
  CHECK_THAT(mla(mq, latent, view(ScalarType::BF16, {4, 128, 576})),
             Catch::Contains("out is bf16[4, 128, 576] on device 0: expected shape [4, 128, 512]"));
  CHECK_THAT(mla(mq, view(ScalarType::F16, {9, 64, 576}), mo),
             Catch::Contains("cache is f16[9, 64, 576] on device 0: it must be bf16"));
}

TEST_CASE("decode grids split along the keys by their kernel's rule", "[decode]") {
  using kernels::decodeSplits;
  kernels::PagedDecodeConfig paged;
  kernels::MlaDecodeConfig mla;
  // 132 SMs. Paged decode, two blocks an SM (264 slots): batch 64 x 8 kv
  // heads is under 4 waves, and 3 splits make 5.8 (the measured best).
  CHECK(decodeSplits(512, 264, 128, kernels::splitRule(paged)) == 3);
  // Batch 132 x 8 reaches half of 4 waves: unsplit.
  CHECK(decodeSplits(1056, 264, 128, kernels::splitRule(paged)) == 1);
  // Short sequences keep at least 8 steps a split.
  CHECK(decodeSplits(16, 264, 16, kernels::splitRule(paged)) == 2);
  CHECK(decodeSplits(16, 264, 7, kernels::splitRule(paged)) == 1);
  // At most 64 splits.
  CHECK(decodeSplits(1, 264, 100000, kernels::splitRule(paged)) == 64);
  // MLA, one block an SM: 128 head blocks run unsplit; 32 take 8 splits
  // (256 blocks: two waves, the second 97% full).
  CHECK(decodeSplits(128, 132, 128, kernels::splitRule(mla)) == 1);
  CHECK(decodeSplits(32, 132, 128, kernels::splitRule(mla)) == 8);
}

TEST_CASE("attention's schedule without a record follows the measured rules") {
  const int64_t l2 = 50 << 20; // an H100's
  auto forward = [&](int64_t d, int64_t seq, int64_t hq, int64_t hkv, bool causal) {
    kernels::AttentionConfig c;
    c.headDim = d;
    c.causal = causal;
    kernels::chooseForwardSchedule(c, "sm_90a", seq, seq, hq, hkv, l2);
    return c;
  };
  // Long causal contexts: blocks first, K ahead of V without turns.
  kernels::AttentionConfig longCausal = forward(128, 32768, 32, 32, true);
  CHECK(longCausal.gridOrder == kernels::GridOrder::blocks);
  CHECK(longCausal.overlap);
  CHECK_FALSE(longCausal.pingpong);
  // FlashAttention-3's 8k causal row (16 heads, 64 MB of K/V): heads first.
  CHECK(forward(128, 8192, 16, 16, true).gridOrder == kernels::GridOrder::heads);
  // Grouped heads share K/V: 64/8 at 8k streams 32 MB.
  CHECK(forward(128, 8192, 64, 8, true).gridOrder == kernels::GridOrder::heads);
  // Full attention keeps the kernels' order; grouped full runs the walk.
  kernels::AttentionConfig groupedFull = forward(128, 8192, 32, 8, false);
  CHECK(groupedFull.gridOrder == kernels::GridOrder::automatic);
  CHECK(groupedFull.persistent);
  CHECK(groupedFull.tmaStore);
  CHECK(forward(128, 8192, 32, 32, false).pingpong);
  // Short problems and other targets keep the defaults.
  kernels::AttentionConfig shortFull = forward(128, 4096, 16, 16, false);
  CHECK_FALSE(shortFull.overlap);
  kernels::AttentionConfig ampere;
  ampere.headDim = 128;
  kernels::chooseForwardSchedule(ampere, "sm_80", 32768, 32768, 32, 32, l2);
  CHECK_FALSE(ampere.overlap);

  auto backward = [&](int64_t d, int64_t seq, int64_t hq, bool causal) {
    kernels::AttentionBackwardConfig c;
    c.headDim = d;
    c.causal = causal;
    kernels::chooseBackwardGridOrder(c, seq, hq, l2);
    return c.gridOrder;
  };
  CHECK(backward(128, 8192, 64, true) == kernels::GridOrder::blocks);  // 512 MB of Q, dO, dQ
  CHECK(backward(128, 32768, 32, true) == kernels::GridOrder::blocks);
  CHECK(backward(128, 4096, 16, true) == kernels::GridOrder::heads);   // 67 MB
  CHECK(backward(128, 32768, 32, false) == kernels::GridOrder::automatic);
  // A grid order given is kept.
  kernels::AttentionBackwardConfig given;
  given.causal = true;
  given.gridOrder = kernels::GridOrder::heads;
  kernels::chooseBackwardGridOrder(given, 32768, 32, l2);
  CHECK(given.gridOrder == kernels::GridOrder::heads);
}

// What tessel::gemm runs without a configuration or a record (the rule
// `tessel bench gemm` and config=library time): 8-bit tiles by C's size
// against the SMs on sm_90a, a TMA store for a 16-bit C, 128-byte K tiles
// on tcgen05; f32 C keeps the defaults.
TEST_CASE("chooseGemmConfig is tessel::gemm's rule per shape", "[views]") {
  using namespace tessel::kernels;
  GemmConfig fp8;
  fp8.in = DType::f8e4m3, fp8.out = DType::bf16, fp8.scale = GemmScale::tensor;
  fp8.transposeB = true;
  GemmConfig few = chooseGemmConfig("sm_90a", fp8, 128, 4096, 132);
  CHECK(std::tuple(few.blockM, few.blockN, few.blockK, few.stages, few.threads) ==
        std::tuple(64, 32, 128, 8, 128));
  CHECK(few.transposeB);
  CHECK(few.scale == GemmScale::tensor);
  GemmConfig wave = chooseGemmConfig("sm_90a", fp8, 128, 14336, 132);
  CHECK(std::tuple(wave.blockM, wave.blockN, wave.persistent, wave.tmaStore) ==
        std::tuple(128, 128, true, true));
  GemmConfig many = chooseGemmConfig("sm_90a", fp8, 8192, 8192, 132);
  CHECK(std::tuple(many.blockM, many.blockN, many.stages) == std::tuple(128, 256, 3));
  CHECK_FALSE(many.pingpong);
  // Block scales: two K blocks a stage in 128-column tiles, the consumer
  // warpgroups taking turns so that promotions run under wgmmas.
  fp8.scale = GemmScale::block;
  GemmConfig blocks = chooseGemmConfig("sm_90a", fp8, 8192, 8192, 132);
  CHECK(std::tuple(blocks.blockN, blocks.blockK, blocks.stages, blocks.pingpong) ==
        std::tuple(128, 256, 2, true));
  fp8.scale = GemmScale::tensor;
  GemmConfig bf16;
  bf16.in = DType::bf16, bf16.out = DType::bf16;
  GemmConfig sixteen = chooseGemmConfig("sm_90a", bf16, 8192, 8192, 132);
  CHECK(sixteen.tmaStore);
  CHECK(sixteen.stages == 3);
  bf16.out = DType::f32;
  GemmConfig wide = chooseGemmConfig("sm_90a", bf16, 8192, 8192, 132);
  CHECK_FALSE(wide.tmaStore);
  CHECK(wide.stages == defaultGemmConfig("sm_90a").stages);
  GemmConfig blackwell = chooseGemmConfig("sm_100a", fp8, 8192, 8192, 148);
  CHECK(blackwell.instruction == GemmInstruction::tcgen05);
  CHECK(blackwell.blockK == 128);
}
