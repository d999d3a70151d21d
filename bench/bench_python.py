"""bench_python.py - the Python connector against the C path and against vLLM-Omni's
SharedMemoryConnector design, side by side in one run.

usage: OMNICONN_LIBRARY=build/libomniconn.so python3 bench/bench_python.py [out.json]
       (make bench-python writes bench/results/python.json)
env:   BENCH_PY_QUICK=1      a fast smoke run (few iterations, no 186 MiB row)
       BENCH_PY_ROUNDS=N     alternating rounds (default 5)

One process, one shared-memory connector in the dual role, per payload size (4 KiB, 1 MiB,
186 MiB), one iteration = put (copy path: one copy into the pool) + get with the metadata (a
zero-copy view; the bytes are not read) + release. Rows:
  c            the same loop in C (a small program compiled from the headers at start-up)
  python       omniconn.ShmConnector: put(numpy array) / get(meta) / release()
  vllm_omni    omniconn.vllm_omni.OmniconnConnector: put(...) -> (ok, size, metadata) /
               get(..., metadata) -> (RawBuffer, size) / release()
  seed_design  vLLM-Omni's SharedMemoryConnector design re-implemented here: pickle the object,
               per request a lock file (flock) and a new /dev/shm segment sized to it, copy in;
               the reader locks, maps, copies out, unlinks both, unpickles.
For every row: microseconds per iteration and GB/s (payload bytes / time). Figures are the
median over BENCH_PY_ROUNDS rounds in which the rows alternate (the machine is shared), in wall
time and in the thread's CPU time (which a loaded machine inflates less).
Derived: the Python overhead per call over C at 4 KiB ((python - c) / 2: two calls per
iteration) and the throughput ratios python / c and python / seed_design.
"""
import fcntl
import json
import os
import pickle      # used ONLY by the seed_design baseline below: it is what is being measured
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("OMNICONN_LIBRARY", os.path.join(ROOT, "build", "libomniconn.so"))

import numpy as np                                      # noqa: E402
from multiprocessing import shared_memory              # noqa: E402
import omniconn                                          # noqa: E402
from omniconn.vllm_omni import OmniconnConnector         # noqa: E402

KiB, MiB = 1024, 1024 * 1024
QUICK = os.environ.get("BENCH_PY_QUICK") == "1"
ROUNDS = int(os.environ.get("BENCH_PY_ROUNDS", "2" if QUICK else "5"))
SIZES = [4 * KiB, 1 * MiB] + ([] if QUICK else [186 * MiB])
POOL = 512 * MiB
SHM_DIR = None      # set by main(): a private directory on /dev/shm


def iters_for(size):
    if QUICK:
        return {4 * KiB: 2000, 1 * MiB: 50}.get(size, 3)
    return {4 * KiB: 20000, 1 * MiB: 400}.get(size, 6)


# ---- the C path -----------------------------------------------------------------------------------
C_SOURCE = r"""
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_shm.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double cpu_us(void) {
    struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}
int main(int argc, char** argv) {
    uint64_t size = strtoull(argv[1], NULL, 10), iters = strtoull(argv[2], NULL, 10), i;
    omc_shm_desc d; omc_conn* c = NULL; omc_payload p; omc_meta m = {0}; omc_buffer b;
    char* src = malloc(size); int64_t t0 = 0; double c0 = 0;
    memset(src, 7, size);
    memset(&d, 0, sizeof d); d.channel = argv[3]; d.pool_size = strtoull(argv[4], NULL, 10); d.shm_dir = argv[5];
    if (omc_shm_create(&d, &c) != OMC_OK) return 1;
    memset(&p, 0, sizeof p); p.data = src; p.size = size;
    for (i = 0; i < iters + 3; i++) {
        if (i == 3) { t0 = omc_now_ns(); c0 = cpu_us(); }   /* three warm-up iterations fault the pool in */
        if (omc_conn_put(c, "a", "b", "k", &p, &m) != OMC_OK) return 2;
        if (omc_conn_get(c, "a", "b", "k", m.data, m.size, OMC_WAIT_FOREVER, &b) != OMC_OK) return 3;
        omc_buffer_release(&b); omc_meta_free(&m);
    }
    printf("%.3f %.3f\n", (double)(omc_now_ns() - t0) / 1e3 / (double)iters, (cpu_us() - c0) / (double)iters);
    omc_conn_destroy(c); free(src);
    return 0;
}
"""


def build_c(tmp):
    src = os.path.join(tmp, "c_path.c")
    exe = os.path.join(tmp, "c_path")
    with open(src, "w") as f:
        f.write(C_SOURCE)
    subprocess.run(["cc", "-std=c99", "-O2", "-I" + ROOT, "-o", exe, src, "-ldl", "-lpthread", "-lm"],
                   check=True)
    return exe


def run_c(exe, size, iters):
    out = subprocess.run([exe, str(size), str(iters), "benchc%d" % os.getpid(), str(POOL), SHM_DIR], check=True,
                         capture_output=True, text=True).stdout
    wall, cpu = out.split()
    return float(wall), float(cpu)


# ---- the Python paths ---------------------------------------------------------------------------------
def run_python(size, iters):
    data = np.full(size, 7, np.uint8)
    with omniconn.ShmConnector(channel="benchpy%d" % os.getpid(), shm_dir=SHM_DIR, pool_size=POOL) as c:
        for i in range(iters + 3):
            if i == 3:
                t0, c0 = time.perf_counter(), time.thread_time()
            meta = c.put("a", "b", "k", data)
            c.get("a", "b", "k", meta, timeout=None).release()
        return (time.perf_counter() - t0) * 1e6 / iters, (time.thread_time() - c0) * 1e6 / iters


def run_vllm(size, iters):
    data = np.full(size, 7, np.uint8)
    c = OmniconnConnector({"protocol": "shm", "channel": "benchvl%d" % os.getpid(), "shm_dir": SHM_DIR,
                           "memory_pool_size": POOL})
    try:
        for i in range(iters + 3):
            if i == 3:
                t0, c0 = time.perf_counter(), time.thread_time()
            ok, n, md = c.put("0", "1", "k", data)
            obj, n = c.get("0", "1", "k", md)
            obj.release()
        return (time.perf_counter() - t0) * 1e6 / iters, (time.thread_time() - c0) * 1e6 / iters
    finally:
        c.close()


# vLLM-Omni's SharedMemoryConnector design (pickle + a /dev/shm segment and a lock file per
# request), re-implemented as the baseline. pickle appears here only because it is the thing being
# measured; nothing in omniconn pickles.
def seed_put(obj, lockdir, n):
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    lock = os.path.join(lockdir, "req%d.lock" % n)
    with open(lock, "w") as lf:
        fcntl.flock(lf, fcntl.LOCK_EX)
        shm = shared_memory.SharedMemory(create=True, size=len(payload))
        shm.buf[:len(payload)] = payload
        name = shm.name
        shm.close()
        fcntl.flock(lf, fcntl.LOCK_UN)
    return {"shm": {"name": name, "size": len(payload), "lock": lock}}


def seed_get(meta):
    m = meta["shm"]
    with open(m["lock"], "r") as lf:
        fcntl.flock(lf, fcntl.LOCK_EX)
        shm = shared_memory.SharedMemory(name=m["name"])
        data = bytes(shm.buf[:m["size"]])
        shm.close()
        shm.unlink()
        fcntl.flock(lf, fcntl.LOCK_UN)
    os.unlink(m["lock"])
    return pickle.loads(data)


def run_seed(size, iters):
    data = np.full(size, 7, np.uint8)
    with tempfile.TemporaryDirectory() as lockdir:
        for i in range(iters + 3):
            if i == 3:
                t0, c0 = time.perf_counter(), time.thread_time()
            obj = seed_get(seed_put(data, lockdir, i))
            del obj
        return (time.perf_counter() - t0) * 1e6 / iters, (time.thread_time() - c0) * 1e6 / iters


def main():
    global SHM_DIR
    out_path = sys.argv[1] if len(sys.argv) > 1 else None
    load0 = os.getloadavg()
    # the connectors' segments in a private directory on /dev/shm's tmpfs: another program's sweep
    # of /dev/shm cannot remove them mid-run
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory(dir="/dev/shm", prefix="omc-benchpy-") as SHM_DIR:
        exe = build_c(tmp)
        rows = {}
        for size in SIZES:
            it = iters_for(size)
            seed_it = max(2, it // (4 if size >= MiB else 2))
            samples = {"c": [], "python": [], "vllm_omni": [], "seed_design": []}
            cpu = {k: [] for k in samples}
            for r in range(ROUNDS):
                order = [("c", lambda: run_c(exe, size, it)), ("python", lambda: run_python(size, it)),
                         ("vllm_omni", lambda: run_vllm(size, it)), ("seed_design", lambda: run_seed(size, seed_it))]
                if r % 2:
                    order.reverse()
                for name, fn in order:
                    wall, c = fn()
                    samples[name].append(wall)
                    cpu[name].append(c)
            med = {k: statistics.median(v) for k, v in samples.items()}
            cmed = {k: statistics.median(v) for k, v in cpu.items()}
            row = {"bytes": size, "iterations": it, "seed_design_iterations": seed_it,
                   "us_per_iteration": {k: round(v, 3) for k, v in med.items()},
                   "gbps": {k: round(size / (v * 1e-6) / 1e9, 3) for k, v in med.items()},
                   "samples_us": {k: [round(x, 3) for x in v] for k, v in samples.items()},
                   "cpu_us_per_iteration": {k: round(v, 3) for k, v in cmed.items()}}
            row["python_over_c_per_call_us"] = round((med["python"] - med["c"]) / 2, 3)
            row["vllm_omni_over_c_per_call_us"] = round((med["vllm_omni"] - med["c"]) / 2, 3)
            row["python_over_c_per_call_cpu_us"] = round((cmed["python"] - cmed["c"]) / 2, 3)
            row["vllm_omni_over_c_per_call_cpu_us"] = round((cmed["vllm_omni"] - cmed["c"]) / 2, 3)
            row["python_vs_c_throughput"] = round(med["c"] / med["python"], 3)
            row["vllm_omni_vs_c_throughput"] = round(med["c"] / med["vllm_omni"], 3)
            row["python_vs_seed_design_speedup"] = round(med["seed_design"] / med["python"], 2)
            row["vllm_omni_vs_seed_design_speedup"] = round(med["seed_design"] / med["vllm_omni"], 2)
            rows[str(size)] = row
            print("%10d B  c %9.2f us  python %9.2f us  vllm_omni %9.2f us  seed %10.2f us | "
                  "per call over c: py %6.2f us, vllm %6.2f us (cpu: %.2f, %.2f)  py/c thr %.3f  py vs seed %.1fx" %
                  (size, med["c"], med["python"], med["vllm_omni"], med["seed_design"],
                   row["python_over_c_per_call_us"], row["vllm_omni_over_c_per_call_us"],
                   row["python_over_c_per_call_cpu_us"], row["vllm_omni_over_c_per_call_cpu_us"],
                   row["python_vs_c_throughput"], row["python_vs_seed_design_speedup"]), flush=True)
    result = {
        "benchmark": "bench/bench_python.py",
        "what": "one process, SHM connector (dual), iteration = put (copy into pool) + get with metadata "
                "(zero-copy view, bytes not read) + release; medians of alternating rounds; us_per_iteration "
                "is wall time, cpu_us_per_iteration the thread's CPU time (less sensitive to a loaded machine)",
        "rounds": ROUNDS, "quick": QUICK,
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
                 "numpy": np.__version__, "omniconn": omniconn.version(), "loadavg_start": load0,
                 "loadavg": os.getloadavg()},
        "sizes": rows,
    }
    if out_path:
        with open(out_path, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        print("wrote", out_path)


if __name__ == "__main__":
    main()
