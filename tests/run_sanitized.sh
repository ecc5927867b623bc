#!/usr/bin/env bash
# Runs one sanitizer-built test; its exit status is the test's. One exception:
# LeakSanitizer's own tracer can crash ("Tracer caught signal 11") when the
# machine is loaded, which says nothing about the code under test, so a run
# that failed only that way is run once more. Any other failure, a leak
# report included, stands.
#   tests/run_sanitized.sh TEST [ARGS...]
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" >"$log" 2>&1
rc=$?
if [ $rc != 0 ] && grep -q "Tracer caught signal" "$log" &&
   ! grep -q "ERROR: LeakSanitizer: detected memory leaks\|ERROR: AddressSanitizer\|runtime error:\|FAIL" "$log"; then
    cat "$log"
    echo "run_sanitized: LeakSanitizer's tracer crashed (not a finding of the test); running $1 once more"
    "$@" >"$log" 2>&1
    rc=$?
fi
cat "$log"
exit $rc
