//===- ChunkedAttentionGpuTests.cpp - attention with a query offset -------===//
//
// attention::Options::queryOffset through the library's calls: a causal
// sequence cut into chunks of queries, each run with its queries at their
// place over the keys up to its end, must give the whole sequence's O, LSE
// and dQ row for row, and dK, dV summed over the chunks. Chunk edges fall
// inside tiles (and one chunk is a single row), so the masks' offsets are
// checked where they cut a tile, in the forward and the backward.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "../common/GpuHelpers.h"
#include "tessel/Tessel.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::test;
using testing::HostTensor;

namespace {

/// Rows [first, first + rows) of every batch entry of a [batch, seq, heads,
/// dim] host tensor, as a tensor of its own.
HostTensor rowsOf(const HostTensor &t, int64_t first, int64_t rows) {
  int64_t batch = t.shape[0], seq = t.shape[1], row = t.shape[2] * t.shape[3];
  HostTensor out(t.type, {batch, rows, t.shape[2], t.shape[3]});
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < rows * row; ++i)
      out.set(b * rows * row + i, t.values[(b * seq + first) * row + i]);
  return out;
}

/// A device tensor holding `t`.
struct Uploaded : DeviceTensor {
  explicit Uploaded(const HostTensor &t) : DeviceTensor(t.type, t.shape) {
    host = t;
    device.upload(t.bytes.data(), t.bytes.size());
  }
};

double relativeTo(const std::vector<float> &got, const std::vector<double> &want) {
  return testing::relativeError(got, want);
}

struct Case {
  int64_t batch, seq, headsQ, headsKv, dim;
  std::vector<int64_t> cuts; // chunk starts after 0
};

void checkChunks(const Case &c) {
  std::mt19937_64 rng(c.seq + c.dim);
  const DType t = DType::bf16;
  DeviceTensor q(t, {c.batch, c.seq, c.headsQ, c.dim}, &rng),
      k(t, {c.batch, c.seq, c.headsKv, c.dim}, &rng), v(t, {c.batch, c.seq, c.headsKv, c.dim}, &rng),
      dout(t, {c.batch, c.seq, c.headsQ, c.dim}, &rng);
  DeviceTensor o(t, q.host.shape), lse(DType::f32, {c.batch, c.headsQ, c.seq}), dq(t, q.host.shape),
      dk(t, k.host.shape), dv(t, k.host.shape);
  Stream stream;
  attention::BackwardOptions whole;
  whole.causal = true;
  attention::ForwardOptions wholeForward;
  wholeForward.causal = true;
  attention::forward(q.view(), k.view(), v.view(), o.view(), lse.view(), wholeForward, stream.s);
  attention::backward(q.view(), k.view(), v.view(), o.view(), lse.view(), dout.view(), dq.view(),
                      dk.view(), dv.view(), whole, stream.s);
  stream.sync();
  for (DeviceTensor *x : {&o, &lse, &dq, &dk, &dv}) x->fetch();

  std::vector<int64_t> starts = {0};
  starts.insert(starts.end(), c.cuts.begin(), c.cuts.end());
  std::vector<double> dkSum(dk.host.values.size(), 0), dvSum(dv.host.values.size(), 0);
  int64_t rowKv = c.headsKv * c.dim;
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t first = starts[i], end = i + 1 < starts.size() ? starts[i + 1] : c.seq;
    int64_t rows = end - first;
    Uploaded cq(rowsOf(q.host, first, rows)), cdout(rowsOf(dout.host, first, rows));
    Uploaded ck(rowsOf(k.host, 0, end)), cv(rowsOf(v.host, 0, end));
    DeviceTensor co(t, cq.host.shape), clse(DType::f32, {c.batch, c.headsQ, rows}),
        cdq(t, cq.host.shape), cdk(t, ck.host.shape), cdv(t, ck.host.shape);
    attention::ForwardOptions fo;
    fo.causal = true;
    fo.queryOffset = first;
    Choice forward =
        attention::forward(cq.view(), ck.view(), cv.view(), co.view(), clse.view(), fo, stream.s);
    attention::BackwardOptions bo;
    bo.causal = true;
    bo.queryOffset = first;
    Choice backward = attention::backward(cq.view(), ck.view(), cv.view(), co.view(), clse.view(),
                                          cdout.view(), cdq.view(), cdk.view(), cdv.view(), bo,
                                          stream.s);
    stream.sync();
    for (DeviceTensor *x : {&co, &clse, &cdq, &cdk, &cdv}) x->fetch();
    INFO(fmt::format("chunk [{}, {}) of {}: {} | {}", first, end, c.seq, forward.config,
                     backward.config));
    // The first chunk is the usual mask; the others' kernels take the offset.
    CHECK((forward.config.find("query_offset") != std::string::npos) == (first > 0));
    CHECK((backward.config.find("query_offset") != std::string::npos) == (first > 0));
    HostTensor wantO = rowsOf(o.host, first, rows), wantDq = rowsOf(dq.host, first, rows);
    CHECK(relativeTo(co.host.values, {wantO.values.begin(), wantO.values.end()}) < 1e-2);
    CHECK(relativeTo(cdq.host.values, {wantDq.values.begin(), wantDq.values.end()}) < 1e-2);
    std::vector<double> wantLse;
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t h = 0; h < c.headsQ; ++h)
        for (int64_t r = first; r < end; ++r)
          wantLse.push_back(lse.host.values[(b * c.headsQ + h) * c.seq + r]);
    CHECK(relativeTo(clse.host.values, wantLse) < 1e-5);
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t e = 0; e < end * rowKv; ++e) {
        dkSum[b * c.seq * rowKv + e] += cdk.host.values[b * end * rowKv + e];
        dvSum[b * c.seq * rowKv + e] += cdv.host.values[b * end * rowKv + e];
      }
  }
  // Every chunk's share of dK and dV, added: the whole sequence's.
  std::vector<float> gotDk(dkSum.begin(), dkSum.end()), gotDv(dvSum.begin(), dvSum.end());
  CHECK(relativeTo(gotDk, {dk.host.values.begin(), dk.host.values.end()}) < 1e-2);
  CHECK(relativeTo(gotDv, {dv.host.values.begin(), dv.host.values.end()}) < 1e-2);
}

} // namespace

TEST_CASE("chunks of causal queries at their place give the whole sequence's attention",
          "[gpu][api]") {
  // GQA (dK/dV reduced by atomics), chunk edges inside tiles, a chunk of
  // one row.
  checkChunks({2, 700, 4, 2, 128, {200, 201, 450}});
  // MHA at head_dim 64 (dK/dV written directly), tile-aligned chunks.
  checkChunks({1, 1024, 4, 4, 64, {256, 512, 768}});
}

TEST_CASE("a query offset is refused where it means nothing", "[gpu][api]") {
  std::mt19937_64 rng(5);
  DeviceTensor q(DType::bf16, {1, 64, 2, 64}, &rng), lse(DType::f32, {1, 2, 64});
  attention::ForwardOptions o;
  o.queryOffset = 16;
  CHECK_THROWS_WITH(attention::forward(q.view(), q.view(), q.view(), q.view(), lse.view(), o),
                    Catch::Contains("queryOffset = 16") && Catch::Contains("causal"));
  o.causal = true;
  o.queryOffset = -1;
  CHECK_THROWS_WITH(attention::forward(q.view(), q.view(), q.view(), q.view(), lse.view(), o),
                    Catch::Contains("queryOffset = -1"));
}
