"""Tessel's attention in PyTorch.

    import tessel_torch
    tessel_torch.load("/path/to/tessel/prefix")   # where `cmake --install` put Tessel
    out = tessel_torch.attention(q, k, v, causal=True)   # BSHD, f16/bf16, autograd

`load` builds the C++ extension (tessel_torch.cpp) with
torch.utils.cpp_extension against the installed headers and libtessel.so
(once; later calls reuse the build), which registers
torch.ops.tessel.attention_fwd and torch.ops.tessel.attention_bwd.
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
        sources=[os.path.join(here, "tessel_torch.cpp")],
        extra_include_paths=[os.path.join(prefix, "include"), os.path.join(cuda_home, "include")],
        # Tessel's headers are C++20 (std::source_location).
        extra_cflags=["-O2", "-std=c++20"],
        # c10_cuda for the current stream; no CUDA runtime of our own (Tessel
        # drives the GPU through the driver API).
        extra_ldflags=[f"-L{prefix}/lib", "-ltessel", f"-Wl,-rpath,{prefix}/lib", "-lc10_cuda"],
        with_cuda=False,
        verbose=verbose,
    )
    return _module


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


def last_choices():
    """[forward, backward]: the target and kernel configuration the last calls ran."""
    return _module.last_choices()
