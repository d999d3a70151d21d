#!/usr/bin/env bash
# The two rails of the two-guest bed measured (not a test: figures to compare as ratios), in ONE
# boot of tests/rdma/bed.sh --hosts 2. Guest b receives, guest a writes to it.
#
#   tests/rdma/rails.sh [SIZE] [ITERATIONS]     perftest (ib_write_bw -s SIZE -n ITERATIONS, default
#       1048576 and 100): rail0 alone, rail1 alone, both at once (one ib_write_bw per rail), then
#       rail1 shaped to OMC_RAILS_SHAPE (tc tbf on host a, default 16mbit) alone and with rail0.
#       One line per run: "rails: <which> size=<bytes> mbps=<MB/s per rail...> total=<sum>".
#   tests/rdma/rails.sh bench [SIZE] [SECONDS]  omniconn bench in its two-host mode over RDMA
#       (default 4M and 10 s per run): perftest on rail0 and on both rails as the reference, then
#       1 rail, 2 rails (same size, same duration), and 2 rails with rail1 taken down on the
#       writer's host a third of the way into the throughput phase and up again at two thirds
#       (--flap, 1 s slices). Writes bench/results/rails.json (the runs, the bed named, ratios).
#       Side channel and bench control on the ctl link; payloads by RDMA WRITE on the rails.
#       OMC_RAILS_RUNS picks runs (default "perftest rails-1 rails-2 rails-2-flap rails-1-flap"); host a's
#       `omniconn doctor` RDMA lines (NIC ranking, rails) come first.
set -u
cd "$(dirname "$0")/../.."
MODE=perftest
[ "${1:-}" = bench ] && { MODE=bench; shift; }
if [ $MODE = bench ]; then SIZE=${1:-4M}; ITERS=${2:-10}; else SIZE=${1:-1048576}; ITERS=${2:-100}; fi

# ---- inside the bed: omniconn bench --------------------------------------------------------------
if [ "${1:-}" = "--in-bed-bench" ]; then
    SIZE=$2 SECS=$3 OUTD=$4 CLI=$5
    ulimit -l unlimited 2>/dev/null || true
    read -ra devs <<< "$OMC_RDMA_DEVICES"
    read -ra ips <<< "$OMC_RDMA_IPS"
    read -ra peers <<< "$OMC_RDMA_PEER_IPS"
    read -ra gids <<< "$OMC_RDMA_GID_INDEXES"
    [ "$OMC_BED_HOST" = a ] && echo "rdma bed: $OMC_BED, host a, rails: $OMC_BED_RAILS ($OMC_RDMA_DEVICES on $OMC_BED_NETDEVS), kernel $(uname -r), $(nproc) vCPU"
    run=0
    perf() {    # perf NAME RAIL...: ib_write_bw, one per rail at once (the reference on this boot)
        local name=$1 r tmp mb total=0 all=""
        shift
        run=$((run + 1))
        if [ "$OMC_BED_HOST" = b ]; then
            for r in "$@"; do ib_write_bw -d "${devs[$r]}" -x "${gids[$r]}" -p $((18515 + r)) -s 4194304 -n 40 -F > /dev/null 2>&1 & done
            sleep 1; touch "$OMC_BED_SYNC/ready.$run"; wait
            return
        fi
        for _ in $(seq 1 600); do [ -e "$OMC_BED_SYNC/ready.$run" ] && break; sleep 0.1; done
        tmp=$(mktemp -d)
        for r in "$@"; do ib_write_bw -d "${devs[$r]}" -x "${gids[$r]}" -p $((18515 + r)) -s 4194304 -n 40 -F "${peers[$r]}" > "$tmp/$r" 2>&1 & done
        wait
        for r in "$@"; do
            mb=$(awk '$1 == 4194304 && NF >= 5 { print $4 }' "$tmp/$r" | tail -n 1)
            all="$all ${devs[$r]}=${mb:-0}"
            total=$(awk -v a="$total" -v b="${mb:-0}" 'BEGIN { print a + b }')
        done
        rm -rf "$tmp"
        echo "rails: perftest-$name size=4194304 iterations=40 mbps:$all total=$total"
        echo "{\"name\": \"perftest-$name\", \"mbps_total\": $total}" > "$OUTD/perftest-$name.json"
    }
    bench() {   # bench NAME RAILS [EXTRA ARGS...]: producer on a (--serve), consumer on b
        local name=$1 rails=$2 devl ipl peerl
        shift 2
        run=$((run + 1))
        devl=$(IFS=,; echo "${devs[*]:0:$rails}")
        ipl=$(IFS=,; echo "${ips[*]:0:$rails}")
        if [ "$OMC_BED_HOST" = b ]; then
            for _ in $(seq 1 1200); do [ -e "$OMC_BED_SYNC/ready.$run" ] && break; sleep 0.1; done
            timeout 300 "$CLI" bench "$OMC_BED_PEER_CTL_IP" --port $((18620 + run)) --host "$OMC_BED_CTL_IP" \
                --devices "$devl" --rdma-addr "$ipl" --rails "$rails" 2>&1 | sed 's/^/  consumer: /'
            return
        fi
        echo "== omniconn bench: $name ($rails rail(s): $devl, $ipl)"
        timeout 300 "$CLI" bench --serve --transport rdma --port $((18620 + run)) --host "$OMC_BED_CTL_IP" --devices "$devl" \
            --rdma-addr "$ipl" --rails "$rails" --sizes "$SIZE" --duration "$SECS" --no-progress --json "$OUTD/$name.json" "$@" \
            > "$OUTD/$name.out" 2> "$OUTD/$name.err" &
        local pid=$!
        for _ in $(seq 1 600); do grep -q 'waiting for a consumer' "$OUTD/$name.err" 2>/dev/null && break; sleep 0.1; done
        touch "$OMC_BED_SYNC/ready.$run"
        wait $pid
        echo "   exit $?"
        cat "$OUTD/$name.out" "$OUTD/$name.err"
    }
    want() { case " ${OMC_RAILS_RUNS:-perftest rails-1 rails-2 rails-2-flap rails-1-flap} " in *" $1 "*) return 0 ;; esac; return 1; }
    # what omniconn doctor says about this host's devices: the ranking and the rails (host a)
    [ "$OMC_BED_HOST" = a ] && { echo "== omniconn doctor (host a)"; "$CLI" doctor 2>&1 | grep -E '^(OK|WARN|FAIL) +rdma'; }
    third=$(awk -v s="$SECS" 'BEGIN { printf "%.1f,%.1f", s / 3, 2 * s / 3 }')
    want perftest && perf rail0 0
    want perftest && [ "${#devs[@]}" -ge 2 ] && perf both 0 1
    want rails-1 && bench rails-1 1 --timeline 1
    if [ "${#devs[@]}" -ge 2 ]; then
        want rails-2 && bench rails-2 2 --timeline 1
        want rails-2-flap && bench rails-2-flap 2 --timeline 0.5 --flap "rail1,$third"
        want rails-1-flap && bench rails-1-flap 1 --timeline 0.5 --flap "rail1,$third"
    fi
    exit 0
fi

# ---- inside the bed: perftest -----------------------------------------------------------------------
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

if [ $MODE = perftest ]; then
    bash tests/rdma/bed.sh --hosts 2 -- "bash tests/rdma/rails.sh --in-bed $SIZE $ITERS"
    exit $?
fi

# ---- omniconn bench: build on the host, run in one boot, collect --------------------------------------
make -s BUILD="${BUILD:-build}" cli || exit 1
OUTD=${BUILD:-build}/rdma/rails-bench
rm -rf "$OUTD"; mkdir -p "$OUTD"
t0=$SECONDS
bash tests/rdma/bed.sh --hosts 2 -- "bash tests/rdma/rails.sh --in-bed-bench $SIZE $ITERS $(cd "$OUTD" && pwd -P) ${BUILD:-build}/omniconn" 2>&1 | tee "$OUTD/bed.log"
rc=${PIPESTATUS[0]}
echo "rails bench: the two-guest bed took $((SECONDS - t0)) s in all (exit $rc)"
# bench/results/rails.json: every run's figures and the ratios that matter (the bed is software:
# absolute figures say little, ratios on one boot say what the rails do)
# (a partial run, OMC_RAILS_RUNS, writes its own folder's rails.json instead)
dest=bench/results/rails.json
[ -n "${OMC_RAILS_RUNS:-}" ] && dest=$OUTD/rails.json
/usr/bin/python3 - "$OUTD" "$dest" "$SIZE" "$ITERS" <<'PY'
import glob, json, os, re, sys, time
outd, dest, size, secs = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
log = open(os.path.join(outd, "bed.log")).read()
m = re.search(r"^rdma bed: (qemu-rxe-2host), host a, rails: (.*)$", log, re.M)
runs, perftest = {}, {}
for f in sorted(glob.glob(os.path.join(outd, "*.json"))):
    name = os.path.basename(f)[:-5]
    try:
        d = json.load(open(f))
    except ValueError:
        continue
    if name.startswith("perftest-"):
        perftest[name[9:]] = d["mbps_total"]
    else:
        runs[name] = d
def mbps(name):
    r = runs.get(name)
    return r["results"][0]["gbps"] * 1000.0 if r and r.get("results") else None
def phases(name):
    r = runs.get(name)
    if not r or not r.get("timeline") or not r["timeline"].get("flap"):
        return None
    tl = r["timeline"]; fl = tl["flap"]; dt = tl["slice_s"]; out = {}
    for ph, lo, hi in (("before", 0, fl["down_at_s"]), ("during", fl["down_at_s"], fl["up_at_s"]), ("after", fl["up_at_s"], secs)):
        sl = [s for s in tl["slices"] if s["t_s"] >= lo - 1e-9 and s["t_s"] + dt <= hi + 1e-9]
        out[ph + "_mbps"] = round(sum(s["bytes"] for s in sl) / (len(sl) * dt) / 1e6, 3) if sl else None
        out[ph + "_slices"] = len(sl)
    b = out["before_mbps"]
    for ph in ("during", "after"):
        out[ph + "_vs_before"] = round(out[ph + "_mbps"] / b, 3) if b and out[ph + "_mbps"] is not None else None
    out["down_at_s"], out["up_at_s"], out["slice_s"] = fl["down_at_s"], fl["up_at_s"], dt
    return out
def ratio(a, b):
    return round(a / b, 3) if a is not None and b else None
res = {
    "tool": "omniconn bench --serve / omniconn bench HOST (two-host mode), --transport rdma; ib_write_bw for reference",
    "bed": "qemu-rxe-2host: two QEMU/TCG guests (tests/rdma/bed.sh --hosts 2), one vCPU each on a 2-core host shared with other work; "
           "Soft-RoCE rxe0 on rail0 and rxe1 on rail1, each rail a virtio-net link over QEMU UDP sockets; side channel on a third link"
           + (" (" + m.group(2) + ")" if m else ""),
    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "size": size, "duration_s": secs,
    "note": "Soft-RoCE under emulation is CPU-bound: both rails share each guest's one vCPU. Read the ratios, not the MB/s.",
    "runs": {k: {"mbps": mbps(k), "rdma": v.get("rdma"), "options": v.get("options"), "results": v.get("results"),
                 "timeline": v.get("timeline")} for k, v in runs.items()},
    "perftest_mbps": perftest,
    "ratios": {
        "two_rails_vs_one": ratio(mbps("rails-2"), mbps("rails-1")),
        "one_rail_vs_perftest_rail0": ratio(mbps("rails-1"), perftest.get("rail0")),
        "two_rails_vs_perftest_both": ratio(mbps("rails-2"), perftest.get("both")),
        "perftest_both_vs_rail0": ratio(perftest.get("both"), perftest.get("rail0")),
    },
    "flap_two_rails": phases("rails-2-flap"),
    "flap_one_rail_control": phases("rails-1-flap"),
}
json.dump(res, open(dest, "w"), indent=1)
print("rails bench: wrote", dest)
print(json.dumps({"ratios": res["ratios"], "flap_two_rails": res["flap_two_rails"], "flap_one_rail_control": res["flap_one_rail_control"],
                  "mbps": {k: mbps(k) for k in runs}, "perftest_mbps": perftest}, indent=1))
PY
