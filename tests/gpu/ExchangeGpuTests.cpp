//===- ExchangeGpuTests.cpp - the exchange's transports move the same bytes -===//
//
// One plan (two tensors of different widths, two parts, pitched pieces
// between every pair of ranks) run by every transport: the copy engines
// over symmetric memory, NCCL's messages, and hierarchical (copy engines
// inside a node, NCCL between nodes) with the machine split into nodes of
// one and of two ranks by TESSEL_EXCHANGE_NODE_RANKS. Every rank's
// destinations must hold exactly what the host model of the plan puts
// there.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "tessel/kernels/parallel/PieceExchange.h"
#include "tessel/runtime/Communicator.h"
#include "tessel/runtime/Driver.h"

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;

namespace {
/// Rank src's source of tensor t is [rows, ranks * width_t]; rank dst takes
/// column block dst of it, each part its half of the rows, into row block
/// src of its destination [ranks * rows, width_t].
ExchangePlan blockPlan(int ranks) {
  const int64_t rows = 24, widths[2] = {40, 136};
  ExchangePlan plan;
  plan.ranks = ranks;
  plan.parts = 2;
  for (int64_t w : widths) {
    plan.sourceBytes.push_back(rows * ranks * w);
    plan.destinationBytes.push_back(ranks * rows * w);
  }
  plan.pieces = [=](int t, int src, int dst, int part) {
    int64_t w = widths[t], half = rows / 2, row0 = part * half;
    return std::vector<Piece>{{row0 * ranks * w + dst * w, ranks * w,
                               (src * rows + row0) * w, w, w, half}};
  };
  return plan;
}

uint8_t sourceByte(int call, int rank, int t, int64_t i) {
  return uint8_t(call * 29 + rank * 61 + t * 17 + i * 7 + i / 251);
}

/// Runs the plan with `transport` and checks this rank's destinations.
void checkTransport(rt::Communicator &comm, Transport transport, const std::string &label) {
  ExchangePlan plan = blockPlan(comm.size());
  int me = comm.rank();
  PieceExchange exchange(comm, plan, transport);
  CUstream stream = comm.stream();
  rt::Driver &d = rt::Driver::get();
  // Three calls queued back to back, the second part by part, each with
  // new sources written on the stream right after the call before: the
  // exchange, not the host, must keep a rank from overwriting sources its
  // peers still read (and nothing of one call, flags, epochs, message
  // offsets, may leak into the next).
  const int calls = 3;
  std::vector<HostBuffers> sources(calls, HostBuffers(plan.ranks)),
      expected(calls, HostBuffers(plan.ranks));
  std::vector<std::vector<std::unique_ptr<rt::DeviceBuffer>>> staged(calls);
  for (int call = 0; call < calls; ++call) {
    for (int r = 0; r < plan.ranks; ++r)
      for (int t = 0; t < plan.tensors(); ++t) {
        sources[call][r].emplace_back(plan.sourceBytes[t]);
        for (int64_t i = 0; i < plan.sourceBytes[t]; ++i)
          sources[call][r][t][i] = sourceByte(call, r, t, i);
        expected[call][r].emplace_back(plan.destinationBytes[t], 0);
      }
    runOnHost(plan, sources[call], expected[call], /*throughMessages=*/false);
    for (int t = 0; t < plan.tensors(); ++t)
      staged[call].push_back(std::make_unique<rt::DeviceBuffer>(plan.destinationBytes[t]));
  }
  comm.barrier();
  for (int call = 0; call < calls; ++call) {
    for (int t = 0; t < plan.tensors(); ++t) {
      TESSEL_CU(d, cuMemcpyHtoDAsync, exchange.source(t), sources[call][me][t].data(),
                plan.sourceBytes[t], stream);
      TESSEL_CU(d, cuMemsetD8Async, exchange.destination(t), 0xee, plan.destinationBytes[t],
                stream);
    }
    if (call == 1)
      for (int part = 0; part < plan.parts; ++part) exchange.run(stream, part);
    else
      exchange.run(stream);
    for (int t = 0; t < plan.tensors(); ++t)
      TESSEL_CU(d, cuMemcpyAsync, staged[call][t]->ptr(), exchange.destination(t),
                plan.destinationBytes[t], stream);
  }
  TESSEL_CU(d, cuStreamSynchronize, stream);
  for (int call = 0; call < calls; ++call)
    for (int t = 0; t < plan.tensors(); ++t) {
      std::vector<uint8_t> got(plan.destinationBytes[t]);
      staged[call][t]->download(got.data(), got.size());
      INFO(fmt::format("rank {}, {}, call {}, tensor {}", me, label, call, t));
      CHECK(got == expected[call][me][t]);
    }
  comm.barrier();
  fmt::print("rank {}: {} exchange of {} ranks: destinations as the plan says\n", me, label,
             comm.size());
}
} // namespace

TEST_CASE("one rank of the exchange transports (run by the case below)", "[.exchange_rank]") {
  auto comm = rt::Communicator::fromEnvironment();
  checkTransport(*comm, Transport::copyEngine, "symmetric");
  const std::vector<int> &devices = comm->localDevices();
  if (devices.size() < 2 || devices[0] == devices[1]) {
    if (comm->rank() == 0)
      fmt::print("skipped: nccl and hierarchical need a GPU per rank (NCCL refuses two ranks on "
                 "one device)\n");
    return;
  }
  checkTransport(*comm, Transport::nccl, "nccl");
  for (int nodeRanks = 1; nodeRanks < comm->size(); nodeRanks *= 2) {
    ::setenv("TESSEL_EXCHANGE_NODE_RANKS", std::to_string(nodeRanks).c_str(), 1);
    // Asked for by name; left to choose, one machine keeps the copy
    // engines.
    std::string why;
    CHECK(chooseTransport(*comm, "hierarchical", why) == Transport::hierarchical);
    CHECK(chooseTransport(*comm, "", why) == Transport::copyEngine);
    CHECK(describeTransport(*comm, Transport::hierarchical) ==
          fmt::format("hierarchical nodes={}", nodeRanks));
    checkTransport(*comm, Transport::hierarchical,
                   fmt::format("hierarchical (nodes of {} ranks)", nodeRanks));
    // A tensor-parallel layer has no hierarchical form.
    CHECK_THROWS_WITH(chooseTransport(*comm, "hierarchical", why, false),
                      Catch::Contains("moves its data by symmetric or nccl"));
  }
  ::unsetenv("TESSEL_EXCHANGE_NODE_RANKS");
}

TEST_CASE("every exchange transport moves the bytes the plan says, hierarchical included",
          "[gpu][multi]") {
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  int devices = rt::Driver::get().deviceCount();
  // Four ranks where there are four GPUs (nodes of one and two), else two.
  int ranks = devices >= 4 ? 4 : 2;
  int rc = rt::launchLocalRanks(ranks, {self, "[.exchange_rank]"});
  CHECK(rc == 0);
}
