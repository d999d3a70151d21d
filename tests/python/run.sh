#!/usr/bin/env bash
# The Python suite against a freshly built libomniconn.so. Ends with "python: N passed, M failed".
#   tests/python/run.sh          the plain build (build/)
#   tests/python/run.sh --asan   the library built with ASan+UBSan (build/asan), loaded into Debian's
#                                python with libasan preloaded (leak checking off: the interpreter's
#                                own allocations are not ours)
set -u
cd "$(dirname "$0")/../.."
label=python; dir=${BUILD:-build}; make_args=()
if [ "${1:-}" = "--asan" ]; then
    label=python-asan; dir=build/asan; make_args=(SAN=asan)
fi
if ! make -s BUILD="$dir" "${make_args[@]}" lib >/dev/null 2>&1; then
    make -s BUILD="$dir" "${make_args[@]}" lib 2>&1 | tail -n 20
    echo "$label: 0 passed, 1 failed (the library did not build)"; exit 1
fi
export OMNICONN_LIBRARY=$PWD/$dir/libomniconn.so
if [ "$label" = python-asan ]; then
    export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
    export ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=0
fi
out=$(mktemp); trap 'rm -f "$out"' EXIT
/usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
summary=$(grep -E '^[0-9]+ (passed|failed|error)|^=+ .*(passed|failed|error|no tests ran)' "$out" | tail -n 1)
num() { echo "$summary" | grep -oE "[0-9]+ $1" | grep -oE '[0-9]+' || echo 0; }
passed=$(num passed); failed=$(num failed); errors=$(num error); xfailed=$(num xfailed); skipped=$(num skipped)
failed=$((failed + errors))
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi   # no tests (exit 5), a crash, an internal error
echo "$label: $passed passed, $failed failed ($xfailed xfailed, $skipped skipped; pytest exit $rc)"
[ "$failed" -eq 0 ]
