"""Loading libomniconn, the C signatures, result codes, errors and logging.

Everything the Python side knows about the C side's numbers is in this file (the constants
below); tests/python/test_layout.py checks each of them against the C compiler.
"""
import atexit
import ctypes
import ctypes.util
import logging
import os
import threading

logger = logging.getLogger("omniconn")

# ---- constants (checked against the headers by tests/python/test_layout.py) ---------------------
CONSTANTS = {
    "OMC_OK": 0,
    "OMC_ERR_INVALID_ARG": -1,
    "OMC_ERR_UNAVAILABLE": -3,
    "OMC_ERR_TIMEOUT": -4,
    "OMC_ERR_CLOSED": -5,
    "OMC_ERR_NOT_FOUND": -6,
    "OMC_ERR_EXISTS": -7,
    "OMC_ERR_TOO_LARGE": -9,
    "OMC_ERR_RDMA_DEVICE": -100,
    "OMC_ROLE_DEFAULT": 0, "OMC_ROLE_SENDER": 1, "OMC_ROLE_RECEIVER": 2, "OMC_ROLE_DUAL": 3,
    "OMC_TRANSPORT_NONE": 0, "OMC_TRANSPORT_LOCAL": 1, "OMC_TRANSPORT_SHM": 2,
    "OMC_TRANSPORT_TCP": 3, "OMC_TRANSPORT_RDMA": 4,
    "OMC_FEATURE_LOCAL": 0, "OMC_FEATURE_SHM": 1, "OMC_FEATURE_ZMQ": 2, "OMC_FEATURE_RDMA": 3,
    "OMC_FEATURE_CUDA": 4,
    "OMC_DTYPE_U8": 1, "OMC_DTYPE_I8": 2, "OMC_DTYPE_U16": 3, "OMC_DTYPE_I16": 4,
    "OMC_DTYPE_U32": 5, "OMC_DTYPE_I32": 6, "OMC_DTYPE_U64": 7, "OMC_DTYPE_I64": 8,
    "OMC_DTYPE_F16": 9, "OMC_DTYPE_BF16": 10, "OMC_DTYPE_F32": 11, "OMC_DTYPE_F64": 12,
    "OMC_DTYPE_BOOL": 13,
    "OMC_SEGMENT_BYTES": 0, "OMC_SEGMENT_TENSOR": 1,
    "OMC_PAYLOAD_FRAME": 1, "OMC_BUFFER_FRAME": 1, "OMC_BUFFER_READONLY": 2,
    "OMC_MAX_DIMS": 8, "OMC_KEY_MAX": 256, "OMC_FRAME_MAX_NAME": 255,
    "OMC_META_MAX_SIZE": 40 + 256 + (1 << 20) + 4096,
    "OMC_TCP_HOST_MAX": 256, "OMC_CURVE_KEY_LEN": 40,
    "OMC_LOG_ERROR": 1, "OMC_LOG_WARN": 2, "OMC_LOG_INFO": 3, "OMC_LOG_DEBUG": 4,
}
globals().update(CONSTANTS)
OMC_ERR_TIMEOUT, OMC_ERR_NOT_FOUND = CONSTANTS["OMC_ERR_TIMEOUT"], CONSTANTS["OMC_ERR_NOT_FOUND"]
OMC_ERR_CLOSED, OMC_ERR_UNAVAILABLE = CONSTANTS["OMC_ERR_CLOSED"], CONSTANTS["OMC_ERR_UNAVAILABLE"]
OMC_ERR_RDMA_DEVICE = -100      # an RDMA connector on a host without a usable device: UnavailableError

# The C types behind the ctypes types used in the signatures below (sizes checked too).
C_TYPES = {
    "omc_result": ctypes.sizeof(ctypes.c_int),
    "omc_role": ctypes.sizeof(ctypes.c_int),
    "omc_feature": ctypes.sizeof(ctypes.c_int),
    "omc_transport": ctypes.sizeof(ctypes.c_int),
    "omc_time_ns": ctypes.sizeof(ctypes.c_int64),
    "size_t": ctypes.sizeof(ctypes.c_size_t),
    "void*": ctypes.sizeof(ctypes.c_void_p),
    "uint16_t": ctypes.sizeof(ctypes.c_uint16),
}
# names of the values omc_ffi_health fills, in order (the library reports its own list too)
HEALTH_FIELDS = ("state", "transport", "role", "puts", "gets", "releases", "bytes_put", "bytes_got",
                 "errors", "timeouts", "ttl_reclaims", "live_entries", "pool_capacity", "pool_in_use",
                 "last_error")
# what omc_ffi_get_first fills, in its order (test_layout.py checks it against the library)
GET_FIRST_FIELDS = ("handle", "data", "size", "flags", "segment", "kind", "dtype", "ndim", "offset", "segment_size",
                    "shape0", "shape1", "shape2", "shape3", "shape4", "shape5", "shape6", "shape7")
# what omc_ffi_rdma_counters fills, in its order (test_layout.py checks it against the library)
RDMA_COUNTER_FIELDS = ("rdma_channels", "tcp_fallbacks", "accepted", "accept_failures", "pushes", "push_failures",
                       "push_bytes", "sender_connections")

_here = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    env = os.environ.get("OMNICONN_LIBRARY")
    if env:
        yield env
        return
    for name in ("libomniconn.so", "libomniconn.so.0"):
        yield os.path.join(_here, name)
    try:    # written by `make install`: where the library went, relative to this package
        from ._install import LIBDIR_FROM_PACKAGE
        yield os.path.normpath(os.path.join(_here, LIBDIR_FROM_PACKAGE, "libomniconn.so.0"))
    except ImportError:
        pass
    yield os.path.join(os.path.dirname(os.path.dirname(_here)), "build", "libomniconn.so")
    found = ctypes.util.find_library("omniconn")
    if found:
        yield found
    yield "libomniconn.so.0"


def _load():
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path + " (absent)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError("omniconn: libomniconn.so not found; build it with `make lib` or set "
                      "OMNICONN_LIBRARY to its path. Tried: " + "; ".join(tried))


lib, library_path = _load()

c_int, c_int32, c_uint32, c_int64, c_uint64 = ctypes.c_int, ctypes.c_int32, ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64
c_size_t, c_void_p, c_char_p = ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p
P = ctypes.POINTER
LOG_FN = ctypes.CFUNCTYPE(None, c_int, c_int, c_char_p)
KEY_FN = ctypes.CFUNCTYPE(c_int, c_char_p, c_char_p, c_char_p, c_void_p)

_SIGS = {
    "omc_result_name": (c_char_p, [c_int]),
    "omc_result_str": (c_char_p, [c_int]),
    "omc_version_string": (c_char_p, []),
    "omc_has": (c_int, [c_int]),
    "omc_available": (c_int, [c_int, c_char_p, c_size_t]),
    "omc_now_ns": (c_int64, []),
    "omc_ffi_abi": (c_uint32, []),
    "omc_ffi_set_log": (None, [LOG_FN, c_int]),
    "omc_ffi_log_level": (c_int, []),
    "omc_ffi_last_log": (c_size_t, [c_char_p, c_size_t]),
    "omc_ffi_clear_log": (None, []),
    "omc_ffi_local_create": (c_int, [c_int, c_uint64, c_int64, P(c_void_p)]),
    "omc_ffi_shm_create": (c_int, [c_int, c_char_p, c_char_p, c_uint64, c_int64, c_int64, c_uint32, P(c_void_p)]),
    "omc_ffi_tcp_create": (c_int, [c_int, c_char_p, c_char_p, c_uint32, c_uint32, c_uint64, c_int64,
                                   c_char_p, c_char_p, c_char_p, c_int, c_char_p, P(c_void_p)]),
    "omc_ffi_tcp_create_ex": (c_int, [c_int, c_char_p, c_char_p, c_uint32, c_uint32, c_uint64, c_int64,
                                      c_char_p, c_char_p, c_char_p, c_char_p, c_int, c_char_p, P(c_void_p)]),
    "omc_ffi_rdma_status": (c_int, [c_void_p, P(c_int), c_char_p, c_size_t]),
    "omc_ffi_rdma_counter_fields": (c_char_p, []),
    "omc_ffi_rdma_counters": (c_int, [c_void_p, P(c_uint64), c_uint32, c_char_p, c_size_t]),
    "omc_ffi_put": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, c_void_p, c_uint64, c_uint32, c_uint32,
                            c_int64, c_void_p, c_uint32, P(c_uint32)]),
    "omc_ffi_alloc": (c_int, [c_void_p, c_uint64, c_int64, P(c_void_p), P(c_void_p)]),
    "omc_ffi_put_buffer": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, c_void_p, c_uint32, c_uint32, c_int64,
                                   c_void_p, c_uint32, P(c_uint32)]),
    "omc_ffi_get": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, c_void_p, c_size_t, c_int64,
                            P(c_void_p), P(c_void_p), P(c_uint64), P(c_uint32)]),
    "omc_ffi_get_batch": (c_int, [c_void_p, c_char_p, c_char_p, c_uint32, c_void_p, c_void_p, c_void_p, c_int64,
                                  c_void_p, c_void_p, c_void_p, c_void_p, c_void_p]),
    "omc_ffi_get_from": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, c_char_p, c_int64,
                                 P(c_void_p), P(c_void_p), P(c_uint64), P(c_uint32)]),
    "omc_ffi_tcp_query": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, c_char_p, c_int64, P(c_uint64)]),
    "omc_ffi_buffer_release": (c_int, [c_void_p]),
    "omc_ffi_get_first_fields": (c_char_p, []),
    "omc_ffi_get_first": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, c_char_p, c_void_p, c_size_t, c_int64,
                                  P(c_uint64), c_uint32, c_char_p, c_size_t]),
    "omc_ffi_health_fields": (c_char_p, []),
    "omc_ffi_health": (c_int, [c_void_p, P(c_uint64), c_uint32, c_char_p, c_size_t]),
    "omc_ffi_frame_size": (c_int, [c_uint32, P(c_char_p), P(c_int32), P(c_uint32), P(c_int64), P(c_uint64),
                                   P(c_uint64)]),
    "omc_ffi_frame_build": (c_int, [c_void_p, c_uint64, c_uint32, P(c_char_p), P(c_int32), P(c_uint32),
                                    P(c_int64), P(c_uint64), P(c_void_p), P(c_uint64)]),
    "omc_ffi_put_tensor": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, c_char_p, c_int32, c_uint32, P(c_int64),
                                   c_void_p, c_uint64, c_uint32, c_int64, c_void_p, c_uint32, P(c_uint32)]),
    "omc_ffi_frame_count": (c_int, [c_void_p, c_uint64, c_int, P(c_uint32)]),
    "omc_ffi_frame_segment": (c_int, [c_void_p, c_uint64, c_uint32, c_char_p, c_size_t, P(c_int32), P(c_int32),
                                      P(c_uint32), P(c_int64), P(c_uint64), P(c_uint64)]),
    "omc_conn_get_copy": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, c_void_p, c_size_t, c_int64,
                                  c_void_p, c_uint64, P(c_uint64)]),
    "omc_conn_cleanup": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p]),
    "omc_conn_sweep": (c_uint64, [c_void_p]),
    "omc_conn_close": (None, [c_void_p]),
    "omc_conn_destroy": (None, [c_void_p]),
    "omc_conn_transport": (c_int, [c_void_p]),
    "omc_conn_exists": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p]),
    "omc_conn_list": (c_int, [c_void_p, c_char_p, c_char_p, KEY_FN, c_void_p, P(c_uint64)]),
    "omc_conn_wait_consumed": (c_int, [c_void_p, c_int64]),
    "omc_meta_text_size": (c_size_t, [c_size_t]),
    "omc_meta_to_text": (c_int, [c_void_p, c_size_t, c_char_p, c_size_t]),
    "omc_tcp_endpoint": (c_int, [c_void_p, c_char_p, c_size_t, P(ctypes.c_uint16), P(ctypes.c_uint16)]),
    "omc_tcp_add_sender": (c_int, [c_void_p, c_char_p, c_char_p, ctypes.c_uint16]),
    "omc_tcp_add_sender_key": (c_int, [c_void_p, c_char_p, c_char_p, ctypes.c_uint16, c_char_p]),
    "omc_tcp_remove_sender": (c_int, [c_void_p, c_char_p]),
    "omc_tcp_read_key": (c_int, [c_char_p, c_char_p]),
    "omc_tcp_curve_keypair": (c_int, [c_char_p, c_char_p]),
    "omc_detect_host": (c_int, [c_int, c_char_p, c_size_t, P(c_char_p)]),
}

missing = [_name for _name in _SIGS if not hasattr(lib, _name)]
if missing:     # a library older than this package: every call above is part of the contract
    raise ImportError("omniconn: %s lacks %s (a library older than this package); rebuild it with "
                      "`make lib` or point OMNICONN_LIBRARY at a current one" % (library_path, ", ".join(missing)))
for _name, (_res, _args) in _SIGS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args


# ---- errors -------------------------------------------------------------------------------------
_tls = threading.local()


def _last_log():
    buf = getattr(_tls, "logbuf", None)
    if buf is None:
        buf = _tls.logbuf = ctypes.create_string_buffer(512)
    lib.omc_ffi_last_log(buf, 512)
    return buf.value.decode("utf-8", "replace")


def result_name(code):
    return lib.omc_result_name(code).decode()


class OmniconnError(Exception):
    """A call failed. .code is the omc_result (negative), .name its name ("OMC_ERR_TIMEOUT"),
    .text its description, .log the last warning or error the library logged on this thread."""

    def __init__(self, code, what="", log=None):
        self.code = int(code)
        self.name = result_name(code)
        self.text = lib.omc_result_str(code).decode()
        self.log = _last_log() if log is None else log
        msg = "%s%s: %s" % (what + ": " if what else "", self.name, self.text)
        if self.log:
            msg += " (log: %s)" % self.log
        super().__init__(msg)


class TimeoutError_(OmniconnError, TimeoutError):
    """The deadline passed (OMC_ERR_TIMEOUT)."""


class NotFoundError(OmniconnError, KeyError):
    """No such key (OMC_ERR_NOT_FOUND)."""

    def __str__(self):
        return Exception.__str__(self)


class ClosedError(OmniconnError):
    """The connector is closed (OMC_ERR_CLOSED)."""


class UnavailableError(OmniconnError):
    """Not compiled in or not usable on this machine (OMC_ERR_UNAVAILABLE; also
    OMC_ERR_RDMA_DEVICE: no usable RDMA device). .code and .name keep the library's code."""


_ERROR_CLASSES = {OMC_ERR_TIMEOUT: TimeoutError_, OMC_ERR_NOT_FOUND: NotFoundError, OMC_ERR_CLOSED: ClosedError,
                  OMC_ERR_UNAVAILABLE: UnavailableError, OMC_ERR_RDMA_DEVICE: UnavailableError}


def error(code, what=""):
    return _ERROR_CLASSES.get(code, OmniconnError)(code, what)


def check(code, what=""):
    if code != 0:
        raise error(code, what)


# ---- logging: the library's log goes to the "omniconn" Python logger -----------------------------
_PY_LEVEL = {1: logging.ERROR, 2: logging.WARNING, 3: logging.INFO, 4: logging.DEBUG}


@LOG_FN
def _log_cb(level, item, message):
    try:
        logger.log(_PY_LEVEL.get(level, logging.WARNING), "%s", message.decode("utf-8", "replace"))
    except Exception:   # never let an exception cross into C
        pass


def _c_level():
    env = os.environ.get("OMNICONN_LOG", "").lower()
    if env:
        return {"off": 0, "error": 1, "warn": 2, "info": 3, "debug": 4}.get(env, 2)
    lvl = logger.getEffectiveLevel()
    if lvl <= logging.DEBUG:
        return 4
    if lvl <= logging.INFO:
        return 3
    if lvl <= logging.WARNING:
        return 2
    return 1


_log_lock = threading.Lock()
_log_state = [None]


def _log_lock_after_fork():
    global _log_lock
    _log_lock = threading.Lock()     # a parent thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_log_lock_after_fork)


def sync_log_level():
    """Apply the "omniconn" logger's level (or $OMNICONN_LOG) to connectors created from now on."""
    lvl = _c_level()
    with _log_lock:
        if _log_state[0] != lvl:
            lib.omc_ffi_set_log(_log_cb, lvl)
            _log_state[0] = lvl


sync_log_level()


@atexit.register
def _detach_logger():
    # threads of connectors still open at exit must not call into a finalizing interpreter
    lib.omc_ffi_set_log(LOG_FN(), _log_state[0] or 2)
