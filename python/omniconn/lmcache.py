"""LMCache remote connectors on the omniconn store connector (Redis / Redis Cluster).

Two classes:

OmniconnRemoteConnector is an LMCache v1 RemoteConnector: LMCache's own RemoteBackend drives it
unchanged (CacheEngineKey keys, MemoryObj values; get allocates from LMCache's local CPU backend).
Load it the way LMCache loads any third-party connector, from its config:

    remote_url: "omniconn://127.0.0.1:6379"            # or omniconn+unix:///run/redis.sock
    remote_serde: "naive"
    remote_storage_plugins: ["omniconn"]
    extra_config:
      remote_storage_plugin.omniconn.module_path: omniconn.lmcache
      remote_storage_plugin.omniconn.class_name: OmniconnConnectorAdapter

or, with LMCache's older "external" scheme,
remote_url: "external://127.0.0.1:6379/omniconn.lmcache/?connector_name=OmniconnRemoteConnector".
URL options (query): ttl_ms (entry lifetime, default none), max_inflight, pool_size, stage
(the key namespace, default "lmcache"), checksum=1 (a CRC-32 of each value, checked on get).

OmniStoreRemoteConnector is the older tensor-shaped class (string keys, torch tensors or numpy
arrays as values), kept for code that uses it:

    conn = OmniStoreRemoteConnector("redis://127.0.0.1:6379")
    await conn.put("chunk-0", kv_tensor)           # a torch tensor or numpy array (CPU)
    if await conn.exists("chunk-0"):
        t = await conn.get("chunk-0")              # a torch tensor (numpy if torch is absent)
    await conn.close()

Both move bytes through the C executor (PEEK > PREFETCH > GET > PUT priorities, a bound on
requests in flight per server, pipelined batches); nothing is pickled. Entries are cache
entries: reads never consume them.
"""
import asyncio
import concurrent.futures
import hashlib
import logging
import struct
import threading
import urllib.parse
import zlib

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


# ---- LMCache v1: OmniconnRemoteConnector ---------------------------------------------------------
# What LMCache's RemoteBackend calls (lmcache/v1/storage_backend/connector/base_connector.py):
# async exists / get / put / list / close, exists_sync, the batched forms behind their support_*
# switches, remove_sync, ping. Keys are CacheEngineKey (stored under key.to_string()); values are
# MemoryObj (byte_array plus shape, dtype and memory format). A get allocates the MemoryObj from
# LMCache's local CPU backend, as LMCache's own connectors do, and fills it with one copy.
logger = logging.getLogger("omniconn.lmcache")

try:        # LMCache's loaders check that a plug-in subclasses its RemoteConnector / ConnectorAdapter
    from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector as _RemoteConnector
except Exception as e:          # LMCache absent (or not importable here): a plain class, same calls
    logger.debug("LMCache's RemoteConnector is not importable (%s): a plain base class is used", e)
    _RemoteConnector = object
try:
    from lmcache.v1.storage_backend.connector import ConnectorAdapter as _ConnectorAdapter
except Exception:
    _ConnectorAdapter = object
try:
    from lmcache.v1.memory_management import MemoryFormat as _MemoryFormat
except Exception:
    _MemoryFormat = None

# The stored value: one store entry per key, a header then the MemoryObj's bytes. One entry, not
# a metadata key beside a data key, so a reader never sees one without the other.
#   0   4  magic "OMLC"          4  u16 version (1)      6  u16 flags (bit 0: crc32 set)
#   8  u16 LMCache MemoryFormat value                      10  u16 ndim (0..8)
#  12  u16 dtype name length (1..32)   14 u16 zero         16  u32 key length (1..4096)
#  20  u32 CRC-32 of the value (flag bit 0)                24  u64 value length
#  32  ndim x i64 shape, the dtype name (torch's, ASCII; "none" for a byte buffer), the key
#      (UTF-8), then the value
_HEAD = struct.Struct("<4sHHHHHHIIQ")
_MAGIC, _VERSION, _FLAG_CRC = b"OMLC", 1, 1
_MAX_NDIM, _MAX_DTYPE, _MAX_KEY = 8, 32, 4096
_TO_STAGE = "kv"
_NO_DTYPE = "none"          # the dtype name of a MemoryObj without one (a byte buffer)
_KEY_ROOM = 255             # a qualified store key (stage, "kv", key) stays below 256 bytes
_PIPELINE_BYTES = 4 << 20   # one pipelined get_batch asks for about this many bytes at most (see batched_get)
_OPTIONS = {"ttl_ms": int, "max_inflight": int, "pool_size": int, "stage": str, "checksum": int,
            "threads": int, "timeout_ms": int}


class EntryError(ValueError):
    """A stored value that is not a well-formed entry for the key asked for."""


def _pack_header(key, shape, dtype, fmt, size, crc, flags):
    """The entry header; ValueError for what _unpack_header would refuse (stored, it would only
    be dropped on the next read)."""
    d, k = dtype.encode("ascii"), key.encode("utf-8")
    if len(shape) > _MAX_NDIM or any(x < 0 for x in shape) or not 0 < len(d) <= _MAX_DTYPE or \
            not 0 < len(k) <= _MAX_KEY or not 0 <= fmt <= 0xffff:
        raise ValueError("omniconn.lmcache: cannot store key of %d bytes, shape %r, dtype %r, memory format %d "
                         "(limits: %d bytes, %d dimensions)" % (len(k), tuple(shape), dtype, fmt, _MAX_KEY, _MAX_NDIM))
    head = _HEAD.pack(_MAGIC, _VERSION, flags, fmt, len(shape), len(d), 0, len(k), crc, size)
    return head + struct.pack("<%dq" % len(shape), *shape) + d + k


def _unpack_header(view, key):
    """(shape, dtype name, fmt value, value offset, value size, crc or None) of an entry, or
    EntryError saying what is wrong. Every length is checked against the bytes there are."""
    total = len(view)
    if total < _HEAD.size:
        raise EntryError("%d bytes, shorter than the %d-byte header" % (total, _HEAD.size))
    magic, version, flags, fmt, ndim, dlen, _, klen, crc, size = _HEAD.unpack_from(view, 0)
    if magic != _MAGIC or version != _VERSION:
        raise EntryError("not an omniconn LMCache entry (magic %r, version %d)" % (magic, version))
    if ndim > _MAX_NDIM or not 0 < dlen <= _MAX_DTYPE or not 0 < klen <= _MAX_KEY:
        raise EntryError("header out of range (ndim %d, dtype name %d bytes, key %d bytes)" % (ndim, dlen, klen))
    off = _HEAD.size + 8 * ndim + dlen + klen
    if off + size != total:
        raise EntryError("header says %d value bytes after %d, the entry holds %d bytes" % (size, off, total))
    shape = struct.unpack_from("<%dq" % ndim, view, _HEAD.size)
    if any(x < 0 for x in shape):
        raise EntryError("negative dimension in shape %r" % (shape,))
    p = _HEAD.size + 8 * ndim
    try:
        dtype = bytes(view[p:p + dlen]).decode("ascii")
        stored_key = bytes(view[p + dlen:off]).decode("utf-8")
    except UnicodeDecodeError:
        raise EntryError("dtype name or key is not text") from None
    if stored_key != key:
        raise EntryError("entry belongs to key %r" % (stored_key,))
    return shape, dtype, fmt, off, size, (crc if flags & _FLAG_CRC else None)


def _torch_dtype(name):
    if name == _NO_DTYPE:
        return None
    import torch
    d = getattr(torch, name, None)
    if not isinstance(d, torch.dtype):
        raise EntryError("unknown dtype %r" % (name,))
    return d


def _memory_format(value):
    """LMCache's MemoryFormat for a stored value (the int itself where LMCache is not importable)."""
    if _MemoryFormat is None:
        return value
    try:
        return _MemoryFormat(value)
    except ValueError:
        raise EntryError("unknown memory format %d" % value) from None


def _byte_view(obj):
    """A flat writable-if-possible byte memoryview of a MemoryObj's byte_array."""
    mv = obj if isinstance(obj, memoryview) else memoryview(obj)
    if mv.format == "B" and mv.ndim == 1:
        return mv
    try:
        return mv.cast("B")
    except TypeError:          # a format cast() refuses ("<B", a non-contiguous layout): through numpy
        return memoryview(_np.frombuffer(mv, dtype=_np.uint8))


def _parse_url(url):
    """(store url, {option: value}) from omniconn://, omniconn+unix://, redis://, unix:// or
    LMCache's external://host:port/module/?connector_name=... form."""
    u = urllib.parse.urlsplit(url)
    opts = {}
    for name, values in urllib.parse.parse_qs(u.query, keep_blank_values=True).items():
        if name == "connector_name" and u.scheme == "external":
            continue
        if name not in _OPTIONS:
            raise ValueError("omniconn.lmcache: unknown option %r in %r (known: %s)"
                             % (name, url, ", ".join(sorted(_OPTIONS))))
        try:
            opts[name] = _OPTIONS[name](values[-1])
        except ValueError:
            raise ValueError("omniconn.lmcache: option %s=%r in %r is not a %s" % (name, values[-1], url,
                             _OPTIONS[name].__name__)) from None
    if u.scheme in ("omniconn", "redis"):
        return urllib.parse.urlunsplit(("redis", u.netloc, u.path, "", "")), opts
    if u.scheme in ("omniconn+unix", "unix"):
        return "unix://" + u.path, opts
    if u.scheme == "external":          # the module path is LMCache's business: host:port is the store
        return urllib.parse.urlunsplit(("redis", u.netloc, "", "", "")), opts
    raise ValueError("omniconn.lmcache: %r is not an omniconn://, omniconn+unix://, redis://, unix:// or "
                     "external:// URL" % (url,))


class OmniconnRemoteConnector(_RemoteConnector):
    """An LMCache v1 remote connector over omniconn's StoreConnector.

    url: omniconn://[user[:password]@]host:port[/db][?options], omniconn+unix:///path[?options],
    or None to take it from config (extra_config "omniconn.url", else config.remote_url, which
    may be LMCache's external:// URL naming host:port). loop: LMCache's event loop (calls are
    awaited on it; the blocking store calls run on this connector's threads). local_cpu_backend:
    what get() allocates MemoryObjs from (its allocate(shape, dtype, fmt)). Keyword options
    override the URL's. Thread-safe: LMCache calls exists_sync from its own threads."""

    def __init__(self, url=None, loop=None, local_cpu_backend=None, config=None, **options):
        if url is None:
            url = self._url_of(config)
        store_url, opts = _parse_url(url)
        unknown = set(options) - set(_OPTIONS)
        if unknown:
            raise ValueError("omniconn.lmcache: unknown option(s) %s" % ", ".join(sorted(unknown)))
        opts.update(options)
        self.url, self.loop, self.local_cpu_backend, self.config = url, loop, local_cpu_backend, config
        self.stage = opts.get("stage", "lmcache")
        self.checksum = bool(opts.get("checksum", 0))
        self.timeout = opts.get("timeout_ms", 10000) / 1000.0
        self.unreadable_entries = 0     # entries found malformed, read as misses and dropped
        self._count_lock = threading.Lock()
        self._last_size = 0             # bytes of the last value put or got: sizes batched_get's pipelines
        self.conn = StoreConnector(store_url, pool_size=opts.get("pool_size", 0), ttl_ms=opts.get("ttl_ms", -1),
                                   max_inflight=opts.get("max_inflight", 0))
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=opts.get("threads", 8),
                                                           thread_name_prefix="omc-lmcache")
        self._closed = False

    @staticmethod
    def _url_of(config):
        extra = getattr(config, "extra_config", None) or {}
        url = extra.get("omniconn.url") or getattr(config, "remote_url", None)
        if not url:
            raise ValueError("omniconn.lmcache: no URL: give one, or set remote_url (or extra_config "
                             "'omniconn.url') in LMCache's config")
        return url

    def __repr__(self):
        return "<OmniconnRemoteConnector %s>" % self.url

    def post_init(self):
        """Called by LMCache once the connector is built: nothing left to set up."""

    # -- plumbing
    async def _run(self, fn, *args):
        if self._closed:
            raise _lib.ClosedError(_lib.OMC_ERR_CLOSED, "omniconn.lmcache", log="the connector was closed")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        except RuntimeError:            # the pool shut down between the check and the call
            if self._closed:
                raise _lib.ClosedError(_lib.OMC_ERR_CLOSED, "omniconn.lmcache", log="the connector was closed") \
                    from None
            raise

    def _key(self, key):
        """(store key, LMCache key string). A key too long for the store goes by its SHA-256;
        the entry keeps the full string, checked on every read."""
        text = key.to_string() if hasattr(key, "to_string") else str(key)
        room = _KEY_ROOM - len(self.stage.encode()) - len(_TO_STAGE) - 2
        if len(text.encode("utf-8")) <= room and "\0" not in text:
            return text, text
        return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest(), text

    def _drop_unreadable(self, skey, why):
        with self._count_lock:
            self.unreadable_entries += 1
        logger.error("omniconn.lmcache: the entry for key %r is unreadable (%s): read as a miss and dropped",
                     skey, why)
        try:
            self.conn.cleanup(self.stage, _TO_STAGE, skey)
        except _lib.OmniconnError as e:
            logger.warning("omniconn.lmcache: could not drop the unreadable entry %r: %s", skey, e)

    # -- put
    def _put_sync(self, key, memory_obj):
        skey, text = self._key(key)
        if self.conn.exists(self.stage, _TO_STAGE, skey):
            return      # keys name their content: LMCache puts a stored chunk again, the first stays
        data = _byte_view(memory_obj.byte_array)
        shape = tuple(int(x) for x in memory_obj.get_shape())
        dtype = memory_obj.get_dtype()        # None for LMCache's byte buffers (BINARY_BUFFER)
        dtype = _NO_DTYPE if dtype is None else str(dtype).replace("torch.", "")
        fmt = memory_obj.get_memory_format()
        fmt = int(getattr(fmt, "value", fmt))
        self._last_size = data.nbytes
        crc = zlib.crc32(data) if self.checksum else 0
        head = _pack_header(text, shape, dtype, fmt, data.nbytes, crc, _FLAG_CRC if self.checksum else 0)
        total = len(head) + data.nbytes
        try:
            try:
                wb = self.conn.alloc(total, timeout=self.timeout)
            except _lib.UnavailableError:       # a store without its own pool: build, then copy in
                wb = None
            if wb is None:
                entry = bytearray(total)
                entry[:len(head)], entry[len(head):] = head, data
                self.conn.put(self.stage, _TO_STAGE, skey, entry, readers=READERS_CACHE)
                return
            try:
                view = wb.view
                view[:len(head)], view[len(head):] = head, data
                del view
                self.conn.put_buffer(self.stage, _TO_STAGE, skey, wb, readers=READERS_CACHE)
            except BaseException:
                if not wb.released:
                    wb.release()
                raise
        except _lib.OmniconnError as e:
            if e.code != _lib.CONSTANTS["OMC_ERR_EXISTS"]:   # already stored: keys name their content
                raise

    def _put_logged(self, key, memory_obj):
        """_put_sync, with a failure logged: LMCache's RemoteBackend never waits for a put's
        result, so an error raised here alone would go unseen."""
        try:
            self._put_sync(key, memory_obj)
        except Exception as e:
            hint = ""
            if getattr(e, "code", None) == _lib.CONSTANTS["OMC_ERR_TOO_LARGE"]:
                hint = " (a value must fit the connector's pool: raise pool_size in the URL)"
            logger.warning("omniconn.lmcache: put of %r failed, the chunk is not stored: %s%s",
                           getattr(key, "to_string", lambda: key)(), e, hint)
            raise

    async def put(self, key, memory_obj):
        """Store memory_obj under key. Reference counts are the caller's (LMCache's wrapper drops
        the one RemoteBackend took once this returns). A key already stored is kept as it is.
        A failure is logged (WARNING) and raised."""
        await self._run(self._put_logged, key, memory_obj)

    def support_batched_put(self):
        return True

    async def batched_put(self, keys, memory_objs):
        await asyncio.gather(*[self._run(self._put_logged, k, m) for k, m in zip(keys, memory_objs)])

    # -- get
    def _fill(self, buf, skey, text):
        """The MemoryObj for one stored entry (buf is released here), or None."""
        view = None
        try:
            view = buf.view
            try:
                shape, dtype, fmt, off, size, crc = _unpack_header(view, text)
                if crc is not None and zlib.crc32(view[off:off + size]) != crc:
                    raise EntryError("CRC-32 of the %d value bytes does not match" % size)
                tdtype, mfmt = _torch_dtype(dtype), _memory_format(fmt)
            except EntryError as e:
                self._drop_unreadable(skey, e)
                return None
            import torch
            obj = self.local_cpu_backend.allocate(torch.Size(shape), tdtype, mfmt)
            if obj is None:
                logger.warning("omniconn.lmcache: LMCache's CPU backend has no room for %r (%d bytes): "
                               "read as a miss", skey, size)
                return None
            try:
                dst = _byte_view(obj.byte_array)
                if size > dst.nbytes:
                    raise EntryError("%d value bytes do not fit the %d bytes of shape %r %s" % (size, dst.nbytes,
                                                                                                 shape, dtype))
                dst[:size] = view[off:off + size]
                self._last_size = size
            except EntryError as e:
                obj.ref_count_down()
                self._drop_unreadable(skey, e)
                return None
            except BaseException:
                obj.ref_count_down()
                raise
            return obj
        finally:
            del view
            buf.release(strict=False)

    def _get_named(self, skey, text):
        try:
            buf = self.conn.get(self.stage, _TO_STAGE, skey, timeout=0)
        except (_lib.NotFoundError, _lib.TimeoutError_):
            return None
        except _lib.OmniconnError as e:
            if e.code != _lib.CONSTANTS["OMC_ERR_TOO_LARGE"]:
                raise
            self._too_large(skey, e)
            return None
        return self._fill(buf, skey, text)

    def _get_sync(self, key):
        return self._get_named(*self._key(key))

    async def get(self, key):
        """A MemoryObj from local_cpu_backend.allocate() holding the stored value, or None (not
        stored, no room, or an unreadable entry, which is logged and dropped). Store errors raise."""
        return await self._run(self._get_sync, key)

    def support_batched_get(self):
        return True

    def _too_large(self, skey, e):
        logger.warning("omniconn.lmcache: %r does not fit this connector's pool, read as a miss: %s (raise pool_size "
                       "in the URL)", skey, e)

    def _get_pipeline(self, named):
        """One pipelined get_batch for [(skey, text)]: [MemoryObj or None]. A value larger than
        the pool fails the whole pipeline; its keys are then read one by one (that one a miss)."""
        try:
            bufs = self.conn.get_batch(self.stage, _TO_STAGE, [s for s, _ in named], "get", timeout=self.timeout)
        except _lib.OmniconnError as e:
            if e.code != _lib.CONSTANTS["OMC_ERR_TOO_LARGE"]:
                raise
            return [self._get_named(skey, text) for skey, text in named]
        out = []
        try:
            for i, (skey, text) in enumerate(named):
                b, bufs[i] = bufs[i], None
                out.append(None if b is None else self._fill(b, skey, text))
        except BaseException:
            for b in bufs:
                if b is not None:
                    b.release(strict=False)
            for o in out:
                if o is not None:
                    o.ref_count_down()
            raise
        return out

    def _get_batch_sync(self, keys):
        """Pipelines of about _PIPELINE_BYTES each (judged by the last value this connector
        moved): each pipeline's values are copied into MemoryObjs while they are still in the CPU
        caches, and the store never holds more than one pipeline's replies for this reader."""
        named = [self._key(k) for k in keys]
        step = max(1, _PIPELINE_BYTES // max(1, self._last_size))
        out = []
        try:
            for i in range(0, len(named), step):
                out.extend(self._get_pipeline(named[i:i + step]))
        except BaseException:
            for o in out:
                if o is not None:
                    o.ref_count_down()
            raise
        return out

    async def _get_parallel(self, keys):
        """One get per key on the connector's threads (bench/lmcache_get_paths.py compares it)."""
        objs = await asyncio.gather(*[self.get(k) for k in keys], return_exceptions=True)
        failed = next((o for o in objs if isinstance(o, BaseException)), None)
        if failed is not None:
            for o in objs:
                if o is not None and not isinstance(o, BaseException):
                    o.ref_count_down()
            raise failed
        return objs

    async def batched_get(self, keys):
        """[MemoryObj or None] for keys, in pipelined requests (one per server and about
        _PIPELINE_BYTES each). Measured at least as fast as parallel or sequential gets at every
        value size from 64 KiB to 4 MiB (bench/lmcache_get_paths.py)."""
        return await self._run(self._get_batch_sync, list(keys))

    def support_batched_get_non_blocking(self):
        return True

    async def batched_get_non_blocking(self, lookup_id, keys):
        """The MemoryObjs of the longest stored prefix of keys (what a lookup found)."""
        objs = await self.batched_get(keys)
        out = []
        for i, o in enumerate(objs):
            if o is None:
                for later in objs[i + 1:]:
                    if later is not None:
                        later.ref_count_down()
                break
            out.append(o)
        return out

    # -- exists
    def exists_sync(self, key):
        return self.conn.exists(self.stage, _TO_STAGE, self._key(key)[0])

    async def exists(self, key):
        return await self._run(self.exists_sync, key)

    def _exists_batch(self, keys):
        return self.conn.exists_batch(self.stage, _TO_STAGE, [self._key(k)[0] for k in keys], timeout=self.timeout)

    def support_batched_contains(self):
        return True

    def batched_contains(self, keys, stop_after_first_not_exits=True):
        found = self._exists_batch(list(keys))
        if stop_after_first_not_exits and False in found:
            first = found.index(False)
            found = found[:first] + [False] * (len(found) - first)
        return found

    def support_batched_async_contains(self):
        return True

    async def batched_async_contains(self, lookup_id, keys, pin=False):
        """How many of keys, from the first, are stored (LMCache's prefix hit count)."""
        found = await self._run(self._exists_batch, list(keys))
        return found.index(False) if False in found else len(found)

    # -- the rest
    def remove_sync(self, key):
        return self.conn.cleanup(self.stage, _TO_STAGE, self._key(key)[0])

    async def list(self):
        return [k for _, _, k in await self._run(self.conn.list, self.stage, _TO_STAGE)]

    def support_ping(self):
        return True

    async def ping(self):
        """0 when the store answers, else omniconn's (negative) result code."""
        try:
            await self._run(self.conn.exists, self.stage, _TO_STAGE, "omniconn-ping")
            return 0
        except _lib.OmniconnError as e:
            return e.code or -1

    async def close(self):
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, self._pool.shutdown, True)
        self.conn.close()

    def close_sync(self):
        """close() for code outside an event loop."""
        if not self._closed:
            self._closed = True
            self._pool.shutdown(wait=True)
            self.conn.close()


class OmniconnConnectorAdapter(_ConnectorAdapter):
    """LMCache's remote storage plug-in entry: makes an OmniconnRemoteConnector for an
    omniconn:// or omniconn+unix:// remote_url (see the module docstring for the config)."""

    SCHEMES = ("omniconn://", "omniconn+unix://")

    def __init__(self):
        if _ConnectorAdapter is object:
            self.schema = self.SCHEMES[0]
        else:
            super().__init__(self.SCHEMES[0])

    def can_parse(self, url):
        return isinstance(url, str) and url.startswith(self.SCHEMES)

    def create_connector(self, context):
        return OmniconnRemoteConnector(context.url, context.loop, context.local_cpu_backend,
                                       getattr(context, "config", None))
