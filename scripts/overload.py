#!/usr/bin/env python3
"""Overload: a producer far faster than the service and a frontend that reads slowly.

    python scripts/overload.py --seconds 30

The producer sends as fast as its blocking PUSH allows; the frontend sleeps between
reads. Samples the service's total resident memory, and how long the producer's sends
block. Memory must stay bounded by the high-water marks (ring, links, output), the
producer must be slowed (backpressure), and after the frontend catches up every request
must be exact: nothing dropped. Prints the bound it measured.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import psutil  # noqa: E402
from service import Service  # noqa: E402

from sglang_tok.client import Frontend, Scheduler  # noqa: E402
from sglang_tok.tokenizer import load  # noqa: E402
from sglang_tok.workload import PlanSpec, make_requests, schedule, verify  # noqa: E402


def rss_mib(svc: Service) -> float:
    procs = [psutil.Process(svc.proc.pid)] + svc.children()  # type: ignore[union-attr]
    return sum(p.memory_info().rss for p in procs if p.is_running()) / (1 << 20)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--read-delay-ms", type=float, default=20)
    ap.add_argument("--ring-capacity", type=int, default=64)
    ap.add_argument("--link-capacity", type=int, default=64)
    a = ap.parse_args()
    info = load("deepseek-v4")
    svc = Service(Path(tempfile.mkdtemp(prefix="sglang-tok-overload-")), shards=2,
                  args=["--link-capacity", str(a.link_capacity)],
                  ring_capacity=a.ring_capacity)
    svc.front.close()
    svc.front = Frontend(svc.output, hwm=16)  # a frontend that buffers little, reads slowly
    svc.start()
    svc.sched.close()  # type: ignore[union-attr]
    svc.sched = Scheduler(svc.input, hwm=4)  # the producer's own buffer stays small too
    idle = rss_mib(svc)
    reqs = make_requests(info, PlanSpec(requests=4096, concurrency=1024, min_tokens=64,
                                        max_tokens=256, seed=3))
    frames = [s.batch for s in schedule(reqs, 1024, 3) if s.batch]
    stop = threading.Event()
    samples: list[float] = []

    def sampler() -> None:
        while not stop.is_set():
            samples.append(rss_mib(svc))
            time.sleep(0.25)

    threading.Thread(target=sampler, daemon=True).start()
    front = svc.front
    slow = threading.Event()
    slow.set()

    def frontend() -> None:  # its own thread and socket: reads one message, then naps
        while not stop.is_set():
            if front.sock.poll(50):
                front.take(front.sock.recv())
                if slow.is_set():
                    time.sleep(a.read_delay_ms / 1000)

    reader = threading.Thread(target=frontend, daemon=True)
    reader.start()
    blocked = []
    t0 = time.monotonic()
    sent = 0
    for f in frames:
        if time.monotonic() - t0 > a.seconds:
            break
        t = time.monotonic()
        svc.send(f)  # type: ignore[arg-type]
        blocked.append(time.monotonic() - t)
        sent += 1
    peak = max(samples or [idle])
    slow.clear()  # the frontend catches up at full speed
    assert svc.sched is not None
    nonce = svc.sched.ping()
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if {p.shard for p in front.pongs if p.nonce == nonce} >= set(range(-1, svc.shards)):
            break
        time.sleep(0.05)
    stop.set()
    reader.join()
    bad = [p for r in reqs[:] for p in verify(r, front.requests.get(r.rid), info)
           if sent == len(frames)]
    svc.stop()
    elapsed = time.monotonic() - t0
    slow_sends = sum(1 for b in blocked if b > 0.01)
    print(f"sent {sent}/{len(frames)} frames in {elapsed:.1f}s; sends that blocked > 10 ms: "
          f"{slow_sends} (longest {1000 * max(blocked):.0f} ms)")
    print(f"service RSS: idle {idle:.0f} MiB, peak under overload {peak:.0f} MiB "
          f"(+{peak - idle:.0f} MiB with ring {a.ring_capacity} frames, links/output "
          f"{a.link_capacity} messages)")
    print(f"verified exact after catch-up: {'all' if not bad else f'{len(bad)} problems'}"
          f"{'' if sent == len(frames) else ' (partial run: verification skipped)'}")
    return 0 if not bad and slow_sends else 1


if __name__ == "__main__":
    sys.exit(main())
