#!/usr/bin/env bash
# The one script run on the GPU machine: decode and batch-decode correctness
# tests, then the decode and batch-decode benchmarks, then a short summary
# table. fijit is normally built on the build host (`make`) and carried here
# with build/; this script only builds when build/libfijit.so is missing and
# the -dev headers to build it exist.
#
#   scripts/gpu/run.sh [--quick] [--sanitize] [--only decode|decode-tests|decode-bench|prefill|mla|
#                    variants|jit|sanitize|python|multi-gpu|check]
#     --quick: fewer test shapes, shorter benches
#     --only:  one part (the parts fit separate device calls); default all:
#              decode (single + batch decode tests and benches), prefill
#              (scripts/gpu/prefill.sh), mla (scripts/gpu/mla.sh: MLA decode and
#              192/128 prefill, tests, sanitizers, benchmarks), variants (tests/gpu/test_variants.py:
#              the example variants vs float64 and the bit-identical default),
#              jit (fijit demo + bench_jit + bench_load on a GPU), sanitize
#              (scripts/gpu/sanitize.sh: compute-sanitizer memcheck on every
#              kind, racecheck and synccheck per kernel family); decode-tests
#              and decode-bench: the two halves of decode;
#              python (the Python package: installed with pip --target, then
#              tests/gpu/test_python_pkg.py and test_python_hf.py); multi-gpu (only when
#              named: tests/gpu/test_multi_context.py, two contexts on GPU 0 and
#              8 ranks starting together on one empty cache, plus a thread per
#              GPU and a process per GPU where there are 2 or more; says what
#              it skipped)
#              check (only when named: scripts/gpu/check.sh, every kind's
#              --quick suite, the MLA sanitizers and benchmarks in one device call)
#     --sanitize: run the sanitize part too when --only names another
# Raw results go to $OUT (test_*.json, bench_*.json, logs) when set. Each step
# runs under a time limit (STEP_TIMEOUT seconds, default 600) so one hang
# cannot take the others' results with it.
set -u
QUICK=0
ONLY=all
SANITIZE=0
while [ $# -gt 0 ]; do
    case $1 in
    --quick) QUICK=1 ;;
    --only) ONLY=$2; shift ;;
    --sanitize) SANITIZE=1 ;;
    *) echo "usage: scripts/gpu/run.sh [--quick] [--sanitize] [--only decode|decode-tests|decode-bench|prefill|mla|variants|jit|sanitize|python|multi-gpu|check]" >&2
       exit 2 ;;
    esac
    shift
done
run_part() { [ "$ONLY" = all ] || [ "$ONLY" = "$1" ]; }
decode_part() { run_part decode || [ "$ONLY" = "decode-$1" ]; }  # decode_part tests|bench
source "$(dirname "$0")/setup.sh"  # cd to the root, PYTHONPATH, OUT_DIR, a private cache
STEP_TIMEOUT=${STEP_TIMEOUT:-600}
# The GPU machine has libsqlite3 and libxxhash but not libhiredis or libsodium,
# which the fleet tier opens when used (the Python package's remote tests): carry
# Debian's copies in build/deps (see docs/performance.md).
[ -d build/deps ] && export LD_LIBRARY_PATH=$PWD/build/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

if [ ! -e build/libfijit.so ]; then
    if [ -e /usr/include/sqlite3.h ] && [ -e /usr/include/xxhash.h ]; then
        echo "scripts/gpu/run.sh: build/libfijit.so missing, building it here"
        make -j"$(nproc)" build/libfijit.so build/fijit || exit 1
    else
        echo "scripts/gpu/run.sh: build/libfijit.so is missing and this machine lacks sqlite3.h/xxhash.h;" \
             "run make on the build host and carry build/" >&2
        exit 1
    fi
fi

# The private cache (setup.sh) is warmed in parallel below so that the tests measure
# kernels, not NVRTC: every decode tuple (16-bit and fp8 KV) and every batch-decode tuple.
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>/dev/null

if [ "$ONLY" = multi-gpu ]; then
    # The kernels it launches, prewarmed here so that no test compiles under
    # its time limit; the ranks part measures a cold start on a cache of its own.
    python3 tests/gpu/test_multi_context.py --print-manifest > "$OUT_DIR/multi_manifest.txt" &&
        timeout "$STEP_TIMEOUT" build/fijit prewarm --manifest "$OUT_DIR/multi_manifest.txt" \
            -j "$(nproc)" > "$OUT_DIR/multi_prewarm.log" 2>&1
    echo "multi-gpu prewarm: rc $?: $(tail -1 "$OUT_DIR/multi_prewarm.log")"
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    parts=(contexts ranks)
    if [ "$gpus" -ge 2 ]; then parts+=(devices mp-ranks)
    else echo "multi-gpu: $gpus GPU: skipping devices and mp-ranks (they need 2 or more)"; fi
    NCCL_NVLS_ENABLE=0 OUT=$OUT_DIR timeout "$STEP_TIMEOUT" python3 tests/gpu/test_multi_context.py \
        "${parts[@]}" 2>&1 | tee "$OUT_DIR/test_multi_context.log"
    rc=${PIPESTATUS[0]}
    # The contexts part again with a module per context (FIJIT_LOAD=module, the
    # way drivers before CUDA 12 load).
    FIJIT_LOAD=module timeout "$STEP_TIMEOUT" python3 tests/gpu/test_multi_context.py \
        contexts 2>&1 | tee "$OUT_DIR/test_multi_context_module.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    exit "$rc"
fi
[ "$ONLY" = check ] && exec bash scripts/gpu/check.sh
if run_part jit; then
    # The main job's GPU check on the default cache path, then the JIT benchmark
    # (its disk-hit split includes cuModuleLoadData here).
    (unset FIJIT_CACHE_DIR; build/fijit prewarm --head-dim 128 -j "$(nproc)" >/dev/null && build/fijit demo)
    rc_demo=$?
    if [ -x build/bench_jit ]; then build/bench_jit | tail -9; fi
    # Per-context load time and memory with 1, 2 and 8 contexts: one library
    # for the process vs a module per context (bench/bench_load.c).
    if [ -x build/bench_load ]; then
        timeout "$STEP_TIMEOUT" build/bench_load 2>&1 | tee "$OUT_DIR/bench_load.txt"
    fi
    [ "$ONLY" = jit ] && exit $rc_demo
fi
if run_part prefill; then
    PREFILL_ARGS=()
    [ $QUICK = 1 ] && PREFILL_ARGS=(--quick)
    bash scripts/gpu/prefill.sh "${PREFILL_ARGS[@]}" > "$OUT_DIR/gpu_prefill.log" 2>&1
    rc_prefill=$?
    [ "$ONLY" = prefill ] && { sed -n '/==== prefill summary/,$p' "$OUT_DIR/gpu_prefill.log"; exit $rc_prefill; }
fi
if run_part mla; then
    MLA_ARGS=()
    [ $QUICK = 1 ] && MLA_ARGS=(--quick)
    bash scripts/gpu/mla.sh "${MLA_ARGS[@]}" > "$OUT_DIR/gpu_mla.log" 2>&1
    rc_mla=$?
    [ "$ONLY" = mla ] && { sed -n '/==== mla summary/,$p' "$OUT_DIR/gpu_mla.log"; exit $rc_mla; }
fi
if run_part sanitize || [ $SANITIZE = 1 ]; then
    bash scripts/gpu/sanitize.sh > "$OUT_DIR/gpu_sanitize.log" 2>&1
    rc_sanitize=$?
    [ "$ONLY" = sanitize ] && { sed -n '/==== sanitize summary/,$p' "$OUT_DIR/gpu_sanitize.log"; exit $rc_sanitize; }
fi
if run_part variants; then
    VARIANT_ARGS=()
    [ $QUICK = 1 ] && VARIANT_ARGS=(--quick)
    OUT=$OUT_DIR timeout "$STEP_TIMEOUT" python3 tests/gpu/test_variants.py "${VARIANT_ARGS[@]}" \
        > "$OUT_DIR/test_variants.log" 2>&1
    rc_variants=$?
    [ "$ONLY" = variants ] && { sed -n '/^variants vs float64/,$p' "$OUT_DIR/test_variants.log"; exit $rc_variants; }
fi
if run_part python; then
    # Install the package offline (pip --target: python3 here may itself be a
    # venv, whose torch a venv made from it would not see), check that the
    # installed copy imports, then run the tests (they import python/ and
    # prewarm their own specs in parallel first).
    PY_ARGS=()
    [ $QUICK = 1 ] && PY_ARGS=(--quick)
    pkg=$(mktemp -d /tmp/fijit-pkg.XXXXXX)
    { python3 -m pip install -q --no-build-isolation --no-index --target "$pkg" ./python &&
      (cd /tmp && PYTHONPATH=$pkg python3 -c 'import fijit, torch; print("installed", fijit.__file__, fijit.__version__)'); } \
        > "$OUT_DIR/python_install.log" 2>&1
    rc_python=$?
    tail -1 "$OUT_DIR/python_install.log"
    for t in test_python_pkg test_python_hf; do
        OUT=$OUT_DIR timeout "$STEP_TIMEOUT" python3 "tests/gpu/$t.py" "${PY_ARGS[@]}" \
            > "$OUT_DIR/$t.log" 2>&1 || rc_python=1
        grep -E '^(FAIL|note|test_python)|ok$|FAIL$|^model|^transformers' "$OUT_DIR/$t.log"
    done
    [ "$ONLY" = python ] && exit $rc_python
fi
if [ -x build/fijit ]; then
    manifest="$OUT_DIR/decode_manifest.txt"
    : > "$manifest"
    for kind in decode batch_decode; do
        for q in fp16 bf16; do
            for kv in "$q" fp8_e4m3 fp8_e5m2; do
                for hd in 64 128 256; do
                    for mask in none window; do
                        for pos in none rope alibi; do
                            for sc in 0 1; do
                                echo "$kind q=$q kv=$kv o=$q hd=$hd mask=$mask pos=$pos softcap=$sc" >> "$manifest"
                            done
                        done
                    done
                done
            done
        done
    done
    t0=$SECONDS
    timeout "$STEP_TIMEOUT" build/fijit prewarm --manifest "$manifest" -j "$(nproc)" \
        > "$OUT_DIR/prewarm.log" 2>&1
    echo "prewarm: rc $? in $((SECONDS - t0)) s: $(tail -1 "$OUT_DIR/prewarm.log")"
fi

TEST_ARGS=()
BENCH_ARGS=()
BBENCH_ARGS=()
if [ $QUICK = 1 ]; then
    TEST_ARGS=(--quick)
    BENCH_ARGS=(--reps 20 --lens 1024,16384,65536)
    BBENCH_ARGS=(--reps 20 --batches 1,64 --lens 1024,16384)
fi
step() {  # step NAME CMD...: run with a time limit, log to $OUT_DIR/NAME.log, remember rc
    local name=$1
    shift
    OUT=$OUT_DIR timeout "$STEP_TIMEOUT" "$@" 2>&1 | tee "$OUT_DIR/$name.log"
    eval "rc_$name=\${PIPESTATUS[0]}"
}
rc_test_decode=0 rc_test_batch_decode=0 rc_bench_decode=0 rc_bench_batch_decode=0 rc_bench_batch_decode_fp8=0
if decode_part tests; then
    step test_decode python3 tests/gpu/test_decode.py "${TEST_ARGS[@]}"
    step test_batch_decode python3 tests/gpu/test_batch_decode.py "${TEST_ARGS[@]}"
fi
if decode_part bench; then
    step bench_decode python3 bench/bench_decode.py "${BENCH_ARGS[@]}"
    # The read ceilings of dense and paged K/V (bench/read_ceiling.cu), when nvcc is here.
    NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    READ_ARGS=()
    if [ -x "$NVCC" ] && "$NVCC" -O3 -arch=sm_90 -o /tmp/fijit_read_ceiling bench/read_ceiling.cu &&
        /tmp/fijit_read_ceiling "$OUT_DIR/read_ceiling.json"; then
        READ_ARGS=(--read-ceiling "$OUT_DIR/read_ceiling.json")
    fi
    step bench_batch_decode python3 bench/bench_batch_decode.py "${BBENCH_ARGS[@]}" "${READ_ARGS[@]}"
    step bench_batch_decode_fp8 python3 bench/bench_batch_decode.py --dtypes bf16 --kv-dtype fp8_e4m3 \
        --heads 32/8 --batches 1,64 --lens 4096,16384 --no-nosplit --tag _fp8
fi

echo
echo "==== summary ===="
[ "$ONLY" = all ] && sed -n '/==== prefill summary/,$p' "$OUT_DIR/gpu_prefill.log"
[ "$ONLY" = all ] && sed -n '/==== mla summary/,$p' "$OUT_DIR/gpu_mla.log"
[ "$ONLY" = all ] && sed -n '/^variants vs float64/,$p' "$OUT_DIR/test_variants.log"
[ -n "${rc_sanitize:-}" ] && sed -n '/==== sanitize summary/,$p' "$OUT_DIR/gpu_sanitize.log"
if decode_part tests; then
    sed -n '/^decode correctness/,/^test_decode:/p' "$OUT_DIR/test_decode.log"
    sed -n '/^batch decode correctness/,/^test_batch_decode:/p' "$OUT_DIR/test_batch_decode.log"
fi
if decode_part bench; then
    [ -e "$OUT_DIR/read_ceiling.json" ] && cat "$OUT_DIR/read_ceiling.json"
    sed -n '/^decode, batch 1/,$p' "$OUT_DIR/bench_decode.log"
    sed -n '/^batch decode, paged/,$p' "$OUT_DIR/bench_batch_decode.log"
    sed -n '/^batch decode, paged/,$p' "$OUT_DIR/bench_batch_decode_fp8.log" | tail -n +3
fi
echo "rc: test_decode $rc_test_decode, test_batch_decode $rc_test_batch_decode," \
     "bench_decode $rc_bench_decode, bench_batch_decode $rc_bench_batch_decode," \
     "bench_batch_decode_fp8 $rc_bench_batch_decode_fp8, prefill ${rc_prefill:--}, mla ${rc_mla:--}," \
     "variants ${rc_variants:--}, sanitize ${rc_sanitize:--}, python ${rc_python:--}"
[ "$rc_test_decode" = 0 ] && [ "$rc_test_batch_decode" = 0 ] && [ "$rc_bench_decode" = 0 ] &&
    [ "$rc_bench_batch_decode" = 0 ] && [ "$rc_bench_batch_decode_fp8" = 0 ] &&
    [ "${rc_prefill:-0}" = 0 ] && [ "${rc_mla:-0}" = 0 ] && [ "${rc_variants:-0}" = 0 ] && [ "${rc_sanitize:-0}" = 0 ] &&
    [ "${rc_python:-0}" = 0 ]
