"""vLLM-Omni's own MooncakeTransferEngineConnector, unchanged, on omniconn.mooncake.TransferEngine.

usage: VLLM_OMNI_SRC=/path/to/vllm-omni OMNICONN_LIBRARY=build/libomniconn.so \\
           /usr/bin/python3 tests/python/mooncake_real.py
Not part of CI: vLLM-Omni cannot be installed here. VLLM_OMNI_SRC is a copy of its source tree
(at least vllm_omni/distributed/omni_connectors/{connectors/base.py,
connectors/mooncake_transfer_engine_connector.py, utils/logging.py, utils/memory_pool.py,
utils/serialization.py}); a file VLLM_OMNI_SRC/REVISION, or `git rev-parse HEAD` when it is a
checkout, names the revision, which is printed.

What is replaced, and nothing else:
  - mooncake.engine is omniconn.mooncake (sys.modules), the one-line swap the package promises;
  - the package __init__ files of vllm_omni, .distributed, .omni_connectors, .connectors and
    .utils are skipped (empty namespace modules over the source directories): they import the
    whole engine and every other connector;
  - third-party modules missing on Debian get small stand-ins: vllm.logger (a standard logger),
    vllm.v1.serial_utils (MsgpackEncoder/Decoder on python3-msgpack, tensors as
    (dtype, shape, bytes), the form vLLM-Omni's OmniSerializer post-processes; dataclasses as a map
    of their fields, as msgspec encodes them) and msgspec
    (msgspec.msgpack.encode/decode of the connector's dataclasses, on python3-msgpack);
  - Debian 12's torch (1.13, CPU-only) lacks Tensor.nbytes (torch >= 2.1; added as numel *
    element_size) and raises in Tensor.pin_memory() (without CUDA it returns the tensor itself:
    pinning is for GPU DMA, nothing the TCP transport uses).
No class or function of vLLM-Omni is replaced; their module runs as published.

What runs, protocol "tcp" on 127.0.0.1, two processes: this process builds a connector with role
"sender", put()s bytes (1 B to 3 MiB), CPU tensors (float32, a transposed one, bfloat16) and a
dict (their serialized path); a second process (this script with "recv") builds a connector with
role "receiver" (sender_host / sender_zmq_port set) and get()s each payload by the metadata its
put returned, some with no metadata (the connector asks the sender), some with the sender's
address only; it checks every byte by SHA-256, then asks again for a consumed key and for a key
never put (both must return None, not hang or crash); eight more are pulled by 4 receiver
threads at once (the sender answers from its 4 workers, so batch_transfer_sync_write runs
concurrently on one engine). Both close(); a peer's write into the receiver's pool is accepted
before its close() and refused after. Metadata crosses the processes as msgpack. One line per check; exit 1 if any failed.
"""
import dataclasses
import hashlib
import importlib
import logging
import os
import socket
import subprocess
import sys
import types
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

CONNECTOR = "vllm_omni.distributed.omni_connectors.connectors.mooncake_transfer_engine_connector"
POOL = 64 << 20
FROM, TO = "0", "1"


# ---- stand-ins for what this machine lacks ---------------------------------------------------
def _have(name):
    try:
        importlib.import_module(name)
        return True
    except ImportError:
        return False


def _standin_vllm():
    """vllm.logger and vllm.v1.serial_utils: what vLLM-Omni's connector modules import from vLLM."""
    if _have("vllm.logger") and _have("vllm.v1.serial_utils"):
        return []
    import msgpack
    import torch

    class MsgpackEncoder:
        def encode(self, obj):
            return [msgpack.packb(obj, default=self.enc_hook, use_bin_type=True)]

        def enc_hook(self, obj):
            if isinstance(obj, torch.Tensor):
                t = obj.contiguous().cpu()
                return (str(t.dtype).replace("torch.", ""), list(t.shape), t.view(torch.uint8).numpy().tobytes())
            if dataclasses.is_dataclass(obj) and not isinstance(obj, type):     # msgspec: a map of the fields
                return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
            raise TypeError("stand-in MsgpackEncoder cannot encode %r" % type(obj))

    class MsgpackDecoder:
        def __init__(self, t=None):
            self.t = t

        def decode(self, bufs):
            buf = bufs[0] if isinstance(bufs, (list, tuple)) else bufs
            obj = msgpack.unpackb(bytes(buf), raw=False)
            return self.dec_hook(self.t, obj) if self.t is not None else obj

        def dec_hook(self, t, obj):
            return obj

    vllm = types.ModuleType("vllm")
    vllm.__path__ = []
    vlog = types.ModuleType("vllm.logger")
    vlog.init_logger = logging.getLogger
    v1 = types.ModuleType("vllm.v1")
    v1.__path__ = []
    su = types.ModuleType("vllm.v1.serial_utils")
    su.MsgpackEncoder, su.MsgpackDecoder = MsgpackEncoder, MsgpackDecoder
    sys.modules.update({"vllm": vllm, "vllm.logger": vlog, "vllm.v1": v1, "vllm.v1.serial_utils": su})
    return ["vllm.logger", "vllm.v1.serial_utils"]


def _standin_msgspec():
    """msgspec.msgpack.encode(dataclass) / decode(buf, type=dataclass): a map of the fields, as
    msgspec encodes a dataclass; decode checks the fields are there."""
    if _have("msgspec.msgpack"):
        return []
    import msgpack

    class ValidationError(ValueError):
        pass

    def encode(obj):
        if dataclasses.is_dataclass(obj):
            obj = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        return msgpack.packb(obj, use_bin_type=True)

    def decode(buf, type=None):
        obj = msgpack.unpackb(bytes(buf), raw=False)
        if type is None or not dataclasses.is_dataclass(type):
            return obj
        if not isinstance(obj, dict):
            raise ValidationError("expected a map for %s" % type.__name__)
        missing = [f.name for f in dataclasses.fields(type) if f.name not in obj]
        if missing:
            raise ValidationError("%s: missing %s" % (type.__name__, missing))
        return type(**{f.name: obj[f.name] for f in dataclasses.fields(type)})

    ms = types.ModuleType("msgspec")
    ms.__path__ = []
    mp = types.ModuleType("msgspec.msgpack")
    mp.encode, mp.decode = encode, decode
    ms.msgpack, ms.ValidationError = mp, ValidationError
    sys.modules.update({"msgspec": ms, "msgspec.msgpack": mp})
    return ["msgspec"]


def _standin_torch():
    """Debian 12's torch is 1.13, CPU-only: Tensor.nbytes (torch >= 2.1) is numel * element_size,
    and pin_memory() (page-locking for GPU DMA, nothing TCP uses) returns the tensor itself."""
    import torch
    out = []
    if not hasattr(torch.Tensor, "nbytes"):
        torch.Tensor.nbytes = property(lambda self: self.numel() * self.element_size())
        out.append("torch.Tensor.nbytes (torch %s)" % torch.__version__)
    if not torch.cuda.is_available():
        torch.Tensor.pin_memory = lambda self, *a, **k: self
        out.append("torch.Tensor.pin_memory (CPU-only torch)")
    return out


def _install_omniconn_as_mooncake():
    import omniconn.mooncake as om
    pkg = types.ModuleType("mooncake")
    pkg.__path__ = []
    pkg.engine = om
    sys.modules["mooncake"], sys.modules["mooncake.engine"] = pkg, om


def load_connector(src):
    pkg_root = os.path.join(src, "vllm_omni")
    for name, rel in (("vllm_omni", ""), ("vllm_omni.distributed", "distributed"),
                      ("vllm_omni.distributed.omni_connectors", "distributed/omni_connectors"),
                      ("vllm_omni.distributed.omni_connectors.connectors", "distributed/omni_connectors/connectors"),
                      ("vllm_omni.distributed.omni_connectors.utils", "distributed/omni_connectors/utils")):
        m = types.ModuleType(name)
        m.__path__ = [os.path.join(pkg_root, rel)]
        sys.modules[name] = m
    standins = _standin_vllm() + _standin_msgspec() + _standin_torch()
    _install_omniconn_as_mooncake()
    mod = importlib.import_module(CONNECTOR)
    return mod, standins


# ---- payloads -----------------------------------------------------------------------------------
def _sha(b):
    return hashlib.sha256(bytes(b)).hexdigest()


def _tensor_bytes(t):
    import torch
    return t.contiguous().view(torch.uint8).numpy().tobytes()


def payloads():
    """(key, data, how the receiver asks, what it checks)."""
    import torch
    g = torch.Generator().manual_seed(7)
    rnd = lambda n: torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g).numpy().tobytes()  # noqa: E731
    out = []
    for n in (1, 4095, 4096, 4097, 65537, 3 << 20):
        out.append(("bytes-%d" % n, rnd(n), "metadata"))
    f32 = torch.rand(256, 1024, generator=g)                         # 1 MiB
    out.append(("tensor-f32", f32, "metadata"))
    out.append(("tensor-f32-transposed", torch.rand(300, 517, generator=g).t(), "metadata"))
    out.append(("tensor-bf16", torch.rand(7, 333, generator=g).to(torch.bfloat16), "metadata"))
    out.append(("dict", {"prompt_token_ids": list(range(50)), "text": "a prompt", "hidden": torch.rand(4, 64, generator=g)},
                "metadata"))
    out.append(("bytes-nometa", rnd(2 << 20), "none"))
    out.append(("tensor-nometa", torch.rand(64, 64, generator=g), "none"))
    out.append(("bytes-partial", rnd(100000), "partial"))
    for i in range(8):                    # pulled by 4 receiver threads at once; the sender's 4 workers write
        out.append(("conc-%d" % i, rnd((256 << 10) + i * (160 << 10) + i), "threads"))
    return out


def expected(data):
    import torch
    if isinstance(data, bytes):
        return {"kind": "bytes", "sha": _sha(data), "n": len(data)}
    if isinstance(data, torch.Tensor):
        return {"kind": "tensor", "sha": _sha(_tensor_bytes(data)), "n": data.nbytes,
                "dtype": str(data.dtype).replace("torch.", ""), "shape": list(data.shape)}
    return {"kind": "dict", "ids": data["prompt_token_ids"], "text": data["text"],
            "hidden": _sha(_tensor_bytes(data["hidden"])), "shape": list(data["hidden"].shape)}


# ---- the receiver process ---------------------------------------------------------------------
def check_one(mod, conn, key, task):
    """One get() as a vLLM-Omni stage would do it; returns (ok, what)."""
    import torch
    how, exp = task["how"], task["expect"]
    if how in ("metadata", "threads"):
        got = conn.get(FROM, TO, key, metadata=task["metadata"])
    elif how == "partial":
        got = conn.get(FROM, TO, key, metadata={"source_host": task["metadata"]["source_host"],
                                                 "source_port": task["metadata"]["source_port"]})
    else:
        got = conn.get(FROM, TO, key)
    if got is None:
        return False, "get returned None"
    data, size = got
    if exp["kind"] == "dict":
        ok = (isinstance(data, dict) and data.get("prompt_token_ids") == exp["ids"] and data.get("text") == exp["text"]
              and isinstance(data.get("hidden"), torch.Tensor) and list(data["hidden"].shape) == exp["shape"]
              and _sha(_tensor_bytes(data["hidden"])) == exp["hidden"])
        return ok, "dict (deserialized, %d B on the wire)%s" % (size, "" if ok else ": content differs")
    if not isinstance(data, mod.ManagedBuffer):
        return False, "expected a ManagedBuffer, got %r" % type(data)
    try:
        if size != exp["n"] or data.size != exp["n"]:
            return False, "size %d/%d, expected %d" % (size, data.size, exp["n"])
        if exp["kind"] == "tensor":
            t = data.as_tensor(getattr(torch, exp["dtype"]), tuple(exp["shape"]))
            ok = _sha(_tensor_bytes(t)) == exp["sha"]
            return ok, "%s %s tensor, %d B%s" % (exp["dtype"], tuple(exp["shape"]), size, "" if ok else ": bytes differ")
        ok = _sha(data.to_bytes()) == exp["sha"]
        return ok, "%d B%s" % (size, "" if ok else ": bytes differ")
    finally:
        data.release()


def receiver_main(src, extra_hex):
    import msgpack
    mod, _ = load_connector(src)
    extra = msgpack.unpackb(bytes.fromhex(extra_hex), raw=False)
    tasks = msgpack.unpackb(bytes.fromhex(sys.stdin.read().strip()), raw=False)
    conn = mod.MooncakeTransferEngineConnector(extra)
    results = []
    for key, task in tasks:
        if task["how"] != "threads":
            results.append([key, task["how"], *check_one(mod, conn, key, task)])
    threaded = [(k, t) for k, t in tasks if t["how"] == "threads"]
    with ThreadPoolExecutor(max_workers=4) as pool:
        for (key, task), (ok, what) in zip(threaded, pool.map(lambda kt: check_one(mod, conn, *kt), threaded)):
            results.append([key, "4 threads", ok, what])
    again = conn.get(FROM, TO, tasks[0][0], metadata=tasks[0][1]["metadata"])
    results.append(["consumed-key-again", "metadata", again is None,
                    "None (1 sender -> 1 receiver per key; their connector logs this as an error)"
                    if again is None else "returned data twice"])
    missing = conn.get(FROM, TO, "never-put")
    results.append(["never-put", "none", missing is None, "None" if missing is None else "returned data"])
    results.extend(close_receiver(conn, len(tasks)))
    sys.stdout.write(msgpack.packb(results, use_bin_type=True).hex() + "\n")


def _probe_write(probe, session, local, remote, n):
    return probe.batch_transfer_sync_write(session, [local], [remote], [n])


def close_receiver(conn, n_tasks):
    """close(), then show that the pool it unregistered is closed to peers: a third engine (a
    plain omniconn.mooncake.TransferEngine) writes 4 KiB at the pool's base before close (0) and
    after (refused). The pool tensor is kept alive here so a wrong acceptance is a clean FAIL."""
    import ctypes
    import omniconn.mooncake as om
    health = conn.health()
    pool_ref, base, session = conn.pool, conn.base_ptr, "%s:%d" % (conn.host, conn.rpc_port)
    probe = om.TransferEngine()
    src = ctypes.create_string_buffer(b"\x5a" * 4096, 4096)
    setup = probe.initialize(conn.host, "P2PHANDSHAKE", conn.protocol, "") or \
        probe.register_memory(ctypes.addressof(src), 4096)
    before = _probe_write(probe, session, ctypes.addressof(src), base, 4096) if setup == 0 else setup
    wrote = before == 0 and bytes(pool_ref[:4096].numpy()) == b"\x5a" * 4096
    conn.close()
    closed = conn.health().get("status") == "unhealthy"
    after = _probe_write(probe, session, ctypes.addressof(src), base, 4096)
    probe.close()
    del pool_ref
    return [["receiver-close", "-", closed and health.get("gets") == n_tasks,
             "health before close: gets=%s errors=%s; closed=%s" % (health.get("gets"), health.get("errors"), closed)],
            ["pool-after-close", "-", wrote and after != 0,
             "a peer's write into the pool: %d before close(), %d after (refused: unregistered)" % (before, after)]]


# ---- the sender process (main) ----------------------------------------------------------------
def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _revision(src):
    path = os.path.join(src, "REVISION")
    if os.path.exists(path):
        with open(path) as f:
            return f.read().strip()
    try:
        return subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def main():
    src = os.environ.get("VLLM_OMNI_SRC")
    if not src:
        sys.exit("set VLLM_OMNI_SRC to a copy of vLLM-Omni's source")
    logging.basicConfig(level=os.environ.get("MC_REAL_LOG", "WARNING"), stream=sys.stderr,
                        format="%(process)d %(name)s %(levelname)s %(message)s")
    if sys.argv[1:2] == ["recv"]:
        receiver_main(src, sys.argv[2])
        return
    import msgpack
    mod, standins = load_connector(src)
    import omniconn.mooncake as om
    print("vLLM-Omni source:", src)
    print("revision:", _revision(src) or "(unknown)")
    print("stand-ins:", ", ".join(standins) or "none")
    print("mooncake.engine.TransferEngine is omniconn.mooncake.TransferEngine:", mod.TransferEngine is om.TransferEngine)
    failures = int(mod.TransferEngine is not om.TransferEngine)

    tx = mod.MooncakeTransferEngineConnector({"role": "sender", "protocol": "tcp", "host": "127.0.0.1",
                                              "zmq_port": _free_port(), "memory_pool_size": POOL,
                                              "memory_pool_device": "cpu"})
    info = tx.get_connection_info()
    print("sender: host %s zmq_port %s rpc_port %s" % (info["host"], info["zmq_port"], info["rpc_port"]))
    tasks = []
    for key, data, how in payloads():
        ok, size, meta = tx.put(FROM, TO, key, data)
        line_ok = ok and meta is not None and meta.get("data_size") == size
        failures += not line_ok
        print("%s put %-22s %s B, metadata %s" % ("PASS" if line_ok else "FAIL", key, size, meta))
        if line_ok:
            tasks.append([key, {"how": how, "metadata": meta, "expect": expected(data)}])
    rx_extra = {"role": "receiver", "protocol": "tcp", "host": "127.0.0.1", "zmq_port": _free_port(),
                "memory_pool_size": POOL, "memory_pool_device": "cpu",
                "sender_host": info["host"], "sender_zmq_port": info["zmq_port"]}
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "recv", msgpack.packb(rx_extra).hex()],
                          input=msgpack.packb(tasks, use_bin_type=True).hex() + "\n", capture_output=True, text=True,
                          env=dict(os.environ), timeout=300)
    lines = proc.stdout.strip().splitlines()
    results = msgpack.unpackb(bytes.fromhex(lines[-1]), raw=False) if proc.returncode == 0 and lines else []
    for key, how, ok, what in results:
        failures += not ok
        print("%s get %-22s (%s) %s" % ("PASS" if ok else "FAIL", key, how, what))
    if proc.returncode != 0 or len(results) != len(tasks) + 4:
        failures += 1
        print("FAIL receiver process: exit %d\n%s" % (proc.returncode, proc.stderr[-4000:]))
    elif proc.stderr.strip():
        print("receiver log:\n" + proc.stderr[-4000:])

    with tx._local_buffers_lock:                  # every pulled payload released on the sender
        left = list(tx._local_buffers)
    health = tx.health()
    ok = not left and health.get("puts") == len(tasks) and health.get("errors") == 0
    failures += not ok
    print("%s sender: puts=%s errors=%s, buffers left after the pulls: %s" % ("PASS" if ok else "FAIL", health.get("puts"),
                                                                             health.get("errors"), left or "none"))
    tx.close()
    ok = tx.health().get("status") == "unhealthy" and not (tx._listener_thread and tx._listener_thread.is_alive())
    failures += not ok
    print("%s sender close(): health unhealthy, listener thread stopped" % ("PASS" if ok else "FAIL"))
    print("mooncake-real: %s" % ("ok" if not failures else "%d failures" % failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
