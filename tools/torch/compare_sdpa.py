"""Tessel's PyTorch attention against F.scaled_dot_product_attention.

    python3 tools/torch/compare_sdpa.py --prefix PREFIX [--tessel path/to/tessel]

On the GPU machine, with PREFIX a `cmake --install` tree of Tessel:
  1. outputs and gradients (dq, dk, dv) of both against a float32 reference
     computed by SDPA on upcast tensors: MHA and GQA, causal and full, bf16;
  2. forward and backward time of the operators against SDPA (cuDNN
     backend) in the same run, and against `tessel bench attention` at the
     same shape when --tessel is given (the operators must be within 5% of it);
  3. training steps of a small attention layer with either attention, from
     the same initial weights on the same batches: the losses must agree to
     bf16 precision.
Exit status 0 when every check passes.
"""
import argparse
import os
import re
import subprocess
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tessel_torch  # noqa: E402


def sdpa(q, k, v, causal, backend=None):
    """SDPA on BSHD tensors (it takes BHSD)."""
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    gqa = q.shape[2] != k.shape[2]
    if backend is None:
        out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=gqa)
    else:
        from torch.nn.attention import sdpa_kernel
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=gqa)
    return out.transpose(1, 2)


def rel(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm()).item()


def check_numerics(batch, seq, heads_q, heads_kv, d, causal, tol):
    g = torch.Generator(device="cuda").manual_seed(seq + heads_kv + causal)
    def rnd(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v = rnd(batch, seq, heads_q, d), rnd(batch, seq, heads_kv, d), rnd(batch, seq, heads_kv, d)
    dout = rnd(batch, seq, heads_q, d)
    results = {}
    for name, fn, dtype in (("tessel", tessel_torch.attention, torch.bfloat16),
                            ("sdpa", sdpa, torch.bfloat16),
                            ("fp32", sdpa, torch.float32)):
        xs = [x.detach().to(dtype).requires_grad_() for x in (q, k, v)]
        out = fn(*xs, causal=causal)
        out.backward(dout.to(dtype))
        results[name] = [out] + [x.grad for x in xs]
    ref = results["fp32"]
    errs = {n: [rel(a, b) for a, b in zip(results[n], ref)] for n in ("tessel", "sdpa")}
    ok = all(e < tol for e in errs["tessel"])
    print(f"  b={batch} s={seq} heads {heads_q}/{heads_kv} d={d} {'causal' if causal else 'full  '}: "
          f"tessel out/dq/dk/dv {' '.join(f'{e:.1e}' for e in errs['tessel'])} | "
          f"sdpa bf16 {' '.join(f'{e:.1e}' for e in errs['sdpa'])}  {'ok' if ok else 'FAIL'}")
    return ok


def median_ms(fn, reps):
    """Median time of one call, timed as `tessel bench` times a launch (one
    between two events, then a sync) but with the host's work kept out:
    the GPU sleeps for half a millisecond before the first event, so that
    PyTorch's dispatch and Tessel's argument checks are done by the time it
    gets to the call."""
    for _ in range(5):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def bench_tessel_tool(tessel, batch, seq, heads, d, causal):
    """ms of `tessel bench attention` (fwd, bwd) at one shape."""
    cmd = [tessel, "bench", "attention", "--reps", "30"]
    for key, value in (("batch", batch), ("seqlen_q", seq), ("seqlen_k", seq), ("heads_q", heads),
                       ("heads_kv", heads), ("head_dim", d), ("causal", int(causal))):
        cmd += ["--param", f"{key}={value}"]
    text = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    ms = {}
    for line in text.splitlines():
        m = re.match(rf"\s*{d}\s+{seq}\s+(full|causal)\s+(fwd|bwd)\s+([0-9.]+)", line)
        if m and m.group(1) == ("causal" if causal else "full"):
            ms[m.group(2)] = float(m.group(3))
    return ms


def check_speed(tessel, batch, seq, heads, d, causal, reps, rounds=3):
    q, k, v, dout = (torch.randn(batch, seq, heads, d, device="cuda", dtype=torch.bfloat16)
                     for _ in range(4))
    scale = d ** -0.5
    fwd = lambda: torch.ops.tessel.attention_fwd(q, k, v, causal, scale)
    out, lse = fwd()
    bwd = lambda: torch.ops.tessel.attention_bwd(dout, q, k, v, out, lse, causal, scale)
    from torch.nn.attention import SDPBackend
    qs, ks, vs = (x.detach().requires_grad_() for x in (q, k, v))
    cudnn_fwd = lambda: sdpa(qs, ks, vs, causal, SDPBackend.CUDNN_ATTENTION)
    o = cudnn_fwd()
    cudnn_bwd = lambda: torch.autograd.grad(o, (qs, ks, vs), dout, retain_graph=True)
    # Rounds alternate between the operators, cuDNN and the tool; each
    # figure is the median over the rounds.
    samples = {"ops": [], "ref": [], "tool": []}
    for _ in range(rounds):
        samples["ops"].append({"fwd": median_ms(fwd, reps), "bwd": median_ms(bwd, reps)})
        samples["ref"].append({"fwd": median_ms(cudnn_fwd, reps), "bwd": median_ms(cudnn_bwd, reps)})
        if tessel:
            samples["tool"].append(bench_tessel_tool(tessel, batch, seq, heads, d, causal))
    med = lambda runs, p: sorted(r[p] for r in runs)[len(runs) // 2] if runs else None
    ok = True
    choices = tessel_torch.last_choices()
    for p in ("fwd", "bwd"):
        ops, ref, tool = med(samples["ops"], p), med(samples["ref"], p), med(samples["tool"], p)
        line = (f"  {p} b={batch} s={seq} h={heads} d={d} {'causal' if causal else 'full  '}: "
                f"torch.ops.tessel {ops:.3f} ms, cuDNN {ref:.3f} ms (ratio {ref / ops:.2f})")
        if tool:
            within = ops <= tool * 1.05
            ok &= within
            line += f", tessel bench {tool:.3f} ms ({ops / tool:.3f}x) {'ok' if within else 'FAIL'}"
        print(line)
    print(f"    ran: {choices[0]}\n         {choices[1]}")
    return ok


class AttentionLayer(torch.nn.Module):
    def __init__(self, dim, heads, kv_heads, attend):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, dim // heads
        self.qkv = torch.nn.Linear(dim, (heads + 2 * kv_heads) * self.d)
        self.out = torch.nn.Linear(dim, dim)
        self.attend = attend

    def forward(self, x):
        b, s, _ = x.shape
        qkv = self.qkv(x).to(torch.bfloat16)
        q, k, v = qkv.split([self.heads * self.d, self.kv_heads * self.d, self.kv_heads * self.d], -1)
        q = q.reshape(b, s, self.heads, self.d)
        k = k.reshape(b, s, self.kv_heads, self.d)
        v = v.reshape(b, s, self.kv_heads, self.d)
        o = self.attend(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)
        return x + self.out(o.reshape(b, s, -1).float())


def check_training(steps, tol):
    torch.manual_seed(0)
    layers = {"tessel": AttentionLayer(512, 8, 2, tessel_torch.attention).cuda()}
    layers["sdpa"] = AttentionLayer(512, 8, 2, sdpa).cuda()
    layers["sdpa"].load_state_dict(layers["tessel"].state_dict())
    opts = {n: torch.optim.Adam(m.parameters(), lr=1e-3) for n, m in layers.items()}
    g = torch.Generator(device="cuda").manual_seed(1)
    ok = True
    for step in range(steps):
        x = torch.randn(4, 512, 512, device="cuda", generator=g)
        target = torch.randn(4, 512, 512, device="cuda", generator=g)
        losses = {}
        for n, m in layers.items():
            opts[n].zero_grad()
            loss = F.mse_loss(m(x), target)
            loss.backward()
            opts[n].step()
            losses[n] = loss.item()
        diff = abs(losses["tessel"] - losses["sdpa"]) / abs(losses["sdpa"])
        ok &= diff < tol
        if step % 5 == 0 or step == steps - 1 or diff >= tol:
            print(f"  step {step:2d}: loss tessel {losses['tessel']:.5f} sdpa {losses['sdpa']:.5f} "
                  f"(rel diff {diff:.1e}) {'ok' if diff < tol else 'FAIL'}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", required=True, help="Tessel's install prefix")
    ap.add_argument("--tessel", help="the tessel tool, to time `tessel bench attention` in the same run")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    module = tessel_torch.load(args.prefix)
    print(f"tessel {module.version()}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    ok = True
    print("numerics (relative error against fp32 SDPA):")
    for heads_q, heads_kv in ((16, 16), (16, 4)):
        for causal in (False, True):
            ok &= check_numerics(2, 1000, heads_q, heads_kv, 128, causal, 2e-2)
    ok &= check_numerics(3, 777, 8, 2, 64, True, 2e-2)
    print("speed (bf16, FlashAttention-3 shapes: batch * seqlen = 16k, heads * head_dim = 2048):")
    for d, seq in ((128, 4096), (64, 1024)):
        for causal in (False, True):
            ok &= check_speed(args.tessel, 16384 // seq, seq, 2048 // d, d, causal, args.reps)
    print("training a causal GQA attention layer (Adam, bf16 attention):")
    ok &= check_training(args.steps, 2e-2)
    print("ALL PASSED" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
