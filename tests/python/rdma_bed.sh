#!/usr/bin/env bash
# RDMA from Python on the RDMA bed: builds libomniconn.so, then runs tests/python/rdma_bed.py
# (two processes, bytes, a numpy array, a named-tensor frame and the vLLM-Omni connector over
# RDMA, checksums compared) inside ONE run of tests/rdma/bed.sh (hardware, host Soft-RoCE, or
# Debian's kernel in QEMU with Soft-RoCE, chrooted into this host's root).
# Ends with "python-rdma: N passed, M failed"; bed.sh's exit 77 (no bed) is a SKIP line and
# "python-rdma: 0 passed, 0 failed".
set -u
cd "$(dirname "$0")/../.."
if [ "${1:-}" = "--in-bed" ]; then
    ulimit -l unlimited 2>/dev/null || true     # the pools are registered with the NIC
    echo "rdma bed: $OMC_BED, device $OMC_RDMA_DEVICE, address $OMC_RDMA_IP, kernel $(uname -r)"
    timeout -k 5 "${OMC_PY_RDMA_TIMEOUT:-400}" /usr/bin/python3 tests/python/rdma_bed.py
    echo "== python-rdma: exit $?"
    exit 0
fi
BUILD=${BUILD:-build}
if ! make -s BUILD="$BUILD" lib >/dev/null 2>&1; then
    make -s BUILD="$BUILD" lib 2>&1 | tail -n 20
    echo "python-rdma: 0 passed, 1 failed (the library did not build)"; exit 1
fi
out=$(mktemp); trap 'rm -f "$out"' EXIT
t0=$SECONDS
bash tests/rdma/bed.sh -- "bash tests/python/rdma_bed.sh --in-bed" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
echo "python-rdma: bed run $((SECONDS - t0)) s (boot included)"
if [ "$rc" -eq 77 ]; then
    echo "SKIP python-rdma: no RDMA bed here ($(grep -E '^rdma bed: ' "$out" | tail -n 1))"
    echo "python-rdma: 0 passed, 0 failed"; exit 0
fi
line=$(grep -E '^python-rdma: [0-9]+ passed, [0-9]+ failed' "$out" | tail -n 1)
if [ -z "$line" ]; then
    echo "FAIL python-rdma printed no result line (bed exit $rc)"
    echo "python-rdma: 0 passed, 1 failed"; exit 1
fi
if [ "$rc" -ne 0 ] && echo "$line" | grep -q ' 0 failed'; then
    echo "FAIL the bed exited with $rc"
    echo "$line" | sed -E 's/ 0 failed/ 1 failed/'; exit 1
fi
echo "$line"
echo "$line" | grep -q ' 0 failed$'
