//===- SequenceShards.cpp - how a sequence is split over ranks ------------===//
#include "tessel/kernels/parallel/SequenceShards.h"
#include "tessel/runtime/Error.h"

#include <algorithm>
#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;

int64_t tessel::kernels::zigzagGlobalRow(int64_t length, int ranks, int rank, int64_t localRow) {
  int64_t chunk = length / (2 * ranks);
  // The first half of the shard is chunk `rank`, the second chunk 2N-1-rank.
  int64_t which = localRow < chunk ? rank : 2 * ranks - 1 - rank;
  return which * chunk + localRow % chunk;
}

ShardRow tessel::kernels::zigzagOwner(int64_t length, int ranks, int64_t globalRow) {
  int64_t chunk = length / (2 * ranks);
  int64_t which = globalRow / chunk, within = globalRow % chunk;
  if (which < ranks) return {static_cast<int>(which), within};
  return {static_cast<int>(2 * ranks - 1 - which), chunk + within};
}

void tessel::kernels::validateZigzag(const std::vector<int64_t> &queryLengths,
                                     const std::vector<int64_t> &keyLengths, int ranks,
                                     int64_t blockM, int64_t blockN) {
  if (queryLengths.size() != keyLengths.size())
    throw Error(fmt::format("zig-zag: {} query lengths but {} key lengths", queryLengths.size(),
                            keyLengths.size()));
  for (size_t b = 0; b < queryLengths.size(); ++b) {
    if (queryLengths[b] % (2 * blockM))
      throw Error(fmt::format("zig-zag: sequence {} has {} query rows, not a multiple of 2 * "
                              "block_m = {}: a query tile would straddle the middle",
                              b, queryLengths[b], 2 * blockM));
    if (keyLengths[b] % (2 * ranks * blockN))
      throw Error(fmt::format("zig-zag: sequence {} has {} key rows, not a multiple of 2 * ranks "
                              "* block_n = {}: a key tile would straddle two chunks",
                              b, keyLengths[b], 2 * ranks * blockN));
  }
}

void tessel::kernels::validatePackedShards(const std::vector<int32_t> &cuSeqlens, int ranks,
                                           int64_t maxSeqlen) {
  if (cuSeqlens.empty() || cuSeqlens[0] != 0)
    throw Error("packed shards: cu_seqlens must start at 0");
  for (size_t b = 0; b + 1 < cuSeqlens.size(); ++b) {
    int64_t length = int64_t(cuSeqlens[b + 1]) - cuSeqlens[b];
    if (length < 0)
      throw Error(fmt::format("packed shards: cu_seqlens decreases at sequence {} ({} to {})", b,
                              cuSeqlens[b], cuSeqlens[b + 1]));
    if (length % ranks)
      throw Error(fmt::format("packed shards: sequence {} has {} rows, not a multiple of the {} "
                              "ranks",
                              b, length, ranks));
    if (length > maxSeqlen)
      throw Error(fmt::format("packed shards: sequence {} has {} rows, more than max_seqlen = {}",
                              b, length, maxSeqlen));
  }
}

ShardRow tessel::kernels::packedOwner(const std::vector<int32_t> &cuSeqlens, int ranks,
                                      int64_t globalRow) {
  // The sequence holding the row, then its shard within that sequence.
  auto next = std::upper_bound(cuSeqlens.begin(), cuSeqlens.end(), globalRow);
  size_t b = static_cast<size_t>(next - cuSeqlens.begin()) - 1;
  int64_t length = int64_t(cuSeqlens[b + 1]) - cuSeqlens[b], shard = length / ranks;
  int64_t within = globalRow - cuSeqlens[b];
  return {static_cast<int>(within / shard), cuSeqlens[b] / ranks + within % shard};
}
