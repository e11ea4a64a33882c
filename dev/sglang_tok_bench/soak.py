"""Soak: requests opening and closing continuously for minutes; nothing may leak
(`scripts/load/soak.py`).

Runs a real service (2 shards) under a steady stream of short requests, sampling each
shard's resident memory and open file descriptors every few seconds. At the end checks:
every request exact, live-request gauges back to zero, shard RSS flat once warm (last
sample within 10% of the first warm one), no growth in file descriptors, and no
shared-memory segments or ipc files left behind after shutdown. Prints the samples.
"""

from __future__ import annotations

import argparse
import glob
import json
import time
from pathlib import Path

import psutil

from sglang_tok.kit.local_service import LocalService
from sglang_tok.kit.workload import PlanSpec, make_requests, schedule, verify
from sglang_tok.tokenizer import load


def shard_stats(svc: LocalService) -> list[tuple[int, int]]:
    """(rss MiB, open fds) of each shard."""
    out = []
    for p in svc.health()[1]["processes"]:
        if not p["role"].startswith("shard"):
            continue
        proc = psutil.Process(p["pid"])
        out.append((proc.memory_info().rss >> 20, proc.num_fds()))
    return out


def soak(minutes: float, rate: float = 200.0, sample_every: float = 5.0,
         warmup_fraction: float = 0.2) -> dict:
    info = load("deepseek-v4")
    shm_before = set(glob.glob("/dev/shm/*"))
    svc = LocalService(shards=2).start()
    samples: list[tuple[float, list[tuple[int, int]]]] = []
    problems: list[str] = []
    t0 = time.monotonic()
    end = t0 + 60 * minutes
    seed = 0
    total = 0
    try:
        next_sample = t0
        while time.monotonic() < end:
            seed += 1
            reqs = make_requests(info, PlanSpec(requests=128, concurrency=64, min_tokens=4,
                                                max_tokens=48, stop_share=0.1,
                                                options_share=0.2, logprob_share=0.05,
                                                abort_share=0.02, seed=seed), prefix="soak")
            svc.send_steps(schedule(reqs, 64, seed), interval=1 / rate)
            svc.barrier()
            total += len(reqs)
            assert svc.front is not None
            for r in reqs:
                problems += verify(r, svc.front.requests.pop(r.rid, None), info)
            if time.monotonic() >= next_sample:
                samples.append((time.monotonic() - t0, shard_stats(svc)))
                next_sample += sample_every
        time.sleep(0.3)
        m = svc.metrics()
        live = sum(v for k, v in m.items() if k.startswith("sglang_tok_live_requests"))
        samples.append((time.monotonic() - t0, shard_stats(svc)))
    finally:
        rc = svc.stop()
    leftovers = sorted(set(glob.glob("/dev/shm/*")) - shm_before)
    warm = [s for t, s in samples if t >= warmup_fraction * 60 * minutes] or [samples[-1][1]]
    first, last = warm[0], samples[-1][1]
    rss_growth = max((b[0] - a[0]) / max(1, a[0]) for a, b in zip(first, last))
    fd_growth = max(b[1] - a[1] for a, b in zip(first, last))
    return {"samples": samples, "problems": problems[:10], "live_at_end": live,
            "rss_growth": rss_growth, "fd_growth": fd_growth, "shm_leftovers": leftovers,
            "ipc_leftovers": sorted(str(p) for p in svc.runtime.glob("*.ipc"))
            if svc.runtime.exists() else [],
            "exit_code": rc, "requests": total}


def main(a: argparse.Namespace) -> int:
    """`scripts/load/soak.py`: the soak, its samples printed; 0 when nothing leaked."""
    r = soak(a.minutes, sample_every=a.sample_every, warmup_fraction=a.warmup_fraction)
    if a.json:
        Path(a.json).write_text(json.dumps(r))
    for t, s in r["samples"]:
        print(f"t={t:7.1f}s  " + "  ".join(f"shard{i}: {rss} MiB {fds} fds"
                                           for i, (rss, fds) in enumerate(s)))
    print(f"requests {r['requests']}, problems {len(r['problems'])}, live at end "
          f"{r['live_at_end']}, rss growth once warm {100 * r['rss_growth']:.1f}%, fd growth "
          f"{r['fd_growth']}, shm leftovers {r['shm_leftovers']}, ipc leftovers "
          f"{r['ipc_leftovers']}, exit code {r['exit_code']}")
    ok = (not r["problems"] and r["live_at_end"] == 0 and r["rss_growth"] <= 0.10
          and r["fd_growth"] <= 0 and not r["shm_leftovers"] and not r["ipc_leftovers"]
          and r["exit_code"] == 0)
    return 0 if ok else 1


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """The flags of `scripts/load/soak.py` (its `main` parses them)."""
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--sample-every", type=float, default=5.0, help="seconds")
    ap.add_argument("--warmup-fraction", type=float, default=0.2,
                    help="share of the run before RSS is taken as warm")
    ap.add_argument("--json", default="", help="write the full result here")
