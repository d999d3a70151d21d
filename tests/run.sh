#!/usr/bin/env bash
# The whole omniconn test suite. `make test` calls this (after installing missing packages).
#   tests/run.sh            everything: compile matrix, unit/functional tests (plain, ASan+UBSan,
#                           TSan), fuzz smoke runs, the RDMA tests on the first bed available,
#                           the cross-host and multi-rail tests on two QEMU guests (one boot)
#   tests/run.sh --quick    the plain build's tests only
# Every test binary ends with "<name>: N passed, M failed"; this script adds them up and ends
# with one line "N passed, M failed". Exit status 0 only if nothing failed.
set -u
cd "$(dirname "$0")/.."
QUICK=0; [ "${1:-}" = "--quick" ] && QUICK=1
JOBS=${JOBS:-2}
LOGS=build/logs
mkdir -p "$LOGS"
total_pass=0; total_fail=0

count() {   # count LOGFILE LABEL [NAME]: add the binary's closing line to the totals (no line = 1
            # failure); with NAME, the last line "NAME: N passed, M failed" (a log with several)
    local line p f
    line=$(grep -E "^${3:-[^ ]+}: [0-9]+ passed, [0-9]+ failed" "$1" | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $2 (no result line: crashed or did not run; see $1)"; tail -n 20 "$1" | sed 's/^/    /'
        total_fail=$((total_fail + 1)); return
    fi
    p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed.*/\1/')
    f=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed.*/\2/')
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    echo "  $2: $p passed, $f failed"
    [ "$f" -eq 0 ] || grep -E '^FAIL|^  .*:[0-9]+: ' "$1" | head -n 30 | sed 's/^/    /'
}

run_tests() {   # run_tests BUILD_DIR LABEL [make args...]
    local dir=$1 label=$2; shift 2
    echo "== $label: building"
    if ! make -s -j"$JOBS" BUILD="$dir" "$@" tests >"$LOGS/build-$label.log" 2>&1; then
        echo "FAIL build ($label): see $LOGS/build-$label.log"; tail -n 30 "$LOGS/build-$label.log" | sed 's/^/    /'
        total_fail=$((total_fail + 1)); return
    fi
    echo "== $label: running"
    for t in "$dir"/test_*; do
        [ -x "$t" ] || continue
        local name log
        name=$(basename "$t")
        log="$LOGS/$label-$name.log"
        timeout "${TEST_TIMEOUT:-600}" "$t" >"$log" 2>&1
        count "$log" "$label/$name"
    done
}

# the library's built-in logger prints warnings to stderr; several tests provoke thousands on
# purpose (random bad frees), so the logs keep errors only unless you ask: OMNICONN_LOG=debug make check
export OMNICONN_LOG=${OMNICONN_LOG:-error}
# sanitizers: fail on the first report; leaks count as failures
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

if [ "$QUICK" -eq 0 ]; then
    echo "== compile matrix"
    bash tests/compile/run.sh >"$LOGS/compile.log" 2>&1
    count "$LOGS/compile.log" "compile-matrix"
fi

echo "== companion interface"
bash tests/check_companions.sh >"$LOGS/companions.log" 2>&1
count "$LOGS/companions.log" "companions"

run_tests build plain

# the README's programs, compiled and run exactly as the README prints them
echo "== README programs"
bash tests/readme/run.sh >"$LOGS/readme.log" 2>&1
count "$LOGS/readme.log" "readme"

if [ "$QUICK" -eq 0 ]; then
    run_tests build/asan asan SAN=asan
    run_tests build/tsan tsan SAN=tsan CC=clang
    echo "== Python package and shared library (plain, then ASan+UBSan), install paths"
    bash tests/python/run.sh >"$LOGS/python.log" 2>&1; count "$LOGS/python.log" "python"
    bash tests/python/run.sh --asan >"$LOGS/python-asan.log" 2>&1; count "$LOGS/python-asan.log" "python-asan"
    bash tests/install/run.sh >"$LOGS/install.log" 2>&1; count "$LOGS/install.log" "install"
    if [ -x tests/fuzz/run.sh ]; then
        echo "== fuzz smoke (${FUZZ_SECONDS:=20} s per target)"
        FUZZ_SECONDS=$FUZZ_SECONDS bash tests/fuzz/run.sh >"$LOGS/fuzz.log" 2>&1
        count "$LOGS/fuzz.log" "fuzz"
    fi
    if [ -x tests/rdma/run-tests.sh ]; then
        echo "== RDMA tests on a kernel RDMA stack"
        bash tests/rdma/run-tests.sh >"$LOGS/rdma.log" 2>&1
        grep -E '^rdma bed:' "$LOGS/rdma.log" | head -n 1
        count "$LOGS/rdma.log" "rdma" "rdma"     # its own closing line: a cut-off log is a failure, not the last binary's count
    fi
    if [ -x tests/rdma/xhost-tests.sh ]; then
        echo "== cross-host (TCP and RDMA) and multi-rail tests on two guests, one boot"
        bash tests/rdma/xhost-tests.sh >"$LOGS/xhost.log" 2>&1
        grep -E '^rdma bed: qemu-rxe-2host, host a' "$LOGS/xhost.log" | head -n 1
        count "$LOGS/xhost.log" "cross-host" "cross-host"
        count "$LOGS/xhost.log" "multi-rail" "multi-rail"
    fi
fi

echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
