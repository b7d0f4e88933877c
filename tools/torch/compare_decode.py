"""Tessel's decode operators against a float32 reference over the same paged cache.

    python3 tools/torch/compare_decode.py --prefix PREFIX [--seed N]

On the GPU machine, with PREFIX a `cmake --install` tree of Tessel: builds
random paged KV caches the way a serving engine leaves them (the block
table a random permutation of the cache's pages, spare pages of garbage
between them, ragged lengths with a sequence of one key and ones that end
inside a page; page sizes 16, 64 and 256), runs torch.ops.tessel.paged_decode
(GQA) and torch.ops.tessel.mla_decode, and compares each output with
attention computed in float32 on the pages each sequence's table names.
The error is |out - ref| / |ref| over the whole output; bf16 must stay
within 2e-2. The shapes take both the unsplit path (enough sequences to
fill the GPU) and the split one (a few long sequences), a sequence of no
keys (zeros), an e4m3 cache with per-tensor scales, and table entries
past a sequence's pages that point nowhere (-1: the kernels must not read
them). Exit status 0 when every check passes.
"""
import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tessel_torch  # noqa: E402

TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 2e-2}


def rel(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm()).item()


def paged_layout(lengths, page_size, gen, spare=7, unused="random"):
    """A block table (int32, on the GPU) for sequences of `lengths` keys and
    the number of pages the cache needs. Each sequence's pages are taken in
    the order of a random permutation of the cache's pages, so neighbours in
    a sequence are scattered over the cache, with `spare` pages no sequence
    uses. The entries past a sequence's pages are random pages
    (unused="random") or -1 (unused="invalid")."""
    counts = [math.ceil(n / page_size) for n in lengths]
    # One column more than the longest needs: every row has unused entries.
    max_pages = max(counts) + 1
    pages = sum(counts) + spare
    order = torch.randperm(pages, generator=gen)
    if unused == "invalid":
        table = torch.full((len(lengths), max_pages), -1, dtype=torch.int32)
    else:
        table = torch.randint(0, pages, (len(lengths), max_pages), generator=gen,
                              dtype=torch.int32)
    taken = 0
    for b, count in enumerate(counts):
        table[b, :count] = order[taken:taken + count].to(torch.int32)
        taken += count
    return table, pages


def gather(cache, table_row, length, page_size):
    """The first `length` rows of one sequence, its pages in table order:
    [length, ...] in float32."""
    count = math.ceil(length / page_size)
    idx = table_row[:count].long().to(cache.device)
    rows = cache.index_select(0, idx).reshape(count * page_size, *cache.shape[2:])
    return rows[:length].float()


def normal_on_gpu(gen, dtype):
    """randn(*shape) on the GPU in `dtype`, seeded from the CPU generator
    that drives the layouts, so that a --seed reproduces a whole run."""
    seed = int(torch.randint(1 << 30, (1,), generator=gen))
    cuda_gen = torch.Generator(device="cuda").manual_seed(seed)
    return lambda *shape: torch.randn(*shape, device="cuda", dtype=dtype, generator=cuda_gen)


def paged_reference(q, k_cache, v_cache, table, lengths, scale):
    batch, heads_q, head_dim = q.shape
    page_size, heads_kv = k_cache.shape[1], k_cache.shape[2]
    group = heads_q // heads_kv
    out = torch.zeros(batch, heads_q, head_dim, device=q.device, dtype=torch.float32)
    for b, length in enumerate(lengths):
        if length == 0:
            continue
        k = gather(k_cache, table[b], length, page_size)  # [L, Hkv, D]
        v = gather(v_cache, table[b], length, page_size)
        # Query head h reads kv head h // group.
        qb = q[b].float().reshape(heads_kv, group, head_dim)
        s = torch.einsum("hgd,lhd->hgl", qb, k) * scale
        p = torch.softmax(s, dim=-1)
        out[b] = torch.einsum("hgl,lhd->hgd", p, v).reshape(heads_q, head_dim)
    return out


def mla_reference(q, cache, table, lengths, scale, latent):
    batch, heads, _ = q.shape
    page_size = cache.shape[1]
    out = torch.zeros(batch, heads, latent, device=q.device, dtype=torch.float32)
    for b, length in enumerate(lengths):
        if length == 0:
            continue
        rows = gather(cache, table[b], length, page_size)  # [L, latent + rope]
        s = (q[b].float() @ rows.t()) * scale
        p = torch.softmax(s, dim=-1)
        out[b] = p @ rows[:, :latent]
    return out


def ragged(page_size, extra=()):
    """Lengths with one key, ends inside a page and on a page's end, and a
    few longer ones."""
    return [1, 3 * page_size + 5, 4 * page_size, 2 * page_size - 1, 1000, 2777] + list(extra)


def quantized(cache):
    """An e4m3 copy of `cache` with a per-tensor scale (amax / 448), and the
    values it stands for in float32."""
    scale = max(cache.float().abs().max().item() / 448.0, 1e-12)
    codes = (cache.float() / scale).to(torch.float8_e4m3fn)
    return codes, scale, codes.float() * scale


def check_paged(name, lengths, heads_q, heads_kv, head_dim, page_size, gen, dtype=torch.bfloat16,
                scale=None, unused="random", fp8=False):
    table, pages = paged_layout(lengths, page_size, gen, unused=unused)
    rnd = normal_on_gpu(gen, dtype)
    q = rnd(len(lengths), heads_q, head_dim)
    k_cache = rnd(pages, page_size, heads_kv, head_dim)
    v_cache = rnd(pages, page_size, heads_kv, head_dim)
    lengths_dev = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    k_arg, v_arg, k_scale, v_scale = k_cache, v_cache, 1.0, 1.0
    if fp8:
        # The kernel reads the codes; the reference the values they stand for.
        k_arg, k_scale, k_cache = quantized(k_cache)
        v_arg, v_scale, v_cache = quantized(v_cache)
    try:
        out = tessel_torch.paged_decode(q, k_arg, v_arg, table.cuda(), lengths_dev, scale,
                                        k_scale, v_scale)
    except RuntimeError as e:
        print(f"  paged {name}: heads {heads_q}/{heads_kv} d={head_dim} page={page_size}: FAIL: {e}")
        return False
    ref = paged_reference(q, k_cache, v_cache, table, lengths,
                          1.0 / math.sqrt(head_dim) if scale is None else scale)
    shape_ok = out.shape == q.shape and out.dtype == dtype
    err = rel(out, ref) if shape_ok else float("nan")
    ok = shape_ok and err < TOLERANCE[dtype]
    print(f"  paged {name}: b={len(lengths)} heads {heads_q}/{heads_kv} d={head_dim} "
          f"page={page_size} {str(dtype).replace('torch.', '')} max_len={max(lengths)}"
          f"{'' if scale is None else f' scale={scale}'}: rel err {err:.1e} "
          f"{'ok' if ok else 'FAIL'}{'' if shape_ok else f' (out {tuple(out.shape)} {out.dtype})'}")
    print(f"    ran: {tessel_torch.last_choices()[2]}")
    return ok


def check_mla(name, lengths, heads, page_size, gen, dtype=torch.bfloat16, scale=None,
              unused="random", latent=512, rope=64):
    table, pages = paged_layout(lengths, page_size, gen, unused=unused)
    rnd = normal_on_gpu(gen, dtype)
    q = rnd(len(lengths), heads, latent + rope)
    cache = rnd(pages, page_size, latent + rope)
    lengths_dev = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    try:
        out = tessel_torch.mla_decode(q, cache, table.cuda(), lengths_dev, scale)
    except RuntimeError as e:
        print(f"  mla {name}: heads={heads} page={page_size}: FAIL: {e}")
        return False
    ref = mla_reference(q, cache, table, lengths,
                        1.0 / math.sqrt(latent + rope) if scale is None else scale, latent)
    shape_ok = out.shape == (len(lengths), heads, latent) and out.dtype == dtype
    err = rel(out, ref) if shape_ok else float("nan")
    ok = shape_ok and err < TOLERANCE[dtype]
    print(f"  mla {name}: b={len(lengths)} heads={heads} {latent}+{rope} page={page_size} "
          f"{str(dtype).replace('torch.', '')} max_len={max(lengths)}"
          f"{'' if scale is None else f' scale={scale}'}: rel err {err:.1e} "
          f"{'ok' if ok else 'FAIL'}{'' if shape_ok else f' (out {tuple(out.shape)} {out.dtype})'}")
    print(f"    ran: {tessel_torch.last_choices()[3]}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", required=True, help="Tessel's install prefix")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    module = tessel_torch.load(args.prefix)
    print(f"tessel {module.version()}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    gen = torch.Generator().manual_seed(args.seed)
    ok = True

    print("GQA paged decode (relative error against float32 attention over the gathered pages):")
    for page_size in (16, 64, 256):
        # A few sequences: the keys are split across blocks and combined.
        ok &= check_paged("ragged", ragged(page_size), 32, 8, 128, page_size, gen)
        ok &= check_paged("ragged", ragged(page_size), 8, 1, 128, page_size, gen)
        ok &= check_paged("ragged", ragged(page_size), 16, 16, 64, page_size, gen)
    # Enough sequences to fill the GPU without splits.
    many = [int(n) for n in torch.randint(1, 2048, (96,), generator=gen)] + [1, 17]
    ok &= check_paged("many", many, 32, 8, 128, 16, gen)
    ok &= check_paged("many", many, 64, 8, 128, 64, gen)
    ok &= check_paged("long", [8192 + 17, 5000], 32, 8, 128, 64, gen)
    ok &= check_paged("f16", ragged(64), 32, 8, 128, 64, gen, dtype=torch.float16)
    ok &= check_paged("scale", ragged(16), 32, 8, 128, 16, gen, scale=0.05)
    # An e4m3 cache with per-tensor scales, unsplit and split.
    ok &= check_paged("e4m3", ragged(16), 32, 8, 128, 16, gen, fp8=True)
    ok &= check_paged("e4m3 many", many, 32, 8, 128, 64, gen, fp8=True)
    ok &= check_paged("empty", [0, 1, 100, 300], 32, 8, 128, 64, gen, unused="invalid")

    print("MLA decode (relative error against float32 attention over the gathered pages):")
    for page_size in (16, 64, 256):
        ok &= check_mla("ragged", ragged(page_size), 128, page_size, gen)
    ok &= check_mla("ragged", ragged(64), 16, 64, gen)
    many = [int(n) for n in torch.randint(1, 2048, (64,), generator=gen)] + [1, 17]
    ok &= check_mla("many", many, 128, 64, gen)
    ok &= check_mla("long", [8192 + 17, 5000], 128, 64, gen)
    ok &= check_mla("scale", ragged(64), 128, 64, gen, scale=0.03)
    ok &= check_mla("empty", [0, 1, 100, 300], 128, 64, gen, unused="invalid")

    print("last_choices():")
    ops = ("attention_fwd", "attention_bwd", "paged_decode", "mla_decode")
    for op, choice in zip(ops, tessel_torch.last_choices()):
        print(f"  {op}: {choice or '(not called)'}")
    print("ALL PASSED" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
