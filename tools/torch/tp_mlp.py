#!/usr/bin/env python3
"""A tensor-parallel MLP with Tessel's overlapped layers, against torch's.

Each rank holds 1/N of the tokens x [M / N, H] and 1/N of the MLP's weights
as nn.Linear keeps them: w1 [I / N, H] (the up projection's rows) and w2
[H, I / N] (the down projection's columns). Tessel's MLP is

    h = tessel_torch.allgather_gemm(x, w1, transpose_w=True)      # [M, I / N]
    y = tessel_torch.gemm_reducescatter(gelu(h), w2, transpose_w=True)  # [M / N, H]

and torch's is the same with all_gather_into_tensor + matmul and matmul +
reduce_scatter_tensor (NCCL, cuBLAS). The script checks that the two y agree
on every rank (relative error in float32 terms), checks the gradients of x,
w1 and w2 (Tessel's layers are differentiable: each layer's dx is the other
layer on dy) against float32 autograd over the whole, unsharded MLP, then
times both forward passes (CUDA events, median of --reps, the slowest rank).

    torchrun --standalone --nproc_per_node=4 tools/torch/tp_mlp.py --prefix /opt/tessel
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tessel_torch  # noqa: E402


def torch_mlp(x, w1, w2, world):
    full = torch.empty((x.shape[0] * world, x.shape[1]), dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(full, x)
    partial = F.gelu(full @ w1.t()) @ w2.t()
    y = torch.empty((partial.shape[0] // world, partial.shape[1]), dtype=x.dtype, device=x.device)
    dist.reduce_scatter_tensor(y, partial)
    return y


def tessel_mlp(x, w1, w2):
    h = tessel_torch.allgather_gemm(x, w1, transpose_w=True)
    return tessel_torch.gemm_reducescatter(F.gelu(h), w2, transpose_w=True)


def gathered(t, dim):
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.contiguous())
    return torch.cat(parts, dim)


def gradient_errors(x, w1, w2, rank, world):
    """Relative errors of Tessel's dx, dw1, dw2 against float32 autograd over
    the whole MLP (every rank's shards gathered), for the loss sum(y * g)."""
    torch.manual_seed(99)  # the same g on every rank
    g = torch.randn(x.shape[0] * world, w2.shape[0], device="cuda")
    mine = [t.detach().clone().requires_grad_() for t in (x, w1, w2)]
    y = tessel_mlp(*mine)
    rows = slice(rank * x.shape[0], (rank + 1) * x.shape[0])
    (y.float() * g[rows]).sum().backward()
    whole = [gathered(x, 0), gathered(w1, 0), gathered(w2, 1)]
    whole = [t.float().requires_grad_() for t in whole]
    (F.gelu(whole[0] @ whole[1].t()) @ whole[2].t() * g).sum().backward()
    cols = slice(rank * w1.shape[0], (rank + 1) * w1.shape[0])
    expected = [whole[0].grad[rows], whole[1].grad[cols], whole[2].grad[:, cols]]
    return [((m.grad.float() - e).norm() / e.norm()).item() for m, e in zip(mine, expected)]


def slowest_median_ms(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    t = torch.tensor([sorted(times)[len(times) // 2]], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--prefix", required=True, help="where `cmake --install` put Tessel")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--hidden", type=int, default=8192)
    p.add_argument("--intermediate", type=int, default=28672)
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    tessel_torch.load(a.prefix)
    tessel_torch.sp_init()
    torch.manual_seed(1234 + rank)
    bf16 = dict(dtype=torch.bfloat16, device="cuda")
    x = torch.randn(a.tokens // world, a.hidden, **bf16)
    w1 = torch.randn(a.intermediate // world, a.hidden, **bf16) / a.hidden ** 0.5
    w2 = torch.randn(a.hidden, a.intermediate // world, **bf16) / a.intermediate ** 0.5
    expected = torch_mlp(x, w1, w2, world).float()
    got = tessel_mlp(x, w1, w2).float()
    error = ((got - expected).norm() / expected.norm()).item()
    worst = torch.tensor([error], device="cuda")
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    grads = torch.tensor(gradient_errors(x, w1, w2, rank, world), device="cuda")
    dist.all_reduce(grads, op=dist.ReduceOp.MAX)
    ours = slowest_median_ms(lambda: tessel_mlp(x, w1, w2), a.reps)
    theirs = slowest_median_ms(lambda: torch_mlp(x, w1, w2, world), a.reps)
    if rank == 0:
        ok = worst.item() < 1e-2
        print(f"tp MLP on {world} ranks, {a.tokens} tokens, hidden {a.hidden}, intermediate "
              f"{a.intermediate}, bf16 ({torch.cuda.get_device_name()}, torch {torch.__version__})")
        print(f"  y against torch's: worst rank's relative error {worst.item():.2e} "
              f"({'PASS' if ok else 'FAIL'})")
        grads_ok = grads.max().item() < 2e-2
        print(f"  dx, dw1, dw2 against float32 autograd of the whole MLP: worst rank's relative "
              f"errors {', '.join(f'{e:.2e}' for e in grads.tolist())} "
              f"({'PASS' if grads_ok else 'FAIL'})")
        print(f"  tessel_torch MLP {ours:.3f} ms, torch MLP {theirs:.3f} ms "
              f"(tessel {theirs / ours:.2f}x faster), median of {a.reps}, slowest rank")
        print(f"  layers: {tessel_torch.last_choices()[6:]}")
    tessel_torch.sp_release()
    dist.destroy_process_group()
    sys.exit(0 if worst.item() < 1e-2 and grads.max().item() < 2e-2 else 1)


if __name__ == "__main__":
    main()
