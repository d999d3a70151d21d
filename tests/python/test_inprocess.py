"""One process: every payload type, the zero-copy view and its lifetime rules, errors, logging."""
import gc
import logging
import time

import numpy as np
import pytest
import torch

import omniconn


@pytest.fixture(params=["local", "shm", "tcp"])
def conn(request, channel):
    if request.param == "local":
        c = omniconn.LocalConnector(pool_size=64 << 20)
    elif request.param == "shm":
        c = omniconn.ShmConnector(channel=channel, pool_size=64 << 20)
    else:
        c = omniconn.TcpConnector(pool_size=64 << 20)
    yield c
    c.close()


def _get(c, key, meta):
    return c.get("a", "b", key, meta, timeout=10)


def test_bytes_bytearray_memoryview_numpy_and_torch_go_through_unchanged(conn):
    a = np.arange(5000, dtype=np.float32)
    t = torch.arange(300, dtype=torch.int64)
    payloads = [b"hello" * 1000, bytearray(b"x" * 100000), memoryview(b"abc" * 33333), a, t,
                np.arange(12, dtype=np.int16).reshape(3, 4)[:, 1:3]]    # the last one is strided
    for i, p in enumerate(payloads):
        meta = conn.put("a", "b", "k%d" % i, p)
        with _get(conn, "k%d" % i, meta) as buf:
            expect = p.numpy().tobytes() if isinstance(p, torch.Tensor) else np.ascontiguousarray(p).tobytes() \
                if isinstance(p, np.ndarray) else bytes(p)
            assert buf.to_bytes() == expect


def test_get_is_a_view_of_the_connectors_memory_not_a_copy(conn):
    meta = conn.put("a", "b", "k", np.full(1 << 20, 7, np.uint8))
    buf = _get(conn, "k", meta)
    addr = buf._addr
    mv = buf.view
    arr = np.frombuffer(mv, np.uint8)
    ten = torch.frombuffer(mv, dtype=torch.uint8) if not mv.readonly else buf.as_tensor()
    assert arr.ctypes.data == addr and ten.data_ptr() == addr and buf.numpy().ctypes.data == addr
    assert int(arr[12345]) == 7 and int(ten[99]) == 7
    del mv, arr, ten
    buf.release()


def test_release_is_refused_while_a_view_is_alive_and_allowed_after(conn):
    meta = conn.put("a", "b", "k", b"z" * 4096)
    buf = _get(conn, "k", meta)
    view = buf.numpy()
    with pytest.raises(BufferError):
        buf.release()
    assert not buf.released
    del view
    buf.release()
    assert buf.released
    buf.release()       # idempotent


def test_a_released_buffer_refuses_every_use(conn):
    meta = conn.put("a", "b", "k", b"z" * 4096)
    buf = _get(conn, "k", meta)
    buf.release()
    for use in (lambda: buf.view, lambda: buf.numpy(), lambda: buf.as_tensor(), lambda: buf.tensor,
                lambda: buf.to_bytes()):
        with pytest.raises(ValueError, match="after release"):
            use()


def test_views_outliving_a_with_block_keep_the_bytes_until_they_go(conn):
    meta = conn.put("a", "b", "k", np.arange(1000, dtype=np.int32))
    with _get(conn, "k", meta) as buf:
        kept = buf.numpy("int32")
    assert buf.released
    assert int(kept[999]) == 999            # still readable: the view holds the bytes
    h = conn.health()
    assert h["pool_in_use"] == 0 or conn.transport != "local" or h["live_entries"] <= 1
    del kept
    gc.collect()


def test_garbage_collection_gives_the_bytes_back(channel):
    with omniconn.LocalConnector() as c:
        meta = c.put("a", "b", "k", b"q" * 100000)
        buf = c.get("a", "b", "k", meta, timeout=1)
        assert c.health()["pool_in_use"] > 0
        del buf
        gc.collect()
        h = c.health()
        assert h["pool_in_use"] == 0 and h["releases"] == 1


def test_first_views_made_at_once_from_several_threads_give_the_bytes_back_once(channel):
    import threading
    n, threads = 40, 4
    with omniconn.LocalConnector() as c:
        for i in range(n):
            meta = c.put("a", "b", "k%d" % i, bytes([i]) * 4096)
            buf = c.get("a", "b", "k%d" % i, meta, timeout=10)
            start, views = threading.Barrier(threads), []

            def view():
                start.wait()
                views.append(buf.numpy())

            ts = [threading.Thread(target=view) for _ in range(threads)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            assert len(views) == threads and all(bytes(v[:2]) == bytes([i]) * 2 for v in views)
            del views
            buf.release()
        gc.collect()
        h = c.health()
        assert h["releases"] == n and h["pool_in_use"] == 0


def test_a_pool_buffer_filled_in_place_is_put_without_a_copy(conn):
    wb = conn.alloc(1 << 16)
    arr = wb.numpy("float32")
    arr[:] = np.linspace(0, 1, arr.size, dtype=np.float32)
    with pytest.raises(BufferError):        # views of it must be gone before the connector owns it
        conn.put_buffer("a", "b", "zc", wb)
    expect = arr.copy()
    del arr
    meta = conn.put_buffer("a", "b", "zc", wb)
    assert wb.released
    with _get(conn, "zc", meta) as buf:
        assert np.array_equal(buf.numpy("float32"), expect)


def test_named_tensors_come_back_as_views_with_dtype_and_shape(conn):
    tensors = {"hidden": torch.randn(4, 8, 16), "ids": np.arange(32, dtype=np.int64).reshape(4, 8),
               "half": torch.ones(3, dtype=torch.bfloat16), "mask": np.array([True, False]), "blob": b"\x01\x02"}
    meta = conn.put_tensors("a", "b", "named", tensors)
    with conn.get_tensors("a", "b", "named", meta, timeout=10, as_torch=True) as f:
        assert set(f) == set(tensors)
        assert torch.equal(f["hidden"], tensors["hidden"])
        assert torch.equal(f["ids"], torch.from_numpy(tensors["ids"]))
        assert f["half"].dtype == torch.bfloat16 and torch.equal(f["half"], tensors["half"])
        assert f["mask"].tolist() == [True, False]
        assert bytes(f["blob"]) == b"\x01\x02"
    with pytest.raises(ValueError):
        f.buffer.view


def test_get_copy_fills_a_buffer_and_reports_the_size_needed(conn):
    meta = conn.put("a", "b", "k", b"0123456789")
    small = bytearray(4)
    with pytest.raises(omniconn.OmniconnError) as e:
        conn.get_copy("a", "b", "k", meta, timeout=10, out=small)
    assert e.value.name == "OMC_ERR_TOO_LARGE" and e.value.needed == 10
    out = bytearray(16)
    assert conn.get_copy("a", "b", "k", meta, timeout=10, out=out) == 10
    assert bytes(out[:10]) == b"0123456789"


def test_errors_carry_the_code_its_name_and_the_last_log_line(channel, caplog):
    with caplog.at_level(logging.WARNING, logger="omniconn"):
        with pytest.raises(omniconn.OmniconnError) as e:
            omniconn.ShmConnector(channel="no/slashes/allowed")
    err = e.value
    assert err.code == -1 and err.name == "OMC_ERR_INVALID_ARG"
    assert "channel" in err.log
    assert any("channel" in r.getMessage() for r in caplog.records if r.name == "omniconn")


def test_a_miss_raises_a_timeout_within_its_deadline(conn):
    t0 = time.monotonic()
    with pytest.raises(omniconn.OmniconnTimeout if conn.transport != "tcp" else omniconn.NotFoundError) as e:
        conn.get("a", "b", "never", None, timeout=0.05)
    if conn.transport == "tcp":     # a receiver with no sender to ask says so at once
        assert "no sender is registered" in e.value.log
    assert time.monotonic() - t0 < 2.0


def test_cleanup_drops_a_put_and_a_second_cleanup_says_so(conn):
    meta = conn.put("a", "b", "k", b"x" * 1000)
    assert conn.cleanup("a", "b", "k") is True
    assert conn.cleanup("a", "b", "k") is False
    with pytest.raises(omniconn.OmniconnError):
        conn.get("a", "b", "k", meta, timeout=0.05)


def test_fan_out_serves_each_reader_once(conn):
    meta = conn.put("a", "b", "k", b"f" * 5000, readers=2)
    for _ in range(2):
        with _get(conn, "k", meta) as buf:
            assert buf.to_bytes() == b"f" * 5000
    with pytest.raises(omniconn.OmniconnError):
        conn.get("a", "b", "k", meta, timeout=0.05)
    assert conn.wait_consumed(timeout=5)


def test_an_unconsumed_put_goes_when_its_ttl_passes(conn):
    meta = conn.put("a", "b", "k", b"t" * 1000, ttl_ms=100)
    time.sleep(0.3)
    conn.sweep()
    with pytest.raises(omniconn.OmniconnError):
        conn.get("a", "b", "k", meta, timeout=0.05)
    assert conn.health()["ttl_reclaims"] >= 1


def test_exists_and_list_see_live_keys(conn):
    conn.put("a", "b", "k1", b"1")
    conn.put("a", "c", "k2", b"2")
    assert conn.exists("a", "b", "k1") and not conn.exists("a", "b", "zzz")
    assert sorted(conn.list()) == [("a", "b", "k1"), ("a", "c", "k2")]
    assert conn.list(to_stage="c") == [("a", "c", "k2")]


def test_close_twice_and_use_after_close(channel):
    c = omniconn.ShmConnector(channel=channel)
    meta = c.put("a", "b", "k", b"x" * 100000)
    buf = c.get("a", "b", "k", meta, timeout=1)
    c.close()
    c.close()
    assert buf.to_bytes() == b"x" * 100000        # a view held across close stays valid
    buf.release()
    with pytest.raises(omniconn.ClosedError):
        c.put("a", "b", "k2", b"x")
    with omniconn.LocalConnector() as c2:
        pass
    c2.close()


def test_health_is_a_dict_of_counters(conn):
    meta = conn.put("a", "b", "k", b"x" * 123)
    conn.get("a", "b", "k", meta, timeout=10).release()
    h = conn.health()
    assert h["puts"] == 1 and h["gets"] == 1 and h["bytes_put"] == 123 and h["state"] == "healthy"
    assert h["transport"] == conn.transport


def test_metadata_survives_a_text_control_plane(conn):
    meta = conn.put("a", "b", "k", b"text")
    text = omniconn.meta_to_text(meta)
    assert text.startswith("omc1.") and omniconn.meta_from_text(text) == meta
    with _get(conn, "k", omniconn.meta_from_text(text)) as buf:
        assert buf.to_bytes() == b"text"


def test_rdma_is_constructible_and_says_unavailable_cleanly_without_a_device():
    ok, why = omniconn.available("rdma")
    try:
        c = omniconn.RdmaConnector(require=True)
    except omniconn.UnavailableError as e:
        assert not ok and e.name in ("OMC_ERR_UNAVAILABLE", "OMC_ERR_RDMA_DEVICE")
        assert "RDMA" in e.log or "rdma" in e.log       # the reason, not just a code
        fallback = omniconn.RdmaConnector(require=False)    # without require: TCP, and it says why
        with fallback:
            enabled, why = fallback.rdma_status
            assert not enabled and why
            counters = fallback.rdma_counters
            assert counters["pushes"] == 0 and counters["rdma_channels"] == 0, counters
        return
    with c:     # a host with RDMA: it came up
        assert c.rdma_status[0]
        assert c.rdma_counters["push_failures"] == 0


def test_rdma_counters_are_refused_on_a_connector_without_rdma():
    with omniconn.TcpConnector(role="sender", host="127.0.0.1") as c:
        with pytest.raises(omniconn.OmniconnError) as e:
            omniconn.RdmaConnector.rdma_counters.fget(c)
        assert e.value.name == "OMC_ERR_INVALID_ARG"


def test_threads_share_a_connector_safely(conn):
    import threading
    errors = []

    def worker(t):
        try:
            for i in range(100):
                key = "t%d-%d" % (t, i)
                data = np.full(1000 + i, t, np.uint8)
                meta = conn.put("a", "b", key, data)
                with conn.get("a", "b", key, meta, timeout=10) as buf:
                    if buf.to_bytes() != data.tobytes():
                        errors.append(key)
        except Exception as e:     # noqa: BLE001 - reported below
            errors.append(repr(e))
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert conn.health()["live_entries"] == 0


def test_get_batch_returns_every_items_own_bytes(conn):
    sizes = [100, 4096, 70000, 300000, 5, 1 << 20, 0]
    items, want = [], []
    for i, n in enumerate(sizes):
        data = np.random.default_rng(i).integers(0, 255, n, dtype=np.uint8)
        meta = conn.put("a", "b", "gb%d" % i, data)
        items.append(("gb%d" % i, meta))
        want.append(data.tobytes())
    bufs = conn.get_batch("a", "b", items, timeout=60)
    assert len(bufs) == len(items)
    for b, w in zip(bufs, want):
        with b:
            assert b.to_bytes() == w
    assert conn.health()["live_entries"] == 0


def test_get_batch_gives_none_for_a_key_that_is_not_there_and_raises_for_damaged_metadata(conn):
    assert conn.get_batch("a", "b", ["never-put"], timeout=0) == [None]
    meta = conn.put("a", "b", "gbd", b"x" * 5000, readers=2)
    bad = bytearray(meta)
    bad[len(bad) // 2] ^= 0x5A
    with pytest.raises(omniconn.OmniconnError):
        conn.get_batch("a", "b", [("gbd", meta), ("gbd", bytes(bad))], timeout=60)
    (b,) = conn.get_batch("a", "b", [("gbd", meta)], timeout=60)     # the first read went, one is left
    with b:
        assert b.to_bytes() == b"x" * 5000
    assert conn.health()["live_entries"] == 0
    assert conn.get_batch("a", "b", [], timeout=0) == []
