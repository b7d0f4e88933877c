//===- MlaDecode.cpp - DeepSeek-style MLA decode over a paged cache -------===//
//
// Every head reads the same cache rows (latent, then rope key), so a block
// takes block_m heads of one sequence and each key step is one cache tile
// for all of them: 128 heads make a decode step compute-bound. The scores
// are two products accumulated into one tile (latent columns, then rope
// columns), each operand a tile of its own so that the value product reads
// the latent tile whole; the cache rows come in as two copies, one per
// part. Both products split the warps along N (full_col): each warpgroup
// keeps half of the 512-column accumulator (128 registers a thread) and P
// reaches the value product through shared memory.
//
//===----------------------------------------------------------------------===//
#include "DecodeSteps.h"
#include "tessel/kernels/decode/Decode.h"

#include <bit>
#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;

namespace {
void checkConfig(const MlaDecodeConfig &c) {
  auto fail = [](const std::string &what) { throw Error("mla_decode: " + what); };
  if (c.dtype != DType::f16 && c.dtype != DType::bf16)
    fail(fmt::format("dtype={} is not f16 or bf16", name(c.dtype)));
  if (c.latent < 64 || c.latent > 512 || c.latent % 64)
    fail(fmt::format("latent={} is not a multiple of 64 up to 512", c.latent));
  if (c.rope < 0 || c.rope > 128 || c.rope % 16)
    fail(fmt::format("rope={} is not a multiple of 16 up to 128", c.rope));
  if (c.pageSize < 1 || c.pageSize > 4096 || !std::has_single_bit(uint64_t(c.pageSize)))
    fail(fmt::format("page_size={} is not a power of two up to 4096", c.pageSize));
  if (c.blockN < 16 || c.blockN > 128 || !std::has_single_bit(uint64_t(c.blockN)))
    fail(fmt::format("block_n={} is not a power of two from 16 to 128", c.blockN));
  if (c.blockN > c.pageSize && c.blockN / c.pageSize > 16)
    fail(fmt::format("block_n={} gathers {} pages of {} keys a step; at most 16", c.blockN,
                     c.blockN / c.pageSize, c.pageSize));
  if (c.blockM != 16 && c.blockM != 32 && c.blockM != 64 && c.blockM != 128)
    fail(fmt::format("block_m={} is not 16, 32, 64 or 128", c.blockM));
  if (c.threads != 128 && c.threads != 256)
    fail(fmt::format("threads={} is not 128 or 256", c.threads));
  if (c.stages < 1 || c.stages > 4) fail(fmt::format("stages={} is not in [1, 4]", c.stages));
}
} // namespace

Program tessel::kernels::mlaDecode(const MlaDecodeConfig &c) {
  checkConfig(c);
  const int64_t lat = c.latent, rope = c.rope, width = lat + rope, bm = c.blockM, bn = c.blockN;
  const int64_t ps = c.pageSize;
  // The scores' warps: along N where each warp still gets a whole
  // instruction's columns (wgmma's warpgroups take 8 or more), else the
  // compiler's square split (mma.sync's 8 warps over 32 keys).
  const WarpPolicy scorePolicy =
      bn / (c.threads / 32) >= 8 ? WarpPolicy::full_col : WarpPolicy::square;
  Program p(c.split ? "mla_decode_split" : "mla_decode");
  Expr batch = p.sym("B"), heads = p.sym("N"), pages = p.sym("P"), perSeq = p.sym("T");
  Expr splits = c.split ? p.sym("S") : Expr(1);
  Expr scale = p.scalar("scale", DType::f32);
  Tensor q = p.tensor("q", {batch, heads, width}, c.dtype);
  Tensor cache = p.tensor("cache", {pages, ps, width}, c.dtype);
  Tensor table = p.tensor("block_table", {batch, perSeq}, DType::i32);
  Tensor lengths = p.tensor("lengths", {batch}, DType::i32);
  std::optional<Tensor> o, partialO, partialLse;
  if (c.split) {
    partialO = p.tensor("partial_o", {splits, batch, heads, lat}, DType::f32);
    partialLse = p.tensor("partial_lse", {splits, batch, heads}, DType::f32);
  } else {
    o = p.tensor("o", {batch, heads, lat}, c.dtype);
  }
  p.kernel({ceil_div(heads, bm), batch, splits}, c.threads, [&](Expr hb, Expr b, Expr z) {
    Expr h0 = hb * bm;
    Buffer qLatent = alloc_shared({bm, lat}, c.dtype, "q_latent");
    std::optional<Buffer> qRope, kRope;
    Buffer kv = alloc_shared({bn, lat}, c.dtype, "kv_latent");
    if (rope) {
      qRope = alloc_shared({bm, rope}, c.dtype, "q_rope");
      kRope = alloc_shared({bn, rope}, c.dtype, "k_rope");
    }
    Buffer probs = alloc_shared({bm, bn}, c.dtype, "p");
    Buffer s = alloc_fragment({bm, bn}, DType::f32, "s");
    Buffer acc = alloc_fragment({bm, lat}, DType::f32, "acc");
    OnlineSoftmax softmax = OnlineSoftmax::allocate(bm, "correction");
    // Split differently from the scores, the accumulator's rows need the
    // row factors in a layout of their own: they pass through shared
    // memory (a copy between fragments gives both one layout).
    std::optional<Buffer> accFactor;
    if (scorePolicy != WarpPolicy::full_col)
      accFactor = alloc_shared({bm}, DType::f32, "acc_factor");
    DecodeRange range = DecodeRange::of(cast(lengths(b), DType::index), bn, splits, z);
    copy(q.tile({b, h0, 0}, {drop, bm, lat}), qLatent);
    if (rope) copy(q.tile({b, h0, lat}, {drop, bm, rope}), *qRope);
    softmax.begin(scale, acc);
    pipelined(range.count, c.stages, [&](Expr t) {
      Expr key0 = (range.first + t) * bn;
      copyKeyStep(table, b, range, key0, ps, bn, [&](Expr page, Expr at, int64_t n, int64_t to) {
        copy(cache.tile({page, at, 0}, {drop, n, lat}), n == bn ? kv : kv.tile({to, 0}, {n, lat}));
        if (rope)
          copy(cache.tile({page, at, lat}, {drop, n, rope}),
               n == bn ? *kRope : kRope->tile({to, 0}, {n, rope}));
      });
      gemm(qLatent, kv, s, {.transpose_b = true, .clear_accum = true, .policy = scorePolicy});
      if (rope) gemm(*qRope, *kRope, s, {.transpose_b = true, .policy = scorePolicy});
      maskKeys(s, key0, range.length);
      softmax.step(s, probs, [&] {
        if (accFactor) copy(softmax.factor, *accFactor);
        const Buffer &factor = accFactor ? *accFactor : softmax.factor;
        parallel(bm, lat, [&](Expr i, Expr e) { acc(i, e) = acc(i, e) * factor(i); });
      });
      gemm(probs, kv, acc, {.policy = WarpPolicy::full_col});
    });
    DecodeOutputs out;
    out.o = o ? &*o : nullptr;
    out.partialO = partialO ? &*partialO : nullptr;
    out.partialLse = partialLse ? &*partialLse : nullptr;
    out.oTile = [&](const Tensor &t) { return t.tile({b, h0, 0}, {drop, bm, lat}); };
    out.partialOTile = [&](const Tensor &t) { return t.tile({z, b, h0, 0}, {drop, drop, bm, lat}); };
    out.partialLseTile = [&](const Tensor &t) { return t.tile({z, b, h0}, {drop, drop, bm}); };
    storeDecodeRows(softmax, acc, c.dtype, out, accFactor);
  });
  return p;
}
