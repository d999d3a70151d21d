"""OmniconnConnector: an omniconn connector with vLLM-Omni's OmniConnector contract.

A stage edge selects it in vLLM-Omni's pipeline configuration by name ("OmniconnConnector") with
an `extra` dict; see docs/python.md. When vllm_omni is importable the class derives from its
OmniConnectorBase and registers itself with OmniConnectorFactory on import; otherwise it works
on its own with the same methods.

What crosses a process (nothing is ever pickled):
  - raw payloads put as they are (bytes-like, numpy arrays, CPU torch tensors): one copy into
    the pool; get returns a zero-copy RawBuffer (supports_raw_data, the default) or the same
    type that was put, as one copy (supports_raw_data false);
  - any other object (a dict around tensors, dataclasses, msgspec Structs, lists, ...): the
    object tree packed with its tensors out of band (omniconn._objects, or vLLM-Omni's own
    serializer when vLLM-Omni is importable), each tensor copied once, straight into the pool;
    get returns the object with zero-copy views of the tensors (copy_on_get: one copy each).
"""
import atexit
import inspect
import logging
import os
import re
import threading
import time
import weakref

import msgpack

from . import _core, _lib, _objects
from ._core import ShmConnector, TcpConnector, RdmaConnector, LocalConnector
from ._lib import OmniconnError

log = logging.getLogger("omniconn.vllm_omni")

try:    # vLLM-Omni present: be one of its connectors
    from vllm_omni.distributed.omni_connectors.connectors.base import OmniConnectorBase as _Base
except Exception:   # standalone
    class _Base:
        pass

_SEG_RAW = "tensor"         # a raw numpy array (or bytes-like) as a one-segment frame
_SEG_TORCH = "torch"        # a raw torch tensor as a one-segment frame
_SEG_OBJ = _objects.OBJ_SEGMENT          # an object tree without out-of-band values
_SEG_OBJS = _objects.OBJ_SEGMENT + "s"   # an object tree followed by its out-of-band values
_SEG_VLLM = "omc.vllm"      # vLLM-Omni's serializer: its main buffer, then its aux buffers
_SEG_RAW_B, _SEG_TORCH_B = _SEG_RAW.encode(), _SEG_TORCH.encode()
_ndarray = _core._ndarray
_READONLY = _lib.OMC_BUFFER_READONLY
_RETRYABLE = (_lib.OMC_ERR_TIMEOUT, _lib.OMC_ERR_NOT_FOUND, -80)   # -80: OMC_ERR_CONNECTION
_SPACE_ERRORS = ("OMC_ERR_TOO_LARGE", "OMC_ERR_POOL_FULL", "OMC_ERR_NO_MEMORY", "OMC_ERR_SHM")


def serialize(obj):
    """Self-contained bytes of obj (tensors inline): what serialize_obj returns."""
    tree, oob = _objects.encode(obj)
    return msgpack.packb([tree, [_objects.value_record(v) for v in oob]], use_bin_type=True)


def deserialize(data):
    tree, recs = msgpack.unpackb(data, raw=False)
    return _objects.Decoder(lambda i, kind: _objects.value_from_record(recs[i], kind)).unpack(tree)


# SHM senders are swept once a second by one daemon thread: TTLs pass and a growing pool gives its
# growth back (omniconn_shm.h: reserve_all) even on an edge that puts nothing any more.
_SWEEP_S = 1.0
_sweep_set = weakref.WeakSet()
_sweep_state = {"thread": None, "stop": False}
_sweep_lock = threading.Lock()


def _sweep_loop():
    while not _sweep_state["stop"]:
        time.sleep(_SWEEP_S)
        for c in list(_sweep_set):
            with c._lock:           # close() cannot destroy the connector under the sweep
                conn = c._conn
                if conn is not None and not _sweep_state["stop"]:
                    try:
                        conn.sweep()
                    except Exception:
                        pass


def _sweep_register(c):
    with _sweep_lock:
        _sweep_set.add(c)
        if _sweep_state["thread"] is None:
            t = threading.Thread(target=_sweep_loop, name="omniconn-shm-sweep", daemon=True)
            _sweep_state["thread"] = t
            t.start()


@atexit.register
def _sweep_stop():
    _sweep_state["stop"] = True


def _sweep_after_fork():
    """A forked child: the sweep thread stayed in the parent, and the connectors the child
    inherited are the parent's (they refuse calls here); a lock the parent's sweep held at the
    fork would never be released in the child."""
    global _sweep_lock
    _sweep_lock = threading.Lock()
    for c in list(_sweep_set):
        c._lock = threading.Lock()
    _sweep_set.clear()
    _sweep_state["thread"] = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_sweep_after_fork)


class _VllmSerde:
    """vLLM-Omni's serializer (the one its SharedMemoryConnector uses), applied as its own
    OmniSerde.deserialize applies it: a generic decode leaves tensors (and PIL images) in their
    encoded form, [dtype, shape, bytes or buffer index], and its post-processing turns them back
    (over the received buffers: zero-copy views)."""

    def __init__(self, module):
        self._serde = module.OmniSerde()
        self.encoder = self._serde.encoder
        self._decoder = self._serde.decoder
        self._post = getattr(module, "_post_process_decoded", None)    # older releases: none

    def encode(self, obj):
        return self.encoder.encode(obj)

    def decode(self, parts):
        obj = self._decoder.decode(parts if len(parts) > 1 else parts[0])
        if self._post is not None:
            obj = self._post(obj, parts if len(parts) > 1 else None)
        return obj


def _vllm_serde():
    """vLLM-Omni's serializer, or None when vLLM-Omni (or vLLM under it) is not importable."""
    try:
        from vllm_omni.distributed.omni_connectors.utils import serialization
        return _VllmSerde(serialization)
    except Exception:
        return None


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
        return "tensor" if not data.dtype.hasobject else None
    if t is not None and isinstance(data, t.Tensor):
        return "torch" if data.device.type == "cpu" else "device"
    return None


def _merged_config(config):
    """vLLM-Omni hands a connector its spec's `extra`; some callers wrap it as {"extra": {...},
    "stage_id": ...}. Both work: the outer keys win."""
    cfg = dict(config or {})
    inner = cfg.pop("extra", None)
    if isinstance(inner, dict):
        merged = dict(inner)
        merged.update(cfg)
        return merged
    return cfg


# the (host, port) key pairs a partial metadata dict may name its sender by: ours (a put's own
# metadata, cut down), vLLM-Omni's model runner's (built from a stage's sender_info) and a
# sender_info dict itself
_SENDER_HINTS = (("host", "port"), ("source_host", "source_port"), ("host", "zmq_port"))


def _sender_hint(metadata, get_key):
    """(host, port) of the sender a metadata dict without a payload handle names, or None."""
    for h, p in _SENDER_HINTS:
        host, port = metadata.get(h), metadata.get(p)
        if host and port:
            try:
                port = int(port)
            except (TypeError, ValueError):
                port = -1
            if 0 < port < 65536:
                return str(host), port
            log.warning("OmniconnConnector get %s: metadata %s=%r is not a port; asking the configured "
                        "sender instead", get_key, p, metadata.get(p))
            return None
    return None


# what vLLM-Omni's chunk keys append to a request id: "_{stage}_{chunk}"
_CHUNK_SUFFIX = re.compile(r"_-?\d+_\d+\Z")


# ---- the connector -----------------------------------------------------------------------------------
class OmniconnConnector(_Base):
    """vLLM-Omni's connector contract over omniconn.

    extra (the connector's config dict; every key optional):
      protocol          "shm" | "tcp" | "rdma" | "local" | "auto" (default: shm unless a remote
                        sender_host is given, then tcp)
      role              "sender" | "receiver" | "dual" (default dual)
      stage_id          this stage's id (vLLM-Omni's chunk adapter reads connector.stage_id;
                        default -1)
      host              address a sender advertises and binds ("auto" = the default route's)
      zmq_port          sender's side-channel port (0 = ephemeral; get_connection_info says which)
      data_port         sender's TCP data port (0 = ephemeral)
      port_per_stage    true: a sender binds zmq_port + stage_id (data_port + stage_id) and a
                        receiver asks sender_zmq_port + stage_id - 1, so one `extra` serves every
                        edge of a chain
      sender_host, sender_zmq_port   receiver: the sender to ask on metadata-less gets
      memory_pool_size  bytes of the connector's pool (0 = the transport's default)
      channel           SHM channel name (default "vllm_omni")
      shm_dir           SHM: the tmpfs directory of the segments (default /dev/shm; the same on
                        both sides)
      device_name       RDMA device(s), "mlx5_0,mlx5_1"
      ttl_seconds / ttl_ms   unconsumed payloads are reclaimed after this (default: library's)
      curve_server_secret_key_file   sender: its secret key (turns CURVE on)
      curve_allowed_clients_file     sender: receiver public keys let in, one a line
      curve_server_public_key_file   receiver: the sender's public key
      curve_client_secret_key_file   receiver: its own secret key (needed by an allow-list)
                        (the C pipeline config's names; curve_secret_key_file,
                        curve_public_key_file and curve_server_key_file are read too)
      get_timeout_ms    how long get() may wait for a payload its metadata announced over TCP
                        or RDMA (default 1000); a miss without metadata waits at most poll_ms
      poll_ms           (default 1)
      fanout            readers per put (default 1)
      supports_raw_data raw payloads come back as zero-copy RawBuffers (default true, false on an
                        edge with thinker_talker_handoff: true); false: as the type that was put
                        (bytes, numpy array, torch tensor), one copy
      copy_on_get       objects' tensors come back as copies instead of zero-copy views
                        (default false; a view holds its payload's pool space until it goes)
      restore_types     rebuild dataclasses and Structs as their classes where the receiving
                        process has them imported (default false: a dict of their fields, as
                        vLLM-Omni's own serializer delivers them)
      serializer        "auto" (vLLM-Omni's when importable, else omniconn's), "omniconn",
                        "vllm_omni"
    """

    supports_raw_data = True

    def __init__(self, config=None):
        extra = _merged_config(config)
        self.config = extra
        self._lock = threading.Lock()
        self._closed = False
        self._conn = None
        self._puts = {}                     # key -> (from, to): this side's puts not known consumed
        self._senders = {}
        self._endpoint = None
        self._metrics = {"puts": 0, "gets": 0, "misses": 0, "bytes_put": 0, "bytes_got": 0, "put_failures": 0,
                         "get_failures": 0, "staged_device_tensors": 0}
        try:
            self.stage_id = int(extra.get("stage_id", -1))
        except (TypeError, ValueError):
            self.stage_id = extra.get("stage_id", -1)
        self.role = str(extra.get("role", "dual")).lower()
        # an edge that opts into vLLM-Omni's Thinker-to-Talker handoff (MiniCPM-o) gets back from
        # get() the tensor that was put: the handoff checks isinstance(result, torch.Tensor)
        self.supports_raw_data = bool(extra.get("supports_raw_data", not extra.get("thinker_talker_handoff")))
        self.copy_on_get = bool(extra.get("copy_on_get", False))
        self.restore_types = bool(extra.get("restore_types", False))
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
        ser = str(extra.get("serializer", "auto")).lower()
        self._serde = _vllm_serde() if ser in ("auto", "vllm_omni") else None
        if ser == "vllm_omni" and self._serde is None:
            raise ValueError("OmniconnConnector: serializer 'vllm_omni' asked for, but vLLM-Omni's serializer "
                             "cannot be imported here")
        protocol = str(extra.get("protocol", "auto")).lower()
        if protocol == "auto":
            local = (None, "", "127.0.0.1", "localhost", "::1")
            protocol = "tcp" if self.sender_host not in local else "shm"
        self.protocol = protocol
        self._remote = protocol in ("tcp", "rdma")
        self.pool_size = int(extra.get("memory_pool_size", 0) or 0)
        self.shm_dir = extra.get("shm_dir") or os.environ.get("OMNICONN_SHM_DIR") or "/dev/shm"
        if protocol == "shm":
            self._conn = ShmConnector(self.role, channel=extra.get("channel", "vllm_omni"),
                                      shm_dir=extra.get("shm_dir"), pool_size=self.pool_size,
                                      ttl_ms=self.ttl_ms, inline_threshold=int(extra.get("inline_threshold", 0)))
            if self.role != "receiver":
                _sweep_register(self)
        elif protocol == "local":
            self._conn = LocalConnector(self.role, pool_size=self.pool_size, ttl_ms=self.ttl_ms)
        elif protocol in ("tcp", "rdma"):
            self._conn = self._create_remote(extra, protocol)
            self._endpoint = self._conn.endpoint if self.role != "receiver" else None
            if self.sender_host and self.sender_port and self.role != "sender":
                port = self.sender_port
                if extra.get("port_per_stage") and isinstance(self.stage_id, int) and self.stage_id > 0:
                    port += self.stage_id - 1
                self.update_sender_info(self.sender_host, port)
        else:
            raise ValueError("OmniconnConnector: protocol %r is not one of shm, tcp, rdma, local, auto" % protocol)

    def _edge_name(self):
        e = self.config.get("edge")
        if e:
            return "edge %s" % e
        return "stage %s" % self.stage_id

    def _create_remote(self, extra, protocol):
        receiver = self.role == "receiver"

        def key(*options):
            for opt in options:
                if extra.get(opt):
                    return _core.read_key(extra[opt])
            return None
        # the C pipeline config's key names first, then the older ones
        secret = key("curve_client_secret_key_file", "curve_secret_key_file") if receiver else \
            key("curve_server_secret_key_file", "curve_secret_key_file")
        public = key("curve_public_key_file")
        server = key("curve_server_public_key_file", "curve_server_key_file")
        allowed = None
        path = extra.get("curve_allowed_clients_file")
        if path:
            with open(path) as f:
                allowed = "\n".join(line.strip() for line in f if line.strip() and not line.lstrip().startswith("#"))
        port = int(extra.get("zmq_port", 0) or 0)
        dport = int(extra.get("data_port", 0) or 0)
        if extra.get("port_per_stage") and isinstance(self.stage_id, int) and self.stage_id >= 0:
            port = port + self.stage_id if port else 0
            dport = dport + self.stage_id if dport else 0
        cls = RdmaConnector if protocol == "rdma" else TcpConnector
        kw = dict(host=self.host if not receiver else None, port=port, data_port=dport, pool_size=self.pool_size,
                  ttl_ms=self.ttl_ms, rdma_devices=extra.get("device_name"), allowed_clients=allowed,
                  secret_key=secret, public_key=public, server_key=server)
        if protocol == "rdma":
            kw["require"] = bool(extra.get("require_rdma", True))
        try:
            return cls(self.role, **kw)
        except OmniconnError as e:
            if (port or dport) and e.name == "OMC_ERR_CONNECTION":
                raise OmniconnError(e.code, "OmniconnConnector %s: zmq_port %d / data_port %d: a port is in use (is "
                                    "one `extra` shared by several edges? give each edge its own ports, use 0 - "
                                    "ephemeral, receivers learn the port from the metadata - or set "
                                    "port_per_stage: true)" % (self._edge_name(), port, dport), log=e.log) from None
            raise

    # -- helpers
    def _c(self):
        if self._conn is None:
            raise _lib.ClosedError(_lib.OMC_ERR_CLOSED, "OmniconnConnector", log="closed")
        return self._conn

    def _space_hint(self, e, size):
        """The words a put that did not fit needs: how big, which knob, and /dev/shm's size."""
        if getattr(e, "name", "") not in _SPACE_ERRORS:
            return ""
        hint = "; the payload is %d bytes, memory_pool_size is %s" % (size, self.pool_size or "the default")
        if self.protocol == "shm":
            try:
                st = os.statvfs(self.shm_dir)
                hint += "; %s has %d MiB, %d MiB free (raise memory_pool_size or the tmpfs size, e.g. docker " \
                        "--shm-size)" % (self.shm_dir, st.f_blocks * st.f_frsize >> 20, st.f_bavail * st.f_frsize >> 20)
            except OSError:
                pass
        return hint

    # -- put
    def _put_object(self, conn, from_stage, to_stage, put_key, data):
        if self._serde is not None:
            bufs = self._serde.encode(data)
            items = {_SEG_VLLM: bufs[0]}
            for i, b in enumerate(bufs[1:]):
                items[str(i)] = b
        else:
            tree, oob = _objects.encode(data)
            if not oob:
                meta = conn.put_tensor(from_stage, to_stage, put_key, _SEG_OBJ, tree, self.fanout, self.ttl_ms)
                return meta, len(tree)
            items = {_SEG_OBJS: tree}
            for i, v in enumerate(oob):
                items[str(i)] = v
        size = 0
        for v in items.values():
            size += v.nbytes if hasattr(v, "nbytes") else (v.numel() * v.element_size() if hasattr(v, "numel")
                                                           else memoryview(v).nbytes)
        return conn.put_tensors(from_stage, to_stage, put_key, items, self.fanout, self.ttl_ms), size

    def put(self, from_stage, to_stage, put_key, data):
        """Store data for (from_stage, to_stage, put_key). Returns (ok, size, metadata): metadata
        is a small msgpack-able dict to forward to the receiver (or drop: gets work without it)."""
        size = 0
        try:
            conn = self._conn
            if conn is None:
                conn = self._c()
            kind = "tensor" if type(data) is _ndarray else _is_raw(data)
            if kind == "bytes":
                size = memoryview(data).nbytes
                meta = conn.put(from_stage, to_stage, put_key, data, readers=self.fanout, ttl_ms=self.ttl_ms)
            elif kind == "tensor":
                size = int(data.nbytes)
                meta = conn.put_tensor(from_stage, to_stage, put_key, _SEG_RAW_B, data, self.fanout, self.ttl_ms)
            elif kind == "torch":
                size = data.numel() * data.element_size()
                meta = conn.put_tensor(from_stage, to_stage, put_key, _SEG_TORCH_B, data, self.fanout, self.ttl_ms)
            else:
                if kind == "device":
                    self._metrics["staged_device_tensors"] += 1
                    log.info("OmniconnConnector put %s: a %s tensor is staged through host memory (one "
                             "device-to-host copy); it arrives as a CPU tensor", put_key, data.device)
                    data = data.detach().to("cpu")
                    size = data.numel() * data.element_size()
                    meta = conn.put_tensor(from_stage, to_stage, put_key, _SEG_TORCH_B, data, self.fanout, self.ttl_ms)
                    kind = "torch"
                else:
                    kind = "obj"
                    meta, size = self._put_object(conn, from_stage, to_stage, put_key, data)
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
            log.error("OmniconnConnector put %s->%s %s failed: %s%s", from_stage, to_stage, put_key, e,
                      self._space_hint(e, size))
            return False, 0, None

    # -- get
    def _decode_object(self, buf, seg):
        """The object of a frame whose first segment is an object tree; its tensors are views
        into buf (which goes when the last of them does) or copies."""
        name = seg[0]
        if name == _SEG_OBJ:
            off, n = seg[4], seg[5]
            obj = _objects.Decoder(None, self.restore_types).unpack(buf.view[off:off + n])
            buf.release(strict=False)
            return obj, n
        segs = _core.frame_segments(buf)
        copy = self.copy_on_get or bool(buf.flags & _READONLY)
        if not (buf.flags & _READONLY) and buf._arr is None and buf._region is not None:
            buf._region.readonly = False     # one reader: the views may be written
        size = 0
        for s in segs:
            size += s[5]
        if name == _SEG_VLLM:
            if self._serde is None:
                buf.release(strict=False)
                raise OmniconnError(_lib.OMC_ERR_INVALID_ARG, "get",
                                    log="the sender used vLLM-Omni's serializer, which cannot be imported here")
            view = buf.view
            parts = [view[s[4]:s[4] + s[5]] for s in segs]
            obj = self._serde.decode(parts)
            del view, parts
            buf.release(strict=False)
            return obj, size
        tree = segs[0]
        if tree[0] != _SEG_OBJS:
            raise ValueError("a frame whose first segment is %r" % tree[0])
        view = buf.view
        obj = _objects.Decoder(lambda i, kind: _objects.value_from_segment(buf, view, segs[i + 1], kind, copy),
                               self.restore_types).unpack(view[tree[4]:tree[4] + tree[5]])
        del view
        buf.release(strict=False)
        return obj, size

    def _decode(self, buf, seg):
        """(object, size) from a received buffer and its first segment (None: not a frame); raw
        payloads stay zero-copy when supports_raw_data."""
        if seg is not None:
            name = seg[0]
            if name == _SEG_RAW or name == _SEG_TORCH:
                raw = RawBuffer(buf, seg)
                if self.supports_raw_data:
                    return raw, raw.size
                if name == _SEG_TORCH:
                    out = raw.tensor.clone()
                    n = out.numel() * out.element_size()
                else:
                    out = raw.numpy().copy()
                    n = out.nbytes
                raw.release()
                return out, n
            return self._decode_object(buf, seg)
        if self.supports_raw_data:
            return RawBuffer(buf), buf.size
        data = buf.to_bytes()
        buf.release()
        return data, len(data)

    @staticmethod
    def _unwrap(metadata, get_key):
        """vLLM-Omni may hand the metadata wrapped as {get_key: metadata}."""
        if isinstance(metadata, dict) and "omc" not in metadata:
            inner = metadata.get(get_key)
            if inner is None and get_key is not None:
                inner = metadata.get(str(get_key))
            if isinstance(inner, (dict, bytes, bytearray)):
                return inner
        return metadata

    def _get(self, from_stage, to_stage, get_key, metadata, timeout, poll=False):
        conn = self._conn
        if conn is None:
            conn = self._c()
        meta = None
        sender = None
        if metadata is not None:
            metadata = self._unwrap(metadata, get_key)
            if isinstance(metadata, dict):
                meta = metadata.get("omc")
                if meta is None and self._remote:
                    hint = _sender_hint(metadata, get_key)
                    if hint is not None:
                        sender = self._sender_for(*hint)
            elif isinstance(metadata, (bytes, bytearray)):
                meta = bytes(metadata)
        if meta is None and poll and self._remote:
            # a miss must be cheap and a hit must not be cut short: ask first (consumes nothing,
            # waits at most poll_ms), then fetch with the full get timeout
            if conn.query(from_stage, to_stage, get_key, timeout, sender) is None:
                self._metrics["misses"] += 1
                return None
            timeout = self.get_timeout_s
        got = conn.get_first(from_stage, to_stage, get_key, meta, timeout, sender, miss=True)
        if got is None:
            self._metrics["misses"] += 1
            return None
        try:
            obj, size = self._decode(got[0], got[1])
        except OmniconnError:
            raise
        except Exception as e:      # a payload this side cannot decode: an error, never a crash
            got[0].release(strict=False)
            raise OmniconnError(_lib.OMC_ERR_INVALID_ARG, "get %r" % (get_key,),
                                log="the payload does not decode here (%s: %s); is the sender's omniconn or "
                                    "serializer another one?" % (type(e).__name__, e)) from None
        with self._lock:
            self._metrics["gets"] += 1
            self._metrics["bytes_got"] += size
        return obj, size

    def _failed(self, from_stage, to_stage, get_key, e):
        self._metrics["get_failures"] += 1
        if getattr(e, "code", None) in _RETRYABLE:      # the caller polls again: not an error yet
            log.warning("OmniconnConnector get %s->%s %s: %s (will be retried)", from_stage, to_stage, get_key, e)
        else:
            log.error("OmniconnConnector get %s->%s %s failed: %s", from_stage, to_stage, get_key, e)

    def get(self, from_stage, to_stage, get_key, metadata=None):
        """Non-blocking: (object, size) if the payload is there, else None. metadata: the dict put
        returned, that dict wrapped as {get_key: dict}, a partial one naming only the sender ({host,
        port}, {source_host, source_port} or a sender_info {host, zmq_port}) or None."""
        if self._remote:
            # a remote payload needs a round trip: announced by metadata it is worth waiting for,
            # otherwise ask briefly
            md = self._unwrap(metadata, get_key) if metadata is not None else None
            has_meta = isinstance(md, dict) and md.get("omc") is not None
            timeout = self.get_timeout_s if has_meta else self.poll_s
        else:
            timeout = 0
        try:
            return self._get(from_stage, to_stage, get_key, metadata, timeout, poll=True)
        except OmniconnError as e:
            self._failed(from_stage, to_stage, get_key, e)
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
            self._failed(from_stage, to_stage, get_key, e)
            return None

    def abandon_get(self, *args):
        """The receiver no longer wants a key: abandon_get(get_key) (vLLM-Omni's newest base) or
        abandon_get(from_stage, to_stage, get_key). Drops the key where this connector holds it
        (its own puts: the dual role); elsewhere nothing waits on the receiver's side - get() never
        blocks past its call - and the sender's TTL (or its cleanup) reclaims the payload.
        Returns True if something was dropped."""
        if len(args) == 1:
            key, edge = str(args[0]), None
        elif len(args) == 3:
            key, edge = str(args[2]), (str(args[0]), str(args[1]))
        else:
            raise TypeError("abandon_get(get_key) or abandon_get(from_stage, to_stage, get_key)")
        if self._conn is None:
            return False
        return self._drop(lambda k: k == key, edge, key) > 0

    def _drop(self, match, edge=None, exact=None):
        """Drop every key of this connector that match(key) accepts (on edge, if given)."""
        conn = self._conn
        with self._lock:
            victims = {(e[0], e[1], k) for k, e in self._puts.items() if match(k) and (edge is None or e == edge)}
            for _, _, k in victims:
                self._puts.pop(k, None)
        try:
            for f, t, k in conn.list(*(edge or (None, None))):
                if match(k):
                    victims.add((f, t, k))
        except OmniconnError:       # a receiver-only connector has nothing of its own to list
            pass
        if edge is not None and exact is not None:
            victims.add((edge[0], edge[1], exact))
        dropped = 0
        for f, t, k in victims:
            try:
                dropped += bool(conn.cleanup(f, t, k))
            except OmniconnError as e:
                log.warning("OmniconnConnector cleanup %s: %s", k, e)
        return dropped

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
        """Drop what this side put under the key request_id and the request's chunk keys
        "{request_id}_{stage}_{n}" (vLLM-Omni's chunk adapter). An argument shaped like a chunk
        key itself drops that key alone: vLLM-Omni's callers clean up the exact key they put
        (its SHM connector unlinks that key only), and cleanup("rid_0_0") must not take the
        rank-aware KV key "rid_0_0_1_0" with it. Returns True if anything was dropped."""
        if self._conn is None:
            return False
        rid = str(request_id)
        edge = (str(from_stage), str(to_stage)) if from_stage is not None and to_stage is not None else None
        if _CHUNK_SUFFIX.search(rid):
            return self._drop(lambda k: k == rid, edge) > 0
        chunk = re.compile(re.escape(rid) + _CHUNK_SUFFIX.pattern)
        return self._drop(lambda k: k == rid or chunk.match(k) is not None, edge) > 0

    def health(self):
        out = {"status": "closed" if self._conn is None else "healthy", "protocol": self.protocol, "role": self.role,
               "stage_id": self.stage_id}
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
        if self._remote and self.role != "receiver":
            host, port, dport = self._c().endpoint
            info.update(host=host, zmq_port=port, data_port=dport)
        elif self.protocol == "shm":
            info.update(channel=self.config.get("channel", "vllm_omni"))
        return info

    def _sender_for(self, host, port, rank=None):
        name = "%s:%d" % (host, port) if rank is None else "rank%s" % rank
        if self._senders.get(name) == (host, port):
            return name
        if name in self._senders:       # the name moves to another endpoint
            self._c().remove_sender(name)
            del self._senders[name]
        for other, endpoint in self._senders.items():
            if endpoint == (host, port):    # the library keeps one name per endpoint: use it
                return other
        self._c().add_sender(name, host, port, self._server_key_for())
        self._senders[name] = (host, port)
        return name

    def _server_key_for(self):
        path = self.config.get("curve_server_public_key_file") or self.config.get("curve_server_key_file")
        return _core.read_key(path) if path else None

    def update_sender_info(self, host=None, port=None, rank=None, *, sender_host=None, sender_zmq_port=None,
                           sender_rank=None):
        """Receiver: (re)point metadata-less gets at the sender at host:port (per rank if given).
        The keywords of vLLM-Omni's transfer-engine connectors (sender_host, sender_zmq_port,
        sender_rank) are taken too."""
        host = sender_host if host is None else host
        port = sender_zmq_port if port is None else port
        rank = sender_rank if rank is None else rank
        if host is None or port is None:
            raise TypeError("update_sender_info needs a host and a port")
        if not self._remote:
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
    if "OmniconnConnector" in OmniConnectorFactory.list_registered_connectors():
        return True
    try:    # newer factories merge a stage's inbound and outbound edge into one "dual" connector
        supports_dual = "supports_dual" in inspect.signature(OmniConnectorFactory.register_connector).parameters
    except (TypeError, ValueError):
        supports_dual = False
    if supports_dual:
        OmniConnectorFactory.register_connector("OmniconnConnector", OmniconnConnector, supports_dual=True)
    else:
        OmniConnectorFactory.register_connector("OmniconnConnector", OmniconnConnector)
    return True


registered = _register()
