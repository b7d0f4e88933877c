#!/usr/bin/env bash
# Runs compute-sanitizer's memcheck, racecheck, synccheck and initcheck over
# every library kernel and each configuration axis the GPU tests cover
# (warp-specialized or not, TMA or cp.async, ping-pong turns, K ahead of V,
# packed sequences, GQA reductions, dQ paths), plus the user kernels and the
# outside kernels of the GPU tests, at small shapes, plus a sample of tessel-fuzz's random programs
# (FUZZ_PROGRAMS of them, default 200, built as FUZZ_BUILDS, default the
# plain reference and sm_90a as written, whose outputs are compared). Each check still compares with
# its CPU reference; timing is skipped (TESSEL_CHECK_REPS=0).
#
#   tools/sanitize.sh [BIN_DIR]        (default build/bin; on a GPU machine)
#   TOOLS="racecheck" tools/sanitize.sh   one tool only
#   JOBS=8 tools/sanitize.sh             eight sanitizer runs at a time
#                                        (default 1; each run is a process
#                                        of its own, so they share the GPU)
#
# Prints one line per tool and run, then the error count per tool; exits 1
# if any tool reported an error or a run failed.
set -uo pipefail
cd "$(dirname "$0")/.."
bin="${1:-build/bin}"
tools=(${TOOLS:-memcheck racecheck synccheck initcheck})
sanitizer="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}"
if [ ! -x "$sanitizer" ]; then
  echo "sanitize: compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2
  exit 2
fi
export TESSEL_CHECK_REPS=0
export TESSEL_CACHE_DIR="${TESSEL_CACHE_DIR:-$(mktemp -d)}"

runs=(
  "scaled_add --param N=1000"
  "partial_sum --param P=3 --param N=7777"
  "column_slice --param rows=77 --param pitch=1024 --param first=768 --param cols=256"
  "scaled_add --param dtype=bf16 --param block=512 --param threads=64 --param N=7777"
  "row_softmax --param M=7"
  "row_softmax --param cols=1000 --param rows=2 --param threads=256 --param M=33"
  "row_lse --param policy=square --param M=100 --param N=100"
  "row_lse --param policy=full_row --param M=100 --param N=100"
  "row_lse --param policy=full_col --param M=100 --param N=100"
  "gemm --param M=130 --param N=70 --param K=72"
  "gemm --param in=bf16 --param instruction=wgmma --param block_m=128 --param block_n=128 --param block_k=64 --param threads=256 --param transpose_a=1 --param M=130 --param N=130 --param K=72"
  "gemm --param in=bf16 --param out=f16 --param block_m=128 --param block_n=256 --param block_k=64 --param threads=256 --param stages=4 --param warp_specialize=on --param swizzle=8 --param M=130 --param N=260 --param K=200"
  "gemm --param in=bf16 --param out=f16 --param block_m=128 --param block_n=256 --param block_k=64 --param threads=256 --param stages=4 --param warp_specialize=off --param transpose_b=1 --param M=130 --param N=260 --param K=200"
  "gemm --param in=bf16 --param out=f16 --param block_m=128 --param block_n=256 --param block_k=64 --param threads=256 --param stages=4 --param warp_specialize=on --param swizzle=8 --param overlap_mma=1 --param M=130 --param N=260 --param K=200"
  "gemm --param in=bf16 --param out=f16 --param block_m=128 --param block_n=256 --param block_k=64 --param threads=256 --param stages=4 --param warp_specialize=on --param swizzle=8 --param cluster_m=2 --param M=520 --param N=390 --param K=200"
  "gemm --param in=bf16 --param out=f16 --param block_m=128 --param block_n=256 --param block_k=64 --param threads=256 --param stages=4 --param warp_specialize=on --param swizzle=8 --param persistent=1 --param M=520 --param N=390 --param K=200"
  "gemm --param in=bf16 --param out=f16 --param block_m=128 --param block_n=256 --param block_k=64 --param threads=256 --param stages=3 --param warp_specialize=on --param swizzle=8 --param persistent=1 --param tma_store=1 --param M=520 --param N=1024 --param K=200"
  "gemm --param in=bf16 --param out=f16 --param block_m=64 --param block_n=64 --param block_k=64 --param threads=128 --param stages=6 --param split_k=3 --param M=70 --param N=1024 --param K=520"
  "gemm --param in=bf16 --param out=f32 --param block_m=64 --param block_n=64 --param block_k=64 --param threads=128 --param stages=4 --param split_k=2 --param tma_store=1 --param M=70 --param N=256 --param K=520"
  "gemm --no-tma --param in=bf16 --param block_m=128 --param block_n=128 --param block_k=64 --param threads=256 --param stages=3 --param warp_specialize=off --param M=130 --param N=130 --param K=200"
  "gemm --param in=e4m3 --param out=bf16 --param transpose_b=1 --param scale=tensor --param block_m=128 --param block_n=256 --param block_k=128 --param threads=256 --param stages=3 --param swizzle=8 --param tma_store=1 --param persistent=1 --param M=520 --param N=600 --param K=300"
  "gemm --param in=e5m2 --param out=f32 --param transpose_b=1 --param scale=row --param M=130 --param N=70 --param K=200"
  "gemm --param in=e4m3 --param out=bf16 --param transpose_b=1 --param scale=block --param block_m=128 --param block_n=128 --param block_k=128 --param threads=256 --param stages=4 --param tma_store=1 --param persistent=1 --param M=300 --param N=200 --param K=400"
  "gemm --param in=e4m3 --param out=bf16 --param transpose_b=1 --param scale=tensor --param block_m=64 --param block_n=32 --param block_k=128 --param threads=128 --param stages=8 --param M=128 --param N=300 --param K=600"
  "gemm --param in=i8 --param out=i32 --param transpose_b=1 --param block_m=128 --param block_n=256 --param block_k=128 --param threads=256 --param stages=4 --param M=300 --param N=300 --param K=300"
  "gemm --arch sm_80 --param in=i8 --param out=i32 --param transpose_b=1 --param M=130 --param N=70 --param K=200"
  "quantize --param granularity=block --param k_major_scales=1 --param cols=512 --param M=77"
  "quantize --param cols=1000 --param rows=4 --param threads=128 --param dtype=f16 --param M=45"
  "quantize --param granularity=mx --param blocked_scales=1 --param cols=64 --param rows=256 --param M=130"
  "gemm --arch sm_100a-emu --param block_n=64 --param warp_specialize=off --param M=130 --param N=70 --param K=72"
  "gemm --arch sm_100a-emu --param out=f32 --param split_k=3 --param tma_store=1 --param M=130 --param N=128 --param K=520"
  "gemm --arch sm_100a-emu --param block_n=64 --param threads=256 --param warp_specialize=on --param M=130 --param N=70 --param K=72"
  "flash_attention_fwd --param persistent=1 --param causal=1 --param batch=4 --param seqlen_q=200 --param seqlen_k=200"
  "flash_attention_fwd --param persistent=1 --param varlen=1 --param seqlens_q=3,200,1 --param seqlens_k=0,130,7"
  "flash_attention_fwd --param persistent=1 --param tma_store=1 --param causal=1 --param batch=8 --param heads_q=8 --param heads_kv=2 --param seqlen_q=333 --param seqlen_k=333"
  "flash_attention_fwd --param persistent=1 --param tma_store=1 --param overlap=1 --param pingpong=1 --param batch=8 --param seqlen_q=300 --param seqlen_k=200"
  "flash_attention_fwd --param persistent=1 --param tma_store=1 --param head_dim=256 --param batch=4 --param seqlen_q=200 --param seqlen_k=200"
  "flash_attention_fwd --param persistent=1 --param overlap=1 --param pingpong=1 --param head_dim=64 --param causal=1 --param batch=4 --param seqlen_q=333 --param seqlen_k=333"
  "flash_attention_fwd --arch sm_100a-emu --param seqlen_q=130 --param seqlen_k=200 --param batch=1 --param heads_q=2 --param heads_kv=1 --param causal=1"
  "flash_attention_fwd --param dtype=e4m3 --param v_transposed=1 --param descales=1 --param causal=1 --param batch=2 --param heads_q=4 --param heads_kv=2 --param seqlen_q=200 --param seqlen_k=200"
  "flash_attention_fwd --param dtype=e5m2 --param descales=1 --param varlen=1 --param seqlens_q=3,130,5 --param seqlens_k=0,130,7"
  "tma_scale --param M=77"
  "tma_scale --param accumulate=1 --param M=77"
  "flash_attention_fwd --param seqlen_q=130 --param seqlen_k=130 --param batch=1 --param causal=1 --param heads_q=4 --param heads_kv=2"
  "flash_attention_fwd --param seqlen_q=256 --param seqlen_k=256 --param batch=1 --param shards=2"
  "flash_attention_fwd --param seqlen_q=100 --param seqlen_k=300 --param batch=1 --param causal=1 --param query_offset=200"
  "flash_attention_fwd --param seqlen_q=77 --param seqlen_k=77 --param batch=1 --param head_dim=256 --param causal=1"
  "flash_attention_fwd --param seqlen_q=130 --param seqlen_k=130 --param batch=1 --param pingpong=1 --param causal=1"
  "flash_attention_fwd --param seqlen_q=130 --param seqlen_k=200 --param batch=1 --param overlap=1 --param pingpong=1"
  "flash_attention_fwd --param varlen=1 --param seqlens_q=3,130,5 --param seqlens_k=0,130,7"
  "flash_attention_fwd --param seqlen_q=130 --param seqlen_k=130 --param batch=1 --param warp_specialize=off"
  "flash_attention_fwd --param seqlen_q=130 --param seqlen_k=130 --param batch=1 --param block_m=64 --param threads=128 --param head_dim=64 --param block_n=64"
  "flash_attention_bwd --param seqlen_q=130 --param seqlen_k=130 --param batch=1 --param causal=1"
  "flash_attention_bwd --param seqlen_q=130 --param seqlen_k=130 --param batch=1 --param heads_q=8 --param heads_kv=2 --param kv_reduction=split"
  "flash_attention_bwd --param seqlen_q=130 --param seqlen_k=130 --param batch=1 --param heads_q=8 --param heads_kv=1 --param element_atomics=1"
  "flash_attention_bwd --param seqlen_q=130 --param seqlen_k=200 --param batch=1 --param dq_atomics=tma --param causal=1"
  "flash_attention_bwd --param seqlen_q=77 --param seqlen_k=77 --param batch=1 --param head_dim=64 --param dtype=f16 --param dq_atomics=tma"
  "flash_attention_bwd --param seqlen_q=130 --param seqlen_k=130 --param batch=1 --param warp_specialize=off"
  "flash_attention_bwd --param varlen=1 --param kv_reduction=split --param seqlens_q=3,130,5 --param seqlens_k=0,130,7"
  "flash_attention_bwd --param seqlen_q=200 --param seqlen_k=130 --param batch=1 --param head_dim=64 --param block_m=128 --param dkv_operands=shared --param dq_atomics=tma --param causal=1"
  "flash_attention_bwd --param seqlen_q=130 --param seqlen_k=130 --param batch=1 --param dkv_operands=shared --param heads_q=8 --param heads_kv=2"
  "flash_attention_bwd --param seqlen_q=200 --param seqlen_k=130 --param batch=1 --param head_dim=64 --param block_m=128 --param scores=queries --param dq_atomics=tma --param causal=1"
  "flash_attention_bwd --param seqlen_q=130 --param seqlen_k=200 --param batch=1 --param block_m=64 --param scores=queries --param heads_q=8 --param heads_kv=2"
  "flash_attention_bwd --param seqlen_q=100 --param seqlen_k=300 --param batch=1 --param causal=1 --param query_offset=200 --param heads_q=4 --param heads_kv=2"
)
multi_runs=(
  "all2all"
  "sp_attention --param causal=1"
  "sp_attention --param heads_kv=8 --param groups=1,3"
  "ag_gemm"
  "gemm_rs"
  "ag_gemm --param dtype=e4m3"
  "gemm_rs --param dtype=e4m3 --param scale=tensor"
)

fuzz_programs=${FUZZ_PROGRAMS:-200}
fuzz_builds=${FUZZ_BUILDS:-sm_90a-notma-plain,sm_90a}
fuzz_chunk=25 # programs per sanitizer run, to stay within its time limit

jobs_at_once=${JOBS:-1}
results=$(mktemp -d)
summary() { # the error count in a sanitizer log
  local n
  n=$(grep -oE "ERROR SUMMARY: [0-9]+ error" "$1" | grep -oE "[0-9]+" | tail -1)
  [ -z "$n" ] && n=$(grep -oE "RACECHECK SUMMARY: [0-9]+ hazards displayed \([0-9]+ error" "$1" |
                     grep -oE "\([0-9]+" | tr -d '(' | tail -1)
  echo "${n:-?}"
}
run_one() { # tool, label, command...; leaves "tool errors failed" in $results
  local tool=$1 label=$2; shift 2
  local log; log=$(mktemp)
  timeout 300 "$sanitizer" --tool "$tool" --print-limit 20 "$@" >"$log" 2>&1
  local rc=$? n bad=0; n=$(summary "$log")
  if [ "$n" = "?" ] || [ $rc -ne 0 ]; then
    bad=1
    { echo "$tool: $label: exit $rc, errors $n"; grep -E "=========|FAIL|error" "$log" | head -20; } |
      flock "$results" cat
    [ "$n" = "?" ] && n=0
  else
    echo "$tool: $label: $n errors" | flock "$results" cat
  fi
  echo "$tool $n $bad" >"$(mktemp -p "$results" result.XXXXXX)"
  rm -f "$log"
}
start() { # runs run_one, in the background when JOBS > 1
  if (( jobs_at_once <= 1 )); then run_one "$@"; return; fi
  while (( $(jobs -rp | wc -l) >= jobs_at_once )); do wait -n; done
  run_one "$@" &
}

for tool in "${tools[@]}"; do
  for r in "${runs[@]}"; do
    # shellcheck disable=SC2086
    start "$tool" "$r" "$bin/tessel" run $r --seed 1
  done
  start "$tool" "user kernels" "$bin/tessel-gpu-tests" "[user]"
  start "$tool" "outside kernels" "$bin/tessel-gpu-tests" "[outside]~[.]"
  for (( first = 1; first <= fuzz_programs; first += fuzz_chunk )); do
    count=$(( fuzz_programs - first + 1 < fuzz_chunk ? fuzz_programs - first + 1 : fuzz_chunk ))
    start "$tool" "fuzz programs $first..$(( first + count - 1 ))" \
      "$bin/tessel-fuzz" --sample "$count" --seed "$first" --archs "$fuzz_builds"
  done
  # The multi-GPU path as two virtual ranks on this GPU (separate processes,
  # buffers and streams): the exchange's local copy kernel, attention waiting
  # on flags (fused form), groups taking turns on two streams.
  for r in "${multi_runs[@]}"; do
    # initcheck faults (CUDA_ERROR_LAUNCH_FAILED, no error reported) on
    # every kernel that touches the symmetric memory mapped with
    # cuMemCreate/cuMemMap, even with one rank; memcheck, racecheck and
    # synccheck run these clean.
    if [ "$tool" = initcheck ]; then
      echo "initcheck: $r: skipped (initcheck cannot run kernels on cuMemMap'd memory)"
      continue
    fi
    # racecheck keeps the memory of mappings it has tracked, so the
    # all-to-all's check that 1000 symmetric alloc/free cycles do not grow
    # device use cannot pass under it (memcheck runs it).
    extra=""
    [ "$tool" = racecheck ] && [ "$r" = all2all ] && extra="--param leak_cycles=0"
    # shellcheck disable=SC2086
    start "$tool" "$r" --target-processes all "$bin/tessel" run $r --ranks 2 $extra
  done
done

wait

declare -A errors
failed=0
for f in "$results"/result.*; do
  read -r tool n bad <"$f"
  errors[$tool]=$(( ${errors[$tool]:-0} + n ))
  (( bad )) && failed=1
done
rm -rf "$results"
echo "sanitize: ${#runs[@]} library runs, the user kernels, $fuzz_programs fuzz programs and ${#multi_runs[@]} virtual-rank runs, per tool:"
total=0
for tool in "${tools[@]}"; do
  echo "  $tool: ${errors[$tool]:-0} errors"
  total=$(( total + ${errors[$tool]:-0} ))
done
[ $total -eq 0 ] && [ $failed -eq 0 ]
