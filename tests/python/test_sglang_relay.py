"""OmniconnRelay driven the way sglang-omni drives a relay, across two processes, over SHM and TCP.

The call sequences are those of sglang-omni's relay tests (tests/test_relay_unified.py and
tests/test_relay_unified_multiprocess.py): create_relay by name with the pipeline's keyword
arguments, put_async of a tensor, the operation's metadata handed to the other process (here in
msgpack frames), get_async into a dest tensor the receiver allocated from the metadata's size,
wait_for_completion on both sides, cleanup(request_id) after each transfer, close. Beyond them:
fp16/bf16/int/bool tensors of several shapes, many in flight, timeouts, an abort with cleanup,
close twice, killed peers, mismatched dest tensors, a full pool, and the event loop kept free
during 64 MiB transfers (a ticker task counts loop turns while the transfer runs).
"""
import asyncio
import os
import signal
import struct
import subprocess
import sys

import msgpack
import pytest
import torch

import omniconn
from omniconn import sglang_omni
from omniconn.sglang_omni import OmniconnRelay, RelayMismatchError, create_relay
from relay_peer import digest, make_tensor

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20

SPECS = [("float16", [1024], 1), ("bfloat16", [1000], 2), ("bfloat16", [4, 256, 128], 3), ("float32", [3, 5, 7], 4),
         ("int64", [100000], 5), ("int32", [17, 33], 6), ("int8", [4099], 7), ("uint8", [1], 8), ("bool", [64], 9),
         ("float16", [], 10), ("float32", [0], 11), ("float32", [512, 1024], 12)]


class Peer:
    """relay_peer.py in another process."""

    def __init__(self, **cfg):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "relay_peer.py"), msgpack.packb(cfg).hex()],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ))
        hello = self.recv()
        assert hello and hello["ready"], "the relay peer did not start"
        self.pid = hello["pid"]

    def recv(self):
        head = self.proc.stdout.read(4)
        if len(head) < 4:
            return None
        return msgpack.unpackb(self.proc.stdout.read(struct.unpack("<I", head)[0]), raw=False)

    def call(self, **req):
        data = msgpack.packb(req, use_bin_type=True)
        self.proc.stdin.write(struct.pack("<I", len(data)) + data)
        self.proc.stdin.flush()
        out = self.recv()
        assert out is not None, "the relay peer died"
        return out

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def close(self):
        if self.proc.poll() is None:
            try:
                self.call(op="exit")
            except (AssertionError, BrokenPipeError):
                pass
            self.proc.wait(30)
        return self.proc.returncode


def _cfg(protocol, channel, **kw):
    cfg = {"protocol": protocol, "device": "cpu", "credits": 4, "slot_size_mb": 1}    # sglang-omni's test kwargs
    if protocol == "shm":
        cfg["channel"] = channel
    else:
        cfg["host"] = "127.0.0.1"
    cfg.update(kw)
    return cfg


@pytest.fixture
def pair(channel):
    """(relay here, start(**cfg) -> Peer) for a protocol; everything closed at the end."""
    made = []

    def start(protocol, **kw):
        here = create_relay("omniconn", engine_id="worker0", **_cfg(protocol, channel, **kw))
        peer = Peer(engine_id="worker1", **_cfg(protocol, channel))
        made.append((here, peer))
        return here, peer
    yield start
    for here, peer in made:
        peer.close()
        here.close()


def _wire(md):
    """The metadata as it reaches another process through a msgpack control plane."""
    return msgpack.unpackb(msgpack.packb(md, use_bin_type=True), raw=False)


PROTOCOLS = ["shm", "tcp"]


# ---- the unified tests' sequence ------------------------------------------------------------------
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_tensors_of_every_dtype_and_shape_cross_in_both_directions(protocol, pair):
    here, peer = pair(protocol)
    # peer -> here: put_async there, get_async here into dest tensors of the put's dtype and shape
    specs = [[d, s, seed, "req_%d" % i] for i, (d, s, seed) in enumerate(SPECS)]
    got = peer.call(op="put", specs=specs)
    assert got["ok"], got

    async def receive():
        out = []
        for (d, s, seed, rid), item in zip(specs, got["items"]):
            md = item["meta"]
            assert md["transfer_info"]["size"] == make_tensor(d, tuple(s), seed).numel() * \
                make_tensor(d, tuple(s), seed).element_size()
            dest = torch.zeros(tuple(s), dtype=getattr(torch, d))
            op = await here.get_async(md, dest, request_id=rid)
            await op.wait_for_completion(timeout=30)
            out.append(digest(dest))
            assert torch.equal(dest, make_tensor(d, tuple(s), seed))
        return out
    assert asyncio.run(receive()) == [i["sha"] for i in got["items"]]
    waited = peer.call(op="wait_put", keys=[i["meta"]["transfer_info"]["key"] for i in got["items"]], timeout=30)
    assert waited["errors"] == [None] * len(specs)          # every put was taken

    # here -> peer: the peer allocates its dest from the metadata and compares digests
    async def send():
        ops = [await here.put_async(make_tensor(d, tuple(s), seed), request_id=rid) for d, s, seed, rid in specs]
        return ops, [[_wire(o.metadata), d, s] for o, (d, s, _, _) in zip(ops, specs)]
    ops, items = asyncio.run(send())
    back = peer.call(op="get", items=items)
    assert [i.get("sha") for i in back["items"]] == [digest(make_tensor(d, tuple(s), seed)) for d, s, seed, _ in specs]

    async def done():
        for o in ops:
            await o.wait_for_completion(timeout=30)
    asyncio.run(done())
    assert here.pending() == {}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_serialized_bytes_in_a_uint8_tensor_as_sglang_omnis_multiprocess_test_sends(protocol, pair):
    """Five transfers: a uint8 transport tensor sliced to each payload's length, the receiver
    sizing its uint8 dest from metadata["transfer_info"]["size"], cleanup(req_id) on both sides."""
    here, peer = pair(protocol)
    transport = torch.zeros(200000 + 4096, dtype=torch.uint8)

    async def run():
        for i in range(5):
            data = make_tensor("bfloat16", (100000,), 100 + i)
            raw = data.view(torch.uint8)
            transport[:raw.numel()].copy_(raw)
            op = await here.put_async(transport[:raw.numel()], request_id="req_%d" % i, dst_rank=1)
            md = _wire(op.metadata)
            size = md["transfer_info"]["size"]
            back = peer.call(op="get", items=[[md, "uint8", [size]]])
            assert back["items"][0].get("sha") == digest(data), back
            await op.wait_for_completion()
            assert here.cleanup("req_%d" % i) == 0          # taken already: nothing left to drop
    asyncio.run(run())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_many_transfers_in_flight_at_once(protocol, pair):
    here, peer = pair(protocol)
    n = 64
    specs = [("bfloat16" if i % 3 else "int32", [i + 1, 1000 + 37 * i], 1000 + i) for i in range(n)]

    async def put_all():
        return await asyncio.gather(*(here.put_async(make_tensor(d, tuple(s), seed), request_id="inflight_%d" % i)
                                      for i, (d, s, seed) in enumerate(specs)))
    ops = asyncio.run(put_all())
    assert len(here.pending()) == n
    back = peer.call(op="get", items=[[_wire(o.metadata), d, s] for o, (d, s, _) in zip(ops, specs)])
    assert [i.get("sha") for i in back["items"]] == [digest(make_tensor(d, tuple(s), seed)) for d, s, seed in specs]

    async def wait_all():
        await asyncio.gather(*(o.wait_for_completion(timeout=30) for o in ops))
    asyncio.run(wait_all())
    assert here.pending() == {}
    assert here.health()["omc_live_entries"] == 0

    # and the other way: the peer puts them all at once, this side gets them all at once
    got = peer.call(op="put", specs=[[d, s, seed, "back_%d" % i] for i, (d, s, seed) in enumerate(specs)])

    async def get_all():
        dests = [torch.zeros(tuple(s), dtype=getattr(torch, d)) for d, s, _ in specs]
        gops = [await here.get_async(i["meta"], dst) for i, dst in zip(got["items"], dests)]
        await asyncio.gather(*(g.wait_for_completion(timeout=30) for g in gops))
        return [digest(x) for x in dests]
    assert asyncio.run(get_all()) == [i["sha"] for i in got["items"]]


# ---- what the relay promises beyond the happy path ----------------------------------------------------
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_dest_tensor_that_does_not_fit_is_refused_and_left_untouched(protocol, pair):
    here, peer = pair(protocol)
    got = peer.call(op="put", specs=[["float16", [64, 32], 7, "mm"]])
    md = got["items"][0]["meta"]

    async def run():
        for dest in (torch.full((64, 32), 7, dtype=torch.float32),      # dtype
                     torch.full((32, 64), 7, dtype=torch.float16),      # shape
                     torch.full((64, 33), 7, dtype=torch.float16),      # size
                     torch.full((4095,), 7, dtype=torch.uint8)):        # bytes, one short
            before = dest.clone()
            with pytest.raises(RelayMismatchError) as e:
                await here.get_async(md, dest)
            assert "float16[64, 32]" in str(e.value) and "untouched" in str(e.value)
            assert torch.equal(dest, before)
        # metadata whose size lies (dest sized to the lie): the payload is refused at the transfer
        lie = _wire(md)
        lie["transfer_info"]["size"] = 4096 + 2
        lie["transfer_info"]["shape"] = [2049]
        dest = torch.full((2049,), 3, dtype=torch.float16)
        op = await here.get_async(lie, dest)
        with pytest.raises(RelayMismatchError, match="holds 4096 bytes but its metadata says 4098"):
            await op.wait_for_completion(timeout=30)
        assert torch.equal(dest, torch.full((2049,), 3, dtype=torch.float16))
        lie["transfer_info"]["shape"] = [4096]          # size and shape disagree: refused at once
        with pytest.raises(ValueError, match="does not match"):
            await here.get_async(lie, torch.zeros(2049, dtype=torch.float16))
        for bad in ({}, {"transfer_info": {"size": 1}}, {"transfer_info": {"key": 1, "omc": b"", "size": 0,
                                                                              "dtype": "object", "shape": []}}):
            with pytest.raises(ValueError, match="not an omniconn relay's metadata"):
                await here.get_async(bad, torch.zeros(1))
    asyncio.run(run())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_waits_honour_their_timeouts(protocol, pair):
    here, peer = pair(protocol)

    async def run():
        op = await here.put_async(make_tensor("float32", (1000,), 1), request_id="nobody_reads")
        with pytest.raises(TimeoutError, match="not taken by a receiver"):
            await op.wait_for_completion(timeout=0.2)
        assert here.pending() == {"nobody_reads": 1}
        assert here.cleanup("nobody_reads") == 1
        await op.wait_for_completion(timeout=5)         # dropped: the put is over
        # a get of a payload the sender no longer has (dropped) fails with the library's reason
        md = _wire(op.metadata)
        md["transfer_info"]["key"] = "never.put"
        md["transfer_info"]["omc"] = md["transfer_info"]["omc"]
        g = await here.get_async(_wire(op.metadata), torch.zeros(1000))
        with pytest.raises((omniconn.OmniconnError, TimeoutError)):
            await g.wait_for_completion(timeout=2)
    asyncio.run(run())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_aborted_request_is_cleaned_up_on_both_sides(protocol, pair):
    here, peer = pair(protocol)

    async def run():
        aborted = [await here.put_async(make_tensor("bfloat16", (4096,), i), request_id="req-abort") for i in range(3)]
        keep = await here.put_async(make_tensor("bfloat16", (4096,), 9), request_id="req-abort-not")
        assert here.pending() == {"req-abort": 3, "req-abort-not": 1}
        assert here.cleanup("req-abort") == 3
        assert here.cleanup("req-abort") == 0 and here.cleanup("unknown") == 0
        for o in aborted:
            await o.wait_for_completion(timeout=5)
        back = peer.call(op="get", items=[[_wire(aborted[0].metadata), "bfloat16", [4096]],
                                          [_wire(keep.metadata), "bfloat16", [4096]]], timeout=5)
        assert "error" in back["items"][0], back        # dropped here: the peer cannot have it
        assert back["items"][1]["sha"] == digest(make_tensor("bfloat16", (4096,), 9))
        await keep.wait_for_completion(timeout=30)
        assert here.health()["omc_live_entries"] == 0
        # the receiving side: a prepared get of an aborted request is cancelled, dest untouched
        got = peer.call(op="put", specs=[["int64", [1000], 5, "req-abort-2"]])
        dest = torch.full((1000,), -1, dtype=torch.int64)
        g = await here.get_async(got["items"][0]["meta"], dest, request_id="req-abort-2")
        here.cleanup("req-abort-2")
        with pytest.raises(RuntimeError, match="cancelled"):
            await g.wait_for_completion(timeout=5)
        assert torch.equal(dest, torch.full((1000,), -1, dtype=torch.int64))
        assert peer.call(op="cleanup", request_id="req-abort-2")["dropped"] == 1
    asyncio.run(run())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_close_twice_and_calls_after_close(protocol, channel):
    relay = create_relay("omniconn", **_cfg(protocol, channel))

    async def run():
        op = await relay.put_async(torch.ones(10), request_id="r")
        relay.close()
        relay.close()
        with pytest.raises(omniconn.ClosedError):
            await relay.put_async(torch.ones(10))
        with pytest.raises(omniconn.ClosedError):
            await relay.get_async(op.metadata, torch.zeros(10))
        assert relay.cleanup("r") == 0
        await op.wait_for_completion(timeout=1)       # nothing is held any more
    asyncio.run(run())
    relay.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_killed_sender_gives_an_error_or_its_intact_payload_never_a_hang(protocol, pair):
    here, peer = pair(protocol)
    got = peer.call(op="put", specs=[["float32", [256, 1024], 3, "orphan"]])
    peer.kill()

    async def run():
        dest = torch.zeros((256, 1024))
        op = await here.get_async(got["items"][0]["meta"], dest)
        try:
            await op.wait_for_completion(timeout=5)
        except (omniconn.OmniconnError, TimeoutError):
            return "error"
        assert digest(dest) == got["items"][0]["sha"]      # SHM: the segment outlives its writer
        return "payload"
    outcome = asyncio.run(run())
    assert outcome == ("error" if protocol == "tcp" else outcome)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_killed_receiver_leaves_a_put_that_times_out_and_cleans_up(protocol, pair):
    here, peer = pair(protocol)
    peer.kill()

    async def run():
        op = await here.put_async(make_tensor("float16", (1 << 20,), 1), request_id="dead-reader")
        with pytest.raises(TimeoutError):
            await op.wait_for_completion(timeout=0.3)
        assert here.cleanup("dead-reader") == 1
        assert here.health()["omc_live_entries"] == 0
    asyncio.run(run())


async def _ticking(coro_fn):
    """Run coro_fn() beside a ticker task; (result, loop turns the ticker got while it ran)."""
    ticks = 0
    stop = False

    async def ticker():
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0)
    t = asyncio.ensure_future(ticker())
    await asyncio.sleep(0)
    start = ticks
    try:
        result = await coro_fn()
    finally:
        during = ticks - start
        stop = True
        await t
    return result, during


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_event_loop_keeps_turning_during_64_MiB_transfers(protocol, pair):
    """A relay that ran the copy or the library call on the loop's thread would give the ticker
    one or two turns per transfer; at least one turn per MiB moved is asked for."""
    here, peer = pair(protocol)
    big = make_tensor("float16", (32 * MiB,), 64)        # 64 MiB

    async def run():
        op, put_ticks = await _ticking(lambda: here.put_async(big, request_id="big-out"))
        back = peer.call(op="get", items=[[_wire(op.metadata), "float16", [32 * MiB]]], timeout=120)
        assert back["items"][0].get("sha") == digest(big), back
        await op.wait_for_completion(timeout=60)
        got = peer.call(op="put", specs=[["float16", [32 * MiB], 65, "big-in"]])
        dest = torch.zeros(32 * MiB, dtype=torch.float16)

        async def get():
            g = await here.get_async(got["items"][0]["meta"], dest)
            await g.wait_for_completion(timeout=120)
        _, get_ticks = await _ticking(get)
        assert digest(dest) == got["items"][0]["sha"]
        return put_ticks, get_ticks
    put_ticks, get_ticks = asyncio.run(run())
    assert put_ticks >= 64 and get_ticks >= 64, (put_ticks, get_ticks)


# ---- pool tensors and back-pressure ------------------------------------------------------------------
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_pool_tensor_is_put_without_a_copy_and_arrives(protocol, pair):
    here, peer = pair(protocol)
    src = make_tensor("bfloat16", (8, 4096), 21)

    async def run():
        pt = here.alloc((8, 4096), torch.bfloat16)
        pt.tensor.copy_(src)                    # filled in place
        op = await here.put_async(pt)
        back = peer.call(op="get", items=[[_wire(op.metadata), "bfloat16", [8, 4096]]])
        assert back["items"][0]["sha"] == digest(src)
        await op.wait_for_completion(timeout=30)
        held = here.alloc((4,), torch.float32)
        view = held.tensor
        with pytest.raises(BufferError):        # a view still alive: the relay would own bytes it can see
            await here.put_async(held)
        del view
        await here.put_async(held)
    asyncio.run(run())


def test_a_full_pool_makes_a_put_wait_then_fail_and_space_coming_back_lets_it_in(pair):
    here, peer = pair("shm", memory_pool_size=8 * MiB, alloc_timeout=0.3)

    async def run():
        first = await here.put_async(make_tensor("uint8", (6 * MiB,), 1), request_id="a")
        with pytest.raises(omniconn.OmniconnTimeout) as e:      # the bounded wait ran out
            await here.put_async(make_tensor("uint8", (6 * MiB,), 2), request_id="b")
        assert "no pool space within alloc_timeout" in str(e.value) and "raise memory_pool_size" in str(e.value)
        assert here.pending() == {"a": 1}              # the refused put left nothing behind
        here.alloc_timeout = 60
        second = asyncio.ensure_future(here.put_async(make_tensor("uint8", (6 * MiB,), 2), request_id="b"))
        await asyncio.sleep(0)
        back = await asyncio.get_running_loop().run_in_executor(
            None, lambda: peer.call(op="get", items=[[_wire(first.metadata), "uint8", [6 * MiB]]]))
        assert back["items"][0]["sha"] == digest(make_tensor("uint8", (6 * MiB,), 1))
        op = await second                      # got in once the first payload's space came back
        back = peer.call(op="get", items=[[_wire(op.metadata), "uint8", [6 * MiB]]])
        assert back["items"][0]["sha"] == digest(make_tensor("uint8", (6 * MiB,), 2))
    asyncio.run(run())


# ---- the factory --------------------------------------------------------------------------------------
def test_create_relay_takes_sglang_omnis_pipeline_kwargs_and_refuses_unknown_types(channel):
    kwargs = {"engine_id": "worker0", "device": "cpu", "credits": 4, "slot_size_mb": 1, "worker_id": "worker0",
              "master_addr": "127.0.0.1", "master_port": "29500", "gpu_id": 0, "protocol": "shm", "channel": channel}
    relay = create_relay("omniconn", **kwargs)
    try:
        assert isinstance(relay, OmniconnRelay) and relay.engine_id == "worker0" and relay.device == "cpu"
        assert relay.protocol == "shm"
        relay.cleanup("test_request_id")                # sglang-omni's test_cleanup
        assert isinstance(relay.health(), dict)         # its test_health
    finally:
        relay.close()
    if not sglang_omni.registered:
        with pytest.raises(ValueError, match="Unknown relay type"):
            create_relay("nixl", engine_id="x")


def test_settings_come_from_the_environment_when_sglang_omnis_stage_passes_only_its_own_keys(monkeypatch):
    """sglang-omni's stage runtime calls create_relay(relay_type, engine_id=..., slot_size_mb=...,
    credits=..., device=..., rank=..., world_size=..., send_to_ranks=..., recv_from_ranks=...)."""
    stage_kwargs = {"engine_id": "thinker_relay", "slot_size_mb": 64, "credits": 2, "device": "cpu", "rank": None,
                    "world_size": None, "send_to_ranks": [], "recv_from_ranks": []}
    monkeypatch.setenv(sglang_omni.ENV_CONFIG, '{"protocol": "tcp", "host": "127.0.0.1", "alloc_timeout": 5}')
    relay = create_relay("omniconn", **stage_kwargs)
    try:
        assert relay.protocol == "tcp" and relay.alloc_timeout == 5
        assert relay.config["host"] == "127.0.0.1"
    finally:
        relay.close()
    relay = create_relay("omniconn", alloc_timeout=7, **stage_kwargs)     # keyword arguments win
    try:
        assert relay.alloc_timeout == 7
    finally:
        relay.close()
    for bad, words in (("{not json", "must be a JSON object"), ('["tcp"]', "must be a JSON object"),
                       ('{"protocl": "tcp"}', "unknown settings protocl")):
        monkeypatch.setenv(sglang_omni.ENV_CONFIG, bad)
        with pytest.raises(ValueError, match=words):
            create_relay("omniconn", **stage_kwargs)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_cancelled_get_leaves_dest_unwritten_and_the_relay_usable(protocol, pair):
    here, peer = pair(protocol, loop_copy_bytes=0)      # every get on the relay's threads
    got = peer.call(op="put", specs=[["float32", [1 << 20], 4, "cancel-me"], ["float32", [1000], 5, "after"]])

    async def run():
        dest = torch.full((1 << 20,), -1.0)
        g = await here.get_async(got["items"][0]["meta"], dest)
        task = asyncio.ensure_future(g.wait_for_completion(timeout=30))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(RuntimeError, match="cancelled"):
            await g.wait_for_completion(timeout=1)
        assert here._gets == {}
        dest2 = torch.zeros(1000)
        g2 = await here.get_async(got["items"][1]["meta"], dest2)
        await g2.wait_for_completion(timeout=30)
        assert digest(dest2) == got["items"][1]["sha"]
        return dest
    dest = asyncio.run(run())
    # A copy already under way when the wait was cancelled is not waited for (it completes on the
    # relay's thread, documented): close() waits for the relay's threads, after which the cancelled
    # copy either never began (dest all -1) or had begun and completed (the payload) - never half.
    here.close()
    assert torch.equal(dest, torch.full((1 << 20,), -1.0)) or digest(dest) == got["items"][0]["sha"]


def test_puts_nobody_waits_on_are_forgotten_once_taken_and_counted(channel, monkeypatch):
    monkeypatch.setattr(sglang_omni, "_FORGET_EVERY", 8)
    tx = create_relay("omniconn", **_cfg("shm", channel))
    rx = create_relay("omniconn", **_cfg("shm", channel))

    async def run():
        for i in range(7):                  # taken, but their operations never awaited
            op = await tx.put_async(torch.full((100,), float(i)), request_id="fire-%d" % i)
            g = await rx.get_async(op.metadata, torch.zeros(100))
            await g.wait_for_completion(timeout=10)
        assert len(tx.pending()) == 7
        await tx.put_async(torch.zeros(3), request_id="last")     # the 8th put sweeps
        assert tx.pending() == {"last": 1}
    try:
        asyncio.run(run())
        h, r = tx.health(), rx.health()
        assert (h["puts"], h["bytes_put"], h["pending_requests"]) == (8, 7 * 400 + 12, 1)
        assert (r["gets"], r["bytes_got"]) == (7, 7 * 400) and h["omc_live_entries"] == 1
    finally:
        tx.close()
        rx.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_close_during_a_transfer_ends_it_cleanly(protocol, pair):
    here, peer = pair(protocol, loop_copy_bytes=0)
    got = peer.call(op="put", specs=[["float16", [32 * MiB], 66, "closing"]])     # 64 MiB

    async def run():
        dest = torch.zeros(32 * MiB, dtype=torch.float16)
        g = await here.get_async(got["items"][0]["meta"], dest)
        task = asyncio.ensure_future(g.wait_for_completion(timeout=60))
        await asyncio.sleep(0)          # the get is on the relay's thread now
        here.close()                    # wakes it, waits for it, then frees the connector
        try:
            await task
            return "done" if digest(dest) == got["items"][0]["sha"] else "corrupt"
        except (RuntimeError, omniconn.OmniconnError):
            return "ended"
    outcome = asyncio.run(run())
    print("close during a %s transfer: %s" % (protocol, outcome))
    assert outcome in ("done", "ended")
    here.close()
