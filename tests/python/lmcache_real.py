"""LMCache's own storage backends, unchanged, storing in omniconn's store through
omniconn.lmcache.OmniconnConnectorAdapter, loaded as LMCache loads a remote storage plug-in.

usage: LMCACHE_SRC=/tmp/LMCache OMNICONN_LIBRARY=build/libomniconn.so \\
           /usr/bin/python3 tests/python/lmcache_real.py
Not part of CI: LMCache cannot be installed here. LMCACHE_SRC is a copy of its source tree with
the v1 engine (lmcache/v1/storage_backend/...); its revision (LMCACHE_SRC/REVISION, or `git
rev-parse HEAD` for a checkout) is printed. A real redis-server is started on a private port.

What is replaced, and nothing else:
  - on Debian 12's torch 1.13, torch.dtype.itemsize (torch >= 2.1) is added as the element size;
  - third-party modules missing on Debian that the remote path never calls get a stand-in only
    if they are in STANDINS below, each with the reason it is safe; a stand-in module raises on
    any attribute it does not define, so a call that did need it fails loudly. Any other missing
    module ends the run naming it (install its Debian package: python3-<name>).
No class or function of LMCache is replaced: LMCache builds its CPU backend and its
RemoteBackend from its own config (CreateStorageBackends), RemoteBackend calls CreateConnector,
whose ConnectorManager loads our adapter from remote_storage_plugins / extra_config.

What runs (two processes, one stores, another retrieves): the storing process allocates
MemoryObjs from LMCache's LocalCPUBackend (KV_2LTD float16 chunks and a bfloat16 one), stores
them through RemoteBackend.submit_put_task and batched_submit_put_task (naive serde), waits for
RemoteBackend.contains to see each, gets each back (get_blocking, batched_get_blocking) and
compares every byte; the retrieving process (this script with "get") builds its own LMCache
backends on the same config and checks batched_async_contains, get_blocking and
batched_get_blocking against the SHA-256 digests the storer sent (JSON on stdin, nothing
pickled); both ask for a key never stored (None / False / 0) and close. Then, in the storing
process, an entry cut short and a redis-server killed: RemoteBackend answers with misses, keeps
nothing allocated and does not hang. One line per check;
"lmcache_real: N passed, M failed" at the end; exit 1 if any failed.
"""
import asyncio
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import inspect
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
WAIT = 60
CHUNK, LAYERS, HEADS, HEAD_SIZE = 256, 4, 8, 64
MODEL = "omniconn/lmcache-real"


# ---- stand-ins for what this machine lacks ---------------------------------------------------------
def _nvtx():
    """nvtx: profiler markers (utils._lmcache_nvtx_annotate wraps methods at import). A no-op
    decorator changes no behaviour."""
    m = types.ModuleType("nvtx")

    def annotate(*a, **k):
        return lambda f: f
    m.annotate = annotate
    return m


def _c_ops():
    """lmcache.c_ops: LMCache's compiled CUDA/C++ kernels (GPU KV copies, cachegen). Imported at
    the top of memory_management; the CPU allocator and the remote path with the naive serde do
    not call it. Every attribute raises, so a call that needs it fails loudly."""
    m = types.ModuleType("lmcache.c_ops")

    def missing(name):
        raise AttributeError("lmcache.c_ops.%s: LMCache's compiled kernels are not built here "
                             "(a path that needs them is not the remote path under test)" % name)
    m.__getattr__ = missing
    return m


def _torch_gaps():
    """Debian 12's torch (1.13) lacks torch.dtype.itemsize (torch >= 2.1), which LMCache's
    allocator uses for sizes: added as the element size, the same number. torch.dtype is an
    immutable C type, so the property goes into its dict directly."""
    import torch
    if hasattr(torch.float16, "itemsize"):
        return []
    import ctypes
    import gc
    gc.get_referents(torch.dtype.__dict__)[0]["itemsize"] = property(
        lambda d: torch.tensor([], dtype=d).element_size())
    ctypes.pythonapi.PyType_Modified(ctypes.py_object(torch.dtype))
    return ["torch.dtype.itemsize"]


STANDINS = {"nvtx": _nvtx, "lmcache.c_ops": _c_ops}
STOOD_IN = []


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name not in STANDINS:
            return None
        for finder in sys.meta_path:        # the real module wins where it exists
            if finder is self:
                continue
            try:
                spec = finder.find_spec(name, path, target)
            except Exception:
                spec = None
            if spec is not None:
                return None
        return importlib.machinery.ModuleSpec(name, self)

    def create_module(self, spec):
        STOOD_IN.append(spec.name)
        return STANDINS[spec.name]()

    def exec_module(self, module):
        pass


# ---- results -----------------------------------------------------------------------------------------
class Checks:
    def __init__(self, who):
        self.who, self.passed, self.failed = who, 0, 0

    def check(self, ok, what):
        print("[%s] %s: %s" % (self.who, "ok" if ok else "FAILED", what), flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        return ok


def _digest(obj):
    return hashlib.sha256(bytes(memoryview(obj.byte_array).cast("B"))).hexdigest()


def _refs(obj):
    """A MemoryObj's reference count where this LMCache exposes it (None elsewhere)."""
    fn = getattr(obj, "get_ref_count", None)
    return fn() if fn else None


def _fill(obj, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    view = memoryview(obj.byte_array).cast("B")
    data = torch.randint(0, 256, (len(view),), dtype=torch.uint8, generator=g).numpy().tobytes()
    view[:] = data


def _wait_until(pred, what):
    """Poll a condition (the event: RemoteBackend's own view changing), bounded by WAIT."""
    until = time.monotonic() + WAIT
    while not pred():
        if time.monotonic() > until:
            raise TimeoutError(what)
        time.sleep(0.005)


# ---- LMCache, built from its own config ------------------------------------------------------------
def _accepts(fn, **offered):
    """The offered keyword arguments that fn takes (LMCache's signatures move between releases)."""
    params = inspect.signature(fn).parameters
    return {k: v for k, v in offered.items() if k in params}


def _config(port, external=False):
    from lmcache.v1.config import LMCacheEngineConfig
    url = ("external://127.0.0.1:%d/omniconn.lmcache/?connector_name=OmniconnRemoteConnector&stage=lmcache-real" % port
           if external else "omniconn://127.0.0.1:%d?stage=lmcache-real" % port)
    fields = dict(chunk_size=CHUNK, local_cpu=True, max_local_cpu_size=0.25, local_disk=None,
                  max_local_disk_size=0, remote_url=url,
                  remote_serde="naive", remote_storage_plugins=["omniconn"],
                  extra_config={"remote_storage_plugin.omniconn.module_path": "omniconn.lmcache",
                                "remote_storage_plugin.omniconn.class_name": "OmniconnConnectorAdapter"})
    try:
        config = LMCacheEngineConfig.from_defaults(**fields)
    except TypeError:                       # an older from_defaults: set what it did not take
        config = LMCacheEngineConfig.from_defaults(**_accepts(LMCacheEngineConfig.from_defaults, **fields))
    for k, v in fields.items():
        setattr(config, k, v)
    return config


def _metadata():
    import torch
    try:
        from lmcache.config import LMCacheEngineMetadata as Metadata
    except ImportError:
        from lmcache.v1.metadata import LMCacheMetadata as Metadata
    offered = dict(model_name=MODEL, world_size=1, worker_id=0, fmt="vllm", kv_dtype=torch.float16,
                   kv_shape=(LAYERS, 2, CHUNK, HEADS, HEAD_SIZE), use_mla=False)
    return Metadata(**_accepts(Metadata, **offered))


def _allocator():
    import torch
    from lmcache.v1 import memory_management as mm
    if hasattr(mm, "HostMemoryAllocator"):     # unpinned host memory: pinning needs CUDA
        return mm.HostMemoryAllocator(256 << 20)
    return mm.TensorMemoryAllocator(torch.empty(256 << 20, dtype=torch.uint8))


class Engine:
    """LMCache's storage backends for one process: LocalCPUBackend and RemoteBackend."""

    def __init__(self, port, external=False):
        from lmcache.v1.storage_backend import CreateStorageBackends
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.config, self.metadata = _config(port, external), _metadata()
        self.allocator = _allocator()
        kw = _accepts(CreateStorageBackends, config=self.config, metadata=self.metadata, loop=self.loop,
                      memory_allocator=self.allocator, dst_device="cpu")
        self.backends = CreateStorageBackends(**kw)
        names = {type(b).__name__: b for b in self.backends.values()}
        self.cpu, self.remote = names.get("LocalCPUBackend"), names.get("RemoteBackend")
        if self.cpu is None or self.remote is None:
            raise RuntimeError("LMCache built %s, not a LocalCPUBackend and a RemoteBackend" % sorted(names))

    def allocated(self):
        """Bytes LMCache's allocator has handed out (None where it does not say)."""
        a = getattr(self.allocator, "allocator", self.allocator)
        return getattr(a, "total_allocated_size", None)

    def connector(self):
        c = self.remote.connection
        return c.getWrappedConnector() if hasattr(c, "getWrappedConnector") else c

    def key(self, i):
        from lmcache.utils import CacheEngineKey
        h = (0x9e3779b97f4a7c15 * (i + 1)) & (2 ** 64 - 1)
        try:
            return CacheEngineKey.from_string("vllm@%s@1@0@%x@half" % (MODEL, h))
        except (ValueError, KeyError, TypeError):          # an LMCache whose keys have 5 fields
            return CacheEngineKey.from_string("vllm@%s@1@0@%x" % (MODEL, h))

    def allocate(self, shape, dtype, fmt_name="KV_2LTD"):
        import torch
        from lmcache.v1.memory_management import MemoryFormat
        obj = self.cpu.allocate(torch.Size(shape), dtype, getattr(MemoryFormat, fmt_name))
        if obj is None:
            raise RuntimeError("LMCache's LocalCPUBackend had no room for %r" % (shape,))
        return obj

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(WAIT)

    def close(self):
        for b in self.backends.values():
            try:
                b.close()
            except Exception as e:
                print("close %s: %r" % (type(b).__name__, e))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT)


# ---- the two processes -------------------------------------------------------------------------------
def store(port):
    import torch
    from omniconn.lmcache import OmniconnRemoteConnector
    c = Checks("store")
    eng = Engine(port)
    conn = eng.connector()
    c.check(isinstance(conn, OmniconnRemoteConnector), "RemoteBackend's connector is %r (loaded as a plug-in)" % conn)
    shape = (2, LAYERS, CHUNK, HEADS * HEAD_SIZE)
    keys = [eng.key(i) for i in range(6)]
    objs = [eng.allocate(shape, torch.float16) for _ in range(5)] + [eng.allocate(shape, torch.bfloat16)]
    for i, o in enumerate(objs):
        _fill(o, i)
    digests = [_digest(o) for o in objs]
    refs = [_refs(o) for o in objs]
    futs = [eng.remote.submit_put_task(k, o) for k, o in zip(keys[:3], objs[:3])]
    for f in futs:
        if f is not None:
            f.result(WAIT)
    c.check([_refs(o) for o in objs[:3]] == refs[:3], "submit_put_task: reference counts as before (%s)" % refs[:3])
    eng.remote.batched_submit_put_task(keys[3:], objs[3:])
    _wait_until(lambda: all(eng.remote.contains(k) for k in keys), "RemoteBackend.contains for every key")
    c.check(True, "RemoteBackend.contains sees all %d keys after submit_put_task / batched_submit_put_task" % len(keys))
    before = eng.allocated()
    for k, d in zip(keys, digests):
        got = eng.remote.get_blocking(k)
        c.check(got is not None and _digest(got) == d and tuple(got.get_shape()) == shape,
                "get_blocking %s: every byte" % k.to_string())
        if got is not None:
            got.ref_count_down()
    got = eng.remote.batched_get_blocking(keys)
    c.check([_digest(g) if g is not None else None for g in got] == digests, "batched_get_blocking: every byte of 6")
    for g in got:
        if g is not None:
            g.ref_count_down()
    c.check(eng.allocated() == before, "every MemoryObj a get allocated went back to LMCache's allocator "
            "(%s bytes handed out before, %s after)" % (before, eng.allocated()))
    missing = eng.key(1000)
    c.check(eng.remote.get_blocking(missing) is None and not eng.remote.contains(missing),
            "a key never stored: None / False")
    try:                                        # LMCache's external:// loader, same store, same keys
        ext = Engine(port, external=True)
    except Exception as e:
        c.check(False, "an LMCache RemoteBackend on the external:// URL: %r" % e)
    else:
        c.check(isinstance(ext.connector(), OmniconnRemoteConnector), "external:// gives %r" % ext.connector())
        got = ext.remote.get_blocking(keys[0])
        c.check(got is not None and _digest(got) == digests[0], "get_blocking through external://: every byte")
        ext.close()
    return eng, c, [k.to_string() for k in keys], digests


def bad_input(eng, c, redis_proc):
    """A corrupted entry and a store that went away, through LMCache's own RemoteBackend: misses
    (None / False / 0), nothing left allocated, no hang."""
    import torch
    from omniconn.store import READERS_CACHE
    conn = eng.connector()
    k = eng.key(2000)
    o = eng.allocate((2, LAYERS, CHUNK, HEADS * HEAD_SIZE), torch.float16)
    _fill(o, 99)
    f = eng.remote.submit_put_task(k, o)
    if f is not None:
        f.result(WAIT)
    _wait_until(lambda: eng.remote.contains(k), "the entry to corrupt")
    skey = k.to_string()
    with conn.conn.get(conn.stage, "kv", skey, timeout=0) as b:
        entry = bytearray(b.to_bytes())
    conn.conn.cleanup(conn.stage, "kv", skey)
    conn.conn.put(conn.stage, "kv", skey, bytes(entry[:-100]), readers=READERS_CACHE)     # cut short
    before = eng.allocated()
    c.check(eng.remote.get_blocking(k) is None and eng.allocated() == before,
            "a truncated entry: get_blocking None, nothing left allocated")
    c.check(not eng.remote.contains(k) and conn.unreadable_entries == 1, "the truncated entry was dropped")
    redis_proc.kill()
    redis_proc.wait()
    t0 = time.monotonic()
    c.check(not eng.remote.contains(eng.key(0)), "store gone: contains False")
    c.check(eng.remote.get_blocking(eng.key(0)) is None, "store gone: get_blocking None")
    c.check(eng.remote.batched_get_blocking([eng.key(0), eng.key(1)]) == [None, None],
            "store gone: batched_get_blocking [None, None]")
    c.check(time.monotonic() - t0 < WAIT, "store gone: answered in %.3f s" % (time.monotonic() - t0))


def retrieve(port, keys, digests):
    from lmcache.utils import CacheEngineKey
    c = Checks("get")
    eng = Engine(port)
    ks = [CacheEngineKey.from_string(k) for k in keys]
    if asyncio.iscoroutinefunction(getattr(eng.remote, "batched_async_contains", None)):
        n = eng.run(eng.remote.batched_async_contains("lookup-0", ks + [eng.key(1000)]))
        c.check(n == len(ks), "batched_async_contains: %d of %d (prefix, then the missing key)" % (n, len(ks)))
    for k, d in zip(ks, digests):
        got = eng.remote.get_blocking(k)
        c.check(got is not None and _digest(got) == d, "get_blocking %s in another process: every byte" % k.to_string())
    got = eng.remote.batched_get_blocking(ks)
    c.check([_digest(g) if g is not None else None for g in got] == digests, "batched_get_blocking in another process")
    c.check(eng.remote.get_blocking(eng.key(1000)) is None, "a key never stored: None")
    eng.close()
    c.check(True, "RemoteBackend.close")
    return c


# ---- redis-server and the driver ---------------------------------------------------------------------
def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _redis():
    exe = shutil.which("redis-server")
    if not exe:
        sys.exit("redis-server is not installed (Debian package redis-server)")
    d = tempfile.mkdtemp(prefix="omc-lmcache-real-")
    port = _free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", d, "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def pong():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False
    _wait_until(lambda: pong() or proc.poll() is not None, "redis-server to answer PING")
    return proc, port, d


def _revision(src):
    try:
        with open(os.path.join(src, "REVISION")) as f:
            return f.read().strip()
    except OSError:
        pass
    try:
        return subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=30).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _setup():
    src = os.environ.get("LMCACHE_SRC")
    if not src or not os.path.isdir(os.path.join(src, "lmcache", "v1", "storage_backend", "connector")):
        sys.exit("set LMCACHE_SRC to a copy of LMCache's source with lmcache/v1/storage_backend/connector/")
    sys.path.insert(0, src)
    sys.meta_path.insert(0, _StandInFinder())
    STOOD_IN.extend(_torch_gaps())
    return src


def main():
    src = _setup()
    if len(sys.argv) > 2 and sys.argv[1] == "get":
        msg = json.loads(sys.stdin.read())
        c = retrieve(int(sys.argv[2]), msg["keys"], msg["digests"])
        print(json.dumps({"passed": c.passed, "failed": c.failed, "stood_in": STOOD_IN}))
        sys.exit(0 if c.failed == 0 else 1)
    print("LMCache %s at %s" % (_revision(src), src))
    proc, port, d = _redis()
    passed = failed = 0
    try:
        try:
            eng, c, keys, digests = store(port)
        except Exception:
            traceback.print_exc()
            print("lmcache_real: 0 passed, 1 failed (the storing process stopped: see above)")
            sys.exit(1)
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "get", str(port)],
                             input=json.dumps({"keys": keys, "digests": digests}), capture_output=True, text=True,
                             timeout=WAIT * 4, env=dict(os.environ))
        sys.stdout.write(out.stdout.rsplit("\n", 2)[0] + "\n" if out.stdout.strip() else "")
        try:
            res = json.loads(out.stdout.strip().rsplit("\n", 1)[-1])
            passed, failed = res["passed"], res["failed"]
        except (ValueError, KeyError, IndexError):
            sys.stdout.write(out.stderr[-4000:])
            failed = 1
        c.check(out.returncode == 0, "the retrieving process exited with 0 (%d)" % out.returncode)
        try:
            bad_input(eng, c, proc)
        except Exception as e:
            traceback.print_exc()
            c.check(False, "bad input through RemoteBackend raised %r" % e)
        eng.close()
        c.check(True, "RemoteBackend.close")
        passed, failed = passed + c.passed, failed + c.failed
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(d, True)
    print("stand-ins used: %s" % (", ".join(STOOD_IN) or "none"))
    print("lmcache_real: %d passed, %d failed" % (passed, failed))
    sys.exit(0 if failed == 0 else 1)


if __name__ == "__main__":
    main()
