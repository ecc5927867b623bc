#!/usr/bin/env bash
# The one script run on the GPU machine: decode correctness test, then the
# decode benchmark, then a short summary table. fijit is normally built on the
# build host (`make`) and carried here with build/; this script only builds
# when build/libfijit.so is missing and the -dev headers to build it exist.
#
#   bench/gpu_run.sh [--quick]      (--quick: fewer test shapes, shorter bench)
# Raw results go to $OUT (test_decode.json, bench_decode.json, logs) when set.
set -u
cd "$(dirname "$0")/.."
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
OUT_DIR=${OUT:-$(mktemp -d)}
mkdir -p "$OUT_DIR"

if [ ! -e build/libfijit.so ] && [ ! -e build/libfijit.so.0.1.0 ]; then
    if [ -e /usr/include/sqlite3.h ] && [ -e /usr/include/xxhash.h ]; then
        echo "gpu_run: build/libfijit.so missing, building it here"
        make -j"$(nproc)" build/libfijit.so build/fijit || exit 1
    else
        echo "gpu_run: build/libfijit.so is missing and this machine lacks sqlite3.h/xxhash.h;" \
             "run make on the build host and carry build/" >&2
        exit 1
    fi
fi

# A private cache, warmed in parallel so the test measures kernels, not NVRTC.
export FIJIT_CACHE_DIR=${FIJIT_CACHE_DIR:-$(mktemp -d /tmp/fijit-cache.XXXXXX)}
chmod 700 "$FIJIT_CACHE_DIR"
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>/dev/null
if [ -x build/fijit ]; then
    t0=$SECONDS
    build/fijit prewarm --kernel decode --dtype fp16,bf16 --head-dim 64,128,256 \
        --mask none,window --pos none,rope,alibi --softcap 0,1 -j "$(nproc)" \
        > "$OUT_DIR/prewarm.log" 2>&1
    echo "prewarm: rc $? in $((SECONDS - t0)) s: $(tail -1 "$OUT_DIR/prewarm.log")"
fi

TEST_ARGS=()
BENCH_ARGS=()
if [ $QUICK = 1 ]; then
    TEST_ARGS=(--quick)
    BENCH_ARGS=(--reps 20 --lens 1024,16384,65536)
fi
OUT=$OUT_DIR python3 tests/gpu/test_decode.py "${TEST_ARGS[@]}" 2>&1 | tee "$OUT_DIR/test_decode.log"
test_rc=${PIPESTATUS[0]}
OUT=$OUT_DIR python3 bench/bench_decode.py "${BENCH_ARGS[@]}" 2>&1 | tee "$OUT_DIR/bench_decode.log"
bench_rc=${PIPESTATUS[0]}

echo
echo "==== summary ===="
sed -n '/^decode correctness/,/^test_decode:/p' "$OUT_DIR/test_decode.log"
sed -n '/^decode, batch 1/,$p' "$OUT_DIR/bench_decode.log"
echo "test rc $test_rc, bench rc $bench_rc"
[ "$test_rc" = 0 ] && [ "$bench_rc" = 0 ]
