#!/usr/bin/env python3
# The references of `tessel bench weight_gemm`: torch's dense bf16 product
# y = x W^T (cuBLAS) at the same M, N, K, and torch's int4 weight-only
# product (_weight_int4pack_mm, tinygemm's kernel, group 128) where this
# torch has it. The weights rotate over copies that exceed L2 twice, as
# `tessel bench` rotates its own, so that every launch reads them from
# memory as a model's layers do, and the launches of each timing are one
# CUDA graph, so that Python's launch overhead is not timed.
#
#   python3 tools/weight-gemm-reference.py [--json FILE]
import argparse
import json

import torch

SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336))  # (N, K)
TOKENS = (1, 16, 64, 256, 4096)


def graph_ms(launches, rep=30):
    """Median time of one launch of `launches` (each with its own weights),
    all captured in one CUDA graph: a launch of a few microseconds would
    otherwise time the Python between two events, not the kernel."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for launch in launches:  # warm-up, outside the capture
            launch()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for launch in launches:
            launch()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(rep):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / len(launches))
    times.sort()
    return times[len(times) // 2]


def copies(make, bytes_each):
    return [make() for _ in range(max(1, min(64, (240 << 20) // bytes_each + 1)))]


def rows():
    out = []
    props = torch.cuda.get_device_properties(0)
    for n, k in SHAPES:
        weights = copies(lambda: torch.randn(n, k, device="cuda", dtype=torch.bfloat16), n * k * 2)
        packed = None
        try:  # tinygemm's layout, from two codes a byte [N, K / 2]
            packed = copies(lambda: torch._convert_weight_to_int4pack(
                torch.randint(0, 256, (n, k // 2), device="cuda", dtype=torch.uint8), 8), n * k // 2)
            sz = torch.rand(k // 128, n, 2, device="cuda", dtype=torch.bfloat16)
        except (RuntimeError, AttributeError) as e:
            print(f"_convert_weight_to_int4pack {n}x{k}: {str(e).splitlines()[0]}")
        for m in TOKENS:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ms = graph_ms([lambda w=w: x @ w.t() for w in weights])
            out.append({"op": "weight_gemm", "impl": "cublas_bf16", "M": m, "N": n, "K": k,
                        "ms": ms, "weight_gbps": n * k * 2 / ms / 1e6})
            if packed is None:
                continue
            try:
                ms = graph_ms([lambda w=w: torch._weight_int4pack_mm(x, w, 128, sz) for w in packed])
                out.append({"op": "weight_gemm", "impl": "torch_int4pack", "M": m, "N": n, "K": k,
                            "ms": ms, "weight_gbps": (n * k // 2 + sz.numel() * 2) / ms / 1e6})
            except RuntimeError as e:
                print(f"_weight_int4pack_mm {m}x{n}x{k}: {str(e).splitlines()[0]}")
    for r in out:
        print(f"{r['impl']:16s} M={r['M']:5d} N={r['N']:5d} K={r['K']:5d} {r['ms']:.4f} ms "
              f"{r['weight_gbps']:7.0f} GB/s of weights")
    return {"device": props.name, "rows": out}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args()
    result = rows()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
