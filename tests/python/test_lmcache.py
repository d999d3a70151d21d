"""omniconn.lmcache.OmniconnRemoteConnector driven the way LMCache's v1 RemoteBackend drives a
remote connector, against a real redis-server that this file starts.

LMCache is not installable on Debian, so the objects LMCache hands the connector are stand-ins
with the attributes its code uses (read from lmcache/v1: CacheEngineKey.to_string(), MemoryObj's
byte_array / get_shape / get_dtype / get_memory_format / get_size / ref_count_up / ref_count_down,
LocalCPUBackend.allocate(shape, dtype, fmt) returning None when full, the MemoryFormat values).
RemoteBackendCalls replays RemoteBackend's calls: the connector built as LMCache's loaders build
it, the event loop on its own thread with run_coroutine_threadsafe, the naive serde's reference
counting, InstrumentedRemoteConnector's ref_count_down after put, the blocking timeouts.
tests/python/lmcache_real.py runs LMCache's own code where its source is at hand.
"""
import asyncio
import ctypes
import dataclasses
import enum
import hashlib
import os
import pickle
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from types import SimpleNamespace

import pytest
import torch

import omniconn
import omniconn.lmcache
from omniconn.lmcache import OmniconnRemoteConnector, OmniconnConnectorAdapter
from omniconn.store import READERS_CACHE

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WAIT = 60           # a bound on every wait: a hang fails the test instead of stalling the suite


# ---- LMCache's objects, as its connectors see them --------------------------------------------------
class MemoryFormat(enum.Enum):
    UNDEFINED = 0
    KV_2LTD = 1
    KV_T2D = 2
    KV_2TD = 3
    BINARY = 4
    BINARY_BUFFER = 5
    KV_MLA_FMT = 6


@dataclasses.dataclass(frozen=True)
class CacheEngineKey:
    fmt: str
    model_name: str
    world_size: int
    worker_id: int
    chunk_hash: int
    dtype: str = "half"

    def to_string(self):
        return "%s@%s@%d@%d@%x@%s" % (self.fmt, self.model_name, self.world_size, self.worker_id,
                                      self.chunk_hash, self.dtype)


class MemoryObj:
    """A CPU tensor-backed object with a reference count; at 0 its bytes go back to the backend.
    byte_array is what LMCache's TensorMemoryObj gives: a memoryview of a ctypes ubyte array
    over the tensor (format "<B")."""

    def __init__(self, backend, shape, dtype, fmt):
        self.backend, self.shape, self.dtype = backend, torch.Size(shape), dtype
        self.fmt = MemoryFormat(getattr(fmt, "value", fmt))
        n = self.shape.numel() * torch.tensor([], dtype=dtype).element_size()
        self.raw = torch.zeros(n, dtype=torch.uint8)
        self.ref_count = 1

    @property
    def byte_array(self):
        n = self.raw.numel()
        return memoryview((ctypes.c_ubyte * n).from_address(self.raw.data_ptr()))

    @property
    def tensor(self):
        return self.raw.view(self.dtype).view(self.shape)

    def get_shape(self):
        return self.shape

    def get_dtype(self):
        return self.dtype

    def get_memory_format(self):
        return self.fmt

    def get_size(self):
        return self.raw.numel()

    def ref_count_up(self):
        self.ref_count += 1

    def ref_count_down(self):
        assert self.ref_count > 0, "ref_count_down on a freed MemoryObj"
        self.ref_count -= 1
        if self.ref_count == 0:
            self.backend.free(self)


class BytesBufferMemoryObj:
    """LMCache's byte buffer (fmt BINARY_BUFFER): a bytearray, shape [n, 0, 0, 0], no dtype,
    reference counting a no-op."""

    def __init__(self, n):
        self.raw, self.shape, self.dtype, self.fmt, self.ref_count = bytearray(n), torch.Size([n, 0, 0, 0]), None, \
            MemoryFormat.BINARY_BUFFER, 1

    byte_array = property(lambda self: self.raw)
    get_shape = lambda self: self.shape             # noqa: E731
    get_dtype = lambda self: None                   # noqa: E731
    get_memory_format = lambda self: self.fmt       # noqa: E731
    get_size = lambda self: len(self.raw)           # noqa: E731

    def ref_count_up(self):
        pass

    def ref_count_down(self):
        pass


class LocalCPUBackend:
    def __init__(self, capacity=64 << 20):
        self.capacity, self.in_use, self.lock = capacity, 0, threading.Lock()
        self.formats = []

    def allocate(self, shape, dtype, fmt):
        self.formats.append(fmt)
        if MemoryFormat(getattr(fmt, "value", fmt)) == MemoryFormat.BINARY_BUFFER:
            return BytesBufferMemoryObj(shape[0])      # as LMCache's BufferAllocator
        obj = MemoryObj(self, shape, dtype, fmt)
        with self.lock:
            if self.in_use + obj.get_size() > self.capacity:
                return None
            self.in_use += obj.get_size()
        return obj

    def free(self, obj):
        with self.lock:
            self.in_use -= obj.get_size()


def filled(backend, shape, dtype, fmt=MemoryFormat.KV_2LTD, seed=0):
    obj = backend.allocate(shape, dtype, fmt)
    g = torch.Generator().manual_seed(seed)
    obj.raw.copy_(torch.randint(0, 256, (obj.get_size(),), dtype=torch.uint8, generator=g))
    return obj


def digest(obj):
    return hashlib.sha256(bytes(obj.byte_array)).hexdigest()


def key(i, model="meta-llama/Llama-3.1-8B-Instruct"):
    return CacheEngineKey("vllm", model, 2, 1, 0x9e3779b97f4a7c15 * (i + 1) & (2 ** 64 - 1))


# ---- RemoteBackend's calls ----------------------------------------------------------------------------
class RemoteBackendCalls:
    """The calls lmcache/v1/storage_backend/remote_backend.py makes on its connector, in order,
    from a thread that is not the loop's."""

    def __init__(self, connector, timeout=WAIT):
        self.conn, self.loop, self.timeout = connector, connector.loop, timeout

    def _wait(self, coro, timeout=None):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout or self.timeout)

    async def _instrumented_put(self, k, obj):     # InstrumentedRemoteConnector.put
        try:
            await self.conn.put(k, obj)
        finally:
            obj.ref_count_down()

    def submit_put_task(self, k, obj):
        obj.ref_count_up()
        obj.ref_count_up()                          # NaiveSerializer.serialize
        ser = obj
        obj.ref_count_down()
        return asyncio.run_coroutine_threadsafe(self._instrumented_put(k, ser), self.loop)

    def batched_submit_put_task(self, keys, objs):
        assert self.conn.support_batched_put()
        sers = []
        for o in objs:
            o.ref_count_up()
            o.ref_count_up()
            sers.append(o)
            o.ref_count_down()
        return asyncio.run_coroutine_threadsafe(self.conn.batched_put(keys, sers), self.loop)

    def contains(self, k):
        return self._wait(self.conn.exists(k))

    def get_blocking(self, k):
        return self._wait(self.conn.get(k))

    def batched_get_blocking(self, keys):
        assert self.conn.support_batched_get()
        return self._wait(self.conn.batched_get(keys))

    def batched_async_contains(self, lookup_id, keys, pin=False):
        assert self.conn.support_batched_async_contains()

        async def call():
            return await asyncio.wait_for(self.conn.batched_async_contains(lookup_id, keys, pin), self.timeout)
        return self._wait(call())

    def batched_get_non_blocking(self, lookup_id, keys):
        assert self.conn.support_batched_get_non_blocking()
        return self._wait(self.conn.batched_get_non_blocking(lookup_id, keys))

    def close(self):
        self._wait(self.conn.close())


@pytest.fixture
def loop():
    """LMCache's event loop: its own thread, run_forever."""
    lp = asyncio.new_event_loop()
    t = threading.Thread(target=lp.run_forever, daemon=True)
    t.start()
    yield lp
    lp.call_soon_threadsafe(lp.stop)
    t.join(WAIT)
    lp.close()


# ---- a real redis-server ------------------------------------------------------------------------------
def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    def __init__(self, *extra):
        exe = shutil.which("redis-server")
        assert exe, "redis-server is not installed: run scripts/install-deps.sh (Debian package redis-server)"
        self.dir = tempfile.mkdtemp(prefix="omc-pylmc-")
        self.port = _free_port()
        self.sock = os.path.join(self.dir, "redis.sock")
        self.proc = subprocess.Popen([exe, "--port", str(self.port), "--bind", "127.0.0.1", "--unixsocket", self.sock,
                                      "--unixsocketperm", "700", "--dir", self.dir, "--save", "", "--appendonly", "no"]
                                     + list(extra), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        until = time.monotonic() + WAIT
        while not self._pong():             # the event: the server answers PING
            assert self.proc.poll() is None and time.monotonic() < until, "redis-server did not start"
            time.sleep(0.01)

    def _pong(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, True)


@pytest.fixture(scope="module")
def redis():
    r = Redis()
    yield r
    r.close()


@pytest.fixture
def backend():
    return LocalCPUBackend()


@pytest.fixture
def remote(redis, loop, backend):
    """A connector built as LMCache's external:// loader builds it: cls(loop=, local_cpu_backend=,
    config=), the store's host:port taken from config.remote_url."""
    config = SimpleNamespace(remote_url="external://127.0.0.1:%d/omniconn.lmcache/?connector_name="
                             "OmniconnRemoteConnector" % redis.port,
                             extra_config={"remote_enable_mla_worker_id_as0": False})
    conn = OmniconnRemoteConnector(loop=loop, local_cpu_backend=backend, config=config)
    calls = RemoteBackendCalls(conn)
    yield calls
    if not conn._closed:
        calls.close()


# ---- the tests -------------------------------------------------------------------------------------
def test_put_then_get_through_remote_backend_calls_keeps_every_byte_and_the_reference_counts(remote, backend,
                                                                                               monkeypatch):
    def no_pickle(*a, **k):
        raise AssertionError("pickle used")
    monkeypatch.setattr(pickle, "dumps", no_pickle)
    monkeypatch.setattr(pickle, "loads", no_pickle)
    objs = [filled(backend, (2, 4, 256, 64), torch.float16, MemoryFormat.KV_2LTD, 1),
            filled(backend, (1, 2, 256, 576), torch.bfloat16, MemoryFormat.KV_MLA_FMT, 2),
            filled(backend, (123457,), torch.uint8, MemoryFormat.BINARY, 3),          # cachegen's bytes
            filled(backend, (256, 2, 128), torch.float32, MemoryFormat.KV_T2D, 4)]
    keys = [key(i) for i in range(len(objs))]
    for k in keys:
        assert not remote.contains(k)
    futs = [remote.submit_put_task(k, o) for k, o in zip(keys, objs)]
    for f in futs:
        assert f.result(WAIT) is None
    for o in objs:
        assert o.ref_count == 1             # what RemoteBackend took, the wrapper gave back
    for k, o in zip(keys, objs):
        assert remote.contains(k) and remote.conn.exists_sync(k)
        got = remote.get_blocking(k)
        assert got is not None and got is not o
        assert (got.get_shape(), got.get_dtype(), got.get_memory_format()) == (o.shape, o.dtype, o.fmt)
        assert digest(got) == digest(o)
        assert torch.equal(got.tensor.view(torch.uint8), o.tensor.view(torch.uint8))
        assert got.ref_count == 1
        got.ref_count_down()
    assert remote.get_blocking(keys[0]) is not None     # a cache entry: reading does not consume it
    assert set(k.to_string() for k in keys) <= set(asyncio.run_coroutine_threadsafe(remote.conn.list(),
                                                                                     remote.loop).result(WAIT))
    assert remote.conn.remove_sync(keys[3]) and not remote.contains(keys[3])
    assert not remote.conn.remove_sync(keys[3])


def test_a_byte_buffer_without_a_dtype_round_trips(remote, backend):
    buf = BytesBufferMemoryObj(70001)
    buf.raw[:] = os.urandom(70001)
    remote.submit_put_task(key(50), buf).result(WAIT)
    got = remote.get_blocking(key(50))
    assert isinstance(got, BytesBufferMemoryObj) and bytes(got.raw) == bytes(buf.raw)
    assert (got.get_shape(), got.get_dtype()) == (torch.Size([70001, 0, 0, 0]), None)


def test_a_second_put_of_a_stored_key_keeps_the_first_value(remote, backend):
    k = key(40)
    first, second = filled(backend, (64,), torch.uint8, seed=5), filled(backend, (64,), torch.uint8, seed=6)
    remote.submit_put_task(k, first).result(WAIT)
    remote.submit_put_task(k, second).result(WAIT)
    got = remote.get_blocking(k)
    assert digest(got) == digest(first)


@pytest.mark.parametrize("tokens", [16, 512])       # values under and over a MiB: both batched_get paths
def test_batched_calls_answer_per_key_and_by_prefix(remote, backend, tokens):
    keys = [key(100 + tokens + i) for i in range(8)]
    objs = [filled(backend, (2, 2, tokens + i, 512), torch.float16, seed=10 + i) for i in range(8)]
    stored = [k for i, k in enumerate(keys) if i != 5]
    remote.batched_submit_put_task(stored, [o for i, o in enumerate(objs) if i != 5]).result(WAIT)
    assert remote.batched_async_contains("lookup-1", keys) == 5
    assert remote.batched_async_contains("lookup-2", keys[:5]) == 5
    assert remote.batched_async_contains("lookup-3", [key(999)] + keys) == 0
    assert remote.conn.batched_contains(keys) == [True] * 5 + [False] * 3
    assert remote.conn.batched_contains(keys, False) == [True] * 5 + [False, True, True]
    step = omniconn.lmcache._PIPELINE_BYTES // remote.conn._last_size
    assert (step < len(keys)) == (tokens == 512)          # 2 MiB values: several pipelines, 64 KiB: one
    got = remote.batched_get_blocking(keys)
    assert got[5] is None
    for i, g in enumerate(got):
        if i != 5:
            assert digest(g) == digest(objs[i]) and g.get_shape() == objs[i].shape
            g.ref_count_down()
    before = backend.in_use
    prefix = remote.batched_get_non_blocking("lookup-4", keys)
    assert [digest(p) for p in prefix] == [digest(o) for o in objs[:5]]
    assert backend.in_use == before + sum(p.get_size() for p in prefix)    # those after the miss went back
    for p in prefix:
        p.ref_count_down()
    assert backend.in_use == before


def test_loaded_as_lmcache_loads_a_plugin(redis, loop, backend):
    adapter = OmniconnConnectorAdapter()
    url = "omniconn://127.0.0.1:%d?ttl_ms=60000&max_inflight=4&stage=plug" % redis.port
    assert adapter.can_parse(url) and adapter.can_parse("omniconn+unix://" + redis.sock)
    assert not adapter.can_parse("redis://127.0.0.1:%d" % redis.port)
    ctx = SimpleNamespace(url=url, loop=loop, local_cpu_backend=backend, config=None, metadata=None)
    for conn in (adapter.create_connector(ctx),
                 adapter.create_connector(SimpleNamespace(url="omniconn+unix://%s?stage=plug" % redis.sock,
                                                          loop=loop, local_cpu_backend=backend, config=None))):
        calls = RemoteBackendCalls(conn)
        o = filled(backend, (3, 5), torch.float32, seed=7)
        calls.submit_put_task(key(7), o).result(WAIT)
        assert digest(calls.get_blocking(key(7))) == digest(o)
        assert asyncio.run_coroutine_threadsafe(conn.ping(), loop).result(WAIT) == 0
        calls.close()
        calls.close()                       # twice: no error
    with pytest.raises(ValueError, match="unknown option 'ttl'"):
        OmniconnRemoteConnector("omniconn://127.0.0.1:%d?ttl=5" % redis.port, loop, backend)
    with pytest.raises(ValueError, match="not an omniconn"):
        OmniconnRemoteConnector("lm://127.0.0.1:%d" % redis.port, loop, backend)
    with pytest.raises(ValueError, match="no URL"):
        OmniconnRemoteConnector(None, loop, backend, SimpleNamespace(remote_url=None, extra_config=None))


def test_a_key_longer_than_the_store_allows_goes_by_its_digest(remote, backend):
    k = key(3, model="org/" + "m" * 400)
    o = filled(backend, (100,), torch.uint8, seed=8)
    remote.submit_put_task(k, o).result(WAIT)
    assert remote.contains(k) and digest(remote.get_blocking(k)) == digest(o)
    assert remote.batched_get_blocking([k])[0] is not None
    with pytest.raises(ValueError, match="cannot store key of 5"):        # past what a reader accepts
        remote.submit_put_task(key(4, model="x" * 5000), o).result(WAIT)
    assert o.ref_count == 1


# ---- bad input ------------------------------------------------------------------------------------------
def _stored(remote, k):
    """The raw entry the connector stored for k."""
    with remote.conn.conn.get(remote.conn.stage, "kv", k.to_string(), timeout=0) as b:
        return bytearray(b.to_bytes())


def _replace(remote, k, entry):
    raw = remote.conn.conn
    raw.cleanup(remote.conn.stage, "kv", k.to_string())
    raw.put(remote.conn.stage, "kv", k.to_string(), bytes(entry), readers=READERS_CACHE)


def test_the_stored_entry_is_laid_out_as_documented(remote, backend):
    k, o = key(210), filled(backend, (2, 3, 5, 7), torch.bfloat16, MemoryFormat.KV_2TD, seed=14)
    remote.submit_put_task(k, o).result(WAIT)
    e = bytes(_stored(remote, k))
    magic, version, flags, fmt, ndim, dlen, zero, klen, crc, size = struct.unpack_from("<4sHHHHHHIIQ", e, 0)
    assert (magic, version, flags, fmt, ndim, zero, crc) == (b"OMLC", 1, 0, MemoryFormat.KV_2TD.value, 4, 0, 0)
    assert struct.unpack_from("<4q", e, 32) == (2, 3, 5, 7)
    assert e[64:64 + dlen] == b"bfloat16" and e[64 + dlen:64 + dlen + klen] == k.to_string().encode()
    assert size == o.get_size() == 2 * 3 * 5 * 7 * 2 and e[64 + dlen + klen:] == bytes(o.byte_array)


@pytest.mark.parametrize("damage", ["short", "long", "garbage", "foreign", "other-key", "dtype", "shape-lies",
                                    "length-lies",
                                    "fmt", "empty"])
def test_an_unreadable_entry_is_a_logged_miss_and_is_dropped(remote, backend, damage, caplog, monkeypatch):
    monkeypatch.setattr(omniconn.lmcache, "_MemoryFormat", MemoryFormat)    # as where LMCache is imported
    k = key(200)
    o = filled(backend, (4, 32), torch.float16, seed=9)
    remote.submit_put_task(k, o).result(WAIT)
    e = _stored(remote, k)
    if damage == "short":
        e = e[:-10]
    elif damage == "long":
        e += b"trailing bytes"
    elif damage == "garbage":
        e = bytearray(os.urandom(len(e)))
    elif damage == "foreign":
        e = bytearray(b"a value some other program stored")
    elif damage == "other-key":
        e = e.replace(k.to_string().encode(), key(201).to_string().encode())
    elif damage == "dtype":
        e = e.replace(b"float16", b"float17")
    elif damage == "shape-lies":                    # the shape says 4 x 16, the value is 4 x 32
        e[32 + 8:32 + 16] = (16).to_bytes(8, "little")
    elif damage == "length-lies":
        e[24:32] = (1 << 60).to_bytes(8, "little")
    elif damage == "fmt":
        e[8:10] = (0xffff).to_bytes(2, "little")
    elif damage == "empty":
        e = bytearray()
    _replace(remote, k, e)
    before = backend.in_use
    assert remote.get_blocking(k) is None
    assert backend.in_use == before                 # nothing allocated is kept
    assert remote.conn.unreadable_entries == 1
    assert "unreadable" in caplog.text
    assert not remote.contains(k)                   # dropped: the next lookup is a plain miss
    remote.submit_put_task(k, o).result(WAIT)       # and the key can be stored again
    assert digest(remote.get_blocking(k)) == digest(o)


def test_a_flipped_bit_is_caught_when_checksums_are_on(redis, loop, backend, caplog):
    conn = OmniconnRemoteConnector("omniconn://127.0.0.1:%d?checksum=1&stage=crc" % redis.port, loop, backend)
    calls = RemoteBackendCalls(conn)
    k, o = key(300), filled(backend, (1000,), torch.uint8, seed=11)
    calls.submit_put_task(k, o).result(WAIT)
    assert digest(calls.get_blocking(k)) == digest(o)
    e = _stored(calls, k)
    e[-1] ^= 1
    _replace(calls, k, e)
    assert calls.get_blocking(k) is None and "CRC-32" in caplog.text
    calls.close()


def test_a_value_larger_than_the_pool_fails_the_put_with_a_logged_fix(redis, loop, backend, caplog):
    conn = OmniconnRemoteConnector("omniconn://127.0.0.1:%d?pool_size=%d&stage=small" % (redis.port, 1 << 20),
                                   loop, backend)
    calls = RemoteBackendCalls(conn)
    o = filled(backend, (2 << 20,), torch.uint8, seed=15)
    with pytest.raises(omniconn.OmniconnError) as e:
        calls.submit_put_task(key(400), o).result(WAIT)
    assert e.value.name == "OMC_ERR_TOO_LARGE" and "raise pool_size" in caplog.text
    assert o.ref_count == 1 and not calls.contains(key(400))
    calls.close()


def test_a_value_larger_than_the_readers_pool_is_a_logged_miss_and_the_reader_goes_on(redis, loop, remote, backend,
                                                                                        caplog):
    big, small = filled(backend, (2 << 20,), torch.uint8, seed=16), filled(backend, (4096,), torch.uint8, seed=17)
    remote.submit_put_task(key(410), big).result(WAIT)
    remote.submit_put_task(key(411), small).result(WAIT)
    conn = OmniconnRemoteConnector("omniconn://127.0.0.1:%d?pool_size=%d&max_inflight=1" % (redis.port, 1 << 20),
                                   loop, backend)
    reader = RemoteBackendCalls(conn)
    assert reader.get_blocking(key(410)) is None
    # the pool's size named: by the store connector's own line, or by the core's refusal hint
    # inside the miss's warning (which of the two the log holds depends on the path the get took
    # and on the library's log level); the entry's size too wherever the line gives it
    pool = re.search(r"larger than (?:the reader's|this receiver's whole) pool \((\d+) bytes\)", caplog.text)
    assert "does not fit this connector's pool" in caplog.text and pool
    assert int(pool.group(1)) == 1 << 20
    for size in re.findall(r"the payload \((\d+) bytes\) is larger than", caplog.text):
        assert int(size) > 2 << 20
    assert "connection" not in caplog.text
    got = reader.get_blocking(key(411))                   # the connection went on
    assert digest(got) == digest(small)
    got.ref_count_down()
    got = reader.batched_get_blocking([key(411), key(410), key(411)])
    assert got[1] is None and digest(got[0]) == digest(small) and digest(got[2]) == digest(small)
    for g in (got[0], got[2]):
        g.ref_count_down()
    assert reader.contains(key(410))                      # not consumed: a reader with room still gets it
    got = remote.get_blocking(key(410))
    assert digest(got) == digest(big)
    got.ref_count_down()
    assert conn.conn.health()["pool_in_use"] == 0         # no view left behind
    reader.close()


def test_a_missing_key_is_none_everywhere(remote):
    assert remote.get_blocking(key(500)) is None
    assert not remote.contains(key(500))
    assert remote.batched_get_blocking([key(500), key(501)]) == [None, None]
    assert remote.batched_async_contains("l", [key(500)]) == 0
    assert remote.batched_get_non_blocking("l", [key(500)]) == []


def test_a_full_cpu_backend_is_a_miss_not_an_error(remote, backend, caplog):
    k, o = key(600), filled(backend, (1 << 20,), torch.uint8, seed=12)
    remote.submit_put_task(k, o).result(WAIT)
    backend.capacity = backend.in_use              # no room left
    assert remote.get_blocking(k) is None and "no room" in caplog.text
    assert remote.batched_get_blocking([k]) == [None]


def test_a_store_that_went_away_fails_each_call_clearly_and_nothing_hangs(loop, backend):
    gone = Redis()
    try:
        conn = OmniconnRemoteConnector("omniconn://127.0.0.1:%d" % gone.port, loop, backend)
        calls = RemoteBackendCalls(conn)
        k, o = key(700), filled(backend, (4096,), torch.uint8, seed=13)
        calls.submit_put_task(k, o).result(WAIT)
        gone.stop()
        t0 = time.monotonic()
        for call in (lambda: calls.contains(k), lambda: calls.get_blocking(k), lambda: calls.batched_get_blocking([k]),
                     lambda: calls.batched_async_contains("l", [k]),
                     lambda: calls.submit_put_task(key(701), o).result(WAIT)):
            with pytest.raises(omniconn.OmniconnError) as e:
                call()
            assert e.value.name in ("OMC_ERR_CONNECTION", "OMC_ERR_TIMEOUT", "OMC_ERR_UNAVAILABLE"), e.value
        assert o.ref_count == 1                     # the failed put gave its reference back too
        assert asyncio.run_coroutine_threadsafe(conn.ping(), loop).result(WAIT) < 0
        assert time.monotonic() - t0 < WAIT
        calls.close()
    finally:
        gone.close()


def test_close_waits_for_calls_in_flight_and_later_calls_fail_clearly(redis, loop, backend):
    conn = OmniconnRemoteConnector("omniconn://127.0.0.1:%d?stage=closing" % redis.port, loop, backend)
    calls = RemoteBackendCalls(conn)
    o = filled(backend, (1 << 20,), torch.uint8, seed=16)
    keys = [key(900 + i) for i in range(16)]
    for f in [calls.submit_put_task(k, o) for k in keys]:
        f.result(WAIT)
    stop, errors, done = threading.Event(), [], []

    def lookups():                  # LMCache's own threads: exists_sync and blocking gets meanwhile
        while not stop.is_set():
            try:
                conn.exists_sync(keys[0])
                g = calls.get_blocking(keys[1])
                if g is not None:
                    g.ref_count_down()
                done.append(1)
            except omniconn.OmniconnError as e:
                errors.append(e)
                return
    threads = [threading.Thread(target=lookups) for _ in range(3)]
    for t in threads:
        t.start()
    futs = [asyncio.run_coroutine_threadsafe(conn.batched_get(keys), loop) for _ in range(4)]
    until = time.monotonic() + WAIT
    while len(done) < 3 and time.monotonic() < until:      # the event: lookups under way
        time.sleep(0.001)
    calls.close()
    for f in futs:                  # each finished before the close, or failed with ClosedError
        try:
            for g in f.result(WAIT):
                if g is not None:
                    g.ref_count_down()
        except omniconn.OmniconnError as e:
            assert e.name == "OMC_ERR_CLOSED", e
    stop.set()
    for t in threads:
        t.join(WAIT)
        assert not t.is_alive()
    assert all(e.name == "OMC_ERR_CLOSED" for e in errors), errors
    for call in (lambda: calls.contains(keys[0]), lambda: calls.get_blocking(keys[0]), lambda: conn.exists_sync(keys[0]),
                 lambda: calls.submit_put_task(key(999), o).result(WAIT)):
        with pytest.raises(omniconn.OmniconnError) as e:
            call()
        assert e.value.name == "OMC_ERR_CLOSED"
    assert backend.in_use == o.get_size()          # every get's MemoryObj went back


def test_entries_redis_evicts_under_maxmemory_read_as_misses_never_as_wrong_bytes(loop, backend):
    """Redis as LMCache deployments run it: a memory cap and an eviction policy. More chunks
    than fit: each get is the exact bytes or a miss, and contains agrees with get afterwards."""
    small = Redis("--maxmemory", "24mb", "--maxmemory-policy", "allkeys-random")
    try:
        conn = OmniconnRemoteConnector("omniconn://127.0.0.1:%d" % small.port, loop, backend)
        calls = RemoteBackendCalls(conn)
        objs = [filled(backend, (512 << 10,), torch.uint8, seed=100 + i) for i in range(96)]     # 48 MiB
        keys = [key(1000 + i) for i in range(len(objs))]
        for k, o in zip(keys, objs):
            try:
                calls.submit_put_task(k, o).result(WAIT)
            except omniconn.OmniconnError:      # Redis refusing a write at its cap: a put not stored
                pass
        hits = 0
        for k, o in zip(keys, objs):
            got = calls.get_blocking(k)
            if got is not None:
                assert digest(got) == digest(o)
                hits += 1
                got.ref_count_down()
            else:
                assert not calls.contains(k)
        assert 0 < hits < len(objs)             # some stayed, some were evicted
        got = calls.batched_get_blocking(keys)
        for g, o in zip(got, objs):
            if g is not None:
                assert digest(g) == digest(o)
                g.ref_count_down()
        calls.close()
    finally:
        small.close()


# ---- two processes: one stores, another retrieves -------------------------------------------------------
_READER = r"""
import asyncio, hashlib, sys, threading
sys.path[:0] = [%r, %r]
import test_lmcache as t
from omniconn.lmcache import OmniconnRemoteConnector
loop = asyncio.new_event_loop(); threading.Thread(target=loop.run_forever, daemon=True).start()
backend = t.LocalCPUBackend()
calls = t.RemoteBackendCalls(OmniconnRemoteConnector(sys.argv[1], loop, backend))
keys = [t.key(i) for i in range(800, 806)]
print(calls.batched_async_contains("x", keys))
for g in calls.batched_get_blocking(keys):
    print(g.get_memory_format().name, tuple(g.get_shape()), str(g.get_dtype()), t.digest(g))
calls.close()
"""


def test_one_process_stores_and_another_retrieves(remote, backend, redis):
    kinds = [(torch.float16, MemoryFormat.KV_2LTD), (torch.bfloat16, MemoryFormat.KV_2TD),
             (torch.float32, MemoryFormat.KV_T2D), (torch.uint8, MemoryFormat.BINARY),
             (torch.int64, MemoryFormat.UNDEFINED), (torch.float16, MemoryFormat.KV_MLA_FMT)]
    objs = [filled(backend, (2, 3, 64, 32), dt, fmt, seed=20 + i) for i, (dt, fmt) in enumerate(kinds)]
    keys = [key(i) for i in range(800, 806)]
    for f in [remote.submit_put_task(k, o) for k, o in zip(keys, objs)]:
        f.result(WAIT)
    out = subprocess.run([sys.executable, "-c", _READER % (HERE, os.path.join(ROOT, "python")),
                          "omniconn://127.0.0.1:%d" % redis.port], capture_output=True, text=True, timeout=WAIT * 2,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert lines[0] == "6"
    for line, o in zip(lines[1:], objs):
        assert line == "%s %r %s %s" % (o.fmt.name, tuple(o.shape), o.dtype, digest(o))
