#!/usr/bin/env python3
# cuDNN's (and FlashAttention-2's) attention times at FlashAttention-3's shapes
# for `tessel bench attention --reference`: head_dim 64 and 128 forward and
# backward from ../shared/bench/reference_anchors.py, plus head_dim 256
# forward through cuDNN (that file has no head_dim 256 rows), in one JSON.
#
#   PYTHONPATH=../shared/bench python3 tools/attention-reference.py ref.json
import json
import sys

import reference_anchors as anchors
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def head_dim_256_rows(seqlens=(1024, 4096, 8192)):
    rows = []
    for s in seqlens:
        d = 256
        b, h = 16384 // s, 2048 // d
        q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
        k, v = torch.randn_like(q), torch.randn_like(q)
        for causal in (False, True):
            flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
            try:
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    ms = anchors.median_ms(
                        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
            except RuntimeError as e:  # a cuDNN build without this shape: no row
                print(f"cudnn head_dim 256 seqlen {s}: {e}", file=sys.stderr)
                continue
            rows.append({"op": "attention", "impl": "cudnn", "batch": b, "heads": h,
                         "seqlen": s, "head_dim": d, "causal": causal, "dtype": "bfloat16",
                         "pass": "fwd", "ms": ms, "tflops": flops / ms / 1e9})
    return rows


def cudnn_rows(b, hq, hkv, s, d=128):
    """cuDNN forward and backward with hq query heads over hkv K/V heads. K/V
    are passed grouped (enable_gqa) where this torch's cuDNN backend takes
    them; otherwise expanded to hq heads inside the timed call, as a user
    without grouped support runs it (the row says which)."""
    rows = []
    q = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn_like(k, requires_grad=True)
    for causal in (False, True):
        flops = 4 * b * hq * s * s * d * (0.5 if causal else 1.0)

        def grouped():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                  enable_gqa=hq != hkv)

        def expanded():
            r = hq // hkv
            return F.scaled_dot_product_attention(q, k.repeat_interleave(r, 1),
                                                  v.repeat_interleave(r, 1), is_causal=causal)
        for kv, fwd in (("grouped", grouped), ("expanded", expanded)):
            try:
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    fwd_ms = anchors.median_ms(fwd, warm=3, rep=10)
                    out = fwd()
                    grad = torch.randn_like(out)
                    bwd_ms = anchors.median_ms(
                        lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True),
                        warm=3, rep=10)
            except RuntimeError as e:  # this backend does not take the form
                print(f"cudnn {hq}/{hkv} heads s{s} with {kv} K/V: {e}", file=sys.stderr)
                continue
            common = {"op": "attention", "impl": "cudnn", "batch": b, "heads": hq,
                      "heads_kv": hkv, "kv": kv, "seqlen": s, "head_dim": d, "causal": causal,
                      "dtype": "bfloat16"}
            rows.append({**common, "pass": "fwd", "ms": fwd_ms, "tflops": flops / fwd_ms / 1e9})
            rows.append({**common, "pass": "bwd", "ms": bwd_ms,
                         "tflops": 2.5 * flops / bwd_ms / 1e9})
            break
    return rows


def long_and_grouped_rows():
    rows = []
    for s in (32768, 65536):
        rows += cudnn_rows(1, 32, 32, s)
    for hq in (32, 64):
        rows += cudnn_rows(2, hq, 8, 8192)
    return rows


def main():
    args = [a for a in sys.argv[1:] if a != "--quick"]
    if len(args) != 1:
        sys.exit("usage: attention-reference.py [--quick] OUT.json")
    rows = [] if "--quick" in sys.argv else (
        anchors.attention_rows([64, 128], [1024, 4096, 8192]) + head_dim_256_rows())
    rows += long_and_grouped_rows()
    for r in rows:
        if r["impl"] == "cudnn":
            heads = f" b{r['batch']} h{r['heads']}/{r.get('heads_kv', r['heads'])}"
            print(f"cudnn d{r['head_dim']} s{r['seqlen']}{heads} "
                  f"{'causal' if r['causal'] else 'full'} "
                  f"{r['pass']}: {r['ms']:.3f} ms {r['tflops']:.1f} TFLOP/s")
    with open(args[0], "w") as f:
        json.dump({"device": torch.cuda.get_device_properties(0).name, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
