#!/usr/bin/env bash
# `make install` into a temp prefix, then build examples/prewarm_one.c with
# pkg-config against it (static and shared), run both in compile-only mode,
# build and run the quick start (examples/quickstart.c) the same way, and
# compile the public headers (fijit.h, fijit_cache.h) alone as C11 -pedantic
# and as C++.
set -euo pipefail
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
make -s install PREFIX="$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# One version, fijit.h's, in the .pc and the library's file name.
version=$(sed -n 's/^#define FIJIT_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9][0-9]*\)$/\2/p' include/fijit.h | paste -sd. -)
[ "$(pkg-config --modversion fijit)" = "$version" ] && [ -f "$prefix/lib/libfijit.so.$version" ] ||
    { echo "fijit.pc or the library's name does not carry fijit.h's version $version" >&2; exit 1; }
cc -std=c11 -pedantic -Wall -Wextra -Werror -fsyntax-only -x c "$prefix/include/fijit.h"
c++ -std=c++11 -pedantic -Wall -Wextra -Werror -fsyntax-only -x c++ "$prefix/include/fijit.h"
# The advanced header (fijit_cache.h, what the CLI is written against) alone:
# it needs no cuda.h (the driver table is the library's own; programs reach
# the GPU through fi_device_*).
cc -std=c11 -pedantic -Wall -Wextra -Werror -fsyntax-only -x c "$prefix/include/fijit_cache.h"
c++ -std=c++11 -pedantic -Wall -Wextra -Werror -fsyntax-only -x c++ "$prefix/include/fijit_cache.h"
if grep -q "fi_cuda_api\|include <cuda.h>" "$prefix"/include/*.h; then
    echo "an installed header names the driver table or includes cuda.h" >&2; exit 1
fi
cc -Wall -Werror -o "$prefix/prewarm_static" examples/prewarm_one.c $(pkg-config --cflags fijit) \
    "$prefix/lib/libfijit.a" $(pkg-config --libs --static fijit | sed 's/-lfijit//')
cc -Wall -Werror -o "$prefix/prewarm_shared" examples/prewarm_one.c $(pkg-config --cflags --libs fijit)
passed=0
for exe in prewarm_static prewarm_shared; do
    out=$(FIJIT_CACHE_DIR="$prefix/cache" LD_LIBRARY_PATH="$prefix/lib" "$prefix/$exe" "decode q=fp16 hd=64" sm_80)
    echo "$exe: $out"
    passed=$((passed + 1))
done
grep -q "already cached" <<<"$out" || { echo "second run should be a cache hit" >&2; echo "$passed passed, 1 failed"; exit 1; }

# The quick start, built with the installed .pc alone (and -lm for its CPU
# reference) under -pedantic, run in a fresh cache: it compiles its kernel,
# then without a GPU says FI_ENODEVICE and exits 77; with one, its output
# must match the reference (exit 0, "OK").
quickstart_failed() { echo "quickstart: $1 (exit $status):" >&2; echo "$out" >&2; echo "$passed passed, 1 failed"; exit 1; }
cc -std=c11 -Wall -Wextra -Werror -pedantic -o "$prefix/quickstart" examples/quickstart.c \
    $(pkg-config --cflags --libs fijit)
status=0
out=$(FIJIT_CACHE_DIR="$prefix/qs-cache" LD_LIBRARY_PATH="$prefix/lib" "$prefix/quickstart" 2>&1) || status=$?
echo "quickstart: $out"
case $status in
77) grep -q "^no GPU (FI_ENODEVICE: .*): compiling only$" <<<"$out" &&
        grep -q ": compiled in $prefix/qs-cache$" <<<"$out" ||
        quickstart_failed "no GPU, but not the expected report" ;;
0) grep -q ": OK$" <<<"$out" || quickstart_failed "exit 0 without a checked result" ;;
*) quickstart_failed "neither a checked result nor FI_ENODEVICE" ;;
esac
passed=$((passed + 1))
# On the fake driver (tests/fake_cuda.c) its launch path runs to the check:
# allocation, copies, workspace, fi_decode_run, synchronisation. The fake
# runs no kernel, so the check must then find a mismatch (exit 1).
fake_driver=build/tests/libcuda.so.1
if [ -f "$fake_driver" ]; then
    status=0
    out=$(FIJIT_CACHE_DIR="$prefix/qs-cache" LD_LIBRARY_PATH="$prefix/lib:$(dirname "$fake_driver")" \
          "$prefix/quickstart" 2>&1) || status=$?
    [ "$status" = 1 ] && grep -q "^decode on the GPU: .*: MISMATCH$" <<<"$out" ||
        quickstart_failed "on the fake driver, the launch did not reach the check"
    passed=$((passed + 1))
fi
readelf -d "$prefix/lib/libfijit.so" | grep -q 'SONAME.*libfijit.so.0' || { echo "soname missing" >&2; exit 1; }
exported=$(nm -D --defined-only "$prefix/lib/libfijit.so" | awk '{print $3}' | grep -v '^fi_[a-z]' || true)
[ -z "$exported" ] || { echo "symbols exported outside the fi_ prefix: $exported" >&2; exit 1; }
echo "$passed passed, 0 failed"
