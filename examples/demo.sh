#!/usr/bin/env bash
# The demo (scripts/demo.sh installs what is missing, then runs this):
#   1. two stages in two processes over the shared-memory connector (the embedded default):
#      zero-copy frames with CRC-32C, throughput and handoff latency;
#   2. the three-stage pipeline (thinker -> talker -> vocoder) in three processes, over shared
#      memory and then over TCP (ZMQ side channel + TCP data plane), checksums verified end to end;
#   3. TCP throughput between two processes (omniconn bench);
#   4. RDMA where this host has a device (else it says how to see it on Soft-RoCE);
#   then a summary: what moved, how fast, over which transport, where to read next.
# Usage: examples/demo.sh [-v]    -v (or OMC_DEMO_VERBOSE=1): also every request's own lines
#        DEMO_COUNT=N             payloads in step 1 (default 500)
# Exit status 0 only if every transfer arrived intact.
set -Eeuo pipefail
cd "$(dirname "$0")/.."
VERBOSE=${OMC_DEMO_VERBOSE:-0}
case "${1:-}" in
    -v|--verbose) VERBOSE=1 ;;
    "") ;;
    *) echo "usage: $0 [-v]   (-v or OMC_DEMO_VERBOSE=1: every request's own lines too)" >&2; exit 2 ;;
esac
OUT=$(mktemp -d /tmp/omc-demo.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
trap 'echo "demo: FAILED: a step above did not complete (exit status $?)" >&2' ERR

echo "building the examples and the command-line tool (make build/shm_pipeline build/pipeline3 build/omniconn)"
make -s build/shm_pipeline build/pipeline3 build/omniconn >/dev/null

# run NAME CMD...: show the output (without per-request lines unless verbose) and keep all of it
run() {
    local name=$1; shift
    if [ "$VERBOSE" = 1 ]; then
        "$@" 2>&1 | tee "$OUT/$name"
    else
        "$@" 2>&1 | tee "$OUT/$name" | awk '!/ (->|<-) xfer-/ { print; fflush() }'
    fi
}
# field FILE REGEX: the first match of an extended regex in a step's output (empty if none)
field() { grep -oE "$2" "$OUT/$1" 2>/dev/null | head -n 1 || true; }

echo
echo "== 1. shared memory: producer stage -> consumer stage (two processes)"
run shm build/shm_pipeline -n "${DEMO_COUNT:-500}"

echo
echo "== 2a. three stages, three processes, shared memory (examples/configs/pipeline3_shm.yaml)"
run p3shm build/pipeline3 --config examples/configs/pipeline3_shm.yaml

echo
echo "== 2b. the same pipeline over TCP (examples/configs/pipeline3_tcp.yaml)"
run p3tcp build/pipeline3 --config examples/configs/pipeline3_tcp.yaml
[ "$VERBOSE" = 1 ] || echo "(per-request lines hidden: examples/demo.sh -v shows them)"

echo
echo "== 3. TCP throughput: producer and consumer processes over the loopback (omniconn bench)"
run tcpbench build/omniconn bench --transport tcp --sizes 1M,16M --no-progress

echo
rdma="skipped: no RDMA device on this host"
if command -v ibv_devices >/dev/null 2>&1 && ibv_devices 2>/dev/null | awk 'NR>2 && NF' | grep -q .; then
    echo "== 4. RDMA: this host has a verbs device"
    run p3rdma build/pipeline3 --config examples/configs/pipeline3_rdma.yaml
    rdma="the pipeline over RDMA: $(field p3rdma 'OK: [0-9]+ requests[^(]*')"
else
    echo "== 4. RDMA: no verbs device on this host, skipped."
    echo "   To watch the RDMA engine on a real kernel RDMA stack (Soft-RoCE in QEMU):"
    echo "   tests/rdma/bed.sh -- build/pipeline3 --config examples/configs/pipeline3_rdma.yaml"
fi

# the summary, from what the steps printed
shm_mb=$(field shm '[0-9.]+ MB' ); shm_gbs=$(field shm 'throughput: [0-9.]+ GB/s' | sed 's/throughput: //')
shm_p50=$(field shm 'handoff: +p50 [0-9.]+ us' | sed -E 's/handoff: +//')
p3_req=$(field p3shm 'sent [0-9]+ requests: [0-9]+ chunks, [0-9.]+ MB' | sed 's/^sent //')
p3shm_lat=$(field p3shm 'p50 [0-9.]+ ms'); p3tcp_lat=$(field p3tcp 'p50 [0-9.]+ ms')
tcp_rows=$(awk '$2 == "MiB" && $4 ~ /^[0-9.]+$/ { printf "%s%s GB/s at %s %s", sep, $4, $1, $2; sep = ", " }' "$OUT/tcpbench")
echo
echo "== summary"
echo "shared memory  ${shm_mb:-?} in ${DEMO_COUNT:-500} frames between two processes at ${shm_gbs:-?}, zero copy;"
echo "               small-payload handoff ${shm_p50:-?}"
echo "pipeline       ${p3_req:-?} of hidden states through thinker -> talker -> vocoder,"
echo "               three processes, every checksum verified; chunk latency ${p3shm_lat:-?} over"
echo "               shared memory, ${p3tcp_lat:-?} over TCP"
echo "TCP            ${tcp_rows:-see step 3} between two processes (loopback: memory speed, not a NIC's)"
echo "RDMA           $rdma"
echo "read next      README.md (two small programs: your first transfer), docs/getting-started.md"
echo "               (SHM, then TCP between hosts, then RDMA), docs/troubleshooting.md, examples/README.md"
echo
echo "demo: every transfer arrived intact"
