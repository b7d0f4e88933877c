//===- PeerTmaGpuTests.cpp - TMA through a tensor map per rank ------------===//
//
// peer() tiles moved by TMA on one GPU: the "ranks'" copies of a symmetric
// tensor are buffers of this process (the kernel cannot tell), each with
// different contents, so a box read through the wrong rank's map, or added
// into the wrong copy, shows.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "../common/GpuHelpers.h"
#include "../common/PeerTmaKernel.h"
#include "tessel/dsl/Compile.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::test;
using testing::HostTensor;

namespace {
bool hasTma() { return rt::Driver::get().computeCapability() >= 90; }
std::string deviceArch() { return rt::nativeArch(rt::Driver::get().computeCapability()); }
} // namespace

TEST_CASE("a pipelined loop loads another rank's tiles by TMA", "[gpu][user]") {
  if (!hasTma()) {
    WARN("skipped: TMA needs sm_90a or later");
    return;
  }
  Program program = peerTmaRead();
  Kernel k = compile(program, {deviceArch()});
  REQUIRE(k.spec().tensorMaps.size() == 2);
  const int64_t n = 1000; // the last block's last tile is partial
  std::mt19937_64 rng(7);
  std::vector<std::unique_ptr<DeviceTensor>> copies;
  std::vector<CUdeviceptr> peers;
  for (int r = 0; r < 3; ++r) {
    copies.push_back(std::make_unique<DeviceTensor>(DType::f16, std::vector<int64_t>{n, 128}, &rng));
    peers.push_back(copies.back()->device.ptr());
  }
  DeviceTensor out(DType::f16, {n, 128});
  for (int from : {2, 1, 0}) {
    INFO("rank " << from);
    out.device.fillBytes(0xff);
    k.launch({rt::LaunchArg::integer(n), rt::LaunchArg::integer(from),
              rt::LaunchArg::symmetric(peers[0], peers, {n, 128}),
              rt::LaunchArg::buffer(out.device.ptr(), {n, 128})});
    TESSEL_CU(rt::Driver::get(), cuCtxSynchronize);
    out.fetch();
    CHECK(out.host.bytes == copies[from]->host.bytes);
  }
  // The three ranks' maps and out's were encoded once, at the first launch.
  CHECK(k.loadedKernel().tensorMapCache().insertions() == 4);
}

TEST_CASE("a TMA reduce-add goes into the chosen rank's copy", "[gpu][user]") {
  if (!hasTma()) {
    WARN("skipped: TMA needs sm_90a or later");
    return;
  }
  Program p = peerReduceAdd();
  Kernel k = compile(p, {deviceArch()});
  std::mt19937_64 rng(9);
  DeviceTensor a(DType::f32, {128, 64}, &rng), b(DType::f32, {128, 64}, &rng);
  std::vector<CUdeviceptr> peers = {a.device.ptr(), b.device.ptr()};
  HostTensor beforeA = a.host, beforeB = b.host;
  for (int launches = 0; launches < 2; ++launches)
    k.launch({rt::LaunchArg::integer(1), rt::LaunchArg::symmetric(peers[0], peers, {128, 64})});
  TESSEL_CU(rt::Driver::get(), cuCtxSynchronize);
  a.fetch();
  b.fetch();
  CHECK(a.host.bytes == beforeA.bytes);
  int64_t wrong = 0;
  // Two launches, each adding 0.5 (in f32, rounded after each add).
  for (int64_t i = 0; i < b.host.size(); ++i) {
    volatile float once = beforeB.values[i] + 0.5f;
    wrong += b.host.values[i] != once + 0.5f;
  }
  CHECK(wrong == 0);
}
