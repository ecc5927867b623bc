#!/usr/bin/env bash
# Prefill on the GPU machine: prewarm every prefill tuple, the correctness tests
# (tests/gpu/test_prefill.py; fp8: tests/gpu/test_prefill_fp8.py), again --quick
# on the portable kernels
# (FIJIT_ARCH=sm_90: mma.sync in every tile) and on the tile kernels the Hopper
# main loop replaces (FIJIT_PREFILL_WS=0), then the benchmarks
# (bench/bench_prefill.py: the Hopper main loop and the tile kernels side by
# side; --fp8: fp8 beside 16-bit; bench/bench_single_rope.py;
# bench/bench_batch_prefill.py; bench/peer_batch_prefill.py); the registers
# and spills of the Hopper main loop (bench/ws_resources.py) and the prefill
# table are printed last. Build on the build host (`make`) and carry build/ here.
#
#   scripts/gpu/prefill.sh [--quick]    (--quick: fewer test shapes, fewer reps)
# PREFILL_BASELINE=LIB[,TEMPLATE_DIR] also times that build ("before": a copy of an
# older build/libfijit.so and its templates) against this one ("after"), interleaved
# in one process on the same tensors (bench_prefill.py --config);
# PREFILL_AB=NAME,VAR=VAL times this build against itself under that environment
# (e.g. PREFILL_AB=static,FIJIT_PREFILL_WS=static: the blocks' static order).
# Raw results go to $OUT (test_prefill.json, bench_prefill.json, logs) when set.
set -u
source "$(dirname "$0")/setup.sh"  # cd to the root, PYTHONPATH, OUT_DIR, a private cache
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
if [ ! -e build/libfijit.so ]; then
    echo "scripts/gpu/prefill.sh: build/libfijit.so is missing; run make on the build host and carry build/" >&2
    exit 1
fi

nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>/dev/null
if [ -x build/fijit ]; then
    t0=$SECONDS
    # FIJIT_LOG=4: ptxas' registers and spills of every entry, for ws_resources.py.
    FIJIT_LOG=4 build/fijit prewarm --kernel prefill,batch_prefill_ragged,batch_prefill_paged \
        --dtype fp16,bf16 --head-dim 64,128,256 --mask none,causal,window,custom \
        --pos none,rope,alibi --softcap 0,1 -j "$(nproc)" > "$OUT_DIR/prewarm_prefill.log" 2>&1
    echo "prewarm: rc $? in $((SECONDS - t0)) s: $(grep '^prewarm:' "$OUT_DIR/prewarm_prefill.log")"
    python3 bench/ws_resources.py "$OUT_DIR/prewarm_prefill.log" > "$OUT_DIR/ws_resources.log"
    # fp8 prefill's four tuples (sm_90a only).
    for o in fp16 bf16; do for m in none causal; do
        echo "prefill q=fp8_e4m3 kv=fp8_e4m3 o=$o hd=128 mask=$m"
    done; done > "$OUT_DIR/fp8_manifest.txt"
    build/fijit prewarm --manifest "$OUT_DIR/fp8_manifest.txt" -j "$(nproc)" | tail -1
fi

TEST_ARGS=()
BENCH_ARGS=()
if [ $QUICK = 1 ]; then
    TEST_ARGS=(--quick)
    BENCH_ARGS=(--reps 10 --seqs 1024,4096)
fi
OUT=$OUT_DIR timeout "${PREFILL_TEST_TIMEOUT:-900}" python3 tests/gpu/test_prefill.py "${TEST_ARGS[@]}" 2>&1 | tee "$OUT_DIR/test_prefill.log"
test_rc=${PIPESTATUS[0]}
# The portable kernels (mma.sync in every tile; sm_90a runs wgmma in the 128-
# and 64-row tiles): built for sm_90, which this Hopper device also runs.
if [ -x build/fijit ]; then
    FIJIT_ARCH=sm_90 build/fijit prewarm --kernel prefill,batch_prefill_ragged,batch_prefill_paged \
        --dtype fp16,bf16 --head-dim 64,128,256 --mask none,causal,window,custom \
        --pos none,rope,alibi --softcap 0,1 -j "$(nproc)" > "$OUT_DIR/prewarm_prefill_sm90.log" 2>&1
fi
mkdir -p "$OUT_DIR/sm90"
FIJIT_ARCH=sm_90 OUT=$OUT_DIR/sm90 timeout "${PREFILL_TEST_TIMEOUT:-900}" python3 tests/gpu/test_prefill.py --quick \
    > "$OUT_DIR/test_prefill_sm90.log" 2>&1
portable_rc=$?
[ $test_rc = 0 ] && test_rc=$portable_rc
# The tile kernels that the Hopper main loop replaces on sm_90a (FIJIT_PREFILL_WS=0).
mkdir -p "$OUT_DIR/tiles"
FIJIT_PREFILL_WS=0 OUT=$OUT_DIR/tiles timeout "${PREFILL_TEST_TIMEOUT:-900}" \
    python3 tests/gpu/test_prefill.py --quick --kinds single,ragged --no-sdpa \
    > "$OUT_DIR/test_prefill_tiles.log" 2>&1
tiles_rc=$?
[ $test_rc = 0 ] && test_rc=$tiles_rc
# Three persistent CTAs, so that each claims many blocks from the plan's counter
# (single prefill: from its workspace's in half the cases, else walks every third).
mkdir -p "$OUT_DIR/claims"
FIJIT_PREFILL_WS=persistent:3 OUT=$OUT_DIR/claims timeout "${PREFILL_TEST_TIMEOUT:-900}" \
    python3 tests/gpu/test_prefill.py --quick --kinds single,ragged --no-sdpa \
    > "$OUT_DIR/test_prefill_claims.log" 2>&1
claims_rc=$?
[ $test_rc = 0 ] && test_rc=$claims_rc
# fp8 (e4m3 q/k/v) against float64, and its argument errors.
OUT=$OUT_DIR timeout "${PREFILL_TEST_TIMEOUT:-900}" python3 tests/gpu/test_prefill_fp8.py "${TEST_ARGS[@]}" \
    > "$OUT_DIR/test_prefill_fp8.log" 2>&1
fp8_rc=$?
[ $test_rc = 0 ] && test_rc=$fp8_rc
if [ -n "${PREFILL_BASELINE:-}" ]; then
    BENCH_ARGS+=(--rounds 5 --config "before,$PREFILL_BASELINE" --config "after,")
elif [ -n "${PREFILL_AB:-}" ]; then
    # This build as it is against itself under an environment: NAME,VAR=VAL[;VAR=VAL];
    # seq 16k too, even --quick (the long causal shapes are where block orders differ).
    BENCH_ARGS+=(--rounds 5 --seqs 1024,4096,16384 --config "default,build/libfijit.so"
                 --config "${PREFILL_AB%%,*},build/libfijit.so,,${PREFILL_AB#*,}")
else
    # The Hopper main loop against the tile kernels it replaces, side by side.
    BENCH_ARGS+=(--config "ws,build/libfijit.so" --config "tiles,build/libfijit.so,,FIJIT_PREFILL_WS=0")
fi
OUT=$OUT_DIR timeout "${PREFILL_BENCH_TIMEOUT:-900}" python3 bench/bench_prefill.py "${BENCH_ARGS[@]}" > "$OUT_DIR/bench_prefill.log" 2>&1
bench_rc=$?
# Single prefill with RoPE, with and without its optional workspace (outputs must match).
OUT=$OUT_DIR timeout "${PREFILL_BENCH_TIMEOUT:-900}" python3 bench/bench_single_rope.py > "$OUT_DIR/bench_single_rope.log" 2>&1
rope_rc=$?
[ $bench_rc = 0 ] && bench_rc=$rope_rc
# Batch prefill (ragged, paged) against single prefill on the same work: the
# target shapes (10 rounds: bench_batch_prefill.py's default), and without --quick the same
# target on the peers (SDPA-flash varlen, cuDNN on a jagged nested tensor).
BATCH_ARGS=(--hds 64,128,256 --heads 32/8,32/32 --dtypes fp16,bf16)
[ $QUICK = 1 ] && BATCH_ARGS=(--reps 10 --rounds 2)
OUT=$OUT_DIR timeout "${PREFILL_BENCH_TIMEOUT:-900}" python3 bench/bench_batch_prefill.py "${BATCH_ARGS[@]}" \
    > "$OUT_DIR/bench_batch_prefill.log" 2>&1
batch_rc=$?
[ $bench_rc = 0 ] && bench_rc=$batch_rc
if [ $QUICK = 0 ]; then
    OUT=$OUT_DIR timeout "${PREFILL_BENCH_TIMEOUT:-900}" python3 bench/peer_batch_prefill.py \
        --hds 64,128,256 > "$OUT_DIR/peer_batch_prefill.log" 2>&1
    peer_rc=$?
    [ $bench_rc = 0 ] && bench_rc=$peer_rc
fi
# fp8 beside 16-bit at head_dim 128 (the stretch target: >= 1.5x at seq >= 4k).
FP8_ARGS=(--fp8 --seqs 1024,4096,8192,16384 --dtypes bf16,fp16)
[ $QUICK = 1 ] && FP8_ARGS=(--fp8 --seqs 4096,16384 --dtypes bf16 --reps 10)
OUT=$OUT_DIR timeout "${PREFILL_BENCH_TIMEOUT:-900}" python3 bench/bench_prefill.py "${FP8_ARGS[@]}" \
    > "$OUT_DIR/bench_prefill_fp8.log" 2>&1
fp8_bench_rc=$?
[ $bench_rc = 0 ] && bench_rc=$fp8_bench_rc

echo
echo "==== prefill summary ===="
sed -n '/^prefill correctness/,/^test_prefill:/p' "$OUT_DIR/test_prefill.log"
echo "portable kernels (FIJIT_ARCH=sm_90, --quick): $(tail -1 "$OUT_DIR/test_prefill_sm90.log")"
echo "tile kernels on sm_90a (FIJIT_PREFILL_WS=0, --quick): $(tail -1 "$OUT_DIR/test_prefill_tiles.log")"
echo "three persistent CTAs claiming blocks (FIJIT_PREFILL_WS=persistent:3, --quick): $(tail -1 "$OUT_DIR/test_prefill_claims.log")"
echo "fp8 (tests/gpu/test_prefill_fp8.py): $(tail -1 "$OUT_DIR/test_prefill_fp8.log")"
[ -e "$OUT_DIR/ws_resources.log" ] && tail -1 "$OUT_DIR/ws_resources.log"
cat "$OUT_DIR/bench_batch_prefill.log"
[ -e "$OUT_DIR/peer_batch_prefill.log" ] && grep -v "^W[0-9]" "$OUT_DIR/peer_batch_prefill.log"
grep -v '^  ' "$OUT_DIR/bench_prefill.log" | sed -n '/^ERROR/p'
cat "$OUT_DIR/bench_single_rope.log"
sed -n '/^prefill, batch/,$p' "$OUT_DIR/bench_prefill.log"
sed -n '/^prefill fp8/,$p' "$OUT_DIR/bench_prefill_fp8.log"
echo "test rc $test_rc, bench rc $bench_rc"
[ "$test_rc" = 0 ] && [ "$bench_rc" = 0 ]
