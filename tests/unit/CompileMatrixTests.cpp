//===- CompileMatrixTests.cpp - every library kernel to cubin -------------===//
//
// Each library kernel at several configurations goes through the pipeline
// and NVRTC to a cubin for sm_80, sm_90a and sm_100a, and ptxas assembles the
// PTX. No GPU is needed.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "Library.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>

using namespace tessel;
using namespace tessel::kernels;

static void compileEverywhere(const std::string &name, const Params &overrides) {
  const LibraryKernel &entry = findKernel(name);
  Params p = withDefaults(entry, overrides);
  for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
    Program program = entry.build(p);
    Kernel k = compile(program, {arch, ""});
    INFO(name << " on " << arch);
    CHECK(k.cubin().size() > 0);
    CHECK(k.ptx().find(".target " + arch) != std::string::npos);
    auto ptx = std::filesystem::temp_directory_path() / fmt::format("tessel-{}-{}.ptx", name, arch);
    std::ofstream(ptx) << k.ptx();
    std::string cmd = fmt::format("{} -arch={} {} -o /dev/null", TESSEL_PTXAS, arch, ptx.string());
    CHECK(std::system(cmd.c_str()) == 0);
    std::filesystem::remove(ptx);
  }
}

TEST_CASE("scaled_add compiles for every target") {
  compileEverywhere("scaled_add", {});
  compileEverywhere("scaled_add", {{"dtype", "bf16"}, {"block", "512"}, {"threads", "64"}});
  compileEverywhere("scaled_add", {{"dtype", "f16"}, {"block", "100"}});
}

TEST_CASE("row_softmax compiles for every target") {
  compileEverywhere("row_softmax", {});
  compileEverywhere("row_softmax", {{"dtype", "f16"}, {"cols", "1000"}, {"rows", "1"}, {"threads", "256"}});
  compileEverywhere("row_softmax", {{"dtype", "bf16"}, {"cols", "20"}, {"rows", "16"}, {"threads", "64"}});
}

TEST_CASE("gemm compiles for every target") {
  compileEverywhere("gemm", {});
  compileEverywhere("gemm", {{"in", "bf16"}, {"transpose_a", "1"}, {"transpose_b", "1"}});
  compileEverywhere("gemm", {{"out", "f16"}, {"block_m", "128"}, {"block_n", "128"}, {"threads", "256"}});
  compileEverywhere("gemm", {{"in", "bf16"}, {"block_m", "128"}, {"block_n", "256"}, {"block_k", "64"},
                             {"threads", "256"}, {"policy", "full_row"}, {"transpose_a", "1"}});
  compileEverywhere("gemm", {{"instruction", "mma_sync"}, {"policy", "full_col"}, {"transpose_b", "1"}});
}

TEST_CASE("row_lse compiles for every target") {
  compileEverywhere("row_lse", {});
  compileEverywhere("row_lse", {{"dtype", "bf16"}, {"head_dim", "128"}, {"block_m", "128"},
                                {"threads", "256"}, {"policy", "full_row"}});
}
