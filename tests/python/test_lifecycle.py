"""close() from another thread, buffers that outlive their connector, os.fork(), and arguments
the C side would misread. Each crash-prone case runs in a program of its own (a SIGSEGV there
fails the test instead of ending pytest); threads and forks are real."""
import os
import subprocess
import sys
import textwrap

import pytest

import omniconn

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")

PRELUDE = '''
import os, sys, threading, time
sys.path.insert(0, %r)
import omniconn

def make(kind, channel):
    """(the connector under test, a TCP sender it reads from or None)."""
    if kind == "local":
        return omniconn.LocalConnector(), None
    if kind == "shm":
        return omniconn.ShmConnector(channel=channel), None
    tx = omniconn.TcpConnector(role="sender", host="127.0.0.1")
    rx = omniconn.TcpConnector(role="receiver")
    host, port, _ = tx.endpoint
    rx.add_sender("tx", host, port)
    return rx, tx

def in_call(conn, started):
    """Wait until the other thread is inside a call of conn (its in-flight count), or at least
    about to make it (the event) where the count cannot be seen."""
    started.wait()
    core = getattr(conn, "_core", None)
    while core is not None and not core.calls and not done:
        time.sleep(0.001)

done = False
''' % PYDIR


def run(code, timeout=180):
    """Run code (after PRELUDE) as a program of its own; its stdout. Fails on any exit but 0."""
    p = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=timeout, env=dict(os.environ))
    assert p.returncode == 0, "exit %d\n--- stdout\n%s\n--- stderr\n%s" % (p.returncode, p.stdout, p.stderr[-4000:])
    return p.stdout


KINDS = ["local", "shm", "tcp"]


# ---- close() while another thread is inside a call ------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_close_while_another_thread_loops_on_health(kind, channel):
    out = run('''
        for round in range(20):
            conn, tx = make(%r, "%s_%%d" %% round)
            started, errors, calls = threading.Event(), [], [0]
            def loop():
                try:
                    while True:
                        conn.health()
                        calls[0] += 1
                        started.set()
                except omniconn.ClosedError as e:
                    errors.append(e)
                started.set()
            th = threading.Thread(target=loop)
            th.start()
            in_call(conn, started)
            conn.close()
            th.join()
            assert len(errors) == 1 and calls[0] > 0, (errors, calls)
            if tx is not None:
                tx.close()
        print("closed", errors[0])
    ''' % (kind, channel))
    assert "closed" in out and "OMC_ERR_CLOSED" in out


@pytest.mark.parametrize("kind", KINDS)
def test_close_while_another_thread_waits_in_get(kind, channel):
    # the get's own timeout (60 s) only keeps a broken close from hanging the test: close() must
    # wake the get (or wait for it) and return, the get must end with a clear ClosedError
    out = run('''
        conn, tx = make(%r, %r)
        started, result = threading.Event(), []
        def wait():
            started.set()
            try:
                conn.get("a", "b", "never-put", timeout=60)
                result.append("got it")
            except omniconn.ClosedError as e:
                result.append(("closed", str(e)))
            except omniconn.OmniconnError as e:
                result.append(("other", str(e)))
        th = threading.Thread(target=wait)
        t0 = time.monotonic()
        th.start()
        in_call(conn, started)
        conn.close()
        closed_after = time.monotonic() - t0
        th.join()
        print(result, closed_after)
        assert result and result[0][0] == "closed", result
        assert closed_after < 60, closed_after
        try:
            conn.health()
            raise SystemExit("a call after close() worked")
        except omniconn.ClosedError as e:
            print("after:", e)
        if tx is not None:
            tx.close()
    ''' % (kind, channel))
    assert "after:" in out


def test_close_from_many_threads_while_puts_and_gets_run(channel):
    run('''
        conn = omniconn.ShmConnector(channel=%r, pool_size=8 << 20)
        stop, seen = threading.Event(), []
        def work(i):
            n = 0
            try:
                while True:
                    meta = conn.put("a", "b", "k%%d_%%d" %% (i, n), b"x" * 4096)
                    with conn.get("a", "b", "k%%d_%%d" %% (i, n), meta, timeout=5) as buf:
                        assert buf.to_bytes() == b"x" * 4096
                    n += 1
                    if n == 5:
                        seen.append(i)
            except omniconn.ClosedError:
                pass
        ths = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in ths:
            t.start()
        while len(seen) < 4:
            time.sleep(0.001)
        closers = [threading.Thread(target=conn.close) for _ in range(3)]
        for t in closers:
            t.start()
        for t in closers + ths:
            t.join()
        assert conn.closed
    ''' % channel)


@pytest.mark.parametrize("kind", ["local", "shm"])
def test_close_while_another_thread_waits_for_pool_space(kind, channel):
    # the pool is full (one buffer holds it): the other thread's alloc waits for space until
    # close(), which must not free the pool under it nor wait for its 60 s deadline
    out = run('''
        conn = omniconn.LocalConnector(pool_size=1 << 20) if %r == "local" else \\
            omniconn.ShmConnector(channel=%r, pool_size=1 << 20)
        cap = conn.health()["pool_capacity"]
        hog = conn.alloc(cap)
        started, result = threading.Event(), []
        def wait():
            started.set()
            try:
                conn.alloc(4096, timeout=60)
                result.append("got space")
            except omniconn.ClosedError as e:
                result.append("closed")
            except omniconn.OmniconnError as e:
                result.append(str(e))
        th = threading.Thread(target=wait)
        t0 = time.monotonic()
        th.start()
        in_call(conn, started)
        conn.close()
        th.join()
        assert result == ["closed"], result
        assert time.monotonic() - t0 < 60
        hog.view[:3] = b"abc"           # the held buffer still works, and its release frees the rest
        hog.release()
        assert conn._core.h is None
        print("ok")
    ''' % (kind, channel))
    assert "ok" in out


# ---- buffers outlive their connector -----------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_alloc_buffer_used_after_close(kind, channel):
    out = run('''
        conn, tx = make(%r, %r)
        owner = tx or conn
        wb = owner.alloc(1 << 20)
        wb2 = owner.alloc(4096)
        view = wb.view
        owner.close()
        view[:5] = b"hello"             # the pool is still mapped: the buffer holds it
        assert bytes(wb.view[:5]) == b"hello"
        del view
        try:
            owner.put_buffer("a", "b", "k", wb)
            raise SystemExit("put_buffer on a closed connector worked")
        except omniconn.ClosedError as e:
            print("put:", e)
        wb.release()
        del wb2                          # the last buffer: the connector goes with it
        import gc; gc.collect()
        assert owner._core.h is None, "the connector was not destroyed with its last buffer"
        if tx is not None:
            conn.close()
        print("ok")
    ''' % (kind, channel))
    assert "put:" in out and "ok" in out


@pytest.mark.parametrize("kind", ["local", "shm"])
def test_get_buffer_used_after_close(kind, channel):
    run('''
        conn, _ = make(%r, %r)
        meta = conn.put("a", "b", "k", b"payload" * 1000)
        buf = conn.get("a", "b", "k", meta, timeout=5)
        arr = buf.numpy()
        conn.close()
        assert bytes(arr[:7]) == b"payload"
        del arr
        buf.release()
    ''' % (kind, channel))


# ---- os.fork() ----------------------------------------------------------------------------------------------
FORK = '''
    import signal
    N = 16
    conn, tx = make(%r, %r)
    owner = tx or conn                    # the sender; conn is the reader
    metas = [owner.put("a", "b", "k%%d" %% i, bytes([i]) * 100000) for i in range(N)]
    held = conn.get("a", "b", "k0", metas[0], timeout=30) if tx is None else None
    wb = owner.alloc(4096)
    pid = os.fork()
    if pid == 0:
        mode = %r
        if mode == "close":
            conn.close()
            owner.close()
            wb.release()
            if held is not None:
                held.release()
        elif mode == "call":
            try:
                owner.put("a", "b", "child", b"x")
                sys.exit(3)
            except omniconn.ClosedError as e:
                if "create a new connector in this process" not in str(e) or str(os.getppid()) not in str(e):
                    print("unclear error:", e, flush=True)
                    sys.exit(4)
            fresh = omniconn.LocalConnector()     # a connector of its own works
            m = fresh.put("x", "y", "z", b"mine")
            assert fresh.get_copy("x", "y", "z", m, timeout=5) == b"mine"
            fresh.close()
        sys.exit(0)                       # a normal exit: finalizers and __del__ run
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "child ended with status %%#x" %% status
    start = 1 if held is not None else 0
    if held is not None:
        assert held.to_bytes() == bytes([0]) * 100000
        held.release()
    for i in range(start, N):
        assert conn.get_copy("a", "b", "k%%d" %% i, metas[i], timeout=30) == bytes([i]) * 100000, i
    wb.release()
    owner.health()
    conn.close()
    if tx is not None:
        tx.close()
    print("parent read all")
'''


@pytest.mark.parametrize("mode", ["nothing", "close", "call"])
@pytest.mark.parametrize("kind", KINDS)
def test_fork_child_leaves_the_parents_connector_alone(kind, mode, channel):
    if kind == "tcp" and "libasan" in os.environ.get("LD_PRELOAD", ""):
        # ASan's own allocator is not fork-safe while other threads run (the TCP connector's and
        # libzmq's): a child can inherit its allocator lock held and hang in free() at exit
        # (seen: Py_FinalizeEx -> free -> asan Allocator::Deallocate -> Mutex::Lock). glibc's
        # malloc resets its locks at fork, so the plain run checks this case.
        pytest.skip("fork() of a threaded process under ASan can deadlock inside ASan's allocator")
    out = run(FORK % (kind, channel, mode))
    assert "parent read all" in out


# ---- arguments the C side would misread ------------------------------------------------------------------------
def test_key_with_nul_is_refused(channel):
    with omniconn.ShmConnector(channel=channel) as c:
        meta = c.put("a", "b", "key", b"v")
        for bad in ("key\0tail", b"key\0tail"):
            with pytest.raises(ValueError, match="NUL"):
                c.put("a", "b", bad, b"other")
            with pytest.raises(ValueError, match="NUL"):
                c.get("a", "b", bad, meta, timeout=0)
            with pytest.raises(ValueError, match="NUL"):
                c.put_tensor("a", "b", bad, "t", b"x")
            with pytest.raises(ValueError, match="NUL"):
                c.exists("a", "b", bad)
            with pytest.raises(ValueError, match="NUL"):
                c.cleanup("a", "b", bad)
        with pytest.raises(ValueError, match="NUL"):
            c.put("a\0x", "b", "k2", b"v")
        with pytest.raises(ValueError, match="NUL"):
            c.put_tensors("a", "b", "k3", {"seg\0": b"v"})
        assert c.list() == [("a", "b", "key")]        # nothing was put under a cut-short key
        assert c.get_copy("a", "b", "key", meta, timeout=5) == b"v"
    with pytest.raises(ValueError, match="NUL"):
        omniconn.ShmConnector(channel=channel + "\0x")


def test_ports_and_narrowed_integers_are_checked(channel):
    for port in (65558, -1, 70000):
        with pytest.raises(ValueError, match="port"):
            omniconn.TcpConnector(role="sender", host="127.0.0.1", port=port)
    with pytest.raises(ValueError, match="data_port"):
        omniconn.TcpConnector(role="sender", host="127.0.0.1", data_port=65536)
    with omniconn.TcpConnector(role="receiver") as rx:
        for port in (65558, 0, -5):
            with pytest.raises(ValueError, match="port"):
                rx.add_sender("s", "127.0.0.1", port)
        with pytest.raises(ValueError, match="NUL"):
            rx.add_sender("s", "127.0.0.1\0evil", 5555)
        with pytest.raises(TypeError):
            rx.add_sender("s", "127.0.0.1", "5555")
    with pytest.raises(ValueError, match="pool_size"):
        omniconn.LocalConnector(pool_size=-1)
    with pytest.raises(ValueError, match="role"):
        omniconn.LocalConnector(role="sendr")
    with omniconn.LocalConnector() as c:
        with pytest.raises(ValueError, match="readers"):
            c.put("a", "b", "k", b"v", readers=-1)
        with pytest.raises(ValueError, match="readers"):
            c.put("a", "b", "k", b"v", readers=1 << 32)
        with pytest.raises(ValueError, match="ttl_ms"):
            c.put("a", "b", "k", b"v", ttl_ms=1 << 64)
        with pytest.raises(ValueError, match="size"):
            c.alloc(-1)
        assert not c.exists("a", "b", "k")             # none of them reached the library


def test_fork_child_of_a_vllm_omni_connector_makes_its_own(channel):
    # the parent's SHM sweep thread runs (and may hold a connector's lock at the fork): the
    # child closes what it inherited, makes a connector of its own (with a sweep of its own),
    # moves a payload through it and exits normally; the parent still reads its entry
    out = run('''
        from omniconn.vllm_omni import OmniconnConnector, _sweep_state
        parent = OmniconnConnector({"protocol": "shm", "role": "dual", "channel": %r})
        ok, size, md = parent.put("0", "1", "kept", b"parent bytes" * 100)
        assert ok and _sweep_state["thread"] is not None
        pid = os.fork()
        if pid == 0:
            parent.close()
            child = OmniconnConnector({"protocol": "shm", "role": "dual", "channel": %r + "_child"})
            assert _sweep_state["thread"] is not None and _sweep_state["thread"].is_alive()
            ok, size, cmd = child.put("0", "1", "own", b"child bytes")
            obj, n = child.get("0", "1", "own", cmd)
            assert bytes(obj.to_bytes() if hasattr(obj, "to_bytes") else obj) == b"child bytes", obj
            if hasattr(obj, "release"):
                obj.release()
            child.close()
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "child ended with status %%#x" %% status
        obj, n = parent.get("0", "1", "kept", md)
        assert bytes(obj.to_bytes() if hasattr(obj, "to_bytes") else obj) == b"parent bytes" * 100
        if hasattr(obj, "release"):
            obj.release()
        parent.close()
        print("ok")
    ''' % (channel, channel))
    assert "ok" in out
