#!/usr/bin/env bash
# Both rails of the two-guest bed measured with perftest (not a test: figures to compare as
# ratios). One boot of tests/rdma/bed.sh --hosts 2; guest b serves, guest a writes to it:
#   rail0 alone, rail1 alone, then both at once (one ib_write_bw per rail, started together),
#   then rail1 shaped to OMC_RAILS_SHAPE (tc tbf on host a, default 16mbit) alone and with rail0.
# Prints one line per run: "rails: <which> size=<bytes> mbps=<MB/s per rail...> total=<sum>".
#
#   tests/rdma/rails.sh [SIZE] [ITERATIONS]        (default 1048576 and 100)
set -u
cd "$(dirname "$0")/../.."
SIZE=${1:-1048576}
ITERS=${2:-100}

if [ "${1:-}" = "--in-bed" ]; then
    SIZE=$2 ITERS=$3
    read -ra devs <<< "$OMC_RDMA_DEVICES"
    read -ra peers <<< "$OMC_RDMA_PEER_IPS"
    read -ra gids <<< "$OMC_RDMA_GID_INDEXES"
    run=0
    step() {   # step NAME RAIL-INDEX...: server(s) on b, client(s) on a, in lockstep via files
        local name=$1 r
        shift
        run=$((run + 1))
        if [ "$OMC_BED_HOST" = b ]; then
            for r in "$@"; do
                ib_write_bw -d "${devs[$r]}" -x "${gids[$r]}" -p $((18515 + r)) -s "$SIZE" -n "$ITERS" -F > /dev/null 2>&1 &
            done
            sleep 1
            touch "$OMC_BED_SYNC/ready.$run"
            wait
        else
            for _ in $(seq 1 600); do [ -e "$OMC_BED_SYNC/ready.$run" ] && break; sleep 0.1; done
            local tmp line total=0 mb all=""
            tmp=$(mktemp -d)
            for r in "$@"; do
                ib_write_bw -d "${devs[$r]}" -x "${gids[$r]}" -p $((18515 + r)) -s "$SIZE" -n "$ITERS" -F "${peers[$r]}" > "$tmp/$r" 2>&1 &
            done
            wait
            for r in "$@"; do
                mb=$(awk -v s="$SIZE" '$1 == s && NF >= 5 { print $4 }' "$tmp/$r" | tail -n 1)
                all="$all ${devs[$r]}=${mb:-0}"
                total=$(awk -v a="$total" -v b="${mb:-0}" 'BEGIN { print a + b }')
            done
            rm -rf "$tmp"
            echo "rails: $name size=$SIZE iterations=$ITERS mbps:$all total=$total"
        fi
    }
    step rail0 0
    [ "${#devs[@]}" -ge 2 ] && step rail1 1
    [ "${#devs[@]}" -ge 2 ] && step both 0 1
    # unequal rails (what weighted striping must handle): rail1 shaped on host a's side
    if [ "${#devs[@]}" -ge 2 ]; then
        if [ "$OMC_BED_HOST" = a ]; then
            tc qdisc add dev rail1 root tbf rate "${OMC_RAILS_SHAPE:-16mbit}" burst 32kbit latency 400ms \
                || echo "rails: tc could not shape rail1"
        fi
        step "rail1-shaped-${OMC_RAILS_SHAPE:-16mbit}" 1
        step "both-rail1-shaped-${OMC_RAILS_SHAPE:-16mbit}" 0 1
        [ "$OMC_BED_HOST" = a ] && tc qdisc del dev rail1 root
    fi
    exit 0
fi

bash tests/rdma/bed.sh --hosts 2 -- "bash tests/rdma/rails.sh --in-bed $SIZE $ITERS"
