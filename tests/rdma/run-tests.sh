#!/usr/bin/env bash
# The RDMA engine's tests on a real kernel RDMA stack, in ONE run of the first bed available.
#
#   tests/rdma/run-tests.sh [TEST-NAME-FILTER...]
#
# 1. On the host: builds the device tests (tests/rdma/rdma_tests.c) and the unit tests
#    (tests/test_rdma_unit.c) in both linking modes: libibverbs loaded at run time (the
#    default) and linked directly (OMNICONN_NO_RUNTIME_LINKING, -libverbs).
# 2. Runs all four binaries inside tests/rdma/bed.sh (hardware, host rxe, or Debian's kernel in
#    QEMU with Soft-RoCE; one boot), each under a timeout, and prints their output.
# 3. Ends with one line "rdma: N passed, M failed" (tests/run.sh adds it to the totals). A
#    binary that printed no result line (crash, timeout) counts as one failure.
#
# No bed (bed.sh exits 77): on a machine where the bed can be built - root with apt-get, the
# machines `make test` is meant for - that is a failure ("rdma: 0 passed, 1 failed", with
# bed.sh's reason), because the RDMA tests are part of the suite there. Elsewhere (not root,
# no apt-get) it is a skip ("rdma: 0 passed, 0 failed" after a SKIP line with the reason).
# OMC_RDMA_ALLOW_SKIP=1 turns the former into a skip too (for machines known to lack it).
# Knobs: OMC_RDMA_TEST_TIMEOUT (seconds per binary, default 400), OMC_RDMA_BINARIES (which of
# test_rdma_unit test_rdma_unit_linked rdma_tests rdma_tests_linked test_xfer python-rdma
# python-mooncake run; default all), CC, BUILD, and bed.sh's.
ALL_BINARIES="test_rdma_unit test_rdma_unit_linked rdma_tests rdma_tests_linked test_xfer"
BINARIES=${OMC_RDMA_BINARIES:-$ALL_BINARIES python-rdma python-mooncake}
want() { case " $BINARIES " in *" $1 "*) return 0;; esac; return 1; }
set -u
cd "$(dirname "$0")/../.."

# ---- inside the bed: run the binaries (bed.sh calls us back with --in-bed) ---------------------
if [ "${1:-}" = "--in-bed" ]; then
    dir=$2; shift 2
    # the tests register tens of MiB; as root this also works without it (CAP_IPC_LOCK), and
    # the memlock test sets its own limit
    ulimit -l unlimited 2>/dev/null || true
    echo "rdma bed: $OMC_BED, device $OMC_RDMA_DEVICE, address $OMC_RDMA_IP, GID index ${OMC_RDMA_GID_INDEX:-?}, kernel $(uname -r)"
    for b in $ALL_BINARIES; do
        want "$b" || continue
        echo "== $b"
        t0=$SECONDS
        # the contract suite over the connector (the slowest test, and the same code in both
        # modes) runs once, in the runtime-linked build; everything else runs in both
        skip=""
        [ "$b" = rdma_tests_linked ] && skip="OMC_RDMA_SKIP_CONTRACT=1"
        [ "$b" = test_xfer ] && skip="OMC_XFER_TEST_TRANSPORT=rdma"   # the transfer engine over verbs
        env $skip timeout -k 5 "${OMC_RDMA_TEST_TIMEOUT:-400}" "$dir/$b" "$@"
        rc=$?
        [ $rc -eq 124 ] && echo "TIMEOUT $b after ${OMC_RDMA_TEST_TIMEOUT:-400} s"
        echo "== $b: exit $rc, $((SECONDS - t0)) s"
    done
    if [ -n "${OMC_PY_RDMA_LIB:-}" ] && want python-rdma; then     # the Python package over RDMA (tests/python/rdma_bed.py)
        echo "== python-rdma"; OMNICONN_LIBRARY=$OMC_PY_RDMA_LIB timeout -k 5 "${OMC_RDMA_TEST_TIMEOUT:-400}" /usr/bin/python3 tests/python/rdma_bed.py
    fi
    if [ -n "${OMC_PY_RDMA_LIB:-}" ] && want python-mooncake; then   # omniconn.mooncake over verbs
        echo "== python-mooncake"
        pyout=$(OMNICONN_LIBRARY=$OMC_PY_RDMA_LIB OMC_MOONCAKE_PROTOCOL=rdma timeout -k 5 "${OMC_RDMA_TEST_TIMEOUT:-400}" \
                /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python/test_mooncake.py 2>&1)
        echo "$pyout"
        p=$(echo "$pyout" | grep -oE '[0-9]+ passed' | tail -n 1 | grep -oE '[0-9]+'); f=$(echo "$pyout" | grep -oE '[0-9]+ (failed|error)' | grep -oE '[0-9]+' | awk '{s+=$1} END {print s+0}')
        echo "python-mooncake: ${p:-0} passed, ${f:-0} failed"
    fi
    exit 0
fi

# ---- on the host: build ----------------------------------------------------------------------------
CC=${CC:-cc}
OUT=${BUILD:-build}/rdma
mkdir -p "$OUT"
CFLAGS="-std=c99 -O2 -g -Wall -Wextra -Werror -pedantic -Wshadow -Wstrict-prototypes -Wno-missing-field-initializers ${EXTRA_CFLAGS:-} -I. -Itests"
RUNTIME_LIBS="-lzmq -ldl -lpthread -lm"
LINKED_LIBS="-libverbs -lzmq -ldl -lpthread -lm"
log=$OUT/build.log
: > "$log"
build() {   # build NAME SOURCE EXTRA-FLAGS LIBS
    echo "$CC $CFLAGS $3 $2 -o $OUT/$1 $4" >> "$log"
    # shellcheck disable=SC2086
    $CC $CFLAGS $3 "$2" -o "$OUT/$1" $4 >> "$log" 2>&1
}
if ! { build test_rdma_unit tests/test_rdma_unit.c "" "$RUNTIME_LIBS" &&
       build test_rdma_unit_linked tests/test_rdma_unit.c "-DOMNICONN_NO_RUNTIME_LINKING" "$LINKED_LIBS" &&
       build rdma_tests tests/rdma/rdma_tests.c "" "$RUNTIME_LIBS" &&
       build rdma_tests_linked tests/rdma/rdma_tests.c "-DOMNICONN_NO_RUNTIME_LINKING" "$LINKED_LIBS" &&
       build test_xfer tests/test_xfer.c "" "$RUNTIME_LIBS"; }; then
    echo "FAIL rdma build (see $log):"
    tail -n 30 "$log" | sed 's/^/    /'
    echo "rdma: 0 passed, 1 failed"
    exit 1
fi
# the runtime-linked binaries must not need libibverbs to start
if readelf -d "$OUT/rdma_tests" 2>/dev/null | grep -q 'libibverbs'; then
    echo "FAIL $OUT/rdma_tests links libibverbs although it should load it at run time"
    echo "rdma: 0 passed, 1 failed"
    exit 1
fi

# the Python package's RDMA test runs in the same boot if libomniconn.so builds and python3 has numpy and msgpack
make -s BUILD="${BUILD:-build}" lib >/dev/null 2>&1 && /usr/bin/python3 -c 'import numpy, msgpack' 2>/dev/null &&
    export OMC_PY_RDMA_LIB=$PWD/${BUILD:-build}/libomniconn.so

# ---- run them in one boot of the bed ---------------------------------------------------------
out=$OUT/bed-output.log
filters=""
for f in "$@"; do filters="$filters $(printf '%q' "$f")"; done
bash tests/rdma/bed.sh -- "bash tests/rdma/run-tests.sh --in-bed $(printf '%q' "$OUT")$filters" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}

if [ "$rc" -eq 77 ]; then
    reason=$(grep -E '^rdma bed: (no bed|missing|cannot)' "$out" | tail -n 1 | sed 's/^rdma bed: //')
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && [ "${OMC_RDMA_ALLOW_SKIP:-0}" != 1 ]; then
        echo "FAIL rdma: no RDMA bed could be brought up on a machine that should have one: ${reason:-see above}"
        echo "rdma: 0 passed, 1 failed"
        exit 1
    fi
    echo "SKIP rdma: no RDMA bed here (${reason:-see above}); the RDMA tests did not run"
    echo "rdma: 0 passed, 0 failed"
    exit 0
fi

# ---- add up the binaries' result lines ------------------------------------------------------------
pass=0; fail=0
for b in $ALL_BINARIES ${OMC_PY_RDMA_LIB:+python-rdma python-mooncake}; do
    want "$b" || continue
    line=$(grep -E "^$b: [0-9]+ passed, [0-9]+ failed" "$out" | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $b printed no result line (crashed, timed out or never ran)"
        fail=$((fail + 1))
        continue
    fi
    pass=$((pass + $(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')))
    fail=$((fail + $(echo "$line" | sed -E 's/.*passed, ([0-9]+) failed.*/\1/')))
done
if [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ]; then
    echo "FAIL the bed exited with $rc"
    fail=1
fi
echo "rdma: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
