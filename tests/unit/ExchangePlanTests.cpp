//===- ExchangePlanTests.cpp - Ulysses layouts as exchange plans ----------===//
//
// The plans sequence-parallel attention's exchanges run, applied to host
// buffers: every element of every rank's head layout comes from where the
// element model (ulyssesSource) says, the log-sum-exp's heads and rows land
// where the backward reads them, the way back inverts the way there, and
// packing into NCCL messages changes no byte.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "tessel/kernels/parallel/UlyssesPieces.h"
#include "tessel/runtime/Error.h"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <functional>

using namespace tessel;
using namespace tessel::kernels;

namespace {

using Kinds = std::vector<UlyssesTensor>;

/// Each rank's shard of every kind, 32-bit elements numbered (rank, offset).
HostBuffers numberedShards(const UlyssesShape &s, const Kinds &kinds) {
  HostBuffers shards(s.ranks);
  for (int r = 0; r < s.ranks; ++r)
    for (size_t k = 0; k < kinds.size(); ++k) {
      int64_t bytes = shardBytes(s, kinds[k]);
      std::vector<uint8_t> buffer(bytes);
      for (int64_t e = 0; e < bytes / 4; ++e) {
        uint32_t value = uint32_t((k + 1) << 28 | r << 24 | e);
        std::memcpy(buffer.data() + 4 * e, &value, 4);
      }
      shards[r].push_back(std::move(buffer));
    }
  return shards;
}

HostBuffers emptyBuffers(const ExchangePlan &plan, bool destinations) {
  HostBuffers out(plan.ranks);
  for (int r = 0; r < plan.ranks; ++r)
    for (int t = 0; t < plan.tensors(); ++t)
      out[r].emplace_back(
          (destinations ? plan.destinationBytes : plan.sourceBytes)[t], 0);
  return out;
}

uint32_t at(const std::vector<uint8_t> &buffer, int64_t element) {
  uint32_t v;
  std::memcpy(&v, buffer.data() + 4 * element, 4);
  return v;
}

/// The shapes: a fixed batch (MHA, GQA split over the ranks, one K/V head
/// replicated), and packed batches with an empty sequence, keys as long as
/// the queries or not.
std::vector<UlyssesShape> shapesFor(int ranks) {
  std::vector<UlyssesShape> shapes;
  UlyssesShape s;
  s.ranks = ranks, s.elementBytes = 4, s.headDim = 4;
  s.batch = 2, s.seqlen = 4 * ranks, s.headsQ = 2 * ranks,
  s.headsKV = 2 * ranks;
  shapes.push_back(s);
  s.headsKV = ranks;
  shapes.push_back(s);
  s.headsQ = ranks, s.headsKV = 1;
  shapes.push_back(s);
  s.batch = 1, s.seqlen = 0, s.headsQ = 2 * ranks, s.headsKV = ranks;
  s.cuSeqlensQ = s.cuSeqlensK = {0, 2 * ranks, 2 * ranks, 5 * ranks};
  shapes.push_back(s);
  // Keys of other lengths than the queries (cross-attention, a cache).
  s.cuSeqlensK = {0, 3 * ranks, 4 * ranks, 4 * ranks};
  shapes.push_back(s);
  return shapes;
}

std::vector<HeadGroups> groupsFor(const UlyssesShape &s) {
  std::vector<HeadGroups> all = {{s.headsPerRank(0)}};
  if (s.headsPerRank(0) % 2 == 0 && s.headsPerRank(1) % 2 == 0)
    all.push_back({s.headsPerRank(0) / 2, s.headsPerRank(0) / 2});
  return all;
}

std::string describe(const UlyssesShape &s, const HeadGroups &g) {
  return fmt::format(
      "ranks={} batch={} seqlen={} heads={}/{} packed={} rows={}/{} groups={}",
      s.ranks, s.batch, s.seqlen, s.headsQ, s.headsKV, s.packed(),
      s.totalRows(0), s.totalRows(1), g.size());
}

const Kinds kinds = {UlyssesTensor::queryRows, UlyssesTensor::keyValueRows,
                     UlyssesTensor::logSumExp};

/// `check` on every shape at 1, 2, 4 and 8 ranks with each of its head
/// groupings, the case named in any failure.
void forEachCase(const std::function<void(const UlyssesShape &,
                                          const HeadGroups &)> &check) {
  for (int ranks : {1, 2, 4, 8})
    for (const UlyssesShape &s : shapesFor(ranks))
      for (const HeadGroups &groups : groupsFor(s)) {
        INFO(describe(s, groups));
        check(s, groups);
      }
}

} // namespace

TEST_CASE("the Ulysses plans put every element where the element model says") {
  forEachCase([](const UlyssesShape &s, const HeadGroups &groups) {
    int ranks = s.ranks;
    ExchangePlan plan = toHeadsPlan(s, kinds, groups);
    HostBuffers shards = numberedShards(s, kinds);
    HostBuffers heads = emptyBuffers(plan, true),
                packed = emptyBuffers(plan, true);
    runOnHost(plan, shards, heads, /*throughMessages=*/false);
    runOnHost(plan, shards, packed, /*throughMessages=*/true);
    CHECK(heads == packed);
    // A part per head group moves the same bytes, each exactly once.
    ExchangePlan parted = toHeadsPlan(s, kinds, groups, /*partPerGroup=*/true);
    CHECK(parted.parts == int(groups.size()));
    HostBuffers byParts = emptyBuffers(parted, true);
    runOnHost(parted, shards, byParts, true);
    CHECK(byParts == heads);
    for (int src = 0; src < ranks; ++src)
      for (int dst = 0; dst < ranks; ++dst) {
        int64_t sum = 0;
        for (int part = 0; part < parted.parts; ++part)
          sum += messageBytes(parted, src, dst, part);
        CHECK(sum == messageBytes(plan, src, dst));
      }
    for (int r = 0; r < ranks; ++r) {
      // Rows tensors: group g holds [rows, heads of g, D].
      for (int t : {0, 1}) {
        int64_t first = 0;
        for (int g = 0; g < int(groups.size()); ++g) {
          int64_t count =
              t == 0 ? groups[g]
                     : groups[g] * s.headsPerRank(1) / s.headsPerRank(0);
          int64_t base = headGroupOffset(s, kinds[t], groups, g) / 4;
          for (int64_t row = 0; row < s.totalRows(t); ++row)
            for (int64_t h = 0; h < count; ++h)
              for (int64_t d = 0; d < s.headDim; ++d) {
                UlyssesSource src = ulyssesSource(s, t, r, row, first + h, d);
                uint32_t got =
                    at(heads[r][t], base + (row * count + h) * s.headDim + d);
                REQUIRE(got == at(shards[src.rank][t], src.offset));
              }
          first += count;
        }
      }
      // Log-sum-exp: group g holds [batch, heads of g, rows of an entry];
      // head h of the group is the rank's query head first + h.
      int64_t entries = s.packed() ? 1 : s.batch,
              rows = s.totalRows(0) / entries;
      int64_t first = 0;
      for (int g = 0; g < int(groups.size()); ++g) {
        int64_t base =
            headGroupOffset(s, UlyssesTensor::logSumExp, groups, g) / 4;
        for (int64_t e = 0; e < entries; ++e)
          for (int64_t h = 0; h < groups[g]; ++h)
            for (int64_t row = 0; row < rows; ++row) {
              // The model's source of the same row as a rows tensor
              // says which rank holds it and at which shard row.
              UlyssesSource src =
                  ulyssesSource(s, 0, r, e * rows + row, first + h, 0);
              int64_t shardRow =
                  src.offset / (s.headsQ * s.headDim) - e * rows / ranks;
              int64_t head = s.firstHead(0, r) + first + h;
              uint32_t want =
                  at(shards[src.rank][2],
                     (e * s.headsQ + head) * (rows / ranks) + shardRow);
              REQUIRE(at(heads[r][2],
                         base + (e * groups[g] + h) * rows + row) == want);
            }
        first += groups[g];
      }
    }
  });
}

TEST_CASE("the Ulysses plans' way back inverts the way there, replicas one "
          "copy each") {
  forEachCase([](const UlyssesShape &s, const HeadGroups &groups) {
    int ranks = s.ranks;
    ExchangePlan there = toHeadsPlan(s, kinds, groups),
                 back = toShardsPlan(s, kinds, groups, /*partPerGroup=*/true);
    HostBuffers shards = numberedShards(s, kinds);
    HostBuffers heads = emptyBuffers(there, true);
    runOnHost(there, shards, heads, false);
    HostBuffers returned = emptyBuffers(back, true);
    runOnHost(back, heads, returned, true);
    int64_t replicas = kvReplicas(s);
    CHECK(back.destinationBytes[1] ==
          replicas * shardBytes(s, UlyssesTensor::keyValueRows));
    for (int r = 0; r < ranks; ++r) {
      CHECK(returned[r][0] == shards[r][0]);
      CHECK(returned[r][2] == shards[r][2]);
      // Copy i of K/V holds each head j from the rank j * replicas + i
      // that held it: every copy is the whole shard.
      int64_t bytes = shardBytes(s, UlyssesTensor::keyValueRows);
      for (int64_t i = 0; i < replicas; ++i)
        CHECK(std::equal(shards[r][1].begin(), shards[r][1].end(),
                         returned[r][1].begin() + i * bytes));
    }
  });
}

TEST_CASE(
    "exchange plans that reach past a buffer are refused, naming the piece") {
  ExchangePlan plan;
  plan.ranks = 2;
  plan.sourceBytes = {64};
  plan.destinationBytes = {64};
  plan.pieces = [](int, int src, int dst, int) {
    return std::vector<Piece>{
        {0, 16, src == 1 && dst == 0 ? 56 : 0, 16, 16, 1}};
  };
  CHECK_THROWS_WITH(validatePlan(plan),
                    Catch::Contains("tensor 0, part 0, rank 1 to rank 0") &&
                        Catch::Contains("reaches past"));
  plan.pieces = [](int, int, int, int) {
    return std::vector<Piece>{{0, 8, 0, 16, 16, 2}};
  };
  CHECK_THROWS_WITH(validatePlan(plan),
                    Catch::Contains("pitch below its width"));
  plan.pieces = [](int, int, int, int) {
    return std::vector<Piece>{{0, 16, 0, 16, 16, 4}};
  };
  validatePlan(plan);
  CHECK(messageBytes(plan, 0, 1) == 64);
}

TEST_CASE("TESSEL_EXCHANGE_NODE_RANKS splits a node for the hierarchical exchange") {
  auto env = [](const char *value) {
    return [value](const char *name) {
      return std::string(name) == "TESSEL_EXCHANGE_NODE_RANKS" ? value : nullptr;
    };
  };
  CHECK(exchangeNodeRanks(4, env(nullptr)) == 4);
  CHECK(exchangeNodeRanks(4, env("")) == 4);
  CHECK(exchangeNodeRanks(4, env("2")) == 2);
  CHECK(exchangeNodeRanks(8, env("1")) == 1);
  CHECK_THROWS_WITH(exchangeNodeRanks(4, env("3")),
                    Catch::Contains("TESSEL_EXCHANGE_NODE_RANKS=3: ranks per node are a divisor "
                                    "of the 4 ranks this node holds"));
  for (const char *bad : {"0", "-2", "16"})
    CHECK_THROWS_WITH(exchangeNodeRanks(4, env(bad)),
                      Catch::Contains("TESSEL_EXCHANGE_NODE_RANKS=" + std::string(bad) +
                                      " is out of range: use an integer in [1, 4]"));
  for (const char *bad : {"two", "2x", " 2", "+2"})
    CHECK_THROWS_WITH(exchangeNodeRanks(4, env(bad)),
                      Catch::Contains("TESSEL_EXCHANGE_NODE_RANKS=" + std::string(bad) +
                                      " is not an integer"));
}
