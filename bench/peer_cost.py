#!/usr/bin/python3
"""peer_cost.py - what one connected peer costs: memory (RSS, PSS), threads and file descriptors
of one sender with 1, 16, 64 and 256 receiver processes, and of one receiver reading from 16
sender processes; and the throughput of a fixed workload in each setting. TCP (the remote
connector: ZMQ side channel + TCP data plane) and shared memory, as shipped.

usage: peer_cost.py [--build DIR] [--out bench/results/peer_cost.json] [--doc docs/scaling.md]
                    [--svg docs/peer_cost.svg] [--n 8] [--size 1048576] [--receivers 1,16,64,256]
                    [--senders 1,16] [--transports tcp,shm]
       (make bench-peer-cost runs it with the defaults; a few minutes on a loaded 2-core host)

Method. Every peer is a real process of build/bench_peer_cost (a small C program on the public
API). The sender puts N payloads of SIZE bytes per group of at most 16 receivers (fan-out readers
= the group's receivers) and writes each put's metadata to a file. Its /proc/<pid> is read once
when the puts are done (no peer yet: the baseline) and once when every receiver has read all its
payloads and is still connected (the receivers wait for their stdin to close). Per peer =
(connected - baseline) / receivers. The workload: every receiver gets N x SIZE (with the
metadata, as a pipeline stage does); the receivers start together on one "go" line, and the
throughput is all bytes read / the time from "go" to the last "done". In the 1- and 16-senders
settings the receiver is the one measured (before its first get and after its last) and reads
N x SIZE from each sender. Marginal per peer = the difference between two consecutive settings
divided by the difference in peers (what one more peer costs; a constant paid once drops out). RSS = VmRSS, anon = RssAnon (the process's private heap and
stacks: what per-peer state costs), PSS = Pss of smaps_rollup (shared pages divided among the
processes that map them, so the sender's pool pages shared with its SHM readers count once in
total), threads = entries of /proc/<pid>/task, fds = entries of /proc/<pid>/fd. The host's load
average is read before and after every setting and reported beside the figures. CPU per get =
the CPU time of all threads of the measured process (/proc/<pid>/task/*/schedstat) from "go" to
the last "done", divided by the gets: what one get costs the sender as more peers are connected."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

GROUP = 16


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def sample(pid):
    """rss, its private anonymous part (heap, stacks) and pss in KiB, threads, fds of a live process."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                out["rss_kib"] = int(line.split()[1])
            elif line.startswith("RssAnon:"):
                out["anon_kib"] = int(line.split()[1])
    out["pss_kib"] = 0
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            if line.startswith("Pss:"):
                out["pss_kib"] = int(line.split()[1])
    out["threads"] = len(os.listdir("/proc/%d/task" % pid))
    fds = os.listdir("/proc/%d/fd" % pid)
    out["fds"] = len(fds)
    kinds = {}
    for fd in fds:
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        kind = ("socket" if target.startswith("socket:") else target[len("anon_inode:"):].strip("[]") if target.startswith("anon_inode:")
                else "shm" if target.startswith("/dev/shm/") else "pipe" if target.startswith("pipe:") else "file")
        kinds[kind] = kinds.get(kind, 0) + 1
    out["fd_kinds"] = kinds
    return out


class Peer:
    def __init__(self, argv):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def expect(self, word):
        line = self.p.stdout.readline()
        if not line.startswith(word):
            raise RuntimeError("peer %d said %r instead of %r" % (self.p.pid, line, word))
        return line.split()

    def say(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def finish(self):
        try:
            self.p.stdin.close()
        except OSError:
            pass

    def reap(self):
        if self.p.wait(timeout=60) != 0:
            raise RuntimeError("peer %d exited with %d" % (self.p.pid, self.p.returncode))


def cpu_ns(pid):
    """CPU time of every thread of a live process (schedstat: nanoseconds on a CPU)."""
    total = 0
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def per_peer(before, after, peers):
    d = {k: (after[k] - before[k]) / float(peers) for k in KEYS}
    d["fd_kinds"] = {k: (after["fd_kinds"].get(k, 0) - before["fd_kinds"].get(k, 0)) / float(peers)
                     for k in set(after["fd_kinds"]) | set(before["fd_kinds"])}
    return d


KEYS = ("rss_kib", "anon_kib", "pss_kib", "threads", "fds")


def add_marginal(runs):
    """The cost of one more peer between consecutive settings of one kind: the difference of the
    growth (connected - baseline) over the difference in peers (the slope; a constant paid once,
    such as a thread pool started with the first peer, drops out)."""
    for kind in ("sender", "receiver"):
        for t in set(r["transport"] for r in runs):
            for w in set(r["workload"] for r in runs):
                add_marginal_of([r for r in runs if r["transport"] == t and r["measured"] == kind and r["workload"] == w])


def add_marginal_of(runs):
    rs = sorted(runs, key=lambda r: r["receivers"] * r["senders"])
    for a, b in zip(rs, rs[1:]):
        pa, pb = a["receivers"] * a["senders"], b["receivers"] * b["senders"]
        b["marginal_per_peer"] = {k: ((b["connected"][k] - b["baseline"][k]) - (a["connected"][k] - a["baseline"][k])) / float(pb - pa)
                                  for k in KEYS}
        b["marginal_from"] = pa


def run_fanout(exe, transport, receivers, n, size, tmp):
    """One sender, `receivers` receivers; the sender is measured."""
    ld0 = loadavg()
    d = tempfile.mkdtemp(dir=tmp)
    peers = []
    sender = Peer([exe, "sender", "--transport", transport, "--dir", d, "--id", "0", "--receivers", str(receivers),
                   "--n", str(n), "--size", str(size)])
    try:
        sender.expect("ready")
        base = sample(sender.p.pid)
        for r in range(receivers):
            peers.append(Peer([exe, "receiver", "--transport", transport, "--dir", d, "--senders", "0", "--group", str(r // GROUP),
                               "--n", str(n), "--size", str(size)]))
        for p in peers:
            p.expect("ready")
        c0 = cpu_ns(sender.p.pid)
        t0 = time.monotonic()
        for p in peers:
            p.say("go")
        dones = [p.expect("done") for p in peers]
        own = [float(x[1]) for x in dones]
        retries = sum(int(x[3]) for x in dones)
        wall = time.monotonic() - t0
        cpu = cpu_ns(sender.p.pid) - c0
        conn = sample(sender.p.pid)
        rx = sample(peers[0].p.pid)
    finally:
        for p in peers:
            p.finish()
        for p in peers:
            p.reap()
        sender.finish()
        sender.reap()
        shutil.rmtree(d, ignore_errors=True)
    total = receivers * n * size
    return {"transport": transport, "setting": "1 sender, %d receiver%s" % (receivers, "" if receivers == 1 else "s"), "senders": 1, "receivers": receivers,
            "workload": "%d x %d B" % (n, size), "n": n, "size": size, "gets_per_s": receivers * n / wall,
            "cpu_us_per_get": cpu / 1000.0 / (receivers * n),
            "measured": "sender", "baseline": base, "connected": conn, "per_peer": per_peer(base, conn, receivers),
            "one_receiver": rx, "bytes": total, "seconds": wall, "gbps": total / wall / 1e9,
            "receiver_seconds_median": sorted(own)[len(own) // 2], "gets_retried": retries, "load_average": [ld0, loadavg()]}


def run_fanin(exe, transport, senders, n, size, tmp):
    """`senders` senders, one receiver; the receiver is measured."""
    ld0 = loadavg()
    d = tempfile.mkdtemp(dir=tmp)
    ss = []
    rx = None
    try:
        for s in range(senders):
            ss.append(Peer([exe, "sender", "--transport", transport, "--dir", d, "--id", str(s), "--receivers", "1",
                            "--n", str(n), "--size", str(size)]))
        for s in ss:
            s.expect("ready")
        rx = Peer([exe, "receiver", "--transport", transport, "--dir", d, "--senders", ",".join(str(i) for i in range(senders)),
                   "--group", "0", "--n", str(n), "--size", str(size)])
        rx.expect("ready")
        base = sample(rx.p.pid)
        c0 = cpu_ns(rx.p.pid)
        t0 = time.monotonic()
        rx.say("go")
        done = rx.expect("done")
        own, retries = float(done[1]), int(done[3])
        wall = time.monotonic() - t0
        cpu = cpu_ns(rx.p.pid) - c0
        conn = sample(rx.p.pid)
        tx = sample(ss[0].p.pid)
    finally:
        if rx:
            rx.finish()
            rx.reap()
        for s in ss:
            s.finish()
        for s in ss:
            s.reap()
        shutil.rmtree(d, ignore_errors=True)
    total = senders * n * size
    return {"transport": transport, "setting": "%d sender%s, 1 receiver" % (senders, "" if senders == 1 else "s"), "senders": senders, "receivers": 1,
            "workload": "%d x %d B" % (n, size), "n": n, "size": size, "gets_per_s": senders * n / wall,
            "cpu_us_per_get": cpu / 1000.0 / (senders * n),
            "measured": "receiver", "baseline": base, "connected": conn, "per_peer": per_peer(base, conn, senders),
            "one_sender": tx, "bytes": total, "seconds": wall, "gbps": total / wall / 1e9, "receiver_seconds_median": own,
            "gets_retried": retries, "load_average": [ld0, loadavg()]}


def svg_plot(runs, path):
    """Three panels drawn as plain SVG (no plotting package), against receivers of one sender
    (log2 axis), TCP blue, SHM red: the sender's private memory and descriptors per receiver, the
    aggregate throughput of the large workload, and the gets per second of the small one."""
    import math
    W, H, M = 1200, 380, 64
    pw = (W - 4 * M) / 3.0
    ph = H - 2 * M
    colors = {"tcp": "#1f77b4", "shm": "#d62728"}
    fan = [r for r in runs if r["measured"] == "sender"]
    xs = sorted(set(r["receivers"] for r in fan))
    if not xs:
        return
    big = max(r["size"] for r in fan)
    lo, hi = math.log2(xs[0]), math.log2(xs[-1]) if xs[-1] > xs[0] else math.log2(xs[0]) + 1
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>']
    panels = [("sender, per receiver: anon KiB (solid), fds (dashed)", lambda r: r["size"] == big,
               lambda r: r["per_peer"]["anon_kib"], lambda r: r["per_peer"]["fds"]),
              ("GB/s, all receivers (%d B gets)" % big, lambda r: r["size"] == big, lambda r: r["gbps"], None),
              ("gets/s, all receivers (small gets)", lambda r: r["size"] != big, lambda r: r["gets_per_s"], None)]
    for i, (title, keep, f1, f2) in enumerate(panels):
        x0 = M + i * (pw + M)
        rs = [r for r in fan if keep(r)]
        if not rs:
            continue
        vals = [f1(r) for r in rs] + ([f2(r) for r in rs] if f2 else [])
        top = max(vals + [1e-9]) * 1.15

        def X(rec):
            return x0 + (math.log2(rec) - lo) / (hi - lo) * pw

        def Y(v):
            return M + ph - ph * v / top

        out.append('<text x="%.0f" y="%d">%s</text>' % (x0, M - 24, title))
        out.append('<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>' % (x0, M + ph, x0 + pw, M + ph))
        out.append('<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>' % (x0, M, x0, M + ph))
        for k in range(5):
            out.append('<text x="%.0f" y="%.0f" text-anchor="end">%.3g</text>' % (x0 - 4, Y(top * k / 4.0) + 4, top * k / 4.0))
        for rec in xs:
            out.append('<text x="%.0f" y="%.0f" text-anchor="middle">%d</text>' % (X(rec), M + ph + 16, rec))
        out.append('<text x="%.0f" y="%.0f" text-anchor="middle">receivers</text>' % (x0 + pw / 2, M + ph + 34))
        for t in ("tcp", "shm"):
            pts = sorted((r["receivers"], r) for r in rs if r["transport"] == t)
            for f, dash in ((f1, ""), (f2, ' stroke-dasharray="5,4"')):
                if not f or not pts:
                    continue
                out.append('<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>' % (
                    colors[t], dash, " ".join("%.1f,%.1f" % (X(rec), Y(f(r))) for rec, r in pts)))
                for rec, r in pts:
                    out.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>' % (X(rec), Y(f(r)), colors[t]))
        for k, t in enumerate(("tcp", "shm")):
            out.append('<text x="%.0f" y="%.0f" fill="%s">%s</text>' % (x0 + pw - 36, M + 14 + 16 * k, colors[t], t.upper()))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def table(runs):
    rows = ["| transport | setting | workload per peer | measured | RSS KiB (no peer -> connected) | anon KiB | threads | fds | per peer: anon KiB / threads / fds | marginal per peer: anon KiB / threads / fds | GB/s | gets/s | CPU us per get (measured process) | retried gets | load avg (before, after) |",
            "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        b, c, p = r["baseline"], r["connected"], r["per_peer"]
        m = r.get("marginal_per_peer")
        rows.append("| %s | %s | %s | %s | %d -> %d | %d -> %d | %d -> %d | %d -> %d | %.1f / %.2f / %.2f | %s | %.2f | %.0f | %.1f | %d | %.2f, %.2f |" % (
            r["transport"].upper(), r["setting"], r["workload"], r["measured"], b["rss_kib"], c["rss_kib"], b["anon_kib"], c["anon_kib"], b["threads"],
            c["threads"], b["fds"], c["fds"], p["anon_kib"], p["threads"], p["fds"],
            ("%.1f / %.2f / %.2f (from %d)" % (m["anon_kib"], m["threads"], m["fds"], r["marginal_from"])) if m else "-",
            r["gbps"], r["gets_per_s"], r["cpu_us_per_get"], r["gets_retried"], r["load_average"][0], r["load_average"][1]))
    return "\n".join(rows)


def write_doc(doc, runs, res, svg):
    """Replace the generated block of docs/scaling.md (between the markers) with the new table."""
    begin, end = "<!-- peer_cost.py: begin -->", "<!-- peer_cost.py: end -->"
    block = "%s\nMeasured %s on commit %s, %d CPUs, `%s`, N = %d x %d bytes per receiver and sender.\n\n%s\n\n![cost per peer](%s)\n%s" % (
        begin, res["date"], res["commit"], res["cpus"], res["command"], res["n"], res["size"], table(runs), os.path.basename(svg), end)
    text = open(doc).read() if os.path.exists(doc) else "# Scaling\n\n" + begin + "\n" + end + "\n"
    if begin not in text:
        text += "\n" + begin + "\n" + end + "\n"
    a, b = text.index(begin), text.index(end) + len(end)
    with open(doc, "w") as f:
        f.write(text[:a] + block + text[b:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default="bench/results/peer_cost.json")
    ap.add_argument("--doc", default="docs/scaling.md")
    ap.add_argument("--svg", default="docs/peer_cost.svg")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("--receivers", default="1,16,64,256")
    ap.add_argument("--senders", default="1,16")
    ap.add_argument("--transports", default="tcp,shm")
    ap.add_argument("--small", default="64x4096", help="a second workload per receiver (N x bytes) for the fan-out settings: "
                    "the cost of a get itself against the peers connected ('' = none)")
    a = ap.parse_args()
    exe = os.path.join(a.build, "bench_peer_cost")
    if not os.access(exe, os.X_OK):
        sys.exit("peer_cost.py: %s is missing: make %s" % (exe, exe))
    tmp = tempfile.mkdtemp(prefix="omc-peer-cost-")
    runs = []
    t_start = time.monotonic()
    try:
        for t in a.transports.split(","):
            for rcv in [int(x) for x in a.receivers.split(",")]:
                for n, size in [(a.n, a.size)] + ([tuple(int(v) for v in a.small.split("x"))] if a.small else []):
                    r = run_fanout(exe, t, rcv, n, size, tmp)
                    runs.append(r)
                    print("peer-cost: %s 1 sender x %d receivers, %s each: sender +%.1f KiB anon, +%.3f threads, +%.2f fds per receiver; "
                          "%.2f GB/s, %.0f gets/s, %.1f us sender CPU per get, %d retried (load %.2f)" % (
                              t, rcv, r["workload"], r["per_peer"]["anon_kib"], r["per_peer"]["threads"],
                              r["per_peer"]["fds"], r["gbps"], r["gets_per_s"], r["cpu_us_per_get"], r["gets_retried"],
                                                                               r["load_average"][1]), file=sys.stderr)
            for snd in [int(x) for x in a.senders.split(",")]:
                r = run_fanin(exe, t, snd, a.n, a.size, tmp)
                runs.append(r)
                print("peer-cost: %s %d sender(s) x 1 receiver: receiver +%.1f KiB anon, +%.3f threads, +%.2f fds per sender; %.2f GB/s (load %.2f)"
                      % (t, snd, r["per_peer"]["anon_kib"], r["per_peer"]["threads"], r["per_peer"]["fds"], r["gbps"], r["load_average"][1]),
                      file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.strip()
    res = {"tool": "bench/peer_cost.py + build/bench_peer_cost", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "commit": commit or "unknown", "cpus": os.cpu_count(), "n": a.n, "size": a.size,
           "command": "make bench-peer-cost (bench/peer_cost.py --n %d --size %d --small %s --receivers %s --senders %s)" % (
               a.n, a.size, a.small, a.receivers, a.senders),
           "seconds": time.monotonic() - t_start,
           "units": {"cpu_us_per_get": "CPU time of the measured process's threads (schedstat) from go to the last done / gets",
                     "rss_kib": "VmRSS KiB", "pss_kib": "smaps_rollup Pss KiB", "gbps": "1e9 bytes/s, all receivers together",
                     "per_peer": "(connected - baseline) / peers"},
           "runs": runs}
    add_marginal(runs)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    svg_plot(runs, a.svg)
    write_doc(a.doc, runs, res, a.svg)
    print("peer-cost: %.0f s; wrote %s, %s, %s" % (res["seconds"], a.out, a.svg, a.doc), file=sys.stderr)


if __name__ == "__main__":
    main()
