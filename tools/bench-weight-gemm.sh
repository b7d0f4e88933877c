#!/usr/bin/env bash
# Weight-only quantised GEMMs on the GPU machine against torch's dense bf16
# product and its int4 product (tools/weight-gemm-reference.py), timed in
# the same run: the fused kernel at 1, 16 and 64 tokens with the K split
# tessel::weight_gemm picks (and its neighbours), the dequantise pass of the
# many-token path, and the bf16 gemm that follows it. Usage:
#   tools/bench-weight-gemm.sh [path/to/tessel] [reference.json]
set -euo pipefail
cd "$(dirname "$0")/.."
TESSEL=${1:-build/bin/tessel}
python3 tools/weight-gemm-reference.py ${2:+--json "$2"}
SMS=${SMS:-132} # H100 and H200 SXM
for shape in "4096 4096" "14336 4096" "4096 14336"; do
  set -- $shape
  N=$1 K=$2
  for M in 1 16 64; do
    BM=$(( M <= 16 ? 16 : (M <= 32 ? 32 : 64) ))
    TILES=$(( ((N + 63) / 64) * ((M + BM - 1) / BM) ))
    PICK=$(( (2 * SMS + TILES - 1) / TILES ))
    MAXS=$(( K / 128 / 4 )); (( PICK > MAXS )) && PICK=$MAXS; (( PICK < 1 )) && PICK=1
    for S in $(printf "%s\n" 1 $PICK $((PICK * 2)) | sort -un); do
      STAGES=$(( BM <= 32 ? 6 : 4 ))
      OUT=$([ "$S" -gt 1 ] && echo f32 || echo bf16)
      "$TESSEL" bench weight_gemm --param M=$M --param N=$N --param K=$K --param block_m=$BM \
        --param stages=$STAGES --param split_k=$S --param out=$OUT --param instruction=wgmma | tail -1
    done
  done
  "$TESSEL" bench weight_dequantize --param N=$N --param K=$K | tail -1
  "$TESSEL" bench gemm --param in=bf16 --param out=bf16 --param transpose_b=1 --param M=4096 \
    --param N=$N --param K=$K --param block_m=128 --param block_n=256 --param block_k=64 \
    --param threads=256 --param stages=3 --param swizzle=8 --param tma_store=1 --param persistent=1 | tail -1
done
