"""OmniconnConnector: an omniconn connector with vLLM-Omni's OmniConnector contract.

A stage edge selects it in vLLM-Omni's pipeline configuration by name ("OmniconnConnector") with
an `extra` dict; see docs/python.md. When vllm_omni is importable the class derives from its
OmniConnectorBase and registers itself with OmniConnectorFactory on import; otherwise it works
on its own with the same methods.

What crosses a process: raw payloads (bytes-like, numpy arrays, CPU torch tensors) as they are,
everything else serialised with msgpack (numpy arrays and tensors inside it as msgpack
extension types). Nothing is ever pickled.
"""
import logging
import threading
import time

import msgpack

from . import _core, _lib
from ._core import ShmConnector, TcpConnector, RdmaConnector, LocalConnector
from ._lib import OmniconnError

log = logging.getLogger("omniconn.vllm_omni")

try:    # vLLM-Omni present: be one of its connectors
    from vllm_omni.distributed.omni_connectors.connectors.base import OmniConnectorBase as _Base
except Exception:   # standalone
    class _Base:
        pass

_EXT_NDARRAY = 1
_EXT_TENSOR = 2
_SEG_RAW = "tensor"         # a raw tensor travels as a frame with this one segment
_SEG_OBJ = "msgpack"        # a serialised object travels as a frame with this one segment
_SEG_RAW_B, _SEG_OBJ_B = _SEG_RAW.encode(), _SEG_OBJ.encode()
_ndarray = _core._ndarray


# ---- msgpack with arrays and tensors ------------------------------------------------------------
def _ext_default(obj):
    np = _core._np
    t = _core._torch()
    if np is not None and isinstance(obj, np.ndarray):
        a = np.ascontiguousarray(obj)
        return msgpack.ExtType(_EXT_NDARRAY, msgpack.packb([a.dtype.str, list(a.shape), a.tobytes()]))
    if t is not None and isinstance(obj, t.Tensor):
        c = obj.detach().to("cpu").contiguous()
        raw = c.view(t.uint8).numpy().tobytes() if c.numel() else b""
        return msgpack.ExtType(_EXT_TENSOR, msgpack.packb([str(c.dtype).replace("torch.", ""), list(c.shape), raw]))
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError("OmniconnConnector: cannot serialise %s with msgpack (pickle is never used): "
                    "send dicts, lists, numbers, strings, bytes, numpy arrays or tensors" % type(obj).__name__)


def _ext_hook(code, data):
    if code == _EXT_NDARRAY:
        import numpy as np
        dt, shape, raw = msgpack.unpackb(data)
        return np.frombuffer(raw, dtype=np.dtype(dt)).reshape(shape).copy()
    if code == _EXT_TENSOR:
        import torch
        dt, shape, raw = msgpack.unpackb(data)
        dtype = getattr(torch, dt)
        if not raw:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)
    return msgpack.ExtType(code, data)


def serialize(obj):
    return msgpack.packb(obj, default=_ext_default, use_bin_type=True)


def deserialize(data):
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)


# ---- raw payloads ---------------------------------------------------------------------------------
class RawBuffer:
    """A raw payload received without a copy. .tensor (typed if the sender put a tensor, else
    uint8), .as_tensor(dtype, shape), .numpy(), .view, .to_bytes(), .release() (also `with`).
    Release it when done: the sender's memory is held until then."""

    def __init__(self, buffer, segment=None):
        self._buffer = buffer
        self._seg = segment             # (name, kind, dtype, shape, offset, size) of a tensor frame

    @property
    def size(self):
        return self._seg[5] if self._seg else self._buffer.size

    def __len__(self):
        return self.size

    @property
    def dtype_shape(self):
        """(torch dtype name, shape) the sender's tensor had, or None for plain bytes."""
        if self._seg and self._seg[1] == _lib.OMC_SEGMENT_TENSOR:
            return _core._TORCH_NAMES[self._seg[2]], self._seg[3]
        return None

    @property
    def tensor(self):
        ds = self.dtype_shape
        if ds:
            import torch
            return self._buffer.as_tensor(getattr(torch, ds[0]), ds[1], self._seg[4])
        return self.as_tensor()

    def numpy(self):
        if self._seg and self._seg[1] == _lib.OMC_SEGMENT_TENSOR:
            return self._buffer.numpy(_core._DTYPES_NP[self._seg[2]], self._seg[3], self._seg[4])
        return self._buffer.numpy("uint8", None, self._seg[4] if self._seg else 0)[:self.size]

    def as_tensor(self, dtype=None, shape=None):
        if shape is None and dtype is not None:
            import torch
            item = torch.empty(0, dtype=dtype).element_size()
            shape = (self.size // item,)
        if shape is None:
            shape = (self.size,)
        return self._buffer.as_tensor(dtype, shape, self._seg[4] if self._seg else 0)

    @property
    def view(self):
        off = self._seg[4] if self._seg else 0
        return self._buffer.view[off:off + self.size]

    def to_bytes(self):
        return bytes(self.view)

    def release(self):
        self._buffer.release(strict=False)

    @property
    def released(self):
        return self._buffer.released

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
    # no __del__: dropping a RawBuffer drops its Buffer, whose region hands the bytes back


def _is_raw(data):
    np = _core._np
    t = _core._torch()
    if isinstance(data, (bytes, bytearray, memoryview)):
        return "bytes"
    if np is not None and isinstance(data, np.ndarray):
        return "tensor"
    if t is not None and isinstance(data, t.Tensor) and data.device.type == "cpu":
        return "tensor"
    return None


# ---- the connector -----------------------------------------------------------------------------------
class OmniconnConnector(_Base):
    """vLLM-Omni's connector contract over omniconn.

    extra (the connector's config dict; every key optional):
      protocol          "shm" | "tcp" | "rdma" | "local" | "auto" (default: shm unless a remote
                        sender_host is given, then tcp)
      role              "sender" | "receiver" | "dual" (default dual)
      host              address a sender advertises and binds ("auto" = the default route's)
      zmq_port          sender's side-channel port (0 = ephemeral; get_connection_info says which)
      data_port         sender's TCP data port (0 = ephemeral)
      sender_host, sender_zmq_port   receiver: the sender to ask on metadata-less gets
      memory_pool_size  bytes of the connector's pool (0 = the transport's default)
      channel           SHM channel name (default "vllm_omni")
      shm_dir           SHM: the tmpfs directory of the segments (default /dev/shm; the same on
                        both sides)
      device_name       RDMA device(s), "mlx5_0,mlx5_1"
      ttl_seconds / ttl_ms   unconsumed payloads are reclaimed after this (default: library's)
      curve_secret_key_file, curve_public_key_file, curve_server_key_file   CURVE on the side channel
      get_timeout_ms    how long get() may wait for a payload its metadata announced over TCP
                        or RDMA (default 1000); a miss without metadata waits at most poll_ms
      poll_ms           (default 1)
      fanout            readers per put (default 1)
      supports_raw_data return raw payloads as RawBuffer (default True)
    """

    def __init__(self, config=None):
        extra = dict(config or {})
        self.config = extra
        self._lock = threading.Lock()
        self._closed = False
        self._conn = None
        self._puts = {}                     # key -> (from, to): this side's puts not known consumed
        self._senders = {}
        self._endpoint = None
        self._metrics = {"puts": 0, "gets": 0, "misses": 0, "bytes_put": 0, "bytes_got": 0, "put_failures": 0,
                         "get_failures": 0}
        self.role = str(extra.get("role", "dual")).lower()
        self.supports_raw_data = bool(extra.get("supports_raw_data", True))
        self.fanout = int(extra.get("fanout", 1))
        self.get_timeout_s = float(extra.get("get_timeout_ms", 1000)) / 1000.0
        self.poll_s = float(extra.get("poll_ms", 1)) / 1000.0
        ttl_ms = extra.get("ttl_ms")
        if ttl_ms is None and extra.get("ttl_seconds") is not None:
            ttl_ms = int(float(extra["ttl_seconds"]) * 1000)
        self.ttl_ms = 0 if ttl_ms is None else int(ttl_ms)
        self.host = extra.get("host", "127.0.0.1")
        self.sender_host = extra.get("sender_host")
        self.sender_port = int(extra.get("sender_zmq_port") or 0)
        protocol = str(extra.get("protocol", "auto")).lower()
        if protocol == "auto":
            local = (None, "", "127.0.0.1", "localhost", "::1")
            protocol = "tcp" if self.sender_host not in local else "shm"
        self.protocol = protocol
        self._remote = protocol in ("tcp", "rdma")
        pool = int(extra.get("memory_pool_size", 0) or 0)
        if protocol == "shm":
            self._conn = ShmConnector(self.role, channel=extra.get("channel", "vllm_omni"),
                                      shm_dir=extra.get("shm_dir"), pool_size=pool,
                                      ttl_ms=self.ttl_ms, inline_threshold=int(extra.get("inline_threshold", 0)))
        elif protocol == "local":
            self._conn = LocalConnector(self.role, pool_size=pool, ttl_ms=self.ttl_ms)
        elif protocol in ("tcp", "rdma"):
            keys = {}
            for name in ("secret", "public", "server"):
                path = extra.get("curve_%s_key_file" % name)
                if path:
                    keys[name + "_key"] = _core.read_key(path)
            cls = RdmaConnector if protocol == "rdma" else TcpConnector
            kw = dict(host=self.host if self.role != "receiver" else None, port=int(extra.get("zmq_port", 0) or 0),
                      data_port=int(extra.get("data_port", 0) or 0), pool_size=pool, ttl_ms=self.ttl_ms,
                      rdma_devices=extra.get("device_name"), **keys)
            if protocol == "rdma":
                kw["require"] = bool(extra.get("require_rdma", True))
            self._conn = cls(self.role, **kw)
            self._endpoint = self._conn.endpoint if self.role != "receiver" else None
            if self.sender_host and self.sender_port and self.role != "sender":
                self.update_sender_info(self.sender_host, self.sender_port)
        else:
            raise ValueError("OmniconnConnector: protocol %r is not one of shm, tcp, rdma, local, auto" % protocol)

    # -- helpers
    def _c(self):
        if self._conn is None:
            raise _lib.ClosedError(_lib.OMC_ERR_CLOSED, "OmniconnConnector", log="closed")
        return self._conn

    # -- put
    def put(self, from_stage, to_stage, put_key, data):
        """Store data for (from_stage, to_stage, put_key). Returns (ok, size, metadata): metadata
        is a small msgpack-able dict to forward to the receiver (or drop: gets work without it)."""
        try:
            conn = self._conn
            if conn is None:
                conn = self._c()
            kind = "tensor" if type(data) is _ndarray else _is_raw(data)
            if kind == "bytes":
                meta = conn.put(from_stage, to_stage, put_key, data, readers=self.fanout, ttl_ms=self.ttl_ms)
                size = memoryview(data).nbytes
            elif kind == "tensor":
                meta = conn.put_tensor(from_stage, to_stage, put_key, _SEG_RAW_B, data, self.fanout, self.ttl_ms)
                size = int(data.nbytes) if type(data) is _ndarray or hasattr(data, "nbytes") else \
                    data.numel() * data.element_size()
            else:
                payload = serialize(data)
                kind = "obj"
                meta = conn.put_tensor(from_stage, to_stage, put_key, _SEG_OBJ_B, payload, self.fanout, self.ttl_ms)
                size = len(payload)
            with self._lock:
                self._puts[str(put_key)] = (str(from_stage), str(to_stage))
                self._metrics["puts"] += 1
                self._metrics["bytes_put"] += size
            md = {"omc": meta, "size": size, "kind": kind, "protocol": self.protocol}
            if self._endpoint:
                md["host"], md["port"] = self._endpoint[0], self._endpoint[1]
            return True, size, md
        except Exception as e:
            self._metrics["put_failures"] += 1
            log.error("OmniconnConnector put %s->%s %s failed: %s", from_stage, to_stage, put_key, e)
            return False, 0, None

    # -- get
    def _decode(self, buf, seg):
        """(object, size) from a received buffer and its first segment (None: not a frame); raw
        payloads stay zero-copy."""
        if seg is not None:
            if seg[0] == _SEG_OBJ:
                off, n = seg[4], seg[5]
                obj = deserialize(buf.view[off:off + n])
                buf.release(strict=False)
                return obj, n
            raw = RawBuffer(buf, seg)
            if self.supports_raw_data:
                return raw, raw.size
            out = raw.numpy().copy()
            raw.release()
            return out, out.nbytes
        if self.supports_raw_data:
            return RawBuffer(buf), buf.size
        data = buf.to_bytes()
        buf.release()
        return data, len(data)

    def _get(self, from_stage, to_stage, get_key, metadata, timeout, poll=False):
        conn = self._conn
        if conn is None:
            conn = self._c()
        meta = None
        sender = None
        if type(metadata) is dict or isinstance(metadata, dict):
            meta = metadata.get("omc")
            if meta is None and metadata.get("host") and metadata.get("port") and self.protocol in ("tcp", "rdma"):
                sender = self._sender_for(metadata["host"], int(metadata["port"]))
        elif isinstance(metadata, (bytes, bytearray)):
            meta = bytes(metadata)
        try:
            if meta is None and poll and self.protocol in ("tcp", "rdma"):
                # a miss must be cheap and a hit must not be cut short: ask first (consumes
                # nothing, waits at most poll_ms), then fetch with the full get timeout
                if conn.query(from_stage, to_stage, get_key, timeout, sender) is None:
                    self._metrics["misses"] += 1
                    return None
                timeout = self.get_timeout_s
            buf, seg = conn.get_first(from_stage, to_stage, get_key, meta, timeout, sender)
        except (_lib.TimeoutError_, _lib.NotFoundError):
            self._metrics["misses"] += 1
            return None
        obj, size = self._decode(buf, seg)
        with self._lock:
            self._metrics["gets"] += 1
            self._metrics["bytes_got"] += size
        return obj, size

    def get(self, from_stage, to_stage, get_key, metadata=None):
        """Non-blocking: (object, size) if the payload is there, else None. metadata: the dict put
        returned, a partial one (host/port only) or None."""
        if self._remote:
            # a remote payload needs a round trip: announced by metadata it is worth waiting for,
            # otherwise ask briefly
            has_meta = isinstance(metadata, dict) and metadata.get("omc") is not None
            timeout = self.get_timeout_s if has_meta else self.poll_s
        else:
            timeout = 0
        try:
            return self._get(from_stage, to_stage, get_key, metadata, timeout, poll=True)
        except OmniconnError as e:
            self._metrics["get_failures"] += 1
            log.error("OmniconnConnector get %s->%s %s failed: %s", from_stage, to_stage, get_key, e)
            return None

    def get_with_deadline(self, from_stage, to_stage, get_key, metadata=None, deadline=None, timeout=None):
        """Blocking get: wait until deadline (time.monotonic() seconds) or for timeout seconds;
        None if it passed."""
        if timeout is None and deadline is not None:
            timeout = max(0.0, deadline - time.monotonic())
        if timeout is None:
            timeout = self.get_timeout_s
        try:
            return self._get(from_stage, to_stage, get_key, metadata, timeout)
        except OmniconnError as e:
            self._metrics["get_failures"] += 1
            log.error("OmniconnConnector get %s->%s %s failed: %s", from_stage, to_stage, get_key, e)
            return None

    def abandon_get(self, from_stage, to_stage, get_key):
        """The receiver no longer wants this key: drop it where this connector holds it (dual
        role, same process). Elsewhere nothing waits on the receiver's side - get() never blocks -
        and the sender's TTL reclaims the payload. Returns True if something was dropped."""
        try:
            return self._c().cleanup(from_stage, to_stage, get_key)
        except OmniconnError:
            return False

    # -- sender-side bookkeeping
    def reap_consumed(self):
        """Forget this side's puts that were consumed (or expired); returns their keys."""
        with self._lock:
            keys = list(self._puts.items())
        done = []
        conn = self._c()
        for key, (f, t) in keys:
            if not conn.exists(f, t, key):
                done.append(key)
        with self._lock:
            for k in done:
                self._puts.pop(k, None)
        return done

    def wait_consumed(self, timeout=None):
        """Block until every put of this side was consumed (or expired); False on timeout."""
        return self._c().wait_consumed(timeout)

    def cleanup(self, request_id, from_stage=None, to_stage=None):
        """Drop what this side put for request_id (vLLM-Omni calls cleanup(request_id))."""
        conn = self._conn
        if conn is None:
            return
        key = str(request_id)
        with self._lock:
            edge = self._puts.pop(key, None)
        edges = [edge] if edge else []
        if from_stage is not None and to_stage is not None:
            edges = [(str(from_stage), str(to_stage))]
        for f, t in edges:
            try:
                conn.cleanup(f, t, key)
            except OmniconnError as e:
                log.warning("OmniconnConnector cleanup %s: %s", key, e)

    def health(self):
        out = {"status": "closed" if self._conn is None else "healthy", "protocol": self.protocol, "role": self.role}
        out.update(self._metrics)
        if self._conn is not None:
            h = self._conn.health()
            out["status"] = h["state"]
            out.update({"omc_" + k: v for k, v in h.items()})
            out["pending_puts"] = len(self._puts)
        return out

    # -- endpoints
    def get_connection_info(self):
        info = {"protocol": self.protocol, "role": self.role}
        if self.protocol in ("tcp", "rdma") and self.role != "receiver":
            host, port, dport = self._c().endpoint
            info.update(host=host, zmq_port=port, data_port=dport)
        elif self.protocol == "shm":
            info.update(channel=self.config.get("channel", "vllm_omni"))
        return info

    def _sender_for(self, host, port, rank=None):
        name = "%s:%d" % (host, port) if rank is None else "rank%s" % rank
        if self._senders.get(name) != (host, port):
            if name in self._senders:
                self._c().remove_sender(name)
            self._c().add_sender(name, host, port, self._server_key_for())
            self._senders[name] = (host, port)
        return name

    def _server_key_for(self):
        path = self.config.get("curve_server_key_file")
        return _core.read_key(path) if path else None

    def update_sender_info(self, host, port, rank=None):
        """Receiver: (re)point metadata-less gets at the sender at host:port (per rank if given)."""
        if self.protocol not in ("tcp", "rdma"):
            return
        self.sender_host, self.sender_port = host, int(port)
        self._sender_for(host, int(port), rank)

    # -- lifetime
    def close(self):
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    serialize_obj = staticmethod(serialize)
    deserialize_obj = staticmethod(deserialize)


def _register():
    try:
        from vllm_omni.distributed.omni_connectors.factory import OmniConnectorFactory
    except Exception:
        return False
    if "OmniconnConnector" not in OmniConnectorFactory.list_registered_connectors():
        OmniConnectorFactory.register_connector("OmniconnConnector", OmniconnConnector)
    return True


registered = _register()
