#!/usr/bin/env bash
# compute-sanitizer over the GPU suites (scripts/gpu/run.sh --sanitize): memcheck on
# every kind at small shapes (prefill: every mask, the custom mask included, page
# sizes 1 and 7, and fp8 prefill's --quick set; decode and batch decode: their --tiny sets, fp16 and fp8 KV,
# page sizes 1, 7, 16, 64), racecheck and synccheck on one small tuple per kernel
# family (the Hopper prefill loop with two consumers in turns and without, and with
# three).
# STEP_TIMEOUT (s) bounds each run; SANITIZE_RUNS (a regex) picks runs. Each tensor
# is its own allocation (PYTORCH_NO_CUDA_MEMORY_CACHING=1), so a read past the
# end of a buffer is seen. 0 errors is the bar; a table is printed last.
# Build on the build host (`make`) and carry build/ here.
set -u
source "$(dirname "$0")/setup.sh"  # cd to the root, PYTHONPATH, OUT_DIR, a private cache
export PYTORCH_NO_CUDA_MEMORY_CACHING=1 PYTHONUNBUFFERED=1
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$CS" ] || { echo "scripts/gpu/sanitize.sh: compute-sanitizer not found" >&2; exit 1; }
STEP_TIMEOUT=${STEP_TIMEOUT:-300}
# The kernels the runs below load, compiled in parallel first.
build/fijit prewarm --kernel prefill,batch_prefill_ragged,batch_prefill_paged --dtype fp16 \
    --head-dim 64,128 --mask none,causal,window,custom --pos none,rope -j "$(nproc)" | tail -1
manifest="$OUT_DIR/sanitize_manifest.txt"
: > "$manifest"
for kind in decode batch_decode; do
    for kv in fp16 fp8_e4m3; do
        for mask in none window; do
            for pos in none rope; do
                echo "$kind q=fp16 kv=$kv o=fp16 hd=128 mask=$mask pos=$pos softcap=0" >> "$manifest"
            done
        done
    done
done
for o in fp16 bf16; do for m in none causal; do
    echo "prefill q=fp8_e4m3 kv=fp8_e4m3 o=$o hd=128 mask=$m" >> "$manifest"
done; done
build/fijit prewarm --manifest "$manifest" -j "$(nproc)" | tail -1

PREFILL_SMALL=(--quick --no-sdpa --dtypes fp16 --hds 64,128 --pos none,rope --softcaps 0)
ONE_PREFILL=(--quick --no-sdpa --dtypes fp16 --hds 128 --masks causal --pos none --softcaps 0)
# The Hopper loop's three-consumer form (head_dim 64, lean tuples; 192-row tiles).
ONE_PREFILL_3WG=(--quick --no-sdpa --dtypes fp16 --hds 64 --masks causal --pos none --softcaps 0 --kinds single,ragged)
# Its form without turns (head_dim 256 without a mask: kPingPong, ws/config.cuh).
ONE_PREFILL_FREE=(--quick --no-sdpa --dtypes fp16 --hds 256 --masks none --pos none --softcaps 0 --pages 16)
declare -a names=() errors=() rcs=()
run() {  # run NAME TOOL CMD...: errors from the sanitizer's summary line
    local name=$1 tool=$2
    shift 2
    [[ $name =~ ${SANITIZE_RUNS:-.} ]] || return 0  # SANITIZE_RUNS: a regex of run names
    timeout "$STEP_TIMEOUT" "$CS" --tool "$tool" --print-limit 20 "$@" > "$OUT_DIR/san_$name.log" 2>&1
    local rc=$?
    local n
    # memcheck and synccheck end on "ERROR SUMMARY: N errors", racecheck on
    # "RACECHECK SUMMARY: H hazards displayed (N errors, W warnings)".
    n=$(grep -Eo 'ERROR SUMMARY: [0-9]+|\([0-9]+ errors' "$OUT_DIR/san_$name.log" | tail -1 |
        grep -Eo '[0-9]+')
    names+=("$name"); errors+=("${n:-?}"); rcs+=("$rc")
    grep -E '^=========  *(Invalid|Race|Barrier|Uninitialized)|test_[a-z_]+: (passed|FAILED)' \
        "$OUT_DIR/san_$name.log" | head -5
}
run memcheck_prefill memcheck python3 tests/gpu/test_prefill.py "${PREFILL_SMALL[@]}" --pages 1,7,16
run memcheck_prefill_fp8 memcheck python3 tests/gpu/test_prefill_fp8.py --quick
run memcheck_decode memcheck python3 tests/gpu/test_decode.py --tiny
run memcheck_batch_decode memcheck python3 tests/gpu/test_batch_decode.py --tiny
run racecheck_prefill racecheck python3 tests/gpu/test_prefill.py "${ONE_PREFILL[@]}" --pages 7,16
run synccheck_prefill synccheck python3 tests/gpu/test_prefill.py "${ONE_PREFILL[@]}" --pages 7,16
run racecheck_prefill_3wg racecheck python3 tests/gpu/test_prefill.py "${ONE_PREFILL_3WG[@]}"
run synccheck_prefill_3wg synccheck python3 tests/gpu/test_prefill.py "${ONE_PREFILL_3WG[@]}"
run racecheck_prefill_free racecheck python3 tests/gpu/test_prefill.py "${ONE_PREFILL_FREE[@]}"
run synccheck_prefill_free synccheck python3 tests/gpu/test_prefill.py "${ONE_PREFILL_FREE[@]}"
# Three persistent CTAs, each walking many blocks through the feed and claiming them.
run racecheck_prefill_claims racecheck env FIJIT_PREFILL_WS=persistent:3 \
    python3 tests/gpu/test_prefill.py "${ONE_PREFILL[@]}" --kinds single,ragged
run synccheck_prefill_claims synccheck env FIJIT_PREFILL_WS=persistent:3 \
    python3 tests/gpu/test_prefill.py "${ONE_PREFILL[@]}" --kinds single,ragged
run racecheck_decode racecheck python3 tests/gpu/test_decode.py --tiny
run synccheck_decode synccheck python3 tests/gpu/test_decode.py --tiny
run racecheck_batch_decode racecheck python3 tests/gpu/test_batch_decode.py --tiny
run synccheck_batch_decode synccheck python3 tests/gpu/test_batch_decode.py --tiny

echo
echo "==== sanitize summary ===="
printf '%-24s %8s %4s\n' run errors rc
bad=0
for i in "${!names[@]}"; do
    printf '%-24s %8s %4s\n' "${names[$i]}" "${errors[$i]}" "${rcs[$i]}"
    [ "${errors[$i]}" = 0 ] && [ "${rcs[$i]}" = 0 ] || bad=1
done
exit $bad
