#!/usr/bin/env bash
# One device call's worth of checks (under 10 minutes on an H200 with 16
# cores): every tuple prewarmed, the correctness suites of every kind in their --quick form, the
# MLA kinds' compute-sanitizer runs beside them (memcheck with exact-size
# allocations, racecheck, synccheck), two contexts on one GPU, then, alone on
# the GPU, the MLA benchmarks and the per-context load benchmark. A summary
# line per step; logs in $OUT. Build on the build host and carry build/.
#
#   scripts/gpu/check.sh        (scripts/gpu/run.sh --only check)
set -u
source "$(dirname "$0")/setup.sh"  # cd to the root, PYTHONPATH, OUT_DIR, a private cache
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
J=$(nproc)
T0=$SECONDS
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
failed=()
step() {  # step NAME LIMIT_S CMD...: log to $OUT_DIR/NAME.log, a line and its tail here
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" > "$OUT_DIR/$name.log" 2>&1
    local rc=$?
    echo "== $name: rc $rc, $((SECONDS - t0)) s (at $((SECONDS - T0)) s)"
    tail -"${TAIL:-4}" "$OUT_DIR/$name.log"
    [ $rc = 0 ] || failed+=("$name (rc $rc)")
}
sanitize() {  # sanitize TOOL NAME SCRIPT ARGS...: a summary line
    local tool=$1 name=$2
    shift 2
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 330 "$CS" --tool "$tool" --print-limit 10 \
        --error-exitcode 1 python3 "$@" > "$OUT_DIR/$name.log" 2>&1
    local rc=$?
    echo "== $name: rc $rc: $(grep -E 'SUMMARY' "$OUT_DIR/$name.log" | tail -1)"
    [ $rc = 0 ]
}
step prewarm_mla 150 bash -c "build/fijit prewarm --kernel mla_decode --dtype fp16,bf16 --softcap 0,1 -j $J &&
    build/fijit prewarm --kernel 'mla_decode kv=fp8_e4m3' --dtype fp16,bf16 --softcap 0,1 -j $J &&
    build/fijit prewarm --kernel prefill,batch_prefill_ragged,batch_prefill_paged --head-dim 192 \
        --head-dim-vo 128 --dtype fp16,bf16 --mask none,causal,window,custom --softcap 0,1 -j $J"
# Every decode and prefill tuple the suites can ask for, so that they measure kernels
# rather than compiles (on demand they ran past their limits).
step prewarm 240 bash -c "build/fijit prewarm --kernel prefill,batch_prefill_ragged,batch_prefill_paged \
        --dtype fp16,bf16 --head-dim 64,128,256 --mask none,causal,window,custom \
        --pos none,rope,alibi --softcap 0,1 -j $J &&
    for kv in '' ' kv=fp8_e4m3' ' kv=fp8_e5m2'; do
        build/fijit prewarm --kernel \"decode\$kv\",\"batch_decode\$kv\" --dtype fp16,bf16 \
            --head-dim 64,128,256 --mask none,window --pos none,rope,alibi --softcap 0,1 -j $J || exit 1
    done"
# The sanitizers run on CPU mostly: beside the tests, two at a time.
{ sanitize memcheck memcheck_mla_decode tests/gpu/test_mla_decode.py --quick &&
  sanitize racecheck racecheck_mla_decode tests/gpu/test_mla_decode.py --quick; } \
    > "$OUT_DIR/sanitize_a.txt" 2>&1 &
pid_a=$!
{ sanitize memcheck memcheck_mla_prefill tests/gpu/test_mla_prefill.py --quick &&
  sanitize synccheck synccheck_mla_decode tests/gpu/test_mla_decode.py --quick; } \
    > "$OUT_DIR/sanitize_b.txt" 2>&1 &
pid_b=$!
step test_mla_decode 150 python3 tests/gpu/test_mla_decode.py --quick
step test_mla_prefill 150 python3 tests/gpu/test_mla_prefill.py --quick
step test_decode 90 python3 tests/gpu/test_decode.py --quick
step test_batch_decode 90 python3 tests/gpu/test_batch_decode.py --quick
step test_prefill 150 python3 tests/gpu/test_prefill.py --quick
step test_python_hf 150 python3 tests/gpu/test_python_hf.py --quick
step test_multi_context 90 python3 tests/gpu/test_multi_context.py contexts
wait $pid_a || failed+=("sanitize: $(cat "$OUT_DIR/sanitize_a.txt" | tr '\n' ' ')")
wait $pid_b || failed+=("sanitize: $(cat "$OUT_DIR/sanitize_b.txt" | tr '\n' ' ')")
cat "$OUT_DIR/sanitize_a.txt" "$OUT_DIR/sanitize_b.txt"
# Benchmarks alone on the GPU, where time is left.
if [ $((SECONDS - T0)) -lt 470 ]; then
    TAIL=8 step bench_mla_decode 60 python3 bench/bench_mla_decode.py --quick --reps 20
    TAIL=8 step bench_mla_prefill 60 python3 bench/bench_mla_prefill.py --seq 4096 --reps 10 --rounds 2
    [ -x build/bench_load ] && TAIL=12 step bench_load 60 build/bench_load
fi
echo "==== check summary ===="
echo "check: $((SECONDS - T0)) s, ${#failed[@]} failed${failed:+: ${failed[*]}}"
[ ${#failed[@]} = 0 ]
