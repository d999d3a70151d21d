"""pipeline3.py - a three-stage pipeline (thinker -> talker -> vocoder) in three processes, over
shared memory and over TCP, with every tensor checked end to end.

usage: python3 examples/python/pipeline3.py [--transport shm|tcp|both] [--requests N] [--tokens T]
       defaults: --transport both --requests 8 --tokens 512
       (from the source tree after `make lib`; an installed omniconn is found the same way)

The thinker makes hidden states for each request (float32, tokens x 1024, derived from the request
number) and puts them as named tensors; the talker takes them (a zero-copy view), turns them into
audio codes (int64) and puts those; the vocoder takes the codes, renders a waveform (float32) and
checks it against the same chain recomputed from the request number. Gets carry no metadata:
over SHM a receiver finds its sender's segment by channel; over TCP it asks the upstream
stage's listener (its host:port is handed down when the stages start). Producers wait until
their puts are consumed before they exit.
"""
import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
os.environ.setdefault("OMNICONN_LIBRARY", os.path.join(HERE, "..", "..", "build", "libomniconn.so"))

import numpy as np          # noqa: E402
import omniconn             # noqa: E402

HIDDEN = 1024


def hidden_for(req, tokens):
    rng = np.random.default_rng(req)
    return rng.standard_normal((tokens, HIDDEN), dtype=np.float32)


def codes_for(hidden):
    return (np.abs(hidden[:, :16]).sum(axis=1) * 100).astype(np.int64) % 4096


def audio_for(codes):
    t = np.arange(240, dtype=np.float32) / 240.0
    return np.sin(2 * np.pi * (codes[:, None].astype(np.float32) / 4096.0) * t[None, :] * 8).reshape(-1)


def connector(transport, role, channel, upstream):
    if transport == "shm":
        return omniconn.ShmConnector(role="dual", channel=channel, pool_size=256 << 20)
    c = omniconn.TcpConnector(role=role, host="127.0.0.1", pool_size=256 << 20)
    if upstream:
        host, port = upstream.rsplit(":", 1)
        c.add_sender("upstream", host, int(port))
    return c


def announce(c, transport, role):
    if transport == "tcp" and role != "receiver":
        host, port, _ = c.endpoint
        print("endpoint %s:%d" % (host, port), flush=True)
    else:
        print("endpoint -", flush=True)


def stage(name, transport, channel, requests, tokens, upstream):
    role = {"thinker": "sender", "talker": "dual", "vocoder": "receiver"}[name]
    with connector(transport, role, channel, upstream) as c:
        announce(c, transport, role)
        t0 = time.monotonic()
        moved = 0
        for req in range(requests):
            key = "req-%d" % req
            if name == "thinker":
                h = hidden_for(req, tokens)
                c.put_tensors("thinker", "talker", key, {"hidden": h, "request": np.array([req])})
                moved += h.nbytes
            elif name == "talker":
                with c.get_tensors("thinker", "talker", key, timeout=30) as f:
                    if int(f["request"][0]) != req or not np.array_equal(f["hidden"], hidden_for(req, tokens)):
                        print("talker: %s: hidden states differ" % key, flush=True)
                        return 1
                    codes = codes_for(f["hidden"])
                    moved += f["hidden"].nbytes
                    del f                   # views out of the frame go before it is released
                try:
                    import torch            # tensors travel the same way as arrays
                    payload = torch.from_numpy(codes)
                except ImportError:
                    payload = codes
                c.put_tensors("talker", "vocoder", key, {"codes": payload})
            else:
                with c.get_tensors("talker", "vocoder", key, timeout=30) as f:
                    codes = f["codes"]
                    audio = audio_for(codes)
                    expect = audio_for(codes_for(hidden_for(req, tokens)))
                    ok = np.array_equal(codes, codes_for(hidden_for(req, tokens))) and np.allclose(audio, expect)
                    moved += codes.nbytes
                    del codes
                if not ok:
                    print("vocoder: %s: codes differ from the chain recomputed here" % key, flush=True)
                    return 1
        if name != "vocoder" and not c.wait_consumed(timeout=60):
            print("%s: puts not consumed in 60 s" % name, flush=True)
            return 1
        dt = time.monotonic() - t0
        print("%s: %d requests, %.2f MiB in %.2f s" % (name, requests, moved / 2 ** 20, dt), flush=True)
    return 0


def run(transport, requests, tokens):
    channel = "pipeline3_%d" % os.getpid()
    base = [sys.executable, os.path.abspath(__file__), "--transport", transport, "--requests", str(requests),
            "--tokens", str(tokens), "--channel", channel]
    procs = []
    upstream = None
    for name in ("thinker", "talker", "vocoder"):
        cmd = base + ["--stage", name] + (["--upstream", upstream] if upstream else [])
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline().strip()
        if not line.startswith("endpoint"):
            print("%s did not start" % name)
            for _, q in procs + [(name, p)]:
                q.kill()
            return 1
        upstream = line.split()[1] if transport == "tcp" else None
        procs.append((name, p))
    bad = 0
    for name, p in procs:
        out = p.stdout.read()
        rc = p.wait()
        sys.stdout.write("  [%s] %s" % (transport, out))
        bad += rc != 0
    print("pipeline3 over %s: %s" % (transport, "every tensor checked end to end" if not bad else "FAILED"))
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--transport", default="both", choices=["shm", "tcp", "both"])
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--stage")
    ap.add_argument("--channel")
    ap.add_argument("--upstream")
    a = ap.parse_args()
    if a.stage:
        return stage(a.stage, a.transport, a.channel, a.requests, a.tokens, a.upstream)
    bad = 0
    for t in (["shm", "tcp"] if a.transport == "both" else [a.transport]):
        bad += run(t, a.requests, a.tokens)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
