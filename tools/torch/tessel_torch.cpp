//===- tessel_torch.cpp - Tessel's attention as PyTorch operators ---------===//
//
// torch.ops.tessel.attention_fwd / attention_bwd, the decode operators
// paged_decode / mla_decode, and sequence-parallel attention
// sp_attention_fwd / sp_attention_bwd and the tensor-parallel layers
// tp_allgather_gemm / tp_gemm_reducescatter (over a Tessel communicator of
// the processes torchrun started, beside torch.distributed) over an installed
// libtessel.so. Tensors cross
// as DLPack views (no copies), on PyTorch's current CUDA stream; the
// workspaces (the backward pass's accumulators, the decode splits' partial
// outputs) come from PyTorch's caching allocator, so that a call neither
// allocates behind PyTorch's back nor synchronizes. Built by
// tessel_torch.py with torch.utils.cpp_extension.
//
//===----------------------------------------------------------------------===//
#include <ATen/DLConvertor.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <tessel/Tessel.h>

#include "tessel_torch_views.h"

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace {
using torch_views::currentStream;
using torch_views::translated;
using torch_views::viewOf;

/// What the operators last ran, in this process (autograd runs backward
/// operators on threads of its own, so a thread's own record would miss
/// them).
std::mutex choicesMutex;
std::string lastForward, lastBackward, lastPaged, lastMla, lastSpForward, lastSpBackward,
    lastAllgatherGemm, lastGemmReducescatter;

/// `slot` = text, under the lock.
void record(std::string &slot, std::string text) {
  std::lock_guard<std::mutex> lock(choicesMutex);
  slot = std::move(text);
}

std::string text(const tessel::Choice &c) {
  return c.arch + " " + c.config + (c.compiled ? " (compiled by this call)" : "");
}

std::tuple<at::Tensor, at::Tensor> attentionForward(const at::Tensor &q, const at::Tensor &k,
                                                    const at::Tensor &v, bool causal,
                                                    double scale) {
  at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  at::Tensor out = at::empty_like(qc);
  at::Tensor lse = at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat));
  tessel::attention::ForwardOptions options;
  options.causal = causal;
  options.scale = scale;
  record(lastForward, translated([&] {
    return text(tessel::attention::forward(viewOf(qc, "q"), viewOf(kc, "k"), viewOf(vc, "v"),
                                      viewOf(out, "out"), viewOf(lse, "lse"), options,
                                      currentStream(q)));
  }));
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor>
attentionBackward(const at::Tensor &dout, const at::Tensor &q, const at::Tensor &k,
                  const at::Tensor &v, const at::Tensor &out, const at::Tensor &lse, bool causal,
                  double scale) {
  at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  at::Tensor oc = out.contiguous(), doc = dout.contiguous(), lc = lse.contiguous();
  at::Tensor dq = at::empty_like(qc), dk = at::empty_like(kc), dv = at::empty_like(vc);
  tessel::attention::BackwardOptions options;
  options.causal = causal;
  options.scale = scale;
  tessel::TensorView qv = viewOf(qc, "q"), kv = viewOf(kc, "k");
  size_t bytes = translated([&] { return tessel::attention::backwardWorkspaceBytes(qv, kv, options); });
  at::Tensor workspace = at::empty({int64_t(bytes)}, q.options().dtype(at::kByte));
  options.workspace = reinterpret_cast<uint64_t>(workspace.data_ptr());
  options.workspaceBytes = bytes;
  record(lastBackward, translated([&] {
    return text(tessel::attention::backward(qv, kv, viewOf(vc, "v"), viewOf(oc, "out"),
                                       viewOf(lc, "lse"), viewOf(doc, "dout"), viewOf(dq, "dq"),
                                       viewOf(dk, "dk"), viewOf(dv, "dv"), options,
                                       currentStream(q)));
  }));
  return {dq, dk, dv};
}

/// A byte buffer of `bytes` from PyTorch's allocator, set as `options`'
/// workspace; the caller holds it until the call is queued (the allocator
/// reuses freed memory in the stream's order). 0 bytes (an unsplit call)
/// leaves `options` without one.
template <class DecodeOptions>
at::Tensor decodeWorkspace(size_t bytes, const at::Tensor &like, DecodeOptions &options) {
  at::Tensor workspace = at::empty({int64_t(bytes)}, like.options().dtype(at::kByte));
  if (bytes) {
    options.workspace = reinterpret_cast<uint64_t>(workspace.data_ptr());
    options.workspaceBytes = bytes;
  }
  return workspace;
}

at::Tensor pagedDecode(const at::Tensor &q, const at::Tensor &kCache, const at::Tensor &vCache,
                       const at::Tensor &blockTable, const at::Tensor &lengths, double scale,
                       double kScale, double vScale) {
  at::Tensor qc = q.contiguous(), kc = kCache.contiguous(), vc = vCache.contiguous();
  at::Tensor tc = blockTable.contiguous(), lc = lengths.contiguous();
  at::Tensor out = at::empty_like(qc);
  tessel::decode::PagedOptions options;
  options.scale = scale;
  // An e4m3 cache's scales (key = k_scale * code); a cache in q's dtype
  // ignores them.
  options.kScale = kScale;
  options.vScale = vScale;
  tessel::TensorView qv = viewOf(qc, "q"), kv = viewOf(kc, "k_cache"),
                     tv = viewOf(tc, "block_table");
  size_t bytes =
      translated([&] { return tessel::decode::pagedWorkspaceBytes(qv, kv, tv, options); });
  at::Tensor workspace = decodeWorkspace(bytes, q, options);
  record(lastPaged, translated([&] {
    return text(tessel::decode::paged(qv, kv, viewOf(vc, "v_cache"), tv, viewOf(lc, "lengths"),
                                      viewOf(out, "out"), options, currentStream(q)));
  }));
  return out;
}

at::Tensor mlaDecode(const at::Tensor &q, const at::Tensor &cache, const at::Tensor &blockTable,
                     const at::Tensor &lengths, double scale) {
  at::Tensor qc = q.contiguous(), cc = cache.contiguous();
  at::Tensor tc = blockTable.contiguous(), lc = lengths.contiguous();
  tessel::decode::MlaOptions options;
  options.scale = scale;
  if (qc.dim() != 3 || qc.size(2) <= options.latent)
    throw std::invalid_argument("q must be [batch, heads, " + std::to_string(options.latent) +
                                " + rope], got " + std::to_string(qc.dim()) + " dimensions" +
                                (qc.dim() == 3 ? " of which the last is " + std::to_string(qc.size(2))
                                               : std::string()));
  at::Tensor out = at::empty({qc.size(0), qc.size(1), options.latent}, qc.options());
  tessel::TensorView qv = viewOf(qc, "q"), cv = viewOf(cc, "cache"),
                     tv = viewOf(tc, "block_table");
  size_t bytes = translated([&] { return tessel::decode::mlaWorkspaceBytes(qv, cv, tv, options); });
  at::Tensor workspace = decodeWorkspace(bytes, q, options);
  record(lastMla, translated([&] {
    return text(tessel::decode::mla(qv, cv, tv, viewOf(lc, "lengths"), viewOf(out, "out"), options,
                                    currentStream(q)));
  }));
  return out;
}

/// This process's place among the ranks torchrun started: the library's
/// process communicator, made by the first sequence-parallel call (or
/// sp_init) from torchrun's variables.
tessel::rt::Communicator &spCommunicator() {
  return *translated([] { return &tessel::sp_attention::processCommunicator(); });
}

std::tuple<int64_t, int64_t, int64_t> spInit() {
  tessel::sp_attention::RankPlace p = tessel::sp_attention::placeOf(spCommunicator());
  return {p.rank, p.size, p.device};
}

/// Frees the calls' exchanges and the communicator (collective).
void spRelease() {
  translated([] {
    tessel::sp_attention::releaseProcessCommunicator();
    return 0;
  });
}

tessel::sp_attention::Options spOptions(bool causal, double scale, bool zigzag) {
  tessel::sp_attention::Options options;
  options.causal = causal;
  options.scale = scale;
  if (zigzag) options.placement = tessel::sp_attention::Placement::zigzag;
  return options;
}

/// Each rank's shards [batch, seqlen / N, heads, head_dim] (zig-zag: chunks
/// r and 2N-1-r of 2N): O and the LSE [batch, heads_q, seqlen / N] of its
/// rows.
std::tuple<at::Tensor, at::Tensor> spAttentionForward(const at::Tensor &q, const at::Tensor &k,
                                                      const at::Tensor &v, bool causal,
                                                      double scale, bool zigzag) {
  at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  at::Tensor out = at::empty_like(qc);
  at::Tensor lse = at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat));
  tessel::rt::Communicator &c = spCommunicator();
  record(lastSpForward, translated([&] {
    return text(tessel::sp_attention::forward(c, viewOf(qc, "q"), viewOf(kc, "k"),
                                              viewOf(vc, "v"), viewOf(out, "out"),
                                              viewOf(lse, "lse"),
                                              spOptions(causal, scale, zigzag), currentStream(q)));
  }));
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor>
spAttentionBackward(const at::Tensor &dout, const at::Tensor &q, const at::Tensor &k,
                    const at::Tensor &v, const at::Tensor &out, const at::Tensor &lse, bool causal,
                    double scale, bool zigzag) {
  at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  at::Tensor oc = out.contiguous(), doc = dout.contiguous(), lc = lse.contiguous();
  at::Tensor dq = at::empty_like(qc), dk = at::empty_like(kc), dv = at::empty_like(vc);
  tessel::rt::Communicator &c = spCommunicator();
  record(lastSpBackward, translated([&] {
    return text(tessel::sp_attention::backward(
        c, viewOf(qc, "q"), viewOf(kc, "k"), viewOf(vc, "v"), viewOf(oc, "out"), viewOf(lc, "lse"),
        viewOf(doc, "dout"), viewOf(dq, "dq"), viewOf(dk, "dk"), viewOf(dv, "dv"),
        spOptions(causal, scale, zigzag), currentStream(q)));
  }));
  return {dq, dk, dv};
}

/// The tensor-parallel layers over the process communicator (tessel_torch.py
/// makes them differentiable, each backward the other layer):
/// allgather_gemm gathers every rank's rows a [m, K] and multiplies them by
/// the rank's b ([K, n], or [n, K] with transpose_b, as nn.Linear keeps its
/// weight), c [N * m, n]; gemm_reducescatter multiplies a [M, K] by b and
/// returns the rank's M / N rows of the sum over ranks.
at::Tensor tpLayer(const at::Tensor &a, const at::Tensor &b, bool transposeB, bool allGather) {
  at::Tensor ac = a.contiguous(), bc = b.contiguous();
  tessel::rt::Communicator &c = spCommunicator();
  int64_t ranks = tessel::sp_attention::placeOf(c).size;
  int64_t n = transposeB ? b.size(0) : b.size(1);
  // Rows that do not split over the ranks are the library's error, on every
  // rank (a rank that failed here alone would leave the others waiting).
  at::Tensor out = at::empty({allGather ? a.size(0) * ranks : a.size(0) / ranks, n}, a.options());
  tessel::tp::Options options;
  options.transposeB = transposeB;
  record(allGather ? lastAllgatherGemm : lastGemmReducescatter, translated([&] {
    auto call = allGather ? &tessel::tp::allgather_gemm : &tessel::tp::gemm_reducescatter;
    return text(call(c, viewOf(ac, "a"), viewOf(bc, "b"), viewOf(out, "out"), options,
                     currentStream(a)));
  }));
  return out;
}
at::Tensor tpAllgatherGemm(const at::Tensor &a, const at::Tensor &b, bool transposeB) {
  return tpLayer(a, b, transposeB, true);
}
at::Tensor tpGemmReducescatter(const at::Tensor &a, const at::Tensor &b, bool transposeB) {
  return tpLayer(a, b, transposeB, false);
}

/// What the calls of this process last ran: "arch config", for a user who
/// wants to see the library's choice. In order: attention_fwd,
/// attention_bwd, paged_decode, mla_decode, sp_attention_fwd,
/// sp_attention_bwd, tp_allgather_gemm, tp_gemm_reducescatter ("" for one
/// not called yet).
std::vector<std::string> lastChoices() {
  std::lock_guard<std::mutex> lock(choicesMutex);
  return {lastForward,   lastBackward,      lastPaged,        lastMla,
          lastSpForward, lastSpBackward,    lastAllgatherGemm, lastGemmReducescatter};
}
} // namespace

TORCH_LIBRARY(tessel, m) {
  m.def("attention_fwd(Tensor q, Tensor k, Tensor v, bool causal, float scale) -> (Tensor, Tensor)");
  m.def("attention_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
        "bool causal, float scale) -> (Tensor, Tensor, Tensor)");
  m.def("paged_decode(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_table, "
        "Tensor lengths, float scale, float k_scale=1.0, float v_scale=1.0) -> Tensor");
  m.def("mla_decode(Tensor q, Tensor cache, Tensor block_table, Tensor lengths, float scale) "
        "-> Tensor");
  m.def("sp_attention_fwd(Tensor q, Tensor k, Tensor v, bool causal, float scale, "
        "bool zigzag=False) -> (Tensor, Tensor)");
  m.def("sp_attention_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
        "bool causal, float scale, bool zigzag=False) -> (Tensor, Tensor, Tensor)");
  m.def("tp_allgather_gemm(Tensor a, Tensor b, bool transpose_b) -> Tensor");
  m.def("tp_gemm_reducescatter(Tensor a, Tensor b, bool transpose_b) -> Tensor");
}

TORCH_LIBRARY_IMPL(tessel, CUDA, m) {
  m.impl("attention_fwd", &attentionForward);
  m.impl("attention_bwd", &attentionBackward);
  m.impl("paged_decode", &pagedDecode);
  m.impl("mla_decode", &mlaDecode);
  m.impl("sp_attention_fwd", &spAttentionForward);
  m.impl("sp_attention_bwd", &spAttentionBackward);
  m.impl("tp_allgather_gemm", &tpAllgatherGemm);
  m.impl("tp_gemm_reducescatter", &tpGemmReducescatter);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("last_choices", &lastChoices,
             "the target and configuration the last attention_fwd, attention_bwd, paged_decode, "
             "mla_decode, sp_attention_fwd, sp_attention_bwd, tp_allgather_gemm and "
             "tp_gemm_reducescatter calls of this process ran, in that order");
  module.def("sp_init", &spInit,
             "joins the sequence-parallel job torchrun started (once); returns (rank, world "
             "size, device)");
  module.def("sp_release", &spRelease,
             "frees the sequence-parallel calls' exchanges and the communicator (collective)");
  module.def("version", [] { return std::string(tessel::version()); });
}
