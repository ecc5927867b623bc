#!/usr/bin/env bash
# The fleet tier's figures (docs/performance.md, "Fleet tier"), on this machine, with
# a private redis-server and a private nginx (WebDAV) on loopback TCP:
#   1. per kernel, each in a fresh process: cold compile (filling Redis and
#      the HTTP store), local disk hit, and remote hit into an empty local
#      cache from Redis and from the HTTP store;
#   2. a simulated fleet start: 16 processes on 16 empty cache dirs and the
#      36-tuple default decode set, against a warm Redis, a warm HTTP store,
#      an empty Redis (fleet single flight: 36 compiles in all), and without
#      a remote (every process compiles every tuple; BENCH_FLEET_NO_REMOTE=0
#      skips it).
#   bash bench/bench_remote.sh [build/fijit]
set -euo pipefail
fijit=${1:-build/fijit}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/fijit-bench-remote.XXXXXX")
redis_pid= nginx_pid=
cleanup() {
    [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null
    [ -n "$nginx_pid" ] && kill "$nginx_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
export CUDA_CACHE_DISABLE=1 FIJIT_LOG=error
unset FIJIT_REMOTE FIJIT_REMOTE_SECRET FIJIT_CACHE_DIR

cc -O2 -I"$root/include" -o "$work/bench_remote" "$root/bench/bench_remote.c" \
   "$root/build/libfijit.a" -lsqlite3 -lxxhash -ldl -lpthread -lm

port=$((20000 + RANDOM % 20000))
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
    --logfile "$work/redis.log" --maxmemory 1gb --maxmemory-policy allkeys-lru --daemonize no &
redis_pid=$!
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
url=redis://127.0.0.1:$port

# nginx with WebDAV, one process, on the next port (nginx-light has the module).
http_port=$((port + 1))
mkdir -p "$work/nginx/www"
cat >"$work/nginx/nginx.conf" <<EOF
daemon off; master_process off; pid $work/nginx/nginx.pid; error_log $work/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off; client_body_temp_path $work/nginx/body; proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fastcgi; uwsgi_temp_path $work/nginx/uwsgi;
  scgi_temp_path $work/nginx/scgi; client_max_body_size 64m;
  server { listen 127.0.0.1:$http_port; root $work/nginx/www;
    location / { dav_methods PUT DELETE; create_full_put_path on; } }
}
EOF
/usr/sbin/nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" &
nginx_pid=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$http_port") 2>/dev/null && break; sleep 0.05; done
http_url=http://127.0.0.1:$http_port/fleet

set_flags=(--kernel decode --dtype fp16,bf16 --head-dim 64,128,256 --mask none,window
           --pos none,rope,alibi --arch sm_90a)
for d in fp16 bf16; do for h in 64 128 256; do for m in none window; do for p in none rope alibi; do
    echo "decode q=$d hd=$h mask=$m pos=$p"
done; done; done; done >"$work/set.manifest"

echo "== per kernel, fresh process each run (36 decode tuples, sm_90a; no GPU load)"
printf '%-38s ' "cold compile (pushes to both)";     "$work/bench_remote" "$work/a" "$work/set.manifest" "$url $http_url"
printf '%-38s ' "local disk hit";                     "$work/bench_remote" "$work/a" "$work/set.manifest"
printf '%-38s ' "Redis hit, empty local cache";       "$work/bench_remote" "$work/b" "$work/set.manifest" "$url"
printf '%-38s ' "local hit, remote configured";       "$work/bench_remote" "$work/b" "$work/set.manifest" "$url"
printf '%-38s ' "HTTP hit, empty local cache";        "$work/bench_remote" "$work/c" "$work/set.manifest" "$http_url"
printf '%-38s ' "local hit, HTTP remote configured";  "$work/bench_remote" "$work/c" "$work/set.manifest" "$http_url"

fleet() { # NAME URL...: 16 fijit prewarm processes on 16 empty cache dirs
    local name=$1 start end pids=()
    shift
    rm -rf "$work/fleet"
    start=$(date +%s.%N)
    for i in $(seq 16); do
        "$fijit" prewarm -j 1 "${set_flags[@]}" --cache-dir "$work/fleet/$i" "$@" >/dev/null &
        pids+=($!)
    done
    wait "${pids[@]}" 
    end=$(date +%s.%N)
    local compiles=0
    for i in $(seq 16); do
        c=$("$fijit" stats --json --cache-dir "$work/fleet/$i" | sed -E 's/.*"compiles":([0-9]+).*/\1/')
        compiles=$((compiles + c))
    done
    printf '%-44s %7.1f s, %4d compiles\n' "$name" "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')" "$compiles"
}

echo "== fleet start: 16 processes, 16 empty cache dirs, 36 tuples each, $(nproc) cores"
fleet "warm Redis" --remote "$url"
fleet "warm HTTP store (nginx)" --remote "$http_url"
redis-cli -p "$port" flushall >/dev/null
fleet "empty Redis (fleet single flight)" --remote "$url"
if [ "${BENCH_FLEET_NO_REMOTE:-1}" != 0 ]; then
    fleet "no remote (every process compiles)"
fi
