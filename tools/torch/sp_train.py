#!/usr/bin/env python3
"""Trains with tessel_torch.sp_attention on the GPUs torchrun starts.

Two copies of a small model (two attention blocks, GQA) start from the same
weights on every rank. One trains on the whole sequence with single-GPU
attention (tessel_torch.attention); the other with sequence parallelism:
each rank takes its rows of the sequence (1/N end to end, or with
--placement zigzag chunks r and 2N-1-r of 2N), attention is sp_attention (Tessel's
exchanges between the GPUs), and the gradients of the weights are summed
over the ranks (torch.distributed), as sequence-parallel training does.
Their losses must agree at every step within bf16 noise.

    torchrun --standalone --nproc_per_node=4 tools/torch/sp_train.py --prefix /opt/tessel
"""
import argparse
import copy
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tessel_torch  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self, dim, heads, heads_kv, parallel, placement="ulysses"):
        super().__init__()
        self.heads, self.heads_kv, self.head_dim = heads, heads_kv, dim // heads
        self.parallel, self.placement = parallel, placement
        self.q = torch.nn.Linear(dim, dim, bias=False)
        self.kv = torch.nn.Linear(dim, 2 * heads_kv * self.head_dim, bias=False)
        self.out = torch.nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim).to(torch.bfloat16)
        k, v = self.kv(x).view(b, s, 2, self.heads_kv, self.head_dim).to(torch.bfloat16).unbind(2)
        if self.parallel:
            o = tessel_torch.sp_attention(q, k, v, causal=True, placement=self.placement)
        else:
            o = tessel_torch.attention(q, k, v, causal=True)
        return x + self.out(o.reshape(b, s, -1).float())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--prefix", required=True, help="where Tessel is installed")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seqlen", type=int, default=4096)
    p.add_argument("--placement", choices=("ulysses", "zigzag"), default="ulysses",
                   help="each rank's rows: 1/N end to end, or chunks r and 2N-1-r of 2N")
    args = p.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    torch.backends.cuda.matmul.allow_tf32 = False
    tessel_torch.load(args.prefix)
    tessel_torch.sp_init()
    dim, heads, heads_kv, s = 2048, 16, 4, args.seqlen
    torch.manual_seed(1)  # the same weights and data on every rank
    whole = torch.nn.Sequential(Block(dim, heads, heads_kv, False),
                                Block(dim, heads, heads_kv, False)).cuda()
    parallel = copy.deepcopy(whole)
    for block in parallel:
        block.parallel, block.placement = True, args.placement
    x = torch.randn(1, s, dim, device="cuda")
    target = torch.randn(1, s, dim, device="cuda")
    if args.placement == "zigzag":
        chunk = s // (2 * world)
        rows = torch.cat([torch.arange(c * chunk, (c + 1) * chunk, device="cuda")
                          for c in (rank, 2 * world - 1 - rank)])
    else:
        rows = slice(rank * s // world, (rank + 1) * s // world)
    opts = [torch.optim.SGD(m.parameters(), lr=50.0) for m in (whole, parallel)]
    worst, first = 0.0, None
    for step in range(args.steps):
        for o in opts:
            o.zero_grad()
        loss = (whole(x) - target).square().sum() / target.numel()
        loss.backward()
        # The rank's rows' share of the same loss; the shares sum to it.
        share = (parallel(x[:, rows]) - target[:, rows]).square().sum() / target.numel()
        share.backward()
        for weight in parallel.parameters():
            dist.all_reduce(weight.grad)
        total = share.detach().clone()
        dist.all_reduce(total)
        for o in opts:
            o.step()
        first = loss.item() if first is None else first
        gap = abs(total.item() - loss.item()) / loss.item()
        worst = max(worst, gap)
        if rank == 0:
            print(f"step {step:2d}: loss one GPU {loss.item():.6f}, sequence-parallel on {world} "
                  f"GPUs {total.item():.6f} (relative gap {gap:.1e})", flush=True)
    # The losses agree, and training lowered them.
    ok = worst < 1e-2 and loss.item() < first
    if rank == 0:
        print(tessel_torch.last_choices()[4])
        print(tessel_torch.last_choices()[5])
        print(f"largest gap {worst:.1e}, loss {first:.6f} -> {loss.item():.6f}: "
              f"{'PASS' if ok else 'FAIL'}")
    tessel_torch.sp_release()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
