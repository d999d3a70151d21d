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
A missing third-party module (vllm.logger) gets a stand-in that returns a standard logger; no
class of vLLM-Omni is replaced.

What runs: importing omniconn.vllm_omni registers OmniconnConnector with vLLM-Omni's factory; the
factory builds a sender and a receiver connector from ConnectorSpec(name, extra) for SHM and for
TCP; vLLM-Omni's try_send_via_connector puts an orchestrator payload (engine inputs with tensors,
SamplingParams-like dataclass) and submits the notification; a second process (this script with
"recv") runs vLLM-Omni's try_recv_via_connector on it and checks the engine inputs. Prints one
line per check and the vLLM-Omni revision when the source is a git checkout.
"""
import dataclasses
import hashlib
import logging
import os
import struct
import subprocess
import sys
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
    try:
        import vllm.logger  # noqa: F401
    except ImportError:     # third-party: vLLM's logger factory
        vllm = types.ModuleType("vllm")
        vllm.__path__ = []
        vlog = types.ModuleType("vllm.logger")
        vlog.init_logger = logging.getLogger
        sys.modules["vllm"], sys.modules["vllm.logger"] = vllm, vlog
    from vllm_omni.distributed.omni_connectors import adapter, factory
    from vllm_omni.distributed.omni_connectors.connectors import base
    from vllm_omni.distributed.omni_connectors.utils import config
    return base, factory, adapter, config


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


def main():
    src = os.environ.get("VLLM_OMNI_SRC")
    if not src:
        sys.exit("set VLLM_OMNI_SRC to a copy of vLLM-Omni's source")
    base, factory, adapter, config = load_vllm_omni(src)
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
    try:
        rev = subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        rev = ""
    print("vLLM-Omni source:", src, rev or "(not a git checkout)")
    failures = 0
    for protocol in ("shm", "tcp"):
        if protocol == "shm":
            tx_extra = {"protocol": "shm", "channel": "real%d" % os.getpid(), "stage_id": 0}
            rx_extra = dict(tx_extra, stage_id=1)
        else:
            tx_extra = {"protocol": "tcp", "role": "sender", "host": "127.0.0.1", "stage_id": 0}
        tx = factory.OmniConnectorFactory.create_connector(config.ConnectorSpec(name="OmniconnConnector", extra=tx_extra))
        if protocol == "tcp":
            info = tx.get_connection_info()
            rx_extra = {"protocol": "tcp", "role": "receiver", "stage_id": 1, "sender_host": info["host"],
                        "sender_zmq_port": info["zmq_port"]}
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
        print("%s: try_send_via_connector %d/%d (metrics.on_forward %d), try_recv_via_connector in another process "
              "%d/%d engine inputs intact%s" % (protocol, len(queue), len(sent), len(metrics.calls), len(good), len(sent),
                                                "" if proc.returncode == 0 else "; receiver failed: " + proc.stderr[-2000:]))
        tx.close()
    print("vllm-omni-real: %s" % ("ok" if not failures else "%d failures" % failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
