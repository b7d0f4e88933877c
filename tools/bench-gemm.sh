#!/usr/bin/env bash
# Tessel's GEMM against cuBLAS (torch.matmul through
# ../shared/bench/reference_anchors.py) on the GPU machine, alternating the
# two twice so that clock and power drift shows in both. Usage:
#   tools/bench-gemm.sh [path/to/tessel] [extra --param k=v ...]
set -euo pipefail
cd "$(dirname "$0")/.."
TESSEL=${1:-build/bin/tessel}; shift || true
ANCHORS=${ANCHORS:-../shared/bench}
CONFIG="--param block_m=128 --param block_n=256 --param block_k=64 --param threads=256 --param stages=3 --param swizzle=8 --param tma_store=1 --param persistent=1 --param out=f16"
for round in 1 2; do
  PYTHONPATH=$ANCHORS python3 -c "
import reference_anchors as r, torch
torch.backends.cuda.matmul.allow_tf32 = False
for row in r.gemm_rows([4096, 8192]): print('cublas', row['dtype'], row['M'], '%.3f ms %.1f TFLOP/s' % (row['ms'], row['tflops']))
"
  for dt in f16 bf16; do for n in 4096 8192; do
    "$TESSEL" bench gemm --param in=$dt $CONFIG "$@" --param M=$n --param N=$n --param K=$n
  done; done
done
