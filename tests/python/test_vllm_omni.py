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
    """A miss never waits: 200 of them on SHM put this thread to sleep (a voluntary context
    switch) hardly ever, however loaded the machine is."""
    import resource
    with OmniconnConnector({"protocol": "shm", "channel": channel}) as c:
        c.get("0", "1", "absent", None)
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
        for _ in range(200):
            assert c.get("0", "1", "absent", None) is None
        slept = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw - before
        assert slept < 20, slept
        assert c.health()["misses"] == 201


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
        import threading
        t0 = time.monotonic()
        threading.Event().wait(0.1)
        yardstick = time.monotonic() - t0            # a 0.1 s wait on this machine, now
        t0 = time.monotonic()
        assert c.get_with_deadline("0", "1", "nothing", None, deadline=time.monotonic() + 0.1) is None
        waited = time.monotonic() - t0
        assert 0.05 < waited < 10 * yardstick, (waited, yardstick)
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


# ---- vLLM-Omni's newer call shapes, replayed without vLLM-Omni installed ---------------------------
def _receive_like_the_model_runner(rx, from_stage, to_stage, key, metadata, seconds=30):
    """recv_stage_payload of vLLM-Omni's model runner: get_with_deadline(..., deadline=) until the
    deadline, then abandon_get(key) whatever happened."""
    deadline = time.monotonic() + seconds
    result = None
    try:
        while True:
            result = rx.get_with_deadline(from_stage, to_stage, key, metadata, deadline=deadline)
            remaining = deadline - time.monotonic()
            if result is not None or remaining <= 0:
                break
            time.sleep(min(0.05, remaining))
    finally:
        rx.abandon_get(key)
    return result


def test_the_model_runner_names_the_sender_by_source_host_and_source_port():
    """A receiver with no sender configured learns it per request: vLLM-Omni's model runner turns a
    request's sender_info {host, zmq_port} into {source_host, source_port}."""
    tx = OmniconnConnector({"protocol": "tcp", "role": "sender", "host": "127.0.0.1", "stage_id": 0})
    rx = OmniconnConnector({"protocol": "tcp", "role": "receiver", "stage_id": 1})
    with tx, rx:
        info = tx.get_connection_info()
        audio = torch.rand(8, 128)
        tx.put("0", "1", "ext-1_0_0", {"codes": {"audio": audio}, "meta": {"finished": torch.tensor(True)}})
        got = _receive_like_the_model_runner(rx, "0", "1", "ext-1_0_0",
                                             {"source_host": info["host"], "source_port": info["zmq_port"]})
        assert got is not None
        assert torch.equal(got[0]["codes"]["audio"], audio) and bool(got[0]["meta"]["finished"])
        tx.put("0", "1", "ext-1_0_1", b"second" * 1000)
        sender_info = {"host": info["host"], "zmq_port": info["zmq_port"]}   # the sender_info form itself
        got = None
        while got is None:
            got = rx.get("0", "1", "ext-1_0_1", sender_info)
        assert got[0].to_bytes() == b"second" * 1000
        got[0].release()
        assert tx.wait_consumed(timeout=30)


def test_a_sender_hint_with_a_port_that_is_no_port_is_a_miss_and_a_log_line(caplog):
    rx = OmniconnConnector({"protocol": "tcp", "role": "receiver", "stage_id": 1})
    with rx, caplog.at_level("WARNING", logger="omniconn.vllm_omni"):
        for bad in ("x", None, -5, 70000, [1]):
            assert rx.get("0", "1", "k", {"source_host": "127.0.0.1", "source_port": bad}) is None
        assert rx.get_with_deadline("0", "1", "k", {"source_host": "127.0.0.1", "source_port": "x"},
                                    deadline=time.monotonic()) is None
    assert any("is not a port" in r.getMessage() for r in caplog.records)


def test_a_middle_stage_runs_on_the_dual_config_the_factory_merges():
    """create_stage_connectors merges a stage's inbound and outbound edge into one config: the
    outbound's keys, the inbound's sender_host / sender_zmq_port, role "dual", rank mappings
    split into recv_rank_mapping / send_rank_mapping."""
    up = OmniconnConnector({"protocol": "tcp", "role": "sender", "host": "127.0.0.1", "zmq_port": 0, "stage_id": 0})
    with up:
        u = up.get_connection_info()
        merged = {"protocol": "tcp", "host": "127.0.0.1", "zmq_port": 0, "stage_id": 1, "role": "dual",
                  "sender_host": u["host"], "sender_zmq_port": u["zmq_port"],
                  "recv_rank_mapping": {"from_tp": 2, "to_tp": 1}, "send_rank_mapping": {"from_tp": 1, "to_tp": 1}}
        with OmniconnConnector(merged) as mid:
            assert mid.role == "dual" and mid.stage_id == 1
            m = mid.get_connection_info()
            down = OmniconnConnector({"protocol": "tcp", "role": "receiver", "stage_id": 2,
                                      "sender_host": m["host"], "sender_zmq_port": m["zmq_port"]})
            with down:
                up.put("0", "1", "r_0_0", {"x": torch.arange(10)})
                got = _receive_like_the_model_runner(mid, "0", "1", "r_0_0", None)
                assert got is not None and got[0]["x"].tolist() == list(range(10))
                mid.put("1", "2", "r_1_0", {"x": got[0]["x"] * 3})
                got2 = _receive_like_the_model_runner(down, "1", "2", "r_1_0", None)
                assert got2 is not None and got2[0]["x"].tolist() == [3 * i for i in range(10)]


@pytest.mark.parametrize("newer", [True, False])
def test_registration_asks_for_one_dual_connector_where_the_factory_offers_it(monkeypatch, newer):
    """Stand-in factory modules (vLLM-Omni cannot be installed here): the newer
    register_connector(name, constructor, *, supports_dual=False) and the older one without it."""
    import sys
    import types
    calls = []

    class Factory:
        if newer:
            @classmethod
            def register_connector(cls, name, constructor, *, supports_dual=False):
                calls.append((name, constructor, supports_dual))
        else:
            @classmethod
            def register_connector(cls, name, constructor):
                calls.append((name, constructor, None))

        @classmethod
        def list_registered_connectors(cls):
            return [c[0] for c in calls]

    names = ["vllm_omni", "vllm_omni.distributed", "vllm_omni.distributed.omni_connectors",
             "vllm_omni.distributed.omni_connectors.factory"]
    for n in names:
        m = types.ModuleType(n)
        m.__path__ = []
        monkeypatch.setitem(sys.modules, n, m)
    sys.modules[names[-1]].OmniConnectorFactory = Factory
    assert vllm_omni._register() is True
    assert calls == [("OmniconnConnector", OmniconnConnector, True if newer else None)]
    assert vllm_omni._register() is True and len(calls) == 1      # registered once


class _Config:
    def __init__(self, omit_defaults, array_like=False):
        self.omit_defaults, self.array_like = omit_defaults, array_like


class _Factory:
    def __init__(self, factory):
        self.factory = factory


def _struct_type(name, fields, defaults, omit_defaults=True, array_like=False):
    """A class shaped as msgspec shows a Struct to a serializer (__struct_fields__,
    __struct_defaults__ for the trailing fields, __struct_config__); msgspec is not in Debian 12."""
    def __init__(self, *args, **kw):
        first = len(fields) - len(defaults)
        for i, n in enumerate(fields):
            if i < len(args):
                v = args[i]
            elif n in kw:
                v = kw[n]
            else:
                d = defaults[i - first]
                v = d.factory() if isinstance(d, _Factory) else d
            setattr(self, n, v)
    return type(name, (), {"__init__": __init__, "__struct_fields__": tuple(fields),
                           "__struct_defaults__": tuple(defaults),
                           "__struct_config__": _Config(omit_defaults, array_like)})


def test_structs_declared_omit_defaults_arrive_without_their_default_fields(channel):
    """vLLM-Omni's payload Structs (OmniPayloadStruct, MetaStruct, ...) are declared with
    omit_defaults, and its chunk adapter reads them as payload.get("codes", {}).get("audio"):
    a field left at None must be absent, as msgspec encodes it, not present as None."""
    Meta = _struct_type("MetaStruct", ["finished", "is_segment_finished", "left_context_size"], [None, None, None])
    Payload = _struct_type("OmniPayloadStruct", ["codes", "ids", "meta", "speaker", "tags"],
                           [None, None, None, None, _Factory(list)])
    Plain = _struct_type("Plain", ["a", "b"], [None, 0], omit_defaults=False)
    Params = _struct_type("Params", ["temperature", "stop", "n"], [1.0, _Factory(list), 1], array_like=True)
    with OmniconnConnector({"protocol": "shm", "channel": channel, "serializer": "omniconn"}) as c:
        p = Payload(meta=Meta(finished=torch.tensor(True), is_segment_finished=torch.tensor(False), left_context_size=0))
        ok, _, md = c.put("0", "1", "req_0_0", p)
        assert ok
        got, _ = c.get("0", "1", "req_0_0", md)
        assert sorted(got) == ["meta"]                              # codes, ids, speaker, tags: defaults
        assert sorted(got["meta"]) == ["finished", "is_segment_finished", "left_context_size"]  # 0 is not None
        assert got.get("codes", {}).get("audio") is None and got.get("ids", {}).get("prompt") is None
        assert bool(got["meta"]["finished"]) and not bool(got["meta"]["is_segment_finished"])
        audio = torch.arange(12).reshape(3, 4)
        ok, _, md = c.put("0", "1", "req_0_1", Payload(codes={"audio": audio}, tags=["x"], meta=Meta()))
        got, _ = c.get("0", "1", "req_0_1", md)
        assert sorted(got) == ["codes", "meta", "tags"] and got["meta"] == {} and got["tags"] == ["x"]
        assert torch.equal(got["codes"]["audio"], audio)
        ok, _, md = c.put("0", "1", "other", {"plain": Plain(), "params": Params(0.5), "full": Params(0.5, ["s"], 2)})
        got, _ = c.get("0", "1", "other", md)
        assert got["plain"] == {"a": None, "b": 0}                 # no omit_defaults: every field
        assert got["params"] == [0.5] and got["full"] == [0.5, ["s"], 2]   # an array drops trailing defaults


def test_kv_transfer_managers_calls_keywords_and_raw_buffer_handling(channel):
    """OmniKVTransferManager's calls, replayed: put/get by keyword, a packed KV payload as bytes
    (or a uint8 tensor: its to_gpu_tensor result once staged off the device), read back through
    hasattr(raw, "tensor") / memoryview(raw.tensor.numpy()) / raw.release(); the receiver learns
    the sender by update_sender_info with either keyword set."""
    tx = OmniconnConnector({"protocol": "tcp", "role": "sender", "host": "127.0.0.1", "stage_id": 0})
    rx = OmniconnConnector({"protocol": "tcp", "role": "receiver", "stage_id": 1})
    with tx, rx:
        assert getattr(tx, "supports_raw_data", False) is True
        info = tx.get_connection_info()
        rx.update_sender_info(sender_host=info["host"], sender_zmq_port=info["zmq_port"])
        packed = bytes(range(256)) * 300
        for i, data in enumerate((packed, torch.frombuffer(bytearray(packed), dtype=torch.uint8))):
            key = "omni_0_to_1_kv_cache_req-%d" % i
            ok, size, _ = tx.put(from_stage="0", to_stage="1", put_key=key, data=data)
            assert ok and size == len(packed)
            result = None
            while not result:
                result = rx.get(from_stage="0", to_stage="1", get_key=key)
            raw, n = result
            assert n == len(packed) and hasattr(raw, "tensor") and hasattr(raw, "release")
            t = raw.tensor
            assert not t.is_cuda and t.dtype == torch.uint8 and t.dim() == 1
            assert bytes(memoryview(t.numpy())) == packed
            raw.release()
        rx.update_sender_info(info["host"], info["zmq_port"], sender_rank=1)
        with pytest.raises(TypeError):
            rx.update_sender_info(sender_host=info["host"])


def test_vllm_omnis_serializer_is_applied_with_its_post_processing(channel, monkeypatch):
    """With vLLM-Omni importable, objects travel in vLLM-Omni's own serializer: its generic decode
    leaves a tensor as [dtype, shape, aux buffer index] and OmniSerde.deserialize turns that back
    with _post_process_decoded(obj, buffers). A stand-in of that module (vLLM-Omni cannot be
    installed here) in the same shape checks the connector does the same."""
    import types
    calls = []

    class Encoder:
        def encode(self, obj):
            t = obj["x"].contiguous()
            return [msgpack.packb({"x": [str(t.dtype)[6:], list(t.shape), 1], "n": obj["n"]}),
                    t.view(torch.uint8).numpy().tobytes()]

    class Decoder:
        def decode(self, bufs):
            return msgpack.unpackb(bytes(bufs[0] if isinstance(bufs, list) else bufs), raw=False)

    class OmniSerde:
        def __init__(self):
            self.encoder, self.decoder = Encoder(), Decoder()

    def _post_process_decoded(obj, aux_buffers=None):
        calls.append(None if aux_buffers is None else len(aux_buffers))
        dtype, shape, index = obj["x"]
        obj["x"] = torch.frombuffer(bytearray(aux_buffers[index]), dtype=getattr(torch, dtype)).reshape(shape)
        return obj

    module = types.SimpleNamespace(OmniSerde=OmniSerde, _post_process_decoded=_post_process_decoded)
    monkeypatch.setattr(vllm_omni, "_vllm_serde", lambda: vllm_omni._VllmSerde(module))
    with OmniconnConnector({"protocol": "shm", "channel": channel, "serializer": "vllm_omni"}) as c:
        x = torch.rand(5, 7)
        ok, _, md = c.put("0", "1", "k", {"x": x, "n": 3})
        assert ok and md["kind"] == "obj"
        got, _ = c.get("0", "1", "k", md)
        assert got["n"] == 3 and isinstance(got["x"], torch.Tensor) and torch.equal(got["x"], x)
        assert calls == [2]                # the post-processing saw both buffers
    del module._post_process_decoded        # an older vLLM-Omni: the generic decode is the result
    with OmniconnConnector({"protocol": "shm", "channel": channel + "b", "serializer": "vllm_omni"}) as c:
        ok, _, md = c.put("0", "1", "k", {"x": torch.zeros(2), "n": 1})
        got, _ = c.get("0", "1", "k", md)
        assert got["x"] == ["float32", [2], 1]


def test_cleanup_of_a_chunk_key_drops_that_key_alone(channel):
    """vLLM-Omni's callers clean up the exact key they put (its SHM connector unlinks that key
    only). A request id still drops the request's chunk keys, but a chunk key never takes the
    keys that extend it: the rank-aware KV key "{rid}_{stage}_{chunk}_{from}_{to}" extends the
    chunk key "{rid}_{stage}_{chunk}"."""
    with OmniconnConnector({"protocol": "shm", "channel": channel}) as c:
        for k in ("r_0_0", "r_0_0_1_0", "r_0_0_0_0"):
            assert c.put("0", "1", k, b"v" * 100)[0]
        assert c.cleanup("r_0_0") is True
        left = sorted(k for _, _, k in c._conn.list())
        assert left == ["r_0_0_0_0", "r_0_0_1_0"]
        assert c.cleanup("r_0_0") is False                   # gone already: nothing else goes
        assert sorted(k for _, _, k in c._conn.list()) == left
        for n in range(3):
            assert c.put("0", "1", "abort-7_0_%d" % n, b"a")[0]
        assert c.cleanup("abort-7") is True                  # a request id: its chunk keys
        assert sorted(k for _, _, k in c._conn.list()) == left


@pytest.mark.parametrize("protocol", ["shm", "tcp"])
def test_the_thinker_to_talker_handoff_gets_back_a_tensor(channel, protocol):
    """vLLM-Omni's MiniCPM-o Thinker-to-Talker handoff, replayed: an edge whose extra says
    thinker_talker_handoff: true; the orchestrator puts a CPU tensor under a key of its own and
    sends {key, metadata} along (msgpack); the Talker gets it and requires a torch.Tensor; the
    producer cleans up by exact key."""
    extra = {"thinker_talker_handoff": True, "thinker_talker_handoff_ttl_s": 600}
    if protocol == "shm":
        extra.update(protocol="shm", channel=channel)
        producer, consumer = OmniconnConnector(dict(extra)), OmniconnConnector(dict(extra))
    else:
        producer = OmniconnConnector(dict(extra, protocol="tcp", role="sender", host="127.0.0.1"))
        consumer = OmniconnConnector(dict(extra, protocol="tcp", role="receiver"))
    with producer, consumer:
        hidden = torch.rand(37, 64)
        key = "mcpo45_handoff_req-1_0"
        ok, _, md = producer.put("0", "1", key, hidden.detach().cpu().contiguous())
        marker = msgpack.unpackb(msgpack.packb({"key": key, "metadata": md}), raw=False)
        result = consumer.get("0", "1", marker["key"], marker["metadata"])
        assert result is not None
        tensor = result[0] if isinstance(result, tuple) else result
        assert isinstance(tensor, torch.Tensor) and torch.equal(tensor, hidden)
        ok, _, md = producer.put("0", "1", "mcpo45_handoff_req-1_1", hidden)
        assert producer.cleanup("mcpo45_handoff_req-1_1") is True
        assert consumer.get("0", "1", "mcpo45_handoff_req-1_1", md) is None
        assert OmniconnConnector(dict(extra, protocol="local", supports_raw_data=True)).supports_raw_data
