"""The store connector: payloads in Redis or a Redis Cluster, behind the usual Connector calls.

    from omniconn.store import StoreConnector
    with StoreConnector("redis://127.0.0.1:6379") as conn:        # or unix:///run/redis.sock
        meta = conn.put_tensor("prefill", "decode", "chunk-1", "kv", tensor)
        buf, seg = conn.get_first("prefill", "decode", "chunk-1")  # any process, any node

Every Connector method works (put, get, put_tensor, get_first, exists, list, cleanup, health).
The store adds batched calls pipelined on one connection per server: exists_batch and
get_batch. See docs/store.md and omniconn_store.h.
"""
import ctypes

from ._core import Connector, Buffer, deadline, _b, error, _address, _u32, _u64, _i64, _batch_buffers
from ._store_lib import lib, PRIORITIES, READERS_CACHE

__all__ = ["StoreConnector", "StoreDirectory", "PRIORITIES", "READERS_CACHE"]

ROLES = {None: 0, "default": 0, "sender": 1, "receiver": 2, "dual": 3}


class StoreConnector(Connector):
    """A store connector. url: redis://[user[:password]@]host[:port][/db] or unix:///path;
    pool_size: the reader's pool in bytes (0 = 256 MiB); ttl_ms: default key expiry (0 = 5 min,
    < 0 = none); max_inflight: requests in flight per server (0 = 8)."""

    def __init__(self, url="redis://127.0.0.1:6379", role=None, pool_size=0, ttl_ms=0, max_inflight=0):
        if role not in ROLES:
            raise ValueError("role must be one of %s, not %r" % (sorted(k for k in ROLES if k), role))
        super().__init__(lib.omc_store_create_url, _b(url), ROLES[role], _u64(pool_size, "pool_size"),
                         _i64(ttl_ms, "ttl_ms"), _u32(max_inflight, "max_inflight"))

    def exists_batch(self, from_stage, to_stage, keys, timeout=None):
        """[bool] for keys, one pipelined request per server (LMCache's batched contains)."""
        n = len(keys)
        arr = (ctypes.c_char_p * n)(*[_b(k) for k in keys])
        res = (ctypes.c_int * n)()
        r = self._call(lib.omc_store_exists_batch, _b(from_stage), _b(to_stage), arr, n, res,
                       deadline(10.0 if timeout is None else timeout))
        if r != 0:
            raise error(r, "exists_batch")
        return [res[i] == 0 for i in range(n)]

    def get_batch(self, from_stage, to_stage, keys, priority="get", timeout=None, wait=False):
        """[Buffer or None] for keys, one pipelined request per server. A missing key is None
        (wait=True: wait for it until the timeout). Release each Buffer (or use `with`)."""
        n = len(keys)
        arr = (ctypes.c_char_p * n)(*[_b(k) for k in keys])
        hs, ds = (ctypes.c_void_p * n)(), (ctypes.c_void_p * n)()
        ss, fs, rs = (ctypes.c_uint64 * n)(), (ctypes.c_uint32 * n)(), (ctypes.c_int32 * n)()
        r = self._call(lib.omc_store_get_batch_flat, _b(from_stage), _b(to_stage), arr, n, PRIORITIES[priority],
                       1 if wait else 0, deadline(10.0 if timeout is None else timeout), hs, ds, ss, fs, rs)
        return _batch_buffers(n, keys, r, hs, ds, ss, fs, rs, error)


class StoreDirectory:
    """The shared key directory for the remote connector: producers register each put's location
    in the store; a get on any node finds the sender by key alone (no sender list).
    store: a StoreConnector; remote: a TcpConnector (or RdmaConnector); name: this producer's
    unique name (None for a consumer). Both connectors must outlive the directory."""

    def __init__(self, store, remote, name=None):
        self._store, self._remote = store, remote       # kept alive with the directory
        h = ctypes.c_void_p()
        r = lib.omc_store_dir_create_flat(store._c(), remote._c(), _b(name), ctypes.byref(h))
        if r != 0:
            raise error(r, "directory create")
        self._h = h.value

    def put(self, from_stage, to_stage, key, data, readers=1, ttl_ms=0, frame=False):
        """Put on the remote connector and register where (copy path)."""
        addr, size, keep = _address(data)
        r = lib.omc_store_dir_put_flat(self._h, _b(from_stage), _b(to_stage), _b(key), addr, size, 1 if frame else 0,
                                       readers, ttl_ms)
        del keep
        if r != 0:
            raise error(r, "directory put %r" % (key,))

    def get(self, from_stage, to_stage, key, timeout=None):
        """Wait for the key's record, then get the payload from its sender: a Buffer."""
        hs, d, sz, fl = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_uint32()
        r = lib.omc_store_dir_get_flat(self._h, _b(from_stage), _b(to_stage), _b(key),
                                       deadline(10.0 if timeout is None else timeout), ctypes.byref(hs), ctypes.byref(d),
                                       ctypes.byref(sz), ctypes.byref(fl))
        if r != 0:
            raise error(r, "directory get %r" % (key,))
        return Buffer(hs.value, d.value, sz.value, fl.value)

    def close(self):
        h, self._h = self._h, None
        if h:
            lib.omc_store_dir_destroy(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
