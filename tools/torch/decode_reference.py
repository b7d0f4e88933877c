"""The references Tessel's decode kernels are measured against, timed on one GPU.

    python3 tools/torch/decode_reference.py [--json FILE] [--reps N] [--quick]
                                            [--seqlens L ...]

Three kinds of rows, each the median of --reps timed calls (CUDA events,
after warmup):
  d2d_copy      dst.copy_(src) of a 2 GiB bf16 buffer: the bandwidth a
                memory-bound decode kernel can hope for;
  paged_decode  F.scaled_dot_product_attention with one query token over
                pre-gathered contiguous K/V, every sequence of the same
                length (the padding-free case that flatters the
                reference): q [B, Hq, 1, D], k/v [B, Hkv, L, D], GQA through
                enable_gqa (or k/v repeated to Hq heads where a backend or
                this torch lacks it); each SDPA backend is tried and the
                fastest kept;
  mla_decode    MLA decode as torch writes it: q [B, 128, 576] and one
                latent cache [B, L, 576] shared by the heads, s = q kv^T
                (bf16 matmul) times the scale, softmax in float32 cast to
                bf16, o = p kv[:, :, :512] (bf16 matmul).
--seqlens adds paged_decode and mla_decode rows at those lengths.

With --json FILE it writes {"device": ..., "rows": [...]}, each row a flat
object of strings, numbers and booleans (read by Tessel's C++ side to put
the kernels' times beside these):
  {"op": "d2d_copy", "impl": "torch", "bytes", "ms", "gbps"}
  {"op": "paged_decode", "impl": "sdpa", "batch", "heads_q", "heads_kv",
   "head_dim", "seqlen", "dtype", "ms", "backend", "gqa"}
  {"op": "paged_decode", "impl": "gather+sdpa", ... the same, "page_size"}:
   the pages gathered by indexing (k_cache[block_table]) before SDPA
  {"op": "mla_decode", "impl": "torch", "batch", "heads", "seqlen",
   "latent", "rope", "dtype", "ms", "tflops"}
Only torch and the standard library. Exit status 1 when a row could not be
measured (it is left out; the others are still written).
"""
import argparse
import json
import math
import statistics
import sys
import warnings

import torch
import torch.nn.functional as F

# Inputs smaller than this are cycled through several copies, so that a rep
# does not find its operands in L2 (50 MB on H100) from the one before.
ROTATE_BYTES = 200e6
MAX_COPIES = 64


def copies_for(bytes_per_copy):
    """How many copies of an input set of this size the timing cycles through."""
    if bytes_per_copy >= ROTATE_BYTES:
        return 1
    return min(MAX_COPIES, math.ceil(ROTATE_BYTES / max(bytes_per_copy, 1)))


def median_ms(fn, inputs, reps, warmup=3):
    """Median ms of fn(*inputs[i]) over `reps` calls, rep i taking input set
    i mod len(inputs). Each call sits between two events; the GPU sleeps
    before the first one so that the host's launch work is out of the
    figure (what `tessel bench` measures is the kernel alone, too)."""
    for i in range(max(warmup, len(inputs))):
        fn(*inputs[i % len(inputs)])
    torch.cuda.synchronize()
    sleep = getattr(torch.cuda, "_sleep", None)
    times = []
    for i in range(reps):
        args = inputs[i % len(inputs)]
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        if sleep is not None:
            sleep(1_000_000)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def free_memory():
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def bench_copy(elements, reps):
    src = torch.randn(elements, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    nbytes = 2 * src.numel() * src.element_size()
    inputs = [(dst, src)]
    if nbytes < ROTATE_BYTES:
        inputs = [(torch.empty_like(src), torch.randn_like(src))
                  for _ in range(copies_for(nbytes))]
    ms = median_ms(lambda d, s: d.copy_(s), inputs, reps)
    del src, dst, inputs
    free_memory()
    return {"op": "d2d_copy", "impl": "torch", "bytes": nbytes, "ms": ms,
            "gbps": nbytes / (ms * 1e-3) / 1e9}


def sdpa_backends():
    """(name, context factory) of each SDPA backend this torch can be
    restricted to; just the default where it cannot."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        import contextlib
        return [("default", contextlib.nullcontext)]
    found = []
    for name in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"):
        backend = getattr(SDPBackend, name, None)
        if backend is not None:
            found.append((name, lambda b=backend: sdpa_kernel(b)))
    return found


def sdpa_gqa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def sdpa_plain(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def runs(fn, args):
    """Whether fn(*args) runs under the current backend restriction (a
    backend that cannot take the shape raises, and warns why)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(*args)
        torch.cuda.synchronize()
        return True
    except (RuntimeError, TypeError, AttributeError):
        # AttributeError: a torch without scaled_dot_product_attention.
        return False


def bench_paged(batch, heads_q, heads_kv, head_dim, seqlen, reps):
    dtype = torch.bfloat16
    group = heads_q // heads_kv
    per_copy = (batch * heads_q * head_dim + 2 * batch * heads_kv * seqlen * head_dim) * 2
    inputs = [(torch.randn(batch, heads_q, 1, head_dim, device="cuda", dtype=dtype),
               torch.randn(batch, heads_kv, seqlen, head_dim, device="cuda", dtype=dtype),
               torch.randn(batch, heads_kv, seqlen, head_dim, device="cuda", dtype=dtype))
              for _ in range(copies_for(per_copy))]
    repeated = None  # k/v repeated to heads_q, built on first need

    best = None
    for name, context in sdpa_backends():
        with context():
            if runs(sdpa_gqa, inputs[0]):
                fn, args, gqa = sdpa_gqa, inputs, "enable_gqa"
            else:
                if repeated is None:
                    repeated = [(q, k.repeat_interleave(group, dim=1),
                                 v.repeat_interleave(group, dim=1)) for q, k, v in inputs]
                if not runs(sdpa_plain, repeated[0]):
                    continue
                fn, args, gqa = sdpa_plain, repeated, "repeat"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ms = median_ms(fn, args, reps)
        if best is None or ms < best["ms"]:
            best = {"ms": ms, "backend": name, "gqa": gqa}
    del inputs, repeated
    free_memory()
    if best is None:
        raise RuntimeError("no SDPA backend ran this shape")
    return {"op": "paged_decode", "impl": "sdpa", "batch": batch, "heads_q": heads_q,
            "heads_kv": heads_kv, "head_dim": head_dim, "seqlen": seqlen, "dtype": "bfloat16",
            "ms": best["ms"], "backend": best["backend"], "gqa": best["gqa"]}


def bench_paged_gather(batch, heads_q, heads_kv, head_dim, seqlen, reps, page=16):
    """What a torch user of a paged cache runs: gather each sequence's pages
    (k_cache[block_table], pages in a random order) into contiguous K/V,
    then SDPA over them."""
    dtype = torch.bfloat16
    per_seq = seqlen // page
    pages = batch * per_seq
    k_cache = torch.randn(pages, page, heads_kv, head_dim, device="cuda", dtype=dtype)
    v_cache = torch.randn_like(k_cache)
    table = torch.randperm(pages, device="cuda", dtype=torch.int64).view(batch, per_seq)
    q = torch.randn(batch, heads_q, 1, head_dim, device="cuda", dtype=dtype)

    def gathered():
        k = k_cache[table].view(batch, seqlen, heads_kv, head_dim).transpose(1, 2)
        v = v_cache[table].view(batch, seqlen, heads_kv, head_dim).transpose(1, 2)
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ms = median_ms(gathered, [()], reps)
    del k_cache, v_cache, table, q
    free_memory()
    return {"op": "paged_decode", "impl": "gather+sdpa", "batch": batch, "heads_q": heads_q,
            "heads_kv": heads_kv, "head_dim": head_dim, "seqlen": seqlen, "page_size": page,
            "dtype": "bfloat16", "ms": ms, "backend": "default", "gqa": "enable_gqa"}


def mla_torch(q, kv, scale, latent):
    s = torch.matmul(q, kv.transpose(1, 2)).mul_(scale)
    p = torch.softmax(s, dim=-1, dtype=torch.float32).to(torch.bfloat16)
    return torch.matmul(p, kv[:, :, :latent])


def bench_mla(batch, seqlen, reps, heads=128, latent=512, rope=64):
    dtype = torch.bfloat16
    width = latent + rope
    scale = 1.0 / math.sqrt(width)
    per_copy = (batch * heads * width + batch * seqlen * width) * 2
    inputs = [(torch.randn(batch, heads, width, device="cuda", dtype=dtype),
               torch.randn(batch, seqlen, width, device="cuda", dtype=dtype))
              for _ in range(copies_for(per_copy))]
    ms = median_ms(lambda q, kv: mla_torch(q, kv, scale, latent), inputs, reps)
    del inputs
    free_memory()
    flops = 2 * batch * heads * seqlen * (width + latent)
    return {"op": "mla_decode", "impl": "torch", "batch": batch, "heads": heads,
            "seqlen": seqlen, "latent": latent, "rope": rope, "dtype": "bfloat16", "ms": ms,
            "tflops": flops / (ms * 1e-3) / 1e12}


def describe(row):
    if row["op"] == "d2d_copy":
        return (f"d2d_copy      torch  {row['bytes'] / 2**30:.2f} GiB moved       "
                f"{row['ms']:8.3f} ms  {row['gbps']:7.1f} GB/s")
    if row["op"] == "paged_decode":
        return (f"paged_decode  {row['impl']:<6} b={row['batch']} hq={row['heads_q']} hkv={row['heads_kv']} "
                f"d={row['head_dim']} L={row['seqlen']}  {row['ms']:8.3f} ms  "
                f"({row['backend']}, {row['gqa']})")
    return (f"mla_decode    torch  b={row['batch']} h={row['heads']} L={row['seqlen']} "
            f"{row['latent']}+{row['rope']}  {row['ms']:8.3f} ms  {row['tflops']:6.1f} TFLOP/s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", metavar="FILE", help="write the rows here")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="small shapes, for a smoke run")
    ap.add_argument("--seqlens", type=int, nargs="*", default=[],
                    help="more sequence lengths for the paged_decode and mla_decode rows")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("decode_reference.py needs a CUDA GPU", file=sys.stderr)
        return 1

    if args.quick:
        copy_elements = 32 << 20  # 64 MiB
        paged = (4, 8, 2, 128)
        mla_batches, seqlens = (4,), [512, 1024]
    else:
        copy_elements = 1 << 30  # 2 GiB of bf16
        paged = (64, 32, 8, 128)
        mla_batches, seqlens = (64, 132), [4096, 8192]
    seqlens += [s for s in args.seqlens if s not in seqlens]

    jobs = [("d2d_copy", lambda: bench_copy(copy_elements, args.reps))]
    for seqlen in seqlens:
        jobs.append((f"paged_decode L={seqlen}",
                     lambda s=seqlen: bench_paged(*paged, s, args.reps)))
        jobs.append((f"paged_decode gathered L={seqlen}",
                     lambda s=seqlen: bench_paged_gather(*paged, s, args.reps)))
    for batch in mla_batches:
        for seqlen in seqlens:
            jobs.append((f"mla_decode b={batch} L={seqlen}",
                         lambda b=batch, s=seqlen: bench_mla(b, s, args.reps)))

    device = torch.cuda.get_device_name()
    print(f"{device}, torch {torch.__version__}, median of {args.reps} reps")
    rows, failed = [], False
    for what, job in jobs:
        try:
            row = job()
        except RuntimeError as e:  # out of memory among them
            print(f"{what}: not measured: {e}", file=sys.stderr)
            failed = True
            free_memory()
            continue
        rows.append(row)
        print(describe(row))

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "rows": rows}, f, indent=1)
            f.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
