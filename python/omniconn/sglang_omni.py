"""OmniconnRelay: an omniconn relay backend with sglang-omni's Relay contract.

sglang-omni splits stage communication into a control plane (its DataReadyMessage carries a
payload's metadata) and a relay data plane chosen by name (sglang_omni/relay/base.py:
register_relay / create_relay). Importing this module registers OmniconnRelay as "omniconn"
when sglang-omni is importable (the class then derives from its Relay, the operations from its
RelayOperation); without sglang-omni it works on its own and this module's create_relay() is
the factory. See docs/python.md.

    relay = create_relay("omniconn", engine_id="thinker", protocol="shm")
    op = await relay.put_async(tensor, request_id="req-1")     # one copy, into the pool
    send_to_next_stage(op.metadata)                            # a small msgpack-able dict
    ...
    op = await relay.get_async(metadata, dest_tensor, request_id="req-1")
    await op.wait_for_completion(timeout=30.0)                 # one copy, into dest_tensor

What crosses a process: the tensor's bytes (through the connector's pool: the shared segment over
SHM, the sender's pool and the receiver's pool over TCP and RDMA) and the metadata dict (strings,
ints, a list and the connector's metadata bytes). Nothing is ever pickled.
"""
import asyncio
import concurrent.futures
import inspect
import itertools
import logging
import threading
import uuid

from . import _core, _lib
from ._lib import OmniconnError

log = logging.getLogger("omniconn.sglang_omni")

try:    # sglang-omni present: be one of its relays
    from sglang_omni.relay.base import Relay as _RelayBase, RelayOperation as _OpBase, register_relay as _register
except Exception:   # standalone
    _register = None

    class _RelayBase:
        pass

    class _OpBase:
        pass

_FROM, _TO = "sglang", "relay"      # every payload of a relay lives on this one edge; keys are unique
_LOOP_COPY_BYTES = 1 << 20          # default loop_copy_bytes: see OmniconnRelay
_FORGET_EVERY = 1024                # puts between sweeps of the bookkeeping of puts nobody waited on
_SPACE = ("OMC_ERR_POOL_FULL", "OMC_ERR_SHM_FULL")
_DTYPES = ("uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool")
_KEY_ROOM = _lib.OMC_KEY_MAX - 24    # request ids longer than this are refused (the key adds ".<seq>")


class RelayMismatchError(ValueError):
    """get_async: the metadata's tensor does not fit dest_tensor (dtype, shape or size), or the
    payload that arrived is not the size its metadata said. dest_tensor is left untouched."""


def _torch():
    import torch
    return torch


_NAMES = {}
_ITEMSIZES = {}


def _dtype_name(dtype):
    name = _NAMES.get(dtype)
    if name is None:
        name = _NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


def _itemsize(name):
    n = _ITEMSIZES.get(name)
    if n is None:
        torch = _torch()
        n = _ITEMSIZES[name] = torch.empty(0, dtype=getattr(torch, name)).element_size()
    return n


def _as_tensor(value):
    torch = _torch()
    if isinstance(value, torch.Tensor):
        return value
    np = _core._np
    if np is not None and isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    raise TypeError("OmniconnRelay.put_async: a torch tensor, numpy array or PoolTensor, not %s" % type(value).__name__)


def _nbytes(t):
    return t.numel() * t.element_size()


def _flat_bytes(t):
    """The bytes of t as a flat uint8 tensor (contiguous; a strided tensor is made contiguous)."""
    torch = _torch()
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.reshape(-1).view(torch.uint8) if t.numel() else t.reshape(-1)


class PoolTensor:
    """A tensor laid out in the relay's pool (OmniconnRelay.alloc): fill .tensor in place and
    pass this object to put_async - the put copies nothing. .tensor makes a view each time; drop
    the views you keep before the put (the relay owns the bytes afterwards)."""

    def __init__(self, buffer, dtype, shape):
        self._buffer = buffer
        self.dtype = dtype
        self.shape = tuple(shape)

    @property
    def nbytes(self):
        return self._buffer.size

    @property
    def tensor(self):
        if self._buffer.released:
            raise ValueError("OmniconnRelay: this PoolTensor was put (or released) already")
        return self._buffer.as_tensor(self.dtype, self.shape)

    def release(self):
        """Give the space back without putting it."""
        self._buffer.release(strict=False)


# Every setting of a relay, with its default. sglang-omni's stage runtime hands create_relay only
# its own keys (engine_id, device, slot_size_mb, credits, rank, ...), so the rest also come from
# $OMNICONN_RELAY_CONFIG (a JSON object); keyword arguments win over it.
_DEFAULTS = {"protocol": "auto", "role": "dual", "channel": "sglang_omni", "host": None, "sender_host": None,
             "zmq_port": 0, "data_port": 0, "memory_pool_size": 0, "alloc_timeout": 30.0, "ttl_ms": None,
             "shm_dir": None, "device_name": None, "require_rdma": True, "inline_threshold": 16 << 10,
             "loop_copy_bytes": _LOOP_COPY_BYTES, "threads": 4}
_SGLANG_KWARGS = ("credits", "slot_size_mb", "rank", "world_size", "send_to_ranks", "recv_from_ranks", "worker_id",
                  "gpu_id", "master_addr", "master_port", "dst_rank")
ENV_CONFIG = "OMNICONN_RELAY_CONFIG"


def _env_config():
    import json
    import os
    text = os.environ.get(ENV_CONFIG, "").strip()
    if not text:
        return {}
    try:
        cfg = json.loads(text)
        if not isinstance(cfg, dict):
            raise ValueError("not a JSON object")
    except ValueError as e:
        raise ValueError("OmniconnRelay: $%s must be a JSON object of relay settings, e.g. "
                         "'{\"protocol\": \"tcp\", \"host\": \"10.0.0.7\"}' (%s)" % (ENV_CONFIG, e)) from None
    unknown = sorted(k for k in cfg if k not in _DEFAULTS and not k.startswith("curve_"))
    if unknown:
        raise ValueError("OmniconnRelay: $%s has unknown settings %s (known: %s, curve_*)"
                         % (ENV_CONFIG, ", ".join(unknown), ", ".join(sorted(_DEFAULTS))))
    return cfg


# ---- operations ---------------------------------------------------------------------------------------
class OmniconnPutOperation(_OpBase):
    """A put: the bytes are in the pool when put_async returns. wait_for_completion waits until the
    receiver has taken them (the payload's space is then free), as sglang-omni's NIXL relay does."""

    def __init__(self, relay, key, request_id, metadata):
        self._relay = relay
        self._key = key
        self.request_id = request_id
        self._metadata = metadata
        self._completed = False

    @property
    def metadata(self):
        return self._metadata

    @property
    def done(self):
        return self._completed

    async def wait_for_completion(self, timeout=30.0):
        """Wait (without blocking the event loop) until the payload was consumed, or dropped by
        cleanup. TimeoutError after timeout seconds (None: no limit); the payload then stays until
        cleanup(request_id), close() or its TTL."""
        if self._completed:
            return
        loop = asyncio.get_running_loop()
        end = None if timeout is None else loop.time() + max(0.0, timeout)
        pause = 0.00005
        while self._relay._held(self._key):
            if end is not None and loop.time() >= end:
                raise TimeoutError("OmniconnRelay: payload %s of request %s not taken by a receiver within %.3g s"
                                   % (self._key, self.request_id, timeout))
            await asyncio.sleep(pause if end is None else min(pause, max(0.0, end - loop.time())))
            pause = min(pause * 2, 0.002)
        self._completed = True


class OmniconnGetOperation(_OpBase):
    """A get: wait_for_completion fetches the payload (a zero-copy view of it) and copies it into
    dest_tensor, off the event loop for anything but small SHM payloads."""

    def __init__(self, relay, metadata, dest, info, request_id):
        self._relay = relay
        self._metadata = metadata
        self._dest = dest
        self._info = info               # (key, omc meta, size, dtype name, shape)
        self.request_id = request_id
        self._completed = False
        self._cancelled = False         # cleanup(request_id) or a timeout: the bytes must not land
        self._lock = threading.Lock()
        self._future = None

    @property
    def metadata(self):
        return self._metadata

    @property
    def done(self):
        return self._completed

    def _cancel(self):
        """From now on the bytes do not land. A copy already under way (it holds the lock) is not
        waited for: it completes on its thread."""
        got = self._lock.acquire(blocking=False)
        self._cancelled = True
        if got:
            self._lock.release()

    def _fetch(self, timeout):
        """The get and the copy; runs on an executor thread (or inline, see wait_for_completion)."""
        relay = self._relay
        key, meta, size = self._info[0], self._info[1], self._info[2]
        buf = relay._c().get(_FROM, _TO, key, meta, timeout)
        try:
            if buf.size != size:
                raise RelayMismatchError("OmniconnRelay: payload %s holds %d bytes but its metadata says %d; "
                                         "dest_tensor left untouched" % (key, buf.size, size))
            if size:
                src = buf.as_tensor(self._dest.dtype, tuple(self._dest.shape))
                with self._lock:
                    if self._cancelled:
                        return False
                    self._dest.copy_(src)       # the one copy (torch drops the GIL for it)
                del src
            return True
        finally:
            buf.release(strict=False)

    async def wait_for_completion(self, timeout=30.0):
        """Fetch the payload into dest_tensor. Never blocks the event loop: the library calls and
        the copy run on the relay's threads (the library's calls and torch's copy drop the GIL),
        except an SHM payload of at most loop_copy_bytes, which is there already: fetched without
        waiting and copied inline. TimeoutError after timeout seconds (None: no limit), and a
        cancelled wait, leave dest_tensor unwritten (unless the copy had begun: it completes) and
        end the operation (a second wait raises)."""
        if self._completed:
            return
        relay = self._relay
        if self._cancelled:
            raise RuntimeError("OmniconnRelay: get of request %s was cancelled (cleanup, close or an earlier "
                               "timeout)" % self.request_id)
        try:
            if self._future is None:
                if relay.protocol == "shm" and self._info[2] <= relay.loop_copy_bytes:
                    try:
                        ok = self._fetch(0)
                    except _lib.TimeoutError_:
                        ok = None
                    if ok is not None:
                        self._done(ok)
                        return
                limit = None if timeout is None else max(0.0, timeout)   # the library's own deadline too
                self._future = asyncio.wrap_future(relay._pool().submit(self._fetch, limit))
            ok = await asyncio.wait_for(asyncio.shield(self._future), timeout)
        except (asyncio.TimeoutError, TimeoutError):
            self._cancel()
            relay._forget_get(self)
            raise TimeoutError("OmniconnRelay: get of %s (request %s) not done within %.3g s"
                               % (self._info[0], self.request_id, timeout)) from None
        except BaseException:       # an error from the library, or the waiting task cancelled
            self._cancel()
            relay._forget_get(self)
            raise
        self._done(ok)

    def _done(self, ok):
        relay = self._relay
        relay._forget_get(self)
        if not ok:
            raise RuntimeError("OmniconnRelay: get of request %s was cleaned up" % self.request_id)
        self._completed = True
        with relay._lock:
            relay._stats["gets"] += 1
            relay._stats["bytes_got"] += self._info[2]


# ---- the relay -----------------------------------------------------------------------------------------
class OmniconnRelay(_RelayBase):
    """sglang-omni's Relay contract over omniconn.

    Settings (all optional): keyword arguments, over $OMNICONN_RELAY_CONFIG (a JSON object of the
    same names: sglang-omni's stage runtime passes create_relay only its own keys), over the
    defaults. Keys sglang-omni passes for other relays (rank, world_size, ...) are ignored.
      engine_id        this relay's name (goes into the metadata)
      device           where tensors live ("cpu", "cuda:0"): device tensors are staged through host
                       memory (one device-to-host copy on put, one host-to-device on get)
      protocol         "shm" | "tcp" | "rdma" | "local" | "auto" (default: shm unless a remote
                       host or sender_host is given, then tcp) - as OmniconnConnector chooses
      role             "sender" | "receiver" | "dual" (default dual)
      channel          SHM channel (default "sglang_omni"); shm_dir as OmniconnConnector
      host, zmq_port, data_port   what a TCP/RDMA sender binds and advertises (0 = ephemeral)
      memory_pool_size the pool (0 = the transport's default; over SHM an upper bound it grows to)
      alloc_timeout    seconds a put waits for pool space when the pool is full (default 30):
                       the back-pressure that replaces sglang-omni's CreditAllocator
      ttl_ms           an unconsumed payload is reclaimed after this (default: the library's)
      inline_threshold SHM: tensors below this many bytes also ride inside the metadata (default
                       16 KiB, as TCP's default; -1 = never), so the metadata stays under ~17 KiB
      device_name, require_rdma, curve_*   as OmniconnConnector's extra
      loop_copy_bytes  a put of at most this many bytes (any protocol) and an SHM get of at most this
                       many run on the event loop's thread when they need not wait (default 1 MiB:
                       a copy of tens of microseconds costs less than a hop to a thread); larger
                       ones, every TCP/RDMA get and any wait for pool space run on the relay's
                       threads. 0 = always on the threads
      threads          the relay's threads (default 4)
      credits, slot_size_mb   accepted for sglang-omni's configs and ignored: the pool sizes
                       itself per payload (no slot limit) and bounds in-flight bytes instead
    """

    def __init__(self, engine_id="omniconn", device="cpu", **kwargs):
        from .vllm_omni import OmniconnConnector
        self.engine_id = str(engine_id)
        self.device = device
        cfg = dict(_DEFAULTS)
        cfg.update(_env_config())
        unknown = []
        for k, v in kwargs.items():
            if k in _DEFAULTS or k.startswith("curve_"):
                cfg[k] = v
            elif k not in _SGLANG_KWARGS:
                unknown.append(k)
        if unknown:
            log.debug("OmniconnRelay %s: ignoring %s", self.engine_id, ", ".join(sorted(unknown)))
        self.config = cfg
        self.alloc_timeout = cfg["alloc_timeout"]
        self.loop_copy_bytes = int(cfg["loop_copy_bytes"])
        protocol, host = str(cfg["protocol"]).lower(), cfg["host"]
        if protocol == "auto":
            local = (None, "", "127.0.0.1", "localhost", "::1")
            protocol = "tcp" if host not in local or cfg["sender_host"] not in local else "shm"
        extra = {k: v for k, v in cfg.items() if k.startswith("curve_")}
        extra.update(protocol=protocol, role=cfg["role"], channel=cfg["channel"], shm_dir=cfg["shm_dir"],
                     memory_pool_size=int(cfg["memory_pool_size"] or 0), zmq_port=int(cfg["zmq_port"] or 0),
                     data_port=int(cfg["data_port"] or 0), device_name=cfg["device_name"],
                     require_rdma=cfg["require_rdma"], inline_threshold=int(cfg["inline_threshold"]), stage_id=-1,
                     edge="relay %s" % self.engine_id)
        if host not in (None, ""):
            extra["host"] = host
        if cfg["ttl_ms"] is not None:
            extra["ttl_ms"] = int(cfg["ttl_ms"])
        threads = cfg["threads"]
        self._oc = OmniconnConnector(extra)        # protocol choice, CURVE, SHM sweeps: one place
        self.protocol = self._oc.protocol
        self._conn = self._oc._conn
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self._puts = {}                 # request id -> {key: nbytes} this side put, not known consumed
        self._gets = {}                 # request id -> {get operations not finished}
        self._threads = max(1, int(threads))
        self._stats = {"puts": 0, "gets": 0, "bytes_put": 0, "bytes_got": 0}
        self._executor = None
        self._closed = False

    # -- plumbing
    def _c(self):
        conn = self._conn
        if conn is None:
            raise _lib.ClosedError(_lib.OMC_ERR_CLOSED, "OmniconnRelay", log="the relay is closed")
        return conn

    def _pool(self):
        with self._lock:
            if self._executor is None:
                if self._closed:
                    raise _lib.ClosedError(_lib.OMC_ERR_CLOSED, "OmniconnRelay", log="the relay is closed")
                self._executor = concurrent.futures.ThreadPoolExecutor(self._threads, "omniconn-relay")
            return self._executor

    async def _run(self, fn, *args):
        return await asyncio.wrap_future(self._pool().submit(fn, *args))

    def _held(self, key):
        conn = self._conn
        if conn is None:
            return False
        try:
            if conn.exists(_FROM, _TO, key):
                return True
        except OmniconnError:
            return False
        self._forget_put(key)
        return False

    def _forget_put(self, key):
        rid = key.rpartition(".")[0]
        with self._lock:
            keys = self._puts.get(rid)
            if keys is not None:
                keys.pop(key, None)
                if not keys:
                    del self._puts[rid]

    def _forget_get(self, op):
        with self._lock:
            ops = self._gets.get(op.request_id)
            if ops is not None:
                ops.discard(op)
                if not ops:
                    del self._gets[op.request_id]

    # -- pool tensors
    def alloc(self, shape, dtype, timeout=None):
        """A PoolTensor of shape and dtype in the relay's pool, to fill in place and put without a
        copy. Waits up to timeout seconds (default alloc_timeout) for space."""
        torch = _torch()
        n = torch.empty(0, dtype=dtype).element_size()
        for d in shape:
            n *= int(d)
        if n <= 0:
            raise ValueError("OmniconnRelay.alloc: an empty tensor needs no pool space (put it as it is)")
        if _dtype_name(dtype) not in _DTYPES:
            raise TypeError("OmniconnRelay: dtype %s cannot travel (one of %s)" % (dtype, ", ".join(_DTYPES)))
        wb = self._c().alloc(n, self.alloc_timeout if timeout is None else timeout)
        return PoolTensor(wb, dtype, shape)

    # -- put
    def _new_key(self, request_id):
        rid = uuid.uuid4().hex if request_id is None else str(request_id)
        if len(rid.encode()) > _KEY_ROOM or "\0" in rid:
            raise ValueError("OmniconnRelay: request_id must be at most %d bytes without NUL" % _KEY_ROOM)
        return rid, "%s.%d" % (rid, next(self._seq))

    def _put_staged(self, key, t, nbytes):
        """Wait for pool space (bounded: alloc_timeout), copy the tensor in, hand it over."""
        conn = self._c()
        try:
            wb = conn.alloc(nbytes, self.alloc_timeout)
        except _lib.TimeoutError_ as e:
            try:
                h = conn.health()
                use = "; the pool has %d of %d bytes in use" % (h["pool_in_use"], h["pool_capacity"])
            except OmniconnError:
                use = ""
            raise _lib.TimeoutError_(e.code, "OmniconnRelay put of %d bytes" % nbytes,
                                     log="no pool space within alloc_timeout (%.3g s)%s: receivers are not taking "
                                         "payloads as fast as they are put; raise memory_pool_size or alloc_timeout"
                                         % (self.alloc_timeout, use)) from None
        try:
            dst = wb.as_tensor(None, (nbytes,))
            dst.copy_(_flat_bytes(t))           # the one copy (device tensors: device to host)
            del dst
            return conn.put_buffer(_FROM, _TO, key, wb)
        except BaseException:
            if not wb.released:
                wb.release(strict=False)
            raise

    def _metadata(self, rid, key, omc, nbytes, dtype, shape):
        info = {"size": nbytes, "req_id": rid, "key": key, "dtype": dtype, "shape": list(shape), "omc": omc}
        return {"engine_id": self.engine_id, "relay": "omniconn", "protocol": self.protocol, "transfer_info": info}

    async def put_async(self, tensor, request_id=None, dst_rank=None):
        """Put a tensor (torch, numpy, or a PoolTensor from alloc). One copy into the pool (none for
        a PoolTensor); the copy of a payload over loop_copy_bytes, of a device tensor, and a wait
        for pool space run off the event loop. Returns an operation whose .metadata the receiver passes to get_async.
        dst_rank is accepted and ignored (the metadata names the sender)."""
        conn = self._c()
        rid, key = self._new_key(request_id)
        if isinstance(tensor, PoolTensor):
            nbytes, dtype, shape = tensor.nbytes, _dtype_name(tensor.dtype), tensor.shape
            omc = conn.put_buffer(_FROM, _TO, key, tensor._buffer)
        else:
            t = _as_tensor(tensor)
            nbytes, dtype, shape = _nbytes(t), _dtype_name(t.dtype), tuple(t.shape)
            if dtype not in _DTYPES:
                raise TypeError("OmniconnRelay: dtype %s cannot travel (one of %s)" % (dtype, ", ".join(_DTYPES)))
            omc = None
            if nbytes == 0:
                omc = conn.put(_FROM, _TO, key, b"")
            elif nbytes <= self.loop_copy_bytes and t.device.type == "cpu":
                try:
                    omc = conn.put(_FROM, _TO, key, _flat_bytes(t))
                except OmniconnError as e:
                    if e.name not in _SPACE:
                        raise
            if omc is None:         # large, on a device, or the pool is full now: wait off the loop
                omc = await self._run(self._put_staged, key, t, nbytes)
        with self._lock:
            self._puts.setdefault(rid, {})[key] = nbytes
            self._stats["puts"] += 1
            self._stats["bytes_put"] += nbytes
            sweep = self._stats["puts"] % _FORGET_EVERY == 0
        if sweep:
            self._forget_taken()
        return OmniconnPutOperation(self, key, rid, self._metadata(rid, key, omc, nbytes, dtype, shape))

    # -- get
    @staticmethod
    def _parse(metadata):
        try:
            info = metadata["transfer_info"]
            key, omc, size = info["key"], info["omc"], int(info["size"])
            dtype, shape = info["dtype"], tuple(int(d) for d in info["shape"])
            if not isinstance(key, str) or not isinstance(omc, (bytes, bytearray)) or dtype not in _DTYPES:
                raise TypeError
        except (KeyError, TypeError, ValueError):
            raise ValueError("OmniconnRelay.get_async: not an omniconn relay's metadata (want the dict "
                             "put_async's operation returned: transfer_info with key, omc, size, dtype, shape)") \
                from None
        n = _itemsize(dtype)
        for d in shape:
            n *= d
        if n != size or min(shape, default=0) < 0:
            raise ValueError("OmniconnRelay.get_async: metadata of %r says %d bytes, which does not match "
                             "%s%s (%d bytes)" % (key, size, dtype, list(shape), n))
        return key, bytes(omc), size, dtype, shape

    def _check_fit(self, info, dest):
        key, _, size, dtype, shape = info
        torch = _torch()
        have = _nbytes(dest)
        want = "%s%s (%d bytes)" % (dtype, list(shape), size)
        got = "%s%s (%d bytes)" % (_dtype_name(dest.dtype), list(dest.shape), have)
        if have != size:
            raise RelayMismatchError("OmniconnRelay: payload %s is %s but dest_tensor is %s: sizes differ; "
                                     "dest_tensor left untouched" % (key, want, got))
        if dest.dtype == torch.uint8:
            return      # a byte buffer of the right size takes any tensor's bytes (sglang-omni's own use)
        if _dtype_name(dest.dtype) != dtype or tuple(dest.shape) != shape:
            raise RelayMismatchError("OmniconnRelay: payload %s is %s but dest_tensor is %s: dtype or shape "
                                     "differ (a uint8 dest_tensor of the same size takes the raw bytes); "
                                     "dest_tensor left untouched" % (key, want, got))

    async def get_async(self, metadata, dest_tensor, request_id=None):
        """Prepare to fill dest_tensor from metadata; the transfer happens in the operation's
        wait_for_completion. dest_tensor must have the payload's size and either its dtype and
        shape or dtype uint8 (the raw bytes); otherwise RelayMismatchError now, dest untouched."""
        self._c()
        info = self._parse(metadata)
        torch = _torch()
        if not isinstance(dest_tensor, torch.Tensor):
            raise TypeError("OmniconnRelay.get_async: dest_tensor must be a torch tensor")
        self._check_fit(info, dest_tensor)
        rid = str(request_id) if request_id is not None else str(metadata["transfer_info"].get("req_id"))
        op = OmniconnGetOperation(self, metadata, dest_tensor, info, rid)
        with self._lock:
            self._gets.setdefault(rid, set()).add(op)
        return op

    # -- lifetime
    def cleanup(self, request_id):
        """Drop every payload this side put for request_id and still holds, and cancel this side's
        unfinished gets of it (their dest tensors are not written). Returns how many payloads were
        dropped. Safe to call for unknown ids and after close."""
        rid = str(request_id)
        with self._lock:
            keys = self._puts.pop(rid, {})
            ops = self._gets.pop(rid, set())
        for op in ops:
            op._cancel()
        conn = self._conn
        if conn is None:
            return 0
        dropped = 0
        for key in keys:
            try:
                dropped += bool(conn.cleanup(_FROM, _TO, key))
            except OmniconnError as e:
                log.warning("OmniconnRelay %s: cleanup of %s: %s", self.engine_id, key, e)
        return dropped

    def pending(self):
        """{request id: payload count} of this side's puts not known to be consumed."""
        with self._lock:
            return {rid: len(keys) for rid, keys in self._puts.items()}

    def _forget_taken(self):
        """Forget puts that were taken (or reclaimed) though nobody waited on their operation."""
        with self._lock:
            keys = [k for ks in self._puts.values() for k in ks]
        for k in keys:
            self._held(k)

    def health(self):
        """The relay's counters (puts, gets, bytes_put, bytes_got, pending_requests, status,
        protocol) and the connector's (omc_live_entries, omc_pool_in_use, ...)."""
        h = self._oc.health()
        out = {k: v for k, v in h.items() if k.startswith("omc_") or k in ("status", "protocol", "role")}
        with self._lock:
            out.update(self._stats, engine_id=self.engine_id, pending_requests=len(self._puts))
        return out

    def close(self):
        """Cancel unfinished gets, stop the relay's threads (a copy under way completes first),
        close the connector. Idempotent; safe from the event loop's thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            ops = [op for s in self._gets.values() for op in s]
            self._gets.clear()
            self._puts.clear()
            ex, self._executor = self._executor, None
        for op in ops:
            op._cancel()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()    # wakes this relay's threads waiting in the library; returns once they are out
        if ex is not None:
            ex.shutdown(wait=True, cancel_futures=True)
        self._oc.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ---- the factory --------------------------------------------------------------------------------------
RELAY_REGISTRY = {"omniconn": OmniconnRelay}


def create_relay(relay_type="omniconn", **kwargs):
    """sglang-omni's create_relay when sglang-omni is importable; otherwise the same contract for
    the relays this module knows ("omniconn"): keyword arguments the class does not take are
    dropped unless it takes **kwargs."""
    try:
        from sglang_omni.relay.base import create_relay as theirs
    except Exception:
        theirs = None
    if theirs is not None:
        return theirs(relay_type, **kwargs)
    cls = RELAY_REGISTRY.get(relay_type)
    if cls is None:
        raise ValueError("Unknown relay type: %r. Available types: %s" % (relay_type, sorted(RELAY_REGISTRY)))
    params = inspect.signature(cls.__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return cls(**kwargs)
    return cls(**{k: v for k, v in kwargs.items() if k in params})


registered = False
if _register is not None:
    _register("omniconn")(OmniconnRelay)
    registered = True
