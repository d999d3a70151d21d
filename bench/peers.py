#!/usr/bin/python3
"""peers.py - omniconn beside UCX's ucx_perftest, iperf3 and memcpy, in one run on this machine.

usage: peers.py [--build DIR] [--rounds N] [--out bench/results/peers.json] [--doc docs/performance.md]
       (make bench-peers runs it with the defaults)

Each round runs every tool once, in turn (the starting tool rotates from round to round), so all of
them see the same load on a shared machine; a figure is the median of the rounds. Loopback only:
UCX server and client on 127.0.0.1 (a fresh port per test), iperf3 single stream on 127.0.0.1,
omniconn's two-process benchmarks (bench_shm, bench_tcp; one round each per round here).

Units: GB/s = 1e9 B/s. ucx_perftest prints "MB/s" meaning 2^20 B/s; it is converted. Its tag_lat
"overhead" is one way (half a round trip). Latency ratios are peer time / omniconn time, so every
ratio reads the same way: above 1, omniconn is ahead.

Writes every sample, the medians, the ratios against the targets, the host's load average around
every sample and the package versions to the JSON file, and the side-by-side table into the doc
between the markers <!-- peers-table:begin --> and <!-- peers-table:end --> (printed as well).
Needs ucx-utils and iperf3 (scripts/install-deps.sh installs them)."""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

KiB, MiB = 1024, 1024 * 1024
SIZES = [4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 186 * MiB]
SHM_SIZES = [64] + SIZES          # 64 B: the small handoff
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


def ucx_once(tls, test, size):
    """One ucx_perftest measurement: {"gbps", "lat_us_p50", "lat_us_avg"} or None."""
    for attempt in range(3):
        port = free_port()
        env = {"UCX_TLS": tls, "UCX_WARN_UNUSED_ENV_VARS": "n"}
        e = dict(os.environ)
        e.update(env)
        srv = subprocess.Popen(["ucx_perftest", "-p", str(port)], env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.4)
        try:
            rc, out = run(["ucx_perftest", "127.0.0.1", "-p", str(port), "-t", test, "-s", str(size), "-n", str(ucx_iters(test, size))],
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
    return {str(r["size_bytes"]): r for r in j["rows"]}, j["omniconn_version"]


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("PEERS_ROUNDS", "3")))
    ap.add_argument("--out", default="bench/results/peers.json")
    ap.add_argument("--doc", default="docs/performance.md")
    a = ap.parse_args()
    a.rounds = max(1, min(5, a.rounds))
    for tool in ["ucx_perftest", "iperf3"]:
        if not shutil.which(tool):
            sys.exit("bench-peers: %s is missing: run scripts/install-deps.sh (Debian packages ucx-utils, iperf3)" % tool)
    samples = {}          # case name -> list of {"value", "load"}
    omc_version = "?"

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

    def iperf():
        ld = load()
        r = iperf3_once()
        add("iperf3_single_stream_gbps", r and r["gbps"], ld)

    def omc_shm():
        nonlocal omc_version
        ld = load()
        r = omc_shm_once(a.build)
        if not r:
            return
        rows, omc_version = r
        for s in SHM_SIZES:
            row = rows.get(str(s))
            if not row:
                continue
            if s >= 4 * KiB:
                add("omniconn_shm_gbps/%d" % s, row["omniconn_gbps"], ld)
                add("memcpy_warm_gbps/%d" % s, row["memcpy_gbps"], ld)
                add("memcpy_pool_gbps/%d" % s, row.get("memcpy_pool_gbps"), ld)
            add("omniconn_shm_handoff_us_p50/%d" % s, row["handoff_us_p50"], ld)

    def omc_tcp():
        ld = load()
        rows = omc_tcp_once(a.build)
        if not rows:
            return
        for s in SIZES:
            row = rows.get(str(s))
            if row:
                add("omniconn_tcp_gbps/%d" % s, row["omniconn_gbps"], ld)
                add("omniconn_tcp_metaless_gbps/%d" % s, row["omniconn_metaless_gbps"], ld)
                add("raw_tcp_gbps/%d" % s, row["raw_tcp_gbps"], ld)
                add("omniconn_tcp_get_us_p50/%d" % s, row["omniconn_get_us_p50"], ld)

    tools = [("ucx_perftest", ucx_tools), ("iperf3", iperf), ("omniconn shm", omc_shm), ("omniconn tcp", omc_tcp)]
    load0, t0 = load(), time.time()
    for rnd in range(a.rounds):
        order = tools[rnd % len(tools):] + tools[:rnd % len(tools)]
        for name, fn in order:
            log("round %d/%d: %s (load %.2f)" % (rnd + 1, a.rounds, name, load()))
            fn()
    load1, elapsed = load(), time.time() - t0

    med = {k: statistics.median(x["value"] for x in v) for k, v in samples.items()}

    def m(k):
        return med.get(k)

    def ratio(x, y):
        return round(x / y, 3) if x and y else None

    rows = []      # (case, omniconn figure, peer name, peer figure, ratio (>1: omniconn ahead), target, met)

    def row(case, ov, peer, pv, r, target, limit):
        met = None if r is None or limit is None else r >= limit
        rows.append({"case": case, "omniconn": ov, "peer": peer, "peer_value": pv, "ratio": r, "target": target, "target_ratio": limit, "met": met})

    for s in SIZES:
        lbl = human(s)
        o, u = m("omniconn_shm_gbps/%d" % s), m("ucx_shm_tag_bw_gbps/%d" % s)
        row("SHM throughput %s (GB/s)" % lbl, o, "UCX shm tag_bw", u, ratio(o, u),
            ">= UCX shm tag_bw" if s <= 64 * KiB else "(no target; reported)", 1.0 if s <= 64 * KiB else None)
    for s in SIZES:
        if s < MiB:
            continue
        o, c = m("omniconn_shm_gbps/%d" % s), m("memcpy_warm_gbps/%d" % s)
        row("SHM throughput %s vs memcpy (GB/s)" % human(s), o, "memcpy, warm", c, ratio(o, c), ">= 0.9x memcpy", 0.9)
        c = m("memcpy_pool_gbps/%d" % s)
        row("SHM throughput %s vs memcpy into a pool-sized region (GB/s)" % human(s), o, "memcpy, destination cycling", c, ratio(o, c),
            ">= 0.9x memcpy", 0.9)
    o, u = m("omniconn_shm_handoff_us_p50/64"), m("ucx_shm_tag_lat_us_one_way/64")
    row("SHM small handoff p50, 64 B (us)", o, "UCX shm tag_lat, one way", u, ratio(u, o), "<= UCX shm tag_lat", 1.0)
    for s in SIZES:
        o, u = m("omniconn_tcp_gbps/%d" % s), m("ucx_tcp_tag_bw_gbps/%d" % s)
        row("TCP throughput %s (GB/s)" % human(s), o, "UCX tcp tag_bw", u, ratio(o, u), ">= UCX tcp tag_bw", 1.0)
    o, u = m("omniconn_tcp_get_us_p50/%d" % (4 * KiB)), m("ucx_tcp_tag_lat_us_one_way/%d" % (4 * KiB))
    rtt = 2 * u if u else None
    row("TCP 4 KiB get latency p50 (us)", o, "UCX tcp tag_lat round trip", rtt, ratio(2 * rtt, o) if rtt else None, "<= 2x UCX tcp round trip", 1.0)
    for s in SIZES:
        if s < MiB:
            continue
        o, t = m("omniconn_tcp_gbps/%d" % s), m("raw_tcp_gbps/%d" % s)
        row("TCP throughput %s vs raw TCP (GB/s)" % human(s), o, "raw TCP (bench_tcp)", t, ratio(o, t), ">= 0.8x raw TCP", 0.8)
    ip = m("iperf3_single_stream_gbps")
    for s in SIZES:
        if s < MiB:
            continue
        o = m("omniconn_tcp_gbps/%d" % s)
        row("TCP throughput %s vs iperf3 (GB/s)" % human(s), o, "iperf3 single stream", ip, ratio(o, ip), ">= 0.8x iperf3", 0.8)
    rdma = rdma_rows()

    result = {
        "benchmark": "peers",
        "omniconn_version": omc_version,
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "load_average_start": load0, "load_average_end": load1,
                    "note": "shared with other jobs; loopback only; no CPU pinning"},
        "packages": versions(),
        "rounds": a.rounds,
        "elapsed_s": round(elapsed, 1),
        "method": ("Each round runs every tool once in turn, the starting tool rotating per round; figures are medians over the rounds. "
                   "ucx_perftest: server and client on 127.0.0.1, UCX_TLS=%s (shm) or %s (tcp), tag_bw at each size (about 1 GiB per figure), "
                   "tag_lat p50 overhead (one way; 64 B over shm, 4 KiB over tcp); its MB/s are 2^20 B/s, converted. iperf3: one stream, 3 s, "
                   "127.0.0.1. omniconn: bench_shm (producer puts, consumer takes each with a metadata-less get and releases it; handoff = "
                   "ping-pong put -> get -> release, p50) and bench_tcp (one get with metadata per iteration, size / median time; get_us_p50 = "
                   "median time of one 4 KiB get). memcpy, warm: bench_shm's baseline (source and destination faulted in and reused, so "
                   "sizes that fit the cache run from it; above the last-level cache it is memory-bound). memcpy, destination cycling: "
                   "the same source copied into destinations cycling through a faulted-in region the size of the stream's pool (colder "
                   "than the transfer, whose allocator hands back the range just released, while that fits the cache). GB/s = 1e9 B/s. Ratios: above 1 means "
                   "omniconn is ahead (throughput: omniconn / peer; latency: peer / omniconn)." % (UCX_SHM_TLS, UCX_TCP_TLS)),
        "medians": {k: round(v, 4) for k, v in sorted(med.items())},
        "samples": samples,
        "table": rows,
        "rdma_last_measured": rdma,
    }
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    table = markdown(rows, rdma, result)
    print(table)
    if a.doc and os.path.exists(a.doc):
        with open(a.doc) as f:
            doc = f.read()
        b, e = "<!-- peers-table:begin -->", "<!-- peers-table:end -->"
        if b in doc and e in doc:
            doc = doc[:doc.index(b) + len(b)] + "\n" + table + doc[doc.index(e):]
            with open(a.doc, "w") as f:
                f.write(doc)
            log("updated the table in " + a.doc)
    log("wrote %s (%.0f s, load %.2f -> %.2f)" % (a.out, elapsed, load0, load1))


def human(s):
    return "%d MiB" % (s // MiB) if s >= MiB else "%d KiB" % (s // KiB) if s >= KiB else "%d B" % s


def rdma_rows():
    """The RDMA figures as last measured on the test bed (bench/results/rdma.json; make bench-rdma)."""
    try:
        with open("bench/results/rdma.json") as f:
            j = json.load(f)
    except (OSError, ValueError):
        return None
    return {"source": "bench/results/rdma.json", "rows": j.get("rows"), "machine": j.get("machine")}


def fmt(v):
    if v is None:
        return "-"
    return "%.3g" % v if v < 10 else "%.1f" % v


def markdown(rows, rdma, res):
    out = ["", "| case | omniconn | peer | peer figure | ratio (> 1: omniconn ahead) | target | met |", "|---|---:|---|---:|---:|---|---|"]
    for r in rows:
        met = "-" if r["met"] is None else ("met" if r["met"] else "**missed**")
        out.append("| %s | %s | %s | %s | %s | %s | %s |" % (r["case"], fmt(r["omniconn"]), r["peer"], fmt(r["peer_value"]),
                                                          "-" if r["ratio"] is None else "%.2fx" % r["ratio"], r["target"], met))
    if rdma and rdma.get("rows"):
        for rr in rdma["rows"]:
            if isinstance(rr, dict) and "size_bytes" in rr:
                o = rr.get("omniconn_mbps")            # perftest's MB/sec: 2^20 B/s
                p = rr.get("ib_write_bw_mbps")
                if o is None or p is None:
                    continue
                o, p = o * MiB / 1e9, p * MiB / 1e9
                lim = 0.9 if rr["size_bytes"] >= MiB else 0.6 if rr["size_bytes"] >= 64 * KiB else None
                r = o / p if p else None
                out.append("| RDMA %s, Soft-RoCE bed under QEMU, last measured (GB/s) | %s | ib_write_bw | %s | %s | %s | %s |" % (
                    human(rr["size_bytes"]), fmt(o), fmt(p), "-" if r is None else "%.2fx" % r,
                    "(reported)" if lim is None else ">= %.1fx ib_write_bw" % lim,
                    "-" if lim is None or r is None else ("met" if r >= lim else "**missed**")))
    m = res["machine"]
    out.append("")
    out.append("%s, %s cores, load average %.2f at the start and %.2f at the end; %d rounds, medians; %s s; ucx-utils %s, iperf3 %s. "
               "Command: `make bench-peers` (bench/results/peers.json holds every sample with the load average when it was taken)."
               % (m["cpu"], m["cores"], m["load_average_start"], m["load_average_end"], res["rounds"], res["elapsed_s"],
                  res["packages"].get("ucx-utils", "?"), res["packages"].get("iperf3", "?")))
    out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    main()
