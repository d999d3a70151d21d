"""A peer process for the Python tests: one connector, driven over stdin/stdout.

Messages both ways are msgpack maps framed by a 4-byte little-endian length (no pickle anywhere).
argv[1] is a msgpack config in hex: {"api": "plain" | "vllm", "kind": "shm" | "tcp" | ..., ...}.
Requests: {"op": "get" | "poll" | "hold" | "put" | "info" | "health" | "exit", ...}.
"""
import hashlib
import os
import struct
import sys
import time

import msgpack

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import numpy as np          # noqa: E402
import omniconn             # noqa: E402

_in = sys.stdin.buffer
_out = sys.stdout.buffer


def recv():
    head = _in.read(4)
    if len(head) < 4:
        return None
    n = struct.unpack("<I", head)[0]
    return msgpack.unpackb(_in.read(n), raw=False)


def send(obj):
    data = msgpack.packb(obj, use_bin_type=True)
    _out.write(struct.pack("<I", len(data)) + data)
    _out.flush()


def describe(obj):
    """A short, comparable description of a received payload."""
    import torch
    if isinstance(obj, dict):
        return {"type": "dict", "items": {str(k): describe(v) for k, v in obj.items()}}
    if isinstance(obj, (bytes, bytearray, memoryview)):
        b = bytes(obj)
        return {"type": "bytes", "n": len(b), "sha": hashlib.sha256(b).hexdigest()}
    if isinstance(obj, np.ndarray):
        return {"type": "array", "dtype": obj.dtype.name, "shape": list(obj.shape),
                "sha": hashlib.sha256(np.ascontiguousarray(obj).tobytes()).hexdigest()}
    if isinstance(obj, torch.Tensor):
        raw = obj.contiguous().view(torch.uint8).numpy().tobytes() if obj.numel() else b""
        return {"type": "tensor", "dtype": str(obj.dtype).replace("torch.", ""), "shape": list(obj.shape),
                "sha": hashlib.sha256(raw).hexdigest()}
    if isinstance(obj, list):
        return {"type": "list", "items": [describe(v) for v in obj]}
    return {"type": type(obj).__name__, "repr": repr(obj)}


def main():
    cfg = msgpack.unpackb(bytes.fromhex(sys.argv[1]), raw=False)
    api = cfg.pop("api")
    held = []
    if api == "vllm":
        from omniconn.vllm_omni import OmniconnConnector, RawBuffer
        conn = OmniconnConnector(cfg["extra"])
    else:
        kind = cfg.pop("kind")
        cls = {"shm": omniconn.ShmConnector, "tcp": omniconn.TcpConnector}[kind]
        conn = cls(**cfg)
        if cfg.get("role") == "receiver" and "sender" in cfg:
            pass
    send({"ready": True, "pid": os.getpid()})
    while True:
        req = recv()
        if req is None or req["op"] == "exit":
            break
        op = req["op"]
        try:
            if op == "add_sender":
                conn.add_sender(req["name"], req["host"], req["port"])
                send({"ok": True})
            elif op == "get" and api == "plain":     # plain API: frame or bytes, described
                t0 = time.monotonic()
                buf = conn.get(req["from"], req["to"], req["key"], req.get("meta"), req.get("timeout", 10))
                if buf.is_frame:
                    f = omniconn.Frame(buf, as_torch=req.get("torch", False))
                    d = {k: describe(v if not isinstance(v, memoryview) else bytes(v)) for k, v in f.items()}
                    f.release()
                    send({"ok": True, "frame": d, "ms": (time.monotonic() - t0) * 1e3})
                else:
                    d = describe(buf.to_bytes())
                    if req.get("hold"):
                        held.append(buf)
                    else:
                        buf.release()
                    send({"ok": True, "payload": d})
            elif op in ("poll", "deadline") and api == "vllm":
                # vLLM-Omni's receive loop: get() every millisecond until the payload is there
                t0 = time.monotonic()
                polls = 0
                limit = req.get("timeout", 10)
                r = None
                while time.monotonic() - t0 < limit:
                    polls += 1
                    if op == "poll":
                        r = conn.get(req["from"], req["to"], req["key"], req.get("meta"))
                    else:
                        r = conn.get_with_deadline(req["from"], req["to"], req["key"], req.get("meta"),
                                                   timeout=limit)
                    if r is not None:
                        break
                    time.sleep(0.001)
                if r is None:
                    send({"ok": False, "polls": polls})
                    continue
                obj, size = r
                if isinstance(obj, RawBuffer):
                    t = obj.tensor
                    d = {"raw": True, "tensor": describe(t), "bytes": describe(obj.to_bytes())}
                    if req.get("as_tensor"):
                        dt, shape = req["as_tensor"]
                        import torch
                        d["as_tensor"] = describe(obj.as_tensor(getattr(torch, dt), shape))
                    del t
                    obj.release()
                    d["released"] = obj.released
                else:
                    d = describe(obj)
                send({"ok": True, "size": size, "desc": d, "polls": polls, "ms": (time.monotonic() - t0) * 1e3})
            elif op == "put":
                data = np.frombuffer(np.random.default_rng(req.get("seed", 1)).bytes(req["n"]), np.uint8)
                if api == "vllm":
                    ok, size, md = conn.put(req["from"], req["to"], req["key"], data)
                    send({"ok": ok, "size": size, "meta": md, "sha": hashlib.sha256(data.tobytes()).hexdigest()})
                else:
                    meta = conn.put(req["from"], req["to"], req["key"], data, readers=req.get("readers", 1))
                    send({"ok": True, "meta": meta, "sha": hashlib.sha256(data.tobytes()).hexdigest()})
            elif op == "put_many" and api == "vllm":   # count small puts: key prefix+i, bytes i & 0xFF
                for i in range(req["count"]):
                    ok, size, md = conn.put("0", "1", "%s%d" % (req["prefix"], i), bytes([i & 0xFF]) * req["size"])
                    if not ok:
                        break
                send({"ok": ok, "count": i + 1 if ok else i})
            elif op == "info":
                send({"ok": True, "info": conn.get_connection_info() if api == "vllm" else list(conn.endpoint)})
            elif op == "health":
                send({"ok": True, "health": conn.health()})
            else:
                send({"ok": False, "error": "unknown op %s" % op})
        except omniconn.OmniconnError as e:
            send({"ok": False, "error": str(e), "code": e.code, "name": e.name})
    del held[:]
    conn.close()
    conn.close()


if __name__ == "__main__":
    main()
