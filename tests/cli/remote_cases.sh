# The fleet tier's edges, for tests/cli/run.sh (sourced: it uses run, check,
# $FIJIT, $WORK, $CACHE and SPECS from there): a password or fleet secret is
# never shown, whatever the URL's shape; a socket path the kernel would cut
# is refused; a password-protected server on a unix socket; and libhiredis
# and libsodium are opened only when a remote or a secret is used.

REMOTE_WORK=$WORK/remote-cases
mkdir -p "$REMOTE_WORK"

# ---- no password or secret in any message ------------------------------------------
# Shapes that once escaped the mask, good URLs and malformed ones; every host
# is an address (no name lookups) and every server is absent (port 1, a socket
# that is not there), so each command fails fast, saying what it can.
PASSWORD_SHAPES=(
    'redis://:SEKRIT@127.0.0.1:1'
    'redis://:pa/SEKRIT@127.0.0.1:1'
    'redis://:pa?SEKRIT@127.0.0.1:1/0'
    'redis://user:SEKRIT@127.0.0.1:1?readonly'
    'redis://SEKRIT@127.0.0.1:1'
    'redis://:SEKRIT@'
    'redis://:SEKRIT'
    'redis://127.0.0.1:SEKRIT'
    'redis://:SEK%zzRIT@127.0.0.1:1'
    'redis://127.0.0.1:1?password=SEKRIT'
    'redis://127.0.0.1:1?SEKRIT'
    'redis:/:SEKRIT@127.0.0.1:1'
    'SEKRIT'
    "unix://:SEKRIT@$REMOTE_WORK/none.sock"
    "unix://:pa/SEKRIT@$REMOTE_WORK/none.sock"
    "unix://$REMOTE_WORK/none.sock?password=SEKRIT"
    'unix://:SEKRIT@relative.sock'
    'http://:SEKRIT@127.0.0.1:1'
    'https://user:SEKRIT@127.0.0.1:1/cache?readonly'
    'http://127.0.0.1:1 redis://:SEKRIT@127.0.0.1:1'
)
said=$REMOTE_WORK/said.txt
: >"$said"
for url in "${PASSWORD_SHAPES[@]}"; do
    {
        "$FIJIT" remote ping --remote "$url"
        "$FIJIT" remote list --remote="$url"
        "$FIJIT" show-config --remote "$url" --cache-dir "$REMOTE_WORK/cache"
        FIJIT_REMOTE=$url "$FIJIT" show-config --cache-dir "$REMOTE_WORK/cache"
        FIJIT_REMOTE=$url "$FIJIT" show-config --remote redis://127.0.0.1:1 --cache-dir "$REMOTE_WORK/cache"
        FIJIT_JIT=0 FIJIT_LOG=info "$FIJIT" prewarm "${SPECS[@]}" -j 1 --remote "$url" \
            --cache-dir "$REMOTE_WORK/cache"
    } >>"$said" 2>&1
done
{
    "$FIJIT" show-config --remote-secret=SEKRIT --cache-dir "$REMOTE_WORK/cache"
    "$FIJIT" remote ping --remote-password=SEKRIT
    "$FIJIT" list -xSEKRIT --cache-dir "$REMOTE_WORK/cache"
    "$FIJIT" remote list --keys=SEKRIT --remote redis://127.0.0.1:1
    FIJIT_REMOTE_SECRET=SEKRIT-the-fleet-secret "$FIJIT" show-config --cache-dir "$REMOTE_WORK/cache"
} >>"$said" 2>&1
check remote_password_never_shown "a password or secret was shown: $(grep -m 3 -E 'SEK|RIT' "$said")" \
    eval "! grep -qE 'SEK|RIT' '$said'"
check remote_password_messages_were_said "the commands above said too little to prove anything" \
    eval "[ \$(grep -c 'remote URL\|remote cache' '$said') -ge 60 ]"
run remote_unknown_option_with_a_value -- show-config --remote-secret=SEKRIT
run remote_password_as_an_option -- remote ping --remote "unix://$REMOTE_WORK/none.sock?password=SEKRIT"
run remote_password_with_a_slash -- remote ping --remote 'redis://:pa/SEKRIT@localhost:1'

# ---- a socket path the kernel would cut -------------------------------------------
LONG_SOCKET=/tmp/$(printf 'd%.0s' $(seq 110))/redis.sock
run remote_socket_path_too_long -- remote ping --remote "unix://$LONG_SOCKET"

# ---- a password-protected server on a unix socket ---------------------------------
if command -v redis-server >/dev/null; then
    SOCK=$REMOTE_WORK/redis.sock
    redis-server --port 0 --unixsocket "$SOCK" --unixsocketperm 700 --save '' \
        --appendonly no --dir "$REMOTE_WORK" --logfile "$REMOTE_WORK/redis.log" \
        --requirepass 'pa/ss?word' --daemonize no &
    PROTECTED_PID=$!
    for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.05; done
    sleep 0.1
    run remote_unix_socket_with_a_password -- remote ping --remote "unix://:pa/ss?word@$SOCK"
    # The way that keeps it off the command line (and out of /proc/PID/cmdline).
    run remote_unix_socket_password_from_the_environment \
        --env "FIJIT_REMOTE=unix://:pa/ss?word@$SOCK" -- remote ping
    "$FIJIT" remote ping --remote "unix://:wrong-SEKRIT@$SOCK" >"$REMOTE_WORK/wrong.txt" 2>&1
    wrong_rc=$?
    check remote_unix_socket_wrong_password "want exit 1, the server's refusal and no password: $(cat "$REMOTE_WORK/wrong.txt")" \
        eval "[ $wrong_rc = 1 ] && grep -q 'refused the password' '$REMOTE_WORK/wrong.txt' && ! grep -qE 'SEK|RIT' '$REMOTE_WORK/wrong.txt'"
    kill -9 "$PROTECTED_PID"; wait "$PROTECTED_PID" 2>/dev/null
fi

# ---- libhiredis, libcurl and libsodium: opened only for a remote or a secret --------
# The loader's own record of what the process loaded (LD_DEBUG=libs, on stderr).
loads_fleet_libs() {
    LD_DEBUG=libs "$@" 2>&1 >/dev/null | grep -qE 'lib(hiredis|sodium|curl)\.so'
}
loads_none_for() {
    ! loads_fleet_libs "$FIJIT" "$@"
}
check remote_no_fleet_library_for_list "fijit list loaded hiredis or libsodium" \
    loads_none_for list --cache-dir "$CACHE"
check remote_no_fleet_library_for_stats "fijit stats loaded hiredis or libsodium" \
    loads_none_for stats --cache-dir "$CACHE"
check remote_no_fleet_library_for_show_config "fijit show-config loaded hiredis or libsodium" \
    loads_none_for show-config --cache-dir "$CACHE"
check remote_no_fleet_library_for_prewarm "a prewarm from the disk cache loaded hiredis or libsodium" \
    loads_none_for prewarm "${SPECS[@]}" -j 1 --cache-dir "$CACHE"
# The same probe sees them when they are used: it can fail.
check remote_hiredis_loaded_for_a_remote "remote ping did not show hiredis loading" \
    loads_fleet_libs "$FIJIT" remote ping --remote "unix://$REMOTE_WORK/none.sock"
check remote_sodium_loaded_for_a_secret "a sealed export did not show libsodium loading" \
    loads_fleet_libs env FIJIT_REMOTE_SECRET=0123456789abcdef-fleet \
    "$FIJIT" export -o "$REMOTE_WORK/sealed.bundle" --all --cache-dir "$CACHE"
# libfijit.so itself, as a serving engine loads it: a context without a remote
# opens neither library; FIJIT_REMOTE and FIJIT_REMOTE_SECRET open them.
LIBFIJIT_SO=$(dirname "$FIJIT")/libfijit.so
if [ -e "$LIBFIJIT_SO" ] && command -v python3 >/dev/null; then
    cat >"$REMOTE_WORK/new_ctx.py" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
ctx = ctypes.c_void_p()
rc = lib.fi_jit_ctx_new(ctypes.byref(ctx), None)
lib.fi_jit_ctx_free(ctx)
sys.exit(0 if rc == 0 else 1)
PY
    # ctx_loads LOG VAR=VALUE...: make a context with that environment (it
    # must succeed), the loader's record in LOG.
    ctx_loads() {
        local log=$1
        shift
        env FIJIT_CACHE_DIR="$REMOTE_WORK/lib-cache" "$@" LD_DEBUG=libs \
            python3 "$REMOTE_WORK/new_ctx.py" "$LIBFIJIT_SO" 2>"$log" >/dev/null
    }
    plain_log=$REMOTE_WORK/ctx-plain.log fleet_log=$REMOTE_WORK/ctx-fleet.log
    check remote_no_fleet_library_for_a_context "a context without a remote failed or loaded hiredis or libsodium" \
        eval 'ctx_loads "$plain_log" && grep -q libfijit "$plain_log" && ! grep -qE "lib(hiredis|sodium)\.so" "$plain_log"'
    check remote_fleet_libraries_loaded_for_a_remote_context "FIJIT_REMOTE and a secret did not load both" \
        eval 'ctx_loads "$fleet_log" FIJIT_REMOTE="unix://$REMOTE_WORK/none.sock" FIJIT_REMOTE_SECRET=0123456789abcdef-fleet && grep -q "libhiredis\.so" "$fleet_log" && grep -q "libsodium\.so" "$fleet_log"'
fi

# ---- an HTTP remote: a private nginx with WebDAV on a free loopback port -----------
check remote_libcurl_loaded_for_an_http_remote "remote ping did not show libcurl loading" \
    eval "LD_DEBUG=libs '$FIJIT' remote ping --remote http://127.0.0.1:1 2>&1 >/dev/null | grep -q 'libcurl[-a-z]*\.so'"
if [ -x /usr/sbin/nginx ]; then
    NGINX_DIR=$REMOTE_WORK/nginx
    mkdir -p "$NGINX_DIR/www"
    HTTP_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    cat >"$NGINX_DIR/nginx.conf" <<EOF
daemon off; master_process off; pid $NGINX_DIR/nginx.pid; error_log $NGINX_DIR/error.log warn;
events { worker_connections 64; }
http {
  access_log off; client_body_temp_path $NGINX_DIR/body; proxy_temp_path $NGINX_DIR/proxy;
  fastcgi_temp_path $NGINX_DIR/fastcgi; uwsgi_temp_path $NGINX_DIR/uwsgi; scgi_temp_path $NGINX_DIR/scgi;
  server { listen 127.0.0.1:$HTTP_PORT; root $NGINX_DIR/www;
    location / { dav_methods PUT DELETE; create_full_put_path on; } }
}
EOF
    /usr/sbin/nginx -p "$NGINX_DIR" -c "$NGINX_DIR/nginx.conf" 2>/dev/null &
    NGINX_PID=$!
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$HTTP_PORT") 2>/dev/null && break
        sleep 0.05
    done
    HTTP_URL="http://127.0.0.1:$HTTP_PORT/fleet?connect_timeout=5000&timeout=20000"
    said=$REMOTE_WORK/http.txt
    check remote_http_ping "remote ping of an HTTP store failed" \
        eval "'$FIJIT' remote ping --remote '$HTTP_URL' >'$said' 2>&1 && grep -q 'answers in' '$said'"
    check remote_http_stats_says_it_cannot_list "remote stats of an HTTP store said otherwise" \
        eval "'$FIJIT' remote stats --remote '$HTTP_URL' >'$said' 2>&1 && grep -q 'cannot list' '$said' && grep -q 'fleet lease' '$said'"
    check remote_http_list_fails_saying_why "remote list of an HTTP store did not fail saying why" \
        eval "! '$FIJIT' remote list --remote '$HTTP_URL' >'$said' 2>&1 && grep -q 'cannot be listed' '$said'"
    check remote_http_credentials_refused_on_the_command_line "--remote with an HTTP password was taken" \
        eval "'$FIJIT' remote ping --remote 'http://u:SEKRIT@127.0.0.1:$HTTP_PORT' >'$said' 2>&1; [ \$? = 2 ] && grep -q 'belong in FIJIT_REMOTE' '$said' && ! grep -q SEKRIT '$said'"
    FIJIT_REMOTE=$HTTP_URL "$FIJIT" prewarm "${SPECS[@]}" -j 1 --cache-dir "$REMOTE_WORK/http-cache" >"$said" 2>&1
    check remote_http_prewarm_fills_it "a prewarm did not push its entries to the HTTP store: $(cat "$said")" \
        eval "grep -q ' pushed, 0 errors' '$said' && [ \$(ls '$NGINX_DIR/www/fleet/fijit' | wc -l) = 2 ]"
    "$FIJIT" stats --cache-dir "$REMOTE_WORK/http-cache" >"$said" 2>&1
    check remote_http_counted_per_remote "fijit stats did not show the HTTP remote's own counters: $(cat "$said")" \
        eval "grep -q '^remote cache         http://127.0.0.1:$HTTP_PORT/fleet?' '$said' && grep -qE '^  remote bytes out +[1-9]' '$said'"
    # A list: each remote shown, masked, and which one holds the fleet's leases.
    FIJIT_REMOTE="$HTTP_URL redis://:SEKRIT@127.0.0.1:1" "$FIJIT" show-config --cache-dir "$CACHE" >"$said" 2>&1
    check remote_list_in_show_config "show-config of a list: $(grep -E 'remote|fleet' "$said")" \
        eval "[ \$(grep -c '^remote cache' '$said') = 2 ] && grep -q 'single flight  build leases in redis://\*\*\*@127.0.0.1:1' '$said' && ! grep -q SEKRIT '$said'"
    FIJIT_REMOTE="$HTTP_URL" "$FIJIT" show-config --cache-dir "$CACHE" >"$said" 2>&1
    check remote_http_alone_has_no_single_flight "show-config of an HTTP remote alone: $(grep fleet "$said")" \
        eval "grep -q 'single flight  none: no writable Redis remote' '$said'"
    kill -9 "$NGINX_PID"; wait "$NGINX_PID" 2>/dev/null
fi
