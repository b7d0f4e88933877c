//===- PeerCompileTests.cpp - kernels that reach other ranks' tensors ----===//
//
// What peer() compiles to on every target, without a GPU: the exchange's
// per-block peer copies, and tiles of another rank's tensor moved by TMA
// through a tensor map per rank (loads in pipelined loops, reduce-adds);
// the toolkit's ptxas takes each kernel's PTX.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "../common/PeerTmaKernel.h"
#include "tessel/dsl/Compile.h"
#include "tessel/kernels/parallel/PeerTileCopy.h"
#include "tessel/runtime/KernelSpec.h"

#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <unistd.h>

using namespace tessel;
using namespace tessel::kernels;

/// Whether ptxas (the toolkit's, not NVRTC's) takes `k`'s PTX for `arch`.
static bool ptxasAccepts(Kernel &k, const std::string &arch, const std::string &name) {
  auto ptx = std::filesystem::temp_directory_path() /
             fmt::format("tessel-{}-{}-{}.ptx", name, arch, ::getpid());
  std::ofstream(ptx) << k.ptx();
  bool ok = std::system(fmt::format("{} -arch={} {} -o /dev/null", TESSEL_PTXAS, arch,
                                    ptx.string()).c_str()) == 0;
  std::filesystem::remove(ptx);
  return ok;
}

// The exchange's SM-driven pulls read peers' copies through peer(), the
// rank chosen per block; ptxas takes them on every target.
TEST_CASE("peer_tile_copy compiles for every target, its source a per-block peer") {
  for (DType t : {DType::f16, DType::f32})
    for (bool push : {false, true})
    for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
      Program program = peerTileCopy({t, 64, 128, 128, push});
      Kernel k = compile(program, {arch, ""});
      INFO(arch);
      CHECK(k.cubin().size() > 0);
      CHECK(k.spillBytes() == 0);
      CHECK(ptxasAccepts(k, arch, "peer-tile-copy"));
      // 19 symbols (first_rank last) and two tensors, one of them
      // symmetric: every rank's address comes with the launch.
      CHECK(k.spec().params.size() == 21);
      CHECK(k.params()[18].name == "first_rank");
    }
}

// With the handshakes in the copy, each block announces the call to its
// peer (a release store at system scope) before it waits for the peer's
// announcement (an acquire spin), and counts its tile into the peer's flags
// (a release reduction) after it; the call's end waits for the counts.
TEST_CASE("peer_tile_copy with its handshakes in its blocks announces, waits and counts") {
  for (bool push : {false, true})
    for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
      INFO(arch << (push ? " push" : " pull"));
      PeerTileCopyConfig config{DType::f16, 64, 128, 128, push};
      config.flagsInKernel = true;
      config.timeoutMs = 1234;
      Program program = peerTileCopy(config);
      Kernel k = compile(program, {arch, ""});
      CHECK(k.spillBytes() == 0);
      CHECK(ptxasAccepts(k, arch, "peer-tile-copy-flags"));
      std::vector<std::string> names;
      for (const ParamInfo &info : k.params()) names.push_back(info.name);
      REQUIRE(names.size() == 27);
      CHECK(std::vector<std::string>(names.begin() + 18, names.end()) ==
            std::vector<std::string>{"first_rank", "me", "epoch", "ready", "done", "slots", "src",
                                     "dst", "flags"});
      CHECK(k.spec().params[26].peers);
      const std::string &cuda = k.cuda(), &ptx = k.ptx();
      size_t announce = cuda.find("tessel::flag_store("), wait = cuda.find("tessel::flag_wait(");
      size_t count = cuda.find("tessel::flag_add(");
      REQUIRE(announce != std::string::npos);
      REQUIRE(wait != std::string::npos);
      REQUIRE(count != std::string::npos);
      CHECK(announce < wait);
      CHECK(wait < count);
      CHECK(cuda.find("1234LL") != std::string::npos);
      CHECK(ptx.find("red.release.sys.global.add.u32") != std::string::npos);
      CHECK(ptx.find("st.release.sys.global.u32") != std::string::npos);
    }
  Program arrivals = exchangeArrivals(500);
  Kernel k = compile(arrivals, {"sm_90a", ""});
  std::vector<std::string> names;
  for (const ParamInfo &info : k.params()) names.push_back(info.name);
  CHECK(names == std::vector<std::string>{"slots", "ranks", "base", "count", "flags"});
  CHECK(k.ptx().find("ld.acquire.sys.global.u32") != std::string::npos);
  CHECK(k.cuda().find("500LL") != std::string::npos);
}

// A pipelined loop reading another rank's tiles: on sm_90a and sm_100a its
// loads are TMA boxes through a map per rank (one __grid_constant__ set,
// rank `from`'s taken), the tensor's peer table still in the launch (the
// maps are encoded from it); sm_80 copies with cp.async.
TEST_CASE("tiles of peer() load by TMA through a tensor map per rank") {
  for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
    INFO(arch);
    Program program = test::peerTmaRead();
    Kernel k = compile(program, {arch, ""});
    CHECK(k.spillBytes() == 0);
    const rt::KernelSpec &spec = k.spec();
    REQUIRE(spec.params.size() == 4);
    CHECK(spec.params[2].peers);
    bool tma = arch != "sm_80";
    CHECK(k.cuda().find("const tessel::PeerTable p2_peers") != std::string::npos);
    if (!tma) {
      CHECK(spec.tensorMaps.empty());
      CHECK(k.cuda().find("tessel::cp_async<16>") != std::string::npos);
      continue;
    }
    // The load's map is rank `from`'s (p1); the store into this rank's
    // own `out` keeps an ordinary map.
    REQUIRE(spec.tensorMaps.size() == 2);
    int peerMap = spec.tensorMaps[0].peers ? 0 : 1;
    CHECK(spec.tensorMaps[peerMap].peers);
    CHECK(spec.tensorMaps[peerMap].param == 2);
    CHECK_FALSE(spec.tensorMaps[1 - peerMap].peers);
    CHECK(k.cuda().find(fmt::format("const __grid_constant__ tessel::PeerTensorMaps tma{}",
                                    peerMap)) != std::string::npos);
    CHECK(k.cuda().find(fmt::format("tessel::tma_load(&tma{}.at[p1]", peerMap)) !=
          std::string::npos);
    // The spec round-trips through the compile cache's encoding.
    rt::KernelSpec decoded;
    REQUIRE(rt::decodeSpec(rt::encodeSpec(spec), decoded));
    CHECK(decoded.tensorMaps[peerMap].peers);
    CHECK_FALSE(decoded.tensorMaps[1 - peerMap].peers);
  }
}

// A TMA reduce-add into another rank's tile: through the map for that rank,
// waited for whole (not only its reads of shared memory) and fenced against
// the thread's later generic accesses, so that a flag released after it
// orders the adds for the peer; ptxas takes it.
TEST_CASE("a TMA reduce-add into a peer's tile completes before what follows") {
  for (std::string arch : {"sm_90a", "sm_100a"}) {
    INFO(arch);
    Program p = test::peerReduceAdd();
    Kernel k = compile(p, {arch, ""});
    const std::string &cuda = k.cuda();
    size_t add = cuda.find("tessel::tma_reduce_add(&tma0.at[p0]");
    REQUIRE(add != std::string::npos);
    size_t wait = cuda.find("cp.async.bulk.wait_group 0", add);
    REQUIRE(wait != std::string::npos);
    CHECK(cuda.find("fence.proxy.async.global", wait) != std::string::npos);
    CHECK(cuda.find("cp.async.bulk.wait_group.read", add) == std::string::npos);
    CHECK(ptxasAccepts(k, arch, "peer-reduce-add"));
  }
}
