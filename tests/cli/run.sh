#!/usr/bin/env bash
# CLI tests for `fijit`: run the binary, normalise what changes from run to
# run (times, temp paths, keys, object sizes, ages) and compare exit code,
# stdout and stderr with tests/cli/expected/<case>.txt. Statistics are the
# oracle for what happened ("stats --json" after each prewarm).
#
#   tests/cli/run.sh build/fijit            run every case
#   FIJIT_CLI_UPDATE=1 tests/cli/run.sh ... rewrite the expected files (review the diff!)
#
# Real compiles take ~0.5-1 s each on a small machine, so each case compiles
# as few tuples as it can (the variant cases: three, and one front-end failure).
# The last line is "N passed, N failed"; the exit status is 1 if any failed.
set -u

FIJIT=${1:?usage: tests/cli/run.sh path/to/fijit}
case $FIJIT in /*) ;; *) FIJIT=$PWD/$FIJIT ;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
EXPECTED=$HERE/expected
UPDATE=${FIJIT_CLI_UPDATE:-0}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/fijit-cli.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
CACHE=$WORK/cache

# Nothing from the caller's environment may change what the CLI does.
unset FIJIT_CACHE_DIR FIJIT_ARCH FIJIT_JIT FIJIT_LOG FIJIT_MAX_CACHE_SIZE FIJIT_TEMPLATE_DIR \
      FIJIT_REMOTE FIJIT_REMOTE_SECRET FIJIT_REMOTE_TOKEN FIJIT_LOCK_TIMEOUT_MS FIJIT_UMASK \
      FIJIT_FAST_COMPILE FIJIT_LOAD FIJIT_PREFILL_WS \
      XDG_CACHE_HOME
export HOME=$WORK/home
mkdir -p "$HOME"

passed=0
failed=0

pass() { passed=$((passed + 1)); echo "ok   $1"; }
fail() {
    failed=$((failed + 1))
    echo "FAIL $1: $2"
}

# Replace volatile text with fixed tokens.
normalise() {
    sed -E \
        -e "s#$WORK#<work>#g" \
        -e 's/[0-9]+(\.[0-9]+)? ms\b/N ms/g' \
        -e 's/ in [0-9]+\.[0-9] s / in S s /' \
        -e 's/\b[0-9a-f]{32}\b/<key>/g' \
        -e 's#objects/[0-9a-f]{2}/#objects/<xx>/#g' \
        -e 's/\b[0-9]+(\.[0-9])? (B|KiB|MiB|GiB)\b/<size>/g' \
        -e 's/ is [0-9]+ bytes but its header says [0-9]+/ is N bytes but its header says M/' \
        -e 's/ +<size> +[0-9]+[smhd] +/ <size> <age> /' \
        -e 's/\b[0-9]+\.[0-9]+\.[0-9]+\b/<version>/g'
}

# run NAME [--sort] [--env VAR=VALUE].. -- ARGS...: run fijit and compare with
# expected/NAME.txt. --sort sorts stdout first (parallel workers finish in any
# order); --env sets a variable for that run only.
run() {
    local name=$1 sort=0 envs=()
    shift
    if [ "$1" = --sort ]; then sort=1; shift; fi
    while [ "$1" = --env ]; do envs+=("$2"); shift 2; done
    [ "$1" = -- ] && shift
    local out=$WORK/$name.out err=$WORK/$name.err actual=$WORK/$name.actual
    env "${envs[@]}" "$FIJIT" "$@" >"$out" 2>"$err"
    local rc=$?
    {
        echo "exit $rc"
        echo "--- stdout"
        if [ $sort = 1 ]; then normalise <"$out" | LC_ALL=C sort; else normalise <"$out"; fi
        echo "--- stderr"
        normalise <"$err"
    } >"$actual"
    LAST_RC=$rc
    LAST_OUT=$out
    if [ "$UPDATE" = 1 ]; then
        mkdir -p "$EXPECTED"
        cp "$actual" "$EXPECTED/$name.txt"
        pass "$name (updated)"
    elif [ ! -f "$EXPECTED/$name.txt" ]; then
        fail "$name" "no expected file $EXPECTED/$name.txt (run with FIJIT_CLI_UPDATE=1)"
    elif diff -u "$EXPECTED/$name.txt" "$actual" >"$WORK/$name.diff"; then
        pass "$name"
    else
        fail "$name" "output differs:"
        sed 's/^/    /' "$WORK/$name.diff"
    fi
}

# check NAME CONDITION-TEXT COMMAND...: a check that is not a golden file.
check() {
    local name=$1 what=$2
    shift 2
    if "$@"; then pass "$name"; else fail "$name" "$what"; fi
}

# The integer value of KEY in `fijit stats --json`.
stat_of() {
    "$FIJIT" stats --json --cache-dir "$CACHE" | sed -E "s/.*\"$1\":(-?[0-9]+).*/\1/"
}
stat_is() { [ "$(stat_of "$1")" = "$2" ] || { echo "    $1 = $(stat_of "$1"), want $2"; return 1; }; }

# A list row normalises to one text however long the machine took: the age
# column ("5s", "15s", "115s") and the size widen under load, and the columns
# are padded to them.
LIST_ROW='decode q=fp16 kv=fp16 o=fp16 hd=64 mask=none pos=none softcap=0  sm_90a'
list_rows_normalised() {
    printf '%s %10s %6s %6s\n' "$LIST_ROW" "$1" "$2" 1 | normalise
}
check list_age_normalised "a list row's age or size width shows through the normaliser" \
    eval '[ "$(list_rows_normalised "88.1 KiB" 5s)" = "$(list_rows_normalised "100.3 KiB" 115s)" ] &&
          [ "$(list_rows_normalised "88.1 KiB" 5s)" = "$(list_rows_normalised "88.1 KiB" 15s)" ]'

# ---- help and usage -----------------------------------------------------------------
run help -- --help
run version -- --version
run no_command --
run unknown_command -- frobnicate
run unknown_top_option -- --frob list
for cmd in prewarm list stats verify clear gc show-config explain demo remote export import; do
    run "help_$cmd" -- "$cmd" --help
done

# Every FIJIT_* variable the library reads (a quoted name in src/: a getenv
# or the settings table) is in `fijit --help`, in show-config's environment
# list, and has exactly one row in docs/cli.md's environment table and one
# in docs/configuration.md's settings table.
ENV_NAMES=$(grep -rhoE '"FIJIT_[A-Z0-9_]+"' "$HERE/../../src" | tr -d '"' | LC_ALL=C sort -u)
env_names_documented() {
    local help config missing="" name
    help=$("$FIJIT" --help)
    config=$("$FIJIT" show-config --cache-dir "$WORK/no-cache")
    [ -n "$ENV_NAMES" ] || { echo "    no FIJIT_ name found in src/"; return 1; }
    for name in $ENV_NAMES; do
        grep -qw "$name" <<<"$help" || missing+=" $name(--help)"
        grep -qE "^  $name +" <<<"$config" || missing+=" $name(show-config)"
        [ "$(grep -cE "^\| \`$name\` \|" "$HERE/../../docs/cli.md")" = 1 ] ||
            missing+=" $name(docs/cli.md)"
        [ "$(grep -cE "^\| [^|]+ \| \`$name\` \|" "$HERE/../../docs/configuration.md")" = 1 ] ||
            missing+=" $name(docs/configuration.md)"
    done
    [ -z "$missing" ] || { echo "    missing or repeated:$missing"; return 1; }
}
check env_names_in_help_show_config_and_docs "a FIJIT_ variable of src/ is not documented" \
    env_names_documented

# ---- bad arguments: exit 2, nothing touched -----------------------------------------
run bad_unknown_flag -- list --foo --cache-dir "$CACHE"
run bad_head_dim -- prewarm --head-dim 64,65 --cache-dir "$CACHE"
run bad_mask -- prewarm --mask causal --cache-dir "$CACHE"
run bad_dtype -- prewarm --dtype fp16,fp32 --cache-dir "$CACHE"
run bad_arch -- prewarm --arch sm_9 --cache-dir "$CACHE"
run bad_jobs -- prewarm -j 0 --cache-dir "$CACHE"
run bad_missing_value -- prewarm --head-dim
run bad_positional -- list extra
run bad_gc_size -- gc --max-size 12X --cache-dir "$CACHE"
run bad_gc_age -- gc --older-than 3y --cache-dir "$CACHE"
run bad_explain_missing -- explain
run bad_explain_spec -- explain "decode hd=65"
run bad_head_dim_vo -- prewarm --kernel prefill --head-dim 128 --head-dim-vo 64 --cache-dir "$CACHE"
run bad_list_dtype -- list --dtype fp9 --cache-dir "$CACHE"
printf '# specs for the test\n\ndecode q=fp16 hd=64\ndecode q=fp16 hd=64 mask=sideways\n' \
    >"$WORK/bad.manifest"
run bad_manifest_line -- prewarm --manifest "$WORK/bad.manifest" --cache-dir "$CACHE"
run bad_manifest_missing -- prewarm --manifest "$WORK/none.manifest" --cache-dir "$CACHE"
check bad_args_compiled_nothing "a bad argument compiled something" \
    test ! -e "$CACHE/objects" -o -z "$(find "$CACHE/objects" -type f 2>/dev/null)"

# ---- prewarm, then again from the cache -------------------------------------------
SPECS=(--dtype fp16,bf16 --head-dim 64 --arch sm_90a)
run prewarm_fresh -- prewarm "${SPECS[@]}" -j 1 --cache-dir "$CACHE"
check prewarm_fresh_stats "expected 2 compiles, 2 entries" \
    eval 'stat_is compiles 2 && stat_is entries 2 && stat_is compile_failures 0'
run prewarm_again --sort -- prewarm "${SPECS[@]}" -j 2 --cache-dir "$CACHE"
check prewarm_again_stats "expected no new compile and 2 disk hits" \
    eval 'stat_is compiles 2 && stat_is disk_hits 2 && stat_is entries 2'
printf '# already cached\n\ndecode q=fp16 hd=64   # same as above\ndecode q=fp16 kv=fp16 o=fp16 hd=64\n' \
    >"$WORK/good.manifest"
run prewarm_manifest -- prewarm --manifest "$WORK/good.manifest" --arch sm_90a --cache-dir "$CACHE"
check prewarm_manifest_stats "expected no new compile" stat_is compiles 2

# ---- the fleet: a remote cache (a private redis-server) and bundles -----------------
FLEET=$WORK/fleet
mkdir -p "$FLEET"
cp -a "$CACHE" "$FLEET/a"
fstat() { "$FIJIT" stats --json --cache-dir "$1" | sed -E "s/.*\"$2\":(-?[0-9]+).*/\1/"; }
run remote_bad_url -- prewarm --dtype fp16 --head-dim 64 --remote 'redis://h:99999' --cache-dir "$FLEET/a"
run remote_no_url -- remote ping
run remote_bad_verb -- remote frob --remote 'unix:///nowhere.sock'
"$FIJIT" show-config --remote 'redis://:hunter2@cache-host:6380/1?readonly' >"$WORK/fleet-config.txt" 2>&1
check show_config_masks_the_password "show-config did not show the remote masked, or leaked it" \
    eval "grep -q '^remote cache  *redis://\*\*\*@cache-host:6380/1?readonly (--remote)' '$WORK/fleet-config.txt' && ! grep -q hunter2 '$WORK/fleet-config.txt'"
if command -v redis-server >/dev/null; then
    redis-server --port 0 --unixsocket "$FLEET/redis.sock" --unixsocketperm 700 --save '' \
        --appendonly no --dir "$FLEET" --logfile "$FLEET/redis.log" --daemonize no &
    REDIS_PID=$!
    for _ in $(seq 100); do [ -S "$FLEET/redis.sock" ] && break; sleep 0.05; done
    URL=unix://$FLEET/redis.sock
    run fleet_prewarm_fills_the_remote -- prewarm "${SPECS[@]}" -j 1 --remote "$URL" --cache-dir "$FLEET/a"
    run fleet_remote_list -- remote list --remote "$URL"
    run fleet_remote_ping -- remote ping --remote "$URL"
    "$FIJIT" remote stats --remote "$URL" >"$WORK/fleet-stats.txt" 2>&1
    check fleet_remote_stats "remote stats did not count 2 entries: $(head -c 300 "$WORK/fleet-stats.txt")" \
        eval "grep -qE '^entries +2$' '$WORK/fleet-stats.txt' && grep -q 'maxmemory_policy' '$WORK/fleet-stats.txt'"
    run fleet_host_b_from_the_remote -- prewarm "${SPECS[@]}" -j 1 --remote "$URL" --cache-dir "$FLEET/b"
    check fleet_host_b_compiled_nothing "host b: want 0 compiles and 2 remote hits" \
        eval "[ $(fstat "$FLEET/b" compiles) = 0 ] && [ $(fstat "$FLEET/b" remote_hits) = 2 ]"
    kill -9 "$REDIS_PID"; wait "$REDIS_PID" 2>/dev/null
    run fleet_remote_ping_dead -- remote ping --remote "$URL"
else
    echo "SKIPPED the remote cases: redis-server is not installed (run 'make deps')"
fi
run bundle_export_all -- export -o "$FLEET/all.bundle" --all --cache-dir "$FLEET/a"
run bundle_export_exists -- export -o "$FLEET/all.bundle" --all --cache-dir "$FLEET/a"
run bundle_export_spec -- export -o "$FLEET/one.bundle" "decode q=bf16 hd=64" --arch sm_90a --cache-dir "$FLEET/a"
run bundle_export_nothing_chosen -- export -o "$FLEET/x.bundle" --cache-dir "$FLEET/a"
run bundle_import_one -- import "$FLEET/one.bundle" --cache-dir "$FLEET/c"
run bundle_import_into_a_cache_with_some -- import "$FLEET/all.bundle" --cache-dir "$FLEET/c"
run bundle_import_again -- import "$FLEET/all.bundle" --cache-dir "$FLEET/c"
run bundle_verify_after_import -- verify --cache-dir "$FLEET/c"
"$FIJIT" prewarm "${SPECS[@]}" -j 1 --cache-dir "$FLEET/c" >/dev/null 2>&1
check bundle_import_serves_without_compiles "want 0 compiles after import" \
    eval "[ $(fstat "$FLEET/c" compiles) = 0 ] && [ $(fstat "$FLEET/c" entries) = 2 ]"
run bundle_import_not_a_bundle -- import "$WORK/good.manifest" --cache-dir "$FLEET/d"
run bundle_import_missing -- import "$FLEET/none.bundle" --cache-dir "$FLEET/d"
run bundle_import_unsealed_with_a_secret --env FIJIT_REMOTE_SECRET=0123456789abcdef-fleet \
    -- import "$FLEET/all.bundle" --cache-dir "$FLEET/d"
run bundle_export_sealed --env FIJIT_REMOTE_SECRET=0123456789abcdef-fleet \
    -- export -o "$FLEET/sealed.bundle" --all --cache-dir "$FLEET/a"
run bundle_import_sealed_wrong_secret --sort --env FIJIT_REMOTE_SECRET=another-secret-of-the-length \
    -- import "$FLEET/sealed.bundle" --cache-dir "$FLEET/d"
run bundle_import_sealed --env FIJIT_REMOTE_SECRET=0123456789abcdef-fleet \
    -- import "$FLEET/sealed.bundle" --cache-dir "$FLEET/d"
# A link to a bundle imports it; a directory, FIFO or device is not a regular
# file (and never blocks); a truncated bundle imports the entries it holds whole.
ln -s all.bundle "$FLEET/link.bundle"
run bundle_import_through_a_symlink -- import "$FLEET/link.bundle" --cache-dir "$FLEET/e"
mkfifo "$FLEET/fifo.bundle"
run bundle_import_fifo -- import "$FLEET/fifo.bundle" --cache-dir "$FLEET/e"
run bundle_import_directory -- import "$FLEET" --cache-dir "$FLEET/e"
run bundle_import_device -- import /dev/zero --cache-dir "$FLEET/e"
head -c "$(( $(stat -c %s "$FLEET/all.bundle") * 99 / 100 ))" "$FLEET/all.bundle" >"$FLEET/short.bundle"
"$FIJIT" import "$FLEET/short.bundle" --cache-dir "$FLEET/f" >"$WORK/short.out" 2>&1
rc=$?
check bundle_import_truncated_imports_the_whole_entries "want exit 1, 1 added, 1 refused: $(cat "$WORK/short.out")" \
    eval "[ $rc = 1 ] && grep -q '2 entries: 1 added, 0 already present, 1 refused' '$WORK/short.out' \
          && grep -q 'is truncated' '$WORK/short.out' && \"$FIJIT\" verify --cache-dir '$FLEET/f' >/dev/null"
run bundle_export_missing_cache -- export -o "$FLEET/none.bundle" --all --cache-dir "$FLEET/no-such-cache"
# A listing prints '?' for the control bytes an index written by another
# program may hold, never the bytes themselves.
cp -a "$CACHE" "$FLEET/escapes"
python3 -c 'import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("UPDATE entries SET spec = \x27decode\x27 || char(27) || \x27[2J\x27 || char(10) || \x27fake line\x27 WHERE spec LIKE \x27%bf16%\x27")
db.commit()' "$FLEET/escapes/index.sqlite"
run list_escapes_control_bytes -- list --cache-dir "$FLEET/escapes"

# ---- inspecting ----------------------------------------------------------------------
run list -- list --cache-dir "$CACHE"
run list_dtype -- list --dtype bf16 --cache-dir "$CACHE"
run list_other_arch -- list --arch sm_80 --cache-dir "$CACHE"
run list_via_top_option -- --cache-dir "$CACHE" list --kernel decode
run list_repeated_and_inline -- list --dtype fp16 --dtype bf16 --arch=sm_90a --cache-dir="$CACHE"
run verify_clean -- verify --cache-dir "$CACHE"
"$FIJIT" stats --json --cache-dir "$CACHE" >"$WORK/stats.json"
check stats_json_one_line "stats --json is not one JSON object with the 16 integer keys" \
    eval "[ \$(wc -l <'$WORK/stats.json') = 1 ] && [ \$(grep -oE '\"[a-z_]+\":[0-9]+' '$WORK/stats.json' | wc -l) = 16 ]"
"$FIJIT" stats --cache-dir "$CACHE" >"$WORK/stats.txt"
check stats_table "stats table lacks a compiles line" grep -qE '^compiles +2$' "$WORK/stats.txt"
"$FIJIT" show-config --cache-dir "$CACHE" >"$WORK/config.txt" 2>&1
check show_config "show-config failed or did not name the cache dir" \
    grep -q "^cache dir  *$CACHE (--cache-dir)" "$WORK/config.txt"
"$FIJIT" explain "decode q=fp16 hd=64" --arch sm_90a --cache-dir "$CACHE" >"$WORK/explain.txt"
FP16_KEY=$("$FIJIT" list --keys --dtype fp16 --cache-dir "$CACHE" | cut -d' ' -f1)
check explain_key_matches_list "explain's key is not the key list shows for the spec" \
    grep -qx "key $FP16_KEY" "$WORK/explain.txt"

# ---- environment, arches and limits ------------------------------------------
# Bad environment values are usage errors (exit 2) wherever they are used...
run env_bad_log --env FIJIT_LOG=abc -- prewarm "${SPECS[@]}" --cache-dir "$CACHE"
run env_bad_size_prewarm --env FIJIT_MAX_CACHE_SIZE=lots -- prewarm "${SPECS[@]}" --cache-dir "$CACHE"
run env_bad_size_explain --env FIJIT_MAX_CACHE_SIZE=lots -- explain "decode hd=64" --arch sm_90a
run env_bad_arch_explain --env FIJIT_ARCH=sm_xx -- explain "decode hd=64" --cache-dir "$CACHE"
# explain never uses a remote: the operator's FIJIT_REMOTE draws no warning from it.
FIJIT_REMOTE=redis://127.0.0.1:1 FIJIT_LOG=warn "$FIJIT" explain "decode hd=64" --arch sm_90a \
    --cache-dir "$CACHE" >/dev/null 2>"$WORK/explain_remote.err"
rc=$?
check explain_with_a_remote_is_quiet "explain with FIJIT_REMOTE: exit $rc, stderr: $(cat "$WORK/explain_remote.err")" \
    eval "[ $rc = 0 ] && [ ! -s '$WORK/explain_remote.err' ]"
run env_bad_arch_prewarm --env FIJIT_ARCH=sm_xx -- prewarm --dtype fp16 --cache-dir "$CACHE"
run env_bad_arch_demo --env FIJIT_ARCH=sm_xx -- demo --cache-dir "$CACHE"
# One size parser: FIJIT_MAX_CACHE_SIZE (read by the library's
# context in explain, and by gc itself) and `gc --max-size` take the same
# spellings, and refuse the same ones.
# size_case NAME SIZE WANT: explain, gc from the environment and gc --max-size
# all exit WANT for SIZE.
size_case() {
    local name=$1 size=$2 want=$3 rc_explain rc_env_gc rc_gc
    FIJIT_MAX_CACHE_SIZE=$size "$FIJIT" explain "decode hd=64" --arch sm_90a --cache-dir "$CACHE" \
        >"$WORK/size.out" 2>&1
    rc_explain=$?
    FIJIT_MAX_CACHE_SIZE=$size "$FIJIT" gc --cache-dir "$CACHE" >>"$WORK/size.out" 2>&1
    rc_env_gc=$?
    "$FIJIT" gc --max-size "$size" --cache-dir "$CACHE" >>"$WORK/size.out" 2>&1
    rc_gc=$?
    check "$name" "explain/env gc/gc exit $rc_explain/$rc_env_gc/$rc_gc, want $want: $(cat "$WORK/size.out")" \
        eval "[ $rc_explain = $want ] && [ $rc_env_gc = $want ] && [ $rc_gc = $want ]"
}
for size in 4GiB 4GB 4G 4g 4096M 4096MiB 4194304k 1.5GiB 4294967296 4294967296B; do
    size_case "size_spelling_$size" "$size" 0
done
for size in 4X 4iB -1 .5G " 4G" 4G5 nan inf 4KK; do
    size_case "size_refused_'$size'" "$size" 2
done
# ...and only there: stats needs no arch.
FIJIT_ARCH=sm_xx "$FIJIT" stats --json --cache-dir "$CACHE" >"$WORK/astats.out" 2>&1
rc=$?
check env_bad_arch_stats "want exit 0 and the statistics: $(cat "$WORK/astats.out")" \
    eval "[ $rc = 0 ] && grep -q '\"entries\":2,' '$WORK/astats.out'"
run env_bad_log_list --env FIJIT_LOG=abc -- list --dtype bf16 --cache-dir "$CACHE"
# An arch NVRTC does not compile for is a usage error, before any compile.
"$FIJIT" prewarm --dtype fp16 --head-dim 64 --arch sm_90a,sm_999 --cache-dir "$CACHE" >"$WORK/a999.out" 2>&1
rc=$?
check arch_unknown_to_nvrtc "want exit 2 naming NVRTC's arches: $(cat "$WORK/a999.out")" \
    eval "[ $rc = 2 ] && grep -qE '^fijit prewarm: --arch sm_999: NVRTC [0-9]+\.[0-9]+ does not compile for it \(it compiles for .*sm_90' '$WORK/a999.out'"
run arch_specific_too_old -- explain "decode hd=64" --arch sm_80a --cache-dir "$CACHE"
check arch_checks_compiled_nothing "a refused arch compiled something" stat_is compiles 2
# explain refuses a spec it would have to cut, rather than explain another tuple.
run explain_long_spec -- explain "decode q=fp16 hd=64$(printf '%*s' 500 '')mask=window" --arch sm_90a
# -j is capped at twice the CPUs, and says so.
"$FIJIT" prewarm "${SPECS[@]}" -j 100000 --cache-dir "$CACHE" >"$WORK/j.out" 2>"$WORK/j.err"
rc=$?
check jobs_capped "want exit 0 and the cap on stderr: $(cat "$WORK/j.out" "$WORK/j.err")" \
    eval "[ $rc = 0 ] && grep -qxE 'fijit prewarm: -j 100000 is more than twice the [0-9]+ online CPUs; using [0-9]+ workers' '$WORK/j.err'"
# A relative XDG_CACHE_HOME is ignored (XDG spec): ~/.cache/fijit.
(cd "$WORK" && env XDG_CACHE_HOME=relative "$FIJIT" show-config) >"$WORK/xdg.out" 2>&1
check xdg_relative_ignored "want $HOME/.cache/fijit: $(grep 'cache dir' "$WORK/xdg.out")" \
    grep -qxF "cache dir            $HOME/.cache/fijit" "$WORK/xdg.out"
# Looking at a cache that does not exist creates nothing.
NONE=$WORK/no-such-cache
run stats_missing_cache -- stats --json --cache-dir "$NONE"
run list_missing_cache -- list --cache-dir "$NONE"
run verify_missing_cache -- verify --cache-dir "$NONE"
"$FIJIT" stats --cache-dir "$NONE" >/dev/null 2>&1
"$FIJIT" explain "decode hd=64" --arch sm_90a --cache-dir "$NONE" >/dev/null 2>&1
(cd "$WORK" && env XDG_CACHE_HOME="$WORK/xdg" "$FIJIT" stats && env XDG_CACHE_HOME="$WORK/xdg" \
    "$FIJIT" explain "decode hd=64" --arch sm_90a && "$FIJIT" show-config) >/dev/null 2>&1
check read_only_commands_create_nothing "a read-only command created a cache dir" \
    eval "[ ! -e '$NONE' ] && [ ! -e '$WORK/xdg' ] && [ ! -e '$HOME/.cache' ]"

# explain --source prints the unit the key hashes as "source", byte for byte;
# --ptx compiles it to PTX now (the cache holds cubins). Neither needs a cache.
"$FIJIT" explain "decode q=fp16 hd=64" --arch sm_90a --cache-dir "$NONE" >"$WORK/ex.txt"
"$FIJIT" explain "decode q=fp16 hd=64" --arch sm_90a --source --cache-dir "$NONE" >"$WORK/ex.cu"
rc=$?
SOURCE_BYTES=$(sed -nE 's/^source +([0-9]+) bytes .*/\1/p' "$WORK/ex.txt")
check explain_source "want exit 0 and the $SOURCE_BYTES bytes the key hashes: $(head -c 300 "$WORK/ex.cu")" \
    eval "[ $rc = 0 ] && [ -n '$SOURCE_BYTES' ] && [ \$(wc -c <'$WORK/ex.cu') = '$SOURCE_BYTES' ] \
          && grep -qx 'constexpr int kHeadDim = 64;' '$WORK/ex.cu' && grep -qx '#include \"decode/decode.cuh\"' '$WORK/ex.cu' \
          && [ \"\$(tail -c 1 '$WORK/ex.cu' | od -An -c | tr -d ' ')\" = '\\n' ]"
"$FIJIT" explain "decode q=fp16 hd=64" --arch sm_90a --ptx --cache-dir "$NONE" >"$WORK/ex.ptx" 2>&1
rc=$?
check explain_ptx "want exit 0 and PTX for sm_90a with the decode entry: $(head -c 300 "$WORK/ex.ptx")" \
    eval "[ $rc = 0 ] && grep -qx '.target sm_90a' '$WORK/ex.ptx' && grep -q '^.visible .entry fi_decode_kernel(' '$WORK/ex.ptx' \
          && [ ! -e '$NONE' ]"
run explain_source_and_ptx -- explain "decode hd=64" --source --ptx --cache-dir "$NONE"

# ---- a corrupt object: reported, then rebuilt ----------------------------------------
FP16_OBJECT=$CACHE/objects/${FP16_KEY:0:2}/$FP16_KEY.fo
check corrupt_object_exists "no object file for key '$FP16_KEY'" test -f "$FP16_OBJECT"
truncate -s 100 "$FP16_OBJECT"
run verify_corrupt -- verify --cache-dir "$CACHE"
run prewarm_rebuild -- prewarm "${SPECS[@]}" -j 1 --cache-dir "$CACHE"
check prewarm_rebuild_stats "expected one more compile and one corrupt object" \
    eval 'stat_is compiles 3 && stat_is corrupt 1 && stat_is entries 2'
run verify_after_rebuild -- verify --cache-dir "$CACHE"
truncate -s 100 "$FP16_OBJECT"
run verify_repair -- verify --repair --cache-dir "$CACHE"
check verify_repair_stats "expected 1 entry left after repair" stat_is entries 1
run prewarm_after_repair -- prewarm "${SPECS[@]}" -j 1 --cache-dir "$CACHE"
check prewarm_after_repair_stats "expected a fourth compile" stat_is compiles 4

# ---- a tuple built in two parts (prefill on sm_90a, docs/cold-start.md) --------------
# A row per part that says which part it is; export and import take both;
# a part the cache lost is rebuilt alone, and the tuple is whole again.
PC=$WORK/parts
PARTS_SPEC="prefill q=fp16 hd=64 mask=causal"
pstat_is() { # CACHE KEY VALUE
    local v
    v=$("$FIJIT" stats --json --cache-dir "$1" | sed -E "s/.*\"$2\":(-?[0-9]+).*/\1/")
    [ "$v" = "$3" ] || { echo "    $2 = $v, want $3"; return 1; }
}
rows_all_differ() { [ -z "$(normalise <"$1" | LC_ALL=C sort | uniq -d)" ]; }
run parts_prewarm -- prewarm --kernel prefill --dtype fp16 --head-dim 64 --mask causal \
    --arch sm_90a --cache-dir "$PC/a"
check parts_prewarm_stats "want two compiles, two entries" \
    eval 'pstat_is "$PC/a" compiles 2 && pstat_is "$PC/a" entries 2'
run parts_list --sort -- list --cache-dir "$PC/a"
check parts_list_rows_differ "two rows read the same: $(normalise <"$LAST_OUT")" rows_all_differ "$LAST_OUT"
run parts_export -- export -o "$PC/parts.bundle" "$PARTS_SPEC" --arch sm_90a --cache-dir "$PC/a"
run parts_import -- import "$PC/parts.bundle" --cache-dir "$PC/b"
run parts_list_imported --sort -- list --cache-dir "$PC/b"
PART1_KEY=$("$FIJIT" list --keys --cache-dir "$PC/b" | sed -nE 's/^([0-9a-f]{32}) .* part 1 of 2$/\1/p')
check parts_key_found "no row says 'part 1 of 2'" test -n "$PART1_KEY"
rm -f "$PC/b/objects/${PART1_KEY:0:2}/$PART1_KEY.fo"
run parts_verify_repair -- verify --repair --cache-dir "$PC/b"
run parts_prewarm_rebuilds_the_missing_part -- prewarm --kernel prefill --dtype fp16 \
    --head-dim 64 --mask causal --arch sm_90a --cache-dir "$PC/b"
check parts_missing_part_rebuilt_alone "want one compile and both parts in the cache" \
    eval 'pstat_is "$PC/b" compiles 1 && pstat_is "$PC/b" entries 2'
run parts_list_rebuilt --sort -- list --cache-dir "$PC/b"
check parts_rebuilt_rows_differ "two rows read the same" eval \
    '"$FIJIT" list --cache-dir "$PC/b" >"$WORK/parts_rebuilt.rows" && rows_all_differ "$WORK/parts_rebuilt.rows"'
# The remote's list says which part each entry is, as `fijit list` does.
if command -v redis-server >/dev/null; then
    redis-server --port 0 --unixsocket "$PC/redis.sock" --unixsocketperm 700 --save '' \
        --appendonly no --dir "$PC" --logfile "$PC/redis.log" --daemonize no &
    PARTS_REDIS=$!
    for _ in $(seq 100); do [ -S "$PC/redis.sock" ] && break; sleep 0.05; done
    run parts_push -- prewarm --kernel prefill --dtype fp16 --head-dim 64 --mask causal \
        --arch sm_90a --remote "unix://$PC/redis.sock" --cache-dir "$PC/a"
    # (no golden: the size column's width follows the NVRTC's cubin sizes)
    "$FIJIT" remote list --remote "unix://$PC/redis.sock" >"$WORK/parts_remote.rows" 2>&1
    check parts_remote_list_says_each_part "want a row for part 1 and one for part 2: $(cat "$WORK/parts_remote.rows")" \
        eval '[ "$(grep -oE "part [0-9] of [0-9]$" "$WORK/parts_remote.rows" | LC_ALL=C sort | tr "\n" ,)" = "part 1 of 2,part 2 of 2," ]'
    kill -9 "$PARTS_REDIS"; wait "$PARTS_REDIS" 2>/dev/null
fi

# ---- gc and clear -------------------------------------------------------------------
run gc_nothing_old -- gc --older-than 30d --cache-dir "$CACHE"
run gc_size -- gc --max-size "$(($(stat_of bytes) - 1))" --cache-dir "$CACHE"
check gc_size_stats "expected 1 entry after gc" stat_is entries 1
run clear -- clear --cache-dir "$CACHE"
run list_empty -- list --cache-dir "$CACHE"
check clear_stats "clear left entries or lost statistics" \
    eval 'stat_is entries 0 && stat_is compiles 4'
run stats_zero -- stats --zero --json --cache-dir "$CACHE"
run verify_empty -- verify --cache-dir "$CACHE"

# ---- a cache dir others may write is refused ----------------------------------------
mkdir -m 0777 "$WORK/open"
chmod 0777 "$WORK/open"
"$FIJIT" prewarm "${SPECS[@]}" --cache-dir "$WORK/open" >"$WORK/open.out" 2>"$WORK/open.err"
rc=$?
check unsafe_dir_refused "want exit 1 with a message, got $rc: $(cat "$WORK/open.err")" \
    eval "[ $rc = 1 ] && grep -q 'fijit prewarm: ' '$WORK/open.err'"

# ---- a kernel that compiles but cannot be stored: FAILED, counted, exit 1 ----------
# objects/ is made read-only; root ignores permissions, so root runs as nobody.
AS_USER=()
[ "$(id -u)" = 0 ] && AS_USER=(setpriv --reuid=65534 --regid=65534 --clear-groups)
chmod 711 "$WORK"
mkdir -m 755 "$WORK/ro"
[ "$(id -u)" = 0 ] && chown 65534:65534 "$WORK/ro"
printf '# nothing: creates the cache only\n' >"$WORK/ro/empty.manifest"
"${AS_USER[@]}" "$FIJIT" prewarm --manifest "$WORK/ro/empty.manifest" --arch sm_90a \
    --cache-dir "$WORK/ro/cache" >/dev/null 2>&1
chmod 0500 "$WORK/ro/cache/objects"
"${AS_USER[@]}" "$FIJIT" prewarm --dtype fp16 --head-dim 64 --arch sm_90a -j 1 \
    --cache-dir "$WORK/ro/cache" >"$WORK/ro.out" 2>"$WORK/ro.err"
rc=$?
RO_COMPILES=$("${AS_USER[@]}" "$FIJIT" stats --json --cache-dir "$WORK/ro/cache" |
              sed -E 's/.*"compiles":([0-9]+).*"entries":([0-9]+).*/\1 \2/')
check prewarm_not_stored_fails "want exit 1, a FAILED line, 1 failed, compiles 1 entries 0 (got $RO_COMPILES): $(cat "$WORK/ro.out" "$WORK/ro.err")" \
    eval "[ $rc = 1 ] && grep -q '^FAILED    decode q=fp16 .* sm_90a : .*compiled but not stored in the cache: .*Permission denied' '$WORK/ro.out' \
          && grep -q '^prewarm: 1 spec, 0 compiled, 0 already cached, 1 failed' '$WORK/ro.out' \
          && [ '$RO_COMPILES' = '1 0' ]"

# ---- a compile error: FAILED line with the NVRTC log, exit 1, counted --------------
# A broken copy of the templates (FIJIT_TEMPLATE_DIR) fails in the front end, fast.
mkdir -p "$WORK/broken"
cp -R "$HERE"/../../templates/. "$WORK/broken/"
echo 'this line is not C++;' >>"$WORK/broken/decode/decode.cuh"
FIJIT_TEMPLATE_DIR=$WORK/broken "$FIJIT" prewarm --dtype fp16 --head-dim 64 --arch sm_90a \
    --cache-dir "$WORK/broken-cache" >"$WORK/broken.out" 2>"$WORK/broken.err"
rc=$?
check compile_error_reported "want exit 1, a FAILED line with the log and 1 failed: $(cat "$WORK/broken.out" "$WORK/broken.err")" \
    eval "[ $rc = 1 ] && grep -q '^FAILED    decode q=fp16 kv=fp16 o=fp16 hd=64 .* sm_90a : ' '$WORK/broken.out' \
          && grep -q 'this line is not C++' '$WORK/broken.out' \
          && grep -q '^prewarm: 1 spec, 0 compiled, 0 already cached, 1 failed' '$WORK/broken.out'"
check compile_error_counted "expected compile_failures 1" \
    eval '[ "$("$FIJIT" stats --json --cache-dir "$WORK/broken-cache" | grep -o "\"compile_failures\":[0-9]*")" = "\"compile_failures\":1" ]'

# ---- custom variants: --variant-file, --variant, variant=NAME -----------------------
# One tuple (decode fp16 hd128) per compile keeps this to three compiles and one
# that fails in the front end. Snippets override query_transform only.
VC=$WORK/variants
VD=$WORK/snippets
mkdir -p "$VD"
vstat_is() { CACHE=$VC stat_is "$@"; }
cat >"$VD/halfq.cuh" <<'EOF'
// Halves every query element on top of sm_scale.
struct Variant : fijit::DefaultVariant {
    template <class P>
    static __device__ __forceinline__ float query_transform(const P &p, float q, int h, int d)
    { return 0.5f * q * p.sm_scale; }
};
EOF
VSPEC=(--kernel decode --dtype fp16 --head-dim 128 --arch sm_90a -j 1 --cache-dir "$VC")
run variant_prewarm -- prewarm --variant-file "$VD/halfq.cuh" "${VSPEC[@]}"
check variant_prewarm_stats "expected 1 compile, 1 entry" \
    eval 'vstat_is compiles 1 && vstat_is entries 1 && vstat_is compile_failures 0'
run variant_prewarm_again -- prewarm --variant-file "$VD/halfq.cuh" "${VSPEC[@]}"
check variant_prewarm_again_stats "expected no new compile and a disk hit" \
    eval 'vstat_is compiles 1 && vstat_is disk_hits 1'
run variant_list -- list --cache-dir "$VC"
"$FIJIT" explain "decode q=fp16 hd=128 variant=halfq" --variant-file "$VD/halfq.cuh" --arch sm_90a \
    --cache-dir "$VC" >"$WORK/vexplain.txt" 2>&1
HALFQ_KEY=$("$FIJIT" list --keys --variant halfq --cache-dir "$VC" | cut -d' ' -f1)
check variant_explain_hash "explain does not give the snippet's size and hash: $(head -4 "$WORK/vexplain.txt")" \
    grep -qE "^variant halfq: $(wc -c <"$VD/halfq.cuh") bytes, xxh3-64 [0-9a-f]{16}, 0 parameters\$" \
    "$WORK/vexplain.txt"
check variant_explain_key "explain's key is not the key list shows for the variant" \
    grep -qx "key $HALFQ_KEY" "$WORK/vexplain.txt"
"$FIJIT" explain "decode q=fp16 hd=128 variant=halfq" --variant-file "$VD/halfq.cuh" --arch sm_90a \
    --source --cache-dir "$VC" >"$WORK/vsource.cu" 2>&1
check variant_explain_source "the unit does not hold the snippet verbatim after its #line: $(cat "$WORK/vsource.cu")" \
    eval "grep -A\$(wc -l <'$VD/halfq.cuh') -x '#line 1 \"halfq.cuh\"' '$WORK/vsource.cu' | tail -n +2 | cmp -s - '$VD/halfq.cuh'"
run variant_explain_unregistered -- explain "decode q=fp16 hd=128 variant=halfq" --cache-dir "$VC"
printf '# a variant by name\ndecode q=fp16 hd=128 variant=halfq\n' >"$WORK/variant.manifest"
run variant_manifest -- prewarm --manifest "$WORK/variant.manifest" --variant-file "$VD/halfq.cuh" \
    --arch sm_90a --cache-dir "$VC"
printf '# two variants\ndecode q=fp16 hd=128 variant=halfq\ndecode q=fp16 hd=128 variant=sigmoid\n' \
    >"$WORK/variant-unknown.manifest"
run variant_manifest_unregistered -- prewarm --manifest "$WORK/variant-unknown.manifest" \
    --variant-file "$VD/halfq.cuh" --arch sm_90a --cache-dir "$VC"
run variant_unregistered -- prewarm --variant sigmoid "${VSPEC[@]}"
check variant_unregistered_stats "a refused variant compiled something" vstat_is compiles 1
# --variant is one more dimension of the product; default is the built-in one.
run variant_product -- prewarm --variant-file "$VD/halfq.cuh" --variant default,halfq "${VSPEC[@]}"
check variant_product_stats "expected the default kernel compiled, 2 entries" \
    eval 'vstat_is compiles 2 && vstat_is entries 2'
run variant_list_halfq -- list --variant halfq --cache-dir "$VC"
run variant_list_default -- list --variant default --cache-dir "$VC"
# Editing the snippet changes the key: a new entry beside the old one.
sed -i 's/0\.5f \* q/0.25f * q/' "$VD/halfq.cuh"
run variant_edited -- prewarm --variant-file "$VD/halfq.cuh" "${VSPEC[@]}"
NEW_KEY=$("$FIJIT" explain "decode q=fp16 hd=128 variant=halfq" --variant-file "$VD/halfq.cuh" \
    --arch sm_90a --cache-dir "$VC" | sed -n 's/^key //p')
HALFQ_KEYS=$("$FIJIT" list --keys --variant halfq --cache-dir "$VC" | cut -d' ' -f1 | sort | tr '\n' ' ')
WANT_KEYS=$(printf '%s\n' "$HALFQ_KEY" "$NEW_KEY" | sort | tr '\n' ' ')
check variant_edited_new_entry "expected a third compile, 3 entries, keys '$WANT_KEYS', got '$HALFQ_KEYS'" \
    eval 'vstat_is compiles 3 && vstat_is entries 3 && [ -n "$NEW_KEY" ] && [ "$NEW_KEY" != "$HALFQ_KEY" ] \
          && [ "$HALFQ_KEYS" = "$WANT_KEYS" ]'
# A snippet that does not compile: its spec fails with NVRTC's message on the
# snippet's own line; it is counted and nothing is stored for it.
cat >"$VD/broken.cuh" <<'EOF'
// Uses a name that does not exist.
struct Variant : fijit::DefaultVariant {
    template <class P>
    static __device__ __forceinline__ float query_transform(const P &p, float q, int h, int d)
    { return undefined_scale * q * p.sm_scale; }
};
EOF
"$FIJIT" prewarm --variant-file "$VD/broken.cuh" "${VSPEC[@]}" >"$WORK/vbroken.out" 2>"$WORK/vbroken.err"
rc=$?
BROKEN_TUPLE='decode q=fp16 kv=fp16 o=fp16 hd=128 mask=none pos=none softcap=0 variant=broken sm_90a'
check variant_compile_error "want exit 1, the tuple, $VD/broken.cuh(5) and its line quoted: $(cat "$WORK/vbroken.out" "$WORK/vbroken.err")" \
    eval "[ $rc = 1 ] \
          && grep -qF 'FAILED    $BROKEN_TUPLE : variant '\''broken'\'' does not compile' '$WORK/vbroken.out' \
          && grep -qF '$VD/broken.cuh(5): error: identifier \"undefined_scale\"' '$WORK/vbroken.out' \
          && grep -qF '5 |     { return undefined_scale * q * p.sm_scale; }' '$WORK/vbroken.out' \
          && grep -q '^prewarm: 1 spec, 0 compiled, 0 already cached, 1 failed' '$WORK/vbroken.out' \
          && grep -qxF 'fijit prewarm: failed: $BROKEN_TUPLE' '$WORK/vbroken.err'"
check variant_compile_error_not_cached "expected a counted failure and nothing stored for it" \
    eval 'vstat_is compile_failures 1 && vstat_is entries 3 \
          && [ -z "$("$FIJIT" list --variant broken --cache-dir "$VC")" ]'
# Snippets the library refuses, or cannot read, stop prewarm before any compile.
head -n 5 "$VD/broken.cuh" >"$VD/unbalanced.cuh"
run variant_unbalanced -- prewarm --variant-file "$VD/unbalanced.cuh" "${VSPEC[@]}"
run variant_file_missing -- prewarm --variant-file "$VD/none.cuh" "${VSPEC[@]}"
# A snippet may not reach other files (#include and kin): refused, naming its line.
printf '// reads another file\n#include "/etc/hostname"\nstruct Variant : fijit::DefaultVariant {};\n' \
    >"$VD/include.cuh"
run variant_include -- prewarm --variant-file "$VD/include.cuh" "${VSPEC[@]}"
printf '// defines something else\nstruct Varient : fijit::DefaultVariant {};\n' >"$VD/novariant.cuh"
run variant_no_struct -- prewarm --variant-file "$VD/novariant.cuh" "${VSPEC[@]}"
check variant_refused_compiled_nothing "a refused snippet was compiled" \
    eval 'vstat_is compiles 3 && vstat_is compile_failures 1'

# Errors name the snippet's file as given (not "my.cuh"), with its own line numbers.
mkdir -p "$VD/dir"
cat >"$VD/dir/my.bad.cuh" <<'EOF'
// Line 3 does not compile.
struct Variant : fijit::DefaultVariant {
    template <class P> static __device__ float output_transform(const P &p, float o, int h, int d, float lse) { return o * nope; }
};
EOF
"$FIJIT" prewarm --variant-file "$VD/dir/my.bad.cuh" --kernel decode --dtype fp16 --head-dim 128 \
    --arch sm_90a -j 1 --cache-dir "$WORK/vfile-cache" >"$WORK/vfile.out" 2>"$WORK/vfile.err"
rc=$?
check variant_error_names_the_file "want exit 1 and $VD/dir/my.bad.cuh(3) with the line quoted: $(cat "$WORK/vfile.out")" \
    eval "[ $rc = 1 ] && grep -qF '$VD/dir/my.bad.cuh(3): error: identifier \"nope\" is undefined' '$WORK/vfile.out' \
          && grep -qF '   3 |     template <class P>' '$WORK/vfile.out' && ! grep -qF 'my.cuh(' '$WORK/vfile.out'"

# ---- demo: skips without a GPU, must pass with one ----------------------------------
"$FIJIT" demo --cache-dir "$CACHE" >"$WORK/demo.out" 2>"$WORK/demo.err"
rc=$?
check demo "exit $rc: $(cat "$WORK/demo.out" "$WORK/demo.err")" \
    eval "[ $rc = 0 ] && grep -qE '^demo: (no CUDA device; skipped launch|decode fp16 hd128 .* OK$)' '$WORK/demo.out'"

# ---- robustness: repair, limits, temp files, hostile input -----------------
R=$WORK/robust
"$FIJIT" prewarm --dtype fp16,bf16 --head-dim 64 --arch sm_90a -j 1 --cache-dir "$R" >/dev/null 2>&1
RKEY=$("$FIJIT" list --keys --dtype bf16 --cache-dir "$R" | cut -d' ' -f1)
mkdir -p "$R/objects/ab"
printf 'junk' >"$R/objects/ab/stray.txt"
printf 'partial' >"$R/objects/ab/ab0123456789abcdef0123456789abcd.fo.tmp.999999.0"
touch -d '2 hours ago' "$R/objects/ab/ab0123456789abcdef0123456789abcd.fo.tmp.999999.0"
truncate -s 50 "$R/objects/${RKEY:0:2}/$RKEY.fo"
"$FIJIT" verify --cache-dir "$R" >"$WORK/r1.out" 2>&1
rc=$?
check robust_verify_names_each_problem "want exit 1 naming 3 problems: $(cat "$WORK/r1.out")" \
    eval "[ $rc = 1 ] && grep -q 'truncated' '$WORK/r1.out' && grep -q 'stray.txt' '$WORK/r1.out' \
          && grep -q 'leftover temp file' '$WORK/r1.out'"
"$FIJIT" verify --repair --cache-dir "$R" >"$WORK/r2.out" 2>&1
rc=$?
"$FIJIT" verify --cache-dir "$R" >"$WORK/r3.out" 2>&1
rc3=$?
check robust_verify_repair "repair did not leave a clean cache (rc $rc, then $rc3): $(cat "$WORK/r2.out" "$WORK/r3.out" | tr "\n" " "; ls "$R/objects/ab")" \
    eval "[ $rc = 0 ] && [ $rc3 = 0 ] && [ ! -e '$R/objects/ab/stray.txt' ] \
          && [ -z \"\$(ls '$R/objects/ab' | grep tmp)\" ] && grep -q 'all good' '$WORK/r3.out'"
# A garbage index: rebuilt, objects re-indexed from their headers, nothing compiled.
rm -f "$R/index.sqlite-wal" "$R/index.sqlite-shm"
head -c 5000 /dev/urandom >"$R/index.sqlite"
"$FIJIT" verify --repair --cache-dir "$R" >"$WORK/r4.out" 2>&1
rc=$?
check robust_garbage_index_repaired "want the index rebuilt with 1 entry: $(cat "$WORK/r4.out")" \
    eval "[ $rc = 0 ] && [ \"\$(\"$FIJIT\" stats --json --cache-dir '$R' | sed -E 's/.*\"entries\":([0-9]+).*/\1/')\" = 1 ]"
# A killed writer's temp is a note (exit 0); a FIFO at an object path
# is a problem that verify names without hanging; one repair run fixes it.
printf 'partial' >"$R/objects/ab/ab0123456789abcdef0123456789abcd.fo.tmp.999999.1"
touch -d '2 minutes ago' "$R/objects/ab/ab0123456789abcdef0123456789abcd.fo.tmp.999999.1"
"$FIJIT" verify --cache-dir "$R" >"$WORK/r6.out" 2>&1
rc=$?
check robust_verify_dead_writer_temp_is_a_note "want exit 0 with a note: rc $rc $(cat "$WORK/r6.out")" \
    eval "[ $rc = 0 ] && grep -q '^note: leftover temp file' '$WORK/r6.out'"
mkfifo "$R/objects/ab/ab0123456789abcdef0123456789abcd.fo"
timeout 20 "$FIJIT" verify --cache-dir "$R" >"$WORK/r7.out" 2>&1
rc=$?
timeout 20 "$FIJIT" verify --repair --cache-dir "$R" >"$WORK/r8.out" 2>&1
rc8=$?
check robust_verify_fifo "want exit 1 then 0 (not 124, a hang): $rc $rc8 $(cat "$WORK/r7.out" "$WORK/r8.out")" \
    eval "[ $rc = 1 ] && [ $rc8 = 0 ] && grep -q 'not a regular file' '$WORK/r7.out' \
          && [ ! -e '$R/objects/ab/ab0123456789abcdef0123456789abcd.fo' ]"
# Limits: LRU by size (fp16 used last, bf16 evicted), FIJIT_MAX_CACHE_SIZE, age.
"$FIJIT" prewarm --dtype bf16 --head-dim 64 --arch sm_90a -j 1 --cache-dir "$R" >/dev/null 2>&1
sleep 1
"$FIJIT" prewarm --dtype fp16 --head-dim 64 --arch sm_90a -j 1 --cache-dir "$R" >/dev/null 2>&1
RBYTES=$("$FIJIT" stats --json --cache-dir "$R" | sed -E 's/.*"bytes":([0-9]+).*/\1/')
"$FIJIT" gc --max-size "$((RBYTES - 1))" --cache-dir "$R" >/dev/null 2>&1
check robust_gc_lru "gc --max-size did not evict the least recently used entry" \
    eval "[ -n \"\$(\"$FIJIT\" list --dtype fp16 --cache-dir '$R')\" ] && [ -z \"\$(\"$FIJIT\" list --dtype bf16 --cache-dir '$R')\" ]"
FIJIT_MAX_CACHE_SIZE=1 "$FIJIT" gc --cache-dir "$R" >"$WORK/r5.out" 2>&1
check robust_gc_env_size "FIJIT_MAX_CACHE_SIZE=1 gc left entries: $(cat "$WORK/r5.out")" \
    grep -q 'the cache holds 0 entries' "$WORK/r5.out"
"$FIJIT" prewarm --dtype fp16 --head-dim 64 --arch sm_90a -j 1 --cache-dir "$R" >/dev/null 2>&1
sleep 2
"$FIJIT" gc --older-than 1s --cache-dir "$R" >"$WORK/r6.out" 2>&1
check robust_gc_older_than "gc --older-than 1s kept an entry unused for 2 s: $(cat "$WORK/r6.out")" \
    grep -q 'removed 1 entry; the cache holds 0 entries' "$WORK/r6.out"
# Hostile or malformed arguments: exit 2, a message, nothing compiled.
printf 'decode q=fp16\0hd=64\n' >"$WORK/nul.manifest"
printf 'decode q=fp16 variant=caf\xc3\xa9\n' >"$WORK/utf8.manifest"
printf 'decode variant=../../etc/passwd\n' >"$WORK/path.manifest"
BAD=$WORK/bad-cache
i=0
for args in "prewarm --head-dim 99999999999999999999" "prewarm --dtype ''" "prewarm --dtype fp16,,bf16" \
            "prewarm --arch ../sm_90" "prewarm --arch sm_90a/x" "prewarm -j 99999999999" \
            "prewarm --kernel decode/../x" "prewarm --dtype $(printf '\xff\xfe')" \
            "prewarm --manifest $WORK/nul.manifest" "prewarm --manifest $WORK/utf8.manifest" \
            "prewarm --manifest $WORK/path.manifest" "prewarm --manifest $WORK" \
            "gc --max-size 99999999999T" "gc --max-size -5" "gc --older-than -5d" "gc --older-than 1x" \
            "explain 'decode hd=64; DROP TABLE entries'"; do
    i=$((i + 1))
    eval "\"$FIJIT\" $args --cache-dir '$BAD'" >"$WORK/bad$i.out" 2>&1
    rc=$?
    check "robust_bad_args_$i" "'$args': want exit 2 with a message, got $rc: $(head -c 300 "$WORK/bad$i.out")" \
        eval "[ $rc = 2 ] && grep -q '^fijit [a-z]*: ' '$WORK/bad$i.out'"
done
check robust_bad_args_wrote_nothing "a bad argument wrote objects" \
    test -z "$(find "$BAD/objects" -type f 2>/dev/null)"
check robust_nul_manifest_named "the NUL byte was not named" grep -q 'NUL byte' "$WORK/bad9.out"

# ---- settings: the environment, fijit.conf, exit codes -------------------------------
# One cache of one entry for these cases.
SC=$WORK/settings
"$FIJIT" prewarm --dtype fp16 --head-dim 64 --arch sm_90a -j 1 --cache-dir "$SC" >/dev/null 2>&1
sstat() { fstat "$SC" "$1"; }
# A size of 0 is "no limit" everywhere (as in ccache): gc keeps every entry.
FIJIT_MAX_CACHE_SIZE=0 "$FIJIT" gc --cache-dir "$SC" >"$WORK/gc0.out" 2>&1
rc=$?
"$FIJIT" gc --max-size 0 --cache-dir "$SC" >>"$WORK/gc0.out" 2>&1
check gc_size_zero_is_no_limit "want exit 0 and the entry kept: $(cat "$WORK/gc0.out")" \
    eval "[ $rc = 0 ] && [ $(sstat entries) = 1 ]"
FIJIT_MAX_CACHE_SIZE=0 "$FIJIT" show-config --cache-dir "$SC" >"$WORK/cfg0.out" 2>&1
check show_config_size_zero "show-config does not say 'no limit': $(grep 'max cache' "$WORK/cfg0.out")" \
    grep -qx 'max cache size       no limit (FIJIT_MAX_CACHE_SIZE)' "$WORK/cfg0.out"
"$FIJIT" show-config --cache-dir "$SC" >"$WORK/cfgd.out" 2>&1
check show_config_default_size "the default size limit is not 5 GiB: $(grep 'max cache' "$WORK/cfgd.out")" \
    grep -qx 'max cache size       5.0 GiB (default)' "$WORK/cfgd.out"
# FIJIT_JIT takes the usual booleans; off serves only what the cache holds.
for off in 0 false off no FALSE; do
    FIJIT_JIT=$off "$FIJIT" prewarm --dtype bf16 --head-dim 64 --arch sm_90a -j 1 --cache-dir "$SC" \
        >"$WORK/jit.out" 2>&1
    rc=$?
    check "jit_off_spelled_$off" "FIJIT_JIT=$off: want exit 1, 'JIT is disabled' and no compile: $(cat "$WORK/jit.out")" \
        eval "[ $rc = 1 ] && grep -q 'is not in the cache and JIT is disabled' '$WORK/jit.out' && [ $(sstat compiles) = 1 ]"
done
FIJIT_JIT=yes "$FIJIT" prewarm --dtype fp16 --head-dim 64 --arch sm_90a -j 1 --cache-dir "$SC" >"$WORK/jit.out" 2>&1
rc=$?
check jit_on_spelled_yes "FIJIT_JIT=yes: want exit 0: $(cat "$WORK/jit.out")" test $rc = 0
run env_bad_jit --env FIJIT_JIT=maybe -- prewarm --dtype fp16 --head-dim 64 --arch sm_90a --cache-dir "$SC"
run env_bad_lock_timeout --env FIJIT_LOCK_TIMEOUT_MS=x -- prewarm --dtype fp16 --head-dim 64 --arch sm_90a --cache-dir "$SC"
run env_short_secret --env FIJIT_REMOTE_SECRET=short -- prewarm --dtype fp16 --head-dim 64 --arch sm_90a --cache-dir "$SC"
run env_short_secret_export --env FIJIT_REMOTE_SECRET=short -- export -o "$WORK/short.bundle" --all --cache-dir "$SC"
run env_short_secret_import --env FIJIT_REMOTE_SECRET=short -- import "$WORK/short.bundle" --cache-dir "$SC"
run env_bad_umask --env FIJIT_UMASK=000 -- prewarm --dtype fp16 --head-dim 64 --arch sm_90a --cache-dir "$SC"
run env_bad_arch_show_config --env FIJIT_ARCH=garbage -- show-config --cache-dir "$SC"
# The variables with no fijit.conf line: named with their values, never "cannot use the cache".
run env_bad_fast_compile --env FIJIT_FAST_COMPILE=fast -- prewarm --dtype fp16 --head-dim 64 --arch sm_90a --cache-dir "$SC"
run env_bad_load_show_config --env FIJIT_LOAD=lazy -- show-config --cache-dir "$SC"
run env_bad_prefill_ws --env FIJIT_PREFILL_WS=persistent:0 -- prewarm --dtype fp16 --head-dim 64 --arch sm_90a --cache-dir "$SC"
run env_bad_prefill_ws_suffix --env FIJIT_PREFILL_WS=persistentXYZ -- prewarm --dtype fp16 --head-dim 64 --arch sm_90a --cache-dir "$SC"
run env_bad_template_dir --env FIJIT_TEMPLATE_DIR=/nonexistent/fijit-templates -- explain "decode hd=64" --arch sm_90a
run empty_top_cache_dir -- --cache-dir "" list
run empty_cache_dir -- list --cache-dir ""
# The configuration file: shown with where each value came from, the
# environment over the file over the default, and parsed strictly.
printf '# the fleet host'"'"'s settings\nmax_size = 2G\n  log_level=info  \nremote = redis://:hunter2@cache-host:6379/0\numask = 027\n' \
    >"$SC/fijit.conf"
FIJIT_LOG=debug "$FIJIT" show-config --cache-dir "$SC" >"$WORK/cfg.out" 2>&1
rc=$?
check config_file_shown_with_origins "want each setting with its source: $(cat "$WORK/cfg.out")" \
    eval "[ $rc = 0 ] && grep -qx 'config file          $SC/fijit.conf' '$WORK/cfg.out' \
          && grep -qx 'max cache size       2.0 GiB ($SC/fijit.conf)' '$WORK/cfg.out' \
          && grep -qx 'log level            debug (FIJIT_LOG)' '$WORK/cfg.out' \
          && grep -qx 'jit                  on: compile on a miss (default)' '$WORK/cfg.out' \
          && grep -qx 'cache modes          umask 027: directories 0750, files 0640 ($SC/fijit.conf)' '$WORK/cfg.out' \
          && grep -qx 'remote cache         redis://\*\*\*@cache-host:6379/0 ($SC/fijit.conf)' '$WORK/cfg.out' \
          && ! grep -q hunter2 '$WORK/cfg.out'"
printf 'max_size = 2G\nmax_szie = 3G\n' >"$SC/fijit.conf"
run config_unknown_key -- show-config --cache-dir "$SC"
printf '\nmax_size = lots\n' >"$SC/fijit.conf"
run config_bad_value -- prewarm --dtype fp16 --head-dim 64 --arch sm_90a --cache-dir "$SC"
printf 'jit = off\njit = on\n' >"$SC/fijit.conf"
run config_repeated_key -- prewarm --dtype fp16 --head-dim 64 --arch sm_90a --cache-dir "$SC"
printf 'remote = unix://%s/no-redis.sock\n' "$WORK" >"$SC/fijit.conf"
"$FIJIT" remote ping --cache-dir "$SC" >"$WORK/cfgremote.out" 2>&1
rc=$?
check config_file_remote_is_used "remote ping: want exit 1 from the file's remote: $(cat "$WORK/cfgremote.out")" \
    eval "[ $rc = 1 ] && grep -q 'no-redis.sock' '$WORK/cfgremote.out'"
printf 'jit = off\n' >"$SC/fijit.conf"
"$FIJIT" prewarm --dtype bf16 --head-dim 64 --arch sm_90a -j 1 --cache-dir "$SC" >"$WORK/cfgjit.out" 2>&1
rc=$?
check config_file_jit_off "jit = off in fijit.conf: want exit 1 and no compile: $(cat "$WORK/cfgjit.out")" \
    eval "[ $rc = 1 ] && grep -q 'JIT is disabled' '$WORK/cfgjit.out' && [ $(sstat compiles) = 1 ]"
rm -f "$SC/fijit.conf"

# export of a spec the cache lacks names it, writes no bundle and fails.
run bundle_export_missing_spec -- export -o "$WORK/missing.bundle" "decode q=fp16 hd=64" \
    "decode q=bf16 hd=128" --cache-dir "$SC"
check bundle_export_missing_wrote_nothing "a bundle was written" test ! -e "$WORK/missing.bundle"

# prewarm into a read-only cache: what it holds is "already cached" (exit 0);
# only a spec it would have to store fails.
RO=$WORK/ro-settings
mkdir -m 755 "$RO"
cp -a "$SC" "$RO/cache"
[ "$(id -u)" = 0 ] && chown -R 65534:65534 "$RO"
chmod -R a-w "$RO/cache"
"${AS_USER[@]}" "$FIJIT" prewarm --dtype fp16 --head-dim 64 --arch sm_90a -j 1 --cache-dir "$RO/cache" \
    >"$WORK/rocached.out" 2>&1
rc=$?
check prewarm_read_only_all_cached "want exit 0 and 1 already cached: $(cat "$WORK/rocached.out")" \
    eval "[ $rc = 0 ] && grep -q '^prewarm: 1 spec, 0 compiled, 1 already cached, 0 failed' '$WORK/rocached.out'"
"${AS_USER[@]}" "$FIJIT" prewarm --dtype fp16,bf16 --head-dim 64 --arch sm_90a -j 1 --cache-dir "$RO/cache" \
    >"$WORK/romiss.out" 2>&1
rc=$?
check prewarm_read_only_fails_only_what_it_must_store "want exit 1, 1 cached, 1 failed: $(cat "$WORK/romiss.out")" \
    eval "[ $rc = 1 ] && grep -q '^prewarm: 2 specs, 0 compiled, 1 already cached, 1 failed' '$WORK/romiss.out' \
          && grep -q '^FAILED    decode q=bf16 .* is not in the cache, and the cache .* is read-only' '$WORK/romiss.out'"
chmod -R u+w "$RO/cache"

# prewarm --remote with a remote that does not answer: the summary says so
# and, as it was asked for by name, the exit status is 1.
"$FIJIT" prewarm --dtype fp16 --head-dim 64 --arch sm_90a -j 1 --remote "unix://$WORK/no-redis.sock" \
    --cache-dir "$SC" >"$WORK/deadremote.out" 2>&1
rc=$?
check prewarm_dead_remote_fails "want exit 1 and the remote's errors counted: $(cat "$WORK/deadremote.out")" \
    eval "[ $rc = 1 ] && grep -q '^prewarm: 1 spec, 0 compiled, 1 already cached, 0 failed' '$WORK/deadremote.out' \
          && grep -qE '^remote: 0 fetched, 0 B pushed, [1-9][0-9]* errors? \(unix://' '$WORK/deadremote.out'"
FIJIT_REMOTE="unix://$WORK/no-redis.sock" "$FIJIT" prewarm --dtype fp16 --head-dim 64 --arch sm_90a -j 1 \
    --cache-dir "$SC" >"$WORK/deadenv.out" 2>&1
rc=$?
check prewarm_dead_remote_from_env_counts_only "want exit 0 with the errors counted: $(cat "$WORK/deadenv.out")" \
    eval "[ $rc = 0 ] && grep -qE '^remote: 0 fetched, 0 B pushed, [1-9]' '$WORK/deadenv.out'"

# A group-shared cache (FIJIT_UMASK, fijit.conf's umask): built by one user,
# read by a member of its group. Others may never write, whatever the umask.
GS=$WORK/group-shared
FIJIT_UMASK=027 "$FIJIT" prewarm --dtype fp16 --head-dim 64 --arch sm_90a -j 1 --cache-dir "$GS" \
    >"$WORK/gs.out" 2>&1
GS_MODES=$(find "$GS" \( -name '*.fo' -o -path "$GS" -o -path "$GS/objects" \) -printf '%m\n' | sort -u | tr '\n' ' ')
check umask_group_shared_modes "want directories 750 and objects 640, got '$GS_MODES': $(cat "$WORK/gs.out")" \
    test "$GS_MODES" = "640 750 "
if [ "$(id -u)" = 0 ]; then
    chgrp -R 65534 "$GS"
    setpriv --reuid=65534 --regid=65534 --clear-groups "$FIJIT" list --cache-dir "$GS" >"$WORK/gsread.out" 2>&1
    rc=$?
    check umask_group_member_reads_the_cache "want exit 0 and the entry: $(cat "$WORK/gsread.out")" \
        eval "[ $rc = 0 ] && grep -q '^decode q=fp16' '$WORK/gsread.out'"
fi
mkdir -m 0770 "$WORK/group-writable"
chmod 0770 "$WORK/group-writable"
"$FIJIT" prewarm --manifest "$WORK/ro/empty.manifest" --arch sm_90a --cache-dir "$WORK/group-writable" \
    >"$WORK/gw.out" 2>&1
rc_private=$?
FIJIT_UMASK=007 "$FIJIT" prewarm --manifest "$WORK/ro/empty.manifest" --arch sm_90a \
    --cache-dir "$WORK/group-writable" >>"$WORK/gw.out" 2>&1
rc_shared=$?
check umask_allows_a_group_writable_dir "want exit 1 without a umask and 0 with 007: $rc_private/$rc_shared $(cat "$WORK/gw.out")" \
    eval "[ $rc_private = 1 ] && [ $rc_shared = 0 ]"
GW_INDEX=$(find "$WORK/group-writable" -maxdepth 1 -name index.sqlite -printf '%m')
check umask_index_is_group_writable "want the index 660 with umask 007, got '$GW_INDEX'" test "$GW_INDEX" = 660
if [ "$(id -u)" = 0 ]; then
    # A member of the group stores into the cache the owner made.
    chgrp -R 65534 "$WORK/group-writable"
    printf 'umask = 007\n' >"$WORK/group-writable/fijit.conf"
    setpriv --reuid=65534 --regid=65534 --clear-groups "$FIJIT" prewarm --dtype fp16 --head-dim 64 \
        --arch sm_90a -j 1 --cache-dir "$WORK/group-writable" >"$WORK/gwrite.out" 2>&1
    rc=$?
    check umask_group_member_stores "want exit 0 and 1 compiled: $(cat "$WORK/gwrite.out")" \
        eval "[ $rc = 0 ] && grep -q '^prewarm: 1 spec, 1 compiled' '$WORK/gwrite.out'"
fi
FIJIT_UMASK=007 "$FIJIT" prewarm "${SPECS[@]}" --cache-dir "$WORK/open" >"$WORK/open2.out" 2>&1
rc=$?
check umask_never_allows_world_writable "want exit 1 for a dir others may write: $(cat "$WORK/open2.out")" \
    test $rc = 1

# What the CLI prints names no function of the library or the driver: what
# it ran, and the error (the demo's GPU paths cannot run here, so their words
# are checked in the source).
FUNCTION_WORDS=$(grep -nE '(cli_runtime_error|cli_usage_error|driver_failed)\(cmd, (res, )?"(fi_|cu[A-Z]|nvrtc[A-Z])' \
                 "$HERE"/../../tools/*.c)
check cli_sources_say_what_failed_in_words "a message names a function: $FUNCTION_WORDS" test -z "$FUNCTION_WORDS"
# What the CLI prints names no function of the library.
check messages_name_no_functions "a message names a function: $(grep -lE '\bfi_[a-z_]+(:|\()' "$WORK"/*.err "$WORK"/*.out 2>/dev/null | head -3)" \
    eval "! grep -qE '\bfi_[a-z_]+(:|\()' \"$WORK\"/*.err"

# The fleet tier's libraries are opened when a remote or a secret is used,
# never linked: a serving engine links libfijit without them.
needs_no_fleet_libs() {
    ! readelf -d "$1" | grep -E 'NEEDED.*(hiredis|sodium)'
}
check cli_links_no_fleet_library "fijit links hiredis or libsodium" needs_no_fleet_libs "$FIJIT"
LIBFIJIT=$(dirname "$FIJIT")/libfijit.so
if [ -e "$LIBFIJIT" ]; then
    check lib_links_no_fleet_library "libfijit.so links hiredis or libsodium" \
        needs_no_fleet_libs "$LIBFIJIT"
fi

. "$HERE/remote_cases.sh"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
