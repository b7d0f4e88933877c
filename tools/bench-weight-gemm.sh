#!/usr/bin/env bash
# Weight-only quantised GEMMs on the GPU machine against torch's dense bf16
# product and its int4 product (tools/weight-gemm-reference.py), timed in
# the same run: the fused kernel at 1, 16 and 64 tokens with the tiles and
# K split tessel::weight_gemm picks, int4 and int8; then the many-token
# path's two launches at 4096 tokens, the dequantisation and the bf16
# gemm. Tessel's launches run back to back (TESSEL_TIME_BATCH), as the
# references' run in a CUDA graph. Usage:
#   tools/bench-weight-gemm.sh [path/to/tessel] [reference.json]
set -euo pipefail
cd "$(dirname "$0")/.."
TESSEL=${1:-build/bin/tessel}
export TESSEL_TIME_BATCH=${TESSEL_TIME_BATCH:-20}
python3 tools/weight-gemm-reference.py ${2:+--json "$2"}
SMS=${SMS:-132} # H100 and H200 SXM
ms() { "$@" | tail -1 | grep -oE 'median [0-9.]+ ms|[0-9.]+ GB/s' | tr '\n' ' '; }
for shape in "4096 4096" "14336 4096" "4096 14336"; do
  set -- $shape
  N=$1 K=$2
  for M in 1 16 64; do
    # fusedConfig() in kernels/gemm/WeightGemmCall.cpp
    BM=$(( M <= 16 ? 16 : (M <= 32 ? 32 : 64) ))
    STAGES=$(( BM <= 32 ? 6 : 4 ))
    TILES=$(( ((N + 63) / 64) * ((M + BM - 1) / BM) ))
    S=1
    if (( TILES < SMS )); then
      S=$(( (2 * SMS + TILES - 1) / TILES )); MAXS=$(( K / 128 / 4 ))
      (( S > MAXS )) && S=$MAXS
    fi
    OUT=$([ "$S" -gt 1 ] && echo f32 || echo bf16)
    for W in int4 int8; do
      echo "weight_gemm $W M=$M N=$N K=$K split_k=$S: $(ms "$TESSEL" bench weight_gemm --param weights=$W \
        --param M=$M --param N=$N --param K=$K --param block_m=$BM --param stages=$STAGES \
        --param split_k=$S --param out=$OUT --param instruction=wgmma)"
    done
  done
  echo "weight_dequantize int4 N=$N K=$K: $(ms "$TESSEL" bench weight_dequantize --param N=$N --param K=$K)"
  echo "gemm bf16 M=4096 N=$N K=$K: $(ms "$TESSEL" bench gemm --param in=bf16 --param out=bf16 \
    --param transpose_b=1 --param M=4096 --param N=$N --param K=$K --param block_m=128 \
    --param block_n=256 --param block_k=64 --param threads=256 --param stages=3 --param swizzle=8 \
    --param tma_store=1 --param persistent=1)"
done
