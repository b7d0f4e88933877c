"""Tessel's attention and decode attention in PyTorch.

    import tessel_torch
    tessel_torch.load("/path/to/tessel/prefix")   # where `cmake --install` put Tessel
    out = tessel_torch.attention(q, k, v, causal=True)   # BSHD, f16/bf16, autograd
    out = tessel_torch.paged_decode(q, k_cache, v_cache, block_table, lengths)
    out = tessel_torch.mla_decode(q, cache, block_table, lengths)
    out = tessel_torch.sp_attention(q, k, v, causal=True)   # under torchrun: sequence shards
    h = tessel_torch.allgather_gemm(x, w1, transpose_w=True)  # under torchrun: TP layers
    y = tessel_torch.gemm_reducescatter(act, w2, transpose_w=True)
    q, s = tessel_torch.quantize(x, "row")                    # FP8: row, block or mx scales
    y = tessel_torch.scaled_mm(q, w_q, s, w_s)                # y = (q s) (w_q w_s)^T in bf16
    o = tessel_torch.attention_fp8(q8, k8, v8, causal=True, q_descale=qs, k_descale=ks, v_descale=vs)


`load` builds the C++ extension (tessel_torch.cpp) with
torch.utils.cpp_extension against the installed headers and libtessel.so
(once; later calls reuse the build), which registers
torch.ops.tessel.attention_fwd, attention_bwd, paged_decode, mla_decode,
sp_attention_fwd, sp_attention_bwd, tp_allgather_gemm,
tp_gemm_reducescatter, quantize, scaled_mm and attention_fp8
(tessel_torch_lowp.cpp), each
with a fake (meta)
implementation so that torch.compile traces them without running them.

Sequence-parallel attention runs in the processes torchrun starts, one per
GPU, beside torch.distributed: each rank passes its shard of the sequence
[batch, seq / N, heads, head_dim] (1/N of every sequence, in rank order)
and gets its shard of the output; Tessel's own communicator (made from
torchrun's variables on the first call, or by sp_init()) moves the shards
between the GPUs on torch's current stream. It is differentiable.

Decode attention is one query token per sequence against a paged KV cache
(inference only, no autograd): block_table int32 [batch, max_pages] names
the cache page holding each sequence's n-th page of keys, lengths int32
[batch] (on the GPU) counts each sequence's keys. GQA: q, out [batch,
heads_q, head_dim], k_cache, v_cache [pages, page_size, heads_kv, head_dim].
MLA: q [batch, heads, 576] (latent 512 + rope 64), cache [pages, page_size,
576], out [batch, heads, 512] (the values are the latent columns).
"""
import math
import os

import torch
from torch.utils import cpp_extension

_module = None


def load(prefix, verbose=False):
    """Builds (or reuses) the extension against the Tessel installed under `prefix`."""
    global _module
    if _module is not None:
        return _module
    prefix = os.path.abspath(prefix)
    here = os.path.dirname(os.path.abspath(__file__))
    cuda_home = cpp_extension.CUDA_HOME or "/usr/local/cuda"
    _module = cpp_extension.load(
        name="tessel_torch",
        sources=[os.path.join(here, "tessel_torch.cpp"), os.path.join(here, "tessel_torch_lowp.cpp")],
        extra_include_paths=[os.path.join(prefix, "include"), os.path.join(cuda_home, "include")],
        # Tessel's headers are C++20 (std::source_location).
        extra_cflags=["-O2", "-std=c++20"],
        # c10_cuda for the current stream; no CUDA runtime of our own (Tessel
        # drives the GPU through the driver API).
        extra_ldflags=[f"-L{prefix}/lib", "-ltessel", f"-Wl,-rpath,{prefix}/lib", "-lc10_cuda"],
        with_cuda=False,
        verbose=verbose,
    )
    _register_fakes()
    return _module


def _register_fakes():
    """Shapes and dtypes of each operator's results without running it (what
    torch.compile and FakeTensor tracing call). Torch before 2.4 has no
    register_fake: the operators then run eagerly only."""
    if not hasattr(torch.library, "register_fake"):
        return
    def fake_forward(q, k, v, causal, scale, zigzag=False):
        b, s, h, _ = q.shape
        return q.new_empty(q.shape), q.new_empty((b, h, s), dtype=torch.float32)

    def fake_backward(dout, q, k, v, out, lse, causal, scale, zigzag=False):
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)

    for name, fake in (("attention_fwd", fake_forward), ("attention_bwd", fake_backward),
                       ("sp_attention_fwd", fake_forward), ("sp_attention_bwd", fake_backward)):
        torch.library.register_fake("tessel::" + name)(fake)

    @torch.library.register_fake("tessel::paged_decode")
    def _(q, k_cache, v_cache, block_table, lengths, scale, k_scale=1.0, v_scale=1.0):
        return q.new_empty(q.shape)

    def world():
        return int(os.environ.get("WORLD_SIZE", "1"))

    @torch.library.register_fake("tessel::tp_allgather_gemm")
    def _(a, b, transpose_b):
        return a.new_empty((a.shape[0] * world(), b.shape[0] if transpose_b else b.shape[1]))

    @torch.library.register_fake("tessel::tp_gemm_reducescatter")
    def _(a, b, transpose_b):
        return a.new_empty((a.shape[0] // world(), b.shape[0] if transpose_b else b.shape[1]))

    @torch.library.register_fake("tessel::mla_decode")
    def _(q, cache, block_table, lengths, scale):
        return q.new_empty((q.shape[0], q.shape[1], 512))

    @torch.library.register_fake("tessel::quantize")
    def _(x, granularity, dtype):
        m, k = x.shape
        if granularity == "row":
            scales = x.new_empty((m,), dtype=torch.float32)
        elif granularity == "block":
            scales = x.new_empty((k // 128, m), dtype=torch.float32)
        else:
            scales = x.new_empty(((m + 127) // 128, (k + 127) // 128, 32, 16),
                                 dtype=torch.float8_e8m0fnu)
        return x.new_empty((m, k), dtype=dtype), scales

    @torch.library.register_fake("tessel::scaled_mm")
    def _(a, b, scale_a, scale_b, out_dtype):
        return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)

    @torch.library.register_fake("tessel::attention_fp8")
    def _(q, k, v, causal, scale, q_descale, k_descale, v_descale):
        b, s, h, _ = q.shape
        return (q.new_empty(q.shape, dtype=torch.bfloat16),
                q.new_empty((b, h, s), dtype=torch.float32))


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale):
        out, lse = torch.ops.tessel.attention_fwd(q, k, v, causal, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale = causal, scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = torch.ops.tessel.attention_bwd(dout, q, k, v, out, lse, ctx.causal, ctx.scale)
        return dq, dk, dv, None, None


def attention(q, k, v, causal=False, scale=None):
    """softmax(scale q k^T) v over BSHD tensors [batch, seq, heads, head_dim];
    k and v may have fewer heads (GQA). Differentiable."""
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    return _Attention.apply(q, k, v, causal, scale)


class _SpAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, zigzag):
        out, lse = torch.ops.tessel.sp_attention_fwd(q, k, v, causal, scale, zigzag)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale, ctx.zigzag = causal, scale, zigzag
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = torch.ops.tessel.sp_attention_bwd(dout, q, k, v, out, lse, ctx.causal,
                                                       ctx.scale, ctx.zigzag)
        return dq, dk, dv, None, None, None


def sp_attention(q, k, v, causal=False, scale=None, placement="ulysses"):
    """Sequence-parallel attention over the ranks torchrun started: q [batch,
    seq / N, heads_q, head_dim], k and v [batch, seq / N, heads_kv,
    head_dim], each rank's rows of every sequence; returns the rank's shard
    of softmax(scale q k^T) v over the whole sequences. placement "ulysses":
    the rank holds 1/N of each sequence, end to end; "zigzag": chunks r and
    2N-1-r of 2N (equal causal work on every rank; a fixed batch, chunks of
    whole 128-row tiles). Collective: every rank calls it with the same
    shapes, in the same order. Differentiable."""
    if placement not in ("ulysses", "zigzag"):
        raise ValueError(f"placement={placement!r}: use 'ulysses' or 'zigzag'")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    return _SpAttention.apply(q, k, v, causal, scale, placement == "zigzag")


def sp_init():
    """Joins the job torchrun started (once; the first sp_attention call does
    it too); returns (rank, world size, device)."""
    return _module.sp_init()


def sp_release():
    """Frees sp_attention's exchanges and the communicator; collective (every
    rank calls it, before the processes end)."""
    _module.sp_release()


def paged_decode(q, k_cache, v_cache, block_table, lengths, scale=None, k_scale=1.0,
                 v_scale=1.0):
    """GQA decode attention over a paged KV cache: out [batch, heads_q,
    head_dim] = softmax(scale q k^T) v over each sequence's first
    lengths[b] keys. scale None is the library's 1 / sqrt(head_dim). The
    caches are in q's dtype, or torch.float8_e4m3fn with k_scale and
    v_scale (key = k_scale * code, value = v_scale * code)."""
    return torch.ops.tessel.paged_decode(q, k_cache, v_cache, block_table, lengths,
                                         0.0 if scale is None else float(scale),
                                         float(k_scale), float(v_scale))


def mla_decode(q, cache, block_table, lengths, scale=None):
    """MLA decode attention (absorbed query, one latent cache shared by all
    heads): out [batch, heads, 512]. scale None is the library's
    1 / sqrt(576), the score's head_dim."""
    return torch.ops.tessel.mla_decode(q, cache, block_table, lengths,
                                       0.0 if scale is None else float(scale))


def _gathered(x):
    """Every rank's rows of x, in rank order (torch.distributed)."""
    import torch.distributed as dist
    full = x.new_empty((x.shape[0] * dist.get_world_size(),) + tuple(x.shape[1:]))
    dist.all_gather_into_tensor(full, x.contiguous())
    return full


class _AllgatherGemm(torch.autograd.Function):
    # y = gather(x) op(w). Backward: dx is rank's rows of the sum over ranks
    # of dy op(w)^T, the other layer (gemm_reducescatter) on dy; dw from the
    # gathered x.
    @staticmethod
    def forward(ctx, x, w, transpose_w):
        ctx.save_for_backward(x, w)
        ctx.transpose_w = transpose_w
        return torch.ops.tessel.tp_allgather_gemm(x, w, transpose_w)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        dy = dy.contiguous()
        # op(w)^T is w itself when transposed ([n, K]), else w^T.
        dx = torch.ops.tessel.tp_gemm_reducescatter(dy, w if ctx.transpose_w else w.t().contiguous(),
                                                    False)
        full = _gathered(x)
        dw = dy.t() @ full if ctx.transpose_w else full.t() @ dy
        return dx, dw, None


class _GemmReducescatter(torch.autograd.Function):
    # y = rank's rows of the sum over ranks of x op(w). Backward: dx =
    # gather(dy) op(w)^T, the other layer (allgather_gemm) on dy; dw from the
    # gathered dy.
    @staticmethod
    def forward(ctx, x, w, transpose_w):
        ctx.save_for_backward(x, w)
        ctx.transpose_w = transpose_w
        return torch.ops.tessel.tp_gemm_reducescatter(x, w, transpose_w)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        dy = dy.contiguous()
        dx = torch.ops.tessel.tp_allgather_gemm(dy, w if ctx.transpose_w else w.t().contiguous(),
                                                False)
        full = _gathered(dy)
        dw = full.t() @ x if ctx.transpose_w else x.t() @ full
        return dx, dw, None


def allgather_gemm(x, w, transpose_w=False):
    """A column-parallel linear layer over the ranks torchrun started: x
    [m, K] is this rank's rows, w its weight [K, n] (or [n, K], nn.Linear's
    layout, with transpose_w); returns [N * m, n], every rank's rows (in rank
    order) times w. The gather overlaps the GEMM. Collective. Differentiable:
    dx runs gemm_reducescatter on dy, dw gathers x (torch.distributed)."""
    return _AllgatherGemm.apply(x, w, bool(transpose_w))


def gemm_reducescatter(x, w, transpose_w=False):
    """A row-parallel linear layer over the ranks torchrun started: x [M, K]
    is this rank's slice of the inner dimension, w [K, n] (or [n, K] with
    transpose_w); returns this rank's M / N rows of the sum over ranks of
    x w, the reduction overlapping the GEMM. Collective. Differentiable: dx
    runs allgather_gemm on dy, dw gathers dy (torch.distributed)."""
    return _GemmReducescatter.apply(x, w, bool(transpose_w))


def quantize(x, granularity="row", dtype=torch.float8_e4m3fn):
    """x [M, K] (f32, f16, bf16) into FP8 q [M, K] and scales, x ~= q * scale:
    "row" f32 [M]; "block" f32 [K / 128, M] (1x128 blocks, K-block-major);
    "mx" float8_e8m0fnu [ceil(M / 128), ceil(K / 128), 32, 16] (a power of
    two per 32 of K, cuBLAS's blocked layout). Inference only."""
    return torch.ops.tessel.quantize(x, granularity, dtype)


def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16):
    """(a scale_a) (b scale_b)^T for FP8 a [M, K] and b [N, K] (nn.Linear's
    weight layout): scales one element each, [M] and [N], block-scaled
    [K / 128, M] and [N / 128, K / 128], or MX as quantize gives them (MX
    runs on sm_100a). Inference only."""
    return torch.ops.tessel.scaled_mm(a, b, scale_a, scale_b, out_dtype)


def attention_fp8(q, k, v, causal=False, scale=None, q_descale=None, k_descale=None,
                  v_descale=None):
    """FP8 attention forward (inference): q, k, v BSHD in float8_e4m3fn or
    float8_e5m2, out bf16. The descales are f32 tensors on the GPU, [batch,
    heads_kv] (any strides: a per-tensor scale expanded) or [1], all three
    or none; q ~= q_descale * q's codes and so on."""
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    out, _ = torch.ops.tessel.attention_fp8(q, k, v, causal, scale, q_descale, k_descale,
                                            v_descale)
    return out


def last_choices():
    """[attention_fwd, attention_bwd, paged_decode, mla_decode,
    sp_attention_fwd, sp_attention_bwd, tp_allgather_gemm,
    tp_gemm_reducescatter]: the target and kernel configuration
    the last calls of this process ran ("" for an operator not called yet)."""
    return _module.last_choices()
