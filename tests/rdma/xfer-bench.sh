#!/usr/bin/env bash
# The transfer engine's bench rows, side by side with the tool that sets the bar, in alternating
# rounds, medians of the rounds; writes bench/results/xfer.json. Not a test: only ratios count.
#
#   tests/rdma/xfer-bench.sh tcp     on this host, TCP loopback: bench_xfer tcp (READ and WRITE,
#                                    256 x 32 KiB and 1 x 8 MiB batches) against iperf3 -c 127.0.0.1
#   tests/rdma/xfer-bench.sh rdma    in ONE boot of the RDMA bed: bench_xfer rdma against ib_read_bw
#                                    and ib_write_bw with the same message sizes (32 KiB, 8 MiB)
#
# Figures are MiB/s (perftest's "MB/sec", iperf3's bits / 8 / 2^20). Ratios: bench_xfer READ over
# ib_read_bw, WRITE over ib_write_bw, the 256 x 32 KiB batch against 32 KiB messages and the 8 MiB
# batch against 8 MiB messages; over TCP both against iperf3's single stream.
# Knobs: OMC_XFER_ROUNDS (5), OMC_XFER_BATCHES (20 per bench_xfer run), OMC_BENCH_TIMEOUT (90 s per tool run).
set -u
cd "$(dirname "$0")/../.."
MODE=${1:-tcp}
ROUNDS=${OMC_XFER_ROUNDS:-5}
BATCHES=${OMC_XFER_BATCHES:-20}
TT=${OMC_BENCH_TIMEOUT:-90}
OUT=${BUILD:-build}
JSON=bench/results/xfer.json

if [ "$MODE" = --in-bed ]; then        # inside the bed: rounds of every tool, raw lines to $2
    raw=$2 bin=$3
    ulimit -l unlimited 2>/dev/null || true
    : > "$raw"
    perf() {   # perf TOOL SIZE ITERS: one perftest pair (server waits on its TCP port)
        local tmp spid avg
        tmp=$(mktemp -d)
        timeout -k 5 "$TT" "$1" -d "$OMC_RDMA_DEVICE" -x "$OMC_RDMA_GID_INDEX" -s "$2" -n "$3" -F > "$tmp/s" 2>&1 &
        spid=$!
        sleep 1
        timeout -k 5 "$TT" "$1" -d "$OMC_RDMA_DEVICE" -x "$OMC_RDMA_GID_INDEX" -s "$2" -n "$3" -F "$OMC_RDMA_IP" > "$tmp/c" 2>&1
        sleep 1; kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
        avg=$(awk -v s="$2" '$1 == s && NF >= 5 { print $4 }' "$tmp/c" | tail -n 1)
        echo "perf tool=$1 size=$2 mbps=${avg:-0}" | tee -a "$raw"
        rm -rf "$tmp"
    }
    for round in $(seq 1 "$ROUNDS"); do
        for k in 0 1 2 3; do        # the first tool rotates with the round, so all see the same drift
            case $(( (round + k) % 4 )) in
                0) perf ib_write_bw 32768 2560; perf ib_write_bw 8388608 12;;
                1) perf ib_read_bw 32768 2560; perf ib_read_bw 8388608 12;;
                2) for l in 256x32k 1x8m; do timeout -k 5 "$TT" "$bin" rdma write $l "$BATCHES" | tee -a "$raw"; done;;
                3) for l in 256x32k 1x8m; do timeout -k 5 "$TT" "$bin" rdma read $l "$BATCHES" | tee -a "$raw"; done;;
            esac
        done
    done
    exit 0
fi

make -s BUILD="$OUT" "$OUT/bench_xfer" || exit 1
raw=$OUT/xfer-bench-$MODE.raw
if [ "$MODE" = rdma ]; then
    bash tests/rdma/bed.sh -- "bash tests/rdma/xfer-bench.sh --in-bed $(printf '%q' "$PWD/$raw") $(printf '%q' "$PWD/$OUT/bench_xfer")" || exit $?
else
    : > "$raw"
    for round in $(seq 1 "$ROUNDS"); do
        for k in 0 1; do
            if [ $(( (round + k) % 2 )) = 0 ]; then
                port=$((15300 + round))
                iperf3 -s -1 -p $port > /dev/null 2>&1 &
                sleep 0.5
                mbps=$(timeout -k 5 "$TT" iperf3 -c 127.0.0.1 -p $port -t 3 -J 2>/dev/null |
                       /usr/bin/python3 -c 'import json,sys; print("%.1f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 8 / 1048576))' 2>/dev/null)
                wait
                echo "perf tool=iperf3 size=0 mbps=${mbps:-0}" | tee -a "$raw"
            else
                for o in read write; do for l in 256x32k 1x8m; do
                    timeout -k 5 "$TT" "$OUT/bench_xfer" tcp $o $l "$BATCHES" | tee -a "$raw"
                done; done
            fi
        done
    done
fi
/usr/bin/python3 - "$raw" "$MODE" "$JSON" "$ROUNDS" <<'PY'
import json, os, statistics, sys, time
raw, mode, path, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rows = {}
for line in open(raw):
    f = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
    if line.startswith("perf "):
        key = "%s %s" % (f["tool"], f["size"])
    elif line.startswith("xfer "):
        key = "omniconn %s %s %s" % (f["transport"], f["op"], f["layout"])
    else:
        continue
    v = float(f.get("mbps", 0))
    if v > 0:
        rows.setdefault(key, []).append(v)
med = {k: statistics.median(v) for k, v in rows.items()}
ratios = {}
def ratio(name, a, b):
    if a in med and b in med and med[b] > 0:
        ratios[name] = round(med[a] / med[b], 2)
if mode == "rdma":
    for op, tool in (("read", "ib_read_bw"), ("write", "ib_write_bw")):
        ratio("%s 256x32k / %s 32 KiB" % (op, tool), "omniconn rdma %s 256x32k" % op, "%s 32768" % tool)
        ratio("%s 1x8m / %s 8 MiB" % (op, tool), "omniconn rdma %s 1x8m" % op, "%s 8388608" % tool)
else:
    for op in ("read", "write"):
        for l in ("256x32k", "1x8m"):
            ratio("tcp %s %s / iperf3" % (op, l), "omniconn tcp %s %s" % (op, l), "iperf3 0")
doc = json.load(open(path)) if os.path.exists(path) else {}
doc[mode] = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "rounds": rounds, "load": os.getloadavg(),
             "unit": "MiB/s, median of the rounds", "median": med, "samples": rows, "ratios": ratios}
json.dump(doc, open(path, "w"), indent=1, sort_keys=True)
for k in sorted(med): print("%-40s %8.1f MiB/s  (%d rounds)" % (k, med[k], len(rows[k])))
for k in sorted(ratios): print("ratio %-40s %.2f" % (k, ratios[k]))
PY
