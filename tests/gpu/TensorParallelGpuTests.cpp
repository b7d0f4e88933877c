//===- TensorParallelGpuTests.cpp - tessel::tp's layers across ranks ------===//
//
// The visible cases launch this binary's hidden "[.tp_rank]" case on local
// ranks (two GPUs or two virtual ranks sharing one; four where there are
// four GPUs). Each rank builds every rank's inputs from the rank's seed,
// calls the layer twice (the second call uses the other half of the
// symmetric memory) and compares its c with float64.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "tessel/Tessel.h"
#include "tessel/Testing.h"
#include "tessel/harness/TensorParallel.h"
#include "tessel/kernels/parallel/PlanCache.h"
#include "tessel/runtime/Communicator.h"
#include "tessel/runtime/Distributed.h"
#include "tessel/runtime/Driver.h"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <random>

using namespace tessel;
using namespace tessel::testing;

namespace {

using harness::TpRankInputs;
using harness::TpScales;
using Scales = TpScales;

struct TpCase {
  bool allGather;
  int64_t rowsPerRank, k, n;
  DType in, out;
  bool transposeB;
  Scales scales = Scales::none;
  harness::TpShape shape() const { return {allGather, rowsPerRank, k, n, in, transposeB, scales}; }
};

constexpr uint64_t kSeed = 1000;

double runCase(rt::Communicator &comm, const TpCase &c, std::string &config,
               const std::string &transport = "") {
  int ranks = comm.size(), me = comm.rank(), device = comm.device();
  TpRankInputs mine = harness::tpRankInputs(c.shape(), ranks, me, kSeed);
  const HostTensor &a = mine.a, &b = mine.b;
  int64_t rows = c.allGather ? ranks * c.rowsPerRank : c.rowsPerRank;
  HostTensor out(c.out, {rows, c.n});
  auto ad = upload(a), bd = upload(b), cd = poisoned(out);
  tp::Options o;
  o.transposeB = c.transposeB;
  o.transport = transport;
  TensorView av = viewOf(*ad, a, device), bv = viewOf(*bd, b, device), cv = viewOf(*cd, out, device);
  std::unique_ptr<rt::DeviceBuffer> sa, sb;
  if (c.scales != Scales::none) {
    sa = upload(mine.scaleA);
    sb = upload(mine.scaleB);
    o.scaleA = viewOf(*sa, mine.scaleA, device);
    o.scaleB = viewOf(*sb, mine.scaleB, device);
  }
  for (int call = 0; call < 2; ++call) {
    cd->fillBytes(0xff);
    Choice made = c.allGather ? tp::allgather_gemm(comm, av, bv, cv, o, comm.stream())
                              : tp::gemm_reducescatter(comm, av, bv, cv, o, comm.stream());
    config = made.config;
  }
  TESSEL_CU(rt::Driver::get(), cuStreamSynchronize, comm.stream());
  download(*cd, out);
  std::vector<TpRankInputs> all;
  for (int q = 0; q < ranks; ++q) all.push_back(harness::tpRankInputs(c.shape(), ranks, q, kSeed));
  return relativeError(out, harness::tpReference(c.shape(), me, all));
}

} // namespace

TEST_CASE("one rank of the tensor-parallel layers (run by the cases below)", "[.tp_rank]") {
  auto comm = rt::Communicator::fromEnvironment();
  const std::vector<TpCase> cases = {
      {true, 77, 136, 200, DType::bf16, DType::bf16, false},  // ragged everything
      {false, 77, 136, 200, DType::bf16, DType::bf16, false},
      {true, 256, 512, 384, DType::f16, DType::f16, true},    // b as nn.Linear keeps it
      {false, 128, 264, 136, DType::f16, DType::f32, true},   // an f32 c: f32 partials
      {false, 1, 64, 8, DType::bf16, DType::bf16, false},     // one row a rank
      {true, 300, 1024, 1000, DType::bf16, DType::f32, false},
      // FP8, K-major b: row scales (gathered with their rows), one scale
      // each (every rank its own), none.
      {true, 200, 256, 264, DType::f8e4m3, DType::bf16, true, Scales::row},
      {false, 64, 512, 136, DType::f8e4m3, DType::bf16, true, Scales::row},
      {false, 77, 128, 136, DType::f8e4m3, DType::bf16, true, Scales::row}, // 308-byte scale rows
      {true, 130, 128, 200, DType::f8e5m2, DType::f32, true, Scales::tensor},
      {false, 130, 128, 200, DType::f8e4m3, DType::f16, true, Scales::tensor},
      {true, 64, 256, 128, DType::f8e4m3, DType::bf16, true, Scales::none},
  };
  for (const TpCase &c : cases) {
    std::string config;
    double error = runCase(*comm, c, config);
    fmt::print("rank {}: tp {} m={} k={} n={} {}->{} transpose_b={}: rel error {:.2e}; {}\n",
               comm->rank(), c.allGather ? "allgather_gemm" : "gemm_reducescatter", c.rowsPerRank,
               c.k, c.n, name(c.in), name(c.out), c.transposeB, error, config);
    INFO(config);
    // An FP8 product rounds only its output: the output's tolerance.
    CHECK(error < toleranceFor(c.out == DType::f32 ? DType::bf16 : c.out));
    CHECK(config.find("transport=symmetric") != std::string::npos);
  }
  // More problems than the plans a communicator keeps: the first case's
  // plan is freed on every rank (collectively, at the same call, after
  // the device is done with it); calling it again makes a new one.
  for (int64_t rows = 1; rows <= int64_t(kernels::kPlansKept); ++rows) {
    std::string config;
    TpCase other = cases[4];
    other.rowsPerRank = rows;
    CHECK(runCase(*comm, other, config) < toleranceFor(DType::bf16));
  }
  {
    std::string config;
    CHECK(runCase(*comm, cases[0], config) < toleranceFor(DType::bf16));
  }
  // The nccl transport, where NCCL runs (a GPU per rank): the collective and
  // the GEMM in turn, FP8 scales gathered (one a rank: a GEMM per rank).
  std::vector<int> devices = comm->localDevices();
  std::sort(devices.begin(), devices.end());
  if (std::adjacent_find(devices.begin(), devices.end()) == devices.end()) {
    for (const TpCase &c : {cases[0], cases[1], cases[6], cases[9], cases[10]}) {
      std::string config;
      double error = runCase(*comm, c, config, "nccl");
      INFO(config);
      CHECK(error < toleranceFor(c.out == DType::f32 ? DType::bf16 : c.out));
      CHECK(config.find("transport=nccl") != std::string::npos);
    }
  } else {
    WARN("the nccl transport is not checked: ranks share a GPU, which NCCL refuses");
  }
  rt::DeviceBuffer small(1 << 16);
  auto view = [&](std::vector<int64_t> shape) {
    return TensorView::contiguous(small.ptr(), rt::ScalarType::BF16, std::move(shape),
                                  comm->device());
  };
  // No rows anywhere: nothing moves, nothing is computed.
  CHECK(tp::allgather_gemm(*comm, view({0, 64}), view({64, 32}), view({0, 32})).config.find(
            "nothing to compute") != std::string::npos);
  // One rank's bad view is an error on every rank, naming that rank.
  int64_t inner = comm->rank() == 0 ? 48 : 64;
  CHECK_THROWS_WITH(tp::gemm_reducescatter(*comm, view({8, 64}), view({inner, 32}),
                                           view({8 / comm->size(), 32})),
                    Catch::Contains("rank 0: a is bf16[8, 64]") &&
                        Catch::Contains("op(b) has 48 rows"));
  // 8-bit operands are K-major.
  rt::DeviceBuffer bytes(1 << 12);
  auto fp8 = [&](std::vector<int64_t> shape) {
    return TensorView::contiguous(bytes.ptr(), rt::ScalarType::F8E4M3, std::move(shape),
                                  comm->device());
  };
  CHECK_THROWS_WITH(tp::allgather_gemm(*comm, fp8({4, 32}), fp8({32, 16}),
                                       view({4 * comm->size(), 16})),
                    Catch::Contains("K-major"));
  // Steps that would start off a 16-byte boundary: 3 rows of 20 bf16
  // columns are 120 bytes.
  CHECK_THROWS_WITH(tp::allgather_gemm(*comm, view({3, 64}), view({64, 20}),
                                       view({3 * comm->size(), 20})),
                    Catch::Contains("not a multiple of 16"));
  // Rows that do not split over the ranks.
  CHECK_THROWS_WITH(tp::gemm_reducescatter(*comm, view({comm->size() + 1, 64}), view({64, 32}),
                                           view({1, 32})),
                    Catch::Contains("do not split into"));
  // Ranks that disagree on the problem: both learn it.
  int64_t rows = comm->rank() == 0 ? 16 : 8;
  CHECK_THROWS_WITH(tp::allgather_gemm(*comm, view({rows, 64}), view({64, 32}),
                                       view({comm->size() * rows, 32})),
                    Catch::Contains("the ranks call with different problems"));
  tp::release(*comm);
}

TEST_CASE("tp layers on two ranks match float64", "[gpu][multi]") {
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  CHECK(rt::launchLocalRanks(2, {self, "[.tp_rank]"}) == 0);
}

TEST_CASE("tp layers on four ranks match float64", "[gpu][multi]") {
  int devices = rt::Driver::get().deviceCount();
  if (devices < 4) {
    WARN("SKIPPED: four-rank tensor-parallel layers need four GPUs; this machine has " << devices);
    return;
  }
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  CHECK(rt::launchLocalRanks(4, {self, "[.tp_rank]"}) == 0);
}
