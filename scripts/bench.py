#!/usr/bin/env python3
"""The benchmark: sglang-tok (1 and 2 shards) against the SGLang and vLLM baselines.

One run, same traces, same sockets, same client. For each system and trace: saturated
throughput (replay as fast as backpressure allows), then a replay paced at 50% of that
system's own saturated frame rate for latency. CPU seconds per million tokens count every
process of the system (service: supervisor, egress, shards, http). Figures are printed with
their ratio to the best baseline of the same trace: ratios, because the machine is shared.

    python scripts/bench.py                   # both standard traces
    python scripts/bench.py --quick           # small traces, for a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, os.path.dirname(__file__))

from replay import Target, replay, start_baseline, start_service
from synth import synthesise
from tracefile import read

from sglang_tok.workload import PlanSpec

SYSTEMS = ["sglang-tok x1", "sglang-tok x2", "baseline sglang", "baseline vllm"]


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def start(system: str, tokenizer: str, work: Path) -> Target:
    if system.startswith("sglang-tok"):
        return start_service(int(system[-1]), tokenizer, work)
    return start_baseline(system.split()[-1], tokenizer, work)


def measure(system: str, trace_path: str, work: Path) -> dict[str, Any]:
    trace = read(trace_path)
    tokenizer = trace.meta.get("tokenizer", "deepseek-v4")
    out: dict[str, Any] = {}
    target = start(system, tokenizer, work)
    try:
        pids = target.pids()
        c0 = cpu_seconds(pids)
        sat = replay(trace, target, None, progress=False)
        c1 = cpu_seconds(pids)
    finally:
        target.stop()
    out["saturated"] = sat
    out["cpu_s_per_mtok"] = (c1 - c0) / max(1, sat["tokens"]) * 1e6
    fps = len(trace.frames) / sat["elapsed_s"]
    target = start(system, tokenizer, work)
    try:
        half = replay(trace, target, None, progress=False, rate_fps=fps * 0.5)
    finally:
        target.stop()
    out["half"] = half
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--traces", default="a,b", help="which standard traces: a, b or a,b")
    ap.add_argument("--json", default="bench-out/bench.json")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sglang-tok-bench-"))
    scale = 4 if a.quick else 1
    traces = {
        "a: 1024 conc, 1 id/row, 5% top-5": PlanSpec(
            requests=4096 // scale, concurrency=1024 // scale, ids_per_row=(1, 1),
            min_tokens=32, max_tokens=160, logprob_share=0.05, top_k=5, engines=2, seed=1),
        "b: 256 conc, 4 ids/row": PlanSpec(
            requests=1024 // scale, concurrency=256 // scale, ids_per_row=(4, 4),
            min_tokens=64, max_tokens=512, engines=2, seed=2),
    }
    results: dict[str, dict[str, Any]] = {}
    systems = a.systems.split(",")
    for name, spec in traces.items():
        if name[0] not in a.traces.split(","):
            continue
        path = str(work / f"{name[0]}.trace")
        stats = synthesise(path, spec, "deepseek-v4", 20.0, spec.top_k)
        print(f"trace {name}: {stats}", flush=True)
        results[name] = {}
        for system in systems:
            r = measure(system, path, work)
            results[name][system] = r
            s, h = r["saturated"], r["half"]
            print(f"  {system:<16} {s['tokens_per_s']:>10,.0f} tok/s  exact "
                  f"{s['verified_exact']}/{s['requests']}  p99@50% "
                  f"{h['latency_ms']['p99']:.2f} ms  cpu {r['cpu_s_per_mtok']:.2f} s/Mtok",
                  flush=True)
    print()
    header = (f"{'trace':<34} {'system':<16} {'tok/s':>10} {'x best':>7} {'p50@50%':>8} "
              f"{'p99@50%':>8} {'x best':>7} {'cpu s/Mtok':>10} {'tok/cpu-s x':>11} {'exact':>10}")
    print(header)
    print("-" * len(header))
    for name, per in results.items():
        bases = {k: v for k, v in per.items() if k.startswith("baseline")}
        best_tps = max((v["saturated"]["tokens_per_s"] for v in bases.values()), default=1)
        best_p99 = min((v["half"]["latency_ms"]["p99"] for v in bases.values()), default=1)
        best_cpu = min((v["cpu_s_per_mtok"] for v in bases.values()), default=1)
        for system, r in per.items():
            s, h = r["saturated"], r["half"]
            print(f"{name:<34} {system:<16} {s['tokens_per_s']:>10,.0f} "
                  f"{s['tokens_per_s'] / best_tps:>6.2f}x {h['latency_ms']['p50']:>8.2f} "
                  f"{h['latency_ms']['p99']:>8.2f} {h['latency_ms']['p99'] / best_p99:>6.2f}x "
                  f"{r['cpu_s_per_mtok']:>10.2f} {best_cpu / r['cpu_s_per_mtok']:>10.2f}x "
                  f"{s['verified_exact']:>5}/{s['requests']:<4}")
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(
        {n: {s: {k: ({kk: vv for kk, vv in v.items() if not kk.startswith("_")}
                     if isinstance(v, dict) else v) for k, v in r.items()}
             for s, r in per.items()} for n, per in results.items()}, indent=1))
    print(f"\nJSON: {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
