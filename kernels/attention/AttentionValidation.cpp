//===- AttentionValidation.cpp - attention arguments, checked before launch ===//
#include "tessel/kernels/attention/Attention.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;

namespace {
std::string shapeText(const std::vector<int64_t> &s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

void checkPrefixSums(const char *name, const std::vector<int32_t> &cu, int64_t rows,
                     int64_t maxSeqlen, const char *maxName) {
  if (cu.size() < 2)
    throw Error(fmt::format("{} needs at least 2 entries (one sequence), got {}", name, cu.size()));
  if (cu.front() != 0) throw Error(fmt::format("{}[0] is {}; prefix sums start at 0", name, cu.front()));
  for (size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] < cu[i - 1])
      throw Error(fmt::format("{} is not monotone: entry {} is {} after {}", name, i, cu[i], cu[i - 1]));
    if (cu[i] - cu[i - 1] > maxSeqlen)
      throw Error(fmt::format("{} = {} is smaller than sequence {} of {}, which has {} rows", maxName,
                              maxSeqlen, i - 1, name, cu[i] - cu[i - 1]));
  }
  if (cu.back() != rows)
    throw Error(fmt::format("{} ends at {} but the packed tensor has {} rows", name, cu.back(), rows));
}
} // namespace

void tessel::kernels::validateAttention(DType dtype, int64_t headDim, bool varlen,
                                        const AttentionArgs &a) {
  const std::pair<const char *, const AttentionArgs::TensorArg *> all[] = {
      {"Q", &a.q}, {"K", &a.k}, {"V", &a.v}, {"O", &a.o}};
  for (auto [name, t] : all) {
    if (t->shape.size() != 4)
      throw Error(fmt::format("{} has shape {}; attention tensors are [batch, seqlen, heads, "
                              "head_dim]", name, shapeText(t->shape)));
    DType expected = t == &a.o ? attentionOutputType(dtype) : dtype;
    if (t->dtype != expected)
      throw Error(fmt::format("{} is {} but the kernel was built for {}{}", name,
                              tessel::name(t->dtype), tessel::name(expected),
                              expected != dtype ? fmt::format(" (O of {} inputs)", tessel::name(dtype))
                                                : std::string()));
    if (t->shape[3] != headDim)
      throw Error(fmt::format("{} has head_dim {} but the kernel was built for head_dim {}", name,
                              t->shape[3], headDim));
    for (int64_t e : t->shape)
      if (e <= 0) throw Error(fmt::format("{} has an empty dimension: {}", name, shapeText(t->shape)));
  }
  if (a.k.shape != a.v.shape)
    throw Error(fmt::format("K {} and V {} differ in shape", shapeText(a.k.shape), shapeText(a.v.shape)));
  if (a.q.shape != a.o.shape)
    throw Error(fmt::format("Q {} and O {} differ in shape", shapeText(a.q.shape), shapeText(a.o.shape)));
  if (a.q.shape[0] != a.k.shape[0])
    throw Error(fmt::format("Q has batch {} but K has batch {}", a.q.shape[0], a.k.shape[0]));
  int64_t headsQ = a.q.shape[2], headsKv = a.k.shape[2];
  if (headsQ % headsKv)
    throw Error(fmt::format("heads_q = {} is not a multiple of heads_kv = {}: each K/V head serves a "
                            "group of heads_q / heads_kv query heads", headsQ, headsKv));
  if (!varlen) {
    if (!a.cuSeqlensQ.empty() || !a.cuSeqlensK.empty())
      throw Error("cu_seqlens given to a kernel built for fixed-length batches; build it with varlen");
    return;
  }
  if (a.q.shape[0] != 1)
    throw Error(fmt::format("packed (varlen) tensors have batch 1 and every sequence's rows along "
                            "dimension 1; Q has batch {}", a.q.shape[0]));
  if (a.cuSeqlensQ.size() != a.cuSeqlensK.size())
    throw Error(fmt::format("cu_seqlens_q has {} entries but cu_seqlens_k has {}; both list the "
                            "same sequences", a.cuSeqlensQ.size(), a.cuSeqlensK.size()));
  checkPrefixSums("cu_seqlens_q", a.cuSeqlensQ, a.q.shape[1], a.maxSeqlenQ, "max_seqlen_q");
  checkPrefixSums("cu_seqlens_k", a.cuSeqlensK, a.k.shape[1], a.maxSeqlenK, "max_seqlen_k");
}
