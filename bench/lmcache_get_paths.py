"""omniconn.lmcache's two batched_get paths side by side, to place the size at which
OmniconnRemoteConnector switches from one to the other (_PIPELINE_BELOW).

usage: OMNICONN_LIBRARY=build/libomniconn.so /usr/bin/python3 bench/lmcache_get_paths.py [ROUNDS]

Starts its own redis-server (loopback, no persistence). Per value size (64 KiB .. 4 MiB), 32
values stored through the connector, then read back ROUNDS times (default 11), the three ways
alternating within each round:
  pipeline (baseline)   the store's get_batch: one pipelined request per server, then each
                        value copied into a MemoryObj (the connector's path below the switch)
  parallel gets         one get per key on the connector's 8 threads (its path above the switch)
  sequential gets       one get after another (what LMCache's RemoteBackend falls back to)
MB/s medians and the ratio to the pipeline. The MemoryObjs and the CPU backend are
tests/python/test_lmcache.py's stand-ins for LMCache's.
"""
import asyncio
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "python"), os.path.join(HERE, "..", "python")]

import torch                                                    # noqa: E402
import test_lmcache as t                                        # noqa: E402
from omniconn.lmcache import OmniconnRemoteConnector, _PIPELINE_BELOW   # noqa: E402

N = 32


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 11
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    redis = t.Redis()
    try:
        print("switch at %d bytes; %d values per size, %d alternating rounds, medians" % (_PIPELINE_BELOW, N, rounds))
        for size in (64 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20):
            backend = t.LocalCPUBackend(1 << 30)
            conn = OmniconnRemoteConnector("omniconn://127.0.0.1:%d?stage=bench%d" % (redis.port, size), loop,
                                           backend)
            calls = t.RemoteBackendCalls(conn)
            obj = t.filled(backend, (size,), torch.uint8)
            keys = [t.key(i) for i in range(N)]
            for k in keys:
                calls.submit_put_task(k, obj).result(t.WAIT)
            ways = {"pipeline (baseline)": lambda: conn._get_batch_sync(keys),
                    "parallel gets": lambda: asyncio.run_coroutine_threadsafe(conn._get_parallel(keys),
                                                                             loop).result(t.WAIT),
                    "sequential gets": lambda: [calls.get_blocking(k) for k in keys]}
            rates = {w: [] for w in ways}
            for _ in range(rounds):
                for w, fn in ways.items():
                    t0 = time.perf_counter()
                    got = fn()
                    dt = time.perf_counter() - t0
                    assert all(g is not None for g in got)
                    for g in got:
                        g.ref_count_down()
                    rates[w].append(size * N / 1e6 / dt)
            base = statistics.median(rates["pipeline (baseline)"])
            for w, r in rates.items():
                print("%8d B  %-20s %7.0f MB/s  ratio %.2f" % (size, w, statistics.median(r), statistics.median(r) / base))
            calls.close()
        print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())
    finally:
        redis.close()
        loop.call_soon_threadsafe(loop.stop)


if __name__ == "__main__":
    main()
