#!/usr/bin/env python3
"""Mutation fuzzing of tessel-opt and tessel-translate.

Takes the lit inputs (each `// -----` case on its own), mutates them with a
deterministic generator (numbers swapped for boundary values, lines dropped,
duplicated or swapped, types and op names exchanged, characters deleted), and
runs each mutant through tessel-opt's passes and pipelines and, when that
succeeds, tessel-translate --emit-cuda. Any run that crashes (a signal, an
exit code other than 0 or 1, LLVM's crash banner) or outlasts its timeout is
a failure; its input is written next to the report so it can be replayed.

  fuzz.py --bin BUILD/bin --inputs tests/lit [--seconds 120] [--seed 1] [--out DIR]
"""
import argparse
import os
import random
import re
import subprocess
import sys
import time

BOUNDARY = ["0", "-1", "1", "-32", "3", "7", "31", "33", "65", "127", "255", "1048576",
            "2147483647", "2147483648", "4294967296", "4294967424", "-9223372036854775808",
            "9223372036854775807", "18446744073709551615", "99999999999999999999999"]
TYPES = ["f16", "bf16", "f32", "f64", "i1", "i8", "i32", "i64", "index"]
SPACES = ["global", "shared", "fragment", "local"]
PASSES = ["tessel-verify-kernel", "tessel-layout-inference", "tessel-warp-specialize",
          "tessel-software-pipeline", "tessel-insert-barriers", "tessel-lower-tile-ops",
          "tessel-defer-wgmma-waits", "tessel-schedule-pingpong", "tessel-defer-bulk-waits",
          "tessel-verify-barriers"]
ARCH_PASSES = PASSES[:6]
ARCHES = ["sm_80", "sm_90a", "sm_100a"]


def cases(root):
    """Every `// -----` case of every .mlir file under root."""
    out = []
    for dirpath, _, files in os.walk(root):
        for name in sorted(files):
            if not name.endswith(".mlir"):
                continue
            with open(os.path.join(dirpath, name)) as f:
                text = f.read()
            for part in text.split("// -----"):
                body = "\n".join(l for l in part.splitlines() if not l.strip().startswith("//"))
                if "tile.kernel" in body:
                    out.append((name, body))
    return sorted(out)


def mutate(text, rng):
    lines = text.splitlines()
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(8)
        if kind == 0:  # a number becomes a boundary value
            nums = list(re.finditer(r"(?<![\w#%@])-?\d+(?![\w.])", text))
            if nums:
                m = rng.choice(nums)
                text = text[:m.start()] + rng.choice(BOUNDARY) + text[m.end():]
                lines = text.splitlines()
            continue
        if kind == 1 and lines:  # drop a line
            del lines[rng.randrange(len(lines))]
        elif kind == 2 and lines:  # duplicate a line
            i = rng.randrange(len(lines))
            lines.insert(rng.randrange(len(lines) + 1), lines[i])
        elif kind == 3 and len(lines) > 1:  # swap two lines
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == 4:  # exchange an element type
            t = "\n".join(lines)
            hits = [m for m in re.finditer(r"\b(f16|bf16|f32|f64|i1|i32|i64)\b", t)]
            if hits:
                m = rng.choice(hits)
                t = t[:m.start()] + rng.choice(TYPES) + t[m.end():]
            lines = t.splitlines()
        elif kind == 5:  # exchange a memory space
            t = "\n".join(lines)
            hits = list(re.finditer(r"space<(\w+)>", t))
            if hits:
                m = rng.choice(hits)
                t = t[:m.start(1)] + rng.choice(SPACES) + t[m.end(1):]
            lines = t.splitlines()
        elif kind == 6:  # delete a few characters
            t = "\n".join(lines)
            if t:
                i = rng.randrange(len(t))
                t = t[:i] + t[i + rng.randint(1, 4):]
            lines = t.splitlines()
        else:  # move an op into another region
            ops = [i for i, l in enumerate(lines) if re.match(r"\s+(tile|tilenv)\.", l)]
            if len(ops) > 1:
                i = rng.choice(ops)
                line = lines.pop(i)
                lines.insert(rng.choice(ops[:-1]), line)
        text = "\n".join(lines)
    return text


def run(cmd, stdin, timeout):
    try:
        p = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout, text=True)
    except subprocess.TimeoutExpired:
        return "hang", "", ""
    crashed = p.returncode not in (0, 1) or "PLEASE submit a bug report" in p.stderr \
        or "Stack dump" in p.stderr
    return ("crash" if crashed else "ok" if p.returncode == 0 else "error"), p.stdout, p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    opt = os.path.join(args.bin, "tessel-opt")
    translate = os.path.join(args.bin, "tessel-translate")
    corpus = cases(args.inputs)
    if not corpus:
        print("fuzz: no inputs found under", args.inputs)
        return 2
    rng = random.Random(args.seed)
    deadline = time.monotonic() + args.seconds
    runs = failures = translated = 0
    counts = {"ok": 0, "error": 0}
    out = args.out or os.getcwd()
    os.makedirs(out, exist_ok=True)
    while time.monotonic() < deadline:
        name, base = rng.choice(corpus)
        text = mutate(base, rng)
        arch = rng.choice(ARCHES)
        choice = rng.randrange(4)
        if choice == 0:
            pipeline = [f"--tessel-pipeline=arch={arch}"]
        else:
            p = rng.choice(PASSES)
            opts = f"{{arch={arch}}}" if p in ARCH_PASSES else ""
            pipeline = [f"--pass-pipeline=builtin.module(tile.kernel({p}{opts}))"]
        results = [(opt, pipeline)]
        status, lowered, err = run([opt] + pipeline, text, args.timeout)
        runs += 1
        if status == "ok" and choice == 0:
            status2, _, err2 = run([translate, "--emit-cuda"], lowered, args.timeout)
            runs += 1
            translated += 1
            if status2 in ("crash", "hang"):
                status, err, text, results = status2, err2, lowered, [(translate, ["--emit-cuda"])]
        if status in ("crash", "hang"):
            failures += 1
            path = os.path.join(out, f"fuzz-failure-{failures}.mlir")
            with open(path, "w") as f:
                f.write(text)
            tool, flags = results[0]
            print(f"fuzz: {status}: {os.path.basename(tool)} {' '.join(flags)} < {path} "
                  f"(from {name})")
            print("\n".join(err.splitlines()[:15]))
        else:
            counts[status] += 1
    print(f"fuzz: {runs} runs over {len(corpus)} cases in {args.seconds:.0f} s (seed {args.seed}): "
          f"{counts['ok']} accepted, {counts['error']} rejected with a diagnostic, "
          f"{translated} translated to CUDA, {failures} crashes or hangs")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
