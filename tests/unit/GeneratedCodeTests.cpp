//===- GeneratedCodeTests.cpp - element code through to NVRTC -------------===//
//
// Element code a user writes, compiled for sm_80 and sm_90a: reads of a
// fragment every thread holds whole, integer division of negative values,
// casts between every pair of types; what an NVRTC failure says, and that
// the device headers compile without a warning.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "tessel/harness/Library.h"
#include "ScalarKernels.h"
#include "tessel/dsl/Compile.h"
#include "tessel/kernels/Kernels.h"
#include "tessel/runtime/Nvrtc.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"

#include <fmt/format.h>
#include <functional>
#include <nvrtc.h>
#include <regex>

using namespace tessel;

static size_t count(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

/// NVRTC's log for a kernel's emitted CUDA with Tessel's device headers.
static std::string nvrtcLog(const std::string &source, const std::string &arch) {
  const char *headers[] = {rt::deviceHeader(), rt::tcgen05EmulationHeader()};
  const char *names[] = {"tessel_device.h", "tessel_tcgen05_emu.h"};
  nvrtcProgram prog;
  REQUIRE(nvrtcCreateProgram(&prog, source.c_str(), "tessel_kernel.cu", 2, headers, names) ==
          NVRTC_SUCCESS);
  std::string gpu = "--gpu-architecture=" + arch;
  const char *options[] = {gpu.c_str(), "-std=c++17"};
  nvrtcResult result = nvrtcCompileProgram(prog, 2, options);
  size_t size = 0;
  nvrtcGetProgramLogSize(prog, &size);
  std::string log(size, '\0');
  if (size) nvrtcGetProgramLog(prog, log.data());
  nvrtcDestroyProgram(&prog);
  CHECK(result == NVRTC_SUCCESS);
  return log;
}

TEST_CASE("a whole-held fragment is read inside parallel after other accesses and twice") {
  // `l(j) = exp(l(j) - mx(0))` in both orders C++ may evaluate its operands
  // in, and a body that reads the maximum twice.
  using Body = std::function<void(const Buffer &, const Buffer &, Expr)>;
  std::vector<std::pair<std::string, Body>> bodies = {
      {"element_first",
       [](const Buffer &l, const Buffer &mx, Expr j) {
         Expr lj = l(j);
         Expr m = mx(0);
         l(j) = exp(lj - m);
       }},
      {"maximum_first",
       [](const Buffer &l, const Buffer &mx, Expr j) {
         Expr m = mx(0);
         Expr lj = l(j);
         l(j) = exp(lj - m);
       }},
      {"maximum_twice",
       [](const Buffer &l, const Buffer &mx, Expr j) { l(j) = (l(j) - mx(0)) * mx(0); }},
  };
  for (const auto &[name, body] : bodies)
    for (std::string arch : {"sm_80", "sm_90a"}) {
      Program p("broadcast_" + name);
      Tensor x = p.tensor("x", {256}, DType::f32), y = p.tensor("y", {256}, DType::f32);
      p.kernel({1}, 128, [&](Expr) {
        Buffer l = alloc_fragment({256}, DType::f32), mx = alloc_fragment({1}, DType::f32);
        copy(x.tile({0}, {256}), l);
        reduce_max(l, mx, 0);
        parallel(256, [&](Expr j) { body(l, mx, j); });
        copy(l, y.tile({0}, {256}));
      });
      INFO(name << " on " << arch);
      Kernel k = compile(p, {arch, ""});
      CHECK(k.cubin().size() > 0);
    }
}

TEST_CASE("integer division floors in constants and host expressions") {
  int64_t v = 0;
  auto constant = [&](Expr e) {
    REQUIRE(e.isConstant(&v));
    return v;
  };
  CHECK(constant(Expr(-7) / 4) == -2);
  CHECK(constant(Expr(-7) % 4) == 1);
  CHECK(constant(Expr(7) / -4) == -2);
  CHECK(constant(Expr(7) % -4) == -1);
  CHECK(constant(Expr(-8) / 4) == -2);
  CHECK(constant(Expr(-8) % 4) == 0);
  CHECK(constant(ceil_div(Expr(-7), 4)) == -1);
  CHECK(constant(ceil_div(Expr(7), 4)) == 2);
  Program p("host_division");
  Expr n = p.sym("n"), m = p.sym("m");
  for (int64_t a : {-9, -8, -7, -1, 0, 1, 7, 8, 9})
    for (int64_t b : {-4, -3, 3, 4}) {
      INFO(a << " and " << b);
      CHECK(evaluate(n / m, {a, b}) == test::floorDivision(a, b));
      CHECK(evaluate(n % m, {a, b}) == test::floorRemainder(a, b));
      CHECK(evaluate(ceil_div(n, m), {a, b}) == -test::floorDivision(-a, b));
    }
}

TEST_CASE("integer division of values of either sign floors in the generated code") {
  for (std::string arch : {"sm_80", "sm_90a"}) {
    Program p = test::signedDivision();
    Kernel k = compile(p, {arch, ""});
    INFO(arch << "\n" << k.tileIr() << "\n" << k.cuda());
    CHECK(k.cubin().size() > 0);
    // x / d and x / 4: x may be negative.
    CHECK(count(k.tileIr(), "arith.floordivsi") == 2);
    CHECK(count(k.cuda(), "tessel::floor_div(") == 2);
    // The remainders are C's, moved into the divisor's range where their
    // signs differ; by the constant 4 only a negative one is.
    CHECK(count(k.tileIr(), "arith.remsi") == 3);
    CHECK(count(k.tileIr(), "arith.select") == 2);
    // The index math on non-negative values stays C's division.
    CHECK(count(k.tileIr(), "arith.divsi") == 1);
    CHECK(count(k.cuda(), "tessel::ceil_div(") == 1);
  }
}

TEST_CASE("conversions to and from i1 are C++'s") {
  for (std::string arch : {"sm_80", "sm_90a"}) {
    Program p = test::conversions();
    Kernel k = compile(p, {arch, ""});
    INFO(arch << "\n" << k.tileIr());
    CHECK(k.cubin().size() > 0);
    // Nonzero is true (not the low bit), and true is 1 (not -1).
    CHECK(count(k.tileIr(), "arith.cmpf une") == 1);
    CHECK(count(k.tileIr(), "arith.cmpi ne") == 2);
    CHECK(count(k.tileIr(), "arith.extui") == 2);
    CHECK(count(k.tileIr(), "arith.uitofp") == 1);
    CHECK(count(k.tileIr(), "arith.trunci") == 1); // the i64 result back to i32
  }
}

TEST_CASE("bit and logical operators are C++'s on integers of every width") {
  for (std::string arch : {"sm_80", "sm_90a"}) {
    Program p = test::bitOperations();
    Kernel k = compile(p, {arch, ""});
    INFO(arch << "\n" << k.tileIr() << "\n" << k.cuda());
    CHECK(k.cubin().size() > 0);
    // u8 is read as the i8 of its bits and zero-extended (C++'s promotion),
    // never sign-extended; the store back truncates.
    CHECK(count(k.tileIr(), "arith.extui") >= 1);
    CHECK(count(k.tileIr(), "arith.extsi") == 0);
    CHECK(count(k.tileIr(), "arith.shrsi") == 2);
    CHECK(count(k.tileIr(), "arith.shli") == 1);
    CHECK(count(k.tileIr(), "arith.bitcast") == 1);
    CHECK(count(k.cuda(), "__int_as_float(") == 1);
    // && and || compare each side with zero first, not the bits' and.
    CHECK(count(k.tileIr(), "arith.andi") >= 3);
    CHECK(count(k.tileIr(), "arith.cmpi ne") >= 4);
  }
}

TEST_CASE("bit operators reject floats and shifts past the width at the user's line") {
  auto message = [](std::function<void(Expr, Expr)> body) {
    Program p("bad_bits");
    Tensor x = p.tensor("x", {128}, DType::f32), k = p.tensor("k", {128}, DType::i32);
    try {
      p.kernel({1}, 128, [&](Expr) { parallel(128, [&](Expr i) { body(x(i), k(i)); }); });
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(message([](Expr x, Expr) { (void)(x & 1); }),
             Catch::Contains("GeneratedCodeTests.cpp") && Catch::Contains("operator & needs integer operands, got f32"));
  CHECK_THAT(message([](Expr, Expr k) { (void)(k << 32); }),
             Catch::Contains("a shift by 32 bits of a 32-bit value; shift amounts are 0 to 31"));
  CHECK_THAT(message([](Expr x, Expr) { (void)~x; }), Catch::Contains("operator ~ needs an integer operand"));
  // Integers of different types meet as in C++ (a loop index takes the
  // other's type); a float and an integer still need a cast.
  CHECK(message([](Expr, Expr k) { (void)(k + (k != 0) + cast(k, DType::i64)); }).empty());
  CHECK_THAT(message([](Expr x, Expr k) { (void)(x + k); }),
             Catch::Contains("operands have types f32 and i32; convert one with cast()"));
  CHECK_THAT(message([](Expr x, Expr) { (void)bitcast(x, DType::i64); }),
             Catch::Contains("bitcast reinterprets between f32 and i32 or f64 and i64, not f32 and i64"));
  // Constants fold as C++ folds them; a shift of a constant too.
  int64_t v = 0;
  CHECK(((Expr(0xf0) >> 4) | (Expr(1) << 8)).isConstant(&v));
  CHECK(v == 0x10f);
  CHECK((!Expr(0)).isConstant(&v));
  CHECK(v == 1);
  CHECK((Expr(2) && Expr(1)).isConstant(&v));
  CHECK(v == 1); // not 2 & 1
  Program h("host_bits");
  Expr n = h.sym("n");
  CHECK(evaluate((n >> 1) ^ (n & 3), {13}) == ((13 >> 1) ^ (13 & 3)));
}

TEST_CASE("buffers of rank four to six are indexed with operator()") {
  Program p("rank_six");
  Tensor x = p.tensor("x", {2, 2, 2, 2, 2, 2}, DType::f32), y = p.tensor("y", {2, 2, 2, 2, 2}, DType::f32);
  Tensor z = p.tensor("z", {2, 2, 2, 2}, DType::f32);
  p.kernel({1}, 32, [&](Expr) {
    parallel(2, [&](Expr i) {
      z(i, 1, 0, 1) = x(i, 0, 1, 0, 1, 1) + y(1, i, 0, 0, 1);
    });
  });
  Kernel k = compile(p, {"sm_90a", ""});
  CHECK(k.cubin().size() > 0);
}

TEST_CASE("casts between every pair of types compile") {
  const std::vector<DType> types = {DType::f16, DType::bf16, DType::f32, DType::f64,
                                    DType::i32, DType::i64,  DType::index, DType::i1};
  for (std::string arch : {"sm_80", "sm_90a"}) {
    Program p("every_cast");
    std::vector<Expr> inputs;
    for (DType t : types)
      inputs.push_back(t == DType::index ? p.sym("in_index")
                                         : p.scalar(std::string("in_") + name(t), t));
    // An index is stored as i64.
    std::vector<Tensor> outputs;
    for (DType t : types)
      outputs.push_back(p.tensor(std::string("out_") + name(t), {int64_t(types.size())},
                                 t == DType::index ? DType::i64 : t));
    p.kernel({1}, 32, [&](Expr) {
      parallel(1, [&](Expr) {
        for (size_t to = 0; to < types.size(); ++to)
          for (size_t from = 0; from < types.size(); ++from) {
            Expr v = cast(inputs[from], types[to]);
            outputs[to](int64_t(from)) = types[to] == DType::index ? cast(v, DType::i64) : v;
          }
      });
    });
    INFO(arch);
    Kernel k = compile(p, {arch, ""});
    INFO(k.cuda());
    CHECK(k.cubin().size() > 0);
    // Types of several words are spelled as one identifier.
    CHECK(k.cuda().find("long long(") == std::string::npos);
    CHECK(k.cuda().find("tessel::i64(") != std::string::npos);
  }
}

/// A kernel whose cast to i64 is at `castLine`.
static Program castToI64(int &castLine) {
  Program p("cast_to_i64");
  Tensor x = p.tensor("x", {128}, DType::i32), y = p.tensor("y", {128}, DType::i64);
  p.kernel({1}, 128, [&](Expr) {
    parallel(128, [&](Expr i) {
      castLine = __LINE__ + 1;
      Expr wide = cast(x(i), DType::i64);
      y(i) = wide * 3;
    });
  });
  return p;
}

/// The message of compiling castToI64() for `arch` with the cast's result
/// retyped to `type` after the last pass (as if the pipeline had made it).
static std::string compileRetyped(const std::string &arch, mlir::Type (*type)(mlir::MLIRContext *),
                                  int &castLine) {
  std::vector<std::string> passes;
  CompileOptions record{arch, ""};
  record.afterPass = [&](const std::string &pass, mlir::Operation *) { passes.push_back(pass); };
  Program recorded = castToI64(castLine);
  compile(recorded, record);
  REQUIRE(!passes.empty());
  CompileOptions breaking{arch, ""};
  size_t seen = 0;
  breaking.afterPass = [&](const std::string &, mlir::Operation *kernel) {
    if (++seen != passes.size()) return;
    kernel->walk([&](mlir::Operation *op) {
      auto loc = llvm::dyn_cast<mlir::FileLineColLoc>(op->getLoc());
      if (loc && int(loc.getLine()) == castLine && op->getNumResults() == 1 &&
          op->getResult(0).getType().isInteger(64))
        op->getResult(0).setType(type(op->getContext()));
    });
  };
  Program broken = castToI64(castLine);
  try {
    compile(broken, breaking);
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

TEST_CASE("an NVRTC error names the user's line and op first") {
  for (std::string arch : {"sm_80", "sm_90a"}) {
    int castLine = 0;
    // Unbroken, it compiles.
    Program good = castToI64(castLine);
    CHECK(compile(good, {arch, ""}).cubin().size() > 0);
    // A result type without a C++ spelling: NVRTC rejects its declaration.
    std::string message = compileRetyped(
        arch, [](mlir::MLIRContext *ctx) -> mlir::Type { return mlir::NoneType::get(ctx); },
        castLine);
    INFO(arch << "\n" << message);
    std::string first = message.substr(0, message.find('\n'));
    CHECK_THAT(first, Catch::StartsWith(fmt::format("{}:{}: error: the CUDA generated for 'arith.",
                                                    __FILE__, castLine)));
    CHECK_THAT(first, Catch::Contains("does not compile for " + arch));
    // Then NVRTC's log, each diagnostic about the generated code with its line.
    CHECK_THAT(message, Catch::Contains("tessel_kernel.cu("));
    CHECK_THAT(message, Catch::Contains("    generated line "));
  }
}

TEST_CASE("an integer or float the emitter cannot spell is an error at the op") {
  int castLine = 0;
  std::string message = compileRetyped(
      "sm_90a",
      [](mlir::MLIRContext *ctx) -> mlir::Type { return mlir::IntegerType::get(ctx, 128); },
      castLine);
  CHECK_THAT(message, Catch::StartsWith(fmt::format("{}:{}: error: the CUDA emitter has no type "
                                                    "for 'i128'",
                                                    __FILE__, castLine)));
}

TEST_CASE("kernel names the generated code cannot take are errors at the user's line") {
  for (std::string name : {"", "2d", "a-b", "float", "switch", "threadIdx", "tessel", "tessel_smem",
                           "__kernel", "_Kernel", "_", "main"}) {
    INFO("'" << name << "'");
    CHECK_THROWS_WITH(Program(name), Catch::Contains(__FILE__) &&
                                         Catch::Contains("must be a C identifier"));
  }
  // Also a kernel whose block index goes unused: no NVRTC warning either.
  for (std::string name : {"_k", "float4x", "k2"}) {
    Program p(name);
    Tensor x = p.tensor("x", {32}, DType::f32);
    p.kernel({1}, 32, [&](Expr) { parallel(32, [&](Expr i) { x(i) = x(i) * 2.0; }); });
    INFO("'" << name << "'");
    Kernel k = compile(p, {"sm_80", ""});
    CHECK(k.cubin().size() > 0);
    CHECK(nvrtcLog(k.cuda(), "sm_80").find("warning") == std::string::npos);
  }
}

TEST_CASE("library kernels and the device headers compile without an NVRTC warning") {
  // The headers' atomics (the attention backward's), roles from thread 0,
  // wgmma, tcgen05 and its emulation.
  const std::vector<std::pair<std::string, std::string>> builds = {
      {"gemm", "sm_80"},
      {"gemm", "sm_90a"},
      {"gemm", "sm_100a"},
      {"gemm", "sm_100a-emu"},
      {"flash_attention_fwd", "sm_80"},
      {"flash_attention_fwd", "sm_90a"},
      {"flash_attention_bwd", "sm_80"},
      {"flash_attention_bwd", "sm_90a"},
      {"flash_attention_bwd", "sm_100a"}};
  for (const auto &[name, arch] : builds) {
    const harness::LibraryKernel &entry = harness::findKernel(name);
    Program program = entry.build(harness::withDefaults(entry, {}, arch));
    Kernel k = compile(program, {arch, ""});
    std::string binaryArch = arch == "sm_100a-emu" ? "sm_90a" : arch;
    std::string log = nvrtcLog(k.cuda(), binaryArch);
    INFO(name << " on " << arch << "\n" << log);
    CHECK(log.find("warning") == std::string::npos);
  }
}

TEST_CASE("grid extents may multiply and divide index symbols") {
  // One block per (rank, tile) pair and per block of a run-time size, as
  // a tensor-parallel kernel walks its peers' tiles.
  Program p("grid_products");
  Expr ranks = p.sym("ranks"), tiles = p.sym("tiles"), n = p.sym("n"), block = p.sym("block");
  Tensor out = p.tensor("out", {ranks * tiles, ceil_div(n, block)}, DType::f32);
  p.kernel({ranks * tiles, ceil_div(n, block)}, 32, [&](Expr x, Expr y) {
    parallel(32, [&](Expr i) {
      Expr first = i == 0;
      if_(first, [&] { out(x, y) = cast(x * 1000 + y, DType::f32); });
    });
  });
  Kernel k = compile(p, {"sm_80"});
  // Symbols in parameter order: ranks, tiles, n, block.
  auto grid = k.spec().evaluateGrid({4, 3, 100, 32});
  CHECK(grid[0] == 12);
  CHECK(grid[1] == 4);
  CHECK_THROWS_WITH(k.spec().evaluateGrid({4, 3, 100, 0}),
                    Catch::Contains("grid dimension 1 divides by 0"));
  // What is still refused names the dimension.
  Program q("grid_from_scalar");
  Expr scale = q.scalar("scale", DType::i32);
  Tensor o = q.tensor("o", {4}, DType::f32);
  try {
    q.kernel({4, scale}, 32, [&](Expr, Expr) { o(0) = 1.0; });
    FAIL("a grid extent from a scalar was accepted");
  } catch (const Error &e) {
    CHECK_THAT(e.what(), Catch::Contains("grid dimension 1") && Catch::Contains("index symbols"));
  }
}
