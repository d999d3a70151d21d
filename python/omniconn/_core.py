"""Connectors, buffers and named-tensor frames over libomniconn."""
import ctypes
import operator
import os
import sys
import threading
import time
import weakref

from . import _lib
from ._lib import lib, check, error, OmniconnError

try:
    import numpy as _np
except ImportError:     # numpy is optional: views are then ctypes arrays
    _np = None

_NO_WAIT = 0
_FOREVER = (1 << 63) - 1
_META_CAP = _lib.OMC_META_MAX_SIZE


def deadline(timeout):
    """Seconds from now -> an absolute omc deadline (None = forever, 0 = do not wait)."""
    if timeout is None:
        return _FOREVER
    if timeout <= 0:
        return _NO_WAIT
    return min(time.monotonic_ns() + int(timeout * 1e9), _FOREVER)    # CLOCK_MONOTONIC, as omc_now_ns


def _b(s):
    """A string argument as the C string the library gets. C strings end at the first NUL, so a
    string holding one would reach the library cut short (another key, another host): refused."""
    if type(s) is str:
        if "\0" not in s:
            return s.encode()
    elif s is None:
        return None
    elif isinstance(s, bytes):
        if b"\0" not in s:
            return s
    else:
        return _b(str(s))
    raise ValueError("omniconn: %r contains a NUL character (C strings end there)" % (s,))


def _batch_buffers(n, keys, r, hs, ds, ss, fs, rs, fail):
    """The [Buffer or None] of a batched get from the library's per-item arrays (handle, data,
    size, flags, result; r: the call's result). A key that is not there (NOT_FOUND, or TIMEOUT at
    the deadline) is None; any other failure releases every Buffer of the batch and raises
    fail(code, what)."""
    out = [Buffer(hs[i], ds[i], ss[i], fs[i]) if rs[i] == 0 else None for i in range(n)]
    bad = next((i for i in range(n) if rs[i] not in (0, _lib.OMC_ERR_NOT_FOUND, _lib.OMC_ERR_TIMEOUT)), None)
    if bad is not None:         # every view goes back, those of the other items too
        for b in out:
            if b is not None:
                b.release()
        raise fail(rs[bad], "get_batch %r" % (keys[bad],))
    if r not in (0, _lib.OMC_ERR_NOT_FOUND, _lib.OMC_ERR_TIMEOUT):
        raise fail(r, "get_batch")
    return out


_STAGES = {}            # stage name (str or bytes) -> its C string, NUL-checked once
_STAGES_MAX = 1024      # stage names are few; a program that makes up new ones starts over here


def _stage(s):
    """_b() for a stage name, remembered: the hot calls look a stage name up instead of checking
    and encoding it on every call (keys, unique per request, are not remembered)."""
    if type(s) is str or type(s) is bytes:
        try:
            return _STAGES[s]
        except KeyError:
            pass
        v = _b(s)
        if len(_STAGES) >= _STAGES_MAX:
            _STAGES.clear()
        _STAGES[s] = v
        return v
    return _b(s)


_stage_get = _STAGES.get


def _int(value, what, low, high):
    """An integer argument checked against the range of the C type it is narrowed to (ctypes
    would wrap it silently: a port of 65558 becomes 22, a size of -1 becomes 2**64 - 1)."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError("omniconn: %s must be an integer, not %s" % (what, type(value).__name__)) from None
    if v < low or v > high:
        raise ValueError("omniconn: %s %d is outside %d..%d" % (what, v, low, high))
    return v


_U32, _U64, _I64 = (1 << 32) - 1, (1 << 64) - 1, (1 << 63) - 1


def _u32(value, what):
    return _int(value, what, 0, _U32)


def _u64(value, what):
    return _int(value, what, 0, _U64)


def _i64(value, what):
    return _int(value, what, -_I64 - 1, _I64)


def _port(value, what="port", ephemeral=False):
    """A TCP port: 1..65535 (0 too where it means "pick one")."""
    return _int(value, what, 0 if ephemeral else 1, 65535)


_tls = threading.local()


_GOT_N = len(_lib.GET_FIRST_FIELDS)
_GOT_SHAPE = _lib.GET_FIRST_FIELDS.index("shape0")
_NAME_CAP = _lib.OMC_FRAME_MAX_NAME + 1


class _CallState:
    """Per-thread out-parameters of the hot calls, allocated once (ctypes objects are not free)."""
    __slots__ = ("meta", "meta_mv", "msize", "msize_ref", "h", "data", "size", "flags", "refs", "shape", "got", "name")

    def __init__(self):
        self.meta = ctypes.create_string_buffer(_META_CAP)
        self.meta_mv = memoryview(self.meta).cast("B")      # slicing it copies less than string_at
        self.shape = (ctypes.c_int64 * _lib.OMC_MAX_DIMS)()
        self.got = (ctypes.c_uint64 * _GOT_N)()
        self.name = ctypes.create_string_buffer(_NAME_CAP)
        self.msize = ctypes.c_uint32()
        self.msize_ref = ctypes.byref(self.msize)
        self.h, self.data, self.size, self.flags = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_uint32()
        self.refs = (ctypes.byref(self.h), ctypes.byref(self.data), ctypes.byref(self.size), ctypes.byref(self.flags))


def _state():
    st = getattr(_tls, "st", None)
    if st is None:
        st = _tls.st = _CallState()
    return st


def _meta_buf():
    st = _state()
    return st.meta, st.msize


# ---- where the bytes of a Python object are ------------------------------------------------------
def _torch():
    return sys.modules.get("torch")


_ndarray = _np.ndarray if _np is not None else None
_getrefcount = sys.getrefcount
_region_lock = threading.Lock()     # a buffer's region is made once (Buffer._region)
_char_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof


def _address(data):
    """(address, size, keepalive) of data's bytes, without copying when they are contiguous.
    Accepts bytes, bytearray, memoryview (any buffer), numpy arrays and CPU torch tensors."""
    if type(data) is _ndarray and data.flags.c_contiguous:
        n = data.nbytes
        if n and data.flags.writeable:     # half the cost of __array_interface__
            return _addressof(_char_from_buffer(data)), n, data
        return data.__array_interface__["data"][0], n, data
    if isinstance(data, bytes):
        return ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value, len(data), data
    t = _torch()
    if t is not None and isinstance(data, t.Tensor):
        if data.device.type != "cpu":
            raise ValueError("omniconn: put a CPU tensor (this one is on %s)" % data.device)
        if not data.is_contiguous():
            data = data.contiguous()        # the one copy a strided tensor needs
        return data.data_ptr(), data.numel() * data.element_size(), data
    if _np is not None:
        if isinstance(data, _np.ndarray):
            if not data.flags["C_CONTIGUOUS"]:
                data = _np.ascontiguousarray(data)
            return data.__array_interface__["data"][0], data.nbytes, data
        mv = memoryview(data)
        if not mv.c_contiguous:
            raise ValueError("omniconn: the buffer is not contiguous")
        arr = _np.frombuffer(mv, dtype=_np.uint8) if mv.nbytes else _np.zeros(0, _np.uint8)
        return arr.ctypes.data, mv.nbytes, (arr, mv)
    mv = memoryview(data).cast("B")
    if mv.readonly:                         # no numpy: ctypes needs a writable buffer to see its address
        mv = memoryview(bytes(mv))
        return ctypes.cast(ctypes.c_char_p(mv.obj), ctypes.c_void_p).value, mv.nbytes, mv
    arr = (ctypes.c_ubyte * mv.nbytes).from_buffer(mv)
    return ctypes.addressof(arr), mv.nbytes, (arr, mv)


# the hot calls, looked up once
_ffi_put = lib.omc_ffi_put
_ffi_put_tensor = lib.omc_ffi_put_tensor
_ffi_get = lib.omc_ffi_get
_ffi_get_first = lib.omc_ffi_get_first
_ffi_release = lib.omc_ffi_buffer_release
_conn_exists = lib.omc_conn_exists
_conn_cleanup = lib.omc_conn_cleanup


# ---- buffers ---------------------------------------------------------------------------------------
_pid = os.getpid()      # this process (a forked child sets its own, see _after_fork_in_child)


class _Region:
    """Owns one C buffer handle; lives as long as the array that exposes its bytes (and so as
    long as every view of them). Its release happens at most once, and only in the process that
    got the buffer (a forked child's copy of a handle is not its to give back). core: the
    connector a buffer from alloc() keeps alive (a get's view keeps it in the library itself)."""
    __slots__ = ("handle", "address", "size", "readonly", "pid", "core", "__weakref__")

    def __init__(self, handle, address, size, readonly, core=None):
        self.handle = handle
        self.address = address
        self.size = size
        self.readonly = readonly
        self.pid = _pid
        self.core = core

    @property
    def __array_interface__(self):
        return {"data": (self.address, self.readonly), "shape": (self.size,), "typestr": "|u1", "version": 3}

    def release(self):
        h = self.handle
        self.handle = None
        core = self.core
        if core is None:                # a get's view: nothing else to let go
            return _ffi_release(h) if h and self.pid == _pid else 0
        self.core = None
        try:
            return _ffi_release(h) if h and self.pid == _pid else 0
        finally:
            core.buffer_gone()

    def consumed(self):
        """The library took the handle over (a put of this buffer)."""
        self.handle = None
        core, self.core = self.core, None
        if core is not None:
            core.buffer_gone()

    def __del__(self):
        if self.handle is None and self.core is None:     # released already: the usual case
            return
        try:
            self.release()
        except Exception:
            pass


def _expose(region, address, size):
    """An object exporting [address, address + size) through the buffer protocol, holding region."""
    if _np is not None:
        return _np.asarray(region)          # an ndarray whose base is region
    arr = (ctypes.c_ubyte * size).from_address(address)
    arr._omc_region = region
    return arr


_DTYPES_NP = {}     # omc dtype -> numpy dtype name
_NP_CODES = {"uint8": 1, "int8": 2, "uint16": 3, "int16": 4, "uint32": 5, "int32": 6, "uint64": 7,
             "int64": 8, "float16": 9, "float32": 11, "float64": 12, "bool": 13}
for _k, _v in _NP_CODES.items():
    _DTYPES_NP[_v] = _k
_DTYPES_NP[10] = "uint16"       # bfloat16: numpy has none; torch views get torch.bfloat16
_TORCH_NAMES = {1: "uint8", 2: "int8", 3: "int16", 4: "int16", 5: "int32", 6: "int32", 7: "int64",
                8: "int64", 9: "float16", 10: "bfloat16", 11: "float32", 12: "float64", 13: "bool"}


_DTYPE_CACHE = {}


def dtype_code(dtype):
    """omc dtype code of a numpy or torch dtype (or its name)."""
    try:
        return _DTYPE_CACHE[dtype]
    except (KeyError, TypeError):
        pass
    code = _dtype_code(dtype)
    try:
        _DTYPE_CACHE[dtype] = code
    except TypeError:
        pass
    return code


def _dtype_code(dtype):
    t = _torch()
    if t is not None and isinstance(dtype, t.dtype):
        name = str(dtype).replace("torch.", "")
        if name == "bfloat16":
            return 10
    else:
        name = _np.dtype(dtype).name if _np is not None else str(dtype)
    if name not in _NP_CODES:
        raise TypeError("omniconn: dtype %s has no omc equivalent" % (dtype,))
    return _NP_CODES[name]


class Buffer:
    """The bytes of one get: a zero-copy view into the connector's memory.

    The bytes are reached through `.view` (a memoryview), `.numpy()`, `.as_tensor()`, `.tensor`,
    or directly with memoryview(buf) / numpy.frombuffer(buf) / torch.frombuffer(buf) on Python 3.12
    and later (on 3.11 pass `buf.view`). None of them copies. release() (or leaving a `with`
    block, or garbage collection) hands the bytes back; release() refuses while views made from
    this buffer are still alive, like memoryview.release(). After release every accessor raises.
    Views kept past the buffer's collection keep the bytes alive until they go (the region goes
    with the last of the buffer and its array; its own __del__ hands the bytes back)."""
    __slots__ = ("_arr", "_reg", "_h", "_ro", "_core", "_pid", "_addr", "_size", "flags", "_released", "__weakref__")

    def __init__(self, handle, address, size, flags, readonly=True, core=None):
        # The buffer holds the handle itself until a view needs a _Region (most gets are released
        # without one): no region to make and tear down per call. _h, _core and _pid are the
        # region's handle, core and pid while there is none.
        self._h = handle
        self._core = core
        self._pid = _pid
        self._ro = readonly
        self._reg = None
        self._arr = None                    # the exporting array, made on first use
        self._addr = address
        self._size = size
        self.flags = flags
        self._released = False
        if not size:                        # nothing to view: give the handle back now
            r = self._give_back()
            self._arr = _np.zeros(0, _np.uint8) if _np is not None else (ctypes.c_ubyte * 0)()
            if r:
                check(r, "release")

    @property
    def _region(self):
        """The region owning the handle from the first view on (made then; None once released)."""
        reg = self._reg
        if reg is None and not self._released:
            with _region_lock:          # two threads making the first views: one region, one owner
                reg = self._reg
                if reg is None and (self._h or self._core is not None):
                    reg = _Region(self._h, self._addr, self._size, self._ro, self._core)
                    reg.pid = self._pid         # the process that got the handle, not this one
                    self._h = self._core = None
                    self._reg = reg
        return reg

    def _give_back(self):
        """Release the handle the buffer still holds itself (no region was made). At most once."""
        h, core = self._h, self._core
        self._h = self._core = None
        if core is None:
            return _ffi_release(h) if h and self._pid == _pid else 0
        try:
            return _ffi_release(h) if h and self._pid == _pid else 0
        finally:
            core.buffer_gone()

    def __del__(self):
        if self._h is None and self._core is None:       # released, or a region holds it
            return
        try:
            self._give_back()
        except Exception:
            pass

    # -- state
    def _live(self):
        if self._released:
            raise ValueError("omniconn: buffer used after release")
        arr = self._arr
        if arr is None:
            arr = self._arr = _expose(self._region, self._addr, self._size)
        return arr

    @property
    def released(self):
        return self._released

    @property
    def size(self):
        return self._size

    def __len__(self):
        return self._size

    @property
    def is_frame(self):
        return bool(self.flags & _lib.OMC_BUFFER_FRAME)

    # -- views (zero-copy)
    @property
    def view(self):
        """A memoryview of the bytes (no copy)."""
        return memoryview(self._live()).cast("B")

    def __buffer__(self, flags):            # Python 3.12+: memoryview(buf), numpy.frombuffer(buf)
        return memoryview(self._live()).cast("B")

    def __release_buffer__(self, view):
        view.release()

    def numpy(self, dtype="uint8", shape=None, offset=0):
        if _np is None:
            raise ImportError("omniconn: numpy is not installed")
        a = self._live()
        dt = _np.dtype(dtype)
        count = -1 if shape is None else int(_np.prod(shape)) if len(shape) else 1
        out = _np.frombuffer(a, dtype=dt, count=count, offset=offset)
        return out if shape is None else out.reshape(shape)

    def as_tensor(self, dtype=None, shape=None, offset=0):
        """A torch tensor over the bytes (no copy). dtype: torch or numpy dtype (default uint8)."""
        import torch
        import warnings
        a = self._live()
        if dtype is None:
            dtype = torch.uint8
        elif not isinstance(dtype, torch.dtype):
            dtype = getattr(torch, _np.dtype(dtype).name if _np is not None else str(dtype))
        item = torch.empty(0, dtype=dtype).element_size()
        count = -1 if shape is None else 1
        for d in (shape or ()):
            count *= int(d)
        if self._size - offset == 0 or count == 0:
            t = torch.empty(0 if shape is None else shape, dtype=dtype)
            return t
        with warnings.catch_warnings():     # read-only views: torch warns that it cannot protect them
            warnings.simplefilter("ignore")
            t = torch.frombuffer(a, dtype=dtype, count=count if count >= 0 else (self._size - offset) // item,
                                 offset=offset)
        return t if shape is None else t.reshape(shape)

    @property
    def tensor(self):
        """The payload as a uint8 torch tensor (no copy)."""
        return self.as_tensor()

    def to_bytes(self):
        """A copy of the bytes, valid after release."""
        return bytes(memoryview(self._live()).cast("B"))

    # -- lifetime
    def _exported(self):
        # our own references: self._arr and the getrefcount argument
        return self._arr is not None and sys.getrefcount(self._arr) > 2

    def release(self, strict=True):
        """Hand the bytes back. Idempotent. While views made from this buffer are alive, raises
        BufferError (strict) or (strict=False, as on leaving a `with` block) lets the last view
        give the bytes back when it goes; either way this object refuses use afterwards."""
        if self._released:
            return
        if self._arr is not None and _getrefcount(self._arr) > 2:     # _exported(), inlined
            if not strict:
                self._released = True
                self._arr = self._reg = None
                return
            raise BufferError("omniconn: buffer still has %d view(s) alive; drop them before release()"
                              % (sys.getrefcount(self._arr) - 2))
        region = self._reg
        self._released = True
        if region is not None:
            self._arr = self._reg = None
            r = region.release()
        elif self._core is None:        # a get's buffer, never viewed: _give_back() inlined (the hot path)
            h = self._h
            self._h = None
            r = _ffi_release(h) if h and self._pid == _pid else 0
        else:
            r = self._give_back()
        if r:
            check(r, "release")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release(strict=False)

    def __repr__(self):
        return "<omniconn.Buffer %s bytes%s%s>" % (self._size, " frame" if self.is_frame else "",
                                                  " released" if self._released else "")


class WritableBuffer(Buffer):
    """A pool buffer from alloc(): fill it through .view / .numpy() / .as_tensor(), then hand it
    to put_buffer() (zero copies). Released unused if dropped."""
    __slots__ = ("_conn",)

    def _take(self):
        """Detach the C handle for a put (the views must be gone: the connector owns the bytes next)."""
        if self._released:
            raise ValueError("omniconn: buffer used after release")
        if self._exported():
            raise BufferError("omniconn: drop the views of an alloc()ed buffer before putting it")
        return self._region


_MISS_NOT_FOUND, _MISS_TIMEOUT = _lib.OMC_ERR_NOT_FOUND, _lib.OMC_ERR_TIMEOUT
_SLICE_NS = 100 * 1000 * 1000    # longest single wait of a call the library cannot wake at close


# ---- frames (named tensors) -------------------------------------------------------------------------
def _segments(items):
    """Flatten {name: array | tensor | bytes-like} into the FFI's arrays."""
    n = len(items)
    if n == 0:
        raise ValueError("omniconn: a frame needs at least one segment")
    names = (ctypes.c_char_p * n)()
    dtypes = (ctypes.c_int32 * n)()
    ndims = (ctypes.c_uint32 * n)()
    shapes = (ctypes.c_int64 * (n * 8))()
    sizes = (ctypes.c_uint64 * n)()
    datas = (ctypes.c_void_p * n)()
    keep = []
    t = _torch()
    for i, (name, value) in enumerate(items.items()):
        bname = _b(name)
        keep.append(bname)
        names[i] = bname
        is_tensor = (t is not None and isinstance(value, t.Tensor)) or \
                    (_np is not None and isinstance(value, _np.ndarray))
        if is_tensor:
            shape = tuple(value.shape)
            if len(shape) > 8:
                raise ValueError("omniconn: %r has %d dimensions (at most 8)" % (name, len(shape)))
            dtypes[i] = dtype_code(value.dtype)
            ndims[i] = len(shape)
            for d, v in enumerate(shape):
                shapes[i * 8 + d] = v
        addr, size, k = _address(value)
        keep.append(k)
        sizes[i] = size
        datas[i] = addr
    return n, names, dtypes, ndims, shapes, sizes, datas, keep


class _SegState:
    __slots__ = ("out", "refs")

    def __init__(self):
        self.out = (ctypes.create_string_buffer(256), ctypes.c_int32(), ctypes.c_int32(), ctypes.c_uint32(),
                    (ctypes.c_int64 * 8)(), ctypes.c_uint64(), ctypes.c_uint64())
        o = self.out
        self.refs = (ctypes.byref(o[1]), ctypes.byref(o[2]), ctypes.byref(o[3]), o[4], ctypes.byref(o[5]),
                     ctypes.byref(o[6]))


def first_segment(buffer):
    """(name, kind, omc dtype, shape, offset, size) of a frame buffer's first segment (one call)."""
    st = getattr(_tls, "seg", None)
    if st is None:
        st = _tls.seg = _SegState()
    name, kind, dt, nd, shape, off, size = st.out
    if buffer.released:
        raise ValueError("omniconn: buffer used after release")
    check(lib.omc_ffi_frame_segment(buffer._addr, buffer.size, 0, name, 256, *st.refs), "frame segment")
    return (name.value.decode(), kind.value, dt.value, tuple(shape[d] for d in range(nd.value)), off.value,
            size.value)


def frame_segments(buffer):
    """Every segment of a frame buffer: [(name, kind, omc dtype, shape, offset, size), ...]."""
    st = getattr(_tls, "seg", None)
    if st is None:
        st = _tls.seg = _SegState()
    name, kind, dt, nd, shape, off, size = st.out
    if buffer.released:
        raise ValueError("omniconn: buffer used after release")
    count = ctypes.c_uint32()
    addr, n = buffer._addr, buffer.size
    check(lib.omc_ffi_frame_count(addr, n, 0, ctypes.byref(count)), "frame decode")
    out = []
    seg = lib.omc_ffi_frame_segment
    refs = st.refs
    for i in range(count.value):
        check(seg(addr, n, i, name, 256, *refs), "frame segment")
        out.append((name.value.decode(), kind.value, dt.value, tuple(shape[d] for d in range(nd.value)), off.value,
                    size.value))
    return out


class Frame:
    """The segments of a frame get: {name: view}. Views are numpy arrays by default (torch tensors
    with as_torch=True), all zero-copy into one Buffer. release() / `with` / collection as Buffer."""

    def __init__(self, buffer, as_torch=False, verify=False):
        self.buffer = buffer
        self.segments = {}
        self.info = {}
        base = buffer.view
        address = buffer._addr
        count = ctypes.c_uint32()
        check(lib.omc_ffi_frame_count(address, buffer.size, 1 if verify else 0, ctypes.byref(count)), "frame decode")
        name = ctypes.create_string_buffer(256)
        kind, dt, nd = ctypes.c_int32(), ctypes.c_int32(), ctypes.c_uint32()
        shape = (ctypes.c_int64 * 8)()
        off, size = ctypes.c_uint64(), ctypes.c_uint64()
        for i in range(count.value):
            check(lib.omc_ffi_frame_segment(address, buffer.size, i, name, 256, ctypes.byref(kind), ctypes.byref(dt),
                                            ctypes.byref(nd), shape, ctypes.byref(off), ctypes.byref(size)),
                  "frame segment")
            key = name.value.decode()
            shp = tuple(shape[d] for d in range(nd.value))
            self.info[key] = (kind.value, dt.value, shp)
            if kind.value == _lib.OMC_SEGMENT_TENSOR:
                if as_torch:
                    import torch
                    self.segments[key] = buffer.as_tensor(getattr(torch, _TORCH_NAMES[dt.value]), shp, off.value)
                else:
                    self.segments[key] = buffer.numpy(_DTYPES_NP[dt.value], shp, off.value)
            else:
                self.segments[key] = base[off.value:off.value + size.value]
        del base

    def __getitem__(self, k):
        return self.segments[k]

    def __iter__(self):
        return iter(self.segments)

    def __len__(self):
        return len(self.segments)

    def keys(self):
        return self.segments.keys()

    def items(self):
        return self.segments.items()

    def release(self, strict=True):
        """As Buffer.release: views taken out of the frame must be gone (or strict=False)."""
        self.segments.clear()
        self.buffer.release(strict)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release(strict=False)


# ---- connectors ---------------------------------------------------------------------------------------
ROLES = {None: 0, "default": 0, "dual": 3, "sender": 1, "receiver": 2, 0: 0, 1: 1, 2: 2, 3: 3}
TRANSPORTS = {0: "none", 1: "local", 2: "shm", 3: "tcp", 4: "rdma"}


class _Core:
    """The C handle of one connector and what still needs it. Calls in flight and buffers from
    alloc() hold it: close() refuses new calls at once, wakes calls waiting in the library, waits
    for the calls in flight to return, and destroys the C connector only then - or, while
    buffers from alloc() are still held, when the last of them is released or put (their bytes
    are in the connector's pool). A forked child's copy never destroys anything: the creator
    owns the segments, sockets and threads; the child's copy goes with the child's exit.

    The calls in flight are the entries of a list: append and pop are atomic, so the hot path
    takes no lock. A call appends, then looks at closed; close() sets closed, then looks at the
    list: one of the two always sees the other."""
    __slots__ = ("h", "calls", "lock", "idle", "allocs", "closers", "closed", "creator", "__weakref__")

    def __init__(self, h):
        self.h = h
        self.calls = []         # one entry per call inside the library now
        self.allocs = 0         # buffers from alloc() not yet released or put
        self.closers = 0        # close() calls under way (they destroy, once nothing holds the handle)
        self.closed = False
        self.creator = _pid
        self._locks()
        _cores.add(self)

    def _locks(self):
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)

    def closed_error(self):
        if self.creator != _pid:
            return _lib.ClosedError(_lib.OMC_ERR_CLOSED, "connector created in pid %d; create a new connector in "
                                    "this process (pid %d)" % (self.creator, _pid), log="")
        return _lib.ClosedError(_lib.OMC_ERR_CLOSED, "connector", log="the connector was closed")

    def enter(self):
        """The handle, counted as in use until leave(); ClosedError once close() began."""
        if self.closed:
            raise self.closed_error()
        self.calls.append(None)
        if self.closed:
            self.leave()
            raise self.closed_error()
        return self.h

    def leave(self):
        self.calls.pop()
        if self.closed:
            self.left_closed()

    def left_closed(self):
        """A call left a closed connector: wake close(), or destroy if it was the last holder."""
        with self.lock:
            self.idle.notify_all()
            h = self._destroyable()
        if h:
            lib.omc_conn_destroy(h)

    def alloc_taken(self):
        with self.lock:
            self.allocs += 1

    def buffer_gone(self):
        with self.lock:
            self.allocs -= 1
            h = self._destroyable()
        if h:
            lib.omc_conn_destroy(h)

    def _destroyable(self):
        """The handle to destroy now (and forget), or None. Called with the lock held."""
        if not self.closed or self.calls or self.allocs or self.closers or not self.h or self.creator != _pid:
            return None
        h, self.h = self.h, None
        return h

    def close(self):
        with self.lock:
            first, self.closed = not self.closed, True
            h = self.h
            if not h or self.creator != _pid:
                return
            self.closers += 1           # nobody destroys the handle under this close()
            wake = first and (self.calls or self.allocs)
        try:
            if wake:
                # calls waiting in the library (a get for a key, a relay's wait) return
                # OMC_ERR_CLOSED; the connector stops now even when buffers from alloc() keep its
                # memory for a while
                lib.omc_conn_close(h)
        finally:
            with self.lock:
                while self.calls:
                    self.idle.wait()
                self.closers -= 1
                h = self._destroyable()
        if h:
            lib.omc_conn_destroy(h)


_cores = weakref.WeakSet()      # every connector's core, for the fork handler


def _after_fork_in_child():
    """os.fork(): the child's copies of connectors refuse calls (the creator owns them) and never
    destroy; their locks may have been held by parent threads that do not exist here."""
    global _pid, _region_lock
    _pid = os.getpid()
    _region_lock = threading.Lock()     # a parent thread may have held it
    Connector._create_lock = threading.Lock()
    for core in list(_cores):
        core._locks()
        core.calls = []
        core.closers = 0
        core.closed = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Connector:
    """One omniconn connector (use LocalConnector, ShmConnector, TcpConnector, RdmaConnector).
    Thread-safe like the C connector; close() may come from any thread, while others are inside
    calls (they end with ClosedError). close() is idempotent; `with` closes it. A child made
    with os.fork() cannot use the parent's connectors (ClosedError): it creates its own."""

    _create_lock = threading.Lock()

    def __init__(self, create, *args):
        self._core = None
        h = ctypes.c_void_p()
        with Connector._create_lock:
            _lib.sync_log_level()
            r = create(*args, ctypes.byref(h))
        if r != 0:
            raise error(r, "%s create" % type(self).__name__)
        self._core = _Core(h.value)

    # -- plumbing
    def _c(self):
        """The handle while open (for a call that needs no protection from a concurrent close)."""
        core = self._core
        if core is None or core.closed:
            raise _lib.ClosedError(_lib.OMC_ERR_CLOSED, "connector", log="") if core is None else core.closed_error()
        return core.h

    @property
    def _h(self):
        core = self._core
        return None if core is None or core.closed else core.h

    def _call(self, fn, *args):
        """fn(handle, *args) with the connector held open for the call."""
        core = self._core
        if core is None:
            self._c()
        h = core.enter()
        try:
            return fn(h, *args)
        finally:
            core.leave()

    def _keyed(self, fn, from_stage, to_stage, key):
        """fn(handle, from, to, key) held open for the call: _call() for the short keyed calls,
        with the stage names looked up and core.enter() / leave() inlined (the hot path)."""
        f = _stage_get(from_stage) if type(from_stage) is str else None
        if f is None:
            f = _stage(from_stage)
        t = _stage_get(to_stage) if type(to_stage) is str else None
        if t is None:
            t = _stage(to_stage)
        k = key.encode() if type(key) is str and "\0" not in key else _b(key)
        core = self._core
        if core is None:
            self._c()
        calls = core.calls
        calls.append(None)
        h = core.h
        try:
            if core.closed:
                raise core.closed_error()
            return fn(h, f, t, k)
        finally:
            calls.pop()
            if core.closed:
                core.left_closed()

    def _fail(self, core, r, what):
        """The error of a failed call: ClosedError when close() came while it was inside."""
        if core.closed and r in (_lib.OMC_ERR_CLOSED, _MISS_TIMEOUT, _MISS_NOT_FOUND):
            return _lib.ClosedError(_lib.OMC_ERR_CLOSED, "%s: the connector was closed meanwhile" % what, log="")
        return error(r, what)

    @property
    def transport(self):
        return TRANSPORTS.get(self._call(lib.omc_conn_transport), "none")

    # -- put
    def put(self, from_stage, to_stage, key, data, readers=1, ttl_ms=0, frame=False):
        """Copy data (bytes, bytearray, memoryview, numpy array, CPU torch tensor) into the
        connector's memory - the only copy - and return the metadata (bytes) for the receiver."""
        # stage names looked up (_stage), the key's _b() inlined for a str without NUL: the hot path
        f = _stage_get(from_stage) if type(from_stage) is str else None
        if f is None:
            f = _stage(from_stage)
        t = _stage_get(to_stage) if type(to_stage) is str else None
        if t is None:
            t = _stage(to_stage)
        k = key.encode() if type(key) is str and "\0" not in key else _b(key)
        if type(readers) is not int or readers < 0 or readers > _U32:
            readers = _u32(readers, "readers")
        if type(ttl_ms) is not int or ttl_ms > _I64 or ttl_ms < -_I64:
            ttl_ms = _i64(ttl_ms, "ttl_ms")
        addr, size, keep = _address(data)
        try:
            st = _tls.st
        except AttributeError:
            st = _state()
        core = self._core
        calls = core.calls
        calls.append(None)              # core.enter() inlined: the hot path
        h = core.h
        try:
            if core.closed:
                raise core.closed_error()
            r = _ffi_put(h, f, t, k, addr, size, 1 if frame else 0, readers, ttl_ms, st.meta, _META_CAP, st.msize_ref)
        finally:
            calls.pop()
            if core.closed:
                core.left_closed()
        del keep
        if r != 0:
            raise self._fail(core, r, "put %r" % (key,))
        return st.meta_mv[:st.msize.value].tobytes()

    def alloc(self, size, timeout=None):
        """A pool buffer of size bytes to fill in place and pass to put_buffer (zero copies).
        It keeps the connector's memory: after close() it stays usable until released."""
        size = _u64(size, "size")
        h, data = ctypes.c_void_p(), ctypes.c_void_p()
        dl = deadline(timeout)
        core = self._core
        ch = core.enter()
        try:
            while True:     # a long wait for pool space in slices, so that close() is not kept waiting
                step = dl if dl == _NO_WAIT else min(dl, time.monotonic_ns() + _SLICE_NS)
                r = lib.omc_ffi_alloc(ch, size, step, ctypes.byref(h), ctypes.byref(data))
                if r != _MISS_TIMEOUT or step == dl or core.closed:
                    break
            if r == 0:
                core.alloc_taken()
        finally:
            core.leave()
        if r != 0:
            raise self._fail(core, r, "alloc %d bytes" % size)
        return WritableBuffer(h.value, data.value, size, 0, readonly=False, core=core)

    def put_buffer(self, from_stage, to_stage, key, buffer, readers=1, ttl_ms=0, frame=False):
        """Put a buffer from alloc(): the connector takes it over (buffer is released here)."""
        f, t, k = _b(from_stage), _b(to_stage), _b(key)
        readers, ttl_ms = _u32(readers, "readers"), _i64(ttl_ms, "ttl_ms")
        region = buffer._take()
        buf, msize = _meta_buf()
        r = self._call(lib.omc_ffi_put_buffer, f, t, k, region.handle, 1 if frame else 0, readers, ttl_ms, buf,
                       _META_CAP, ctypes.byref(msize))
        if r != 0:
            raise self._fail(self._core, r, "put %r" % (key,))
        region.consumed()               # the C side freed the handle with the put
        buffer._released = True
        buffer._arr = buffer._reg = None
        return ctypes.string_at(buf, msize.value)

    def put_tensors(self, from_stage, to_stage, key, tensors, readers=1, ttl_ms=0):
        """Put {name: numpy array | CPU tensor | bytes-like} as one frame (one copy, into the pool)."""
        n, names, dtypes, ndims, shapes, sizes, datas, keep = _segments(tensors)
        total = ctypes.c_uint64()
        check(lib.omc_ffi_frame_size(n, names, dtypes, ndims, shapes, sizes, ctypes.byref(total)), "frame size")
        try:
            wb = self.alloc(total.value, timeout=None)
        except _lib.UnavailableError:
            wb = None
        out = ctypes.c_uint64()
        if wb is None:                  # a connector without its own pool: build, then copy in
            tmp = ctypes.create_string_buffer(total.value)
            check(lib.omc_ffi_frame_build(tmp, total.value, n, names, dtypes, ndims, shapes, sizes, datas,
                                          ctypes.byref(out)), "frame build")
            return self.put(from_stage, to_stage, key, memoryview(tmp).cast("B")[:out.value], readers, ttl_ms, True)
        addr = wb._addr
        r = lib.omc_ffi_frame_build(addr, total.value, n, names, dtypes, ndims, shapes, sizes, datas, ctypes.byref(out))
        del keep
        if r != 0:
            wb.release()
            raise error(r, "frame build")
        try:
            return self.put_buffer(from_stage, to_stage, key, wb, readers, ttl_ms, True)
        except BaseException:
            if not wb.released:
                wb.release()
            raise

    def put_tensor(self, from_stage, to_stage, key, name, value, readers=1, ttl_ms=0):
        """Put one array, tensor or bytes-like as a one-segment frame named name (one copy, into
        the pool): the receiver gets its dtype and shape with it (first_segment, get_tensors)."""
        # stage names looked up (_stage), the key's _b() inlined for a str without NUL: the hot path
        f = _stage_get(from_stage) if type(from_stage) is str else None
        if f is None:
            f = _stage(from_stage)
        t = _stage_get(to_stage) if type(to_stage) is str else None
        if t is None:
            t = _stage(to_stage)
        k = key.encode() if type(key) is str and "\0" not in key else _b(key)
        nm = _b(name)
        if type(readers) is not int or readers < 0 or readers > _U32:
            readers = _u32(readers, "readers")
        if type(ttl_ms) is not int or ttl_ms > _I64 or ttl_ms < -_I64:
            ttl_ms = _i64(ttl_ms, "ttl_ms")
        try:
            st = _tls.st
        except AttributeError:
            st = _state()
        shape = st.shape
        nd = 0
        code = 0
        if type(value) is _ndarray:
            is_tensor = True
        else:
            tm = _torch()
            is_tensor = (tm is not None and isinstance(value, tm.Tensor)) or \
                        (_np is not None and isinstance(value, _np.ndarray))
        if is_tensor:
            dims = tuple(value.shape)
            nd = len(dims)
            if nd > 8:
                raise ValueError("omniconn: %r has %d dimensions (at most 8)" % (name, nd))
            shape[:nd] = dims
            dt = value.dtype
            code = _DTYPE_CACHE.get(dt) or dtype_code(dt)
        addr, size, keep = _address(value)
        core = self._core
        calls = core.calls
        calls.append(None)              # core.enter() inlined: the hot path
        h = core.h
        try:
            if core.closed:
                raise core.closed_error()
            r = _ffi_put_tensor(h, f, t, k, nm, code, nd, shape, addr, size, readers, ttl_ms, st.meta, _META_CAP,
                                st.msize_ref)
        finally:
            calls.pop()
            if core.closed:
                core.left_closed()
        del keep
        if r != 0:
            raise self._fail(core, r, "put %r" % (key,))
        return st.meta_mv[:st.msize.value].tobytes()

    # -- get
    def get(self, from_stage, to_stage, key, meta=None, timeout=None, sender=None):
        """A zero-copy Buffer with the payload. meta: the bytes put() returned, or None (wait for
        the key to appear). timeout in seconds (None = forever, 0 = only if it is there now).
        sender: a remote connector's registered sender to ask (metadata-less gets only)."""
        # stage names looked up (_stage), the key's _b() inlined for a str without NUL: the hot path
        f = _stage_get(from_stage) if type(from_stage) is str else None
        if f is None:
            f = _stage(from_stage)
        t = _stage_get(to_stage) if type(to_stage) is str else None
        if t is None:
            t = _stage(to_stage)
        k = key.encode() if type(key) is str and "\0" not in key else _b(key)
        try:
            st = _tls.st
        except AttributeError:
            st = _state()
        rh, rd, rs, rf = st.refs
        dl = _FOREVER if timeout is None else deadline(timeout)
        core = self._core
        calls = core.calls
        calls.append(None)              # core.enter() inlined: the hot path
        h = core.h
        try:
            if core.closed:
                raise core.closed_error()
            if sender is not None:
                r = lib.omc_ffi_get_from(h, _b(sender), f, t, k, dl, rh, rd, rs, rf)
            else:
                r = _ffi_get(h, f, t, k, meta, len(meta) if meta else 0, dl, rh, rd, rs, rf)
        finally:
            calls.pop()
            if core.closed:
                core.left_closed()
        if r != 0:
            raise self._fail(core, r, "get %r" % (key,))
        return Buffer(st.h.value, st.data.value, st.size.value, st.flags.value)

    def get_batch(self, from_stage, to_stage, items, timeout=None):
        """[Buffer or None] for items, each a key or (key, meta) with meta the bytes put() returned
        (or None: a metadata-less get), in one call with one deadline. The remote connector
        overlaps the gets whose metadata names the same sender (requests pipelined on its data
        connections). A key that is not there (NOT_FOUND, or TIMEOUT at the deadline) is None;
        any other failure releases every Buffer of the batch and raises. Release each Buffer (or
        use `with`)."""
        n = len(items)
        keys, metas = [], []
        for it in items:
            key, meta = (it, None) if isinstance(it, (str, bytes)) else it
            keys.append(_b(key))
            metas.append(bytes(meta) if meta else b"")
        ks = (ctypes.c_char_p * max(n, 1))(*keys)
        ms = (ctypes.c_char_p * max(n, 1))(*metas)      # kept alive until the call returns
        sz = (ctypes.c_size_t * max(n, 1))(*[len(m) for m in metas])
        hs, ds = (ctypes.c_void_p * max(n, 1))(), (ctypes.c_void_p * max(n, 1))()
        ss, fs, rs = (ctypes.c_uint64 * max(n, 1))(), (ctypes.c_uint32 * max(n, 1))(), (ctypes.c_int32 * max(n, 1))()
        r = self._call(lib.omc_ffi_get_batch, _stage(from_stage), _stage(to_stage), n, ks, ms, sz,
                       _FOREVER if timeout is None else deadline(timeout), hs, ds, ss, fs, rs)
        return _batch_buffers(n, keys, r, hs, ds, ss, fs, rs, lambda code, what: self._fail(self._core, code, what))

    def get_first(self, from_stage, to_stage, key, meta=None, timeout=None, sender=None, miss=False):
        """get() and, for a frame, its first segment, in one call into the library: (Buffer,
        (name, kind, omc dtype, shape, offset, size) or None if the payload is not a frame).
        A frame that does not decode raises (the buffer is released). miss=True: a key that is
        not there (NOT_FOUND, or TIMEOUT at the deadline) returns None instead of raising."""
        # stage names looked up (_stage), the key's _b() inlined for a str without NUL: the hot path
        f = _stage_get(from_stage) if type(from_stage) is str else None
        if f is None:
            f = _stage(from_stage)
        t = _stage_get(to_stage) if type(to_stage) is str else None
        if t is None:
            t = _stage(to_stage)
        k = key.encode() if type(key) is str and "\0" not in key else _b(key)
        sn = None if sender is None else _b(sender)
        try:
            st = _tls.st
        except AttributeError:
            st = _state()
        dl = _FOREVER if timeout is None else deadline(timeout)
        g = st.got
        core = self._core
        calls = core.calls
        calls.append(None)              # core.enter() inlined: the hot path
        h = core.h
        try:
            if core.closed:
                raise core.closed_error()
            r = _ffi_get_first(h, sn, f, t, k, meta, len(meta) if meta else 0, dl, g, _GOT_N, st.name, _NAME_CAP)
        finally:
            calls.pop()
            if core.closed:
                core.left_closed()
        if r != 0:
            if core.closed:
                raise self._fail(core, r, "get %r" % (key,))
            if miss and (r == _MISS_NOT_FOUND or r == _MISS_TIMEOUT):
                return None
            raise error(r, "get %r" % (key,))
        buf = Buffer(g[0], g[1], g[2], g[3])
        seg = g[4]
        if seg == 1:
            return buf, None
        if seg:
            buf.release(strict=False)
            raise error(ctypes.c_int64(seg).value, "frame segment")
        nd = g[7]
        return buf, (st.name.value.decode(), g[5], g[6], tuple(g[_GOT_SHAPE:_GOT_SHAPE + nd]), g[8], g[9])

    def get_tensors(self, from_stage, to_stage, key, meta=None, timeout=None, as_torch=False, sender=None):
        """Get a frame put with put_tensors: a Frame of zero-copy views, released with it."""
        b = self.get(from_stage, to_stage, key, meta, timeout, sender)
        try:
            return Frame(b, as_torch)
        except BaseException:
            b.release()
            raise

    def get_copy(self, from_stage, to_stage, key, meta=None, timeout=None, out=None, max_size=None):
        """Copy the payload out: into out (a writable buffer; returns the byte count) or, without
        out, into new bytes (returned)."""
        if out is None:
            with self.get(from_stage, to_stage, key, meta, timeout) as b:
                return b.to_bytes()
        f, t, k = _b(from_stage), _b(to_stage), _b(key)
        addr, size, keep = _address_w(out)
        n = ctypes.c_uint64()
        r = self._call(lib.omc_conn_get_copy, f, t, k, meta, len(meta) if meta else 0, deadline(timeout), addr, size,
                       ctypes.byref(n))
        del keep
        if r != 0:
            e = self._fail(self._core, r, "get_copy %r" % (key,))
            e.needed = n.value
            raise e
        return n.value

    # -- the rest of the contract
    def cleanup(self, from_stage, to_stage, key):
        """Drop a put nobody will read. Returns False if the key was not there."""
        r = self._keyed(_conn_cleanup, from_stage, to_stage, key)
        if r == _lib.OMC_ERR_NOT_FOUND:
            return False
        check(r, "cleanup %r" % (key,))
        return True

    def exists(self, from_stage, to_stage, key):
        """Is the key live on this connector (put and not fully consumed)? Never blocks."""
        r = self._keyed(_conn_exists, from_stage, to_stage, key)
        if r == _lib.OMC_ERR_NOT_FOUND:
            return False
        check(r, "exists %r" % (key,))
        return True

    def list(self, from_stage=None, to_stage=None):
        """The live keys as (from_stage, to_stage, key) tuples."""
        found = []

        def visit(f, t, k, user):
            found.append((f.decode(), t.decode(), k.decode()))
            return 0
        cb = _lib.KEY_FN(visit)
        check(self._call(lib.omc_conn_list, _b(from_stage), _b(to_stage), cb, None, None), "list")
        return found

    def health(self):
        """A dict of the connector's counters (puts, gets, live_entries, pool_in_use, ...)."""
        fields = _lib.HEALTH_FIELDS
        vals = (ctypes.c_uint64 * len(fields))()
        text = ctypes.create_string_buffer(160)
        check(self._call(lib.omc_ffi_health, vals, len(fields), text, 160), "health")
        h = {f: vals[i] for i, f in enumerate(fields)}
        h["last_error"] = ctypes.c_int64(h["last_error"]).value
        h["state"] = ("healthy", "degraded", "closed")[h["state"]] if h["state"] < 3 else str(h["state"])
        h["transport"] = TRANSPORTS.get(h["transport"], "none")
        h["role"] = {0: "dual", 1: "sender", 2: "receiver", 3: "dual"}.get(h["role"], "dual")
        h["last_error_name"] = _lib.result_name(h["last_error"])
        h["last_error_text"] = text.value.decode("utf-8", "replace")
        return h

    def sweep(self):
        """Reclaim puts whose TTL passed now; returns how many."""
        return self._call(lib.omc_conn_sweep)

    def wait_consumed(self, timeout=None):
        """Wait until every put of this connector was consumed (or expired). Returns True if so,
        False if the timeout passed first."""
        r = self._call(lib.omc_conn_wait_consumed, deadline(timeout))
        if r == _lib.OMC_ERR_TIMEOUT and not self._core.closed:
            return False
        if r != 0:
            raise self._fail(self._core, r, "wait_consumed")
        return True

    def close(self):
        """Stop and free the connector. Idempotent, from any thread: calls in flight in other
        threads end (with ClosedError where they were waiting) before the library frees it.
        Buffers still held stay valid until released. In a forked child it only forgets the
        parent's connector (the parent's segments and entries stay)."""
        core = self._core
        if core is not None:
            core.close()

    @property
    def closed(self):
        core = self._core
        return core is None or core.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _address_w(out):
    if _np is not None and isinstance(out, _np.ndarray):
        if not out.flags["C_CONTIGUOUS"] or not out.flags["WRITEABLE"]:
            raise ValueError("omniconn: get_copy needs a writable contiguous array")
        return out.ctypes.data, out.nbytes, out
    t = _torch()
    if t is not None and isinstance(out, t.Tensor):
        return _address(out)
    mv = memoryview(out).cast("B")
    if mv.readonly:
        raise ValueError("omniconn: get_copy needs a writable buffer")
    arr = (ctypes.c_ubyte * mv.nbytes).from_buffer(mv)
    return ctypes.addressof(arr), mv.nbytes, (arr, mv)


def _ttl(ttl_ms):
    return 0 if ttl_ms is None else _i64(ttl_ms, "ttl_ms")


def _role(role):
    try:
        return ROLES[role]
    except (KeyError, TypeError):
        raise ValueError("omniconn: role %r is not one of sender, receiver, dual" % (role,)) from None


class LocalConnector(Connector):
    """Stages in one process (buffers handed over by reference)."""

    def __init__(self, role="dual", pool_size=0, ttl_ms=None):
        super().__init__(lib.omc_ffi_local_create, _role(role), _u64(pool_size, "pool_size"), _ttl(ttl_ms))


class ShmConnector(Connector):
    """Processes on one host, through a shared-memory segment per sender.
    shm_dir: the tmpfs directory of the segments (default $OMNICONN_SHM_DIR, else /dev/shm).
    inline_threshold: payloads below it travel inside the metadata (0 = default, -1 = never)."""

    def __init__(self, role="dual", channel=None, shm_dir=None, pool_size=0, ttl_ms=None,
                 inline_threshold=0, max_entries=0):
        if shm_dir is None:     # the environment's default (the same on every side), else /dev/shm
            shm_dir = os.environ.get("OMNICONN_SHM_DIR") or None
        super().__init__(lib.omc_ffi_shm_create, _role(role), _b(channel), _b(shm_dir), _u64(pool_size, "pool_size"),
                         _ttl(ttl_ms), _i64(inline_threshold, "inline_threshold"), _u32(max_entries, "max_entries"))


class TcpConnector(Connector):
    """Processes on any hosts: a ZMQ side channel and a TCP data plane (the sender listens on
    host:port, receivers pull). port 0 = ephemeral (see .endpoint)."""
    _rdma = 0

    def __init__(self, role="dual", host=None, port=0, data_port=0, bind_host=None, pool_size=0, ttl_ms=None,
                 secret_key=None, public_key=None, server_key=None, rdma_devices=None, allowed_clients=None):
        """CURVE: secret_key (a sender's turns CURVE on; a receiver's is its own identity),
        server_key (a receiver: the senders' public key), allowed_clients (a sender: the receiver
        public keys let in - a list, or one string with one key a line; None = anyone with our
        public key)."""
        if allowed_clients is not None and not isinstance(allowed_clients, (str, bytes)):
            allowed_clients = "\n".join(str(k) for k in allowed_clients)
        super().__init__(lib.omc_ffi_tcp_create_ex, _role(role), _b(host), _b(bind_host), _port(port, "port", True),
                         _port(data_port, "data_port", True), _u64(pool_size, "pool_size"), _ttl(ttl_ms),
                         _b(secret_key), _b(public_key), _b(server_key), _b(allowed_clients or None), self._rdma,
                         _b(rdma_devices))

    @property
    def endpoint(self):
        """(host, port, data_port) a sender listens on."""
        host = ctypes.create_string_buffer(256)
        port, dport = ctypes.c_uint16(), ctypes.c_uint16()
        check(self._call(lib.omc_tcp_endpoint, host, 256, ctypes.byref(port), ctypes.byref(dport)), "endpoint")
        return host.value.decode(), port.value, dport.value

    def add_sender(self, name, host, port, server_key=None):
        """Receiver: register a sender for metadata-less gets."""
        name, host, port = _b(name), _b(host), _port(port)
        if server_key:
            check(self._call(lib.omc_tcp_add_sender_key, name, host, port, _b(server_key)), "add_sender")
        else:
            check(self._call(lib.omc_tcp_add_sender, name, host, port), "add_sender")

    def query(self, from_stage, to_stage, key, timeout=0, sender=None):
        """Does a sender (or any registered one) have the key now? Its size, or None. Consumes nothing."""
        size = ctypes.c_uint64()
        r = self._call(lib.omc_ffi_tcp_query, _b(sender), _b(from_stage), _b(to_stage), _b(key), deadline(timeout),
                       ctypes.byref(size))
        if r in (_lib.OMC_ERR_NOT_FOUND, _lib.OMC_ERR_TIMEOUT) and not self._core.closed:
            return None
        check(r, "query %r" % (key,))
        return size.value

    def remove_sender(self, name):
        r = self._call(lib.omc_tcp_remove_sender, _b(name))
        if r == _lib.OMC_ERR_NOT_FOUND:
            return False
        check(r, "remove_sender")
        return True


class RdmaConnector(TcpConnector):
    """The remote connector with the RDMA data plane (the payload is RDMA-written into the
    receiver's memory). require=True: fail with UNAVAILABLE when RDMA cannot start here; the
    default falls back to TCP and .rdma_status says why."""

    def __init__(self, *args, require=True, **kw):
        self._rdma = 2 if require else 1
        super().__init__(*args, **kw)

    @property
    def rdma_status(self):
        enabled = ctypes.c_int()
        why = ctypes.create_string_buffer(256)
        check(self._call(lib.omc_ffi_rdma_status, ctypes.byref(enabled), why, 256), "rdma status")
        return bool(enabled.value), why.value.decode()

    @property
    def rdma_counters(self):
        """The RDMA plane's counters: rdma_channels and tcp_fallbacks (receiver: channels that
        connected over RDMA / fell back to TCP, last_fallback says why), accepted,
        accept_failures, pushes, push_failures, push_bytes, sender_connections (sender)."""
        fields = _lib.RDMA_COUNTER_FIELDS
        vals = (ctypes.c_uint64 * len(fields))()
        why = ctypes.create_string_buffer(256)
        check(self._call(lib.omc_ffi_rdma_counters, vals, len(fields), why, 256), "rdma counters")
        out = {f: vals[i] for i, f in enumerate(fields)}
        out["last_fallback"] = why.value.decode("utf-8", "replace")
        return out


# ---- module helpers ------------------------------------------------------------------------------------
def version():
    return lib.omc_version_string().decode()


def available(feature):
    """(usable, why) for "local", "shm", "zmq", "rdma" or "cuda" on this machine."""
    code = {"local": 0, "shm": 1, "zmq": 2, "tcp": 2, "rdma": 3, "cuda": 4}[feature]
    why = ctypes.create_string_buffer(256)
    r = lib.omc_available(code, why, 256)
    return r == 0, why.value.decode()


def meta_to_text(meta):
    """The printable form of metadata ("omc1." + base64url), for text-only control planes."""
    n = lib.omc_meta_text_size(len(meta))
    out = ctypes.create_string_buffer(n)
    check(lib.omc_meta_to_text(meta, len(meta), out, n), "meta_to_text")
    return out.value.decode()


def meta_from_text(text):
    """Metadata bytes from meta_to_text's form (validated)."""
    import base64
    t = text.strip()
    if not t.startswith("omc1."):
        raise OmniconnError(_lib.OMC_ERR_INVALID_ARG, "meta_from_text", log="metadata text must start with omc1.")
    body = t[5:]
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))


def curve_keypair():
    pub, sec = ctypes.create_string_buffer(41), ctypes.create_string_buffer(41)
    check(lib.omc_tcp_curve_keypair(pub, sec), "curve_keypair")
    return pub.value.decode(), sec.value.decode()


def read_key(path):
    out = ctypes.create_string_buffer(41)
    check(lib.omc_tcp_read_key(_b(path), out), "read_key %s" % path)
    return out.value.decode()


def detect_host():
    out = ctypes.create_string_buffer(256)
    check(lib.omc_detect_host(0, out, 256, None), "detect_host")
    return out.value.decode()
