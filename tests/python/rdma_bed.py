"""RDMA from Python, two processes, on the RDMA bed (tests/rdma/bed.sh; tests/python/rdma_bed.sh).

This process is the sender: an RdmaConnector (require=True) on $OMC_RDMA_IP with $OMC_RDMA_DEVICE.
A second process (this file with --receiver) is the receiver. The sender puts bytes, a numpy
array and a named-tensor frame, sends the metadata to the receiver over a pipe (msgpack frames,
no pickle), and the receiver gets each one - with the metadata, and one without it (through the
registered sender) - and answers with SHA-256 sums of what it read through zero-copy views. The
vLLM-Omni connector and the sglang-omni relay (relay_peer.py) do one round each (protocol "rdma"). Every sum must match the sender's.

Outside a bed ($OMC_RDMA_DEVICE unset) it prints a SKIP line. OMC_PY_RDMA_TCP=1 runs the same
steps over TCP on this host (a dry run of the script itself, not an RDMA test).
Ends with "python-rdma: N passed, M failed".
"""
import hashlib
import os
import struct
import subprocess
import sys
import time

import msgpack

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import numpy as np          # noqa: E402
import omniconn             # noqa: E402

DEV = os.environ.get("OMC_RDMA_DEVICE", "")
IP = os.environ.get("OMC_RDMA_IP", "127.0.0.1")
DRY = os.environ.get("OMC_PY_RDMA_TCP") == "1"
MIB = 1 << 20


def frame_write(f, obj):
    data = msgpack.packb(obj, use_bin_type=True)
    f.write(struct.pack("<I", len(data)) + data)
    f.flush()


def frame_read(f):
    head = f.read(4)
    if len(head) < 4:
        return None
    return msgpack.unpackb(f.read(struct.unpack("<I", head)[0]), raw=False)


def sha(view):
    return hashlib.sha256(view).hexdigest()


def connector(role):
    if DRY:
        return omniconn.TcpConnector(role=role, host=IP, pool_size=64 * MIB)
    return omniconn.RdmaConnector(role=role, host=IP, pool_size=64 * MIB, rdma_devices=DEV, require=True)


# ---- the receiver (a second process) -------------------------------------------------------------------
def receiver(host, port):
    out, inp = sys.stdout.buffer, sys.stdin.buffer
    with connector("receiver") as rx:
        rx.add_sender("tx", host, port)
        frame_write(out, {"ready": True, "transport": rx.transport,
                          "rdma": list(rx.rdma_status) if not DRY else [False, "dry run"]})
        while True:
            req = frame_read(inp)
            if req is None or req["op"] == "exit":
                break
            try:
                if req["op"] == "bytes":
                    with rx.get("py", "bed", req["key"], req.get("meta"), timeout=60) as b:
                        frame_write(out, {"ok": True, "n": b.size, "sha": sha(b.view)})
                elif req["op"] == "array":
                    with rx.get("py", "bed", req["key"], req["meta"], timeout=60) as b:
                        a = b.numpy(req["dtype"], req["shape"])     # a view, no copy
                        frame_write(out, {"ok": True, "n": a.nbytes, "sha": sha(a.data),
                                          "sum": float(a.astype(np.float64).sum())})
                        del a
                elif req["op"] == "frame":
                    with rx.get_tensors("py", "bed", req["key"], req["meta"], timeout=60) as fr:
                        frame_write(out, {"ok": True, "items": {k: [str(v.dtype), list(v.shape), sha(v.data)]
                                                                for k, v in fr.items()}})
                elif req["op"] == "counters":
                    frame_write(out, {"ok": True, "counters": rx.rdma_counters if not DRY else {}})
                elif req["op"] == "vllm":
                    from omniconn.vllm_omni import OmniconnConnector
                    with OmniconnConnector({"role": "receiver", "protocol": "tcp" if DRY else "rdma",
                                            "host": IP, "sender_host": host, "sender_zmq_port": req["port"],
                                            "device_name": DEV, "memory_pool_size": 64 * MIB}) as vc:
                        t0, got = time.monotonic(), None
                        while got is None and time.monotonic() - t0 < 60:     # vLLM-Omni's poll loop
                            got = vc.get("py", "bed", req["key"], req["meta"])
                            if got is None:
                                time.sleep(0.001)
                        if got is None:
                            frame_write(out, {"ok": False, "error": "vllm get: nothing within 60 s"})
                            continue
                        obj, size = got
                        a = obj.numpy()         # a view of the received payload (torch not needed)
                        frame_write(out, {"ok": True, "size": size, "sha": sha(a.data),
                                          "dtype_shape": [obj.dtype_shape[0], list(obj.dtype_shape[1])]})
                        del a
                        obj.release()
            except Exception as e:      # reported to the sender, which counts it as a failure
                frame_write(out, {"ok": False, "error": "%s: %s" % (type(e).__name__, e)})


# ---- the sender (this process) and the checks ----------------------------------------------------------
class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def __call__(self, name, cond, detail=""):
        if cond:
            self.passed += 1
            print("PASS %s" % name)
        else:
            self.failed += 1
            print("FAIL %s %s" % (name, detail))
        sys.stdout.flush()


def relay_round(check):
    """The sglang-omni relay (protocol rdma): put_async here, get_async in relay_peer.py."""
    import asyncio
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from relay_peer import digest, make_tensor
    from omniconn.sglang_omni import create_relay
    cfg = {"protocol": "tcp" if DRY else "rdma", "host": IP, "device_name": DEV or None, "memory_pool_size": 64 * MIB}
    relay = create_relay("omniconn", engine_id="bed0", **cfg)
    peer = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "relay_peer.py"),
                             msgpack.packb(dict(cfg, role="receiver", engine_id="bed1")).hex()],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ))
    try:
        hello = frame_read(peer.stdout)
        t = make_tensor("bfloat16", (1024, 1024), 5)        # 2 MiB

        async def put():
            return await relay.put_async(t, request_id="relay-1")
        op = asyncio.run(put())
        frame_write(peer.stdin, {"op": "get", "items": [[op.metadata, "bfloat16", [1024, 1024]]], "timeout": 60})
        r = frame_read(peer.stdout) or {"ok": False}
        check("sglang-omni relay over %s: bfloat16 1024x1024 checksum" % relay.protocol,
              bool(hello) and r.get("ok") and r["items"][0].get("sha") == digest(t), r)
        if not DRY:
            sc = relay._conn.rdma_counters
            check("sglang-omni relay: pushed over RDMA", sc["pushes"] >= 1 and sc["push_failures"] == 0, sc)
    finally:
        frame_write(peer.stdin, {"op": "exit"})
        try:
            peer.wait(60)
        except subprocess.TimeoutExpired:
            peer.kill()
            peer.wait()
        relay.close()


def main():
    if not DEV and not DRY:
        print("SKIP python-rdma: not in an RDMA bed (OMC_RDMA_DEVICE unset; run tests/python/rdma_bed.sh)")
        print("python-rdma: 0 passed, 0 failed")
        return 0
    check = Checks()
    t_start = time.monotonic()
    print("python-rdma: %s, device %s, address %s, numpy %s" % ("dry run over TCP" if DRY else "RDMA", DEV or "-",
                                                               IP, np.__version__))
    rng = np.random.default_rng(7)
    with connector("sender") as tx:
        host, port, _ = tx.endpoint
        check("sender transport is %s" % ("tcp" if DRY else "rdma"), tx.transport == ("tcp" if DRY else "rdma"),
              tx.transport)
        if not DRY:
            on, why = tx.rdma_status
            check("sender RDMA engine is on", on, why)
        peer = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--receiver", host, str(port)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ))
        try:
            hello = frame_read(peer.stdout)
            check("receiver started", bool(hello and hello.get("ready")), hello)
            if not hello:
                raise SystemExit(1)
            if not DRY:
                check("receiver transport is rdma, its engine on", hello["transport"] == "rdma" and hello["rdma"][0],
                      hello)

            def ask(**req):
                frame_write(peer.stdin, req)
                r = frame_read(peer.stdout)
                if r is None:
                    return {"ok": False, "error": "the receiver died (exit %s)" % peer.wait(10)}
                return r

            # bytes, sizes across the eager/inline and chunked paths
            for n in (1, 4096, 3 * MIB + 5):
                data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
                meta = tx.put("py", "bed", "b%d" % n, data)
                r = ask(op="bytes", key="b%d" % n, meta=meta)
                check("bytes %d B with metadata: checksum" % n, r.get("ok") and r["sha"] == sha(data) and r["n"] == n, r)
            # bytes without metadata: the receiver asks its registered sender
            data = rng.integers(0, 256, 200000, dtype=np.uint8).tobytes()
            tx.put("py", "bed", "nometa", data)
            r = ask(op="bytes", key="nometa")
            check("bytes 200000 B without metadata: checksum", r.get("ok") and r["sha"] == sha(data), r)
            # a numpy array, viewed in place on the receiver
            arr = rng.standard_normal((512, 1024), dtype=np.float32)
            meta = tx.put("py", "bed", "arr", arr)
            r = ask(op="array", key="arr", meta=meta, dtype="float32", shape=list(arr.shape))
            check("numpy float32 512x1024 (2 MiB): checksum", r.get("ok") and r["sha"] == sha(arr.data), r)
            check("numpy float32 512x1024: sum", r.get("ok") and abs(r["sum"] - float(arr.astype(np.float64).sum())) < 1e-6, r)
            # a named-tensor frame
            tensors = {"hidden": rng.standard_normal((64, 256), dtype=np.float32),
                       "ids": np.arange(1000, dtype=np.int64), "mask": np.ones((7, 3), dtype=np.bool_)}
            meta = tx.put_tensors("py", "bed", "frame", tensors)
            r = ask(op="frame", key="frame", meta=meta)
            want = {k: [str(v.dtype), list(v.shape), sha(v.data)] for k, v in tensors.items()}
            check("named-tensor frame (3 arrays): dtypes, shapes, checksums", r.get("ok") and r["items"] == want, r)
            check("every put was consumed", tx.wait_consumed(timeout=30), tx.health())
            if not DRY:     # the payloads went over RDMA, not over a TCP fallback
                sc = tx.rdma_counters
                rc_ = ask(op="counters").get("counters", {})
                check("sender: every payload pushed over RDMA, none failed",
                      sc["pushes"] >= 3 and sc["push_bytes"] >= 3 * MIB + 5 + 2 * MIB + 200000
                      and sc["push_failures"] == 0 and sc["accepted"] >= 1, sc)
                check("receiver: its channel is RDMA, no TCP fallback",
                      rc_.get("rdma_channels", 0) >= 1 and rc_.get("tcp_fallbacks", 1) == 0, rc_)
            h = tx.health()
            check("sender health: no errors", h["errors"] == 0 and h["state"] == "healthy", h)
        finally:
            frame_write(peer.stdin, {"op": "exit"})
            try:
                rc = peer.wait(60)
            except subprocess.TimeoutExpired:
                peer.kill()
                rc = peer.wait()
        check("receiver exited cleanly", rc == 0, "exit %s" % rc)

    # the vLLM-Omni connector: put -> metadata -> polling get, protocol rdma
    from omniconn.vllm_omni import OmniconnConnector
    with OmniconnConnector({"role": "sender", "protocol": "tcp" if DRY else "rdma", "host": IP, "zmq_port": 0,
                            "device_name": DEV, "memory_pool_size": 64 * MIB}) as vs:
        info = vs.get_connection_info()
        arr = rng.standard_normal((256, 512), dtype=np.float32)
        ok, size, meta = vs.put("py", "bed", "req-1", arr)
        check("vllm_omni put over %s" % info.get("protocol"), ok and size == arr.nbytes, (ok, size, info))
        peer = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--receiver", info["host"],
                                 str(info["zmq_port"])], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                env=dict(os.environ))
        try:
            hello = frame_read(peer.stdout)
            frame_write(peer.stdin, {"op": "vllm", "key": "req-1", "meta": meta, "port": info["zmq_port"]})
            r = frame_read(peer.stdout) or {"ok": False, "error": "the receiver died"}
            check("vllm_omni polling get: tensor checksum", bool(hello) and r.get("ok") and r["sha"] == sha(arr.data)
                  and r["dtype_shape"] == ["float32", [256, 512]], r)
        finally:
            frame_write(peer.stdin, {"op": "exit"})
            try:
                peer.wait(60)
            except subprocess.TimeoutExpired:
                peer.kill()
                peer.wait()
    relay_round(check)
    print("python-rdma: %.1f s" % (time.monotonic() - t_start))
    print("python-rdma: %d passed, %d failed" % (check.passed, check.failed))
    return 0 if check.failed == 0 else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--receiver":
        receiver(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(main())
