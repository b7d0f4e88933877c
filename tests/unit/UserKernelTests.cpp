//===- UserKernelTests.cpp - kernels from outside the library -------------===//
//
// The kernels of tests/common/UserKernels.h through the whole pipeline, NVRTC
// and ptxas for every target; on sm_90a they must stay warp-specialized, with
// the consumers' collective ops synchronising over the consumers only.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "UserKernels.h"
#include "tessel/dsl/Compile.h"

#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>

using namespace tessel;

static Kernel compileChecked(Program &p, const std::string &arch) {
  Kernel k = compile(p, {arch, ""});
  auto ptx = std::filesystem::temp_directory_path() / fmt::format("tessel-user-{}-{}.ptx",
                                                                  p.name(), arch);
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

TEST_CASE("addresses computed before a warp-specialized loop stay visible to the producer") {
  for (test::RowSource source :
       {test::RowSource::localScan, test::RowSource::conditional, test::RowSource::sharedRead})
    for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
      Program p = test::offsetRowsSum(source);
      Kernel k = compileChecked(p, arch);
      INFO(test::name(source) << " on " << arch << "\n" << k.loweredIr());
      if (arch == "sm_90a") CHECK(k.loweredIr().find("threads(256)") != std::string::npos);
    }
}
