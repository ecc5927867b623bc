#!/usr/bin/env bash
# Prewarm throughput: the 36-tuple decode set into a fresh cache with -j1 and
# with -j$(nproc), cold (CUDA_CACHE_DISABLE=1 keeps NVRTC's own cache out).
set -euo pipefail
fijit=${1:-build/fijit}
jobs=$(nproc)
set_flags=(--kernel decode --dtype fp16,bf16 --head-dim 64,128,256 --mask none,window
           --pos none,rope,alibi --arch sm_90a)
export CUDA_CACHE_DISABLE=1
for j in 1 "$jobs"; do
    dir=$(mktemp -d)
    start=$(date +%s.%N)
    "$fijit" prewarm --cache-dir "$dir/cache" -j "$j" "${set_flags[@]}" >/dev/null
    end=$(date +%s.%N)
    printf 'prewarm 36 decode tuples, -j%-3s %8.1f s\n' "$j" "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')"
    rm -rf "$dir"
done
