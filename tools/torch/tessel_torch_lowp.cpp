//===- tessel_torch_lowp.cpp - FP8 quantisation and gemm as operators -----===//
//
// torch.ops.tessel.quantize, scaled_mm and attention_fp8 over the installed
// libtessel.so (tessel::quantize, tessel::gemm on 8-bit views,
// tessel::attention::forward on FP8 views): an FP8 linear layer and FP8
// attention from PyTorch, per row, per 1x128 block or MX (ue8m0 per 32 of K
// in cuBLAS's blocked layout), on PyTorch's current stream. Part of the
// tessel_torch extension (tessel_torch.py builds both sources).
//
//===----------------------------------------------------------------------===//
#include <ATen/DLConvertor.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <tessel/Tessel.h>

#include "tessel_torch_views.h"

#include <optional>
#include <stdexcept>
#include <string>

namespace {
using torch_views::currentStream;
using torch_views::translated;
using torch_views::viewOf;

/// Bad arguments as Python's ValueError (std::invalid_argument), before
/// anything runs: TORCH_CHECK's c10::Error, thrown out of this extension,
/// crashed the process (torch 2.11).
void require(bool ok, const std::string &message) {
  if (!ok) throw std::invalid_argument(message);
}

std::string sizesOf(const at::Tensor &t) {
  std::string out = "[";
  for (int64_t i = 0; i < t.dim(); ++i) out += (i ? ", " : "") + std::to_string(t.size(i));
  return out + "]";
}

/// x [M, K] (f32, f16, bf16) into q [M, K] of `dtype` (float8_e4m3fn or
/// float8_e5m2) and its scales, x ~= q * scale: granularity "row" gives f32
/// [M]; "block" f32 [K / 128, M] (1x128 blocks, K-block-major: what
/// scaled_mm takes as a block-scaled A's scales); "mx" float8_e8m0fnu in
/// cuBLAS's blocked layout [ceil(M / 128), ceil(K / 128), 32, 16] (a
/// power of two per 32 of K, what scaled_mm takes as MX scales).
std::tuple<at::Tensor, at::Tensor> quantize(const at::Tensor &x, const std::string &granularity,
                                            at::ScalarType dtype) {
  require(x.dim() == 2, "x must be [M, K], got " + sizesOf(x));
  at::Tensor xc = x.contiguous();
  int64_t m = xc.size(0), k = xc.size(1);
  at::Tensor q = at::empty({m, k}, xc.options().dtype(dtype));
  tessel::QuantizeOptions options;
  at::Tensor scales;
  if (granularity == "row") {
    scales = at::empty({m}, xc.options().dtype(at::kFloat));
  } else if (granularity == "block") {
    scales = at::empty({k / 128, m}, xc.options().dtype(at::kFloat));
    options.kMajorScales = true;
  } else if (granularity == "mx") {
    scales = at::empty({(m + 127) / 128, (k + 127) / 128, 32, 16},
                       xc.options().dtype(at::kFloat8_e8m0fnu));
  } else {
    require(false, "granularity must be row, block or mx, got " + granularity);
  }
  translated([&] {
    return tessel::quantize(viewOf(xc, "x"), viewOf(q, "q"), viewOf(scales, "scales"), options,
                            currentStream(x));
  });
  return {q, scales};
}

/// c [M, N] = a [M, K] b [N, K]^T with both FP8 (b as nn.Linear keeps its
/// weight), scaled as the scales' shapes say (tessel::gemm: one element
/// each, per row [M] and column [N], block-scaled [K / 128, M] and [N /
/// 128, K / 128] f32, or MX blocked float8_e8m0fnu), into `out_dtype`
/// (bfloat16, float16 or float32).
at::Tensor scaledMm(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scaleA,
                    const at::Tensor &scaleB, at::ScalarType outDtype) {
  require(a.dim() == 2 && b.dim() == 2,
          "a and b must be 2-D, got " + sizesOf(a) + " and " + sizesOf(b));
  at::Tensor ac = a.contiguous(), bc = b.contiguous();
  at::Tensor sa = scaleA.contiguous(), sb = scaleB.contiguous();
  at::Tensor c = at::empty({ac.size(0), bc.size(0)}, ac.options().dtype(outDtype));
  tessel::GemmCallOptions options;
  options.transposeB = true;
  options.scaleA = viewOf(sa, "scale_a");
  options.scaleB = viewOf(sb, "scale_b");
  translated([&] {
    return tessel::gemm(viewOf(ac, "a"), viewOf(bc, "b"), viewOf(c, "out"), options,
                        currentStream(a));
  });
  return c;
}
/// FP8 attention forward: q, k, v BSHD in float8_e4m3fn or float8_e5m2,
/// out bf16 [batch, seq, heads_q, head_dim] and LSE f32 [batch, heads_q,
/// seq], with Q's, K's and V's scales on the device when given (f32 [batch,
/// heads_kv], any strides, or [1]; all three or none): FlashAttention-3's
/// descales, read by the kernel, so that the call needs no host value of
/// them.
std::tuple<at::Tensor, at::Tensor>
attentionFp8(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, bool causal,
             double scale, const std::optional<at::Tensor> &qDescale,
             const std::optional<at::Tensor> &kDescale, const std::optional<at::Tensor> &vDescale) {
  require(q.dim() == 4, "q must be [batch, seq, heads, head_dim], got " + sizesOf(q));
  at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  at::Tensor out = at::empty(qc.sizes(), qc.options().dtype(at::kBFloat16));
  at::Tensor lse = at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat));
  tessel::attention::ForwardOptions options;
  options.causal = causal;
  options.scale = scale;
  if (qDescale) options.qDescale = viewOf(*qDescale, "q_descale");
  if (kDescale) options.kDescale = viewOf(*kDescale, "k_descale");
  if (vDescale) options.vDescale = viewOf(*vDescale, "v_descale");
  translated([&] {
    return tessel::attention::forward(viewOf(qc, "q"), viewOf(kc, "k"), viewOf(vc, "v"),
                                      viewOf(out, "out"), viewOf(lse, "lse"), options,
                                      currentStream(q));
  });
  return {out, lse};
}
} // namespace

TORCH_LIBRARY_FRAGMENT(tessel, m) {
  m.def("quantize(Tensor x, str granularity, ScalarType dtype) -> (Tensor, Tensor)");
  m.def("scaled_mm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, ScalarType out_dtype) "
        "-> Tensor");
  m.def("attention_fp8(Tensor q, Tensor k, Tensor v, bool causal, float scale, "
        "Tensor? q_descale, Tensor? k_descale, Tensor? v_descale) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(tessel, CUDA, m) {
  m.impl("quantize", &quantize);
  m.impl("scaled_mm", &scaledMm);
  m.impl("attention_fp8", &attentionFp8);
}
