"""A stage process with one OmniconnRelay, for tests/python/test_sglang_relay.py.

usage: python3 relay_peer.py HEX-MSGPACK-CONFIG   (the relay's create_relay keyword arguments)
Spoken to in length-prefixed msgpack frames on stdin/stdout (never pickle). Each request runs on
the process's one event loop: put (many tensors at once, operations kept for wait_put), wait_put,
get (many at once, each into a fresh dest tensor; the reply carries each tensor's digest),
cleanup, health, exit. Tensors are made from (dtype, shape, seed) by make_tensor, so both sides
can rebuild and compare them by digest.
"""
import asyncio
import hashlib
import os
import struct
import sys

import msgpack

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import torch        # noqa: E402


def make_tensor(dtype, shape, seed):
    """A deterministic tensor of dtype (a torch dtype name) and shape."""
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)
    if dt == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dt.is_floating_point:
        return (torch.randn(shape, generator=g) * 100).to(dt)
    return torch.randint(-100000, 100000, shape, generator=g).to(dt)


def digest(t):
    t = t.detach().contiguous().reshape(-1)
    if not t.numel():
        return hashlib.sha256(b"").hexdigest()
    return hashlib.sha256(t.view(torch.uint8).numpy().tobytes()).hexdigest()


def _recv():
    head = sys.stdin.buffer.read(4)
    if len(head) < 4:
        return None
    return msgpack.unpackb(sys.stdin.buffer.read(struct.unpack("<I", head)[0]), raw=False)


def _send(obj):
    data = msgpack.packb(obj, use_bin_type=True)
    sys.stdout.buffer.write(struct.pack("<I", len(data)) + data)
    sys.stdout.buffer.flush()


def _error(e):
    return {"type": type(e).__name__, "text": str(e), "name": getattr(e, "name", None)}


async def handle(relay, req, put_ops):
    op = req["op"]
    if op == "put":         # specs: [[dtype, shape, seed, request_id], ...]
        async def one(dtype, shape, seed, rid):
            t = make_tensor(dtype, tuple(shape), seed)
            o = await relay.put_async(t, request_id=rid)
            put_ops[o.metadata["transfer_info"]["key"]] = o
            return {"meta": o.metadata, "sha": digest(t)}
        return {"ok": True, "items": await asyncio.gather(*(one(*s) for s in req["specs"]))}
    if op == "wait_put":
        out = []
        for key in req["keys"]:
            try:
                await put_ops[key].wait_for_completion(timeout=req.get("timeout", 30))
                out.append(None)
            except Exception as e:
                out.append(_error(e))
        return {"ok": True, "errors": out}
    if op == "get":         # items: [[metadata, dtype, shape], ...]
        async def one(md, dtype, shape):
            dest = torch.zeros(tuple(shape), dtype=getattr(torch, dtype))
            try:
                g = await relay.get_async(md, dest, request_id=md["transfer_info"]["req_id"])
                await g.wait_for_completion(timeout=req.get("timeout", 30))
                return {"sha": digest(dest)}
            except Exception as e:
                return {"error": _error(e)}
        return {"ok": True, "items": await asyncio.gather(*(one(*i) for i in req["items"]))}
    if op == "cleanup":
        return {"ok": True, "dropped": relay.cleanup(req["request_id"])}
    if op == "health":
        h = relay.health()
        return {"ok": True, "health": {k: v for k, v in h.items() if isinstance(v, (int, float, str))}}
    return {"ok": False, "error": "unknown op %s" % op}


def main():
    from omniconn.sglang_omni import create_relay
    cfg = msgpack.unpackb(bytes.fromhex(sys.argv[1]), raw=False)
    relay = create_relay("omniconn", **cfg)
    loop = asyncio.new_event_loop()
    put_ops = {}
    _send({"ready": True, "pid": os.getpid(), "protocol": relay.protocol})
    while True:
        req = _recv()
        if req is None or req["op"] == "exit":
            break
        try:
            _send(loop.run_until_complete(handle(relay, req, put_ops)))
        except Exception as e:
            _send({"ok": False, "error": _error(e)})
    relay.close()
    relay.close()
    loop.close()


if __name__ == "__main__":
    main()
