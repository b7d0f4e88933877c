#!/usr/bin/env python3
# The PyTorch baseline for the two tensor-parallel layers of an MLP inside a node, as a
# PyTorch user writes them: NCCL collectives (torch.distributed) and cuBLAS (torch.matmul),
# one after the other, nothing overlapped. With N ranks, M tokens, H hidden, I intermediate:
#   ag_gemm (column-parallel): x_shard [M/N, H], w [H, I/N]; all_gather_into_tensor -> [M, H],
#           then torch.matmul(full, w, out=[M, I/N]).              K = H,   N = I/N
#   gemm_rs (row-parallel):    a [M, I/N], w2 [I/N, H]; torch.matmul -> partial [M, H], then
#           reduce_scatter_tensor (sum) -> [M/N, H].                K = I/N, N = H
# Each layer is timed whole (torch_ms), its matmul alone (gemm_ms) and its collective alone
# (comm_ms): 5 warm-up iterations, then synchronize + barrier, then `reps` iterations timed one
# by one with CUDA events; the median per rank, then the slowest rank's (all_reduce MAX).
# Random inputs (scaled by 0.1, never zeros), the same tensors every iteration.
#
# FP8 (--dtype e4m3): operands are float8_e4m3fn (random bf16 * 0.5, cast), with f32 row-wise
# scales (random in [0.5, 2]), output bf16, through torch._scaled_mm (cuBLASLt; both operands
# K-major, weights stored [out, in] as nn.Linear does, passed as w.t(): column-major mat2):
#   ag_gemm: x_shard [M/N, H] + scale_x [M/N, 1], w [I/N, H] + scale_w [1, I/N]; the fp8 rows are
#            gathered as uint8 (all_gather_into_tensor -> [M, H]) and the scales too (-> [M, 1]);
#            comm_ms is the two gathers together. Then _scaled_mm(full, w.t()) -> [M, I/N] bf16.
#   gemm_rs: a [M, I/N] + scale_a [M, 1], w2 [H, I/N] + scale_w2 [1, H]; _scaled_mm(a, w2.t())
#            -> partial [M, H] bf16, then reduce_scatter_tensor (sum, bf16) -> [M/N, H].
# Its REF lines carry an extra field after the layer: `REF tp layer=ag_gemm dtype=e4m3 ranks=...`.
#
#   torchrun --standalone --nproc_per_node=N tools/tp-reference.py [--tokens 4096,8192]
#            [--hidden 8192] [--intermediate 28672] [--dtype bf16|fp16|fp32|e4m3] [--reps 30]
# Rank 0 prints one machine-readable REF line per (layer, M), then a human summary.
import argparse
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "shared", "bench"))
try:
    from reference_anchors import median_ms
except ImportError:  # a checkout without ../shared/bench: the same helper, locally
    def median_ms(fn, warm=5, rep=30):
        for _ in range(warm):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(rep):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        times.sort()
        return times[len(times) // 2]

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
          "e4m3": torch.float8_e4m3fn}
F8 = torch.float8_e4m3fn


def timed(fn, reps):
    """Warm up 5 times, line the ranks up, time `reps` runs; the slowest rank's median (ms)."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    t = torch.tensor([median_ms(fn, warm=0, rep=reps)], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def rand(*shape, dtype):
    return (torch.randn(*shape, device="cuda", dtype=torch.float32) * 0.1).to(dtype)


def ag_gemm(m, h, i_local, world, dtype, reps):
    x_shard, w = rand(m // world, h, dtype=dtype), rand(h, i_local, dtype=dtype)
    full = torch.empty(m, h, device="cuda", dtype=dtype)
    out = torch.empty(m, i_local, device="cuda", dtype=dtype)
    comm = lambda: dist.all_gather_into_tensor(full, x_shard)
    gemm = lambda: torch.matmul(full, w, out=out)
    both = lambda: (comm(), gemm())
    return (timed(both, reps), timed(gemm, reps), timed(comm, reps),
            full.numel() * full.element_size())


def gemm_rs(m, h, i_local, world, dtype, reps):
    a, w2 = rand(m, i_local, dtype=dtype), rand(i_local, h, dtype=dtype)
    partial = torch.empty(m, h, device="cuda", dtype=dtype)
    out = torch.empty(m // world, h, device="cuda", dtype=dtype)
    gemm = lambda: torch.matmul(a, w2, out=partial)
    comm = lambda: dist.reduce_scatter_tensor(out, partial, op=dist.ReduceOp.SUM)
    both = lambda: (gemm(), comm())
    return (timed(both, reps), timed(gemm, reps), timed(comm, reps),
            partial.numel() * partial.element_size())


def rand_fp8(*shape):
    return (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) * 0.5).to(F8)


def rand_scale(*shape):  # f32 row-wise scales, [rows, 1] or [1, cols], contiguous
    return torch.empty(*shape, device="cuda", dtype=torch.float32).uniform_(0.5, 2.0)


def scaled_mm(a, b_t, sa, sb):  # a [M, K] row-major, b_t [K, N] column-major -> bf16 [M, N]
    return torch._scaled_mm(a, b_t, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)


def ag_gemm_fp8(m, h, i_local, world, dtype, reps):
    x_shard, scale_x = rand_fp8(m // world, h), rand_scale(m // world, 1)
    w, scale_w = rand_fp8(i_local, h), rand_scale(1, i_local)  # [I/N, H]: K-major
    x_u8 = x_shard.view(torch.uint8)
    full_u8 = torch.empty(m, h, device="cuda", dtype=torch.uint8)
    full, full_scales = full_u8.view(F8), torch.empty(m, 1, device="cuda", dtype=torch.float32)

    def comm():
        dist.all_gather_into_tensor(full_u8, x_u8)
        dist.all_gather_into_tensor(full_scales, scale_x)
    gemm = lambda: scaled_mm(full, w.t(), full_scales, scale_w)
    both = lambda: (comm(), gemm())
    return (timed(both, reps), timed(gemm, reps), timed(comm, reps),
            full_u8.numel() + full_scales.numel() * full_scales.element_size())


def gemm_rs_fp8(m, h, i_local, world, dtype, reps):
    a, scale_a = rand_fp8(m, i_local), rand_scale(m, 1)
    w2, scale_w2 = rand_fp8(h, i_local), rand_scale(1, h)  # [H, I/N]: K-major
    out = torch.empty(m // world, h, device="cuda", dtype=torch.bfloat16)
    gemm = lambda: scaled_mm(a, w2.t(), scale_a, scale_w2)
    partial = gemm()  # [M, H] bf16, for the collective timed alone
    comm = lambda: dist.reduce_scatter_tensor(out, partial, op=dist.ReduceOp.SUM)
    both = lambda: dist.reduce_scatter_tensor(out, gemm(), op=dist.ReduceOp.SUM)
    return (timed(both, reps), timed(gemm, reps), timed(comm, reps),
            partial.numel() * partial.element_size())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", default="4096,8192")
    p.add_argument("--hidden", type=int, default=8192)
    p.add_argument("--intermediate", type=int, default=28672)
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--reps", type=int, default=30)
    args = p.parse_args()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    dtype, h = DTYPES[args.dtype], args.hidden
    assert args.intermediate % world == 0, "intermediate must divide by the world size"
    i_local = args.intermediate // world
    if rank == 0:
        nccl = torch.cuda.nccl.version()
        nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, NCCL {nccl}, "
              f"{world} ranks, {args.dtype}, {args.reps} reps", flush=True)
    fp8 = dtype == F8
    layers = (("ag_gemm", ag_gemm_fp8 if fp8 else ag_gemm, h, i_local),
              ("gemm_rs", gemm_rs_fp8 if fp8 else gemm_rs, i_local, h))
    tag = f" dtype={args.dtype}" if fp8 else ""  # the bf16/fp16/fp32 lines keep their form
    rows = []
    for m in (int(s) for s in args.tokens.split(",")):
        assert m % world == 0, "tokens must divide by the world size"
        for layer, run, k, n in layers:
            whole, gemm, comm, nbytes = run(m, h, i_local, world, dtype, args.reps)
            torch.cuda.empty_cache()
            rows.append((layer, m, k, n, whole, gemm, comm, nbytes))
            if rank == 0:
                print(f"REF tp layer={layer}{tag} ranks={world} M={m} K={k} N={n} torch_ms={whole:.4f} "
                      f"gemm_ms={gemm:.4f} comm_ms={comm:.4f}", flush=True)
    if rank == 0:
        print(f"\nTensor-parallel baseline, {world} ranks, H={h}, I={args.intermediate}, "
              f"{args.dtype} (slowest rank, median of {args.reps}):")
        print(f"{'layer':8} {'M':>6} {'K':>6} {'N':>6} {'torch ms':>9} {'gemm ms':>8} "
              f"{'comm ms':>8} {'TFLOP/s':>8} {'busbw GB/s':>10} {'vs overlap':>10}")
        for layer, m, k, n, whole, gemm, comm, nbytes in rows:
            tflops = 2 * m * k * n / whole / 1e9
            busbw = nbytes * (world - 1) / world / comm / 1e6  # NCCL's bus bandwidth
            ideal = max(gemm, comm)  # the time of a perfect overlap of the two
            print(f"{layer:8} {m:6} {k:6} {n:6} {whole:9.3f} {gemm:8.3f} {comm:8.3f} "
                  f"{tflops:8.1f} {busbw:10.1f} {whole / ideal:9.2f}x")
        print("TFLOP/s: the layer's matmul FLOPs over torch ms; busbw: the collective alone; "
              "vs overlap: torch ms over max(gemm ms, comm ms).")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
