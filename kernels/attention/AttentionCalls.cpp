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

/// The extents every attention call reads off its views.
struct Problem {
  int64_t batch, seqQ, seqK, headsQ, headsKv, headDim;
  DType dtype;
  bool varlen;
  double scale;
  int device;
};

/// Checks q, k, v, out (and lse) against each other and the options.
Problem checkProblem(const TensorView &q, const TensorView &k, const TensorView &v,
                     const TensorView &out, const TensorView &lse, const attention::Options &o) {
  if (o.cuSeqlensQ.has_value() != o.cuSeqlensK.has_value())
    throw Error("packed sequences need both cuSeqlensQ and cuSeqlensK");
  requireView(q, "q", 4, kHalfTypes);
  requireView(k, "k", 4, {q.dtype});
  requireView(v, "v", 4, {q.dtype});
  requireView(out, "out", 4, {q.dtype});
  Problem p{q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3],
            dtypeOf(q.dtype), o.cuSeqlensQ.has_value(), o.scale, 0};
  AttentionArgs args;
  args.q = {p.dtype, q.shape};
  args.k = {p.dtype, k.shape};
  args.v = {p.dtype, v.shape};
  args.o = {p.dtype, out.shape};
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
  if (!(o.scale >= 0) || std::isinf(o.scale))
    throw Error(fmt::format("scale = {}: use a positive softmax scale, or 0 for 1/sqrt(head_dim)", o.scale));
  if (p.scale == 0) p.scale = 1.0 / std::sqrt(double(p.headDim));
  return p;
}

const char *reductionName(KvReduction r) {
  const char *names[] = {"direct", "atomic", "split"};
  return names[int(r)];
}

/// Every setting that changes the kernel: the text is also its key in the
/// process's kernel cache.
std::string describe(const AttentionConfig &c, const char *variant) {
  return fmt::format("variant={} dtype={} head_dim={} block_m={} block_n={} threads={} stages={} "
                     "causal={} varlen={} warp_specialize={} grid_order={} pingpong={} "
                     "overlap={} persistent={} tma_store={}",
                     variant, name(c.dtype), c.headDim, c.blockM,
                     c.blockN ? std::to_string(c.blockN) : std::string("auto"), c.threads, c.stages,
                     int(c.causal), int(c.varlen), int(c.warpSpecialize), int(c.gridOrder),
                     int(c.pingpong), int(c.overlap), int(c.persistent), int(c.tmaStore));
}

/// As above, for the backward pass's three kernels.
std::string describe(const AttentionBackwardConfig &c) {
  const char *forms[] = {"registers", "ss", "ts"};
  return fmt::format("variant={} dtype={} head_dim={} block_m={} block_n={} pre_block={} "
                     "threads={} stages={} causal={} varlen={} kv_reduction={} element_atomics={} "
                     "dq_order={} dq_atomics={} dkv_operands={} scores={} warp_specialize={} grid_order={}",
                     forms[int(c.form)], name(c.dtype), c.headDim, c.blockM, c.blockN, c.preBlock,
                     c.threads, c.stages, int(c.causal), int(c.varlen),
                     reductionName(c.kvReduction), int(c.elementAtomics), int(c.dqOrder),
                     c.dqTma ? "tma" : "registers", c.dkvOperandsShared ? "shared" : "registers",
                     c.queryRows ? "queries" : "keys",
                     int(c.warpSpecialize), int(c.gridOrder));
}

/// `base` with the settings of a `tessel tune flash_attention_fwd` record;
/// false (and `base` unchanged) when the record names a setting or value
/// it does not know.
bool applyRecord(const TunedSettings &record, AttentionConfig &base) {
  AttentionConfig c = base;
  for (auto &[key, value] : record) {
    bool flag = value == "0" || value == "1";
    if (key == "stages" && (value == "2" || value == "3" || value == "4")) c.stages = value[0] - '0';
    else if (key == "persistent" && flag) c.persistent = value == "1";
    else if (key == "overlap" && flag) c.overlap = value == "1";
    else if (key == "pingpong" && flag) c.pingpong = value == "1";
    else if (key == "tma_store" && flag) c.tmaStore = value == "1";
    else return false;
  }
  base = c;
  return true;
}

/// `base` with the settings of a `tessel tune flash_attention_bwd` record;
/// false (and `base` unchanged) when the record names a setting or value
/// it does not know, or one the target's kernel does not have.
bool applyBackwardRecord(const TunedSettings &record, AttentionBackwardConfig &base) {
  AttentionBackwardConfig c = base;
  for (auto &[key, value] : record) {
    if (key == "stages" && (value == "2" || value == "3")) c.stages = value[0] - '0';
    else if (key == "dq_atomics" && (value == "registers" || value == "tma")) c.dqTma = value == "tma";
    else if (key == "block_m" && (value == "64" || value == "128")) c.blockM = std::stoi(value);
    else if (key == "scores" && (value == "keys" || value == "queries")) c.queryRows = value == "queries";
    else return false;
  }
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
      int64_t heads = c.kvReduction == KvReduction::split ? p.headsQ : p.headsKv;
      dkAccum = take(p.batch * p.seqK * heads * p.headDim);
      dvAccum = take(p.batch * p.seqK * heads * p.headDim);
    }
  }
};

std::vector<LaunchArg> integers(std::initializer_list<int64_t> values) {
  std::vector<LaunchArg> out;
  for (int64_t v : values) out.push_back(LaunchArg::integer(v));
  return out;
}

LaunchArg f32View(uint64_t base, size_t offset, std::vector<int64_t> shape, int device) {
  return LaunchArg::view(TensorView::contiguous(base + offset, ScalarType::F32, std::move(shape), device));
}
} // namespace

Choice attention::forward(const TensorView &q, const TensorView &k, const TensorView &v,
                          const TensorView &out, const TensorView &lse,
                          const ForwardOptions &o, CUstream stream) {
  Problem p = checkProblem(q, k, v, out, lse, o);
  std::vector<const TensorView *> all = {&q, &k, &v, &out, &lse};
  p.device = commonDevice({&q, &k, &v, &out, &lse});
  if (p.varlen) commonDevice({&q, &*o.cuSeqlensQ, &*o.cuSeqlensK});
  Choice choice;
  choice.arch = targetFor(o.arch, p.device);
  AttentionConfig c = o.config.value_or(AttentionConfig{});
  c.dtype = p.dtype;
  c.headDim = p.headDim;
  c.causal = o.causal;
  c.varlen = p.varlen;
  if (c.streamedShards || c.queryOffset)
    throw Error("attention::forward runs whole sequences: streamedShards and queryOffset are for "
                "the sequence-parallel kernels");
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
    if (record && applyRecord(*record, c)) tunedOn = who;
  }
  // sm_100a: S and O accumulate in tensor memory, P through shared memory.
  bool tcgen05 = isBlackwell(choice.arch) && !c.overlap && !c.persistent && !c.tmaStore;
  choice.config = "flash_attention_fwd " + describe(c, tcgen05 ? "ss" : "registers");
  std::shared_ptr<Kernel> kernel = cachedKernel(choice.config, choice.arch, [&] {
    return tcgen05 ? flashAttentionForwardTcgen05(c, /*pInTmem=*/false) : flashAttentionForward(c);
  }, choice.compiled);
  if (!tunedOn.empty()) choice.config += " (tuned on " + tunedOn + ")";

  std::vector<LaunchArg> args = integers({p.batch, p.seqQ, p.seqK, p.headsQ, p.headsKv});
  args.push_back(LaunchArg::real(p.scale));
  for (const TensorView *t : all) args.push_back(LaunchArg::view(*t));
  if (p.varlen) {
    int64_t entries = o.cuSeqlensQ->shape[0];
    args.push_back(LaunchArg::integer(entries));
    args.push_back(LaunchArg::integer(o.maxSeqlenQ));
    args.push_back(LaunchArg::view(*o.cuSeqlensQ));
    args.push_back(LaunchArg::view(*o.cuSeqlensK));
  }
  kernel->launch(args, stream);
  return choice;
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
  std::string tunedOn;
  // Packed batches are not tuned: their lengths are not in a bucket.
  if (!o.config && o.tuned && !c.varlen) {
    // The bucket `tessel tune flash_attention_bwd` files its record under.
    std::string bucket = tunedBucket({{"dtype", name(c.dtype)},
                                      {"head_dim", std::to_string(c.headDim)},
                                      {"causal", c.causal ? "1" : "0"},
                                      {"varlen", "0"},
                                      {"kv_reduction", reductionName(c.kvReduction)}},
                                     {{"batch", p.batch},
                                      {"heads_q", p.headsQ},
                                      {"seqlen_q", p.seqQ},
                                      {"seqlen_k", p.seqK}});
    auto [record, who] = tunedRecord("flash_attention_bwd", p.device, choice.arch, bucket);
    if (record) {
      AttentionBackwardConfig tuned = backwardConfig(p, o, choice.arch, &*record);
      if (applyBackwardRecord(*record, tuned)) {
        c = tuned;
        tunedOn = who;
      }
    }
  }
  std::string config = describe(c);
  choice.config = "flash_attention_bwd " + config;
  bool compiledPre = false, compiledMain = false, compiledPost = false;
  std::shared_ptr<Kernel> pre = cachedKernel("bwd_pre " + config, choice.arch,
                                             [&] { return flashAttentionBackwardPre(c); }, compiledPre);
  std::shared_ptr<Kernel> main = cachedKernel("bwd_main " + config, choice.arch,
                                              [&] { return flashAttentionBackward(c); }, compiledMain);
  std::shared_ptr<Kernel> post = cachedKernel("bwd_post " + config, choice.arch,
                                              [&] { return flashAttentionBackwardPost(c); }, compiledPost);
  choice.compiled = compiledPre || compiledMain || compiledPost;
  if (!tunedOn.empty()) choice.config += " (tuned on " + tunedOn + ")";

  Workspace w(p, c);
  if (o.workspace && o.workspaceBytes < w.bytes)
    throw Error(fmt::format("the workspace has {} bytes; this backward pass needs {} "
                            "(backwardWorkspaceBytes)",
                            o.workspaceBytes, w.bytes));
  rt::ScopedDevice onDevice(p.device);
  rt::Driver &d = rt::Driver::get();
  d.makeCurrent();
  CUdeviceptr base = o.workspace;
  if (!base) TESSEL_CU(d, cuMemAllocAsync, &base, w.bytes, stream);
  // Frees the workspace after the launches on the stream, also when one
  // of them throws.
  struct FreeAfter {
    rt::Driver &d;
    CUdeviceptr base;
    CUstream stream;
    ~FreeAfter() {
      if (base) d.api().cuMemFreeAsync(base, stream);
    }
  } freeAfter{d, o.workspace ? 0 : base, stream};

  int dev = p.device;
  int64_t kvHeads = c.kvReduction == KvReduction::split ? p.headsQ : p.headsKv;
  LaunchArg delta = f32View(base, w.delta, {p.batch, p.headsQ, p.seqQ}, dev);
  LaunchArg dqAccum = f32View(base, w.dqAccum, q.shape, dev);
  bool direct = c.kvReduction == KvReduction::direct;
  LaunchArg dkOut = direct ? LaunchArg::view(dk) : f32View(base, w.dkAccum, {p.batch, p.seqK, kvHeads, p.headDim}, dev);
  LaunchArg dvOut = direct ? LaunchArg::view(dv) : f32View(base, w.dvAccum, {p.batch, p.seqK, kvHeads, p.headDim}, dev);

  std::vector<LaunchArg> preArgs = integers({p.batch, p.seqQ, p.headsQ});
  preArgs.insert(preArgs.end(), {LaunchArg::view(out), LaunchArg::view(dout), delta});
  pre->launch(preArgs, stream);
  // The fp32 accumulators start at zero (split slices are written whole).
  TESSEL_CU(d, cuMemsetD8Async, base + w.dqAccum, 0, size_t(q.numel()) * 4, stream);
  if (c.kvReduction == KvReduction::atomic)
    TESSEL_CU(d, cuMemsetD8Async, base + w.dkAccum, 0, w.bytes - w.dkAccum, stream);

  std::vector<LaunchArg> mainArgs = integers({p.batch, p.seqQ, p.seqK, p.headsQ, p.headsKv});
  mainArgs.push_back(LaunchArg::real(p.scale));
  mainArgs.insert(mainArgs.end(), {LaunchArg::view(q), LaunchArg::view(k), LaunchArg::view(v),
                                   LaunchArg::view(dout), LaunchArg::view(lse), delta, dqAccum,
                                   dkOut, dvOut});
  if (p.varlen) {
    mainArgs.push_back(LaunchArg::integer(o.cuSeqlensQ->shape[0]));
    mainArgs.push_back(LaunchArg::integer(o.maxSeqlenK));
    mainArgs.push_back(LaunchArg::view(*o.cuSeqlensQ));
    mainArgs.push_back(LaunchArg::view(*o.cuSeqlensK));
  }
  main->launch(mainArgs, stream);

  std::vector<LaunchArg> postDq = integers({p.batch, p.seqQ, p.headsQ, p.headsQ});
  postDq.insert(postDq.end(), {dqAccum, LaunchArg::view(dq)});
  post->launch(postDq, stream);
  if (!direct) {
    for (auto [accum, grad] : {std::pair{dkOut, &dk}, std::pair{dvOut, &dv}}) {
      std::vector<LaunchArg> args = integers({p.batch, p.seqK, kvHeads, p.headsKv});
      args.insert(args.end(), {accum, LaunchArg::view(*grad)});
      post->launch(args, stream);
    }
  }
  return choice;
}
