"""OmniconnRelay through sglang-omni's own relay code and tests, from a copy of its public source.

usage: SGLANG_OMNI_SRC=/path/to/sglang-omni OMNICONN_LIBRARY=build/libomniconn.so \\
           python3 tests/python/sglang_omni_real.py
Not part of CI (sglang-omni is not packaged for Debian). Its package __init__ files import every
relay backend and the rest of the runtime, so the packages sglang_omni, sglang_omni.relay and
tests are made as empty namespace modules over the source directories (their __init__ code is
skipped) and sglang-omni's own modules then run unchanged: sglang_omni/relay/base.py (Relay,
RelayOperation, register_relay, create_relay, CreditAllocator), relay/shm.py and relay/nixl.py
(imported by its tests; nixl itself is absent, which nixl.py tolerates), and
tests/test_relay_unified.py. Nothing of sglang-omni is replaced; no third-party stand-in is needed
(it imports torch, numpy and pytest, which Debian has).

What runs: importing omniconn.sglang_omni registers "omniconn" with sglang-omni's register_relay
and derives OmniconnRelay from its Relay (the operations from its RelayOperation); its
create_relay builds the relay from the keyword arguments its multiprocess test passes; the
methods of its TestRelayUnified (test_transfer, test_two_senders_one_receiver, test_health,
test_cleanup) run with OmniconnRelay as the relay class, over SHM and over TCP; one hop of its
pipeline runs in its own code (sglang_omni/pipeline/worker/data_plane.py's DataPlaneAdapter writes
and reads a StagePayload with tensors through the relay, its DataReadyMessage through
pipeline/control_plane.py's msgpack serialization; both stages in this process, since that
adapter pickles the payload's non-tensor part into the message). Its multiprocess
test is not run: it hands metadata and payloads between processes through multiprocessing queues
and pickle, which this project never does; tests/python/test_sglang_relay.py replays its call
sequence with msgpack instead. Prints one line per check and the revision when the source is a
git checkout (or SGLANG_OMNI_REV).
"""
import asyncio
import importlib
import os
import subprocess
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))


def load_sglang_omni(src):
    for name, rel in (("sglang_omni", "sglang_omni"), ("sglang_omni.relay", "sglang_omni/relay"), ("tests", "tests")):
        m = types.ModuleType(name)
        m.__path__ = [os.path.join(src, rel)]
        sys.modules[name] = m
    base = importlib.import_module("sglang_omni.relay.base")
    importlib.import_module("sglang_omni.relay.shm")
    unified = importlib.import_module("tests.test_relay_unified")
    return base, unified


def load_data_plane(src):
    """sglang-omni's DataPlaneAdapter and its control plane's message (de)serialization. pyzmq is
    imported by control_plane.py but unused by the two functions taken from it: where Debian's
    python3-zmq is absent it gets an empty stand-in (third-party, not sglang-omni's)."""
    for name, rel in (("sglang_omni.pipeline", "sglang_omni/pipeline"),
                      ("sglang_omni.pipeline.worker", "sglang_omni/pipeline/worker")):
        m = types.ModuleType(name)
        m.__path__ = [os.path.join(src, rel)]
        sys.modules[name] = m
    try:
        import zmq  # noqa: F401
        import zmq.asyncio  # noqa: F401
    except ImportError:
        def names(mod):     # any attribute (Context, Socket, ...) is a placeholder class: only annotated
            mod.__getattr__ = lambda name: type(name, (), {})
            return mod
        zmq = names(types.ModuleType("zmq"))
        zmq.__path__ = []
        sys.modules["zmq"], sys.modules["zmq.asyncio"] = zmq, names(types.ModuleType("zmq.asyncio"))
        zmq.asyncio = sys.modules["zmq.asyncio"]
    proto = importlib.import_module("sglang_omni.proto")
    cp = importlib.import_module("sglang_omni.pipeline.control_plane")
    dp = importlib.import_module("sglang_omni.pipeline.worker.data_plane")
    return proto, cp, dp


async def stage_hop(proto, cp, dp, sender, receiver):
    """One hop of sglang-omni's pipeline, in its own code: the upstream stage's DataPlaneAdapter
    writes a StagePayload (tensors through the relay), the DataReadyMessage with the relay's
    metadata goes through the control plane's msgpack serialization, the downstream stage's
    adapter reads the payload back."""
    import torch
    hidden = torch.randn(3, 1024, dtype=torch.float32)
    codes = torch.arange(4096, dtype=torch.int64).reshape(64, 64)
    mask = torch.randn(257, dtype=torch.float32).to(torch.bfloat16)
    payload = proto.StagePayload(request_id="req-1", request=proto.OmniRequest(inputs="hello"),
                                 data={"hidden": hidden, "aux": [codes, {"mask": mask}], "step": 3})
    meta, op = await dp.DataPlaneAdapter(sender).write_payload("req-1", payload)
    wire = cp.serialize_message(proto.DataReadyMessage(request_id="req-1", from_stage="a", to_stage="b",
                                                       shm_metadata=meta))
    msg = cp.deserialize_message(wire)
    got = await dp.DataPlaneAdapter(receiver).read_payload("req-1", msg.shm_metadata)
    await op.wait_for_completion(timeout=30)
    ok = (torch.equal(got.data["hidden"], hidden) and torch.equal(got.data["aux"][0], codes)
          and torch.equal(got.data["aux"][1]["mask"], mask) and got.data["step"] == 3)
    return ok, len(wire)


def revision(src):
    rev = os.environ.get("SGLANG_OMNI_REV")
    if rev:
        return rev
    try:
        return subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:
        return "unknown"


def main():
    src = os.environ.get("SGLANG_OMNI_SRC")
    if not src:
        print(__doc__)
        return 2
    base, unified = load_sglang_omni(src)
    from omniconn import sglang_omni as ours
    from omniconn.sglang_omni import OmniconnRelay, OmniconnGetOperation, OmniconnPutOperation
    failures = 0

    def check(what, ok):
        nonlocal failures
        failures += not ok
        print("%s: %s" % ("ok  " if ok else "FAIL", what))

    print("sglang-omni revision %s" % revision(src))
    check("registered as 'omniconn' with sglang-omni's register_relay",
          ours.registered and base.RELAY_REGISTRY.get("omniconn") is OmniconnRelay)
    check("OmniconnRelay derives from sglang-omni's Relay, its operations from RelayOperation",
          issubclass(OmniconnRelay, base.Relay) and issubclass(OmniconnPutOperation, base.RelayOperation)
          and issubclass(OmniconnGetOperation, base.RelayOperation))
    relay = base.create_relay("omniconn", engine_id="worker0", device="cpu", credits=4, slot_size_mb=1,
                              worker_id="worker0", master_addr="127.0.0.1", master_port="29500", gpu_id=0)
    check("sglang-omni's create_relay builds it from its multiprocess test's kwargs (protocol %s)" % relay.protocol,
          isinstance(relay, OmniconnRelay) and relay.engine_id == "worker0")
    relay.close()

    class OmniconnRelayTcp(OmniconnRelay):
        """The same relay with TCP chosen (sglang-omni's tests pass only a name and a device)."""

        def __init__(self, engine_id, device="cpu"):
            super().__init__(engine_id, device=device, protocol="tcp", host="127.0.0.1")

    for cls in (OmniconnRelay, OmniconnRelayTcp):
        proto = "tcp" if cls is OmniconnRelayTcp else "shm"
        t = unified.TestRelayUnified()
        two = [("worker0", "cpu"), ("worker1", "cpu")]
        three = two + [("worker2", "cpu")]
        for name, run in (("test_transfer", lambda: asyncio.run(t.test_transfer(cls, two))),
                          ("test_two_senders_one_receiver",
                           lambda: asyncio.run(t.test_two_senders_one_receiver(cls, three))),
                          ("test_health", lambda: t.test_health(cls, two)),
                          ("test_cleanup", lambda: t.test_cleanup(cls, two))):
            try:
                run()
                check("sglang-omni's TestRelayUnified.%s over %s" % (name, proto), True)
            except BaseException as e:      # pytest's skip/fail are BaseExceptions
                check("sglang-omni's TestRelayUnified.%s over %s: %s: %s" % (name, proto, type(e).__name__, e), False)
    proto, cp, dp = load_data_plane(src)
    for proto_name in ("shm", "tcp"):
        kw = {"protocol": proto_name, "host": "127.0.0.1"} if proto_name == "tcp" else {"protocol": "shm"}
        tx = base.create_relay("omniconn", engine_id="stage_a", device="cpu", slot_size_mb=64, credits=2, **kw)
        rx = base.create_relay("omniconn", engine_id="stage_b", device="cpu", slot_size_mb=64, credits=2, **kw)
        try:
            ok, n = asyncio.run(stage_hop(proto, cp, dp, tx, rx))
            check("sglang-omni's DataPlaneAdapter write/read of a StagePayload with 3 tensors, its DataReadyMessage "
                  "through its control plane's msgpack (%d bytes), over %s" % (n, proto_name), ok)
        except BaseException as e:
            check("sglang-omni's DataPlaneAdapter over %s: %s: %s" % (proto_name, type(e).__name__, e), False)
        finally:
            tx.close()
            rx.close()
    print("sglang-omni-real: %s" % ("ok" if not failures else "%d failed" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
