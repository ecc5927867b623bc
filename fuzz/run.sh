#!/usr/bin/env bash
# Build the libFuzzer targets in fuzz/ and run each for SECONDS.
#
#   bash fuzz/run.sh 15      CI smoke (make test)
#   bash fuzz/run.sh 300     longer run (make fuzz)
#
# Needs clang with the libFuzzer runtime (Debian: clang, libclang-rt-14-dev or
# the matching version). Targets and objects go to build/fuzz/; the corpus
# grows in build/fuzz/corpus/<target> and is reused by later runs, crash
# inputs land in build/fuzz/crashes/. Prints the executions of each target;
# exits 1 if any target crashed, leaked or broke an invariant.
set -euo pipefail

SECONDS_EACH=${1:-15}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$ROOT/build/fuzz
CC=${FUZZ_CC:-clang}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
cd "$ROOT"

command -v "$CC" >/dev/null || { echo "fuzz: $CC not found (apt-get install clang libclang-rt-dev)"; exit 1; }
[ -f build/gen/embedded.c ] || make build/gen/embedded.c >/dev/null

SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
CPPFLAGS="-D_GNU_SOURCE -DFIJIT_BUILDING -Iinclude -Isrc -Itools -Itemplates -Ibuild/gen -I$CUDA_HOME/include"
CFLAGS="-std=c11 -g -O1 -Wall -Wno-unused-command-line-argument $SAN -fsanitize=fuzzer-no-link"
LIBS="-lsqlite3 -lxxhash -ldl -lpthread -lm"

mkdir -p "$OUT/obj" "$OUT/crashes"
objs=()
# Every library source, at any depth under src/ (src/store/local/index.c ...).
lib_srcs=$(find src -name '*.c' | sort)
for src in $lib_srcs build/gen/embedded.c tools/cli_manifest.c; do
    obj=$OUT/obj/$(echo "${src%.c}" | tr / _).o
    if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ] || [ -n "$(find src tools include -name '*.h' -newer "$obj" 2>/dev/null | head -1)" ]; then
        $CC $CPPFLAGS $CFLAGS -c "$src" -o "$obj"
    fi
    objs+=("$obj")
done
rm -f "$OUT/libfijit_fuzz.a"
ar rcs "$OUT/libfijit_fuzz.a" "${objs[@]}"

targets=(fuzz_spec fuzz_manifest fuzz_object fuzz_snippet fuzz_remote fuzz_config)
for t in "${targets[@]}"; do
    $CC $CPPFLAGS $CFLAGS -fsanitize=fuzzer "fuzz/$t.c" "$OUT/libfijit_fuzz.a" $LIBS -o "$OUT/$t"
done

# Seeds: valid and near-valid inputs, so that the fuzzer starts deep.
seed() { mkdir -p "$OUT/corpus/$1"; printf '%b' "$3" >"$OUT/corpus/$1/$2"; }
seed fuzz_spec s1 'decode q=fp16 kv=fp16 o=fp16 hd=128 mask=none pos=none softcap=0'
seed fuzz_spec s2 'decode softcap=1 hd=64 q=bf16 pos=rope mask=window'
seed fuzz_spec s3 'decode q=fp16 variant=my_variant-2'
seed fuzz_spec s4 'prefill q=fp8_e4m3 hd=256 mask=causal pos=alibi'
seed fuzz_manifest m1 '# specs\n\ndecode q=fp16 hd=64   # comment\n\tdecode q=bf16 hd=256 mask=window\r\n'
seed fuzz_manifest m2 'decode q=fp16\0hd=64\n'
seed fuzz_manifest m3 'decode q=fp16 variant=caf\xc3\xa9\n'
seed fuzz_object o1 '\x01\x00\x10decode q=fp16 hd=64 ELF payload bytes'
seed fuzz_object o2 '\x02\x05\x08sm_90a..payload'
seed fuzz_object o3 '\x00FIJITOB1\x01\x00\x00\x00'
seed fuzz_config c1 '# settings\nmax_size = 5G\n  log_level=info  \nremote = redis://:pw@h:6379/0?readonly\numask = 027\njit = off\n'
seed fuzz_config c2 'max_size = 0\nmax_szie = 2G\n'
seed fuzz_remote r1 '\x00redis://app:s%40cret@cache.example:6380/2?prefix=prod&ttl=60&readonly'
seed fuzz_remote r2 '\x00unix:///run/redis.sock?db=3&timeout=250'
seed fuzz_remote r4 '\x00https://fleet:s%40cret@cache.example:8443/ci/cache?prefix=p&cafile=/etc/ca.pem'
seed fuzz_remote r5 '\x00http://[::1]:8080/a redis://:pw@h:1/0?readonly\tunix:///s.sock'
seed fuzz_remote r3 '\x01FIJITMC1................................FIJITOB1\x01\x00\x00\x00'
seed fuzz_snippet v1 '\x00struct Variant : DefaultVariant {\n  template <typename T> __device__ static T logits_transform(T x) { return x * 2; }\n};\n'
seed fuzz_snippet v2 '\x45#include "../../etc/passwd"\n}}}}\n/*'
seed fuzz_snippet v3 '\x12%s%n%x\n#line 0\n'

status=0
total=0
for t in "${targets[@]}"; do
    log=$OUT/$t.log
    set +e
    (cd "$OUT/crashes" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
        "$OUT/$t" -max_total_time="$SECONDS_EACH" -print_final_stats=1 -timeout=20 \
        -rss_limit_mb=4096 -max_len=4096 "$OUT/corpus/$t") >"$log" 2>&1
    rc=$?
    set -e
    execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -1)
    corpus=$(ls "$OUT/corpus/$t" | wc -l)
    if [ $rc -ne 0 ]; then
        status=1
        echo "fuzz: $t FAILED (exit $rc) after ${execs:-?} executions; log $log:"
        grep -E 'ERROR|violated|SUMMARY|Test unit written' "$log" | head -20 | sed 's/^/    /'
    else
        echo "fuzz: $t ok: ${execs:-0} executions in ${SECONDS_EACH}s, corpus $corpus inputs"
        total=$((total + ${execs:-0}))
    fi
done
echo "fuzz: $total executions in all, $([ $status = 0 ] && echo 'no failures' || echo 'FAILURES')"
exit $status
