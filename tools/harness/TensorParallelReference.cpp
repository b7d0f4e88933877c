//===- TensorParallelReference.cpp - the tp layers' inputs and reference ===//
#include "tessel/harness/TensorParallel.h"

using namespace tessel;
using namespace tessel::harness;
using testing::HostTensor;

TpRankInputs tessel::harness::tpRankInputs(const TpShape &s, int ranks, int q, uint64_t seed) {
  std::mt19937_64 rng(seed + 977 * uint64_t(q));
  int64_t rows = s.allGather ? s.rowsPerRank : ranks * s.rowsPerRank;
  int64_t scaleRows = s.scales == TpScales::row ? rows : s.scales == TpScales::tensor ? 1 : 0;
  int64_t scaleCols = s.scales == TpScales::row ? s.n : scaleRows;
  TpRankInputs x{HostTensor(s.in, {rows, s.k}),
                 HostTensor(s.in, s.transposeB ? std::vector<int64_t>{s.n, s.k}
                                               : std::vector<int64_t>{s.k, s.n}),
                 HostTensor(DType::f32, {scaleRows}), HostTensor(DType::f32, {scaleCols})};
  testing::randomize(x.a, rng);
  testing::randomize(x.b, rng);
  testing::randomize(x.scaleA, rng, 0.25f, 2.0f);
  testing::randomize(x.scaleB, rng, 0.25f, 2.0f);
  return x;
}

namespace {
/// Scale i of `s`: 1 without scales, the only one of a tensor's.
double scaleAt(const HostTensor &s, int64_t i) {
  return s.size() == 0 ? 1.0 : s.size() == 1 ? s.values[0] : s.values[i];
}
} // namespace

std::vector<double> tessel::harness::tpReference(const TpShape &s, int me,
                                                 const std::vector<TpRankInputs> &all,
                                                 std::vector<int64_t> rows) {
  const int ranks = static_cast<int>(all.size());
  const int64_t m = s.rowsPerRank;
  if (rows.empty())
    for (int64_t i = 0; i < (s.allGather ? ranks * m : m); ++i) rows.push_back(i);
  auto bAt = [&](const HostTensor &b, int64_t kk, int64_t j) {
    return double(s.transposeB ? b.values[j * s.k + kk] : b.values[kk * s.n + j]);
  };
  std::vector<double> ref;
  ref.reserve(rows.size() * s.n);
  for (int64_t row : rows)
    for (int64_t j = 0; j < s.n; ++j) {
      // allgather: the row's owner's a against this rank's b; reducescatter:
      // every rank's a (this rank's rows) against its own b.
      double sum = 0;
      for (int q = 0; q < ranks; ++q) {
        if (s.allGather && q != me) continue;
        const TpRankInputs &from = s.allGather ? all[row / m] : all[q];
        int64_t aRow = s.allGather ? row % m : me * m + row;
        double partial = 0;
        for (int64_t kk = 0; kk < s.k; ++kk)
          partial += double(from.a.values[aRow * s.k + kk]) * bAt(all[q].b, kk, j);
        sum += partial * scaleAt(from.scaleA, aRow) * scaleAt(all[q].scaleB, j);
      }
      ref.push_back(sum);
    }
  return ref;
}
