"""bench_python.py - the Python connector against the C path and against vLLM-Omni's
SharedMemoryConnector design, side by side in one run.

usage: OMNICONN_LIBRARY=build/libomniconn.so python3 bench/bench_python.py [out.json]
       (make bench-python writes bench/results/python.json)
env:   BENCH_PY_QUICK=1      a fast smoke run (few iterations, no 186 MiB row)
       BENCH_PY_ROUNDS=N     alternating rounds (default 5)
       BENCH_PY_ONLY=raw|dict|relay   only those rows (with out.json: the other sections of an
                             existing file are kept)

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

Dict-wrapped rows (what vLLM-Omni's orchestrator and chunk adapter put: a dict around engine
inputs, sampling parameters, metadata and a float32 tensor of 4 KiB, 1 MiB or 64 MiB; "small"
has no tensor). One iteration = put + get with the metadata; the received object is dropped.
  omniconn        OmniconnConnector over SHM: the tree packed with the tensor out of band, the
                  tensor copied once into the pool; get gives a zero-copy view
  omniconn_copy   the same with copy_on_get: the receiver gets its own copy (as the baseline does)
  vllm_shm_design vLLM-Omni's SharedMemoryConnector design re-implemented here: its serializer's
                  shape (msgpack, tensors as aux buffers, header + buffers joined into one bytes),
                  a lock file (flock) and a new /dev/shm segment per request, copy in; the reader
                  locks, maps, copies out, unlinks both, decodes (tensors as views of the bytes)
Ratios: vllm_shm_design / omniconn and / omniconn_copy (time per iteration; > 1 = omniconn faster).

Relay rows (sglang-omni's relay contract: a tensor of 4 KiB, 1 MiB or 64 MiB; one event loop; one
iteration = put_async + get_async into a dest tensor the receiver owns + both waits):
  omniconn_relay     omniconn.sglang_omni.OmniconnRelay over SHM (sender and receiver relays on one
                     channel): one copy into the pool, one copy out into dest
  sglang_shm_design  sglang-omni's shm relay design re-implemented here: per tensor a new
                     multiprocessing SharedMemory segment sized to it, copied in; the receiver opens
                     it by name, copies into dest, closes and unlinks it (credits: a semaphore)
Ratio: sglang_shm_design / omniconn_relay (time per iteration; > 1 = omniconn faster).

Call rows (BENCH_PY_ONLY=calls; what one Python call costs, and what it cost in earlier versions of
the package): python/omniconn/_core.py as it is now and as it was at each git revision in
BENCH_PY_CALLS_REVS (comma-separated; default: the last version whose calls did not hold the
connector open against a concurrent close), each loaded as its own module in this process over the
same library, on a local connector, alternating from round to round:
  get_release   get of a 4 KiB payload with its metadata (put once for many readers) + release
  exists        exists() of a live key
  put_get       put of 4 KiB + metadata-less get + release
Microseconds per call, wall and thread CPU time, medians of the rounds; ratio = revision / now
(> 1: now is cheaper).
"""
import fcntl
import importlib.util
import json
import os
import pickle      # used ONLY by the seed_design baseline below: it is what is being measured
import platform
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("OMNICONN_LIBRARY", os.path.join(ROOT, "build", "libomniconn.so"))

import msgpack                                           # noqa: E402
import numpy as np                                      # noqa: E402
import torch                                             # noqa: E402
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


# ---- dict-wrapped payloads ----------------------------------------------------------------------------
DICT_SIZES = [("small", 0), ("4KiB", 4 * KiB), ("1MiB", MiB)] + ([] if QUICK else [("64MiB", 64 * MiB)])


def dict_iters(size):
    if QUICK:
        return {0: 1000, 4 * KiB: 1000, MiB: 40}.get(size, 3)
    return {0: 10000, 4 * KiB: 10000, MiB: 400}.get(size, 8)


def make_dict(size):
    d = {"request_id": "req-0001", "engine_inputs": {"prompt_token_ids": list(range(32)), "prompt": "hello"},
         "sampling_params": {"temperature": 0.7, "top_p": 0.9, "max_tokens": 128, "stop": ["</s>"]},
         "metadata": {"from_stage": 0, "to_stage": 1, "sent_ts": 1.25}}
    if size:
        d["engine_inputs"]["hidden"] = torch.full((size // 4,), 0.5, dtype=torch.float32)
    return d


def run_omc_dict(obj, iters, copy=False):
    c = OmniconnConnector({"protocol": "shm", "channel": "benchd%d%d" % (os.getpid(), copy), "shm_dir": SHM_DIR,
                           "memory_pool_size": POOL, "copy_on_get": copy})
    try:
        for i in range(iters + 3):
            if i == 3:
                t0, c0 = time.perf_counter(), time.thread_time()
            ok, n, md = c.put("0", "1", "k", obj)
            got, n = c.get("0", "1", "k", md)
            del got
        return (time.perf_counter() - t0) * 1e6 / iters, (time.thread_time() - c0) * 1e6 / iters
    finally:
        c.close()


# vLLM-Omni's SharedMemoryConnector design: its serializer's shape (msgpack; a tensor as [dtype,
# shape, index of an aux buffer], small ones inline; header + main buffer + aux buffers joined
# into one bytes object), then a lock file and a new POSIX shared-memory segment per request.
_AUX_MIN = 256


class _AuxEncoder:
    def encode(self, obj):
        self.bufs = [b""]
        self.bufs[0] = msgpack.packb(obj, default=self._hook, use_bin_type=True)
        return self.bufs

    def _hook(self, obj):
        if isinstance(obj, torch.Tensor):
            arr = obj.flatten().contiguous().view(torch.uint8).numpy()
            if arr.nbytes < _AUX_MIN:
                data = arr.tobytes()
            else:
                self.bufs.append(arr.data)
                data = len(self.bufs) - 1
            return {"__t": [str(obj.dtype)[6:], list(obj.shape), data]}
        raise TypeError(type(obj))


def vllm_design_serialize(obj):
    bufs = _AuxEncoder().encode(obj)
    header = struct.pack("<BI", 0, len(bufs)) + b"".join(struct.pack("<I", len(memoryview(b).cast("B"))) for b in bufs)
    return header + b"".join(bufs)


def vllm_design_deserialize(data):
    n = struct.unpack("<BI", data[:5])[1]
    lens = struct.unpack("<%dI" % n, data[5:5 + 4 * n])
    mv, off, bufs = memoryview(data), 5 + 4 * n, []
    for ln in lens:
        bufs.append(mv[off:off + ln])
        off += ln

    def hook(d):
        t = d.get("__t") if len(d) == 1 else None
        if t is None:
            return d
        dt, shape, data = t
        raw = bufs[data] if isinstance(data, int) else data
        return torch.frombuffer(raw, dtype=torch.uint8).view(getattr(torch, dt)).reshape(shape)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return msgpack.unpackb(bufs[0], object_hook=hook, raw=False)


def vllm_design_put(obj, key):
    payload = vllm_design_serialize(obj)
    with open(os.path.join(SHM_DIR, "shm_%s_lockfile.lock" % key), "wb+") as lf:
        fcntl.flock(lf, fcntl.LOCK_EX)
        shm = shared_memory.SharedMemory(create=True, size=len(payload))
        shm.buf[:len(payload)] = payload
        meta = {"name": shm.name, "size": len(payload)}
        shm.close()
        fcntl.flock(lf, fcntl.LOCK_UN)
    return {"shm": meta, "size": len(payload)}


def vllm_design_get(md, key):
    lock = os.path.join(SHM_DIR, "shm_%s_lockfile.lock" % key)
    with open(lock, "rb+") as lf:
        fcntl.flock(lf, fcntl.LOCK_EX | fcntl.LOCK_NB)
        shm = shared_memory.SharedMemory(name=md["shm"]["name"])
        data = bytes(shm.buf[:md["shm"]["size"]])
        shm.close()
        shm.unlink()
        fcntl.flock(lf, fcntl.LOCK_UN)
    os.remove(lock)
    return vllm_design_deserialize(data), md["size"]


def run_vllm_design_dict(obj, iters):
    for i in range(iters + 3):
        if i == 3:
            t0, c0 = time.perf_counter(), time.thread_time()
        got, n = vllm_design_get(vllm_design_put(obj, "req%d" % i), "req%d" % i)
        del got
    return (time.perf_counter() - t0) * 1e6 / iters, (time.thread_time() - c0) * 1e6 / iters


def dict_rows():
    rows = {}
    for label, size in DICT_SIZES:
        obj = make_dict(size)
        # the two designs decode to the same object
        got, _ = vllm_design_get(vllm_design_put(obj, "check"), "check")
        assert torch.equal(got["engine_inputs"].get("hidden", torch.empty(0)),
                           obj["engine_inputs"].get("hidden", torch.empty(0)))
        it = dict_iters(size)
        base_it = max(3, it // (4 if size >= MiB else 2))
        runs = {"omniconn": lambda: run_omc_dict(obj, it), "omniconn_copy": lambda: run_omc_dict(obj, it, True),
                "vllm_shm_design": lambda: run_vllm_design_dict(obj, base_it)}
        samples = {k: [] for k in runs}
        cpu = {k: [] for k in runs}
        for r in range(ROUNDS):
            order = list(runs.items())
            if r % 2:
                order.reverse()
            for name, fn in order:
                wall, c = fn()
                samples[name].append(wall)
                cpu[name].append(c)
        med = {k: statistics.median(v) for k, v in samples.items()}
        cmed = {k: statistics.median(v) for k, v in cpu.items()}
        row = {"tensor_bytes": size, "iterations": it, "baseline_iterations": base_it,
               "us_per_iteration": {k: round(v, 3) for k, v in med.items()},
               "cpu_us_per_iteration": {k: round(v, 3) for k, v in cmed.items()},
               "samples_us": {k: [round(x, 3) for x in v] for k, v in samples.items()},
               "speedup_vs_vllm_shm_design": round(med["vllm_shm_design"] / med["omniconn"], 2),
               "speedup_copy_vs_vllm_shm_design": round(med["vllm_shm_design"] / med["omniconn_copy"], 2)}
        rows[label] = row
        print("dict %-6s omniconn %10.2f us  omniconn_copy %10.2f us  vllm_shm_design %10.2f us | %.2fx (copy: %.2fx)"
              % (label, med["omniconn"], med["omniconn_copy"], med["vllm_shm_design"],
                 row["speedup_vs_vllm_shm_design"], row["speedup_copy_vs_vllm_shm_design"]), flush=True)
    return rows


# ---- sglang-omni's relay contract ------------------------------------------------------------------------
RELAY_SIZES = [("4KiB", 4 * KiB), ("1MiB", MiB), ("64MiB", 64 * MiB)]


def relay_iters(size):
    if QUICK:
        return {4 * KiB: 500, MiB: 40}.get(size, 2)
    return {4 * KiB: 5000, MiB: 300}.get(size, 6)


async def _relay_loop(put, get, tensor, dest, iters):
    for i in range(iters + 3):
        if i == 3:
            t0, c0 = time.perf_counter(), time.thread_time()
        op = await put(tensor, "req%d" % i)
        g = await get(op.metadata, dest)
        await g.wait_for_completion()
        await op.wait_for_completion()
    return (time.perf_counter() - t0) * 1e6 / iters, (time.thread_time() - c0) * 1e6 / iters


def run_omc_relay(tensor, dest, iters):
    import asyncio
    from omniconn.sglang_omni import OmniconnRelay
    ch = "benchrl%d" % os.getpid()
    tx = OmniconnRelay("w0", protocol="shm", channel=ch, shm_dir=SHM_DIR, memory_pool_size=POOL)
    rx = OmniconnRelay("w1", protocol="shm", channel=ch, shm_dir=SHM_DIR)
    try:
        return asyncio.run(_relay_loop(lambda t, rid: tx.put_async(t, request_id=rid),
                                       lambda md, d: rx.get_async(md, d), tensor, dest, iters))
    finally:
        tx.close()
        rx.close()


class _SegPut:
    """The design's put: the segment is written at creation; completing closes this side's handle."""

    def __init__(self, seg, metadata):
        self.seg, self.metadata = seg, metadata

    async def wait_for_completion(self, timeout=30.0):
        self.seg.close()


class _SegGet:
    """The design's get: open by name, copy into dest, close and unlink (the receiver owns it)."""

    def __init__(self, metadata, dest):
        self.metadata, self.dest = metadata, dest

    async def wait_for_completion(self, timeout=30.0):
        info = self.metadata["transfer_info"]
        seg = shared_memory.SharedMemory(name=info["shm_name"])
        try:
            src = torch.from_numpy(np.ndarray((info["size"],), dtype=np.uint8, buffer=seg.buf))
            self.dest.view(torch.uint8).reshape(-1)[:info["size"]].copy_(src)
            del src
        finally:
            seg.close()
            seg.unlink()


def run_segment_relay(tensor, dest, iters):
    import asyncio

    async def main():
        credits = asyncio.Semaphore(2)

        async def put(t, rid):
            async with credits:
                flat = t.reshape(-1).view(torch.uint8).numpy()
                seg = shared_memory.SharedMemory(create=True, size=flat.nbytes)
                np.ndarray(flat.shape, dtype=np.uint8, buffer=seg.buf)[:] = flat
                return _SegPut(seg, {"engine_id": "w0", "transfer_info": {"shm_name": seg.name, "size": flat.nbytes,
                                                                          "req_id": rid}})

        async def get(md, d):
            return _SegGet(md, d)
        return await _relay_loop(put, get, tensor, dest, iters)
    return asyncio.run(main())


def relay_rows():
    rows = {}
    for label, size in RELAY_SIZES:
        tensor = torch.full((size // 2,), 0.5, dtype=torch.float16)
        dest = torch.zeros(size // 2, dtype=torch.float16)
        for fn in (run_omc_relay, run_segment_relay):      # both deliver the tensor
            dest.zero_()
            fn(tensor, dest, 1)
            assert torch.equal(dest, tensor)
        it = relay_iters(size)
        base_it = max(2, it // (4 if size >= MiB else 2))
        runs = {"omniconn_relay": lambda: run_omc_relay(tensor, dest, it),
                "sglang_shm_design": lambda: run_segment_relay(tensor, dest, base_it)}
        samples = {k: [] for k in runs}
        cpu = {k: [] for k in runs}
        for r in range(ROUNDS):
            order = list(runs.items())
            if r % 2:
                order.reverse()
            for name, fn in order:
                wall, c = fn()
                samples[name].append(wall)
                cpu[name].append(c)
        med = {k: statistics.median(v) for k, v in samples.items()}
        cmed = {k: statistics.median(v) for k, v in cpu.items()}
        row = {"tensor_bytes": size, "iterations": it, "baseline_iterations": base_it,
               "us_per_iteration": {k: round(v, 3) for k, v in med.items()},
               "cpu_us_per_iteration": {k: round(v, 3) for k, v in cmed.items()},
               "gbps": {k: round(size / (v * 1e-6) / 1e9, 3) for k, v in med.items()},
               "samples_us": {k: [round(x, 3) for x in v] for k, v in samples.items()},
               "speedup_vs_sglang_shm_design": round(med["sglang_shm_design"] / med["omniconn_relay"], 2)}
        rows[label] = row
        print("relay %-6s omniconn_relay %10.2f us (cpu %.2f)  sglang_shm_design %10.2f us (cpu %.2f) | %.2fx"
              % (label, med["omniconn_relay"], cmed["omniconn_relay"], med["sglang_shm_design"],
                 cmed["sglang_shm_design"], row["speedup_vs_sglang_shm_design"]), flush=True)
    return rows


CALLS_REVS = os.environ.get("BENCH_PY_CALLS_REVS", "2540a05")
CALLS_N = 2000 if QUICK else 50000


def core_at(rev, tmp):
    """python/omniconn/_core.py at git revision rev, loaded as a module of the package, or None."""
    p = subprocess.run(["git", "-C", ROOT, "show", "%s:python/omniconn/_core.py" % rev], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        print("bench_python: no _core.py at %s: %s" % (rev, p.stderr.strip()), file=sys.stderr)
        return None
    path = os.path.join(tmp, "core_%s.py" % rev.replace("/", "_"))
    with open(path, "w") as f:
        f.write(p.stdout)
    name = "omniconn._core_at_%s" % "".join(c if c.isalnum() else "_" for c in rev)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def time_calls(core, n):
    """One round of the call rows with one version of _core: {row: (wall us, cpu us)} per call."""
    out = {}
    payload = b"x" * (4 * KiB)
    c = core.LocalConnector()
    try:
        meta = c.put("a", "b", "k", payload, readers=1 << 30)
        get, exists, put = c.get, c.exists, c.put
        for _ in range(500):
            get("a", "b", "k", meta).release()

        def get_release():
            for _ in range(n):
                get("a", "b", "k", meta).release()

        def exists_():
            for _ in range(n):
                exists("a", "b", "k")

        def put_get():
            for i in range(n // 4):
                key = "p%d" % (i & 7)
                put("a", "b", key, payload)
                get("a", "b", key).release()

        for name, fn, calls in (("get_release", get_release, n), ("exists", exists_, n), ("put_get", put_get, n // 4)):
            w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            fn()
            out[name] = ((time.perf_counter_ns() - w0) / calls / 1e3, (time.thread_time_ns() - c0) / calls / 1e3)
    finally:
        c.close()
    return out


def call_rows(tmp):
    from omniconn import _core
    cores = {"now": _core}
    for rev in [r.strip() for r in CALLS_REVS.split(",") if r.strip()]:
        m = core_at(rev, tmp)
        if m is not None:
            cores[rev] = m
    samples = {k: [] for k in cores}
    for r in range(max(ROUNDS, 9)):
        order = list(cores) if r % 2 == 0 else list(cores)[::-1]
        for k in order:
            samples[k].append({"load": os.getloadavg()[0], **time_calls(cores[k], CALLS_N)})
    rows = {}
    for name in ("get_release", "exists", "put_get"):
        row = {}
        for k, v in samples.items():
            row[k] = {"us": round(statistics.median(x[name][0] for x in v), 3),
                      "cpu_us": round(statistics.median(x[name][1] for x in v), 3),
                      "samples_us": [round(x[name][0], 3) for x in v], "samples_cpu_us": [round(x[name][1], 3) for x in v]}
        for k in cores:
            if k != "now":
                row[k]["ratio_to_now"] = round(row[k]["us"] / row["now"]["us"], 3)
                row[k]["cpu_ratio_to_now"] = round(row[k]["cpu_us"] / row["now"]["cpu_us"], 3)
        rows[name] = row
        print("%-12s " % name + "  ".join("%s %.2f us (cpu %.2f)" % (k, row[k]["us"], row[k]["cpu_us"]) for k in cores), flush=True)
    return {"rows": rows, "revisions": list(cores), "iterations": CALLS_N, "rounds": max(ROUNDS, 9),
            "loads": [x["load"] for v in samples.values() for x in v]}


def main():
    global SHM_DIR
    out_path = sys.argv[1] if len(sys.argv) > 1 else None
    load0 = os.getloadavg()
    # the connectors' segments in a private directory on /dev/shm's tmpfs: another program's sweep
    # of /dev/shm cannot remove them mid-run
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory(dir="/dev/shm", prefix="omc-benchpy-") as SHM_DIR:
        exe = build_c(tmp)
        rows = {}
        only = os.environ.get("BENCH_PY_ONLY")
        for size in (SIZES if only in (None, "", "raw") else []):
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
        drows = dict_rows() if only in (None, "", "dict") else {}
        rrows = relay_rows() if only in (None, "", "relay") else {}
        crows = call_rows(tmp) if only in (None, "", "calls") else {}
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
        "dict_wrapped": drows,
        "dict_wrapped_what": "a dict around engine inputs, sampling parameters, metadata and a float32 tensor of "
                             "the row's size (small: none); put + get with metadata, the object dropped; "
                             "omniconn (tensor out of band, view on get), omniconn_copy (copy on get), "
                             "vllm_shm_design (vLLM-Omni's SharedMemoryConnector design, re-implemented)",
        "relay": rrows,
        "calls": crows,
        "calls_what": "one call of the Python package, local connector, 4 KiB: get_release (get with metadata + release), "
                      "exists, put_get (put + metadata-less get + release, per pair); python/omniconn/_core.py now and at "
                      "earlier git revisions, each loaded in this process, alternating per round; medians; ratio_to_now > 1: "
                      "now is cheaper",
        "relay_what": "sglang-omni's relay contract, one event loop: put_async of a float16 tensor of the row's size "
                      "+ get_async into a dest tensor + both waits; omniconn_relay (OmniconnRelay over SHM: one copy "
                      "in, one copy out), sglang_shm_design (sglang-omni's shm relay design re-implemented: a "
                      "SharedMemory segment per tensor, copied in, opened, copied out, unlinked)",
    }
    if out_path and only and os.path.exists(out_path):    # one section re-run: keep the others
        with open(out_path) as f:
            old = json.load(f)
        keep = {"raw": "sizes", "dict": "dict_wrapped", "relay": "relay", "calls": "calls"}
        for sec in ("sizes", "dict_wrapped", "relay", "calls"):
            if sec != keep.get(only) and sec in old:
                result[sec] = old[sec]
        this = {"host": result["host"], "rounds": ROUNDS, "quick": QUICK}
        for k in ("host", "rounds", "quick"):           # the kept sections' run stays described as it was
            if k in old:
                result[k] = old[k]
        result["sections_run"] = dict(old.get("sections_run", {}), **{keep.get(only, only): this})
    if out_path:
        with open(out_path, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        print("wrote", out_path)


if __name__ == "__main__":
    main()
