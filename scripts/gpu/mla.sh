#!/usr/bin/env bash
# The MLA kinds on the GPU machine, in one command. Decode (absorbed, over a
# paged latent cache): prewarm its 8 tuples, tests/gpu/test_mla_decode.py
# against a float64 reference of the un-absorbed formula, compute-sanitizer
# memcheck, racecheck and synccheck on its --quick set, then
# bench/bench_mla_decode.py (GB/s against a copy in the same run, TFLOP/s,
# fp8 against bf16, SDPA as MQA over the dense latent). Prefill (q/k head_dim
# 192, v/o 128): prewarm the 48 tuples with ptxas' resources logged (bench/ws_resources.py:
# the Hopper main loop's spills), tests/gpu/test_mla_prefill.py on the sm_90a
# build (the Hopper main loop takes the 128-row tiles), again --quick on the
# portable kernels (FIJIT_ARCH=sm_90: mma.sync everywhere) and on the tile
# kernels alone (FIJIT_PREFILL_WS=0); compute-sanitizer memcheck (each tensor
# its own allocation), racecheck and synccheck on the --quick set; the
# transformers test (tests/gpu/test_python_hf.py --quick: DeepSeek-V3-shaped
# model against eager); then bench/bench_mla_prefill.py against SDPA's cuDNN.
# Build on the build host (`make`) and carry build/ here.
#
#   scripts/gpu/mla.sh [--quick]     raw results in $OUT when set; a summary last
set -u
source "$(dirname "$0")/setup.sh"  # cd to the root, PYTHONPATH, OUT_DIR, a private cache
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
export PYTHONUNBUFFERED=1
STEP_TIMEOUT=${STEP_TIMEOUT:-900}
failed=()
step() {  # step NAME COMMAND...: run it with a timeout, log it, note a failure
    local name=$1
    shift
    echo "== $name"
    timeout "$STEP_TIMEOUT" "$@" > "$OUT_DIR/$name.log" 2>&1
    local rc=$?
    tail -3 "$OUT_DIR/$name.log"
    [ $rc = 0 ] || failed+=("$name (rc $rc)")
}
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>/dev/null

Q=()
[ $QUICK = 1 ] && Q=(--quick)
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)

# ---- decode
build/fijit prewarm --kernel mla_decode --dtype fp16,bf16 --softcap 0,1 -j "$(nproc)" | tail -1
build/fijit prewarm --kernel "mla_decode kv=fp8_e4m3" --dtype fp16,bf16 --softcap 0,1 \
    -j "$(nproc)" | tail -1
step test_mla_decode python3 tests/gpu/test_mla_decode.py "${Q[@]}"
if [ -x "$CS" ]; then
    for tool in memcheck racecheck synccheck; do
        step "${tool}_mla_decode" env PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$CS" --tool "$tool" \
            --error-exitcode 1 python3 tests/gpu/test_mla_decode.py --quick
    done
fi
OUT=$OUT_DIR python3 bench/bench_mla_decode.py "${Q[@]}" 2>&1 | tee "$OUT_DIR/bench_mla_decode.log"

# ---- prefill, 192/128
MLA=(--kernel prefill,batch_prefill_ragged,batch_prefill_paged --head-dim 192 --head-dim-vo 128
     --dtype fp16,bf16 --mask none,causal,window,custom --softcap 0,1 -j "$(nproc)")
FIJIT_LOG=4 build/fijit prewarm "${MLA[@]}" > "$OUT_DIR/prewarm_mla.log" 2>&1
grep '^prewarm:' "$OUT_DIR/prewarm_mla.log"
python3 bench/ws_resources.py "$OUT_DIR/prewarm_mla.log" | tail -1
FIJIT_ARCH=sm_90 build/fijit prewarm "${MLA[@]}" | tail -1

step test_mla_prefill python3 tests/gpu/test_mla_prefill.py "${Q[@]}"
step test_mla_prefill_sm90 env FIJIT_ARCH=sm_90 python3 tests/gpu/test_mla_prefill.py --quick
step test_mla_prefill_tiles env FIJIT_PREFILL_WS=0 python3 tests/gpu/test_mla_prefill.py --quick
if [ -x "$CS" ]; then
    for tool in memcheck racecheck synccheck; do
        step "${tool}_mla_prefill" env PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$CS" --tool "$tool" \
            --error-exitcode 1 python3 tests/gpu/test_mla_prefill.py --quick
    done
else
    failed+=("compute-sanitizer not found")
fi
step test_python_hf python3 tests/gpu/test_python_hf.py --quick
B=()
[ $QUICK = 1 ] && B=(--seq 4096 --reps 10 --rounds 2)
OUT=$OUT_DIR python3 bench/bench_mla_prefill.py "${B[@]}" 2>&1 | tee "$OUT_DIR/bench_mla_prefill.log"
echo "==== mla summary ===="
tail -4 "$OUT_DIR/bench_mla_decode.log"
tail -4 "$OUT_DIR/bench_mla_prefill.log"
echo "mla: ${#failed[@]} failed${failed:+: ${failed[*]}}"
[ ${#failed[@]} = 0 ]
