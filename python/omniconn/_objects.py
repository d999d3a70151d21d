"""Objects with their tensors out of band: how OmniconnConnector carries a Python object.

The object tree is packed with msgpack; every numpy array and torch tensor inside it is
replaced by a reference (a msgpack extension holding its index) and travels
as a segment of its own in the same payload frame. The sender's put copies each tensor once,
straight into the connector's pool (the frame builder writes segment after segment); the
receiver gets each tensor back as a zero-copy view into the received buffer (or, with
copy=True, as one copy into new memory).

What it carries: None, bool, int, float, str, bytes (bytes-like values travel inside the tree
and arrive as bytes), lists, tuples, dicts, sets, enums,
numpy arrays and scalars, CPU torch tensors (device tensors are staged through host memory:
one device-to-host copy), torch dtypes, dataclasses and msgspec Structs. A dataclass or Struct
arrives as a dict of its fields (a list for an array_like Struct), which is what vLLM-Omni's own
serializer delivers; with restore_types=True it is rebuilt as its class when the receiving
process has that class's module imported (never importing anything itself). Anything else
raises TypeError. Nothing is ever pickled.

Frame layout: segment 0 "omc.obj" (bytes) is the packed tree; segments "0", "1", ... are the
out-of-band values in reference order (tensors with their dtype and shape).
"""
import dataclasses
import enum
import logging
import struct
import sys
import threading

import msgpack

from . import _core

log = logging.getLogger("omniconn.objects")

OBJ_SEGMENT = "omc.obj"

_EXT_REF = 16       # [index, kind]: an out-of-band value
_EXT_TUPLE = 17
_EXT_SET = 18
_EXT_FROZENSET = 19
_EXT_OBJ = 20       # ["module:qualname", kind, fields]: a dataclass or Struct
_EXT_ENUM = 21      # ["module:qualname", value]
_EXT_DTYPE = 22     # "float32": a torch dtype
_EXT_COMPLEX = 23

_KIND_NUMPY, _KIND_TORCH, _KIND_BYTES = 0, 1, 2
_OBJ_DATACLASS, _OBJ_STRUCT, _OBJ_STRUCT_ARRAY = 0, 1, 2
_REF = struct.Struct("<IB")
_DT_BF16 = 10       # OMC_DTYPE_BF16


def _typename(cls):
    return "%s:%s" % (cls.__module__, cls.__qualname__)


def _resolve(name):
    """The class named "module:qualname" if its module is already imported here, else None."""
    mod, _, qual = name.partition(":")
    obj = sys.modules.get(mod)
    for part in qual.split("."):
        if obj is None or part == "<locals>":
            return None
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None


def _is_struct(cls):
    return hasattr(cls, "__struct_fields__") and hasattr(cls, "__struct_config__")


# defaults omit_defaults compares by value; any other default (an object, a tensor) only by identity
_PLAIN_DEFAULTS = (bool, int, float, str, bytes, tuple, list, dict, set, frozenset)


def _is_default(value, default):
    factory = getattr(default, "factory", None)     # msgspec's field(default_factory=...)
    if callable(factory):
        default = factory()
    if value is default:
        return True
    if type(value) is not type(default) or not isinstance(default, _PLAIN_DEFAULTS):
        return False
    try:
        return bool(value == default)
    except Exception:       # a container holding tensors: not a default
        return False


def _struct_values(obj, cls):
    """(name, value) of the Struct's fields as msgspec encodes them: a Struct declared with
    omit_defaults leaves out the fields that hold their default (vLLM-Omni's payload Structs
    do, and its receivers test for absent keys, e.g. payload.get("codes", {}))."""
    names = cls.__struct_fields__
    pairs = [(n, getattr(obj, n)) for n in names]
    if not getattr(cls.__struct_config__, "omit_defaults", False):
        return pairs
    defaults = tuple(getattr(cls, "__struct_defaults__", ()) or ())
    first = len(names) - len(defaults)
    keep = [i < first or not _is_default(v, defaults[i - first]) for i, (_, v) in enumerate(pairs)]
    if getattr(cls.__struct_config__, "array_like", False):
        while keep and not keep[-1]:        # an array drops only its trailing defaults
            keep.pop()
        return pairs[:len(keep)]
    return [pv for pv, k in zip(pairs, keep) if k]


class Encoder:
    """Pack one object: .pack(obj) -> tree bytes; .oob the out-of-band values, in reference
    order. One per thread (encoder()): msgpack's packer allocates a 1 MiB buffer when made, so
    the packers (one per nesting depth of extension types) are made once and reused."""
    __slots__ = ("oob", "_packers", "_depth")

    def __init__(self):
        self.oob = []
        self._packers = []
        self._depth = 0

    def _packer(self):
        d = self._depth
        if d == len(self._packers):
            self._packers.append(msgpack.Packer(default=self._default, use_bin_type=True, strict_types=True,
                                                autoreset=True))
        return self._packers[d]

    def pack(self, obj):
        self.oob = []
        self._depth = 0
        try:
            return self._packer().pack(obj)
        except BaseException:
            for p in self._packers:     # a failed pack leaves bytes behind in the packer
                p.reset()
            raise

    def _sub(self, obj):
        self._depth += 1
        try:
            return self._packer().pack(obj)
        finally:
            self._depth -= 1

    def _ref(self, value, kind):
        self.oob.append(value)
        return msgpack.ExtType(_EXT_REF, _REF.pack(len(self.oob) - 1, kind))

    def _default(self, obj):
        np = _core._np
        t = _core._torch()
        if np is not None and isinstance(obj, np.ndarray):
            if obj.dtype.hasobject:
                raise TypeError("omniconn: a numpy array of Python objects cannot travel (dtype object)")
            return self._ref(obj, _KIND_NUMPY)
        if t is not None:
            if isinstance(obj, t.Tensor):
                if obj.device.type != "cpu":     # staged through host memory: one device-to-host copy
                    obj = obj.detach().to("cpu")
                elif obj.requires_grad:
                    obj = obj.detach()
                return self._ref(obj, _KIND_TORCH)
            if isinstance(obj, t.dtype):
                return msgpack.ExtType(_EXT_DTYPE, str(obj).replace("torch.", "").encode())
        if isinstance(obj, tuple):              # a namedtuple arrives as a plain tuple
            return msgpack.ExtType(_EXT_TUPLE, self._sub(list(obj)))
        if isinstance(obj, enum.Enum):
            return msgpack.ExtType(_EXT_ENUM, self._sub([_typename(type(obj)), obj.value]))
        if isinstance(obj, bool):
            return bool(obj)
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            return float(obj)
        if isinstance(obj, str):
            return str(obj)
        if isinstance(obj, dict):
            return dict(obj)
        if isinstance(obj, list):
            return list(obj)
        if isinstance(obj, set):
            return msgpack.ExtType(_EXT_SET, self._sub(list(obj)))
        if isinstance(obj, frozenset):
            return msgpack.ExtType(_EXT_FROZENSET, self._sub(list(obj)))
        if isinstance(obj, complex):
            return msgpack.ExtType(_EXT_COMPLEX, struct.pack("<dd", obj.real, obj.imag))
        cls = type(obj)
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
            return msgpack.ExtType(_EXT_OBJ, self._sub([_typename(cls), _OBJ_DATACLASS, fields]))
        if _is_struct(cls):
            pairs = _struct_values(obj, cls)
            if getattr(cls.__struct_config__, "array_like", False):
                return msgpack.ExtType(_EXT_OBJ, self._sub([_typename(cls), _OBJ_STRUCT_ARRAY, [v for _, v in pairs]]))
            return msgpack.ExtType(_EXT_OBJ, self._sub([_typename(cls), _OBJ_STRUCT, dict(pairs)]))
        if np is not None and isinstance(obj, np.generic):
            return obj.item()
        raise TypeError("omniconn: cannot send a %s (pickle is never used): send dicts, lists, tuples, numbers, "
                        "strings, bytes, numpy arrays, torch tensors, dataclasses or msgspec Structs"
                        % _typename(cls))


class Decoder:
    """Unpack a tree packed by Encoder; refs are resolved by oob(index, kind) -> value."""
    __slots__ = ("oob", "restore_types")

    def __init__(self, oob, restore_types=False):
        self.oob = oob
        self.restore_types = restore_types

    def unpack(self, data):
        return msgpack.unpackb(data, ext_hook=self._ext, raw=False, strict_map_key=False, use_list=True)

    def _ext(self, code, data):
        if code == _EXT_REF:
            i, kind = _REF.unpack(data)
            return self.oob(i, kind)
        if code == _EXT_TUPLE:
            return tuple(self.unpack(data))
        if code == _EXT_SET:
            return set(self.unpack(data))
        if code == _EXT_FROZENSET:
            return frozenset(self.unpack(data))
        if code == _EXT_DTYPE:
            import torch
            return getattr(torch, data.decode())
        if code == _EXT_COMPLEX:
            return complex(*struct.unpack("<dd", data))
        if code == _EXT_ENUM:
            name, value = self.unpack(data)
            cls = _resolve(name)
            if cls is not None and issubclass(cls, enum.Enum):
                try:
                    return cls(value)
                except ValueError:
                    pass
            return value
        if code == _EXT_OBJ:
            name, kind, fields = self.unpack(data)
            if self.restore_types:
                obj = self._rebuild(name, kind, fields)
                if obj is not None:
                    return obj
            return fields
        return msgpack.ExtType(code, data)

    @staticmethod
    def _rebuild(name, kind, fields):
        cls = _resolve(name)
        if cls is None:
            log.debug("omniconn: %s is not imported here; it arrives as its fields", name)
            return None
        try:
            if kind == _OBJ_DATACLASS and dataclasses.is_dataclass(cls):
                obj = object.__new__(cls)       # no __init__/__post_init__: the sender's values as they were
                for k, v in fields.items():
                    object.__setattr__(obj, k, v)
                return obj
            if kind in (_OBJ_STRUCT, _OBJ_STRUCT_ARRAY) and _is_struct(cls):
                if kind == _OBJ_STRUCT_ARRAY:
                    fields = dict(zip(cls.__struct_fields__, fields))
                return cls(**fields)
        except Exception as e:      # a class that changed shape: its fields are still worth having
            log.warning("omniconn: could not rebuild %s (%s); it arrives as its fields", name, e)
        return None


_tls = threading.local()


def encode(obj):
    """(tree bytes, [out-of-band values])."""
    enc = getattr(_tls, "enc", None)
    if enc is None:
        enc = _tls.enc = Encoder()
    tree = enc.pack(obj)
    oob, enc.oob = enc.oob, []
    return tree, oob


def frame_items(obj):
    """The {segment name: value} a put sends for obj (tree first)."""
    tree, oob = encode(obj)
    items = {OBJ_SEGMENT: tree}
    for i, v in enumerate(oob):
        items[str(i)] = v
    return items


# ---- out-of-band values on the way back ------------------------------------------------------------
def value_from_segment(buffer, view, seg, kind, copy):
    """An out-of-band value from its frame segment: a view into buffer (copy=False) or a copy."""
    name, skind, dt, shape, off, size = seg
    if kind == _KIND_BYTES:
        return bytes(view[off:off + size])
    a = buffer.numpy(_core._DTYPES_NP[dt], shape, off)
    if copy:
        a = a.copy()
    if kind == _KIND_TORCH:     # a tensor over the same bytes (bfloat16: over its uint16 storage)
        import torch
        if dt == _DT_BF16:
            return torch.from_numpy(a.view("int16")).view(torch.bfloat16)
        return torch.from_numpy(a)
    return a


def value_record(v):
    """[kind, dtype name, shape, bytes] of an out-of-band value (serialize(): tensors inline)."""
    np = _core._np
    t = _core._torch()
    if t is not None and isinstance(v, t.Tensor):
        c = v.detach().to("cpu").contiguous()
        raw = c.view(t.uint8).numpy().tobytes() if c.numel() else b""
        return [_KIND_TORCH, str(c.dtype).replace("torch.", ""), list(c.shape), raw]
    if np is not None and isinstance(v, np.ndarray):
        a = np.ascontiguousarray(v)
        return [_KIND_NUMPY, a.dtype.str, list(a.shape), a.tobytes()]
    return [_KIND_BYTES, "", [], bytes(v)]


def value_from_record(rec, kind):
    k, dt, shape, raw = rec
    if kind == _KIND_TORCH:
        import torch
        dtype = getattr(torch, dt)
        if not raw:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)
    if kind == _KIND_NUMPY:
        import numpy as np
        return np.frombuffer(raw, dtype=np.dtype(dt)).reshape(shape).copy()
    return bytes(raw)
