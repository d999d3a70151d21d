"""Shared fixtures: the package from python/, the freshly built library, peer processes."""
import atexit
import itertools
import os
import struct
import shutil
import subprocess
import sys
import tempfile

import msgpack
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("OMNICONN_LIBRARY", os.path.join(ROOT, "build", "libomniconn.so"))
# every SHM connector of the tests and their peer processes puts its segments in a private
# directory on /dev/shm's tmpfs, so another program's sweep of /dev/shm cannot remove them mid-run
_SHM_DIR = tempfile.mkdtemp(dir="/dev/shm", prefix="omc-pytest-")
os.environ["OMNICONN_SHM_DIR"] = _SHM_DIR
atexit.register(shutil.rmtree, _SHM_DIR, True)

_n = itertools.count()


@pytest.fixture
def channel():
    """A channel name of its own per test, so tests never see each other's segments."""
    return "pyt%d_%d" % (os.getpid(), next(_n))


class Peer:
    """A peer process (tests/python/peer.py) with one connector, spoken to in msgpack frames."""

    def __init__(self, cfg):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "peer.py"), msgpack.packb(cfg).hex()],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ))
        hello = self._recv()
        assert hello and hello.get("ready"), "peer did not start"
        self.pid = hello["pid"]

    def _recv(self):
        head = self.proc.stdout.read(4)
        if len(head) < 4:
            return None
        return msgpack.unpackb(self.proc.stdout.read(struct.unpack("<I", head)[0]), raw=False)

    def send(self, **req):
        data = msgpack.packb(req, use_bin_type=True)
        self.proc.stdin.write(struct.pack("<I", len(data)) + data)
        self.proc.stdin.flush()

    def call(self, **req):
        self.send(**req)
        return self._recv()

    def close(self, timeout=20):
        if self.proc.poll() is None:
            try:
                self.send(op="exit")
                self.proc.wait(timeout)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def peer():
    peers = []

    def start(**cfg):
        p = Peer(cfg)
        peers.append(p)
        return p
    yield start
    for p in peers:
        if p.proc.poll() is None:
            p.close()
