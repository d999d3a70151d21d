"""ctypes declarations of the transfer engine (omc_xfer_* in omniconn_rdma.h).

The library is the one omniconn._lib loaded; this file only adds the engine's signatures and the
two structs Python touches (an entry of a batch and a received notification), whose layouts are
fixed by the header: omc_xfer_entry is {void*, uint64, uint64}, omc_xfer_notif is
{char[OMC_XFER_NAME_MAX], uint32, uint8[OMC_XFER_NOTIFY_MAX]}.
"""
import ctypes

from ._lib import lib

OMC_XFER_TRANSPORT_DEFAULT, OMC_XFER_TRANSPORT_RDMA, OMC_XFER_TRANSPORT_TCP = 0, 1, 2
OMC_XFER_READ, OMC_XFER_WRITE = 1, 2
OMC_XFER_NAME_MAX = 80
OMC_XFER_NOTIFY_MAX = 4096
OMC_XFER_DESC_MAX = 24 + 63 + 256 * (24 + 16) + 4
OMC_ERR_BUSY = -11


class Entry(ctypes.Structure):
    _fields_ = [("local", ctypes.c_void_p), ("remote", ctypes.c_uint64), ("length", ctypes.c_uint64)]


class Notif(ctypes.Structure):
    _fields_ = [("peer", ctypes.c_char * OMC_XFER_NAME_MAX), ("length", ctypes.c_uint32),
                ("data", ctypes.c_uint8 * OMC_XFER_NOTIFY_MAX)]


class Range(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_uint64), ("length", ctypes.c_uint64), ("id", ctypes.c_uint32),
                ("rkey", ctypes.c_uint32 * 4)]


class Descriptor(ctypes.Structure):       # omc_xfer_descriptor
    _fields_ = [("incarnation", ctypes.c_uint64), ("host", ctypes.c_char * 64), ("port", ctypes.c_uint32),
                ("rails", ctypes.c_uint32), ("count", ctypes.c_uint32), ("range", Range * 256)]


_c = ctypes
_P = ctypes.POINTER
_vp = ctypes.c_void_p
_SIGS = {
    "omc_xfer_start": (_c.c_int, [_c.c_char_p, _c.c_uint32, _c.c_int, _c.c_char_p, _P(_vp)]),
    "omc_xfer_destroy": (None, [_vp]),
    "omc_xfer_port": (_c.c_uint32, [_vp]),
    "omc_xfer_name": (_c.c_char_p, [_vp]),
    "omc_xfer_register": (_c.c_int, [_vp, _vp, _c.c_uint64, _c.c_uint32]),
    "omc_xfer_unregister": (_c.c_int, [_vp, _vp]),
    "omc_xfer_export": (_c.c_int, [_vp, _vp, _c.c_size_t, _P(_c.c_size_t)]),
    "omc_xfer_peer_open": (_c.c_int, [_vp, _c.c_char_p, _c.c_int64, _P(_vp)]),
    "omc_xfer_peer_import": (_c.c_int, [_vp, _vp, _c.c_size_t, _P(_vp)]),
    "omc_xfer_peer_refresh": (_c.c_int, [_vp, _c.c_int64]),
    "omc_xfer_peer_close": (None, [_vp]),
    "omc_xfer_peer_descriptor": (_c.c_int, [_vp, _P(Descriptor)]),
    "omc_xfer_submit": (_c.c_int, [_vp, _c.c_int, _P(Entry), _c.c_uint32, _vp, _c.c_uint32, _c.c_int64, _P(_vp)]),
    "omc_xfer_batch_test": (_c.c_int, [_vp]),
    "omc_xfer_batch_wait": (_c.c_int, [_vp, _c.c_int64]),
    "omc_xfer_batch_status": (_c.c_int, [_vp, _P(_c.c_int), _c.c_uint32]),
    "omc_xfer_batch_cancel": (None, [_vp]),
    "omc_xfer_batch_destroy": (None, [_vp]),
    "omc_xfer_run": (_c.c_int, [_vp, _c.c_int, _P(Entry), _c.c_uint32, _vp, _c.c_uint32, _c.c_int64, _P(_c.c_int)]),
    "omc_xfer_notify": (_c.c_int, [_vp, _vp, _c.c_uint32, _c.c_int64]),
    "omc_xfer_notifs": (_c.c_int, [_vp, _P(Notif), _c.c_int]),
    "omc_deadline_after_ms": (_c.c_int64, [_c.c_int64]),
}

missing = [n for n in _SIGS if not hasattr(lib, n)]
if missing:
    raise ImportError("omniconn.mooncake: the library lacks %s (older than this package); rebuild it with `make lib`"
                      % ", ".join(missing))
for _name, (_res, _args) in _SIGS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args


def entries(local, remote, lengths):
    """An Entry array from three equal-length sequences of ints."""
    n = len(lengths)
    if len(local) != n or len(remote) != n:
        raise ValueError("buffers, peer addresses and lengths differ in length (%d, %d, %d)" % (len(local), len(remote), n))
    arr = (Entry * max(n, 1))()
    for i in range(n):
        arr[i].local = int(local[i])
        arr[i].remote = int(remote[i])
        arr[i].length = int(lengths[i])
    return arr, n
