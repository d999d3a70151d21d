"""OmniconnConnector driven the way vLLM-Omni's transfer adapter drives a connector: put on one
side, the returned metadata through a queue (here: the peer's stdin, as msgpack), a get polled
every millisecond on the other side until it returns the payload."""
import gc
import hashlib
import time

import msgpack
import numpy as np
import pytest
import torch

import omniconn
from omniconn import vllm_omni
from omniconn.vllm_omni import OmniconnConnector, RawBuffer


def _sha(b):
    return hashlib.sha256(b).hexdigest()


def _sender_and_receiver(protocol, channel, peer, metadata_less_sender=True):
    if protocol == "shm":
        tx = OmniconnConnector({"protocol": "shm", "role": "dual", "channel": channel})
        rx = peer(api="vllm", extra={"protocol": "shm", "role": "dual", "channel": channel})
    else:
        tx = OmniconnConnector({"protocol": "tcp", "role": "sender", "host": "127.0.0.1", "zmq_port": 0})
        info = tx.get_connection_info()
        extra = {"protocol": "tcp", "role": "receiver"}
        if metadata_less_sender:
            extra.update(sender_host=info["host"], sender_zmq_port=info["zmq_port"])
        rx = peer(api="vllm", extra=extra)
    return tx, rx


def _payloads():
    return [
        ("bytes", b"\x00\x01" * 40000),
        ("numpy", np.random.default_rng(1).standard_normal((32, 128)).astype(np.float32)),
        ("torch", torch.arange(0, 4096, dtype=torch.bfloat16).reshape(64, 64)),
        ("dict", {"engine_inputs": {"prompt_token_ids": list(range(100)), "hidden": np.arange(6.0).reshape(2, 3)},
                  "metadata": {"stage_transition": "0->1", "timestamp": 1.5}}),
    ]


@pytest.mark.parametrize("protocol", ["shm", "tcp"])
@pytest.mark.parametrize("meta_mode", ["full", "partial", "none"])
def test_the_transfer_adapter_pattern_put_queue_poll(protocol, meta_mode, channel, peer):
    tx, rx = _sender_and_receiver(protocol, channel, peer)
    with tx:
        for i, (kind, data) in enumerate(_payloads()):
            key = "req-%s-%d" % (meta_mode, i)
            ok, size, md = tx.put("0", "1", key, data)
            assert ok and size > 0
            msgpack.packb(md)                    # the metadata travels as msgpack
            assert len(msgpack.packb(md)) < 200000
            if meta_mode == "partial":
                if protocol != "tcp":
                    md = None                    # SHM has no host/port to give
                else:
                    md = {"host": md["host"], "port": md["port"]}
            elif meta_mode == "none":
                md = None
            r = rx.call(op="poll", **{"from": "0", "to": "1"}, key=key, meta=md, timeout=20)
            assert r["ok"], (kind, r)
            d = r["desc"]
            if kind == "bytes":
                assert d["raw"] and d["bytes"]["sha"] == _sha(data) and d["released"]
            elif kind == "numpy":
                assert d["raw"] and d["tensor"]["dtype"] == "float32" and d["tensor"]["shape"] == [32, 128]
                assert d["bytes"]["sha"] == _sha(data.tobytes())
            elif kind == "torch":
                assert d["tensor"]["dtype"] == "bfloat16" and d["tensor"]["shape"] == [64, 64]
                assert d["bytes"]["sha"] == _sha(data.view(torch.uint8).numpy().tobytes())
            else:
                items = d["items"]["engine_inputs"]["items"]
                assert items["hidden"]["type"] == "array" and items["hidden"]["shape"] == [2, 3]
                assert d["items"]["metadata"]["items"]["stage_transition"]["repr"] == "'0->1'"
        assert tx.wait_consumed(timeout=10)
        assert sorted(tx.reap_consumed()) == sorted("req-%s-%d" % (meta_mode, i) for i in range(4))


def test_a_miss_is_cheap_and_returns_none(channel):
    with OmniconnConnector({"protocol": "shm", "channel": channel}) as c:
        t0 = time.perf_counter()
        for _ in range(200):
            assert c.get("0", "1", "absent", None) is None
        per_call = (time.perf_counter() - t0) / 200
        assert per_call < 0.002, per_call
        assert c.health()["misses"] == 200


def test_raw_payloads_offer_tensor_as_tensor_to_bytes_and_release(channel):
    with OmniconnConnector({"protocol": "shm", "channel": channel}) as c:
        ok, size, md = c.put("0", "1", "raw", b"\x01\x00\x00\x00\x02\x00\x00\x00")
        obj, n = c.get("0", "1", "raw", md)
        assert isinstance(obj, RawBuffer) and n == 8
        assert obj.tensor.tolist() == [1, 0, 0, 0, 2, 0, 0, 0]
        assert obj.as_tensor(torch.int32, (2,)).tolist() == [1, 2]
        assert obj.to_bytes() == b"\x01\x00\x00\x00\x02\x00\x00\x00"
        obj.release()
        assert obj.released
        with pytest.raises(ValueError):
            obj.to_bytes()


def test_without_raw_support_payloads_come_back_as_plain_objects(channel):
    with OmniconnConnector({"protocol": "shm", "channel": channel, "supports_raw_data": False}) as c:
        ok, _, md = c.put("0", "1", "a", b"plain")
        assert c.get("0", "1", "a", md) == (b"plain", 5)
        ok, _, md = c.put("0", "1", "b", np.arange(3, dtype=np.int8))
        obj, n = c.get("0", "1", "b", md)
        assert obj.tolist() == [0, 1, 2] and n == 3


def test_objects_msgpack_cannot_carry_are_refused_never_pickled(channel):
    class Opaque:
        pass
    with OmniconnConnector({"protocol": "shm", "channel": channel}) as c:
        ok, size, md = c.put("0", "1", "x", {"obj": Opaque()})
        assert (ok, size, md) == (False, 0, None)
        assert c.health()["put_failures"] == 1


def test_get_with_deadline_abandon_cleanup_and_health(channel):
    with OmniconnConnector({"protocol": "shm", "channel": channel, "ttl_seconds": 30}) as c:
        t0 = time.monotonic()
        assert c.get_with_deadline("0", "1", "nothing", None, deadline=time.monotonic() + 0.1) is None
        assert 0.05 < time.monotonic() - t0 < 2
        ok, _, md = c.put("0", "1", "gone", b"g" * 1000)
        assert c.abandon_get("0", "1", "gone") is True
        assert c.get("0", "1", "gone", md) is None
        ok, _, md = c.put("0", "1", "req-9", b"c" * 1000)
        c.cleanup("req-9")
        assert c.get("0", "1", "req-9", md) is None
        h = c.health()
        assert h["status"] == "healthy" and h["puts"] == 2 and h["omc_live_entries"] == 0
        assert isinstance(h, dict) and msgpack.packb(h)


def test_close_is_idempotent_and_also_happens_on_exit_and_collection(channel):
    c = OmniconnConnector({"protocol": "shm", "channel": channel})
    c.close()
    c.close()
    assert c.health()["status"] == "closed"
    assert c.put("0", "1", "k", b"x") == (False, 0, None)
    with OmniconnConnector({"protocol": "local"}) as c2:
        assert c2.put("0", "1", "k", b"x")[0]
    c2.close()
    c3 = OmniconnConnector({"protocol": "local"})
    del c3
    gc.collect()


def test_connection_info_and_update_sender_info_repoint_a_receiver(peer):
    tx1 = OmniconnConnector({"protocol": "tcp", "role": "sender", "host": "127.0.0.1"})
    tx2 = OmniconnConnector({"protocol": "tcp", "role": "sender", "host": "127.0.0.1"})
    rx = OmniconnConnector({"protocol": "tcp", "role": "receiver"})
    with tx1, tx2, rx:
        i1, i2 = tx1.get_connection_info(), tx2.get_connection_info()
        assert i1["zmq_port"] != i2["zmq_port"] and i1["host"] == "127.0.0.1"
        tx2.put("0", "1", "only-on-2", b"two")
        rx.update_sender_info(i1["host"], i1["zmq_port"])
        assert rx.get_with_deadline("0", "1", "only-on-2", None, timeout=0.3) is None
        rx.update_sender_info(i2["host"], i2["zmq_port"], rank=0)
        obj, n = rx.get_with_deadline("0", "1", "only-on-2", None, timeout=5)
        assert obj.to_bytes() == b"two"
        obj.release()


def test_curve_keys_from_files_secure_the_side_channel(tmp_path):
    pub, sec = omniconn.curve_keypair()
    (tmp_path / "server.pub").write_text(pub + "\n")
    (tmp_path / "server.key").write_text(sec + "\n")
    tx = OmniconnConnector({"protocol": "tcp", "role": "sender", "curve_secret_key_file": str(tmp_path / "server.key"),
                            "curve_public_key_file": str(tmp_path / "server.pub")})
    info = tx.get_connection_info()
    good = OmniconnConnector({"protocol": "tcp", "role": "receiver", "sender_host": info["host"],
                              "sender_zmq_port": info["zmq_port"],
                              "curve_server_key_file": str(tmp_path / "server.pub")})
    plain = OmniconnConnector({"protocol": "tcp", "role": "receiver", "sender_host": info["host"],
                               "sender_zmq_port": info["zmq_port"]})
    with tx, good, plain:
        ok, _, md = tx.put("0", "1", "secret", b"s" * 100)
        assert plain.get_with_deadline("0", "1", "secret", md, timeout=0.5) is None
        obj, n = good.get_with_deadline("0", "1", "secret", md, timeout=5)
        assert obj.to_bytes() == b"s" * 100
        obj.release()


def test_rdma_protocol_is_constructible_or_says_why_not():
    ok, why = omniconn.available("rdma")
    try:
        c = OmniconnConnector({"protocol": "rdma", "role": "sender", "device_name": "rxe0"})
    except omniconn.OmniconnError as e:
        assert e.name in ("OMC_ERR_UNAVAILABLE", "OMC_ERR_RDMA_DEVICE"), e
        return
    with c:
        assert c.get_connection_info()["protocol"] == "rdma"


def test_standalone_without_vllm_omni_or_registered_with_it():
    import importlib.util
    if importlib.util.find_spec("vllm_omni") is None:
        assert vllm_omni.registered is False
        assert OmniconnConnector.__mro__[1].__module__ == "omniconn.vllm_omni"
        return
    from vllm_omni.distributed.omni_connectors.factory import OmniConnectorFactory
    assert "OmniconnConnector" in OmniConnectorFactory.list_registered_connectors()
