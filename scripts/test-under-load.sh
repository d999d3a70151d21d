#!/usr/bin/env bash
# Run the suite (or a part of it) with busy loops beside it, the way a shared CI machine runs it:
# a test that holds only on an idle machine fails here.
#   scripts/test-under-load.sh                    the whole suite (tests/run.sh: bed and two-host suites included)
#   scripts/test-under-load.sh --quick            tests/run.sh --quick
#   scripts/test-under-load.sh CMD [ARGS...]      any command, e.g. build/test_hostile, or tests/rdma/xhost-tests.sh
# LOAD_LOOPS (default 2: twice the cores of the 2-core CI machines with the suite's own work)
# sets how many busy loops run. The loops are killed when the command ends, however it ends.
# Exit status: the command's.
set -u
cd "$(dirname "$0")/.."
LOOPS=${LOAD_LOOPS:-2}
pids=()

stop_loops() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    pids=()
}
trap stop_loops EXIT
trap 'stop_loops; exit 130' INT
trap 'stop_loops; exit 143' TERM

for ((i = 0; i < LOOPS; i++)); do
    ( trap - EXIT INT TERM; while :; do :; done ) &
    pids+=("$!")
done
echo "== under load: $LOOPS busy loop(s) (pids ${pids[*]}), load average $(cut -d' ' -f1-3 /proc/loadavg)"

if [ $# -eq 0 ]; then set -- bash tests/run.sh
elif [ "$1" = "--quick" ]; then set -- bash tests/run.sh --quick
fi
"$@"
rc=$?
echo "== under load: done (exit status $rc), load average $(cut -d' ' -f1-3 /proc/loadavg)"
exit $rc
