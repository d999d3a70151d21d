"""omniconn.lmcache's ways to read a batch of values side by side per value size, against
sequential gets (what LMCache's RemoteBackend does without batched_get).

usage: OMNICONN_LIBRARY=build/libomniconn.so /usr/bin/python3 bench/lmcache_get_paths.py [ROUNDS]

Starts its own redis-server (loopback, no persistence). Per value size (64 KiB .. 4 MiB), 32
values stored through the connector, one warm-up round (the pools' first touch), then ROUNDS
rounds (default 11), the four ways alternating within each round:
  sequential gets (baseline)  one get after another
  batched_get                 the connector's path: pipelined get_batch requests of about
                              _PIPELINE_BYTES each, each value copied into a MemoryObj
  one pipeline                the whole batch in one get_batch, then every value copied
  parallel gets               one get per key on the connector's 8 threads
MB/s medians, the ratio to the baseline, and the load average before and after. The MemoryObjs
and the CPU backend are tests/python/test_lmcache.py's stand-ins for LMCache's.
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
from omniconn.lmcache import OmniconnRemoteConnector, _PIPELINE_BYTES   # noqa: E402

N = 32


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 11
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    redis = t.Redis()
    try:
        print("pipelines of %d bytes; %d values per size, %d alternating rounds, medians; load average %.2f %.2f %.2f"
              % ((_PIPELINE_BYTES, N, rounds) + os.getloadavg()))
        for size in (64 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20):
            backend = t.LocalCPUBackend(1 << 30)
            conn = OmniconnRemoteConnector("omniconn://127.0.0.1:%d?stage=bench%d" % (redis.port, size), loop,
                                           backend)
            calls = t.RemoteBackendCalls(conn)
            obj = t.filled(backend, (size,), torch.uint8)
            keys = [t.key(i) for i in range(N)]
            for k in keys:
                calls.submit_put_task(k, obj).result(t.WAIT)
            named = [conn._key(k) for k in keys]
            ways = {"sequential gets (baseline)": lambda: [calls.get_blocking(k) for k in keys],
                    "batched_get": lambda: conn._get_batch_sync(keys),
                    "one pipeline": lambda: conn._get_pipeline(named),
                    "parallel gets": lambda: asyncio.run_coroutine_threadsafe(conn._get_parallel(keys),
                                                                             loop).result(t.WAIT)}
            rates = {w: [] for w in ways}
            for r in range(rounds + 1):
                for w, fn in ways.items():
                    t0 = time.perf_counter()
                    got = fn()
                    dt = time.perf_counter() - t0
                    assert all(g is not None for g in got)
                    for g in got:
                        g.ref_count_down()
                    if r:                   # round 0 warms up
                        rates[w].append(size * N / 1e6 / dt)
            base = statistics.median(rates["sequential gets (baseline)"])
            for w, r in rates.items():
                print("%8d B  %-27s %7.0f MB/s  ratio %.2f" % (size, w, statistics.median(r), statistics.median(r) / base))
            calls.close()
        print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())
    finally:
        redis.close()
        loop.call_soon_threadsafe(loop.stop)


if __name__ == "__main__":
    main()
