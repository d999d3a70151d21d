"""Mooncake's TransferEngine on omniconn's transfer engine.

    from omniconn.mooncake import TransferEngine      # instead of: from mooncake.engine import TransferEngine
    engine = TransferEngine()
    engine.initialize("10.0.0.5", "P2PHANDSHAKE", "rdma", "")    # or "tcp": runs everywhere
    session = "10.0.0.5:%d" % engine.get_rpc_port()              # what peers name this engine
    engine.register_memory(pool_ptr, pool_size)
    engine.batch_transfer_sync_write(peer_session, src_ptrs, dst_ptrs, lengths)   # 0 or a negative code

The method names, argument order and return conventions are Mooncake's Python binding's (0 for
success, a negative number for failure; batch ids as ints, 0 for a failed submit), as
vLLM-Omni's MooncakeTransferEngineConnector and vLLM's Mooncake connector call them. The negative
numbers are omniconn's result codes (omniconn.CONSTANTS; -103 a remote address outside what the
peer registered, -83 a peer that restarted, -80 a connection that failed, -4 a timeout).
Peers are found as Mooncake's P2PHANDSHAKE mode finds them: "host:port" is the peer's RPC
listener, which answers with its registered ranges. A metadata server (etcd, Redis, HTTP) is not
supported: initialize() returns a negative code and logs why. See docs/rdma.md, "From Python".
"""
import ctypes
import enum
import logging
import mmap
import os
import threading

from . import _engine_lib as _e
from ._lib import lib, result_name

logger = logging.getLogger("omniconn.mooncake")

__all__ = ["TransferEngine", "TransferOpcode"]

_ERR_INVALID_ARG, _ERR_CLOSED, _ERR_RDMA_ACCESS, _ERR_TIMEOUT = -1, -5, -103, -4


class TransferOpcode(enum.IntEnum):
    READ = 0
    WRITE = 1


def _timeout_ms():
    try:
        return int(float(os.environ.get("MC_TRANSFER_TIMEOUT", "30")) * 1000)
    except ValueError:
        return 30000


class TransferEngine:
    """One engine per process (or per GPU), as Mooncake's. Thread-safe."""

    def __init__(self):
        self._x = None
        self._host = None
        self._peers = {}            # "host:port" -> peer handle
        self._managed = {}          # address -> (mmap, length)
        self._batches = {}          # batch id -> (batch handle, kept-alive entry array)
        self._next_batch = 1
        self._mu = threading.RLock()

    # ---- set-up -------------------------------------------------------------------------------
    def initialize(self, local_hostname, metadata_server, protocol, device_name):
        """Start the engine: its RPC listener on local_hostname ("ip", or "ip:port" for a fixed
        port). metadata_server must be "P2PHANDSHAKE". protocol "rdma" or "tcp". Returns 0 or a
        negative code."""
        return self.initialize_ext(local_hostname, metadata_server, protocol, device_name, "p2p")

    def initialize_ext(self, local_hostname, metadata_server, protocol, device_name, metadata_type):
        if self._x is not None:
            logger.error("initialize: this TransferEngine is already initialized")
            return _ERR_INVALID_ARG
        if str(metadata_server).upper() != "P2PHANDSHAKE" or str(metadata_type).lower() not in ("p2p", "p2phandshake", ""):
            logger.error("initialize: metadata server %r (%s) is not supported; use \"P2PHANDSHAKE\" (peers are named "
                         "host:port, the RPC port answers the descriptor exchange)", metadata_server, metadata_type)
            return _ERR_INVALID_ARG
        proto = str(protocol).lower()
        transport = {"rdma": _e.OMC_XFER_TRANSPORT_RDMA, "tcp": _e.OMC_XFER_TRANSPORT_TCP}.get(proto)
        if transport is None:
            logger.error("initialize: protocol %r is not supported (\"rdma\" or \"tcp\")", protocol)
            return _ERR_INVALID_ARG
        host, port = str(local_hostname), 0
        if host.count(":") == 1:
            host, p = host.split(":")
            port = int(p)
        elif host.startswith("[") and "]:" in host:
            host, p = host[1:].split("]:")
            port = int(p)
        x = ctypes.c_void_p()
        r = lib.omc_xfer_start(host.encode(), port, transport, (device_name or "").encode(), ctypes.byref(x))
        if r != 0:
            logger.error("initialize(%s, %s): %s", local_hostname, protocol, result_name(r))
            return r
        self._x, self._host = x, host
        return 0

    def get_rpc_port(self):
        return int(lib.omc_xfer_port(self._x)) if self._x else 0

    def get_local_hostname(self):
        """This engine's session name, "host:port" (what peers pass as target_hostname)."""
        return lib.omc_xfer_name(self._x).decode() if self._x else ""

    # ---- memory -------------------------------------------------------------------------------
    def register_memory(self, buffer_addr, capacity):
        if not self._x:
            return _ERR_CLOSED
        r = lib.omc_xfer_register(self._x, int(buffer_addr), int(capacity), 0)
        if r != 0:
            logger.error("register_memory(0x%x, %d): %s", int(buffer_addr), int(capacity), result_name(r))
        return r

    def unregister_memory(self, buffer_addr):
        if not self._x:
            return _ERR_CLOSED
        r = lib.omc_xfer_unregister(self._x, int(buffer_addr))
        if r != 0:
            logger.error("unregister_memory(0x%x): %s", int(buffer_addr), result_name(r))
        return r

    def batch_register_memory(self, buffer_addresses, capacities):
        if len(buffer_addresses) != len(capacities):
            return _ERR_INVALID_ARG
        done = []
        for a, n in zip(buffer_addresses, capacities):
            r = self.register_memory(a, n)
            if r != 0:
                for b in done:
                    self.unregister_memory(b)
                return r
            done.append(a)
        return 0

    def batch_unregister_memory(self, buffer_addresses):
        worst = 0
        for a in buffer_addresses:
            r = self.unregister_memory(a)
            worst = r if r != 0 else worst
        return worst

    def allocate_managed_buffer(self, length):
        """Page-aligned memory of `length` bytes, registered with the engine. Returns its address
        (0 on failure); give it back with free_managed_buffer."""
        if not self._x or int(length) <= 0:
            return 0
        m = mmap.mmap(-1, int(length), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        if self.register_memory(addr, int(length)) != 0:
            m.close()
            return 0
        with self._mu:
            self._managed[addr] = (m, int(length))
        return addr

    def free_managed_buffer(self, buffer_addr, length):
        with self._mu:
            item = self._managed.get(int(buffer_addr))
        if item is None or item[1] != int(length):
            return _ERR_INVALID_ARG
        r = self.unregister_memory(buffer_addr)
        if r != 0:
            return r
        with self._mu:
            self._managed.pop(int(buffer_addr), None)
        item[0].close()     # the exported ctypes view is gone by now (a fresh one per call)
        return 0

    def write_bytes_to_buffer(self, dest_address, src_ptr, length):
        data = bytes(src_ptr)[:int(length)]
        ctypes.memmove(int(dest_address), data, len(data))
        return 0

    def read_bytes_from_buffer(self, source_address, length):
        return ctypes.string_at(int(source_address), int(length))

    def get_first_buffer_address(self, segment_name):
        """The first range the peer `segment_name` ("host:port") registered (0 if none)."""
        p = self._peer(segment_name)
        if p is None or lib.omc_xfer_peer_refresh(p, lib.omc_deadline_after_ms(_timeout_ms())) != 0:
            return 0
        d = _e.Descriptor()
        if lib.omc_xfer_peer_descriptor(p, ctypes.byref(d)) != 0 or d.count == 0:
            return 0
        return int(d.range[0].addr)

    # ---- transfers ----------------------------------------------------------------------------
    def transfer_sync_write(self, target_hostname, buffer, peer_buffer_address, length):
        return self.batch_transfer_sync(target_hostname, [buffer], [peer_buffer_address], [length], TransferOpcode.WRITE)

    def transfer_sync_read(self, target_hostname, buffer, peer_buffer_address, length):
        return self.batch_transfer_sync(target_hostname, [buffer], [peer_buffer_address], [length], TransferOpcode.READ)

    def transfer_sync(self, target_hostname, buffer, peer_buffer_address, length, opcode, notify=None):
        return self.batch_transfer_sync(target_hostname, [buffer], [peer_buffer_address], [length], opcode, notify)

    def batch_transfer_sync_write(self, target_hostname, buffers, peer_buffer_addresses, lengths):
        return self.batch_transfer_sync(target_hostname, buffers, peer_buffer_addresses, lengths, TransferOpcode.WRITE)

    def batch_transfer_sync_read(self, target_hostname, buffers, peer_buffer_addresses, lengths):
        return self.batch_transfer_sync(target_hostname, buffers, peer_buffer_addresses, lengths, TransferOpcode.READ)

    def batch_transfer_sync(self, target_hostname, buffers, peer_buffer_addresses, lengths, opcode, notify=None):
        """One batch, one completion: 0 when every entry (and the notification, if any) arrived."""
        b = self._submit(target_hostname, buffers, peer_buffer_addresses, lengths, opcode, notify)
        if isinstance(b, int):
            return b
        handle, _keep = b
        r = lib.omc_xfer_batch_wait(handle, lib.omc_deadline_after_ms(_timeout_ms()))
        if r == _ERR_TIMEOUT:
            lib.omc_xfer_batch_cancel(handle)
        lib.omc_xfer_batch_destroy(handle)
        if r != 0:
            logger.error("batch transfer to %s (%d entries): %s", target_hostname, len(lengths), result_name(r))
        return r

    def batch_transfer_async_write(self, target_hostname, buffers, peer_buffer_addresses, lengths):
        return self.batch_transfer_async(target_hostname, buffers, peer_buffer_addresses, lengths, TransferOpcode.WRITE)

    def batch_transfer_async_read(self, target_hostname, buffers, peer_buffer_addresses, lengths):
        return self.batch_transfer_async(target_hostname, buffers, peer_buffer_addresses, lengths, TransferOpcode.READ)

    def batch_transfer_async(self, target_hostname, buffers, peer_buffer_addresses, lengths, opcode):
        """Submit a batch; returns its id (> 0), or 0 if it could not be submitted."""
        b = self._submit(target_hostname, buffers, peer_buffer_addresses, lengths, opcode, None)
        if isinstance(b, int):
            return 0
        with self._mu:
            bid = self._next_batch
            self._next_batch += 1
            self._batches[bid] = b
        return bid

    def get_batch_transfer_status(self, batch_ids):
        """Wait for every batch in batch_ids (MC_TRANSFER_TIMEOUT, default 30 s, each) and
        release them: 0 if all succeeded, -1 otherwise (an unknown id counts as a failure)."""
        ok = True
        for bid in list(batch_ids):
            with self._mu:
                b = self._batches.pop(int(bid), None)
            if b is None:
                ok = False
                continue
            r = lib.omc_xfer_batch_wait(b[0], lib.omc_deadline_after_ms(_timeout_ms()))
            if r == _ERR_TIMEOUT:
                lib.omc_xfer_batch_cancel(b[0])
            lib.omc_xfer_batch_destroy(b[0])
            if r != 0:
                logger.error("batch %d: %s", bid, result_name(r))
                ok = False
        return 0 if ok else -1

    def transfer_submit_write(self, target_hostname, buffer, peer_buffer_address, length):
        """Submit one write; returns a batch id (> 0) or a negative code."""
        b = self._submit(target_hostname, [buffer], [peer_buffer_address], [length], TransferOpcode.WRITE, None)
        if isinstance(b, int):
            return b if b < 0 else _ERR_INVALID_ARG
        with self._mu:
            bid = self._next_batch
            self._next_batch += 1
            self._batches[bid] = b
        return bid

    def transfer_check_status(self, batch_id):
        """1 done, 0 still running, -1 failed, -2 timed out (the batch is released once it ended)."""
        with self._mu:
            b = self._batches.get(int(batch_id))
        if b is None:
            return -1
        r = lib.omc_xfer_batch_test(b[0])
        if r == _e.OMC_ERR_BUSY:
            return 0
        with self._mu:
            self._batches.pop(int(batch_id), None)
        lib.omc_xfer_batch_destroy(b[0])
        return 1 if r == 0 else (-2 if r == _ERR_TIMEOUT else -1)

    # ---- notifications (omniconn extension: a batch's `notify` arrives after its data) --------
    def send_notify(self, target_hostname, message):
        p = self._peer(target_hostname)
        if p is None:
            return -80
        data = bytes(message)
        return lib.omc_xfer_notify(p, data, len(data), lib.omc_deadline_after_ms(_timeout_ms()))

    def get_notifies(self):
        """Notifications received since the last call: a list of (peer name, bytes)."""
        out = []
        arr = (_e.Notif * 16)()
        while self._x:
            n = lib.omc_xfer_notifs(self._x, arr, 16)
            if n <= 0:
                break
            out.extend((arr[i].peer.decode(), bytes(arr[i].data[:arr[i].length])) for i in range(n))
        return out

    # ---- the end -------------------------------------------------------------------------------
    def close(self):
        with self._mu:
            batches, self._batches = list(self._batches.values()), {}
            peers, self._peers = list(self._peers.values()), {}
            managed, self._managed = list(self._managed.items()), {}
            x, self._x = self._x, None
        for b in batches:
            lib.omc_xfer_batch_destroy(b[0])
        for p in peers:
            lib.omc_xfer_peer_close(p)
        if x:
            lib.omc_xfer_destroy(x)
        for _addr, (m, _n) in managed:
            m.close()

    def __del__(self):
        try:
            self.close()
        except Exception:   # interpreter shutdown: the library may be gone
            pass

    # ---- inside -------------------------------------------------------------------------------
    def _peer(self, name):
        with self._mu:
            p = self._peers.get(name)
            if p is not None or not self._x:
                return p
            h = ctypes.c_void_p()
            r = lib.omc_xfer_peer_open(self._x, str(name).encode(), lib.omc_deadline_after_ms(_timeout_ms()), ctypes.byref(h))
            if r != 0:
                logger.error("peer %s: %s", name, result_name(r))
                return None
            self._peers[name] = h
            return h

    def _forget(self, name):
        with self._mu:
            p = self._peers.pop(name, None)
        if p is not None:
            lib.omc_xfer_peer_close(p)

    def _submit(self, target, buffers, peers, lengths, opcode, notify):
        """A running batch (handle, entries) or a negative code. A remote range the cached
        descriptor does not know (the peer registered more since) fetches it again, once; a
        peer that restarted is opened again for the next call, never retried silently."""
        if not self._x:
            return _ERR_CLOSED
        try:
            arr, n = _e.entries(buffers, peers, lengths)
        except (ValueError, TypeError) as exc:
            logger.error("batch transfer to %s: %s", target, exc)
            return _ERR_INVALID_ARG
        op = _e.OMC_XFER_READ if int(opcode) == TransferOpcode.READ else _e.OMC_XFER_WRITE
        data = bytes(notify) if notify is not None else None
        for attempt in (0, 1):
            p = self._peer(target)
            if p is None:
                return -80
            h = ctypes.c_void_p()
            r = lib.omc_xfer_submit(p, op, arr, n, data, len(data) if data else 0,
                                    lib.omc_deadline_after_ms(_timeout_ms()), ctypes.byref(h))
            if r == 0:
                return h, arr
            if r == _ERR_RDMA_ACCESS and attempt == 0:
                lib.omc_xfer_peer_refresh(p, lib.omc_deadline_after_ms(_timeout_ms()))
                continue
            if r == -83:
                self._forget(target)
            logger.error("batch transfer to %s (%d entries) refused: %s", target, n, result_name(r))
            return r
        return _ERR_RDMA_ACCESS

