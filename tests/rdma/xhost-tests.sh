#!/usr/bin/env bash
# The two-host suites, in ONE run of the two-guest bed (tests/rdma/bed.sh --hosts 2):
#   cross-host  the remote connector with sender and receiver on two hosts, over TCP and over
#               RDMA (tests/rdma/xhost_tests.c)
#   multi-rail  the RDMA engine striping over both rails, a peer with fewer rails, a rail
#               failing and rejoining mid-transfer, both rails down (tests/rdma/multirail_tests.c)
#
#   tests/rdma/xhost-tests.sh [TEST-NAME-FILTER...]
#
# 1. On the host: builds both binaries (libibverbs loaded at run time), plain and with
#    ASan+UBSan (*_asan; OMC_XHOST_SAN=0 leaves them out).
# 2. Boots the two guests once; for each binary in turn, host b runs `BINARY --serve` (the
#    receivers) and host a runs the tests (the senders) under OMC_XHOST_TIMEOUT (default 600 s).
# 3. Ends with one line per suite, "multi-rail: N passed, M failed" then "cross-host: N passed,
#    M failed" (tests/run.sh adds both to the totals). A binary with no result line (crash,
#    timeout) counts as one failure of its suite, and so does a sanitizer report in its part
#    of the output (either guest).
# No bed (exit 77): a failure where the bed can be built (root with apt-get), else a skip;
# OMC_RDMA_ALLOW_SKIP=1 makes it a skip everywhere (as tests/rdma/run-tests.sh does).
# Knobs: OMC_XHOST_SUITES (default "cross-host multi-rail": the suites to run), OMC_XHOST_TIMEOUT,
# CC, BUILD, CT_FILTER (contract cases), and bed.sh's.
set -u
cd "$(dirname "$0")/../.."

# Per suite: the plain build, then (OMC_XHOST_SAN=1, the default) the ASan+UBSan build, in the
# same boot. suite_of BINARY: the suite a binary's results count in.
SUITES=${OMC_XHOST_SUITES:-cross-host multi-rail}
BINS=""
for s in $SUITES; do
    case $s in
        cross-host) src=xhost_tests ;;
        multi-rail) src=multirail_tests ;;
        *) echo "xhost-tests.sh: unknown suite '$s' (cross-host, multi-rail)"; exit 2 ;;
    esac
    BINS="$BINS $src"
    [ "${OMC_XHOST_SAN:-1}" = 1 ] && BINS="$BINS ${src}_asan"
done
BINS=${BINS# }
suite_of() { case $1 in multirail_tests*) echo multi-rail ;; *) echo cross-host ;; esac; }
source_of() { case $1 in multirail_tests*) echo tests/rdma/multirail_tests.c ;; *) echo tests/rdma/xhost_tests.c ;; esac; }

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
    local src
    src=$(source_of "$1")
    echo "$CC $CFLAGS $2 $src -o $OUT/$1 -lzmq -ldl -lpthread -lm" >> "$log"
    # shellcheck disable=SC2086
    $CC $CFLAGS $2 "$src" -o "$OUT/$1" -lzmq -ldl -lpthread -lm >> "$log" 2>&1
}
ok=1
for b in $BINS; do
    case $b in *_asan) build "$b" "$SANFLAGS" || ok=0 ;; *) build "$b" "" || ok=0 ;; esac
done
if [ $ok = 0 ]; then
    echo "FAIL the two-host test build (see $log):"
    tail -n 30 "$log" | sed 's/^/    /'
    for s in $SUITES; do echo "$s: 0 passed, 1 failed"; done
    exit 1
fi

# ---- run in one boot of the two-guest bed -----------------------------------------------------------
out=$OUT/xhost-output.log
filters=""
for f in "$@"; do filters="$filters $(printf '%q' "$f")"; done
t0=$SECONDS
bash tests/rdma/bed.sh --hosts 2 -- "bash tests/rdma/xhost-tests.sh --in-bed $(printf '%q' "$OUT")$filters" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
echo "two-host suites ($SUITES): the two-guest bed took $((SECONDS - t0)) s in all"

if [ "$rc" -eq 77 ]; then
    reason=$(grep -E '^rdma bed: (no bed|missing|cannot|guest)' "$out" | tail -n 1 | sed 's/^rdma bed: //')
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && [ "${OMC_RDMA_ALLOW_SKIP:-0}" != 1 ]; then
        for s in $SUITES; do
            echo "FAIL $s: the two-guest bed could not be brought up on a machine that should have it: ${reason:-see above}"
            echo "$s: 0 passed, 1 failed"
        done
        exit 1
    fi
    for s in $SUITES; do
        echo "SKIP $s: no two-guest bed here (${reason:-see above}); the $s tests did not run"
        echo "$s: 0 passed, 0 failed"
    done
    exit 0
fi

# Per suite: its binaries' result lines; a sanitizer report in a binary's part of the output (the
# lines between its "== BINARY" header and the next, host b's "[b] " lines included) fails it.
declare -A pass fail
for s in $SUITES; do pass[$s]=0; fail[$s]=0; done
for b in $BINS; do
    s=$(suite_of "$b")
    line=$(grep -E "^$b: [0-9]+ passed, [0-9]+ failed" "$out" | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $b printed no result line (crashed, timed out or never ran)"
        fail[$s]=$((fail[$s] + 1))
    else
        pass[$s]=$((pass[$s] + $(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')))
        fail[$s]=$((fail[$s] + $(echo "$line" | sed -E 's/.*passed, ([0-9]+) failed.*/\1/')))
    fi
    if awk -v b="$b" '$0 == "== " b { on = 1; next } /^== [a-z_]+$/ { on = 0 } on' "$out" \
        | grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:'; then
        echo "FAIL $b: a sanitizer reported an error (see $out)"
        fail[$s]=$((fail[$s] + 1))
    fi
done
any=0
for s in $SUITES; do any=$((any + fail[$s])); done
if [ "$rc" -ne 0 ] && [ "$any" -eq 0 ]; then
    echo "FAIL the bed exited with $rc"
    for s in $SUITES; do fail[$s]=1; done
    any=1
fi
# multi-rail first, cross-host last (tests/run.sh reads both lines)
for s in multi-rail cross-host; do
    [ -n "${pass[$s]+set}" ] && echo "$s: ${pass[$s]} passed, ${fail[$s]} failed"
done
[ "$any" -eq 0 ]
