#!/usr/bin/env bash
# The attention table against cuDNN in one run on the GPU machine: cuDNN's
# times (tools/attention-reference.py), `tessel tune flash_attention_fwd` on
# every forward row and `tessel tune flash_attention_bwd` on every backward
# row (the bench's K/V reduction, direct), then `tessel bench attention
# --reference ... --param config=auto`. Usage:
#   tools/bench-attention.sh [path/to/tessel] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
TESSEL=${1:-build/bin/tessel}
OUT=${2:-build/bench-attention}
ANCHORS=${ANCHORS:-../shared/bench}
mkdir -p "$OUT"
PYTHONPATH=$ANCHORS python3 tools/attention-reference.py "$OUT/ref.json" > "$OUT/ref.txt"
start=$(date +%s)
for d in 64 128 256; do
  for s in 1024 4096 8192; do
    for causal in 0 1; do
      "$TESSEL" tune flash_attention_fwd --param head_dim=$d --param batch=$((16384 / s)) \
        --param seqlen_q=$s --param seqlen_k=$s --param heads_q=$((2048 / d)) \
        --param heads_kv=$((2048 / d)) --param causal=$causal | grep -E "^recorded|wall"
    done
  done
done
for d in 64 128; do
  for s in 1024 4096 8192; do
    for causal in 0 1; do
      "$TESSEL" tune flash_attention_bwd --param head_dim=$d --param batch=$((16384 / s)) \
        --param seqlen_q=$s --param seqlen_k=$s --param heads_q=$((2048 / d)) \
        --param heads_kv=$((2048 / d)) --param causal=$causal --param kv_reduction=direct |
        grep -E "^recorded|wall"
    done
  done
done
echo "tuned every row in $(($(date +%s) - start)) s"
"$TESSEL" bench attention --reference "$OUT/ref.json" --param config=auto
