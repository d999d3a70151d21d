#!/usr/bin/python3
"""peers.py - omniconn beside UCX's ucx_perftest, iperf3 and memcpy, in one run on this machine.

usage: peers.py [--build DIR] [--rounds N] [--out bench/results/peers.json] [--doc docs/performance.md]
                [--rdma bench/results/rdma.json] [--alloc bench/results/alloc.json]
       (make bench-peers runs it with the defaults)

Each round runs every tool once, in turn (the starting tool rotates from round to round), so all of
them see the same load on a shared machine; a figure is the median of the rounds. Loopback only:
UCX server and client on 127.0.0.1 (a fresh port per test), iperf3 single stream on 127.0.0.1,
omniconn's two-process benchmarks (bench_shm, bench_tcp; one round each per round here) and the
window rows: `omniconn bench --inflight 16` over SHM and TCP at 4 KiB to 16 MiB (the CLI: make cli),
each beside its one-at-a-time row and against the same UCX tag_bw figure, and the same command
with --inflight 1 (the window's own gain); over TCP also `--inflight 16 --batch 16` (the window's
gets in batches, one omc_conn_get_batch on one thread and one connection). Five `omniconn bench`
runs of about 7 s a round.

Units: GB/s = 1e9 B/s. ucx_perftest prints "MB/s" meaning 2^20 B/s; it is converted. Its tag_lat
"overhead" is one way (half a round trip). Latency ratios are peer time / omniconn time, so every
ratio reads the same way: above 1, omniconn is ahead.

The small handoff is measured twice: as the connector waits by default with nothing pinned, against
UCX's tag_lat with nothing pinned; and with the two processes on two CPUs and the consumer spinning
(bench_shm's handoff_spin, when the build has it), against tag_lat with server and client pinned the
same way (taskset). The RDMA rows come from bench/results/rdma.json (make bench-rdma: the test bed,
with the date and commit it was measured on); the allocator rows from bench_alloc, run once after the
rounds (it writes bench/results/alloc.json, as make bench-alloc does; if it is not built, the last
alloc.json is used and the table says so).

Writes every sample, the medians, the ratios against the targets, the host's load average around
every sample and the package versions to the JSON file, and into the doc the side-by-side table
(between <!-- peers-table:begin --> and <!-- peers-table:end -->) and the summary, one line per
target with met / missed and by how much (between <!-- peers-summary:begin --> and
<!-- peers-summary:end -->); both are printed as well. Nothing in them is typed by hand.
Measured: 5.5 minutes at a load average of 6 on 2 CPUs (bench_alloc about 50 s of it); on an idle
host the rounds took about a minute.
Needs ucx-utils and iperf3 (scripts/install-deps.sh installs them)."""
import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time

KiB, MiB = 1024, 1024 * 1024
SIZES = [4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 186 * MiB]
SHM_SIZES = [64] + SIZES          # 64 B: the small handoff
# The window rows: `omniconn bench --inflight WINDOW`, the producer keeping at most WINDOW transfers put
# and not yet released by the consumer. Over SHM the consumer's gets run one after the other on one
# thread (a same-host get waits for nothing); over TCP the consumer keeps up to WINDOW gets in flight,
# on WINDOW threads, each with its own channel and data connection; with --batch WINDOW (the batch
# rows) it takes the metadata already arrived, up to WINDOW, and fetches it with one
# omc_conn_get_batch on one thread and one connection. 16: on an idle host (bench/results/scaling.json) SHM
# from 64 KiB is within 10 % of 64 in flight at 16 and TCP is flat from 1 (its gets are not
# pipelined), while 16 x 16 MiB still fits a 257 MiB pool per side; ucx_perftest's tag_bw sets no
# limit of its own (-O 0) and flow-controls active messages at 127.
WINDOW = 16
WINDOW_SIZES = [4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB]
WINDOW_DURATION_S = 1.0
UCX_SHM_TLS = "posix,cma,self"
UCX_TCP_TLS = "tcp,self"


def load():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def log(msg):
    print("bench-peers: " + msg, file=sys.stderr, flush=True)


def run(cmd, env=None, timeout=180):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, text=True)
    return p.returncode, p.stdout


def free_port():
    return random.randint(20000, 60000)


# ---- ucx_perftest --------------------------------------------------------------------------------

def ucx_iters(test, size):
    if test == "tag_lat":
        return 20000 if size <= 64 * KiB else 200
    return max(8, min(100000, (1024 * MiB) // size))     # about 1 GiB per figure


def ucx_once(tls, test, size, cpus=None):
    """One ucx_perftest measurement: {"gbps", "lat_us_p50", "lat_us_avg"} or None. cpus = (server CPU, client CPU)
    pins the two processes with taskset (not ucx_perftest's -c: the client sends its parameters to the server)."""
    srv_pin = ["taskset", "-c", str(cpus[0])] if cpus else []
    cli_pin = ["taskset", "-c", str(cpus[1])] if cpus else []
    for attempt in range(3):
        port = free_port()
        env = {"UCX_TLS": tls, "UCX_WARN_UNUSED_ENV_VARS": "n"}
        e = dict(os.environ)
        e.update(env)
        srv = subprocess.Popen(srv_pin + ["ucx_perftest", "-p", str(port)], env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.4)
        try:
            rc, out = run(cli_pin + ["ucx_perftest", "127.0.0.1", "-p", str(port), "-t", test, "-s", str(size), "-n", str(ucx_iters(test, size))],
                          env=env, timeout=120)
        except subprocess.TimeoutExpired:
            rc, out = -1, ""
        try:
            srv.wait(timeout=10)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()
        for line in out.splitlines():
            if line.startswith("Final:"):
                f = line.split()[1:]
                # iterations, overhead p50 / average / overall (us), bandwidth average / overall (MiB/s), msg rate average / overall
                return {"lat_us_p50": float(f[1]), "lat_us_avg": float(f[2]), "gbps": float(f[5]) * MiB / 1e9, "msg_rate": float(f[7])}
        time.sleep(0.5)
    log("ucx_perftest %s %s %d gave no result: %s" % (tls, test, size, out.strip()[-300:]))
    return None


# ---- iperf3 --------------------------------------------------------------------------------------

def iperf3_once(seconds=3):
    port = free_port()
    srv = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port), "-B", "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.4)
    try:
        rc, out = run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-P", "1", "-J"], timeout=seconds + 30)
    finally:
        try:
            srv.wait(timeout=10)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()
    try:
        j = json.loads(out)
        return {"gbps": j["end"]["sum_received"]["bits_per_second"] / 8 / 1e9}
    except (ValueError, KeyError):
        log("iperf3 gave no result: " + out.strip()[-300:])
        return None


# ---- omniconn's own benchmarks -------------------------------------------------------------------

def omc_shm_once(build):
    path = "/tmp/omc-peers-shm-%d.json" % os.getpid()
    rc, out = run([os.path.join(build, "bench_shm"), path], timeout=300,
                  env={"BENCH_ROUNDS": "1", "BENCH_SHM_NO_BASELINE": "1", "BENCH_SHM_SIZES": ",".join(map(str, SHM_SIZES))})
    if rc != 0:
        log("bench_shm failed: " + out[-300:])
        return None
    with open(path) as f:
        j = json.load(f)
    os.unlink(path)
    return {str(r["size_bytes"]): r for r in j["rows"]}, j["omniconn_version"], j.get("settings")


def omc_tcp_once(build):
    path = "/tmp/omc-peers-tcp-%d.json" % os.getpid()
    rc, out = run([os.path.join(build, "bench_tcp"), path], timeout=300,
                  env={"BENCH_ROUNDS": "1", "BENCH_TCP_SIZES": ",".join(map(str, SIZES))})
    if rc != 0:
        log("bench_tcp failed: " + out[-300:])
        return None
    with open(path) as f:
        j = json.load(f)
    os.unlink(path)
    return {str(r["size_bytes"]): r for r in j["rows"] if "case" not in r}


def omc_window_once(build, transport, inflight, batch=None):
    """One `omniconn bench --inflight N [--batch B]` run over the window sizes: ({size: row}, the command) or None.
    The pool holds WINDOW of the largest payloads, so the pool never narrows the window."""
    path = "/tmp/omc-peers-window-%s-%d.json" % (transport, os.getpid())
    pool = WINDOW * max(WINDOW_SIZES) + MiB
    cmd = [os.path.join(build, "omniconn"), "bench", "--transport", transport, "--sizes", ",".join(str(s) for s in WINDOW_SIZES),
           "--inflight", str(inflight)] + (["--batch", str(batch)] if batch else []) + [
           "--pool", str(pool), "--duration", str(WINDOW_DURATION_S), "--no-progress", "--json", path]
    if not os.path.exists(cmd[0]):
        log("%s is not built (make cli): no window rows" % cmd[0])
        return None
    rc, out = run(cmd, timeout=300)
    if rc != 0 or not os.path.exists(path):
        log("omniconn bench --transport %s --inflight %d%s failed: %s" % (transport, inflight, " --batch %d" % batch if batch else "", out[-300:]))
        return None
    with open(path) as f:
        j = json.load(f)
    os.unlink(path)
    return {str(r["size"]): r for r in j["results"]}, " ".join(["omniconn"] + cmd[1:-2] + ["--json", "F"])


# ---- the run -------------------------------------------------------------------------------------

def versions():
    v = {}
    for pkg in ["ucx-utils", "libucx0", "iperf3", "libzmq5", "gcc", "linux-image-amd64"]:
        try:
            out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
            if out:
                v[pkg] = out
        except OSError:
            pass
    v["kernel"] = os.uname().release
    return v


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def git_commit():
    try:
        c = subprocess.run(["git", "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "*.h", "bench"], stderr=subprocess.DEVNULL).returncode != 0
        return (c or "unknown") + ("+local-changes" if dirty else "")
    except OSError:
        return "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("PEERS_ROUNDS", "3")))
    ap.add_argument("--out", default="bench/results/peers.json")
    ap.add_argument("--doc", default="docs/performance.md")
    ap.add_argument("--rdma", default="bench/results/rdma.json", help="the RDMA figures as last measured (make bench-rdma)")
    ap.add_argument("--alloc", default="bench/results/alloc.json",
                    help="the allocator figures; rewritten by this run when BUILD/bench_alloc exists (as make bench-alloc does)")
    ap.add_argument("--tables-only", action="store_true",
                    help="run nothing: rebuild the doc's tables from the last peers.json, rdma.json and alloc.json (after make bench-rdma)")
    a = ap.parse_args()
    a.rounds = max(1, min(5, a.rounds))
    if a.tables_only:
        return tables_only(a)
    for tool in ["ucx_perftest", "iperf3"]:
        if not shutil.which(tool):
            sys.exit("bench-peers: %s is missing: run scripts/install-deps.sh (Debian packages ucx-utils, iperf3)" % tool)
    samples = {}          # case name -> list of {"value", "load"}
    info = {"omniconn_version": "?", "shm_settings": None, "window_command": {}}
    pin = (os.cpu_count() or 1) >= 2 and shutil.which("taskset") is not None

    def add(case, value, ld):
        if value is not None:
            samples.setdefault(case, []).append({"value": round(value, 4), "load": ld})

    def ucx_tools():
        for tls, tname in [(UCX_SHM_TLS, "shm"), (UCX_TCP_TLS, "tcp")]:
            for s in SIZES:
                ld = load()
                r = ucx_once(tls, "tag_bw", s)
                add("ucx_%s_tag_bw_gbps/%d" % (tname, s), r and r["gbps"], ld)
            lat_size = 64 if tname == "shm" else 4 * KiB
            ld = load()
            r = ucx_once(tls, "tag_lat", lat_size)
            add("ucx_%s_tag_lat_us_one_way/%d" % (tname, lat_size), r and r["lat_us_p50"], ld)
            if tname == "shm" and pin:          # as bench_shm's spinning handoff: two processes on two CPUs
                ld = load()
                r = ucx_once(tls, "tag_lat", lat_size, cpus=(0, 1))
                add("ucx_shm_tag_lat_pinned_us_one_way/%d" % lat_size, r and r["lat_us_p50"], ld)

    def iperf():
        ld = load()
        r = iperf3_once()
        add("iperf3_single_stream_gbps", r and r["gbps"], ld)

    def omc_shm():
        ld = load()
        r = omc_shm_once(a.build)
        if not r:
            return
        rows, info["omniconn_version"], info["shm_settings"] = r
        for s in SHM_SIZES:
            row = rows.get(str(s))
            if not row:
                continue
            if s >= 4 * KiB:
                add("omniconn_shm_gbps/%d" % s, row["omniconn_gbps"], ld)
                add("memcpy_warm_gbps/%d" % s, row["memcpy_gbps"], ld)
                add("memcpy_pool_gbps/%d" % s, row.get("memcpy_pool_gbps"), ld)
            add("omniconn_shm_handoff_us_p50/%d" % s, row["handoff_us_p50"], ld)
            add("omniconn_shm_handoff_us_p99/%d" % s, row.get("handoff_us_p99"), ld)
            # pinned to two CPUs, the consumer spinning (bench_shm builds that have it; older ones leave it out)
            add("omniconn_shm_handoff_spin_us_p50/%d" % s, row.get("handoff_spin_us_p50"), ld)
            add("omniconn_shm_handoff_spin_us_p99/%d" % s, row.get("handoff_spin_us_p99"), ld)

    def omc_tcp():
        ld = load()
        rows = omc_tcp_once(a.build)
        if not rows:
            return
        for s in SIZES:
            row = rows.get(str(s))
            if row:
                add("omniconn_tcp_gbps/%d" % s, row["omniconn_gbps"], ld)
                add("omniconn_tcp_metaless_gbps/%d" % s, row.get("omniconn_metaless_gbps"), ld)
                add("raw_tcp_gbps/%d" % s, row["raw_tcp_gbps"], ld)
                add("omniconn_tcp_get_us_p50/%d" % s, row["omniconn_get_us_p50"], ld)
                # the same get with the payload not inline, and with the PULL on the side channel
                add("omniconn_tcp_noinline_get_us_p50/%d" % s, row.get("omniconn_noinline_get_us_p50"), ld)
                add("omniconn_tcp_side_channel_get_us_p50/%d" % s, row.get("omniconn_side_channel_get_us_p50"), ld)

    def omc_window():
        # the window, and the same benchmark one transfer at a time: what the window itself gains;
        # over TCP also the window's gets in batches on one connection
        for t, n, b in [("shm", WINDOW, None), ("shm", 1, None), ("tcp", WINDOW, None), ("tcp", WINDOW, WINDOW), ("tcp", 1, None)]:
            ld = load()
            r = omc_window_once(a.build, t, n, b)
            if not r:
                continue
            case = "%s_window%d%s" % (t, n, "_batch%d" % b if b else "")
            rows, info["window_command"][case.replace("_window", "/", 1)] = r
            for s in WINDOW_SIZES:
                row = rows.get(str(s))
                if row:
                    add("omniconn_%s_gbps/%d" % (case, s), row["gbps"], ld)
                    add("omniconn_%s_msg_rate/%d" % (case, s), row["msg_rate"], ld)
                    if b and row.get("batches"):       # how full the batches were (the consumer's counts)
                        add("omniconn_%s_gets_per_batch/%d" % (case, s), row["batched_gets"] / row["batches"], ld)

    tools = [("ucx_perftest", ucx_tools), ("iperf3", iperf), ("omniconn shm", omc_shm), ("omniconn tcp", omc_tcp),
             ("omniconn window", omc_window)]
    load0, t0 = load(), time.time()
    for rnd in range(a.rounds):
        order = tools[rnd % len(tools):] + tools[:rnd % len(tools)]
        for name, fn in order:
            log("round %d/%d: %s (load %.2f)" % (rnd + 1, a.rounds, name, load()))
            fn()
    alloc = alloc_run(a.build, a.alloc)
    load1, elapsed = load(), time.time() - t0

    med = {k: statistics.median(x["value"] for x in v) for k, v in samples.items()}
    rows = table_rows(med)
    rdma = rdma_rows(a.rdma, rows)
    alloc_rows(alloc, rows)

    result = {
        "benchmark": "peers",
        "omniconn_version": info["omniconn_version"],
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "load_average_start": load0, "load_average_end": load1,
                    "load_average_max_sample": max([x["load"] for v in samples.values() for x in v] or [load0]),
                    "note": "shared with other jobs; loopback only; not pinned unless a row says so"},
        "packages": versions(),
        "rounds": a.rounds,
        "elapsed_s": round(elapsed, 1),
        "bench_shm_settings": info["shm_settings"],
        "window": {"inflight": WINDOW, "sizes": WINDOW_SIZES, "commands": info["window_command"],
                   "same_method_one_at_a_time": "the same command with --inflight 1 (samples omniconn_*_window1_*): the "
                                                "window's own gain, without the difference in method from bench_shm / bench_tcp",
                   "batch": WINDOW,
                   "meaning": "omniconn bench --inflight: the producer keeps at most this many transfers put and not yet released by the "
                              "consumer. SHM: the consumer's gets run one after the other on one thread. TCP: up to this many gets in "
                              "flight on as many consumer threads, each with its own channel and data connection; with --batch "
                              "(samples omniconn_tcp_window*_batch*): the metadata already arrived, up to the batch, fetched with one "
                              "omc_conn_get_batch on one thread and one connection (gets_per_batch: how full the batches were). "
                              "Producer: omc_conn_alloc + one memcpy + zero-copy put; consumer: omc_conn_get with "
                              "metadata, stamp check, release, a one-byte ack per transfer over a pipe (messages and acks written "
                              "half a window at a time). GB/s = bytes / (first put .. last get)."},
        "method": ("Each round runs every tool once in turn, the starting tool rotating per round; figures are medians over the rounds. "
                   "ucx_perftest: server and client on 127.0.0.1, UCX_TLS=%s (shm) or %s (tcp), tag_bw at each size (about 1 GiB per figure), "
                   "tag_lat p50 overhead (one way; 64 B over shm, 4 KiB over tcp; over shm once more with server and client pinned to CPUs 0 "
                   "and 1 by taskset); its MB/s are 2^20 B/s, converted. iperf3: one stream, 3 s, "
                   "127.0.0.1. omniconn: bench_shm (producer puts, consumer takes each with a metadata-less get and releases it; handoff = "
                   "ping-pong put -> get -> release, p50, with the connector's default waiting and no pinning; handoff_spin = the same with "
                   "the two processes pinned to two CPUs and the consumer spinning, when bench_shm has it) and bench_tcp (one get with "
                   "metadata per iteration, size / median time; get_us_p50 = "
                   "median time of one 4 KiB get). Window rows: omniconn bench --inflight %d (see \"window\"), one run per transport per round, "
                   "the same with --inflight 1 (the window rows' benchmark one at a time), and over TCP the same with --batch %d. memcpy, warm: bench_shm's baseline (source and destination faulted in and reused, so "
                   "sizes that fit the cache run from it; above the last-level cache it is memory-bound). memcpy, destination cycling: "
                   "the same source copied into destinations cycling through a faulted-in region the size of the stream's pool (colder "
                   "than the transfer, whose allocator hands back the range just released, while that fits the cache). RDMA rows: "
                   "bench/results/rdma.json as last measured on the test bed (make bench-rdma). Allocator rows: bench_alloc, run once "
                   "after the rounds (its own 3 interleaved rounds). GB/s = 1e9 B/s. Ratios: above 1 means "
                   "omniconn is ahead (throughput: omniconn / peer; latency: peer / omniconn)." % (UCX_SHM_TLS, UCX_TCP_TLS, WINDOW, WINDOW)),
        "medians": {k: round(v, 4) for k, v in sorted(med.items())},
        "samples": samples,
        "table": rows,
        "rdma_last_measured": rdma,
        "alloc": alloc and {k: alloc.get(k) for k in ("source", "date", "commit", "machine", "targets", "fresh")},
    }
    write_out(a, result, rows, rdma, alloc)
    log("wrote %s (%.0f s, load %.2f -> %.2f)" % (a.out, elapsed, load0, load1))


def tables_only(a):
    with open(a.out) as f:
        result = json.load(f)
    rows = table_rows(result["medians"])
    rdma = rdma_rows(a.rdma, rows)
    alloc = None
    try:
        with open(a.alloc) as f:
            alloc = json.load(f)
        alloc["source"], alloc["fresh"] = a.alloc, bool((result.get("alloc") or {}).get("fresh")) and \
            alloc.get("date") == (result.get("alloc") or {}).get("date")
        alloc.setdefault("date", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(os.path.getmtime(a.alloc))))
    except (OSError, ValueError):
        pass
    alloc_rows(alloc, rows)
    result["table"], result["rdma_last_measured"] = rows, rdma
    result["alloc"] = alloc and {k: alloc.get(k) for k in ("source", "date", "commit", "machine", "targets", "fresh")}
    write_out(a, result, rows, rdma, alloc)
    log("rebuilt the tables from %s, %s and %s (nothing run)" % (a.out, a.rdma, a.alloc))


def write_out(a, result, rows, rdma, alloc):
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    table = markdown(rows, rdma, alloc, result)
    summ = summary(rows, result)
    print(table)
    print(summ)
    if a.doc and os.path.exists(a.doc):
        with open(a.doc) as f:
            doc = f.read()
        doc = splice(doc, "peers-table", table)
        doc = splice(doc, "peers-summary", summ)
        if rdma and rdma.get("phases"):
            doc = splice(doc, "rdma-phases", rdma_phases(rdma))
        with open(a.doc, "w") as f:
            f.write(doc)
        log("updated the table and the summary in " + a.doc)


def splice(doc, name, text):
    b, e = "<!-- %s:begin -->" % name, "<!-- %s:end -->" % name
    if b in doc and e in doc:
        return doc[:doc.index(b) + len(b)] + "\n" + text + doc[doc.index(e):]
    log("%s: no %s ... %s markers; not updated" % (name, b, e))
    return doc


def table_rows(med):
    """The side-by-side rows, from the medians of this run."""
    rows = []      # (case, omniconn figure, peer name, peer figure, ratio (>1: omniconn ahead), target, met)

    def m(k):
        return med.get(k)

    def ratio(x, y):
        return round(x / y, 3) if x and y else None

    def row(group, case, ov, peer, pv, r, target, limit, label=None):
        met = None if r is None or limit is None else r >= limit
        rows.append({"group": group, "case": case, "label": label, "omniconn": ov, "peer": peer, "peer_value": pv, "ratio": r,
                     "target": target, "target_ratio": limit, "met": met})

    for s in SIZES:
        o, u = m("omniconn_shm_gbps/%d" % s), m("ucx_shm_tag_bw_gbps/%d" % s)
        if s <= 64 * KiB:
            row("shm_stream", "SHM throughput %s (GB/s)" % human(s), o, "UCX shm tag_bw", u, ratio(o, u), ">= UCX shm tag_bw", 1.0)
        else:
            row("shm_large", "SHM throughput %s (GB/s)" % human(s), o, "UCX shm tag_bw", u, ratio(o, u), "(no target; reported)", None)
        if s in WINDOW_SIZES:
            w1 = m("omniconn_shm_window1_gbps/%d" % s)
            row("shm_window_1", "SHM throughput %s, the window rows' benchmark one at a time (GB/s)" % human(s), w1, "UCX shm tag_bw", u,
                ratio(w1, u), "(no target; reported)", None)
            w = m("omniconn_shm_window%d_gbps/%d" % (WINDOW, s))
            lim = 1.0 if s <= 64 * KiB else None
            row("shm_window" if lim else "shm_window_large", "SHM throughput %s, with a window of %d puts not yet released (GB/s)" % (human(s), WINDOW), w, "UCX shm tag_bw", u,
                ratio(w, u), ">= UCX shm tag_bw" if lim else "(no target; reported)", lim)
    for s in SIZES:
        if s < MiB:
            continue
        o, c = m("omniconn_shm_gbps/%d" % s), m("memcpy_warm_gbps/%d" % s)
        row("shm_memcpy_warm", "SHM throughput %s vs memcpy (GB/s)" % human(s), o, "memcpy, warm", c, ratio(o, c), ">= 0.9x memcpy", 0.9)
        c = m("memcpy_pool_gbps/%d" % s)
        row("shm_memcpy_pool", "SHM throughput %s vs memcpy into a pool-sized region (GB/s)" % human(s), o, "memcpy, destination cycling", c,
            ratio(o, c), ">= 0.9x memcpy", 0.9)
    o, u = m("omniconn_shm_handoff_us_p50/64"), m("ucx_shm_tag_lat_us_one_way/64")
    row("shm_handoff", "SHM small handoff p50, 64 B, default waiting, not pinned (us)", o, "UCX shm tag_lat, one way, not pinned", u,
        ratio(u, o), "<= UCX shm tag_lat", 1.0, "64 B, not pinned")
    o, u = m("omniconn_shm_handoff_spin_us_p50/64"), m("ucx_shm_tag_lat_pinned_us_one_way/64")
    row("shm_handoff_pinned", "SHM small handoff p50, 64 B, two pinned CPUs, consumer spinning (us)", o,
        "UCX shm tag_lat, one way, two pinned CPUs", u, ratio(u, o), "<= UCX shm tag_lat", 1.0, "64 B, pinned, spinning")
    row("shm_handoff_1us", "SHM small handoff p50, 64 B, two pinned CPUs, consumer spinning (us)", o, "the 1 us limit", 1.0 if o else None,
        ratio(1.0, o), "<= 1 us across cores", 1.0, "64 B, pinned, spinning")
    for s in SIZES:
        o, u = m("omniconn_tcp_gbps/%d" % s), m("ucx_tcp_tag_bw_gbps/%d" % s)
        row("tcp_ucx", "TCP throughput %s (GB/s)" % human(s), o, "UCX tcp tag_bw", u, ratio(o, u), ">= UCX tcp tag_bw", 1.0)
        if s in WINDOW_SIZES:
            w1 = m("omniconn_tcp_window1_gbps/%d" % s)
            row("tcp_window_1", "TCP throughput %s, the window rows' benchmark one at a time (GB/s)" % human(s), w1, "UCX tcp tag_bw", u,
                ratio(w1, u), "(no target; reported)", None)
            w = m("omniconn_tcp_window%d_gbps/%d" % (WINDOW, s))
            lim = 0.5 if s < 64 * KiB else 1.0
            row("tcp_window", "TCP throughput %s, with a window of %d puts not yet released, up to %d gets in flight on %d threads "
                "and connections (GB/s)" % (human(s), WINDOW, WINDOW, WINDOW), w,
                "UCX tcp tag_bw", u, ratio(w, u), ">= %sx UCX tcp tag_bw" % ("0.5" if lim < 1 else "1.0"), lim)
            w = m("omniconn_tcp_window%d_batch%d_gbps/%d" % (WINDOW, WINDOW, s))
            row("tcp_window_batch", "TCP throughput %s, with a window of %d, gets in batches on one connection (GB/s)" % (human(s), WINDOW), w,
                "UCX tcp tag_bw", u, ratio(w, u), ">= %sx UCX tcp tag_bw" % ("0.5" if lim < 1 else "1.0"), lim)
    o, u = m("omniconn_tcp_get_us_p50/%d" % (4 * KiB)), m("ucx_tcp_tag_lat_us_one_way/%d" % (4 * KiB))
    rtt = 2 * u if u else None
    row("tcp_latency", "TCP 4 KiB get latency p50, default: payload inline in the metadata (us)", o, "UCX tcp tag_lat round trip", rtt, ratio(2 * rtt, o) if rtt else None,
        "<= 2x UCX tcp round trip", 1.0)
    for key, how in (("noinline", "payload not inline (a request and the bytes on the data connection)"),
                     ("side_channel", "PULL on the side channel (an older sender)")):
        o = m("omniconn_tcp_%s_get_us_p50/%d" % (key, 4 * KiB))
        row("tcp_latency_paths", "TCP 4 KiB get latency p50, %s (us)" % how, o, "UCX tcp tag_lat round trip", rtt,
            ratio(2 * rtt, o) if rtt and o else None, "(no target; reported)", None)
    for s in SIZES:
        if s < MiB:
            continue
        o, t = m("omniconn_tcp_gbps/%d" % s), m("raw_tcp_gbps/%d" % s)
        row("tcp_raw", "TCP throughput %s vs raw TCP (GB/s)" % human(s), o, "raw TCP (bench_tcp)", t, ratio(o, t), ">= 0.8x raw TCP", 0.8)
    ip = m("iperf3_single_stream_gbps")
    for s in SIZES:
        if s < MiB:
            continue
        o = m("omniconn_tcp_gbps/%d" % s)
        row("tcp_iperf3", "TCP throughput %s vs iperf3 (GB/s)" % human(s), o, "iperf3 single stream", ip, ratio(o, ip), ">= 0.8x iperf3", 0.8)
    return rows


def human(s):
    return "%d MiB" % (s // MiB) if s >= MiB else "%d KiB" % (s // KiB) if s >= KiB else "%d B" % s


def rdma_rows(path, rows):
    """The RDMA figures as last measured on the test bed (make bench-rdma writes them): rows appended to the table, in MiB/s."""
    try:
        with open(path) as f:
            j = json.load(f)
    except (OSError, ValueError):
        return None
    for rr in j.get("rows") or []:
        if not isinstance(rr, dict) or "size_bytes" not in rr:
            continue
        s, o, p, u = rr["size_bytes"], rr.get("omniconn_mbps"), rr.get("ib_write_bw_mbps"), rr.get("ucx_put_bw_mbps")
        lim = 0.9 if s >= MiB else 0.6 if s >= 64 * KiB else None
        r = round(o / p, 3) if o and p else None
        rows.append({"group": "rdma_ib", "case": "RDMA %s, test bed (MiB/s)" % human(s), "omniconn": o, "peer": "ib_write_bw", "peer_value": p,
                     "ratio": r, "target": "(reported)" if lim is None else ">= %.1fx ib_write_bw" % lim, "target_ratio": lim,
                     "met": None if lim is None or r is None else r >= lim})
        if u is not None or "ucx_put_bw_mbps" in rr:
            r = round(o / u, 3) if o and u else None
            rows.append({"group": "rdma_ucx", "case": "RDMA %s, test bed (MiB/s)" % human(s), "omniconn": o, "peer": "UCX put_bw (rc_verbs, zero-copy)",
                         "peer_value": u, "ratio": r, "target": "(side by side; no target)", "target_ratio": None, "met": None})
    return {"source": path, "date": j.get("date"), "commit": j.get("commit"), "bed": j.get("bed"), "device": j.get("device"),
            "host_load": j.get("host_load"), "rounds": j.get("rounds"), "ucx_version": j.get("ucx_version"), "rows": j.get("rows"),
            "phases": j.get("phases"), "ucx_ucp": j.get("ucx_ucp")}


def alloc_run(build, path):
    """Run bench_alloc (as make bench-alloc does) when it is built; else read its last results."""
    binary = os.path.join(build, "bench_alloc")
    fresh = False
    if os.path.exists(binary):
        log("bench_alloc (load %.2f)" % load())
        rc, out = run([binary, path], timeout=900)
        if rc != 0:
            log("bench_alloc failed: " + out[-300:])
        else:
            fresh = True
    else:
        log("%s is not built: the allocator rows are %s as last measured" % (binary, path))
    try:
        with open(path) as f:
            j = json.load(f)
    except (OSError, ValueError):
        return None
    j["source"], j["fresh"] = path, fresh
    if not j.get("date"):
        j["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(os.path.getmtime(path)))
    return j


def alloc_rows(j, rows):
    if not j:
        return
    t = j.get("targets", {})
    sc, p99, ff = t.get("omniconn_100k_vs_1k_le_1_5x"), t.get("omniconn_p99_le_1us"), t.get("speedup_vs_first_fit_at_10k_ge_10x")
    if sc:
        r = round(sc["limit"] / sc["ratio"], 3) if sc.get("ratio") else None
        rows.append({"group": "alloc_scale", "case": "allocator ns/op p50, 100 k live (ns)", "omniconn": sc.get("ns_per_op_100k"),
                     "peer": "1.5 x the 1 k live figure", "peer_value": sc.get("ns_per_op_1k") and round(1.5 * sc["ns_per_op_1k"], 1),
                     "ratio": r, "target": "100k / 1k <= 1.5x (here %.2fx)" % sc["ratio"], "target_ratio": 1.0, "met": sc.get("met"),
                     "label": "100k / 1k = %.2fx" % sc["ratio"]})
    if p99:
        r = round(1000.0 / p99["measured_ns"], 3) if p99.get("measured_ns") else None
        rows.append({"group": "alloc_p99", "case": "allocator ns/op p99, worst of 1 k / 10 k / 100 k live (ns)", "omniconn": p99.get("measured_ns"),
                     "peer": "the 1 us limit", "peer_value": 1000.0, "ratio": r, "target": "<= 1 us", "target_ratio": 1.0, "met": p99.get("met"), "label": "p99 %.0f ns" % p99["measured_ns"]})
    if ff:
        rows.append({"group": "alloc_ff", "case": "allocator ns/op p50, 10 k live (ns)", "omniconn": ff.get("omniconn_ns"),
                     "peer": "first fit (vLLM-Omni's algorithm)", "peer_value": ff.get("first_fit_ns"), "ratio": ff.get("ratio"),
                     "target": ">= 10x first fit", "target_ratio": 10.0, "met": ff.get("met"), "label": "10 k live"})


def rdma_phases(rdma):
    """Where one RDMA get's time goes on the bed: make bench-rdma's one-at-a-time runs, as a table (ms per transfer)."""
    def f(v):
        return "-" if v is None else "%.2f" % v

    out = ["", "| size | get | get, POOL protection | engine WRITE alone | ib_write_bw, 1 in flight | UCX put_bw, 1 in flight | 64-byte get "
           "| per-transfer protection (get - POOL get) | control path (POOL get - WRITE) | WRITE share of the get |", "|---|" + "---:|" * 9]
    for p in rdma["phases"]:
        g, gp, w = p.get("get_ms"), p.get("get_pool_protection_ms"), p.get("write_ms")
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            human(p["size_bytes"]), f(g), f(gp), f(w), f(p.get("ib_write_bw_ms")), f(p.get("ucx_put_bw_ms")), f(p.get("get_64B_ms")),
            f(g - gp) if g and gp else "-", f(gp - w) if gp and w else "-", "%.0f %%" % (100 * w / g) if g and w else "-"))
    out.append("")
    out.append("Milliseconds per transfer, one transfer at a time, medians of the rounds of `make bench-rdma` (%s, commit %s, host load %s); "
               "every sample is in `bench/results/rdma.json` (\"phases\"). Differences of medians are indicative: the samples of one "
               "column spread by up to 2x on this bed." % (rdma.get("date"), rdma.get("commit") or "?", rdma.get("host_load")))
    out.append("")
    return "\n".join(out)


def clean_ucx(msg):
    """A UCX log line without its time stamp, process, source location and level."""
    msg = re.sub(r"^(\[[^\]]*\]\s*)+", "", msg.strip())
    msg = re.sub(r"^\S+\.c:\d+\s+", "", msg)
    msg = re.sub(r"^UCX\s+(ERROR|WARN)\s+", "", msg)
    return re.sub(r"\s+", " ", msg).strip()


def fmt(v):
    if v is None:
        return "-"
    return "%.3g" % v if v < 10 else "%.1f" % v


def markdown(rows, rdma, alloc, res):
    out = ["", "| case | omniconn | peer | peer figure | ratio (> 1: omniconn ahead) | target | met |", "|---|---:|---|---:|---:|---|---|"]
    for r in rows:
        met = "-" if r["met"] is None else ("met" if r["met"] else "**missed**")
        out.append("| %s | %s | %s | %s | %s | %s | %s |" % (r["case"], fmt(r["omniconn"]), r["peer"], fmt(r["peer_value"]),
                                                          "-" if r["ratio"] is None else ("%.3fx" if r["ratio"] < 1 else "%.2fx") % r["ratio"], r["target"], met))
    m = res["machine"]
    out.append("")
    out.append("%s, %s cores, load average %.2f at the start and %.2f at the end (highest at a sample: %.2f); %d round%s, medians; %s s; "
               "commit %s, %s; ucx-utils %s, iperf3 %s. Command: `make bench-peers` (bench/results/peers.json holds every sample with the "
               "load average when it was taken)."
               % (m["cpu"], m["cores"], m["load_average_start"], m["load_average_end"], m.get("load_average_max_sample", m["load_average_end"]),
                  res["rounds"], "" if res["rounds"] == 1 else "s", res["elapsed_s"], res.get("commit", "?"), res.get("date", "?"), res["packages"].get("ucx-utils", "?"),
                  res["packages"].get("iperf3", "?")))
    if m.get("load_average_max_sample", m["load_average_end"]) > 1.5:
        out.append("")
        out.append("**This run shared the CPUs** (load average above 1.5 on %s cores at some sample): ucx_perftest busy-polls on both sides "
                   "and loses most when the cores are shared; quote ratios against UCX from an idle run." % m["cores"])
    if rdma:
        out.append("")
        txt = ("RDMA rows: `%s` (`make bench-rdma`), measured %s on commit %s on the %s bed (%s; Soft-RoCE in a QEMU/TCG "
               "guest: CPU-bound software on both ends, compare ratios only), %s alternating rounds, medians, host load %s."
               % (rdma["source"], rdma.get("date"), rdma.get("commit") or "?", rdma.get("bed"), rdma.get("device"), rdma.get("rounds"), rdma.get("host_load")))
        ucp = rdma.get("ucx_ucp") or []
        if ucp:
            bad = [u for u in ucp if u.get("exit") != "0"]
            if bad:
                txt += (" UCX %s over the same device: its RDMA WRITE (UCT `put_bw`, rc_verbs, zero-copy) runs and is in the table; its UCP "
                        "layer does not: %s." % (rdma.get("ucx_version") or "", "; ".join(
                            "`UCX_TLS=%s` %s: \"%s\"" % (u.get("tls"), u.get("test"), clean_ucx((u.get("messages") or ["exit %s" % u.get("exit")])[0]))
                            for u in bad)))
        out.append(txt)
    if alloc:
        out.append("")
        out.append("Allocator rows: `%s` (`bench_alloc`, %s), %s, load average %s -> %s." % (
            alloc["source"], "run by this command" if alloc.get("fresh") else "as last measured", alloc.get("date"),
            (alloc.get("machine") or {}).get("load_average_start"), (alloc.get("machine") or {}).get("load_average_end")))
    out.append("")
    return "\n".join(out)


SUMMARY = [   # (groups, target as the issue states it)
    (["shm_stream"], "SHM 4 KiB and 64 KiB stream >= UCX shm tag_bw"),
    (["shm_handoff", "shm_handoff_pinned", "shm_handoff_1us"], "SHM small handoff p50 <= UCX shm tag_lat one way, <= 1 us across cores"),
    (["shm_memcpy_pool", "shm_memcpy_warm"], "SHM >= 0.9x memcpy from 1 MiB (pool-sized destination region: the fair baseline; warm: the strict one)"),
    (["tcp_ucx"], "TCP >= UCX tcp tag_bw, 4 KiB to 186 MiB"),
    (["shm_window"], "SHM with a window of %d: 4 KiB and 64 KiB >= UCX shm tag_bw" % WINDOW),
    (["tcp_window"], "TCP with a window of %d (gets on as many threads): >= UCX tcp tag_bw from 64 KiB, >= 0.5x at 4 KiB" % WINDOW),
    (["tcp_window_batch"], "TCP with a window of %d, gets in batches on one connection: >= UCX tcp tag_bw from 64 KiB, >= 0.5x at 4 KiB" % WINDOW),
    (["tcp_latency"], "TCP 4 KiB get p50 <= 2x UCX tcp round trip"),
    (["tcp_raw", "tcp_iperf3"], "TCP >= 0.8x raw TCP and iperf3 from 1 MiB"),
    (["rdma_ib"], "RDMA >= 0.9x ib_write_bw from 1 MiB, >= 0.6x at 64 KiB (test bed)"),
    (["rdma_ucx"], "RDMA side by side with UCX on the same device (test bed)"),
    (["alloc_scale", "alloc_p99", "alloc_ff"], "allocator 100k/1k <= 1.5x, p99 <= 1 us, >= 10x first fit"),
]


def short(r):
    """The distinguishing part of a row: its label, or the size in its case name."""
    if r.get("label"):
        return r["label"]
    case = r["case"]
    for w in ["186 MiB", "16 MiB", "1 MiB", "64 KiB", "4 KiB"]:
        if w in case:
            return w
    return case.split(" (")[0]


def summary(rows, res):
    """One line per target, generated from the rows: met / missed, and by how much."""
    out = ["", "| target | result |", "|---|---|"]
    for groups, target in SUMMARY:
        parts = []
        for g in groups:
            rs = [r for r in rows if r.get("group") == g]
            if not rs:
                continue
            peer = rs[0]["peer"]
            met = [r for r in rs if r["met"]]
            miss = [r for r in rs if r["met"] is False]
            none = [r for r in rs if r["met"] is None]
            bits = []
            if met:
                bits.append("met at %s" % ", ".join("%s (%.2fx)" % (short(r), r["ratio"]) for r in met))
            if miss:
                bits.append("**missed** at %s" % ", ".join(("%s (%.3gx; needs %.3fx)" if r["target_ratio"] / r["ratio"] < 1.1 else "%s (%.3gx; needs %.2fx)") % (
                    short(r), r["ratio"], r["target_ratio"] / r["ratio"]) for r in miss))
            if none and not met and not miss:
                have = [r for r in none if r["ratio"] is not None]
                if have:
                    bits.append(", ".join("%s %.2fx" % (short(r), r["ratio"]) for r in have))
                elif all(r["omniconn"] is None for r in none) and any(r["peer_value"] is not None for r in none):
                    bits.append("no omniconn figure in this run (the benchmark binary does not measure it)")
                else:
                    bits.append("not measured in this run")
            elif none:
                bits.append("not measured: %s" % ", ".join(short(r) for r in none))
            parts.append("against %s: %s" % (peer, "; ".join(bits)))
        out.append("| %s | %s |" % (target, " / ".join(parts) if parts else "not measured in this run"))
    nmet = sum(1 for r in rows if r["met"])
    nmiss = sum(1 for r in rows if r["met"] is False)
    out.append("")
    out.append("%d rows met, %d missed (ratios: > 1 means omniconn ahead; \"needs\" is the factor by which omniconn must improve "
               "to meet the target). "
               "Generated by `make bench-peers` from the table above (commit %s, %s, load average %.2f -> %.2f)."
               % (nmet, nmiss, res.get("commit", "?"), res.get("date", "?"), res["machine"]["load_average_start"], res["machine"]["load_average_end"]))
    out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    main()
