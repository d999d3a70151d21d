#!/usr/bin/python3
"""scaling.py - cost per transfer against payload size and against transfers in flight, per
transport, from `omniconn bench --json` runs; one PNG (gnuplot) and one JSON.

usage: scaling.py [--build DIR] [--out bench/results/scaling.json] [--png docs/scaling.png]
       (make bench-scaling runs it with the defaults; about a minute)

For each transport (local, shm, tcp) and each limit on transfers in flight (1, 4, 16, 64):
`omniconn bench --transport T --sizes 4K,64K,1M,16M --inflight N --duration 0.4`. Cost per transfer
= 1 / message rate of the throughput phase (ns). Left panel: cost against size at 16 in flight;
right panel: cost against transfers in flight at 4 KiB. Both axes logarithmic. The host's load
average is recorded with every run."""
import argparse
import json
import os
import subprocess
import sys
import time

TRANSPORTS = ["local", "shm", "tcp"]
INFLIGHT = [1, 4, 16, 64]
SIZES = "4K,64K,1M,16M"


def load():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default="bench/results/scaling.json")
    ap.add_argument("--png", default="docs/scaling.png")
    a = ap.parse_args()
    runs = []
    load0 = load()
    for t in TRANSPORTS:
        for n in INFLIGHT:
            path = "/tmp/omc-scaling-%d.json" % os.getpid()
            ld = load()
            p = subprocess.run([os.path.join(a.build, "omniconn"), "bench", "--transport", t, "--sizes", SIZES, "--inflight", str(n),
                                "--duration", "0.4", "--no-progress", "--json", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if p.returncode != 0:
                print("bench-scaling: %s --inflight %d failed:\n%s" % (t, n, p.stdout), file=sys.stderr)
                continue
            with open(path) as f:
                j = json.load(f)
            os.unlink(path)
            for r in j["results"]:
                runs.append({"transport": t, "inflight": n, "size": r["size"], "ns_per_transfer": r["ns_per_transfer"], "gbps": r["gbps"],
                             "msg_rate": r["msg_rate"], "lat_p50_us": r["lat_p50_us"], "load_average": ld})
            print("bench-scaling: %s, at most %d in flight: %s" % (t, n, ", ".join("%d B %.0f ns" % (r["size"], r["ns_per_transfer"])
                                                                                  for r in j["results"])), file=sys.stderr)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.strip()
    res = {"tool": "omniconn bench (bench/scaling.py)", "command": "omniconn bench --transport T --sizes %s --inflight N --duration 0.4" % SIZES,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit or "unknown",
           "load_average_start": load0, "load_average_end": load(),
           "units": {"ns_per_transfer": "1e9 / transfers per second of the throughput phase", "gbps": "1e9 bytes/s"},
           "cpus": os.cpu_count(), "runs": runs}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    plot(runs, a.png)
    print("bench-scaling: wrote %s and %s" % (a.out, a.png), file=sys.stderr)


def plot(runs, png):
    colours = {"local": "#2a9d4b", "shm": "#1f6fb4", "tcp": "#d4541a"}
    g = ["set terminal pngcairo enhanced size 1100,480 font 'DejaVu Sans,11'", "set output '%s'" % png,
         "set multiplot layout 1,2 title 'omniconn bench: cost per transfer (ns = 10^9 / transfers per second), two processes, loopback, "
         "%d CPUs shared'" % (os.cpu_count() or 0), "set logscale xy", "set grid", "set key top left box opaque", "set format y '%g'"]
    for t in TRANSPORTS:
        g.append("$%s_size << EOD" % t)
        g += ["%d %.1f" % (r["size"], r["ns_per_transfer"]) for r in runs if r["transport"] == t and r["inflight"] == 16]
        g.append("EOD")
        g.append("$%s_conc << EOD" % t)
        g += ["%d %.1f" % (r["inflight"], r["ns_per_transfer"]) for r in runs if r["transport"] == t and r["size"] == 4096]
        g.append("EOD")
    g += ["set xlabel 'payload size (bytes)'", "set ylabel 'ns per transfer'", "set title 'against size, at most 16 in flight'",
          "set xtics ('4 KiB' 4096, '64 KiB' 65536, '1 MiB' 1048576, '16 MiB' 16777216)",
          "plot " + ", ".join("$%s_size using 1:2 with linespoints lw 2 pt 7 lc rgb '%s' title '%s'" % (t, colours[t], t) for t in TRANSPORTS)]
    g += ["set xlabel 'transfers in flight (at most)'", "set title 'against transfers in flight, 4 KiB'", "set xtics (1, 4, 16, 64)",
          "set xrange [0.8:80]",
          "plot " + ", ".join("$%s_conc using 1:2 with linespoints lw 2 pt 7 lc rgb '%s' title '%s'" % (t, colours[t], t) for t in TRANSPORTS)]
    g.append("unset multiplot")
    subprocess.run(["gnuplot"], input="\n".join(g) + "\n", text=True, check=True)


if __name__ == "__main__":
    main()
