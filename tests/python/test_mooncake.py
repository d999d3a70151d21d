"""omniconn.mooncake.TransferEngine driven as vLLM-Omni's MooncakeTransferEngineConnector drives
Mooncake's: both processes initialize(host, "P2PHANDSHAKE", protocol, device), read
get_rpc_port(), register a pool (a torch uint8 tensor) with register_memory(data_ptr, size); the
sender moves several (src, dst, len) triples into the receiver's pool with
batch_transfer_sync_write("host:rpc_port", ...) and checks the return is 0; at close both
unregister_memory(base). The connector's sender answers pulls from 4 threads at once; one case does
the same. The receiver is another process; its side is the child script below,
spoken to with JSON lines. Over TCP here (protocol "tcp"); OMC_MOONCAKE_PROTOCOL=rdma and
OMC_RDMA_IP run the same on the RDMA bed."""
import ctypes
import hashlib
import json
import os
import subprocess
import sys
import time

import pytest
import torch

from omniconn.mooncake import TransferEngine, TransferOpcode

PROTOCOL = os.environ.get("OMC_MOONCAKE_PROTOCOL", "tcp")
HOST = os.environ.get("OMC_RDMA_IP", "127.0.0.1") if PROTOCOL == "rdma" else "127.0.0.1"
DEVICE = os.environ.get("OMC_RDMA_DEVICE", "") if PROTOCOL == "rdma" else ""
POOL = 8 << 20
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RECEIVER = r'''
import hashlib, json, sys, torch
from omniconn.mooncake import TransferEngine
host, protocol, device, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
engine = TransferEngine()
ret = engine.initialize(host, "P2PHANDSHAKE", protocol, device)
if ret != 0:
    print(json.dumps({"ret": ret}), flush=True); sys.exit(1)
pool = torch.zeros(size, dtype=torch.uint8)
base = pool.data_ptr()
print(json.dumps({"ret": engine.register_memory(base, size), "port": engine.get_rpc_port(), "base": base}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["op"] == "sha":
        b = pool.numpy().tobytes()
        print(json.dumps({"sha": [hashlib.sha256(b[o:o + n]).hexdigest() for o, n in cmd["spans"]]}), flush=True)
    elif cmd["op"] == "fill":
        pool.copy_(torch.arange(size, dtype=torch.int64).remainder(251).to(torch.uint8))
        print(json.dumps({"ok": True}), flush=True)
    elif cmd["op"] == "notifies":
        print(json.dumps({"n": [[p, m.decode()] for p, m in engine.get_notifies()]}), flush=True)
    elif cmd["op"] == "close":
        print(json.dumps({"unregister": engine.unregister_memory(base)}), flush=True)
        break
'''


class Receiver:
    def __init__(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        self.proc = subprocess.Popen([sys.executable, "-c", RECEIVER, HOST, PROTOCOL, DEVICE, str(POOL)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        hello = self.read()
        assert hello["ret"] == 0, hello
        self.port, self.base = hello["port"], hello["base"]
        self.session = "%s:%d" % (HOST, self.port)

    def read(self):
        line = self.proc.stdout.readline()
        assert line, "receiver process ended"
        return json.loads(line)

    def call(self, **cmd):
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        self.proc.stdin.flush()
        return self.read()

    def close(self):
        r = self.call(op="close")
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0
        return r


def _sha(b):
    return hashlib.sha256(b).hexdigest()


@pytest.fixture
def sender():
    engine = TransferEngine()
    assert engine.initialize(HOST, "P2PHANDSHAKE", PROTOCOL, DEVICE) == 0
    assert engine.get_rpc_port() > 0
    pool = torch.empty(POOL, dtype=torch.uint8)
    pool.copy_(torch.randint(0, 256, (POOL,), dtype=torch.uint8))
    assert engine.register_memory(pool.data_ptr(), POOL) == 0
    yield engine, pool
    assert engine.unregister_memory(pool.data_ptr()) == 0
    engine.close()


def test_connector_sequence_batched_sync_write_into_the_receivers_pool(sender):
    engine, pool = sender
    rx = Receiver()
    base = pool.data_ptr()
    # the sender's put: segments at scattered offsets of its pool; the receiver's get names its
    # destinations (its pool base + offsets) and the sender writes them in one batch
    lengths = [4096, 65536, 1 << 20, 12345, 300000]
    src_off = [0, 1 << 20, 2 << 20, 5 << 20, 6 << 20]
    dst_off = [7 << 20, 3 << 20, 0, 6 << 20, 4 << 20]
    ret = engine.batch_transfer_sync_write(rx.session, [base + o for o in src_off], [rx.base + o for o in dst_off], lengths)
    assert ret == 0
    raw = pool.numpy().tobytes()
    got = rx.call(op="sha", spans=[[o, n] for o, n in zip(dst_off, lengths)])["sha"]
    assert got == [_sha(raw[o:o + n]) for o, n in zip(src_off, lengths)]
    # single-entry forms
    assert engine.transfer_sync_write(rx.session, base, rx.base + (5 << 20), 4096) == 0
    assert rx.call(op="sha", spans=[[5 << 20, 4096]])["sha"] == [_sha(raw[:4096])]
    assert rx.close() == {"unregister": 0}


def test_four_sender_threads_write_at_once_as_the_connectors_executor_does(sender):
    import concurrent.futures
    engine, pool = sender
    rx = Receiver()
    base = pool.data_ptr()
    jobs = [([base + (k << 20) + i * 65536 for i in range(8)], [rx.base + ((7 - k) << 20) + i * 65536 for i in range(8)],
             [65536] * 8) for k in range(4)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as ex:
        rets = list(ex.map(lambda j: engine.batch_transfer_sync_write(rx.session, *j), jobs))
    assert rets == [0, 0, 0, 0]
    raw = pool.numpy().tobytes()
    spans = [[((7 - k) << 20), 8 * 65536] for k in range(4)]
    assert rx.call(op="sha", spans=spans)["sha"] == [_sha(raw[(k << 20):(k << 20) + 8 * 65536]) for k in range(4)]
    assert rx.close() == {"unregister": 0}


def test_reads_async_batches_and_status(sender):
    engine, pool = sender
    rx = Receiver()
    assert rx.call(op="fill")["ok"]
    expect = (torch.arange(POOL, dtype=torch.int64).remainder(251).to(torch.uint8)).numpy().tobytes()
    base = pool.data_ptr()
    # READ: 64 blocks of 32 KiB from scattered places of the receiver's pool
    offs = [((i * 37) % 200) * 32768 for i in range(64)]
    assert engine.batch_transfer_sync_read(rx.session, [base + i * 32768 for i in range(64)],
                                           [rx.base + o for o in offs], [32768] * 64) == 0
    raw = pool.numpy().tobytes()
    for i, o in enumerate(offs):
        assert raw[i * 32768:(i + 1) * 32768] == expect[o:o + 32768]
    assert engine.transfer_sync_read(rx.session, base, rx.base + 100, 1000) == 0
    assert pool.numpy().tobytes()[:1000] == expect[100:1100]
    # async: ids > 0, one status call for all of them
    ids = [engine.batch_transfer_async_write(rx.session, [base + k * 4096], [rx.base + (7 << 20) + k * 4096], [4096])
           for k in range(8)]
    assert all(i > 0 for i in ids)
    assert engine.get_batch_transfer_status(ids) == 0
    assert engine.get_batch_transfer_status([12345]) == -1              # unknown id
    bid = engine.batch_transfer_async_read(rx.session, [base], [rx.base], [4096])
    assert bid > 0 and engine.get_batch_transfer_status([bid]) == 0
    bid = engine.transfer_submit_write(rx.session, base, rx.base, 4096)
    assert bid > 0
    deadline = time.monotonic() + 30
    while (st := engine.transfer_check_status(bid)) == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert st == 1
    assert engine.transfer_sync(rx.session, base, rx.base + 8192, 16, TransferOpcode.WRITE, notify=b"layer-0") == 0
    assert rx.call(op="notifies")["n"] == [[engine.get_local_hostname(), "layer-0"]]
    assert rx.close() == {"unregister": 0}


def test_refusals_are_negative_codes_not_exceptions(sender):
    engine, pool = sender
    rx = Receiver()
    base = pool.data_ptr()
    assert engine.transfer_sync_write(rx.session, base, rx.base + POOL - 10, 4096) == -103   # past the pool
    assert engine.transfer_sync_write(rx.session, base, 4096, 4096) == -103                 # not registered there
    assert engine.batch_transfer_sync_write(rx.session, [base], [rx.base], [1, 2]) == -1     # lists differ
    assert engine.batch_transfer_async_write(rx.session, [base], [rx.base + POOL], [1]) == 0  # failed submit: 0
    local = ctypes.create_string_buffer(64)                                                 # not registered here
    assert engine.transfer_sync_write(rx.session, ctypes.addressof(local), rx.base, 64) == -1
    assert rx.close() == {"unregister": 0}
    rx.proc.wait()
    t0 = time.monotonic()
    assert engine.transfer_sync_write(rx.session, base, rx.base, 4096) < 0                  # the receiver is gone
    assert time.monotonic() - t0 < 20


def test_managed_buffers_and_initialize_refusals():
    engine = TransferEngine()
    assert engine.initialize(HOST, "etcd://127.0.0.1:2379", PROTOCOL, DEVICE) < 0
    assert engine.initialize(HOST, "P2PHANDSHAKE", "nvmeof", DEVICE) < 0
    assert engine.initialize(HOST, "P2PHANDSHAKE", PROTOCOL, DEVICE) == 0
    assert engine.initialize(HOST, "P2PHANDSHAKE", PROTOCOL, DEVICE) < 0                  # only once
    a = engine.allocate_managed_buffer(1 << 20)
    b = engine.allocate_managed_buffer(4096)
    assert a and b and a != b
    assert engine.write_bytes_to_buffer(a, b"hello mooncake", 14) == 0
    assert engine.read_bytes_from_buffer(a, 14) == b"hello mooncake"
    me = engine.get_local_hostname()
    assert engine.transfer_sync_write(me, a, b, 14) == 0                                      # to itself, by name
    assert engine.read_bytes_from_buffer(b, 14) == b"hello mooncake"
    assert engine.get_first_buffer_address(me) == a
    assert engine.free_managed_buffer(b, 4096) == 0
    assert engine.free_managed_buffer(b, 4096) < 0
    assert engine.unregister_memory(a + 1) < 0
    assert engine.free_managed_buffer(a, 1 << 20) == 0
    engine.close()


@pytest.mark.skipif(PROTOCOL == "rdma", reason="checks the refusal on a host without RDMA")
def test_rdma_protocol_without_a_device_is_a_negative_code():
    engine = TransferEngine()
    r = engine.initialize(HOST, "P2PHANDSHAKE", "rdma", "")
    if r == 0:
        engine.close()
        pytest.skip("this host has an RDMA device")
    assert r < 0



def test_curve_keys_from_the_environment_for_an_unchanged_connector(tmp_path, monkeypatch):
    """CURVE without a code change: the receiver's process gets its secret key from
    $OMNICONN_XFER_SECRET_KEY_FILE, the sender the receiver's public key from
    $OMNICONN_XFER_SERVER_KEY_FILE; the batched write works; an engine without the key gets a
    negative code and moves nothing."""
    from omniconn import _lib
    lib = _lib._load()[0]               # the library omniconn.mooncake uses
    pub, sec = ctypes.create_string_buffer(41), ctypes.create_string_buffer(41)
    assert lib.omc_tcp_curve_keypair(pub, sec) == 0
    pub, sec = pub.value, sec.value
    (tmp_path / "rx.key").write_bytes(sec + b"\n")
    (tmp_path / "rx.pub").write_bytes(pub + b"\n")
    monkeypatch.setenv("OMNICONN_XFER_SECRET_KEY_FILE", str(tmp_path / "rx.key"))
    rx = Receiver()                     # its process inherits the secret key's file
    monkeypatch.delenv("OMNICONN_XFER_SECRET_KEY_FILE")
    rx.call(op="fill")
    keyless = TransferEngine()
    assert keyless.initialize(HOST, "P2PHANDSHAKE", PROTOCOL, DEVICE) == 0
    monkeypatch.setenv("OMNICONN_XFER_SERVER_KEY_FILE", str(tmp_path / "rx.pub"))
    engine = TransferEngine()
    assert engine.initialize(HOST, "P2PHANDSHAKE", PROTOCOL, DEVICE) == 0
    monkeypatch.delenv("OMNICONN_XFER_SERVER_KEY_FILE")
    pool = torch.randint(0, 256, (1 << 20,), dtype=torch.uint8)
    other = torch.zeros(1 << 20, dtype=torch.uint8)
    assert engine.register_memory(pool.data_ptr(), 1 << 20) == 0
    assert keyless.register_memory(other.data_ptr(), 1 << 20) == 0
    lengths, src_off, dst_off = [4096, 65536, 300000], [0, 8192, 200000], [7 << 20, 3 << 20, 0]
    assert engine.batch_transfer_sync_write(rx.session, [pool.data_ptr() + o for o in src_off],
                                            [rx.base + o for o in dst_off], lengths) == 0
    raw = pool.numpy().tobytes()
    assert rx.call(op="sha", spans=[[o, n] for o, n in zip(dst_off, lengths)])["sha"] == \
        [_sha(raw[o:o + n]) for o, n in zip(src_off, lengths)]
    # no key: refused, and the receiver's pool keeps what it had
    assert keyless.batch_transfer_sync_write(rx.session, [other.data_ptr()], [rx.base + (5 << 20)], [4096]) < 0
    assert rx.call(op="sha", spans=[[5 << 20, 4096]])["sha"] == \
        [_sha(bytes((i % 251) for i in range(5 << 20, (5 << 20) + 4096)))]
    for e, t in ((engine, pool), (keyless, other)):
        assert e.unregister_memory(t.data_ptr()) == 0
        e.close()
    assert rx.close() == {"unregister": 0}


def test_ctypes_layouts_match_the_header(tmp_path):
    """_engine_lib's structs and numbers against the C compiler's view of omniconn_rdma.h."""
    import shutil
    from omniconn import _engine_lib as e
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    src = tmp_path / "layout.c"
    src.write_text(r'''
#include <stddef.h>
#include <stdio.h>
#include "omniconn.h"
#include "omniconn_rdma.h"
int main(void) {
    printf("%zu %zu %zu %zu %zu %d %d %d %d %d %d %d %d\n", sizeof(omc_xfer_entry), sizeof(omc_xfer_notif),
           sizeof(omc_xfer_descriptor), offsetof(omc_xfer_descriptor, range), sizeof(omc_xfer_range),
           OMC_XFER_NAME_MAX, OMC_XFER_NOTIFY_MAX, (int)OMC_XFER_DESC_MAX, OMC_XFER_TRANSPORT_RDMA, OMC_XFER_TRANSPORT_TCP,
           OMC_XFER_READ, OMC_XFER_WRITE, OMC_ERR_BUSY);
    return 0;
}
''')
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c99", "-I", ROOT, str(src), "-o", str(exe)], check=True)
    got = [int(v) for v in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()]
    want = [ctypes.sizeof(e.Entry), ctypes.sizeof(e.Notif), ctypes.sizeof(e.Descriptor), e.Descriptor.range.offset,
            ctypes.sizeof(e.Range), e.OMC_XFER_NAME_MAX, e.OMC_XFER_NOTIFY_MAX, e.OMC_XFER_DESC_MAX,
            e.OMC_XFER_TRANSPORT_RDMA, e.OMC_XFER_TRANSPORT_TCP, e.OMC_XFER_READ, e.OMC_XFER_WRITE, e.OMC_ERR_BUSY]
    assert got == want
