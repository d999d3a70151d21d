"""OmniconnConnector through vLLM-Omni's own connector code, from a copy of its public source.

usage: VLLM_OMNI_SRC=/path/to/vllm-omni OMNICONN_LIBRARY=build/libomniconn.so \\
           python3 tests/python/vllm_omni_real.py
Not part of CI: vLLM-Omni cannot be installed here (it needs vllm and other PyPI packages). Its
package __init__ files pull in the whole engine, so the connector modules are imported by path:
the packages vllm_omni, vllm_omni.distributed and vllm_omni.distributed.omni_connectors are made
as empty namespace modules over the source directories (their __init__ code is skipped), and
then vLLM-Omni's own modules run unchanged: connectors/base.py (OmniConnectorBase), factory.py
(OmniConnectorFactory), utils/config.py (ConnectorSpec), adapter.py (try_send_via_connector,
try_recv_via_connector) and, when the source has it, transfer_adapter/chunk_transfer_adapter.py.
A missing third-party module (vllm.logger) gets a stand-in that returns a standard logger, and
vllm_omni.metrics (outside the connector files; adapter.py imports OrchestratorAggregator from it
for a type annotation) an empty stand-in; no class of vLLM-Omni is replaced.

What runs: importing omniconn.vllm_omni registers OmniconnConnector with vLLM-Omni's factory; the
factory builds a sender and a receiver connector from ConnectorSpec(name, extra) for SHM and for
TCP; vLLM-Omni's try_send_via_connector puts an orchestrator payload (engine inputs with tensors,
SamplingParams-like dataclass) and submits the notification; a second process (this script with
"recv") runs vLLM-Omni's try_recv_via_connector on it and checks the engine inputs. Then, where
the source has them: the factory's create_stage_connectors builds stages 0 -> 1 -> 2 from a
StageConnectorPlan (stage 1 must get one "dual" connector) and a payload crosses the chain; the
calls vLLM-Omni's model runner makes to receive a stage payload (get_with_deadline until a
deadline, abandon_get, the sender named by {source_host, source_port}) are replayed, since that
module cannot be imported without vLLM; and vLLM-Omni's own OmniKVTransferManager
(kv_transfer_manager.py, with utils/initialization.py and utils/kv_utils.py) moves a request's KV
blocks over SHM and TCP, configured the way resolve_omni_kv_config_for_stage configures a stage.
The KV path needs more stand-ins: vllm.distributed.parallel_state (reported as not initialized,
as before vLLM sets it up) and utils/env.py, utils/local_rank.py (small vLLM-Omni modules a copy
of the source may lack). Prints one line per check and the vLLM-Omni revision (VLLM_OMNI_SRC/REVISION
or `git rev-parse HEAD`).
"""
import dataclasses
import hashlib
import os
import struct
import subprocess
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))


def load_vllm_omni(src):
    pkg_root = os.path.join(src, "vllm_omni")
    for name, rel in (("vllm_omni", ""), ("vllm_omni.distributed", "distributed"),
                      ("vllm_omni.distributed.omni_connectors", "distributed/omni_connectors")):
        m = types.ModuleType(name)
        m.__path__ = [os.path.join(pkg_root, rel)]
        sys.modules[name] = m
    # third-party: vLLM's logger factory and its msgpack serializer, which vLLM-Omni's own
    # serializer (utils/serialization.py, the one OmniconnConnector uses when it can) builds on
    from mooncake_real import _standin_vllm
    standins = _standin_vllm()
    if not os.path.exists(os.path.join(pkg_root, "metrics")) and not os.path.exists(os.path.join(pkg_root, "metrics.py")):
        # newer adapter.py imports vllm_omni.metrics.OrchestratorAggregator for a type annotation
        # only; the metrics package pulls in the engine, so a copy of the connector files lacks it
        metrics = types.ModuleType("vllm_omni.metrics")
        metrics.OrchestratorAggregator = object
        sys.modules["vllm_omni.metrics"] = metrics
        standins.append("vllm_omni.metrics (a type annotation)")
    from vllm_omni.distributed.omni_connectors import adapter, factory
    from vllm_omni.distributed.omni_connectors.connectors import base
    from vllm_omni.distributed.omni_connectors.utils import config
    return base, factory, adapter, config, standins


@dataclasses.dataclass
class SamplingParamsLike:
    temperature: float = 0.7
    max_tokens: int = 128
    stop: list = dataclasses.field(default_factory=lambda: ["</s>"])


class Metrics:
    def __init__(self):
        self.calls = []

    def on_forward(self, *args):
        self.calls.append(args)


def _sha(t):
    return hashlib.sha256(t.contiguous().view(__import__("torch").uint8).numpy().tobytes()).hexdigest()


def _frame(data):
    return struct.pack("<I", len(data)) + data


def _revision(src):
    try:
        with open(os.path.join(src, "REVISION")) as f:
            return "\n" + f.read().strip()
    except OSError:
        pass
    try:
        rev = subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        rev = ""
    return rev or "(not a git checkout, no REVISION file)"


def _check(name, ok, detail=""):
    print("%s %s%s" % ("PASS" if ok else "FAIL", name, (": " + detail) if detail else ""))
    return 0 if ok else 1


def stage_connectors(factory, config):
    """vLLM-Omni's create_stage_connectors (newer factories): a middle stage with an inbound and an
    outbound edge of OmniconnConnector gets one "dual" connector when the connector registered
    supports_dual; a chain 0 -> 1 -> 2 over TCP moves a payload through it."""
    import torch
    if not hasattr(factory.OmniConnectorFactory, "create_stage_connectors"):
        print("SKIP stage connectors: this factory has no create_stage_connectors")
        return 0
    F, C = factory.OmniConnectorFactory, config
    name = "OmniconnConnector"
    extra = {"protocol": "tcp", "host": "127.0.0.1", "zmq_port": 0}
    s0 = F.create_stage_connectors(C.StageConnectorPlan(outbound=C.StageConnectorSpec(0, 1, C.ConnectorSpec(name, extra))),
                                   stage_id=0)
    up = s0.send.get_connection_info()
    inbound = C.StageConnectorSpec(0, 1, C.ConnectorSpec(name, dict(extra, sender_host=up["host"],
                                                                     sender_zmq_port=up["zmq_port"])))
    s1 = F.create_stage_connectors(C.StageConnectorPlan(inbound=inbound,
                                                        outbound=C.StageConnectorSpec(1, 2, C.ConnectorSpec(name, extra))),
                                   stage_id=1)
    mid = s1.send.get_connection_info()
    s2 = F.create_stage_connectors(C.StageConnectorPlan(inbound=C.StageConnectorSpec(1, 2, C.ConnectorSpec(
        name, dict(extra, sender_host=mid["host"], sender_zmq_port=mid["zmq_port"])))), stage_id=2)
    failures = _check("stage 1 has one dual connector", s1.receive is s1.send and s1.send.role == "dual"
                      and s1.send.stage_id == 1, "role %s, stage_id %s" % (s1.send.role, s1.send.stage_id))
    failures += _check("roles from the plan", s0.send.role == "sender" and s2.receive.role == "receiver"
                       and s0.receive is None and s2.send is None)
    hidden = torch.rand(16, 256)
    ok, _, _ = s0.send.put("0", "1", "chain_0_0", {"hidden": hidden, "ids": [1, 2, 3]})
    got = s1.receive.get_with_deadline("0", "1", "chain_0_0", None, deadline=time.monotonic() + 30)
    ok2 = got is not None and torch.equal(got[0]["hidden"], hidden)
    if ok2:
        ok2, _, _ = s1.send.put("1", "2", "chain_1_0", {"hidden": got[0]["hidden"] * 2, "ids": got[0]["ids"]})
    got2 = s2.receive.get_with_deadline("1", "2", "chain_1_0", None, deadline=time.monotonic() + 30) if ok2 else None
    failures += _check("a payload through stages 0 -> 1 -> 2", ok and got2 is not None
                       and torch.equal(got2[0]["hidden"], hidden * 2) and list(got2[0]["ids"]) == [1, 2, 3])
    for s in (s0, s1, s2):
        s.close()
    failures += _check("StageConnectorSet.close closes the dual connector once", s1.send.health()["status"] == "closed")
    return failures


def model_runner_receive(factory, config):
    """The calls vLLM-Omni's model runner (model_runner/omni_connector_payload_transport.py,
    recv_stage_payload and _recv_loop) makes on a connector, replayed here: that module needs
    vLLM's distributed state and cannot be imported without vLLM. It names the sender by
    {"source_host", "source_port"} built from a request's sender_info {"host", "zmq_port"},
    loops get_with_deadline(..., deadline=) and then calls abandon_get(get_key); its poll loop
    uses get_wakeup_generation / wait_for_change when a connector has them."""
    import torch
    F, C = factory.OmniConnectorFactory, config
    tx = F.create_connector(C.ConnectorSpec("OmniconnConnector", {"protocol": "tcp", "role": "sender",
                                                                  "host": "127.0.0.1", "stage_id": 0}))
    rx = F.create_connector(C.ConnectorSpec("OmniconnConnector", {"protocol": "tcp", "role": "receiver",
                                                                  "stage_id": 1}))
    sender_info = tx.get_connection_info()
    metadata = {"source_host": str(sender_info["host"]), "source_port": int(sender_info["zmq_port"])}
    failures = 0
    for i in range(3):
        key = "ext-req-%d_0_0" % i
        t = torch.rand(8, 128)
        tx.put("0", "1", key, {"codes": {"audio": t}, "meta": {"finished": torch.tensor(True)}})
        deadline = time.monotonic() + 30
        result = None
        while result is None and time.monotonic() < deadline:
            result = rx.get_with_deadline("0", "1", key, metadata, deadline=deadline)
        rx.abandon_get(key)
        ok = result is not None and torch.equal(result[0]["codes"]["audio"], t) and bool(result[0]["meta"]["finished"])
        failures += _check("receiver with no sender configured, metadata {source_host, source_port}: %s" % key, ok)
    handle = {"from_stage": "0", "to_stage": "1", "key": "handled_0_0"}
    _, _, md = tx.put("0", "1", "handled_0_0", b"h" * 70000)
    handle["metadata"] = md
    got = rx.get_with_deadline(handle["from_stage"], handle["to_stage"], handle["key"], handle["metadata"],
                               deadline=time.monotonic() + 30)
    ok = got is not None and got[0].to_bytes() == b"h" * 70000
    if got is not None:
        got[0].release()
    rx.abandon_get("handled_0_0")
    failures += _check("a handle carrying the put's metadata", ok)
    print("NOTE wake-ups: OmniconnConnector has no get_wakeup_generation / wait_for_change, so the model "
          "runner's poll loop re-polls every VLLM_OMNI_CONNECTOR_RECV_POLL_MS (5 ms)")
    tx.close()
    rx.close()
    return failures


def _standin_kv_imports(src):
    """What kv_transfer_manager.py needs beyond the files above: vLLM's parallel state (not
    initialized here: kv_utils falls back to LOCAL_RANK and world size 1, as it does before vLLM
    sets it up) and two small vLLM-Omni modules the file index does not hold."""
    out = []
    try:
        import vllm.distributed.parallel_state  # noqa: F401
    except ImportError:
        def not_initialized():
            raise RuntimeError("tensor parallel group is not initialized")
        vd = types.ModuleType("vllm.distributed")
        vd.__path__ = []
        ps = types.ModuleType("vllm.distributed.parallel_state")
        ps.get_tensor_model_parallel_rank = ps.get_tensor_model_parallel_world_size = not_initialized
        sys.modules.update({"vllm.distributed": vd, "vllm.distributed.parallel_state": ps})
        out.append("vllm.distributed.parallel_state (not initialized)")
    utils = os.path.join(src, "vllm_omni", "distributed", "omni_connectors", "utils")
    prefix = "vllm_omni.distributed.omni_connectors.utils."
    if not os.path.exists(os.path.join(utils, "env.py")):
        env = types.ModuleType(prefix + "env")
        env.expand_env_int = lambda value, name=None: int(os.path.expandvars(str(value)))
        sys.modules[prefix + "env"] = env
        out.append("utils.env.expand_env_int")
    if not os.path.exists(os.path.join(utils, "local_rank.py")):
        lr = types.ModuleType(prefix + "local_rank")
        lr.get_connector_local_rank = lambda: int(os.environ.get("LOCAL_RANK", "0"))
        sys.modules[prefix + "local_rank"] = lr
        out.append("utils.local_rank.get_connector_local_rank")
    return out


def kv_transfer(src):
    """vLLM-Omni's own OmniKVTransferManager (kv_transfer_manager.py) on OmniconnConnector: the
    edge's connector config as resolve_omni_kv_config_for_stage gives it to each stage, the sender
    extracts a request's KV blocks and puts them (handle_finished_requests_kv_transfer), the
    receiver learns the sender from the request's kv_sender_info and receive_kv_cache polls get()."""
    import types as _t
    import torch
    path = os.path.join(src, "vllm_omni", "distributed", "omni_connectors", "kv_transfer_manager.py")
    if not os.path.exists(path):
        print("SKIP kv transfer: the source has no kv_transfer_manager.py")
        return 0
    print("stand-ins for the KV path:", ", ".join(_standin_kv_imports(src)) or "none")
    from vllm_omni.distributed.omni_connectors import kv_transfer_manager as kvm
    from vllm_omni.distributed.omni_connectors.utils import initialization as init
    failures = 0
    g = torch.Generator().manual_seed(3)
    for protocol in ("shm", "tcp"):
        extra = {"protocol": protocol, "host": "127.0.0.1"} if protocol == "tcp" else \
            {"protocol": "shm", "channel": "kv%d" % os.getpid()}
        transfer = init.load_omni_transfer_config(config_dict={
            "runtime": {"connectors": {"kv": {"name": "OmniconnConnector", "extra": extra}}},
            "stage_args": [{"stage_id": 0, "output_connectors": {"to_stage_1": "kv"}},
                           {"stage_id": 1, "input_connectors": {"from_stage_0": "kv"}}]})
        send_cfg, s_from, s_to = init.resolve_omni_kv_config_for_stage(transfer, 0)
        recv_cfg, r_from, r_to = init.resolve_omni_kv_config_for_stage(transfer, 1)
        tx = kvm.OmniKVTransferManager._create({"connector_config": send_cfg, "omni_from_stage": s_from,
                                                "omni_to_stage": s_to, "stage_id": 0, "need_send_cache": True})
        rx = kvm.OmniKVTransferManager._create({"connector_config": recv_cfg, "omni_from_stage": r_from,
                                                "omni_to_stage": r_to, "stage_id": 1, "need_recv_cache": True,
                                                "recv_timeout": 60})
        layers = [torch.rand(2, 6, 16, 4, 32, generator=g) for _ in range(3)]     # [k/v, blocks, block, heads, dim]
        blocks, seq_len = [1, 4, 2], 40
        done = tx.handle_finished_requests_kv_transfer({"req-kv": {"seq_len": seq_len, "block_ids": blocks}},
                                                       layers, 16, "float32")
        info = tx.connector.get_connection_info()
        req = _t.SimpleNamespace(request_id="req-kv", sampling_params=_t.SimpleNamespace(),
                                 kv_sender_info={"host": info.get("host"), "zmq_port": info.get("zmq_port")})
        ok = rx.receive_kv_cache(req)
        same = ok and done == ["req-kv"]
        if same:
            for i, layer in enumerate(layers):
                want_k = layer[0][blocks].flatten(0, 1)[:seq_len]
                want_v = layer[1][blocks].flatten(0, 1)[:seq_len]
                same = same and torch.equal(req.past_key_values.key_cache[i], want_k) \
                    and torch.equal(req.past_key_values.value_cache[i], want_v)
            same = same and req.kv_metadata.get("seq_len") == seq_len
        failures += _check("%s: OmniKVTransferManager sender %s -> receiver %s, 3 layers of KV blocks intact" % (
            protocol, tx.connector.role, rx.connector.role), same)
        tx.connector.close()
        rx.connector.close()
    return failures


def main():
    src = os.environ.get("VLLM_OMNI_SRC")
    if not src:
        sys.exit("set VLLM_OMNI_SRC to a copy of vLLM-Omni's source")
    base, factory, adapter, config, standins = load_vllm_omni(src)
    import torch
    import omniconn.vllm_omni as ov
    if sys.argv[1:2] == ["recv"]:
        extra = ov.deserialize(bytes.fromhex(sys.argv[2]))
        conn = factory.OmniConnectorFactory.create_connector(config.ConnectorSpec(name="OmniconnConnector", extra=extra))
        out = []
        for line in sys.stdin:
            task = ov.deserialize(bytes.fromhex(line.strip()))
            ein, rx = None, None
            for _ in range(2000):       # a remote payload may need a second look
                ein, rx = adapter.try_recv_via_connector(task, {("0", "1"): conn}, 1)
                if ein is not None:
                    break
            out.append({"rid": task["request_id"], "ok": ein is not None,
                        "image": _sha(ein["image"]) if ein is not None else None,
                        "ids": ein["prompt_token_ids"] if ein is not None else None,
                        "bytes": rx["rx_transfer_bytes"] if rx else 0})
        sys.stdout.write(ov.serialize(out).hex() + "\n")
        conn.close()
        return
    print("OmniconnConnector registered with vLLM-Omni's factory:",
          "OmniconnConnector" in factory.OmniConnectorFactory.list_registered_connectors(),
          "| derives from OmniConnectorBase:", issubclass(ov.OmniconnConnector, base.OmniConnectorBase))
    print("vLLM-Omni source:", src, _revision(src))
    print("stand-ins:", ", ".join(standins) or "none")
    failures = 0
    for serializer, protocol in (("auto", "shm"), ("auto", "tcp"), ("omniconn", "shm"), ("omniconn", "tcp")):
        if protocol == "shm":
            tx_extra = {"protocol": "shm", "channel": "real%d" % os.getpid(), "stage_id": 0, "serializer": serializer}
            rx_extra = dict(tx_extra, stage_id=1)
        else:
            tx_extra = {"protocol": "tcp", "role": "sender", "host": "127.0.0.1", "stage_id": 0,
                        "serializer": serializer}
        tx = factory.OmniConnectorFactory.create_connector(config.ConnectorSpec(name="OmniconnConnector", extra=tx_extra))
        if protocol == "tcp":
            info = tx.get_connection_info()
            rx_extra = {"protocol": "tcp", "role": "receiver", "stage_id": 1, "sender_host": info["host"],
                        "sender_zmq_port": info["zmq_port"], "serializer": serializer}
        used = "vLLM-Omni's" if tx._serde is not None else "omniconn's"
        queue, metrics, sent = [], Metrics(), {}
        for i in range(8):
            rid = "req-%s-%d" % (protocol, i)
            image = torch.rand(3, 224, 224)
            ok = adapter.try_send_via_connector(tx, 0, 1, rid, {"prompt_token_ids": list(range(i, i + 20)), "image": image},
                                                SamplingParamsLike(), "a prompt", queue.append, metrics)
            sent[rid] = _sha(image)
            failures += not ok
        proc = subprocess.run([sys.executable, __file__, "recv", ov.serialize(rx_extra).hex()],
                              input="".join(ov.serialize(t).hex() + "\n" for t in queue), capture_output=True,
                              text=True, env=dict(os.environ), timeout=120)
        got = ov.deserialize(bytes.fromhex(proc.stdout.strip().splitlines()[-1])) if proc.returncode == 0 else []
        good = [g for g in got if g["ok"] and g["image"] == sent[g["rid"]]]
        failures += len(sent) - len(good)
        print("%s, %s serializer: try_send_via_connector %d/%d (metrics.on_forward %d), try_recv_via_connector in "
              "another process %d/%d engine inputs intact%s" % (protocol, used, len(queue), len(sent), len(metrics.calls),
                                                               len(good), len(sent),
                                                "" if proc.returncode == 0 else "; receiver failed: " + proc.stderr[-2000:]))
        tx.close()
    failures += stage_connectors(factory, config)
    failures += model_runner_receive(factory, config)
    failures += kv_transfer(src)
    print("vllm-omni-real: %s" % ("ok" if not failures else "%d failures" % failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
