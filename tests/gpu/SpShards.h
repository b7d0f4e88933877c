//===- SpShards.h - the sequence-parallel tests' cases and shards -*- C++ -*-===//
//
// What the sequence-parallel GPU tests share: a case (the whole problem),
// device views of test buffers, and each rank's rows of the whole problem.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TESTS_GPU_SPSHARDS_H
#define TESSEL_TESTS_GPU_SPSHARDS_H

#include "tessel/Tessel.h"
#include "tessel/Testing.h"

#include <vector>

namespace tessel::testing {

struct SpCase {
  int64_t batch, seqlen, headsQ, headsKv, headDim;
  bool causal;
  std::vector<int32_t> cuSeqlens; // packed: whole sequences' prefix sums
  bool zigzag = false;
};

inline TensorView viewOf(const rt::DeviceBuffer &b, DType t, std::vector<int64_t> shape, int device) {
  return TensorView::contiguous(b.ptr(), t == DType::bf16 ? rt::ScalarType::BF16 : rt::ScalarType::F16,
                                std::move(shape), device);
}

/// Rows of the whole problem's [rows, heads, dim] tensor that rank `rank`
/// holds: 1/N of each sequence, end to end; zig-zag, chunks r and 2N-1-r
/// of each batch entry's 2N.
inline std::vector<int64_t> shardRows(const SpCase &c, int ranks, int rank) {
  std::vector<int64_t> rows;
  if (c.zigzag) {
    int64_t chunk = c.seqlen / (2 * ranks);
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t part : {int64_t(rank), int64_t(2 * ranks - 1 - rank)})
        for (int64_t i = 0; i < chunk; ++i) rows.push_back(b * c.seqlen + part * chunk + i);
    return rows;
  }
  std::vector<int32_t> cu = c.cuSeqlens;
  if (cu.empty())
    for (int64_t b = 0; b <= c.batch; ++b) cu.push_back(int32_t(b * c.seqlen));
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    int64_t shard = (cu[s + 1] - cu[s]) / ranks;
    for (int64_t i = 0; i < shard; ++i) rows.push_back(cu[s] + rank * shard + i);
  }
  return rows;
}

/// Rank's rows (`rows`, from shardRows) of a whole [rows, heads, dim]
/// tensor, in shard order.
inline HostTensor shardOf(const HostTensor &whole, const std::vector<int64_t> &rows) {
  HostTensor shard(whole.type, {int64_t(rows.size()), whole.shape[1], whole.shape[2]});
  int64_t row = whole.shape[1] * whole.shape[2];
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t e = 0; e < row; ++e) shard.set(i * row + e, whole.values[rows[i] * row + e]);
  return shard;
}

} // namespace tessel::testing

#endif
