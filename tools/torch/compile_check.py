#!/usr/bin/env python3
"""torch.compile over Tessel's attention operators.

A small transformer block whose attention is tessel_torch.attention,
compiled with fullgraph=True (a graph break is an error), must give the
eager block's output and gradients; torch._dynamo.explain must count no
break. The fake implementations tessel_torch registers are what let the
compiler trace the operators without running them.

    python3 tools/torch/compile_check.py --prefix /opt/tessel
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tessel_torch  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self, dim, heads, heads_kv):
        super().__init__()
        self.heads, self.heads_kv, self.head_dim = heads, heads_kv, dim // heads
        self.q = torch.nn.Linear(dim, dim, bias=False)
        self.kv = torch.nn.Linear(dim, 2 * heads_kv * self.head_dim, bias=False)
        self.out = torch.nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim)
        k, v = self.kv(x).view(b, s, 2, self.heads_kv, self.head_dim).unbind(2)
        o = tessel_torch.attention(q, k, v, causal=True)
        return x + self.out(o.reshape(b, s, -1))


def relative(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--prefix", required=True, help="where Tessel is installed")
    args = p.parse_args()
    tessel_torch.load(args.prefix)
    torch.manual_seed(0)
    block = Block(1024, 8, 2).cuda().to(torch.bfloat16)
    x = torch.randn(2, 512, 1024, device="cuda", dtype=torch.bfloat16)

    def step(model):
        block.zero_grad()
        xi = x.clone().requires_grad_(True)
        y = model(xi)
        y.float().square().mean().backward()
        return y.detach(), xi.grad, [p.grad.clone() for p in block.parameters()]

    eager = step(block)
    explanation = torch._dynamo.explain(block)(x)
    compiled = step(torch.compile(block, fullgraph=True))
    errors = [relative(compiled[0], eager[0]), relative(compiled[1], eager[1])]
    errors += [relative(c, e) for c, e in zip(compiled[2], eager[2])]
    print(f"torch {torch.__version__}: graphs {explanation.graph_count}, breaks "
          f"{explanation.graph_break_count}; compiled against eager: output {errors[0]:.1e}, "
          f"dx {errors[1]:.1e}, weights {max(errors[2:]):.1e}")
    ok = explanation.graph_break_count == 0 and max(errors) < 2e-2
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
