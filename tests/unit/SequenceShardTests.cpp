//===- SequenceShardTests.cpp - index maps of sequence parallelism --------===//
#include <catch2/catch.hpp>

#include "tessel/kernels/parallel/SequenceShards.h"
#include "tessel/runtime/Error.h"

#include <map>
#include <numeric>

using namespace tessel;
using namespace tessel::kernels;

TEST_CASE("zig-zag shards cover a sequence once and balance causal work") {
  for (int ranks : {1, 2, 4, 8})
    for (int64_t length : {int64_t(2 * ranks), int64_t(64 * ranks), int64_t(96 * ranks)}) {
      INFO(ranks << " ranks, " << length << " rows");
      std::vector<int> hits(length, 0);
      std::vector<int64_t> causalWork(ranks, 0);
      for (int r = 0; r < ranks; ++r)
        for (int64_t row = 0; row < length / ranks; ++row) {
          int64_t g = zigzagGlobalRow(length, ranks, r, row);
          REQUIRE(g >= 0);
          REQUIRE(g < length);
          ++hits[g];
          ShardRow owner = zigzagOwner(length, ranks, g);
          CHECK(owner.rank == r);
          CHECK(owner.row == row);
          causalWork[r] += g + 1; // keys a causal query row attends to
        }
      CHECK(std::all_of(hits.begin(), hits.end(), [](int n) { return n == 1; }));
      // What contiguous shards would not give: every rank the same work.
      CHECK(std::all_of(causalWork.begin(), causalWork.end(),
                        [&](int64_t w) { return w == causalWork[0]; }));
    }
  // Rank 1 of 2 holds chunks 1 and 2 of 4.
  CHECK(zigzagGlobalRow(8, 2, 1, 0) == 2);
  CHECK(zigzagGlobalRow(8, 2, 1, 3) == 5);
}

TEST_CASE("zig-zag shapes that would straddle a chunk are named") {
  validateZigzag({512, 1024}, {512, 1024}, 2, 128, 128);
  CHECK_THROWS_WITH(validateZigzag({512, 1000}, {512, 1024}, 2, 128, 128),
                    Catch::Contains("sequence 1 has 1000 query rows, not a multiple of 2 * "
                                    "block_m = 256"));
  CHECK_THROWS_WITH(validateZigzag({512}, {768}, 2, 128, 128),
                    Catch::Contains("sequence 0 has 768 key rows, not a multiple of 2 * ranks * "
                                    "block_n = 512"));
  CHECK_THROWS_WITH(validateZigzag({512}, {512, 512}, 2, 128, 128),
                    Catch::Contains("1 query lengths but 2 key lengths"));
}

TEST_CASE("packed batches split each sequence over the ranks") {
  std::vector<int32_t> cu = {0, 4, 4, 12, 18};
  for (int ranks : {1, 2}) {
    validatePackedShards(cu, ranks, 8);
    // Each rank's packed rows are its shard of every sequence in order, and
    // every row of the batch has exactly one place.
    std::map<std::pair<int, int64_t>, int> places;
    for (int64_t g = 0; g < cu.back(); ++g) {
      ShardRow owner = packedOwner(cu, ranks, g);
      REQUIRE(owner.rank >= 0);
      REQUIRE(owner.rank < ranks);
      REQUIRE(owner.row >= 0);
      REQUIRE(owner.row < cu.back() / ranks);
      ++places[{owner.rank, owner.row}];
    }
    CHECK(places.size() == size_t(cu.back()));
  }
  // Sequence 2 (rows 4..11) over 2 ranks: rank 1 holds rows 8..11, packed
  // after its half of sequence 0.
  ShardRow owner = packedOwner(cu, 2, 9);
  CHECK(owner.rank == 1);
  CHECK(owner.row == 4 / 2 + 1);
  CHECK_THROWS_WITH(validatePackedShards({0, 4, 7}, 2, 8),
                    Catch::Contains("sequence 1 has 3 rows, not a multiple of the 2 ranks"));
  CHECK_THROWS_WITH(validatePackedShards({0, 4, 16}, 2, 8),
                    Catch::Contains("sequence 1 has 12 rows, more than max_seqlen = 8"));
  CHECK_THROWS_WITH(validatePackedShards({1, 4}, 1, 8), Catch::Contains("must start at 0"));
  CHECK_THROWS_WITH(validatePackedShards({0, 4, 2}, 1, 8),
                    Catch::Contains("cu_seqlens decreases at sequence 1 (4 to 2)"));
}
