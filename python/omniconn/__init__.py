"""omniconn for Python: move stage payloads between processes and hosts.

    import omniconn
    with omniconn.ShmConnector() as conn:                   # or LocalConnector, TcpConnector, RdmaConnector
        meta = conn.put("thinker", "talker", "req-1", numpy_array)   # one copy, into shared memory
        with conn.get("thinker", "talker", "req-1", meta) as buf:     # zero-copy view
            x = buf.numpy("float32")

See docs/python.md. The library is found through $OMNICONN_LIBRARY, next to this package,
the source tree's build/ directory, or the system's library path.
"""
from ._lib import (OmniconnError, TimeoutError_ as OmniconnTimeout, NotFoundError, ClosedError, UnavailableError,
                   library_path, sync_log_level, CONSTANTS, HEALTH_FIELDS)
from ._core import (Buffer, WritableBuffer, Frame, Connector, LocalConnector, ShmConnector, TcpConnector,
                    RdmaConnector, version, available, meta_to_text, meta_from_text, curve_keypair, read_key,
                    detect_host, deadline, dtype_code)

__all__ = ["OmniconnError", "OmniconnTimeout", "NotFoundError", "ClosedError", "UnavailableError", "Buffer",
           "WritableBuffer", "Frame", "Connector", "LocalConnector", "ShmConnector", "TcpConnector",
           "RdmaConnector", "version", "available", "meta_to_text", "meta_from_text", "curve_keypair",
           "read_key", "detect_host", "deadline", "dtype_code", "library_path", "sync_log_level",
           "CONSTANTS", "HEALTH_FIELDS"]
__version__ = version()
