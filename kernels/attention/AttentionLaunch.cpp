//===- AttentionLaunch.cpp - the forward kernels' launch arguments --------===//
//
// One list, in the order flashAttentionForward (and its tcgen05 forms)
// declare their parameters, for every caller.
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
  return out;
}
