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


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: attention-reference.py OUT.json")
    rows = anchors.attention_rows([64, 128], [1024, 4096, 8192]) + head_dim_256_rows()
    for r in rows:
        if r["impl"] == "cudnn":
            print(f"cudnn d{r['head_dim']} s{r['seqlen']} {'causal' if r['causal'] else 'full'} "
                  f"{r['pass']}: {r['ms']:.3f} ms {r['tflops']:.1f} TFLOP/s")
    with open(sys.argv[1], "w") as f:
        json.dump({"device": torch.cuda.get_device_properties(0).name, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
