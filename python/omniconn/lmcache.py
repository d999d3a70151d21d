"""An LMCache-shaped remote connector on the omniconn store connector (Redis / Redis Cluster).

LMCache's RemoteConnector family stores KV-cache chunks in a shared store with an async contract
(exists, exists_sync, get, put, list, close, and batched get / put / contains). This class offers
the same shape over omniconn's store connector, so the chunks are moved by the C executor (PEEK >
PREFETCH > GET > PUT priorities, a bound on requests in flight per server, pipelined batches)
and each tensor travels as raw bytes in an omniconn frame: its dtype and shape go in the frame
header and in the store's metadata key, nothing is pickled.

    conn = OmniStoreRemoteConnector("redis://127.0.0.1:6379")
    await conn.put("chunk-0", kv_tensor)           # a torch tensor or numpy array (CPU)
    if await conn.exists("chunk-0"):
        t = await conn.get("chunk-0")              # a torch tensor (numpy if torch is absent)
    await conn.close()

Keys are strings (LMCache's CacheEngineKey.to_string()). Entries are cache entries: reads never
consume them; they leave with their TTL or cleanup().
"""
import asyncio
import concurrent.futures

from . import _lib
from .store import StoreConnector, READERS_CACHE

try:
    import torch as _torch
except ImportError:     # torch is optional: tensors are then numpy arrays
    _torch = None
import numpy as _np

_NP = {1: "uint8", 2: "int8", 3: "uint16", 4: "int16", 5: "uint32", 6: "int32", 7: "uint64", 8: "int64",
       9: "float16", 11: "float32", 12: "float64", 13: "bool"}


class OmniStoreRemoteConnector:
    """async put/get/exists/list/close and the batched forms, over StoreConnector.
    from_stage/to_stage name the edge (keys are qualified by both, as on every omniconn
    connector); ttl_ms is the entries' lifetime (0 = the connector's default)."""

    support_batched_get = True
    support_batched_put = True
    support_batched_async_contains = True

    def __init__(self, url="redis://127.0.0.1:6379", from_stage="lmcache", to_stage="kv", ttl_ms=0,
                 max_inflight=0, pool_size=0, as_torch=True, threads=8):
        self.conn = StoreConnector(url, pool_size=pool_size, ttl_ms=ttl_ms, max_inflight=max_inflight)
        self.from_stage, self.to_stage, self.ttl_ms = from_stage, to_stage, ttl_ms
        self.as_torch = as_torch and _torch is not None
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="omc-store")

    # -- plumbing: every blocking call runs on a worker thread; the C executor orders them
    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _tensor_of(self, buf, seg):
        """A copy of a frame's tensor segment as torch (or numpy), then the buffer goes back."""
        try:
            if seg is None:                         # raw bytes, not put by this class
                arr = _np.frombuffer(buf.view, dtype=_np.uint8).copy()
            else:
                name, kind, code, shape, offset, size = seg
                if code == 10:                      # bfloat16: numpy has none, torch does
                    t = buf.as_tensor(_torch.bfloat16, shape, offset).clone()
                    return t
                arr = buf.numpy(_NP.get(code, "uint8"), shape if kind == _lib.OMC_SEGMENT_TENSOR else None, offset).copy()
            return _torch.from_numpy(arr) if self.as_torch else arr
        finally:
            buf.release(strict=False)

    def _put_sync(self, key, value):
        try:
            self.conn.put_tensor(self.from_stage, self.to_stage, key, "kv", value, readers=READERS_CACHE,
                                 ttl_ms=self.ttl_ms)
        except _lib.OmniconnError as e:
            if e.code != _lib.CONSTANTS["OMC_ERR_EXISTS"]:      # already cached: LMCache keeps the first
                raise

    def _get_sync(self, key):
        try:
            buf, seg = self.conn.get_first(self.from_stage, self.to_stage, key, timeout=0)
        except (_lib.NotFoundError, _lib.TimeoutError_):
            return None
        return self._tensor_of(buf, seg)

    # -- the RemoteConnector contract
    async def exists(self, key):
        return await self._run(self.exists_sync, key)

    def exists_sync(self, key):
        return self.conn.exists(self.from_stage, self.to_stage, key)

    async def get(self, key):
        """The tensor stored under key, or None."""
        return await self._run(self._get_sync, key)

    async def put(self, key, value):
        await self._run(self._put_sync, key, value)

    async def list(self):
        return [k for _, _, k in await self._run(self.conn.list, self.from_stage, self.to_stage)]

    async def close(self):
        self._pool.shutdown(wait=True)
        self.conn.close()

    # -- batched forms: one pipeline per server
    async def batched_async_contains(self, keys):
        """How many of keys, from the first, are all present (LMCache's prefix semantics)."""
        found = await self._run(self.conn.exists_batch, self.from_stage, self.to_stage, list(keys))
        n = 0
        for f in found:
            if not f:
                break
            n += 1
        return n

    async def batched_get(self, keys, prefetch=False):
        bufs = await self._run(lambda: self.conn.get_batch(self.from_stage, self.to_stage, list(keys),
                                                           "prefetch" if prefetch else "get"))
        out = []
        for b in bufs:
            if b is None:
                out.append(None)
                continue
            seg = None
            if b.is_frame:
                try:
                    from ._core import first_segment
                    seg = first_segment(b)
                except Exception:
                    b.release(strict=False)
                    raise
            out.append(self._tensor_of(b, seg))
        return out

    async def batched_put(self, keys, values):
        await asyncio.gather(*[self.put(k, v) for k, v in zip(keys, values)])
