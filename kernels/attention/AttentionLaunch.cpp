//===- AttentionLaunch.cpp - the attention kernels' launch arguments ------===//
//
// The forward kernels' argument list and the backward pass's three launches
// with the clearing of its accumulators, in the order the kernels declare
// their parameters, for every caller.
//
//===----------------------------------------------------------------------===//
#include "tessel/kernels/attention/Attention.h"

using namespace tessel;
using namespace tessel::kernels;
using rt::LaunchArg;

AttentionForwardArgs AttentionForwardArgs::dense(int64_t batch, int64_t seqQ, int64_t seqK,
                                                 int64_t headsQ, int64_t headsKv, int64_t headDim,
                                                 double scale, CUdeviceptr q, CUdeviceptr k,
                                                 CUdeviceptr v, CUdeviceptr o, CUdeviceptr lse) {
  AttentionForwardArgs a;
  a.batch = batch, a.seqQ = seqQ, a.seqK = seqK, a.headsQ = headsQ, a.headsKv = headsKv;
  a.scale = scale;
  a.q = LaunchArg::buffer(q, {batch, seqQ, headsQ, headDim});
  a.k = LaunchArg::buffer(k, {batch, seqK, headsKv, headDim});
  a.v = LaunchArg::buffer(v, {batch, seqK, headsKv, headDim});
  a.o = LaunchArg::buffer(o, {batch, seqQ, headsQ, headDim});
  a.lse = LaunchArg::buffer(lse, {batch, headsQ, seqQ});
  return a;
}

std::vector<LaunchArg> AttentionForwardArgs::list() const {
  std::vector<LaunchArg> out;
  for (int64_t n : {batch, seqQ, seqK, headsQ, headsKv}) out.push_back(LaunchArg::integer(n));
  out.push_back(LaunchArg::real(scale));
  for (const LaunchArg *t : {&q, &k, &v, &o, &lse}) out.push_back(*t);
  if (streamed) {
    for (int64_t n : {streamed->shardRows, streamed->shards, streamed->headGroups,
                      int64_t(streamed->epoch)})
      out.push_back(LaunchArg::integer(n));
    out.push_back(streamed->arrivals);
  }
  if (queryOffset) out.push_back(LaunchArg::integer(*queryOffset));
  if (packed) {
    out.push_back(LaunchArg::integer(packed->entries));
    out.push_back(LaunchArg::integer(packed->maxSeqlenQ));
    out.push_back(packed->cuSeqlensQ);
    out.push_back(packed->cuSeqlensK);
  }
  if (vScale) out.push_back(LaunchArg::real(*vScale));
  if (descales)
    for (const Descale &x : *descales) {
      out.push_back(LaunchArg::integer(x.offset));
      out.push_back(LaunchArg::integer(x.sequenceStride));
      out.push_back(LaunchArg::integer(x.headStride));
      out.push_back(LaunchArg::integer(x.extent));
      out.push_back(LaunchArg::buffer(x.data, {x.extent}));
    }
  return out;
}

static std::vector<LaunchArg> integers(std::initializer_list<int64_t> values) {
  std::vector<LaunchArg> out;
  for (int64_t v : values) out.push_back(LaunchArg::integer(v));
  return out;
}

std::vector<LaunchArg> AttentionBackwardArgs::preArgs() const {
  std::vector<LaunchArg> out = integers({batch, seqQ, headsQ});
  out.insert(out.end(), {o, dout, delta});
  return out;
}

std::vector<LaunchArg> AttentionBackwardArgs::mainArgs() const {
  std::vector<LaunchArg> out = integers({batch, seqQ, seqK, headsQ, headsKv});
  out.push_back(LaunchArg::real(scale));
  out.insert(out.end(), {q, k, v, dout, lse, delta, dqAccum, dkAccum, dvAccum});
  if (queryOffset) out.push_back(LaunchArg::integer(*queryOffset));
  if (packed) {
    out.push_back(LaunchArg::integer(packed->entries));
    out.push_back(LaunchArg::integer(packed->maxSeqlenK));
    out.push_back(packed->cuSeqlensQ);
    out.push_back(packed->cuSeqlensK);
  }
  return out;
}

std::vector<std::vector<LaunchArg>> AttentionBackwardArgs::postArgs() const {
  std::vector<std::vector<LaunchArg>> out;
  out.push_back(integers({batch, seqQ, headsQ, headsQ}));
  out.back().insert(out.back().end(), {dqAccum, dq});
  if (kvReduction == KvReduction::direct) return out;
  for (auto [accum, grad] : {std::pair{&dkAccum, &dk}, std::pair{&dvAccum, &dv}}) {
    out.push_back(integers({batch, seqK, accumHeads(), headsKv}));
    out.back().insert(out.back().end(), {*accum, *grad});
  }
  return out;
}

/// The bytes of a buffer argument (f32 accumulators: four bytes an element).
static size_t f32Bytes(const LaunchArg &a) {
  size_t n = 1;
  for (int64_t e : a.shape) n *= size_t(e);
  return n * 4;
}

void AttentionBackwardArgs::launch(Kernel &pre, Kernel &main, Kernel &post, CUstream stream) const {
  pre.launch(preArgs(), stream);
  // The fp32 accumulators start at zero (split slices are written whole).
  rt::clearAsync(dqAccum.ptr, f32Bytes(dqAccum), stream);
  if (kvReduction == KvReduction::atomic) {
    rt::clearAsync(dkAccum.ptr, f32Bytes(dkAccum), stream);
    rt::clearAsync(dvAccum.ptr, f32Bytes(dvAccum), stream);
  }
  main.launch(mainArgs(), stream);
  for (const std::vector<LaunchArg> &args : postArgs()) post.launch(args, stream);
}
