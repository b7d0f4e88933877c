"""An FP8 linear layer through tessel_torch, against torch and float64.

    python3 tools/torch/fp8_check.py --prefix /path/to/tessel/prefix

Quantises activations and a weight with tessel_torch.quantize (per row, and
MX), multiplies them with tessel_torch.scaled_mm, runs
tessel_torch.attention_fp8 with scales on the GPU, and checks: the codes and
scales against the arithmetic tessel::quantize documents (computed here in
torch), the product against float64 over the dequantised operands, the
per-row product against torch._scaled_mm's row-wise one, and that
torch.compile traces both operators. MX's product runs on sm_100a only; on
other GPUs its quantisation alone is checked. Prints PASS or FAIL per check
and exits 1 on any FAIL.
"""
import argparse
import sys

import torch

import tessel_torch

FP8_MAX = 448.0


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--prefix", required=True)
    args = parser.parse_args()
    tessel_torch.load(args.prefix)
    torch.manual_seed(0)
    m, n, k = 300, 512, 1024
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05
    failed = []

    def check(name, ok, detail):
        print(f"  {name}: {detail} ({'PASS' if ok else 'FAIL'})")
        if not ok:
            failed.append(name)

    # Per row: scale = amax / 448, codes of x * (448 / amax).
    qx, sx = tessel_torch.quantize(x, "row")
    qw, sw = tessel_torch.quantize(w, "row")
    # Tensor by tensor: torch divides by a Python number through its
    # reciprocal, which is not the IEEE quotient the kernel computes.
    amax = x.float().abs().amax(dim=1)
    fmax = torch.full_like(amax, FP8_MAX)
    check("row scales", torch.equal(sx, amax / fmax), f"{sx.shape} {sx.dtype}")
    want = (x.float() * (fmax / amax)[:, None]).to(torch.float8_e4m3fn)
    check("row codes", torch.equal(qx.view(torch.uint8), want.view(torch.uint8)),
          f"{qx.shape} {qx.dtype}")
    y = tessel_torch.scaled_mm(qx, qw, sx, sw)
    exact = (qx.float().double() * sx.double()[:, None]) @ (qw.float().double() * sw.double()[:, None]).T
    check("row product against float64", rel(y, exact) < 1e-2, f"{rel(y, exact):.2e}")
    ref = torch._scaled_mm(qx, qw.T, scale_a=sx[:, None], scale_b=sw[None, :],
                           out_dtype=torch.bfloat16)
    check("row product against torch._scaled_mm", rel(y, ref) < 1e-2, f"{rel(y, ref):.2e}")
    check("against the bf16 layer", rel(y, x.double() @ w.double().T) < 0.1,
          f"{rel(y, x.double() @ w.double().T):.2e}")

    # MX: a power-of-two scale per 32 of K, rounded up, in the blocked layout.
    qx, sx = tessel_torch.quantize(x, "mx")
    check("mx scales", sx.dtype == torch.float8_e8m0fnu and
          sx.shape == ((m + 127) // 128, k // 128, 32, 16), f"{tuple(sx.shape)} {sx.dtype}")
    blocked = sx.float().view(-1, k // 128, 32, 4, 4)  # [row atom, K tile, r % 32, quarter, g % 4]
    rows = blocked.permute(0, 3, 2, 1, 4).reshape(-1, k // 32)[:m]  # [M, K / 32]
    back = qx.float().view(m, k // 32, 32) * rows[:, :, None]
    check("mx dequantised against x", rel(back.view(m, k), x) < 0.07,
          f"{rel(back.view(m, k), x):.2e}")
    if torch.cuda.get_device_capability()[0] >= 10:
        qw, sw = tessel_torch.quantize(w, "mx")
        y = tessel_torch.scaled_mm(qx, qw, sx, sw)
        check("mx product against the bf16 layer", rel(y, x.double() @ w.double().T) < 0.1,
              f"{rel(y, x.double() @ w.double().T):.2e}")
    else:
        print("  mx product: not run (MX gemms run on sm_100a)")

    # torch.compile traces both operators (their fake implementations).
    @torch.compile(fullgraph=True)
    def layer(x, qw, sw):
        q, s = tessel_torch.quantize(x, "row")
        return tessel_torch.scaled_mm(q, qw, s, sw)

    qw, sw = tessel_torch.quantize(w, "row")
    sys.stdout.flush()
    compiled = layer(x, qw, sw)
    q, s = tessel_torch.quantize(x, "row")
    eager = tessel_torch.scaled_mm(q, qw, s, sw)
    check("torch.compile", torch.equal(compiled, eager), "fullgraph")

    # FP8 attention with per-tensor scales computed on the GPU (never read
    # by the host), against float32 attention of the dequantised values.
    b, seq, heads, d = 2, 256, 4, 128
    qkv = [torch.randn(b, seq, heads, d, device="cuda") * 3 for _ in range(3)]
    scales = [t.abs().amax().reshape(1) / FP8_MAX for t in qkv]
    q8, k8, v8 = [(t / s).to(torch.float8_e4m3fn) for t, s in zip(qkv, scales)]
    out = tessel_torch.attention_fp8(q8, k8, v8, causal=True, q_descale=scales[0],
                                     k_descale=scales[1], v_descale=scales[2])
    deq = [t8.float() * s for t8, s in zip((q8, k8, v8), scales)]
    ref = torch.nn.functional.scaled_dot_product_attention(
        *[t.transpose(1, 2) for t in deq], is_causal=True).transpose(1, 2)
    check("FP8 attention with device scales", out.dtype == torch.bfloat16 and rel(out, ref) < 6e-2,
          f"{rel(out, ref):.2e} against float32 of the dequantised values")

    # Bad input is an exception, not a crash: a 1-D b, and scales that do
    # not fit (tessel::gemm's own message).
    sys.stdout.flush()
    for name, call, says in (
            ("1-D b", lambda: tessel_torch.scaled_mm(q, s, qw, sw), "must be 2-D"),
            ("scales that do not fit", lambda: tessel_torch.scaled_mm(q, qw, sw, s), "scaleA")):
        try:
            call()
            check(name, False, "no error")
        except (RuntimeError, ValueError) as e:
            check(name, says in str(e), str(e).splitlines()[0][:120])
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
