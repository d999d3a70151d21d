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
test_cleanup) run with OmniconnRelay as the relay class, over SHM and over TCP. Its multiprocess
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
    print("sglang-omni-real: %s" % ("ok" if not failures else "%d failed" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
