//===- PagedDecode.cpp - GQA decode over a paged KV cache -----------------===//
//
// One block per (kv head, sequence, split) computes the query heads of the
// kv head's group, padded to the 16 rows of a tensor-core tile: the padding
// costs tensor-core time, which a decode step has to spare (it reads every
// key once and does group x 4 flops per byte). Each step's K and V tiles
// come from the block table's pages through the software pipeline, whose
// producer reads the page id of the stage it fills. Both products split the
// block's warps along N (full_col): with 16 rows there is no other split,
// and P reaches the second product through shared memory.
//
//===----------------------------------------------------------------------===//
#include "DecodeSteps.h"
#include "tessel/kernels/decode/Decode.h"

#include <bit>
#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;

namespace {
void checkConfig(const PagedDecodeConfig &c) {
  auto fail = [](const std::string &what) { throw Error("paged_decode: " + what); };
  if (c.dtype != DType::f16 && c.dtype != DType::bf16)
    fail(fmt::format("dtype={} is not f16 or bf16", name(c.dtype)));
  if (c.headDim != 64 && c.headDim != 128 && c.headDim != 256)
    fail(fmt::format("head_dim={} is not 64, 128 or 256", c.headDim));
  if (c.group < 1 || c.group > 64)
    fail(fmt::format("group={} (heads_q / heads_kv) is not in [1, 64]", c.group));
  if (c.pageSize < 1 || c.pageSize > 4096 || !std::has_single_bit(uint64_t(c.pageSize)))
    fail(fmt::format("page_size={} is not a power of two up to 4096", c.pageSize));
  if (c.blockN < 16 || c.blockN > 256 || !std::has_single_bit(uint64_t(c.blockN)))
    fail(fmt::format("block_n={} is not a power of two from 16 to 256", c.blockN));
  if (c.blockN > c.pageSize && c.blockN / c.pageSize > 16)
    fail(fmt::format("block_n={} gathers {} pages of {} keys a step; at most 16", c.blockN,
                     c.blockN / c.pageSize, c.pageSize));
  if (c.threads != 32 && c.threads != 64 && c.threads != 128 && c.threads != 256)
    fail(fmt::format("threads={} is not 32, 64, 128 or 256", c.threads));
  if (c.stages < 1 || c.stages > 8) fail(fmt::format("stages={} is not in [1, 8]", c.stages));
}
} // namespace

Program tessel::kernels::pagedDecode(const PagedDecodeConfig &c) {
  checkConfig(c);
  const int64_t d = c.headDim, g = c.group, bn = c.blockN, ps = c.pageSize;
  const int64_t rows = (g + 15) / 16 * 16;
  Program p(c.split ? "paged_decode_split" : "paged_decode");
  Expr batch = p.sym("B"), kvHeads = p.sym("H"), pages = p.sym("P"), perSeq = p.sym("T");
  Expr splits = c.split ? p.sym("S") : Expr(1);
  Expr scale = p.scalar("scale", DType::f32);
  Expr kScale = c.fp8Cache ? p.scalar("k_scale", DType::f32) : Expr(1.0);
  Expr vScale = c.fp8Cache ? p.scalar("v_scale", DType::f32) : Expr(1.0);
  const DType cacheType = c.fp8Cache ? DType::f8e4m3 : c.dtype;
  Expr heads = kvHeads * g;
  Tensor q = p.tensor("q", {batch, heads, d}, c.dtype);
  Tensor kCache = p.tensor("k_cache", {pages, ps, kvHeads, d}, cacheType);
  Tensor vCache = p.tensor("v_cache", {pages, ps, kvHeads, d}, cacheType);
  Tensor table = p.tensor("block_table", {batch, perSeq}, DType::i32);
  Tensor lengths = p.tensor("lengths", {batch}, DType::i32);
  std::optional<Tensor> o, partialO, partialLse;
  if (c.split) {
    partialO = p.tensor("partial_o", {splits, batch, heads, d}, DType::f32);
    partialLse = p.tensor("partial_lse", {splits, batch, heads}, DType::f32);
  } else {
    o = p.tensor("o", {batch, heads, d}, c.dtype);
  }
  p.kernel({kvHeads, batch, splits}, c.threads, [&](Expr h, Expr b, Expr z) {
    Buffer qs = alloc_shared({rows, d}, c.dtype, "q");
    Buffer ks = alloc_shared({bn, d}, cacheType, "k");
    Buffer vs = alloc_shared({bn, d}, cacheType, "v");
    // An FP8 cache's tiles widened for the products (tensor cores take
    // both operands of one type, and q stays in its own).
    std::optional<Buffer> kWide, vWide;
    if (c.fp8Cache) {
      kWide = alloc_shared({bn, d}, c.dtype, "k_wide");
      vWide = alloc_shared({bn, d}, c.dtype, "v_wide");
    }
    const Buffer &kOperand = kWide ? *kWide : ks, &vOperand = vWide ? *vWide : vs;
    // The widening goes through registers: copies between shared memory
    // and fragments move 16 bytes a thread at a time, and the conversion
    // is then per register. (Element code on the shared tiles themselves
    // moved one element a thread at a time and bounded the kernel at a
    // sixth of the memory bandwidth.)
    auto widen = [&](const Buffer &k8, const Buffer &v8, const Buffer &kTo, const Buffer &vTo) {
      for (auto [from, to] : {std::pair{&k8, &kTo}, {&v8, &vTo}}) {
        Buffer codes = alloc_fragment({bn, d}, DType::f8e4m3, "codes");
        Buffer wide = alloc_fragment({bn, d}, c.dtype, "wide");
        copy(*from, codes);
        parallel(bn, d, [&](Expr i, Expr e) { wide(i, e) = cast(codes(i, e), c.dtype); });
        copy(wide, *to);
      }
    };
    Buffer probs = alloc_shared({rows, bn}, c.dtype, "p");
    Buffer s = alloc_fragment({rows, bn}, DType::f32, "s");
    Buffer acc = alloc_fragment({rows, d}, DType::f32, "acc");
    OnlineSoftmax softmax = OnlineSoftmax::allocate(rows, "correction");
    DecodeRange range = DecodeRange::of(cast(lengths(b), DType::index), bn, splits, z);
    // Rows past the group's are the next kv head's queries (or past the
    // tensor: zeros); their results are dropped below.
    copy(q.tile({b, h * g, 0}, {drop, rows, d}), qs);
    softmax.begin(scale * kScale, acc);
    pipelined(range.count, c.stages, [&](Expr t) {
      Expr key0 = (range.first + t) * bn;
      copyKeyStep(table, b, range, key0, ps, bn, [&](Expr page, Expr at, int64_t n, int64_t to) {
        Buffer kWindow = n == bn ? ks : ks.tile({to, 0}, {n, d});
        Buffer vWindow = n == bn ? vs : vs.tile({to, 0}, {n, d});
        copy(kCache.tile({page, at, h, 0}, {drop, n, drop, d}), kWindow);
        copy(vCache.tile({page, at, h, 0}, {drop, n, drop, d}), vWindow);
      });
      if (c.fp8Cache) widen(ks, vs, *kWide, *vWide);
      gemm(qs, kOperand, s,
           {.transpose_b = true, .clear_accum = true, .policy = WarpPolicy::full_col});
      maskKeys(s, key0, range.length);
      softmax.step(s, probs, [&] {
        parallel(rows, d, [&](Expr i, Expr e) { acc(i, e) = acc(i, e) * softmax.factor(i); });
      });
      gemm(probs, vOperand, acc, {.policy = WarpPolicy::full_col});
    });
    Expr groupEnd = h * g + g;
    DecodeOutputs out;
    out.o = o ? &*o : nullptr;
    out.partialO = partialO ? &*partialO : nullptr;
    out.partialLse = partialLse ? &*partialLse : nullptr;
    out.oTile = [&](const Tensor &t) {
      return t.bounded({batch, groupEnd, d}).tile({b, h * g, 0}, {drop, rows, d});
    };
    out.partialOTile = [&](const Tensor &t) {
      return t.bounded({splits, batch, groupEnd, d}).tile({z, b, h * g, 0}, {drop, drop, rows, d});
    };
    out.partialLseTile = [&](const Tensor &t) {
      return t.bounded({splits, batch, groupEnd}).tile({z, b, h * g}, {drop, drop, rows});
    };
    storeDecodeRows(softmax, acc, c.dtype, out, std::nullopt, vScale);
  });
  return p;
}
