"""Overload: a producer far faster than the service and a frontend that reads slowly
(`scripts/load/overload.py`).

The producer sends as fast as its blocking PUSH allows; the frontend sleeps between
reads. Samples the service's total resident memory, and how long the producer's sends
block. Memory must stay bounded by the high-water marks (ring, links, output), the
producer must be slowed (backpressure), and after the frontend catches up every request
must be exact: nothing dropped. When the time is up, the requests whose frames were all
sent are verified exact, those cut midway are ended with ABORT and must get their abort
delta; both counts are printed. Prints the bound it measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import threading
import time

import psutil

from sglang_tok.kit.client import Scheduler
from sglang_tok.kit.local_service import LocalService
from sglang_tok.kit.sync_frontend import Frontend
from sglang_tok.kit.workload import PlannedRequest, PlanSpec, make_requests, schedule, verify
from sglang_tok.protocols.model import batch, control
from sglang_tok.tokenizer import TokenizerInfo, load


def rss_mib(svc: LocalService) -> float:
    procs = [psutil.Process(svc.proc.pid)] + svc.children()  # type: ignore[union-attr]
    return sum(p.memory_info().rss for p in procs if p.is_running()) / (1 << 20)


def start_service(a: argparse.Namespace) -> tuple[LocalService, Frontend]:
    """Small rings, a frontend that buffers little and a producer whose buffer is small
    (the service's own, which it closes at its stop)."""
    svc = LocalService(shards=2, args=["--link-capacity", str(a.link_capacity)],
                  ring_capacity=a.ring_capacity, frontend=False, scheduler=False)
    front = svc.front = Frontend(svc.output, hwm=16)
    svc.start()
    svc.sched = Scheduler(svc.input, hwm=4)
    return svc, front


def frames_of(reqs: list[PlannedRequest]) -> tuple[list[bytes], dict[str, tuple[int, int]]]:
    """The BATCH frames, and for each rid the indices of its first and last frame."""
    frames: list[bytes] = []
    span: dict[str, tuple[int, int]] = {}
    for step in schedule(reqs, 1024, 3):
        if step.batch:
            for rid in batch.decode_batch(step.batch).rids:
                span[rid] = (span.get(rid, (len(frames), 0))[0], len(frames))
            frames.append(step.batch)
    return frames, span


def produce(svc: LocalService, frames: list[bytes], seconds: float) -> tuple[int, list[float]]:
    """Send until done or out of time; return how many were sent and how long each blocked."""
    blocked: list[float] = []
    t0 = time.monotonic()
    for f in frames:
        if time.monotonic() - t0 > seconds:
            break
        t = time.monotonic()
        svc.send(f)
        blocked.append(time.monotonic() - t)
    return len(blocked), blocked


def end_cut_requests(svc: LocalService, reqs: list[PlannedRequest],
                     span: dict[str, tuple[int, int]], sent: int,
                     ) -> tuple[list[PlannedRequest], list[PlannedRequest]]:
    """Requests whose frames were all sent, and those cut midway, ABORTed now."""
    whole = [r for r in reqs if span[r.rid][1] < sent]
    cut = [dataclasses.replace(r, end_by="abort") for r in reqs
           if span[r.rid][0] < sent <= span[r.rid][1]]
    if cut:
        svc.send(control.encode_control(control.Abort([r.rid for r in cut])))
    return whole, cut


def catch_up(svc: LocalService, front: Frontend, timeout: float = 600) -> bool:
    """Everything sent so far has come out (a PING answered by every process)."""
    assert svc.sched is not None
    nonce = svc.sched.ping()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if {p.shard for p in front.pongs if p.nonce == nonce} >= set(range(-1, svc.shards)):
            return True
        time.sleep(0.05)
    return False


def problems(reqs: list[PlannedRequest], front: Frontend, info: TokenizerInfo) -> list[str]:
    return [p for r in reqs for p in verify(r, front.requests.get(r.rid), info)]


class Watch:
    """Two threads: the frontend (its own socket; reads one message, then naps while `slow`
    is set) and a sampler of the service's resident memory."""

    def __init__(self, svc: LocalService, front: Frontend, delay_s: float) -> None:
        self.svc, self.front, self.delay_s = svc, front, delay_s
        self.samples: list[float] = []
        self.slow, self.done = threading.Event(), threading.Event()
        self.slow.set()
        self.threads = [threading.Thread(target=f, daemon=True)
                        for f in (self.sample, self.read)]
        for t in self.threads:
            t.start()

    def sample(self) -> None:
        while not self.done.is_set():
            self.samples.append(rss_mib(self.svc))
            time.sleep(0.25)

    def read(self) -> None:
        front = self.front
        while not self.done.is_set():
            if front.sock.poll(50):
                front.take(front.sock.recv())
                if self.slow.is_set():
                    time.sleep(self.delay_s)

    def stop(self) -> None:
        self.done.set()
        for t in self.threads:
            t.join()


def main(a: argparse.Namespace) -> int:
    """`scripts/load/overload.py`."""
    info = load("deepseek-v4")
    svc, front = start_service(a)
    idle = rss_mib(svc)
    reqs = make_requests(info, PlanSpec(requests=4096, concurrency=1024, min_tokens=64,
                                        max_tokens=256, seed=3))
    frames, span = frames_of(reqs)
    watch = Watch(svc, front, a.read_delay_ms / 1000)
    t0 = time.monotonic()
    sent, blocked = produce(svc, frames, a.seconds)
    peak = max(watch.samples or [idle])
    whole, cut = end_cut_requests(svc, reqs, span, sent)
    watch.slow.clear()  # the frontend catches up at full speed
    caught_up = catch_up(svc, front)
    watch.stop()
    bad_whole, bad_cut = problems(whole, front, info), problems(cut, front, info)
    svc.stop()
    elapsed = time.monotonic() - t0
    slow_sends = sum(1 for b in blocked if b > 0.01)
    print(f"sent {sent}/{len(frames)} frames in {elapsed:.1f}s; sends that blocked > 10 ms: "
          f"{slow_sends} (longest {1000 * max(blocked):.0f} ms)")
    print(f"service RSS: idle {idle:.0f} MiB, peak under overload {peak:.0f} MiB "
          f"(+{peak - idle:.0f} MiB with ring {a.ring_capacity} frames, links/output "
          f"{a.link_capacity} messages)")
    print(f"verified exact after catch-up: {len(whole) - len(bad_whole)} of {len(whole)} "
          f"requests whose frames were all sent; aborted (cut by --seconds): "
          f"{len(cut) - len(bad_cut)} of {len(cut)} ended with their abort delta; "
          f"never started: {len(reqs) - len(whole) - len(cut)}")
    for p in (bad_whole + bad_cut)[:10]:
        print(f"  {p}")
    ok = caught_up and not bad_whole and not bad_cut and whole and slow_sends
    return 0 if ok else 1


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """The flags of `scripts/load/overload.py` (its `main` parses them)."""
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--read-delay-ms", type=float, default=20)
    ap.add_argument("--ring-capacity", type=int, default=64)
    ap.add_argument("--link-capacity", type=int, default=64)
