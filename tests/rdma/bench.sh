#!/usr/bin/env bash
# make bench-rdma: perftest's ib_write_bw, UCX's ucx_perftest and omniconn's RDMA data plane on
# the same device, in ONE run of the RDMA bed (tests/rdma/bed.sh), for 64 KiB, 1 MiB and 16 MiB;
# writes bench/results/rdma.json. Not a test: numbers are only compared with each other, as ratios.
#
#   ib_write_bw_mbps  ib_write_bw -s SIZE, TX depth 16 (MB/sec as perftest prints it: MiB/s)
#   ucx_put_bw_mbps   ucx_perftest -t put_bw -x rc_verbs -D zcopy -O 16: UCX's RDMA WRITE path
#                     (UCT level, zero-copy, 16 outstanding), over the same device and GID;
#                     the "overall" bandwidth of its Final line (MB/s = MiB/s). UCT puts at most
#                     8 MiB at once here, so 16 MiB is measured as back-to-back 8 MiB puts
#   omniconn_mbps     the receiver's get of a payload already put (one put, many readers),
#                     4 gets in flight from 4 threads over their own cached channels: side
#                     channel round trips, per-transfer protection (expose/revoke), the WRITE
#                     and DONE, all inside the measured time (bench/bench_rdma.c "connector")
#   engine_mbps       the engine's write path alone: WRITEs into one exposed destination, 4 in
#                     flight, as ib_write_bw writes into one buffer ("engine")
# Targets: omniconn_mbps >= 0.9 x ib_write_bw_mbps from 1 MiB up, >= 0.6 x at 64 KiB.
#
# Per-transfer phases (OMC_BENCH_PHASES=1, the default; sizes below 16 MiB): one transfer at a
# time, in the same rounds: a get (default protection), a get with POOL protection (no
# per-transfer registration), the engine's WRITE alone, ib_write_bw -t 1, ucx put_bw -O 1, and a
# 64-byte get (the control path with almost no bytes). Their differences say where a get's time
# goes; the JSON has them as milliseconds per transfer ("phases").
#
# UCX's UCP layer (tag_bw, ucp_put_bw: what applications use) is tried once per boot with
# UCX_TLS=rc_verbs,self and with rc_verbs,ud_verbs,self; what it printed goes to "ucx_ucp".
#
# The guest's 2 vCPUs are shared with whatever else the host runs, and throughput drifts by
# 2x within minutes when other guests run; so the runs alternate in short rounds,
# OMC_BENCH_ROUNDS times (default 5), and each figure is the median of its rounds (every
# sample, and the host's load average, are in the JSON too). A run that failed or printed 0 is
# left out.
# Every tool run is under a timeout (OMC_BENCH_TIMEOUT, 90 s): perftest pairs on rxe
# occasionally hang; such a run counts as failed and the round goes on.
# Knobs: OMC_BENCH_SIZES ("65536 1048576 16777216"), OMC_BENCH_DEPTH (4), OMC_BENCH_ROUNDS (5),
# OMC_BENCH_PHASES (1), OMC_BENCH_UCX (1; 0 leaves UCX out), OMC_BENCH_TIMEOUT (90), BUILD, bed.sh's.
# `bash tests/rdma/bench.sh --json-only` rewrites the JSON from the last run's raw figures.
set -u
cd "$(dirname "$0")/../.."
SIZES=${OMC_BENCH_SIZES:-65536 1048576 16777216}
DEPTH=${OMC_BENCH_DEPTH:-4}
ROUNDS=${OMC_BENCH_ROUNDS:-5}
PHASES=${OMC_BENCH_PHASES:-1}
UCX=${OMC_BENCH_UCX:-1}
UCX_PORT=13437
UCX_MAX_PUT=8388608        # UCT's largest zero-copy put over rc_verbs on rxe ("larger than max supported")
TOOL_TIMEOUT=${OMC_BENCH_TIMEOUT:-90}   # seconds for one run of one tool: a hung perftest pair must not eat the boot

# about 32-96 MiB per run: a few seconds each at Soft-RoCE-under-TCG speeds
iters() { case $1 in 65536) echo 500;; 1048576) echo 64;; *) echo $(( (96 << 20) / $1 > 4 ? (96 << 20) / $1 : 4 ));; esac; }
gets()  { case $1 in 65536) echo 300;; 1048576) echo 48;; *) echo $(( (64 << 20) / $1 > 4 ? (64 << 20) / $1 : 4 ));; esac; }
# one transfer at a time: about 1-2 s each
phase_n() { case $1 in 64) echo 100;; 65536) echo 100;; *) echo $(( (16 << 20) / $1 > 4 ? (16 << 20) / $1 : 4 ));; esac; }

if [ "${1:-}" = "--in-bed" ]; then
    out=$2 bin=$3
    ulimit -l unlimited 2>/dev/null || true
    : > "$out"
    echo "bed $OMC_BED $OMC_RDMA_DEVICE $(uname -r)" >> "$out"
    have_ucx=0
    if [ "$UCX" = 1 ] && command -v ucx_perftest > /dev/null; then
        have_ucx=1
        echo "ucx_version $(ucx_info -v 2>/dev/null | awk '/Version/ { print $3; exit }')" >> "$out"
    fi
    export UCX_IB_GID_INDEX=$OMC_RDMA_GID_INDEX UCX_NET_DEVICES=$OMC_RDMA_DEVICE:1 UCX_WARN_UNUSED_ENV_VARS=n

    ibw() {     # ibw TAG SIZE ITERS TXDEPTH: one ib_write_bw pair; prints "TAG size= iterations= mbps="
        local tmp avg spid
        tmp=$(mktemp -d)
        # the server waits on its TCP port, the client connects to the rxe address
        timeout -k 5 "$TOOL_TIMEOUT" ib_write_bw -d "$OMC_RDMA_DEVICE" -x "$OMC_RDMA_GID_INDEX" -s "$2" -n "$3" -t "$4" -F > "$tmp/server" 2>&1 &
        spid=$!
        sleep 1
        timeout -k 5 "$TOOL_TIMEOUT" ib_write_bw -d "$OMC_RDMA_DEVICE" -x "$OMC_RDMA_GID_INDEX" -s "$2" -n "$3" -t "$4" -F "$OMC_RDMA_IP" > "$tmp/client" 2>&1 \
            || echo "ib_write_bw: exit $? (124: timed out after $TOOL_TIMEOUT s)" >> "$tmp/client"
        sleep 1; kill "$spid" 2> /dev/null; wait "$spid" 2> /dev/null
        # the result row: "#bytes #iterations BW-peak BW-average MsgRate"
        avg=$(awk -v s="$2" '$1 == s && NF >= 5 { print $4 }' "$tmp/client" | tail -n 1)
        echo "$1 size=$2 iterations=$3 mbps=${avg:-0}" | tee -a "$out"
        [ -n "$avg" ] || sed 's/^/    ib_write_bw: /' "$tmp/client"
        rm -rf "$tmp"
    }
    ucxput() {  # ucxput TAG SIZE ITERS OUTSTANDING: UCT put_bw, zero-copy, over rc_verbs
        local tmp fin spid msg=$2 n=$3
        [ $have_ucx = 1 ] || return 0
        if [ "$msg" -gt $UCX_MAX_PUT ]; then   # larger sizes as back-to-back puts of the largest UCT takes
            n=$(( n * (msg / UCX_MAX_PUT) )); msg=$UCX_MAX_PUT
        fi
        tmp=$(mktemp -d)
        UCX_TLS=rc_verbs timeout -k 5 "$TOOL_TIMEOUT" ucx_perftest -p $UCX_PORT > "$tmp/server" 2>&1 &
        spid=$!
        sleep 1
        UCX_TLS=rc_verbs timeout -k 5 "$TOOL_TIMEOUT" ucx_perftest "$OMC_RDMA_IP" -p $UCX_PORT -t put_bw -x rc_verbs -d "$OMC_RDMA_DEVICE:1" \
            -D zcopy -s "$msg" -n "$n" -w $(( n / 10 + 1 )) -O "$(( $4 < n ? $4 : n ))" > "$tmp/client" 2>&1 \
            || echo "ucx_perftest: exit $? (124: timed out after $TOOL_TIMEOUT s) ERROR" >> "$tmp/client"
        sleep 1; kill "$spid" 2> /dev/null; wait "$spid" 2> /dev/null
        # "Final: iterations lat-p50 lat-avg lat-overall bw-avg bw-overall rate-avg rate-overall" (us, MB/s = MiB/s)
        fin=$(awk '$1 == "Final:" { print "mbps=" $7 " lat_us_p50=" $3 }' "$tmp/client" | tail -n 1)
        echo "$1 size=$2 iterations=$3 put_size=$msg ${fin:-mbps=0}" | tee -a "$out"
        [ -n "$fin" ] || grep -E 'ERROR|Fatal' "$tmp/client" | head -n 3 | sed 's/^/    ucx_perftest: /'
        rm -rf "$tmp"
    }
    phase() {   # phase TAG -- CMD...: bench_rdma's line renamed "phase TAG ..."
        local tag=$1; shift 2
        timeout -k 5 "$TOOL_TIMEOUT" "$@" | sed "s/^bench [a-z]*/phase $tag/" | tee -a "$out"
    }
    ucp_try() { # ucp_try TLS TEST: what UCX's UCP layer does on this device (once per boot)
        local tmp rc spid
        tmp=$(mktemp -d)
        UCX_TLS=$1 UCX_UD_TIMEOUT=5s timeout -k 5 60 ucx_perftest -p $UCX_PORT > "$tmp/server" 2>&1 &
        spid=$!
        sleep 1
        UCX_TLS=$1 UCX_UD_TIMEOUT=5s timeout -k 5 60 ucx_perftest "$OMC_RDMA_IP" -p $UCX_PORT -t "$2" -s 65536 -n 20 > "$tmp/client" 2>&1
        rc=$?
        kill "$spid" 2> /dev/null; wait "$spid" 2> /dev/null
        echo "ucp tls=$1 test=$2 exit=$rc $(awk '$1 == "Final:" { print "mbps=" $7 }' "$tmp/client")" | tee -a "$out"
        grep -E 'ERROR|Fatal' "$tmp/client" | head -n 3 | sed -E 's/^\[[^]]*\] *\[[^]]*\] *//; s/^/ucp_msg /' | tee -a "$out"
        rm -rf "$tmp"
    }

    if [ $have_ucx = 1 ]; then
        ucp_try rc_verbs,self tag_bw
        ucp_try rc_verbs,ud_verbs,self tag_bw
    fi
    for size in $SIZES; do
      for round in $(seq 1 "$ROUNDS"); do
        n=$(iters "$size")
        t=$(( n < 16 ? n : 16 ))            # perftest wants TX depth <= iterations
        # the starting tool rotates with the round, so all see the same drift
        for k in $(seq 0 3); do
          case $(( (round + k) % 4 )) in
            0) ibw ib_write_bw "$size" "$n" "$t";;
            1) ucxput ucx_put_bw "$size" "$n" "$t";;
            2) timeout -k 5 "$TOOL_TIMEOUT" "$bin" connector "$size" "$(gets "$size")" "$DEPTH" | tee -a "$out";;
            3) timeout -k 5 "$TOOL_TIMEOUT" "$bin" engine "$size" "$(gets "$size")" "$DEPTH" | tee -a "$out";;
          esac
        done
        if [ "$PHASES" = 1 ] && [ "$size" -lt 16777216 ]; then
            p=$(phase_n "$size")
            phase get -- "$bin" connector "$size" "$p" 1
            OMC_BENCH_PROTECTION=pool phase get_pool -- "$bin" connector "$size" "$p" 1
            phase write -- "$bin" engine "$size" "$p" 1
            ibw phase_ib_write_bw "$size" "$p" 1
            ucxput phase_ucx_put_bw "$size" "$p" 1
            phase "get64_$size" -- "$bin" connector 64 "$(phase_n 64)" 1      # in this size's block of the round
        fi
      done
    done
    exit 0
fi

BUILD=${BUILD:-build}
mkdir -p "$BUILD/rdma" bench/results
raw=$BUILD/rdma/bench-raw.txt
if [ "${1:-}" = "--json-only" ]; then       # rewrite the JSON from the last run's raw figures
    [ -s "$raw" ] || { echo "bench-rdma: no $raw" >&2; exit 1; }
else
    make -s "$BUILD/bench_rdma" || exit 1
    rm -f "$raw"
    load0=$(cut -d' ' -f1-3 /proc/loadavg)
    echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- '*.h' bench tests/rdma 2>/dev/null || echo '+local-changes')" > "$raw.head"
    echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)" >> "$raw.head"
    t0=$(date +%s)
    bash tests/rdma/bed.sh -- "bash tests/rdma/bench.sh --in-bed $(printf '%q' "$raw") $(printf '%q' "$BUILD/bench_rdma")"
    rc=$?
    if [ -s "$raw" ]; then
        cat "$raw.head" >> "$raw"
        echo "elapsed $(( $(date +%s) - t0 ))" >> "$raw"
        echo "hostload $load0 / $(cut -d' ' -f1-3 /proc/loadavg) (nproc $(nproc))" >> "$raw"
    fi
    rm -f "$raw.head"
    if [ $rc -ne 0 ] || [ ! -s "$raw" ]; then
        echo "bench-rdma: the bed run failed (exit $rc); bench/results/rdma.json not written" >&2
        exit 1
    fi
fi

# ---- bench/results/rdma.json ------------------------------------------------------------------------
OMC_SIZES="$SIZES" OMC_DEPTH="$DEPTH" OMC_ROUNDS="$ROUNDS" /usr/bin/python3 - "$raw" bench/results/rdma.json <<'EOF'
import json, statistics, sys, os
raw, out = sys.argv[1], sys.argv[2]
MiB = 1 << 20
sizes = [int(s) for s in os.environ["OMC_SIZES"].split()]
depth, rounds = int(os.environ["OMC_DEPTH"]), int(os.environ["OMC_ROUNDS"])
head, samples, ucp, ucp_last = {}, {}, [], None
for line in open(raw):
    w = line.split()
    if not w:
        continue
    if w[0] in ("bed", "commit", "date", "elapsed", "hostload", "ucx_version"):
        head[w[0]] = " ".join(w[1:])
        continue
    if w[0] == "ucp":
        ucp_last = dict(x.split("=", 1) for x in w[1:] if "=" in x)
        ucp_last["messages"] = []
        ucp.append(ucp_last)
        continue
    if w[0] == "ucp_msg" and ucp_last is not None:
        ucp_last["messages"].append(" ".join(w[1:]))
        continue
    kind = " ".join(w[:2]) if w[0] in ("bench", "phase") else w[0]
    kv = dict(x.split("=", 1) for x in w if "=" in x)
    try:
        size, mbps = int(kv["size"]), float(kv["mbps"])
        if "seconds" in kv and "count" in kv and float(kv["seconds"]) > 0:     # bench_rdma: exact, even where mbps prints as 0.00
            mbps = size * int(kv["count"]) / float(kv["seconds"]) / MiB
    except (KeyError, ValueError):
        continue
    if mbps <= 0:
        continue                        # a failed run
    samples.setdefault((kind, size), []).append(mbps)
    if "protection" in kv:
        head.setdefault("protection", kv["protection"])

def med(kind, size):
    v = samples.get((kind, size))
    return round(statistics.median(v), 2) if v else None

def ms(mbps, size):                     # milliseconds per transfer from MiB/s
    return round(size / (mbps * MiB) * 1000, 3) if mbps else None

rows = []
for s in sizes:
    ib, om, en, ux = med("ib_write_bw", s), med("bench connector", s), med("bench engine", s), med("ucx_put_bw", s)
    ratio = round(om / ib, 3) if om and ib else None
    limit = 0.9 if s >= MiB else 0.6 if s >= 64 * 1024 else None
    rows.append({"size_bytes": s, "omniconn_mbps": om, "ib_write_bw_mbps": ib, "ucx_put_bw_mbps": ux, "engine_mbps": en,
                 "ratio": ratio, "ratio_vs_ucx_put_bw": round(om / ux, 3) if om and ux else None,
                 "target_ratio": limit, "met": None if limit is None or ratio is None else ratio >= limit,
                 "protection": head.get("protection", "?"), "bed": head.get("bed", "?").split()[0],
                 "omniconn_samples": samples.get(("bench connector", s), []), "ib_write_bw_samples": samples.get(("ib_write_bw", s), []),
                 "ucx_put_bw_samples": samples.get(("ucx_put_bw", s), []), "engine_samples": samples.get(("bench engine", s), [])})
phases = []
for s in sizes:
    p = {"size_bytes": s}
    for key, kind, sz in [("get_ms", "phase get", s), ("get_pool_protection_ms", "phase get_pool", s), ("write_ms", "phase write", s),
                          ("ib_write_bw_ms", "phase_ib_write_bw", s), ("ucx_put_bw_ms", "phase_ucx_put_bw", s), ("get_64B_ms", "phase get64_%d" % s, 64)]:
        v = samples.get((kind, sz))
        if v:
            p[key] = ms(statistics.median(v), sz)
            p[key.replace("_ms", "_samples_ms")] = [ms(x, sz) for x in v]
    if "get_ms" in p:
        phases.append(p)
bed = head.get("bed", "? ? ?").split()
res = {
    "benchmark": "omniconn RDMA data plane vs perftest ib_write_bw and UCX ucx_perftest put_bw, same device, same boot",
    "bed": bed[0], "device": bed[1] if len(bed) > 1 else "?", "kernel": bed[2] if len(bed) > 2 else "?",
    "date": head.get("date", "?"), "commit": head.get("commit", "?"), "elapsed_s": int(head.get("elapsed", "0") or 0),
    "units": "MiB/s (perftest's and ucx_perftest's MB/sec); phases in milliseconds per transfer",
    "target": "omniconn_mbps >= 0.9 x ib_write_bw_mbps from 1 MiB, >= 0.6 x at 64 KiB",
    "depth": depth, "rounds": rounds, "host_load": head.get("hostload", "?"), "ucx_version": head.get("ucx_version"),
    "note": ("omniconn_mbps: the receiver's omc_conn_get of a payload already put (one put with many readers), %d gets in flight from %d "
             "threads, each over its own cached channel, through omc_rdma_connector_create on both ends; every get pays two side-channel "
             "round trips (PULL, DONE), the per-transfer protection of its destination (protection field) and the WRITE. engine_mbps: the "
             "engine's write path alone (omc_rdma_write_start into one exposed destination, %d in flight), as ib_write_bw writes into one "
             "buffer. ucx_put_bw_mbps: ucx_perftest -t put_bw -x rc_verbs -D zcopy -O 16 (UCT level: UCX's RDMA WRITE, zero-copy), the "
             "overall bandwidth of its Final line. Each figure is the median of %d alternating rounds (the *_samples fields have them all): "
             "the guest's 2 vCPUs share the host with other work. Soft-RoCE under QEMU/TCG is CPU-bound software: compare ratios only. "
             "phases: one transfer at a time, ms per transfer (medians): get = a connector get; get_pool_protection = the same with POOL "
             "protection (no per-transfer registration); write = the engine's WRITE alone; ib_write_bw / ucx_put_bw at TX depth 1; get_64B "
             "= a 64-byte get (the control path: side-channel round trips and thread hand-offs with almost no bytes)." % (depth, depth, depth, rounds)),
    "rows": rows,
    "phases": phases,
    "ucx_ucp": ucp,
}
with open(out, "w") as f:
    json.dump(res, f, indent=1)
    f.write("\n")
for r in rows:
    print("bench-rdma: %7d B  omniconn %s  ib_write_bw %s  ucx put_bw %s  engine %s  ratio %s (MiB/s)" % (
        r["size_bytes"], r["omniconn_mbps"], r["ib_write_bw_mbps"], r["ucx_put_bw_mbps"], r["engine_mbps"], r["ratio"]))
for p in phases:
    print("bench-rdma: phases %d B: %s" % (p["size_bytes"], ", ".join("%s %s" % (k, v) for k, v in p.items() if k.endswith("_ms"))))
for u in ucp:
    print("bench-rdma: UCP %s %s: exit %s %s" % (u.get("tls"), u.get("test"), u.get("exit"), "; ".join(u["messages"][:2])))
print("bench-rdma: wrote " + out)
EOF
