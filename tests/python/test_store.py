"""The store connector and the LMCache-shaped class against a real redis-server that this file
starts (private unix socket and loopback port, temporary directory) and kills at the end.
redis-server missing is a failure that names the fix, not a skip."""
import asyncio
import os
import pickle
import shutil
import socket
import subprocess
import tempfile
import time

import numpy as np
import pytest

import omniconn
from omniconn.store import StoreConnector, READERS_CACHE
from omniconn.lmcache import OmniStoreRemoteConnector

import torch


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url():
    exe = shutil.which("redis-server")
    assert exe, "redis-server is not installed: run scripts/install-deps.sh (Debian package redis-server)"
    d = tempfile.mkdtemp(prefix="omc-pystore-")
    sock = os.path.join(d, "redis.sock")
    port = _free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--unixsocket", sock,
                             "--unixsocketperm", "700", "--dir", d, "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        until = time.monotonic() + 15
        while True:         # the event: the socket answers PING
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(sock)
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < until, "redis-server did not start"
            time.sleep(0.01)
        yield {"unix": "unix://" + sock, "tcp": "redis://127.0.0.1:%d" % port}
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(d, True)


def test_store_round_trips_bytes_and_tensors(redis_url):
    with StoreConnector(redis_url["unix"]) as prod, StoreConnector(redis_url["tcp"]) as cons:
        data = os.urandom(100000)
        meta = prod.put("p", "c", "raw", data)
        with cons.get("p", "c", "raw", meta, timeout=5) as b:
            assert b.to_bytes() == data
        assert not cons.exists("p", "c", "raw")          # one reader: consumed
        x = np.arange(4096, dtype=np.float32).reshape(64, 64)
        prod.put_tensor("p", "c", "t", "hidden", x)
        buf, seg = cons.get_first("p", "c", "t", timeout=5)
        name, kind, code, shape, off, size = seg
        assert (name, shape) == ("hidden", (64, 64))
        np.testing.assert_array_equal(buf.numpy("float32", shape, off), x)
        buf.release()


def test_store_batches_exists_and_list(redis_url):
    with StoreConnector(redis_url["tcp"], max_inflight=2) as c:
        keys = ["b%d" % i for i in range(20)]
        for i, k in enumerate(keys):
            c.put("p", "c", k, bytes([i]) * (1000 + i), readers=READERS_CACHE)
        assert c.exists_batch("p", "c", keys + ["nope"]) == [True] * 20 + [False]
        listed = {k for _, _, k in c.list("p", "c")}
        assert set(keys) <= listed
        bufs = c.get_batch("p", "c", keys + ["nope"], priority="prefetch")
        assert bufs[-1] is None
        for i, b in enumerate(bufs[:-1]):
            assert b.to_bytes() == bytes([i]) * (1000 + i)
            b.release()
        assert c.exists_batch("p", "c", keys) == [True] * 20     # cache entries stay
        for k in keys:
            assert c.cleanup("p", "c", k)
        assert c.exists_batch("p", "c", keys) == [False] * 20


def test_lmcache_shaped_connector_round_trips_tensors_without_pickle(redis_url, monkeypatch):
    def no_pickle(*a, **k):
        raise AssertionError("pickle used")
    monkeypatch.setattr(pickle, "dumps", no_pickle)
    monkeypatch.setattr(pickle, "loads", no_pickle)

    async def run():
        conn = OmniStoreRemoteConnector(redis_url["tcp"], ttl_ms=60000)
        kv = torch.randn(2, 16, 8, 64, dtype=torch.float32)
        half = torch.randn(4, 128).to(torch.bfloat16)
        ids = torch.arange(1000, dtype=torch.int64)
        assert not await conn.exists("chunk-0")
        await conn.put("chunk-0", kv)
        await conn.put("chunk-0", kv)                   # already cached: not an error
        assert await conn.exists("chunk-0") and conn.exists_sync("chunk-0")
        got = await conn.get("chunk-0")
        assert got.dtype == torch.float32 and got.shape == kv.shape and torch.equal(got, kv)
        assert torch.equal(await conn.get("chunk-0"), kv)   # read again: a cache entry
        assert await conn.get("missing") is None
        await conn.batched_put(["h", "i"], [half, ids])
        assert await conn.batched_async_contains(["chunk-0", "h", "i", "missing", "h"]) == 3
        h, i, m = await conn.batched_get(["h", "i", "missing"])
        assert h.dtype == torch.bfloat16 and torch.equal(h, half)
        assert torch.equal(i, ids) and m is None
        assert {"chunk-0", "h", "i"} <= set(await conn.list())
        for k in ("chunk-0", "h", "i"):
            conn.conn.cleanup(conn.from_stage, conn.to_stage, k)
        await conn.close()
    asyncio.run(run())


def test_store_unreachable_server_raises_with_the_reason():
    with pytest.raises(omniconn.OmniconnError) as e:
        StoreConnector("redis://127.0.0.1:%d" % _free_port())
    assert e.value.name == "OMC_ERR_CONNECTION"


def test_directory_finds_the_sender_by_key(redis_url):
    from omniconn.store import StoreDirectory
    with StoreConnector(redis_url["tcp"]) as st_p, StoreConnector(redis_url["tcp"]) as st_c, \
            omniconn.TcpConnector(role="sender", host="127.0.0.1") as prod, \
            omniconn.TcpConnector(role="receiver") as cons:
        with StoreDirectory(st_p, prod, name="py-prod") as dp, StoreDirectory(st_c, cons) as dc:
            x = np.arange(50000, dtype=np.int32)
            dp.put("p", "c", "dir-1", x)
            with dc.get("p", "c", "dir-1", timeout=10) as b:      # no sender registered: the store said where
                np.testing.assert_array_equal(b.numpy("int32"), x)
            with pytest.raises(omniconn.OmniconnTimeout):
                dc.get("p", "c", "dir-missing", timeout=0.3)
