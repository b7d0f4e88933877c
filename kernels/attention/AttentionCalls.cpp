//===- AttentionCalls.cpp - tessel::attention::forward and backward -------===//
//
// The library's attention kernels behind a call on views: the checks, the
// configuration each target gets, the launch arguments in the order the
// kernels declare them, and the backward pass's workspace.
//
//===----------------------------------------------------------------------===//
#include "common/LibraryCalls.h"
#include "tessel/kernels/Tuned.h"
#include "tessel/runtime/Driver.h"

#include <cmath>
#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;
using rt::LaunchArg;
using rt::ScalarType;

namespace {
const std::initializer_list<ScalarType> kHalfTypes = {ScalarType::F16, ScalarType::BF16};
const std::initializer_list<ScalarType> kForwardTypes = {ScalarType::F16, ScalarType::BF16,
                                                         ScalarType::F8E4M3, ScalarType::F8E5M2};

/// The extents every attention call reads off its views.
struct Problem {
  int64_t batch, seqQ, seqK, headsQ, headsKv, headDim;
  DType dtype;
  bool varlen;
  double scale;
  int device;
};

/// Checks q, k, v, out (and lse) against each other and the options; the
/// forward also takes FP8 inputs (`forward`), with out in bf16.
Problem checkProblem(const TensorView &q, const TensorView &k, const TensorView &v,
                     const TensorView &out, const TensorView &lse, const attention::Options &o,
                     bool forward = false) {
  if (o.cuSeqlensQ.has_value() != o.cuSeqlensK.has_value())
    throw Error("packed sequences need both cuSeqlensQ and cuSeqlensK");
  requireView(q, "q", 4, forward ? kForwardTypes : kHalfTypes);
  DType outType = attentionOutputType(dtypeOf(q.dtype));
  requireView(k, "k", 4, {q.dtype});
  requireView(v, "v", 4, {q.dtype});
  requireView(out, "out", 4, {scalarOf(outType)});
  Problem p{q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3],
            dtypeOf(q.dtype), o.cuSeqlensQ.has_value(), o.scale, 0};
  AttentionArgs args;
  args.q = {p.dtype, q.shape};
  args.k = {p.dtype, k.shape};
  args.v = {p.dtype, v.shape};
  args.o = {outType, out.shape};
  // The shapes only: cu_seqlens live on the device and are read by the
  // kernels, not copied back here (that would synchronize the stream).
  if (p.varlen) {
    args.cuSeqlensQ = {0, int32_t(p.seqQ)};
    args.cuSeqlensK = {0, int32_t(p.seqK)};
    args.maxSeqlenQ = p.seqQ;
    args.maxSeqlenK = p.seqK;
  }
  validateAttention(p.dtype, p.headDim, p.varlen, args);
  requireView(lse, "lse", 3, {ScalarType::F32});
  requireShape(lse, "lse", {p.batch, p.headsQ, p.seqQ});
  if (p.varlen) {
    requireView(*o.cuSeqlensQ, "cuSeqlensQ", 1, {ScalarType::I32});
    requireView(*o.cuSeqlensK, "cuSeqlensK", 1, {ScalarType::I32});
    if (o.cuSeqlensQ->shape != o.cuSeqlensK->shape || o.cuSeqlensQ->shape[0] < 2)
      throw Error(fmt::format("cuSeqlensQ {} and cuSeqlensK {} must list the same sequences (at "
                              "least 2 entries)",
                              o.cuSeqlensQ->str(), o.cuSeqlensK->str()));
    if (o.maxSeqlenQ <= 0 || o.maxSeqlenK <= 0 || o.maxSeqlenQ > p.seqQ || o.maxSeqlenK > p.seqK)
      throw Error(fmt::format("maxSeqlenQ = {} and maxSeqlenK = {} must be positive and at most the "
                              "packed rows ({} and {})",
                              o.maxSeqlenQ, o.maxSeqlenK, p.seqQ, p.seqK));
  }
  if (o.queryOffset < 0 || (o.queryOffset && (!o.causal || p.varlen)))
    throw Error(fmt::format("queryOffset = {}: a query offset places the queries of a causal "
                            "mask in a fixed-length batch (not negative; causal; no cuSeqlens)",
                            o.queryOffset));
  if (!(o.scale >= 0) || std::isinf(o.scale))
    throw Error(fmt::format("scale = {}: use a positive softmax scale, or 0 for 1/sqrt(head_dim)", o.scale));
  if (p.scale == 0) p.scale = 1.0 / std::sqrt(double(p.headDim));
  return p;
}

/// `base` with the settings of a `tessel tune flash_attention_bwd` record;
/// false (and `base` unchanged) when the table refuses the record (a
/// setting it does not have or that is not tunable, a value it cannot
/// read), or when the record asks the tcgen05 form for a step it does not
/// have.
bool applyBackwardRecord(const TunedSettings &record, AttentionBackwardConfig &base) {
  AttentionBackwardConfig c = base;
  if (!attentionBackwardSettings().apply(record, c)) return false;
  // The tcgen05 kernel computes 128 query rows a step by key rows.
  if (c.form != BackwardForm::registers && (c.blockM != 128 || c.queryRows)) return false;
  base = c;
  return true;
}

bool isBlackwell(const std::string &arch) { return arch.rfind("sm_100a", 0) == 0; }

/// The configuration for `p`: the caller's, else the target's default under
/// the settings of `record` (a tuned configuration, or null).
AttentionBackwardConfig backwardConfig(const Problem &p, const attention::BackwardOptions &o,
                                       const std::string &arch, const TunedSettings *record) {
  AttentionBackwardConfig c;
  if (o.config && o.config->queryOffset != (o.queryOffset > 0))
    throw Error(fmt::format("config.queryOffset is {} but BackwardOptions::queryOffset = {}: the "
                            "option sets the offset (and the configuration follows it)",
                            o.config->queryOffset, o.queryOffset));
  if (o.config) {
    c = *o.config;
  } else {
    c.blockM = 64;
    c.kvReduction = p.headsQ == p.headsKv ? KvReduction::direct : KvReduction::atomic;
    if (isBlackwell(arch)) {
      c.form = BackwardForm::ss;
      c.blockM = 128;
    } else if (arch == "sm_90a") {
      // dQ added by TMA from a shared tile: faster on an H200 (8k, head_dim
      // 128: 436 against 415 TFLOP/s), as `tessel bench attention` runs it.
      c.dqTma = true;
      // Scores by query rows at 128 a step where that is the default
      // under the tuned record's settings.
      if (backwardQueryRowsByDefault(p.headDim, record ? *record : TunedSettings{})) {
        c.blockM = 128;
        c.queryRows = true;
      }
    } else {
      c.blockM = 32; // mma.sync at 64 query rows a block spills
    }
  }
  c.dtype = p.dtype;
  c.headDim = p.headDim;
  c.causal = o.causal;
  c.varlen = p.varlen;
  c.queryOffset = o.queryOffset > 0;
  if (c.kvReduction == KvReduction::direct && p.headsQ != p.headsKv)
    throw Error(fmt::format("kv_reduction=direct writes dK/dV per K/V head and needs heads_q == "
                            "heads_kv (got {} and {}); use atomic or split",
                            p.headsQ, p.headsKv));
  return c;
}

/// Byte offsets of the backward pass's fp32 buffers in its workspace.
struct Workspace {
  size_t delta = 0, dqAccum = 0, dkAccum = 0, dvAccum = 0, bytes = 0;
  Workspace(const Problem &p, const AttentionBackwardConfig &c) {
    auto take = [&](int64_t floats) {
      size_t at = bytes;
      bytes += (size_t(floats) * 4 + 255) / 256 * 256;
      return at;
    };
    delta = take(p.batch * p.headsQ * p.seqQ);
    dqAccum = take(p.batch * p.seqQ * p.headsQ * p.headDim);
    if (c.kvReduction != KvReduction::direct) {
      int64_t heads = AttentionBackwardArgs::accumHeads(c.kvReduction, p.headsQ, p.headsKv);
      dkAccum = take(p.batch * p.seqK * heads * p.headDim);
      dvAccum = take(p.batch * p.seqK * heads * p.headDim);
    }
  }
};

/// The device scales of an FP8 forward (ForwardOptions::qDescale, ...),
/// checked against `sequences` x `headsKv`: each f32, [sequences, heads_kv]
/// with any non-negative strides, or [1].
std::optional<std::array<AttentionForwardArgs::Descale, 3>>
descalesOf(const attention::ForwardOptions &o, bool fp8, int64_t sequences, int64_t headsKv, int device) {
  const std::optional<TensorView> *views[3] = {&o.qDescale, &o.kDescale, &o.vDescale};
  int given = int(o.qDescale.has_value()) + o.kDescale.has_value() + o.vDescale.has_value();
  if (given == 0) return std::nullopt;
  if (given != 3)
    throw Error("give qDescale, kDescale and vDescale together (or none): the kernel reads all "
                "three");
  if (!fp8) throw Error("qDescale, kDescale and vDescale scale FP8 inputs");
  std::array<AttentionForwardArgs::Descale, 3> out;
  const char *names[3] = {"qDescale", "kDescale", "vDescale"};
  for (int i = 0; i < 3; ++i) {
    const TensorView &x = **views[i];
    if (x.dtype != ScalarType::F32)
      throw Error(fmt::format("{} is {}: descales are f32", names[i], x.str()));
    if (x.device != device)
      throw Error(fmt::format("{} is {}: the attention's tensors are on device {}", names[i],
                              x.str(), device));
    if (x.data % 4)
      throw Error(fmt::format("{} is {}: not 4-byte aligned", names[i], x.str()));
    // The kernel reads from the 16-byte boundary at or below the scales.
    uint64_t base = x.data & ~uint64_t{15};
    int64_t offset = int64_t(x.data - base) / 4;
    if (x.shape == std::vector<int64_t>{1}) {
      out[i] = {base, offset, 0, 0, offset + 1};
      continue;
    }
    if (x.shape != std::vector<int64_t>{sequences, headsKv})
      throw Error(fmt::format("{} is {}: descales are [{}, {}] (sequences, heads_kv) or [1]",
                              names[i], x.str(), sequences, headsKv));
    std::vector<int64_t> strides = x.strides.empty() ? x.contiguousStrides() : x.strides;
    if (strides[0] < 0 || strides[1] < 0)
      throw Error(fmt::format("{} is {}: descale strides are not negative", names[i], x.str()));
    int64_t extent = offset + 1 + (sequences - 1) * strides[0] + (headsKv - 1) * strides[1];
    out[i] = {base, offset, strides[0], strides[1], extent};
  }
  return out;
}

LaunchArg f32View(uint64_t base, size_t offset, std::vector<int64_t> shape, int device) {
  return LaunchArg::view(TensorView::contiguous(base + offset, ScalarType::F32, std::move(shape), device));
}
} // namespace

Choice attention::forward(const TensorView &q, const TensorView &k, const TensorView &v,
                          const TensorView &out, const TensorView &lse,
                          const ForwardOptions &o, CUstream stream) {
  Problem p = checkProblem(q, k, v, out, lse, o, /*forward=*/true);
  p.device = commonDevice({&q, &k, &v, &out, &lse});
  if (p.varlen) commonDevice({&q, &*o.cuSeqlensQ, &*o.cuSeqlensK});
  bool fp8 = attentionOutputType(p.dtype) != p.dtype;
  for (double s : {o.qScale, o.kScale, o.vScale})
    if (!(s > 0) || std::isinf(s))
      throw Error(fmt::format("qScale, kScale and vScale are positive finite FP8 scales; got {}, "
                              "{}, {}", o.qScale, o.kScale, o.vScale));
  if (!fp8 && (o.qScale != 1 || o.kScale != 1 || o.vScale != 1))
    throw Error(fmt::format("qScale, kScale and vScale scale FP8 inputs; these are {}",
                            name(p.dtype)));
  auto descales = descalesOf(o, fp8, p.varlen ? o.cuSeqlensQ->shape[0] - 1 : p.batch, p.headsKv,
                             p.device);
  Choice choice;
  choice.arch = targetFor(o.arch, p.device);
  AttentionConfig c = o.config.value_or(AttentionConfig{});
  c.dtype = p.dtype;
  c.headDim = p.headDim;
  c.causal = o.causal;
  c.varlen = p.varlen;
  c.descales = descales.has_value();
  // FP8 on wgmma and mma.sync reads V rearranged once by fp8Values, not
  // V tile by V tile in each block (tcgen05 reads V as it is stored).
  if (!o.config) c.vTransposed = fp8 && !p.varlen && !isBlackwell(choice.arch);
  if (c.streamedShards)
    throw Error("attention::forward runs whole sequences: streamedShards is for the "
                "sequence-parallel kernels");
  if (o.config && c.queryOffset != (o.queryOffset > 0))
    throw Error(fmt::format("config.queryOffset is {} but ForwardOptions::queryOffset = {}: the "
                            "option sets the offset (and the configuration follows it)",
                            c.queryOffset, o.queryOffset));
  c.queryOffset = o.queryOffset > 0;
  AttentionConfig untuned = c;
  if (!o.config)
    chooseForwardSchedule(untuned, choice.arch, p.varlen ? o.maxSeqlenQ : p.seqQ,
                          p.varlen ? o.maxSeqlenK : p.seqK, p.headsQ, p.headsKv,
                          rt::Driver::get().l2CacheBytes(p.device));
  std::string tunedOn;
  // Packed batches are not tuned: their lengths are not in a bucket.
  if (!o.config && o.tuned && !c.varlen) {
    // The bucket `tessel tune flash_attention_fwd` files its record under.
    std::string bucket = tunedBucket({{"dtype", name(c.dtype)},
                                      {"head_dim", std::to_string(c.headDim)},
                                      {"causal", c.causal ? "1" : "0"},
                                      {"varlen", "0"}},
                                     {{"batch", p.batch},
                                      {"heads_q", p.headsQ},
                                      {"seqlen_q", p.seqQ},
                                      {"seqlen_k", p.seqK}});
    auto [record, who] = tunedRecord("flash_attention_fwd", p.device, choice.arch, bucket);
    if (record && attentionSettings().apply(*record, c)) tunedOn = who;
  }
  // A record applies over the kernel's defaults, which is what the tuner
  // timed it against; without one the rule's tile stands.
  if (tunedOn.empty()) c = untuned;
  auto compileWith = [&](const AttentionConfig &config) {
    // sm_100a: S and O accumulate in tensor memory, P through shared memory.
    // (A query offset: the register kernels have it, the tcgen05 ones not.)
    bool tcgen05 = isBlackwell(choice.arch) && !config.overlap && !config.persistent &&
                   !config.tmaStore && !config.queryOffset;
    choice.config = fmt::format("flash_attention_fwd variant={} {}{}", tcgen05 ? "ss" : "registers",
                                attentionSettings().describe(config),
                                config.queryOffset ? " query_offset" : "");
    return cachedKernel(choice.config, choice.arch, [&] {
      return tcgen05 ? flashAttentionForwardTcgen05(config, /*pInTmem=*/false)
                     : flashAttentionForward(config);
    }, choice.compiled);
  };
  std::shared_ptr<Kernel> kernel =
      compileTunedOr(c, untuned, tunedOn, "flash_attention_fwd", compileWith);
  if (!tunedOn.empty()) choice.config += " (tuned on " + tunedOn + ")";

  AttentionForwardArgs args;
  args.batch = p.batch, args.seqQ = p.seqQ, args.seqK = p.seqK;
  args.headsQ = p.headsQ, args.headsKv = p.headsKv, args.scale = p.scale;
  args.q = LaunchArg::view(q), args.k = LaunchArg::view(k), args.v = LaunchArg::view(v);
  args.o = LaunchArg::view(out), args.lse = LaunchArg::view(lse);
  if (c.queryOffset) args.queryOffset = o.queryOffset;
  if (p.varlen)
    args.packed = {o.cuSeqlensQ->shape[0], o.maxSeqlenQ, LaunchArg::view(*o.cuSeqlensQ),
                   LaunchArg::view(*o.cuSeqlensK)};
  if (fp8) {
    args.scale = p.scale * o.qScale * o.kScale;
    args.vScale = o.vScale;
    args.descales = descales;
  }
  if (!c.vTransposed) {
    kernel->launch(args.list(), stream);
    return choice;
  }
  // V rearranged into the workspace, then the forward on it.
  std::vector<int64_t> vtShape = {p.batch, p.headsKv, p.headDim, (p.seqK + 15) / 16 * 16};
  size_t vtBytes = size_t(p.batch * p.headsKv * p.headDim) * size_t(vtShape[3]);
  rt::ScopedDevice onDevice(p.device);
  rt::Driver::get().makeCurrent();
  StreamScratch scratch(o.workspace, o.workspaceBytes, vtBytes, stream,
                        "this FP8 forward pass (forwardWorkspaceBytes)");
  TensorView vt = TensorView::contiguous(scratch.base(), v.dtype, vtShape, p.device);
  // The rearrangement moves 4-byte words of both.
  if (v.data % 4)
    throw Error(fmt::format("v at 0x{:x} is not 4-byte aligned; FP8 attention reads it in words",
                            v.data));
  TensorView vWords = TensorView::contiguous(v.data, ScalarType::I32,
                                             {p.batch, p.seqK, p.headsKv, p.headDim / 4}, p.device);
  TensorView vtWords = TensorView::contiguous(
      scratch.base(), ScalarType::I32, {p.batch, p.headsKv, p.headDim, vtShape[3] / 4}, p.device);
  bool compiledNow = false;
  std::shared_ptr<Kernel> rearrange =
      cachedKernel(fmt::format("attention_fp8_values {} head_dim={}", name(p.dtype), p.headDim),
                   choice.arch, [&] { return fp8Values(p.dtype, p.headDim); }, compiledNow);
  choice.compiled = choice.compiled || compiledNow;
  rearrange->launch({LaunchArg::integer(p.batch), LaunchArg::integer(p.seqK),
                     LaunchArg::integer(p.headsKv), LaunchArg::view(vWords),
                     LaunchArg::view(vtWords)},
                    stream);
  args.v = LaunchArg::view(vt);
  kernel->launch(args.list(), stream);
  return choice;
}

size_t attention::forwardWorkspaceBytes(const TensorView &q, const TensorView &k,
                                        const ForwardOptions &o) {
  DType dtype = dtypeOf(q.dtype);
  if (attentionOutputType(dtype) == dtype || o.cuSeqlensQ || q.shape.size() != 4 ||
      k.shape.size() != 4)
    return 0;
  int64_t keys = (k.shape[1] + 15) / 16 * 16;
  return size_t(k.shape[0] * k.shape[2] * k.shape[3]) * size_t(keys);
}

size_t attention::backwardWorkspaceBytes(const TensorView &q, const TensorView &k,
                                         const BackwardOptions &o) {
  Problem p{q.shape.at(0), q.shape.at(1), k.shape.at(1), q.shape.at(2), k.shape.at(2),
            q.shape.at(3), dtypeOf(q.dtype), o.cuSeqlensQ.has_value(), 0, q.device};
  // The workspace depends on the K/V reduction, not on the target or a
  // tuned record.
  return Workspace(p, backwardConfig(p, o, o.arch, nullptr)).bytes;
}

Choice attention::backward(const TensorView &q, const TensorView &k, const TensorView &v,
                           const TensorView &out, const TensorView &lse, const TensorView &dout,
                           const TensorView &dq, const TensorView &dk, const TensorView &dv,
                           const BackwardOptions &o, CUstream stream) {
  Problem p = checkProblem(q, k, v, out, lse, o);
  requireView(dout, "dout", 4, {q.dtype});
  requireShape(dout, "dout", q.shape);
  requireView(dq, "dq", 4, {q.dtype});
  requireShape(dq, "dq", q.shape);
  requireView(dk, "dk", 4, {q.dtype});
  requireShape(dk, "dk", k.shape);
  requireView(dv, "dv", 4, {q.dtype});
  requireShape(dv, "dv", k.shape);
  p.device = commonDevice({&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv});
  if (p.varlen) commonDevice({&q, &*o.cuSeqlensQ, &*o.cuSeqlensK});

  Choice choice;
  choice.arch = targetFor(o.arch, p.device);
  AttentionBackwardConfig c = backwardConfig(p, o, choice.arch, nullptr);
  int64_t l2Bytes = rt::Driver::get().l2CacheBytes(p.device);
  int64_t longestQueries = p.varlen ? o.maxSeqlenQ : p.seqQ;
  if (!o.config) chooseBackwardGridOrder(c, longestQueries, p.headsQ, l2Bytes);
  const AttentionBackwardConfig untuned = c;
  std::string tunedOn;
  // Packed batches are not tuned: their lengths are not in a bucket.
  if (!o.config && o.tuned && !c.varlen) {
    // The bucket `tessel tune flash_attention_bwd` files its record under.
    std::string bucket = tunedBucket({{"dtype", name(c.dtype)},
                                      {"head_dim", std::to_string(c.headDim)},
                                      {"causal", c.causal ? "1" : "0"},
                                      {"varlen", "0"},
                                      {"kv_reduction",
                                       attentionBackwardSettings().write(c).at("kv_reduction")}},
                                     {{"batch", p.batch},
                                      {"heads_q", p.headsQ},
                                      {"seqlen_q", p.seqQ},
                                      {"seqlen_k", p.seqK}});
    auto [record, who] = tunedRecord("flash_attention_bwd", p.device, choice.arch, bucket);
    if (record) {
      AttentionBackwardConfig tuned = backwardConfig(p, o, choice.arch, &*record);
      chooseBackwardGridOrder(tuned, longestQueries, p.headsQ, l2Bytes);
      if (applyBackwardRecord(*record, tuned)) {
        c = tuned;
        tunedOn = who;
      }
    }
  }
  struct Kernels {
    std::shared_ptr<Kernel> pre, main, post;
  };
  auto compileWith = [&](const AttentionBackwardConfig &config) {
    // The query offset changes the main kernel only.
    std::string key = attentionBackwardSettings().describe(config);
    std::string mainKey = key + (config.queryOffset ? " query_offset" : "");
    choice.config = "flash_attention_bwd " + mainKey;
    bool compiledPre = false, compiledMain = false, compiledPost = false;
    Kernels k{cachedKernel("bwd_pre " + key, choice.arch,
                           [&] { return flashAttentionBackwardPre(config); }, compiledPre),
              cachedKernel("bwd_main " + mainKey, choice.arch,
                           [&] { return flashAttentionBackward(config); }, compiledMain),
              cachedKernel("bwd_post " + key, choice.arch,
                           [&] { return flashAttentionBackwardPost(config); }, compiledPost)};
    choice.compiled = compiledPre || compiledMain || compiledPost;
    return std::pair{k, config};
  };
  auto [built, chosen] = compileTunedOr(c, untuned, tunedOn, "flash_attention_bwd", compileWith);
  c = chosen;
  std::shared_ptr<Kernel> pre = built.pre, main = built.main, post = built.post;
  if (!tunedOn.empty()) choice.config += " (tuned on " + tunedOn + ")";

  Workspace w(p, c);
  rt::ScopedDevice onDevice(p.device);
  rt::Driver::get().makeCurrent();
  StreamScratch scratch(o.workspace, o.workspaceBytes, w.bytes, stream,
                        "this backward pass (backwardWorkspaceBytes)");
  CUdeviceptr base = scratch.base();

  int dev = p.device;
  AttentionBackwardArgs args;
  args.batch = p.batch, args.seqQ = p.seqQ, args.seqK = p.seqK;
  args.headsQ = p.headsQ, args.headsKv = p.headsKv, args.scale = p.scale;
  args.kvReduction = c.kvReduction;
  for (auto [arg, view] : {std::pair{&args.q, &q}, {&args.k, &k}, {&args.v, &v}, {&args.o, &out},
                           {&args.dout, &dout}, {&args.lse, &lse}, {&args.dq, &dq},
                           {&args.dk, &dk}, {&args.dv, &dv}})
    *arg = LaunchArg::view(*view);
  args.delta = f32View(base, w.delta, {p.batch, p.headsQ, p.seqQ}, dev);
  args.dqAccum = f32View(base, w.dqAccum, q.shape, dev);
  bool direct = c.kvReduction == KvReduction::direct;
  std::vector<int64_t> accumShape = {p.batch, p.seqK, args.accumHeads(), p.headDim};
  args.dkAccum = direct ? LaunchArg::view(dk) : f32View(base, w.dkAccum, accumShape, dev);
  args.dvAccum = direct ? LaunchArg::view(dv) : f32View(base, w.dvAccum, accumShape, dev);
  if (c.queryOffset) args.queryOffset = o.queryOffset;
  if (p.varlen)
    args.packed = {o.cuSeqlensQ->shape[0], o.maxSeqlenK, LaunchArg::view(*o.cuSeqlensQ),
                   LaunchArg::view(*o.cuSeqlensK)};
  args.launch(*pre, *main, *post, stream);
  return choice;
}
