"""vLLM-Omni's call sequence, replayed: the shapes of what its orchestrator and its chunk transfer
adapter put, and a stage process that receives them the way vLLM-Omni's code does.

The objects are real dataclasses shaped like vLLM-Omni's (a SamplingParams-like set of fields with
an enum and nested lists; OmniPayloadStruct/MetaStruct-like chunk payloads with tensors inside).
The stage side (run as `python3 vllm_flow.py HEX-CONFIG`, spoken to in length-prefixed msgpack on
stdin/stdout) does what vLLM-Omni's try_recv_via_connector and the chunk adapter's
_poll_single_request do: a get with the connector metadata the orchestrator forwarded (plain or
wrapped as {request_id: metadata}), and metadata-less polling gets of "{rid}_{stage-1}_{n}" keys
until a chunk's meta says finished; abandon_get(key) for an aborted request.
"""
import dataclasses
import enum
import hashlib
import os
import struct
import sys
import time

import msgpack

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import numpy as np          # noqa: E402
import torch                # noqa: E402


class OutputKind(enum.IntEnum):
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


@dataclasses.dataclass
class SamplingParamsLike:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 16
    stop: list = dataclasses.field(default_factory=list)
    stop_token_ids: list = dataclasses.field(default_factory=list)
    output_kind: OutputKind = OutputKind.CUMULATIVE
    logit_bias: dict = None
    seed: int = None


@dataclasses.dataclass
class MetaLike:
    finished: torch.Tensor = None
    is_segment_finished: torch.Tensor = None


@dataclasses.dataclass
class PayloadLike:
    codes: dict = None
    hidden: torch.Tensor = None
    meta: MetaLike = None


def sha(x):
    if isinstance(x, torch.Tensor):
        x = x.contiguous().view(torch.uint8).numpy().tobytes() if x.numel() else b""
    elif isinstance(x, np.ndarray):
        x = np.ascontiguousarray(x).tobytes()
    return hashlib.sha256(bytes(x)).hexdigest()


def orchestrator_payload(rid, seed):
    """What try_send_via_connector puts: a dict around engine inputs, sampling params, metadata."""
    g = torch.Generator().manual_seed(seed)
    return {
        "request_id": rid,
        "engine_inputs": {"prompt_token_ids": list(range(seed, seed + 50)),
                          "multi_modal_data": {"image": torch.rand((3, 64, 64), generator=g),
                                               "audio": np.arange(seed, seed + 16000, dtype=np.float32)}},
        "sampling_params_list": [SamplingParamsLike(temperature=0.7, max_tokens=128, stop=["</s>"],
                                                    stop_token_ids=[2, 3], output_kind=OutputKind.DELTA,
                                                    logit_bias={"5": -1.0}, seed=seed)],
        "metadata": {"from_stage": 0, "to_stage": 1, "sent_ts": 1.5, "ids": (1, 2)},
    }


def chunk_payload(n, last, seed):
    g = torch.Generator().manual_seed(seed * 100 + n)
    return PayloadLike(codes={"audio": torch.randint(0, 4096, (8, 32), generator=g)},
                       hidden=torch.rand((4, 256), generator=g),
                       meta=MetaLike(finished=torch.tensor(last, dtype=torch.bool),
                                     is_segment_finished=torch.tensor(last, dtype=torch.bool)))


def describe_orchestrator(p):
    sp = p["sampling_params_list"][0]
    return {"rid": p["request_id"], "ids": p["engine_inputs"]["prompt_token_ids"],
            "image": sha(p["engine_inputs"]["multi_modal_data"]["image"]),
            "image_type": type(p["engine_inputs"]["multi_modal_data"]["image"]).__name__,
            "audio": sha(p["engine_inputs"]["multi_modal_data"]["audio"]),
            "sp": {k: (int(v) if isinstance(v, enum.Enum) else v) for k, v in
                   (sp.items() if isinstance(sp, dict) else dataclasses.asdict(sp).items())},
            "metadata": {k: list(v) if isinstance(v, tuple) else v for k, v in p["metadata"].items()}}


def describe_chunk(p):
    return {"codes": sha(p["codes"]["audio"]), "hidden": sha(p["hidden"]),
            "finished": bool(p["meta"]["finished"])}


# ---- the stage process ---------------------------------------------------------------------------
def _recv(inp):
    head = inp.read(4)
    if len(head) < 4:
        return None
    return msgpack.unpackb(inp.read(struct.unpack("<I", head)[0]), raw=False)


def _send(out, obj):
    data = msgpack.packb(obj, use_bin_type=True)
    out.write(struct.pack("<I", len(data)) + data)
    out.flush()


def stage_main(cfg):
    from omniconn.vllm_omni import OmniconnConnector
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    conn = OmniconnConnector(cfg)
    stage_id = conn.stage_id
    _send(out, {"ready": True})
    while True:
        req = _recv(inp)
        if req is None or req["op"] == "exit":
            break
        if req["op"] == "orchestrator":          # try_recv_via_connector
            md = req["connector_metadata"]
            if req.get("wrapped"):
                md = {req["rid"]: md}
            r = conn.get(str(stage_id - 1), str(stage_id), req["rid"], metadata=md)
            t0 = time.monotonic()
            while r is None and time.monotonic() - t0 < 20:   # a remote get may need a second try
                time.sleep(0.001)
                r = conn.get(str(stage_id - 1), str(stage_id), req["rid"], metadata=md)
            _send(out, {"ok": r is not None, "desc": describe_orchestrator(r[0]) if r else None})
        elif req["op"] == "chunks":              # the chunk adapter's polling loop
            rid, chunk, got, polls = req["rid"], 0, [], 0
            t0 = time.monotonic()
            while time.monotonic() - t0 < 30:
                key = "%s_%d_%d" % (rid, stage_id - 1, chunk)
                r = conn.get(str(stage_id - 1), str(stage_id), key)
                polls += 1
                if r is None:
                    time.sleep(0.001)
                    continue
                payload, size = r
                meta = payload.get("meta", {})
                got.append(describe_chunk(payload))
                chunk += 1
                if bool(meta.get("finished")):
                    break
            _send(out, {"chunks": got, "polls": polls, "health": conn.health()})
        elif req["op"] == "abandon":
            _send(out, {"ok": True, "dropped": conn.abandon_get(req["key"])})
        elif req["op"] == "health":
            _send(out, {"health": conn.health()})
    conn.close()


if __name__ == "__main__":
    stage_main(msgpack.unpackb(bytes.fromhex(sys.argv[1]), raw=False))
