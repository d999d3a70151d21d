#!/usr/bin/env bash
# The cross-host tests: the remote connector with sender and receiver on two hosts, over TCP
# and over RDMA, in ONE run of the two-guest bed (tests/rdma/bed.sh --hosts 2).
#
#   tests/rdma/xhost-tests.sh [TEST-NAME-FILTER...]
#
# 1. On the host: builds tests/rdma/xhost_tests.c (libibverbs loaded at run time), plain and
#    with ASan+UBSan (xhost_tests_asan; OMC_XHOST_SAN=0 leaves it out).
# 2. Boots the two guests; host b runs `xhost_tests --serve` (the receivers), host a runs the
#    tests (the senders) under OMC_XHOST_TIMEOUT (default 600 s); then the same for the
#    sanitizer build, in the same boot.
# 3. Ends with one line "cross-host: N passed, M failed" (tests/run.sh adds it to the totals).
#    A build with no result line (crash, timeout) counts as one failure, and so does any
#    sanitizer report in either guest.
# No bed (exit 77): a failure where the bed can be built (root with apt-get), else a skip;
# OMC_RDMA_ALLOW_SKIP=1 makes it a skip everywhere (as tests/rdma/run-tests.sh does).
# Knobs: OMC_XHOST_TIMEOUT, CC, BUILD, CT_FILTER (contract cases), and bed.sh's.
set -u
cd "$(dirname "$0")/../.."

# The plain build, then (OMC_XHOST_SAN=1, the default) the ASan+UBSan build, in the same boot.
BINS="xhost_tests"
[ "${OMC_XHOST_SAN:-1}" = 1 ] && BINS="$BINS xhost_tests_asan"

# ---- inside the bed (both guests) --------------------------------------------------------------
if [ "${1:-}" = "--in-bed" ]; then
    dir=$2; shift 2
    ulimit -l unlimited 2>/dev/null || true
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:halt_on_error=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    if [ "$OMC_BED_HOST" = b ]; then
        # one server per build, in turn: each ends when host a's run of that build says "quit"
        for b in $BINS; do
            timeout -k 5 "$((${OMC_XHOST_TIMEOUT:-600} + 60))" "$dir/$b" --serve
            echo "== $b --serve: exit $?"
        done
        exit 0
    fi
    echo "rdma bed: $OMC_BED, host a, rails: $OMC_BED_RAILS ($OMC_RDMA_DEVICES on $OMC_BED_NETDEVS, $OMC_RDMA_IPS -> $OMC_RDMA_PEER_IPS)${OMC_BED_RAIL_NOTE:+, note: $OMC_BED_RAIL_NOTE}, kernel $(uname -r)"
    for b in $BINS; do
        echo "== $b"
        t0=$SECONDS
        timeout -k 5 "${OMC_XHOST_TIMEOUT:-600}" "$dir/$b" "$@"
        rc=$?
        [ $rc -eq 124 ] && echo "TIMEOUT $b after ${OMC_XHOST_TIMEOUT:-600} s"
        echo "== $b: exit $rc, $((SECONDS - t0)) s"
        sleep 1     # host b's next server binds the control port
    done
    exit 0
fi

# ---- on the host: build ----------------------------------------------------------------------------
CC=${CC:-cc}
OUT=${BUILD:-build}/rdma
mkdir -p "$OUT"
CFLAGS="-std=c99 -O2 -g -Wall -Wextra -Werror -pedantic -Wshadow -Wstrict-prototypes -Wno-missing-field-initializers ${EXTRA_CFLAGS:-} -I. -Itests"
SANFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
log=$OUT/xhost-build.log
: > "$log"
build() {   # build NAME EXTRA-FLAGS
    echo "$CC $CFLAGS $2 tests/rdma/xhost_tests.c -o $OUT/$1 -lzmq -ldl -lpthread -lm" >> "$log"
    # shellcheck disable=SC2086
    $CC $CFLAGS $2 tests/rdma/xhost_tests.c -o "$OUT/$1" -lzmq -ldl -lpthread -lm >> "$log" 2>&1
}
ok=1
for b in $BINS; do
    case $b in *_asan) build "$b" "$SANFLAGS" || ok=0 ;; *) build "$b" "" || ok=0 ;; esac
done
if [ $ok = 0 ]; then
    echo "FAIL xhost_tests build (see $log):"
    tail -n 30 "$log" | sed 's/^/    /'
    echo "cross-host: 0 passed, 1 failed"
    exit 1
fi

# ---- run in one boot of the two-guest bed -----------------------------------------------------------
out=$OUT/xhost-output.log
filters=""
for f in "$@"; do filters="$filters $(printf '%q' "$f")"; done
t0=$SECONDS
bash tests/rdma/bed.sh --hosts 2 -- "bash tests/rdma/xhost-tests.sh --in-bed $(printf '%q' "$OUT")$filters" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
echo "cross-host: the two-guest bed took $((SECONDS - t0)) s in all"

if [ "$rc" -eq 77 ]; then
    reason=$(grep -E '^rdma bed: (no bed|missing|cannot|guest)' "$out" | tail -n 1 | sed 's/^rdma bed: //')
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && [ "${OMC_RDMA_ALLOW_SKIP:-0}" != 1 ]; then
        echo "FAIL cross-host: the two-guest bed could not be brought up on a machine that should have it: ${reason:-see above}"
        echo "cross-host: 0 passed, 1 failed"
        exit 1
    fi
    echo "SKIP cross-host: no two-guest bed here (${reason:-see above}); the cross-host tests did not run"
    echo "cross-host: 0 passed, 0 failed"
    exit 0
fi

pass=0; fail=0
for b in $BINS; do
    line=$(grep -E "^$b: [0-9]+ passed, [0-9]+ failed" "$out" | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $b printed no result line (crashed, timed out or never ran)"
        fail=$((fail + 1))
        continue
    fi
    pass=$((pass + $(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')))
    fail=$((fail + $(echo "$line" | sed -E 's/.*passed, ([0-9]+) failed.*/\1/')))
done
# a sanitizer report in either guest (host b's receivers report through their exit only)
if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$out"; then
    echo "FAIL a sanitizer reported an error (see $out)"
    fail=$((fail + 1))
fi
if [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ]; then
    echo "FAIL the bed exited with $rc"
    fail=1
fi
echo "cross-host: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
