"""Fault injection under load: kill -9 shards, the egress and the HTTP process at random
(`scripts/load/faults.py`).

Streams a synthetic workload into a real service (2 shards; `--service-args "--shards 4"`
runs 4, the barrier counts what the service reports on /health) at a steady pace, kills a
random process kind at random moments, then waits for everything to settle and prints:
faults injected by kind; requests completed exact, failed with a terminal error, lost
(no last delta: must be 0), wrong (a last delta without error whose text is not exact);
deltas the frontend dropped because they came after their rid's terminal one (protocol
section 5, rule 7); requests the frontend ended on an egress's RESTARTED (section 5.3), and
how many of those the service itself never ended; and frames dropped by reason. Kind
`double` kills a shard and then the egress 40 ms later. Exit 0 when nothing was lost and
nothing was wrong.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import time
from collections import Counter

from sglang_tok.kit.local_service import LocalService
from sglang_tok.kit.sync_frontend import Frontend, barrier
from sglang_tok.kit.workload import (
    PlannedRequest,
    PlanSpec,
    Step,
    expected,
    make_requests,
    schedule,
)
from sglang_tok.process import shards_text
from sglang_tok.protocols.model.tags import EGRESS
from sglang_tok.tokenizer import TokenizerInfo, load


def pick_victim(svc: LocalService, kind: str) -> int | None:
    """A live process of this kind, by the role /health gives it (none while the HTTP
    process is down: the children cannot be told apart then)."""
    _, h = svc.health()
    pids = [p["pid"] for p in h.get("processes", [])
            if p["pid"] and (p["role"] == kind or p["role"].startswith(kind + " "))]
    return random.choice(pids) if pids else None


DOUBLE_GAP_S = 0.04


def inject(svc: LocalService, kind: str) -> int | None:
    """kill -9 one process of this kind (`double`: a shard, then the egress)."""
    if kind != "double":
        pid = pick_victim(svc, kind)
        if pid:
            os.kill(pid, signal.SIGKILL)
        return pid
    shard, egress = pick_victim(svc, "shard"), pick_victim(svc, "egress")
    if not shard or not egress:
        return None
    os.kill(shard, signal.SIGKILL)
    time.sleep(DOUBLE_GAP_S)
    os.kill(egress, signal.SIGKILL)
    return shard


def frontend(svc: LocalService) -> Frontend:
    """The service's own frontend (the harness's `Frontend`, every delta kept)."""
    assert svc.front is not None
    return svc.front


def settle(svc: LocalService) -> dict[str, int]:
    """Let restarts finish, then a barrier (retried: a PING can be lost with a process)."""
    front = frontend(svc)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and svc.health()[0] != 200:
        front.poll(0.2)
    for _ in range(3):
        if svc.sched is not None and barrier(svc.sched, front, svc.shards, 20):
            break
    return {k.split('"')[1]: int(v) for k, v in svc.metrics().items()
            if k.split("{")[0].endswith("frames_dropped_total") and v}


def judge(front: Frontend, reqs: list[PlannedRequest], info: TokenizerInfo) -> Counter[str]:
    outcome: Counter[str] = Counter()
    for r in reqs:
        out = front.requests.get(r.rid)
        if out is None or not out.finished:
            outcome["lost"] += 1
            if outcome["lost"] <= 3:
                print(f"lost: {r.rid}: {'no' if out is None else len(out.deltas)} deltas for "
                      f"{len(r.chunks)} rows")
        elif out.last.error:
            outcome["failed with error"] += 1
        elif r.end_by:
            outcome["completed exact"] += 1  # ended by its own ABORT/ERROR as asked
        else:
            text, fin = expected(r, info)
            ok = out.text == text and out.last.finish == fin
            outcome["completed exact" if ok else "wrong"] += 1
            if not ok and outcome["wrong"] <= 3:
                print(f"wrong: {r.rid} shard {out.shard}: {len(out.deltas)} deltas for "
                      f"{len(r.chunks)} rows; got {out.text[-40:]!r} want {text[-40:]!r}")
    return outcome


def workload(a: argparse.Namespace, info: TokenizerInfo) -> tuple[list[PlannedRequest],
                                                                   list[Step]]:
    """Enough requests for --seconds of steps at 128 concurrent, 36 rows each on average."""
    concurrency, min_tokens, max_tokens = 128, 8, 64
    steps_needed = a.seconds * a.frames_per_s
    spec = PlanSpec(requests=max(64, int(steps_needed * concurrency * 2 /
                                         (min_tokens + max_tokens))),
                    concurrency=concurrency, min_tokens=min_tokens, max_tokens=max_tokens,
                    stop_share=0.1, options_share=0.1, logprob_share=0.05, abort_share=0.02,
                    seed=a.seed)
    reqs = make_requests(info, spec)
    return reqs, list(schedule(reqs, spec.concurrency, a.seed))


def drive(svc: LocalService, steps: list[Step], a: argparse.Namespace) -> Counter[str]:
    """Every step at --frames-per-s, a random kind killed at --kills random steps; the
    kills by kind."""
    front = frontend(svc)
    kinds = a.kinds.split(",")
    kill_at = sorted(random.uniform(0.1, 0.9) * len(steps) for _ in range(a.kills))
    injected: Counter[str] = Counter()
    t0 = time.monotonic()
    for n, step in enumerate(steps):
        while kill_at and n >= kill_at[0]:
            kill_at.pop(0)
            kind = random.choice(kinds)
            try:
                pid = inject(svc, kind)
            except ProcessLookupError:
                pid = None
            if pid:
                injected[kind] += 1
                print(f"step {n}: killed {kind} (pid {pid})", flush=True)
        for rid in step.starts:  # in flight from now: a RESTARTED ends it (section 5.3)
            front.register(rid)
        for f in (*step.opens, *([step.batch] if step.batch else []), *step.ends):
            svc.send(f)
        front.poll(0)
        delay = t0 + (n + 1) / a.frames_per_s - time.monotonic()
        if delay > 0:
            front.poll(delay)
    return injected


def print_frontend(front: Frontend) -> None:
    """What the frontend dropped, ended on a RESTARTED, and found wrong."""
    print(f"{'stale deltas dropped':<22} {front.late} ({front.late_terminal} of them "
          "a second terminal delta)")
    alone = sum(1 for o in front.requests.values() if o.by_frontend and o.late_finish is None)
    print(f"{'ended by RESTARTED':<22} {front.ended_by_restart} "
          f"({sum(m.shard == EGRESS for m in front.restarts)} egress and "
          f"{sum(m.shard >= 0 for m in front.restarts)} shard RESTARTED notices); "
          f"{alone} of them never ended by the service (lost without protocol section 5.3)")
    print(f"{'frontend violations':<22} {len(front.violations)} "
          f"{front.violations[:3] if front.violations else ''}")


def main(a: argparse.Namespace) -> int:
    """`scripts/load/faults.py`: 0 when nothing was lost and nothing was wrong."""
    random.seed(a.seed)
    info = load("deepseek-v4")
    reqs, steps = workload(a, info)
    svc = LocalService(shards=2, args=a.service_args.split()).start()
    print(f"service: {shards_text(svc.shards)} (its /health)", flush=True)
    try:
        injected = drive(svc, steps, a)
        dropped = settle(svc)
    finally:
        # the supervisor's word on each death (its log goes with the service's directory)
        deaths = [line for line in svc.log_path.read_text(errors="replace").splitlines()
                  if " exited with code " in line or " restarted " in line]
        rc = svc.stop()
    outcome = judge(frontend(svc), reqs, info)
    print("\nfaults injected: " + (", ".join(f"{k} {v}" for k, v in injected.items()) or "none"))
    print(f"{'requests':<22} {len(reqs)}")
    for k in ("completed exact", "failed with error", "lost", "wrong"):
        print(f"{k:<22} {outcome[k]}")
    print(f"{'in == done + failed':<22} "
          f"{len(reqs) == outcome['completed exact'] + outcome['failed with error']}")
    print_frontend(frontend(svc))
    print(f"frames dropped by reason: {dropped or 'none'}; service exit code {rc}")
    print("the supervisor's log of deaths and restarts:")
    for line in deaths:
        print(f"  {line}")
    return 0 if not outcome["lost"] and not outcome["wrong"] else 1


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """The flags of `scripts/load/faults.py` (its `main` parses them)."""
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--kills", type=int, default=6)
    ap.add_argument("--frames-per-s", type=float, default=100)
    ap.add_argument("--kinds", default="shard,egress,http", help="any of shard,egress,http,double")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--service-args", default="", help="extra `sglang-tok serve` flags")
