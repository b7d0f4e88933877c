//===- SequenceShards.h - how a sequence is split over ranks ----*- C++ -*-===//
//
// The index maps of sequence parallelism, as plain functions the exchange
// and the attention kernels build on and the tests check against a CPU
// model:
//  - contiguous shards: rank r holds rows [r*L/N, (r+1)*L/N) of a sequence;
//  - zig-zag shards for causal balance: the sequence is cut into 2N chunks
//    and rank r holds chunks r and 2N-1-r, in that order, so every rank has
//    as many early (cheap) as late (costly) query rows;
//  - packed (varlen) batches: each sequence of a packed batch is split over
//    the ranks on its own, so rank r's packed rows are the concatenation of
//    its shard of every sequence, starting at cu_seqlens[b] / N.
// The validations throw tessel::Error naming the sequence and the value.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_PARALLEL_SEQUENCESHARDS_H
#define TESSEL_KERNELS_PARALLEL_SEQUENCESHARDS_H

#include <cstdint>
#include <vector>

namespace tessel::kernels {

/// A row of the whole sequence, as a rank and a row of that rank's shard.
struct ShardRow {
  int rank;
  int64_t row;
};

/// Zig-zag placement of a sequence of `length` rows over `ranks` ranks.
int64_t zigzagGlobalRow(int64_t length, int ranks, int rank, int64_t localRow);
ShardRow zigzagOwner(int64_t length, int ranks, int64_t globalRow);

/// Zig-zag needs every sequence's query length to be a multiple of
/// 2 * block_m and its key length of 2 * ranks * block_n, so that no tile
/// straddles a chunk boundary.
void validateZigzag(const std::vector<int64_t> &queryLengths,
                    const std::vector<int64_t> &keyLengths, int ranks, int64_t blockM,
                    int64_t blockN);

/// Packed batches: each sequence's length (the differences of `cuSeqlens`,
/// int32 prefix sums starting at 0) a multiple of `ranks`, and `maxSeqlen`
/// at least every length.
void validatePackedShards(const std::vector<int32_t> &cuSeqlens, int ranks, int64_t maxSeqlen);
/// Where packed row `globalRow` (of the whole packed batch) lives: the rank
/// and its row in that rank's packed shard.
ShardRow packedOwner(const std::vector<int32_t> &cuSeqlens, int ranks, int64_t globalRow);

} // namespace tessel::kernels

#endif
