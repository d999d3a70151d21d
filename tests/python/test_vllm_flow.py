"""OmniconnConnector driven exactly as vLLM-Omni's orchestrator and chunk transfer adapter drive a
connector, across processes, over SHM and TCP: the orchestrator's dict around engine inputs,
SamplingParams-like dataclasses and tensors; keyed chunk puts "{rid}_{stage}_{n}"; metadata-less
polling gets; abandon_get(key) and request-scoped cleanup of an aborted request's chunk keys."""
import os
import struct
import subprocess
import sys

import msgpack
import pytest

import vllm_flow as flow
from omniconn.vllm_omni import OmniconnConnector

HERE = os.path.dirname(os.path.abspath(__file__))


class Stage:
    def __init__(self, cfg):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "vllm_flow.py"), msgpack.packb(cfg).hex()],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ))
        assert self.recv()["ready"]

    def recv(self):
        head = self.proc.stdout.read(4)
        assert len(head) == 4, "the stage process died"
        return msgpack.unpackb(self.proc.stdout.read(struct.unpack("<I", head)[0]), raw=False)

    def call(self, **req):
        data = msgpack.packb(req, use_bin_type=True)
        self.proc.stdin.write(struct.pack("<I", len(data)) + data)
        self.proc.stdin.flush()
        return self.recv()

    def close(self):
        if self.proc.poll() is None:
            self.call(op="health")
            data = msgpack.packb({"op": "exit"})
            self.proc.stdin.write(struct.pack("<I", len(data)) + data)
            self.proc.stdin.flush()
            self.proc.wait(20)


def _edge(protocol, channel):
    if protocol == "shm":
        extra = {"protocol": "shm", "channel": channel, "role": "dual"}
        return OmniconnConnector(dict(extra, stage_id=0)), dict(extra, stage_id=1)
    tx = OmniconnConnector({"protocol": "tcp", "role": "sender", "host": "127.0.0.1", "stage_id": 0})
    info = tx.get_connection_info()
    return tx, {"protocol": "tcp", "role": "receiver", "stage_id": 1, "sender_host": info["host"],
                "sender_zmq_port": info["zmq_port"]}


@pytest.mark.parametrize("protocol", ["shm", "tcp"])
def test_orchestrator_and_chunk_adapter_sequence_across_processes(protocol, channel):
    tx, rx_cfg = _edge(protocol, channel)
    # vLLM-Omni hands the connector {"extra": ..., "stage_id": ...} in places: the same works
    stage = Stage({"extra": rx_cfg, "stage_id": 1})
    try:
        assert tx.stage_id == 0
        # the orchestrator: put the request's dict, forward the metadata, the stage gets it
        for i, rid in enumerate(["req-%s-%d" % (protocol, i) for i in range(4)]):
            payload = flow.orchestrator_payload(rid, i)
            ok, size, md = tx.put("0", "1", rid, payload)
            assert ok and size > 16000 * 4
            r = stage.call(op="orchestrator", rid=rid, connector_metadata=md, wrapped=bool(i % 2))
            assert r["ok"], r
            want = flow.describe_orchestrator(payload)
            want["sp"]["output_kind"] = int(want["sp"]["output_kind"])
            assert r["desc"] == want
            assert r["desc"]["image_type"] == "Tensor"
        # the chunk adapter: keyed chunk puts, metadata-less polling on the other side
        rid = "chunked-%s" % protocol
        sent = []
        for n in range(5):
            p = flow.chunk_payload(n, n == 4, 7)
            ok, size, md = tx.put("0", "1", "%s_0_%d" % (rid, n), p)
            assert ok
            sent.append({"codes": flow.sha(p.codes["audio"]), "hidden": flow.sha(p.hidden), "finished": n == 4})
        r = stage.call(op="chunks", rid=rid)
        assert r["chunks"] == sent
        assert r["health"]["get_failures"] == 0
        # an aborted request: the stage abandons, the sender drops every chunk key of it, and
        # only of it (abort-1 is not a prefix match of abort-10)
        for n in range(3):
            assert tx.put("0", "1", "abort-1_0_%d" % n, flow.chunk_payload(n, False, 1))[0]
        assert tx.put("0", "1", "abort-10_0_0", flow.chunk_payload(0, True, 2))[0]
        assert stage.call(op="abandon", key="abort-1_0_0")["ok"]
        assert tx.cleanup("abort-1") is True
        left = [k for _, _, k in tx._conn.list()]
        assert not [k for k in left if k.startswith("abort-1_")], left
        assert "abort-10_0_0" in left
        assert tx.cleanup("abort-1") is False
        r = stage.call(op="chunks", rid="abort-10")
        assert len(r["chunks"]) == 1 and r["chunks"][0]["finished"]
    finally:
        stage.close()
        tx.close()
