"""The store connector's C signatures (omniconn_store.h), on the library _lib.py loaded."""
import ctypes

from ._lib import lib, library_path

c_int, c_int32, c_uint32, c_int64, c_uint64 = ctypes.c_int, ctypes.c_int32, ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64
c_void_p, c_char_p = ctypes.c_void_p, ctypes.c_char_p
P = ctypes.POINTER

# omc_store_priority and OMC_STORE_READERS_CACHE (omniconn_store.h)
PRIORITIES = {"default": 0, "peek": 1, "prefetch": 2, "get": 3, "put": 4}
READERS_CACHE = 0xFFFFFFFF

_SIGS = {
    "omc_store_create_url": (c_int, [c_char_p, c_int, c_uint64, c_int64, c_uint32, P(c_void_p)]),
    "omc_store_exists_batch": (c_int, [c_void_p, c_char_p, c_char_p, P(c_char_p), c_uint32, P(c_int), c_int64]),
    "omc_store_get_batch_flat": (c_int, [c_void_p, c_char_p, c_char_p, P(c_char_p), c_uint32, c_int, c_int, c_int64,
                                         P(c_void_p), P(c_void_p), P(c_uint64), P(c_uint32), P(c_int32)]),
    "omc_store_dir_create_flat": (c_int, [c_void_p, c_void_p, c_char_p, P(c_void_p)]),
    "omc_store_dir_destroy": (None, [c_void_p]),
    "omc_store_dir_put_flat": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, c_void_p, c_uint64, c_uint32, c_uint32,
                                       c_int64]),
    "omc_store_dir_get_flat": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, c_int64, P(c_void_p), P(c_void_p),
                                       P(c_uint64), P(c_uint32)]),
}

missing = [n for n in _SIGS if not hasattr(lib, n)]
if missing:
    raise ImportError("omniconn: %s lacks the store connector (%s); rebuild it with `make lib`"
                      % (library_path, ", ".join(missing)))
for _name, (_res, _args) in _SIGS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args
