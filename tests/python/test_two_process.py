"""Two and three processes over SHM and TCP: the sender here, receivers in peer processes.
Metadata travels through the peer's stdin as msgpack, the way a control plane carries it."""
import hashlib
import os
import signal
import time

import numpy as np
import pytest
import torch

import omniconn


def _sha(b):
    return hashlib.sha256(b).hexdigest()


def _pair(kind, channel, peer, readers=1):
    """A sender here and `readers` receiver peers."""
    if kind == "shm":
        sender = omniconn.ShmConnector(role="dual", channel=channel, pool_size=64 << 20)
        peers = [peer(api="plain", kind="shm", role="dual", channel=channel) for _ in range(readers)]
    else:
        sender = omniconn.TcpConnector(role="sender", pool_size=64 << 20)
        host, port, _ = sender.endpoint
        peers = [peer(api="plain", kind="tcp", role="receiver") for _ in range(readers)]
        for p in peers:
            assert p.call(op="add_sender", name="s0", host=host, port=port)["ok"]
    return sender, peers


@pytest.mark.parametrize("kind", ["shm", "tcp"])
def test_bytes_numpy_torch_and_dicts_reach_another_process_intact(kind, channel, peer):
    sender, (rx,) = _pair(kind, channel, peer)
    with sender:
        blob = os.urandom(3 << 20)
        meta = sender.put("thinker", "talker", "bytes", blob)
        r = rx.call(op="get", **{"from": "thinker", "to": "talker"}, key="bytes", meta=meta)
        assert r["ok"] and r["payload"]["sha"] == _sha(blob), r

        arr = np.random.default_rng(0).standard_normal((64, 1024)).astype(np.float32)
        ten = torch.randn(16, 256, dtype=torch.float16)
        meta = sender.put_tensors("thinker", "talker", "named", {"hidden": arr, "codes": ten, "raw": b"abc"})
        r = rx.call(op="get", **{"from": "thinker", "to": "talker"}, key="named", meta=meta, torch=True)
        assert r["ok"], r
        f = r["frame"]
        assert f["hidden"]["shape"] == [64, 1024] and f["hidden"]["dtype"] == "float32"
        assert f["hidden"]["sha"] == _sha(arr.tobytes())
        assert f["codes"]["dtype"] == "float16" and f["codes"]["sha"] == _sha(ten.view(torch.uint8).numpy().tobytes())
        assert f["raw"]["sha"] == _sha(b"abc")
        assert sender.wait_consumed(timeout=10)


@pytest.mark.parametrize("kind", ["shm", "tcp"])
def test_a_metadata_less_get_waits_for_the_put(kind, channel, peer):
    sender, (rx,) = _pair(kind, channel, peer)
    with sender:
        rx.send(op="get", **{"from": "a", "to": "b"}, key="later", meta=None, timeout=10)
        time.sleep(0.3)
        data = b"L" * 70000
        sender.put("a", "b", "later", data)
        r = rx._recv()
        assert r["ok"] and r["payload"]["sha"] == _sha(data), r


@pytest.mark.parametrize("kind", ["shm", "tcp"])
def test_fan_out_reaches_every_reader_process(kind, channel, peer):
    sender, peers = _pair(kind, channel, peer, readers=2)
    with sender:
        data = os.urandom(1 << 20)
        meta = sender.put("a", "b", "fan", data, readers=2)
        for p in peers:
            p.send(op="get", **{"from": "a", "to": "b"}, key="fan", meta=meta)
        for p in peers:
            r = p._recv()
            assert r["ok"] and r["payload"]["sha"] == _sha(data), r
        assert sender.wait_consumed(timeout=10)
        assert sender.health()["live_entries"] == 0


@pytest.mark.parametrize("kind", ["shm", "tcp"])
def test_a_put_nobody_reads_is_reclaimed_after_its_ttl(kind, channel, peer):
    sender, (rx,) = _pair(kind, channel, peer)
    with sender:
        meta = sender.put("a", "b", "ttl", b"x" * 100000, ttl_ms=150)
        time.sleep(0.5)
        sender.sweep()
        assert sender.health()["ttl_reclaims"] >= 1
        r = rx.call(op="get", **{"from": "a", "to": "b"}, key="ttl", meta=meta, timeout=0.5)
        assert not r["ok"] and r["name"] in ("OMC_ERR_NOT_FOUND", "OMC_ERR_TIMEOUT", "OMC_ERR_STALE"), r


@pytest.mark.parametrize("kind", ["shm", "tcp"])
def test_a_killed_sender_gives_the_receiver_an_answer_within_its_deadline(kind, channel, peer):
    # the sender is the peer this time; it is killed with SIGKILL after a put
    if kind == "shm":
        tx = peer(api="plain", kind="shm", role="dual", channel=channel)
        rx = omniconn.ShmConnector(role="dual", channel=channel)
    else:
        tx = peer(api="plain", kind="tcp", role="sender")
        host, port, _ = tx.call(op="info")["info"]
        rx = omniconn.TcpConnector(role="receiver")
        rx.add_sender("s0", host, port)
    with rx:
        r = tx.call(op="put", **{"from": "a", "to": "b"}, key="k", n=1 << 20)
        assert r["ok"]
        os.kill(tx.pid, signal.SIGKILL)
        tx.proc.wait()
        t0 = time.monotonic()
        try:
            with rx.get("a", "b", "k", r["meta"], timeout=2) as buf:     # still readable: fine too
                assert _sha(buf.to_bytes()) == r["sha"]
        except omniconn.OmniconnError as e:
            assert e.name in ("OMC_ERR_PEER_DEAD", "OMC_ERR_CONNECTION", "OMC_ERR_TIMEOUT", "OMC_ERR_NOT_FOUND",
                              "OMC_ERR_SHM_CHANGED"), e
        assert time.monotonic() - t0 < 10
        # and the receiver still works afterwards
        h = rx.health()
        assert h["state"] in ("healthy", "degraded")


def test_a_killed_reader_does_not_stop_the_sender(channel, peer):
    sender = omniconn.ShmConnector(role="dual", channel=channel)
    rx = peer(api="plain", kind="shm", role="dual", channel=channel)
    with sender:
        meta = sender.put("a", "b", "held", b"h" * (1 << 20))
        r = rx.call(op="get", **{"from": "a", "to": "b"}, key="held", meta=meta, hold=True)
        assert r["ok"]
        os.kill(rx.pid, signal.SIGKILL)
        rx.proc.wait()
        meta2 = sender.put("a", "b", "next", b"n" * 1000)
        with sender.get("a", "b", "next", meta2, timeout=5) as buf:
            assert buf.to_bytes() == b"n" * 1000


def test_the_three_stage_example_checks_every_tensor_over_shm_and_tcp():
    import subprocess
    import sys
    from conftest import ROOT
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", "pipeline3.py"), "--requests", "3",
                        "--tokens", "64"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "pipeline3 over shm: every tensor checked end to end" in r.stdout
    assert "pipeline3 over tcp: every tensor checked end to end" in r.stdout
