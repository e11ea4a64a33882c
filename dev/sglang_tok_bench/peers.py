"""The benchmark: the service's targets, sglang-tok (1 and 2 shards) against the lean peers
(`scripts/bench/peers.py`).

One run, same traces, same sockets, same client, systems side by side (ratios, because
the machine is shared and noisy). The peer is `baselines` vllm: one process stepping a
`tokenizers` DecodeStream per request, reading frames with raw msgpack and `array` and
writing plain maps; `baselines` sglang (SGLang's DetokenizerManager, same lean I/O) is
shown beside it. For every system and trace:

  flat out     replay as fast as backpressure allows: ids/s, and CPU seconds per million
               ids summed over every process of the system (psutil; the client excluded)
  window       replay with at most --window (64) BATCH frames in flight: ids/s
  50% load     replay at half the peer's flat-out frame rate: frame latency p50/p99 (send
               to the last delta its rows produced), time to first delta, inter-delta gap

Then each target, with its ratio and whether it was reached.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sglang_tok.kit.workload import PlanSpec
from sglang_tok.tracefile import read
from sglang_tok_bench.figures import median, ratio, strip, write_json
from sglang_tok_bench.replay import Target, replay, start_baseline, start_service
from sglang_tok_bench.synth import synthesise
from sglang_tok_testkit.processes import cpu_seconds, workdir

PEER = "peer vllm"
SYSTEMS = ["sglang-tok x1", "sglang-tok x2", PEER, "peer sglang"]


def start(system: str, tokenizer: str, work: Path, extra: list[str]) -> Target:
    if system.startswith("sglang-tok"):
        return start_service(int(system[-1]), tokenizer, extra)
    return start_baseline(system.split()[-1], tokenizer, work)


def run_once(system: str, trace_path: str, work: Path, extra: list[str],
             **kw: Any) -> dict[str, Any]:
    """One fresh start of the system, one replay; CPU counted from the first frame sent
    to the last PONG received, so start-up and verification are not in it."""
    trace = read(trace_path)
    target = start(system, trace.meta.get("tokenizer", "deepseek-v4"), work, extra)
    try:
        pids = target.pids()
        per: dict[str, list[float]] = {}
        probe: Callable[[], float] = lambda: cpu_seconds(pids, per)  # noqa: E731
        r = replay(trace, target, None, progress=False, probe=probe, **kw)
    finally:
        target.stop()
    r["cpu_s_per_mid"] = r["probe"] / max(1, r["tokens"]) * 1e6
    # each process's share, from the first send to the last PONG
    r["cpu_by_process"] = {k: round(v[-1] - v[0], 3) for k, v in per.items() if len(v) > 1}
    return r


def measure(systems: list[str], path: str, work: Path, window: int, repeat: int,
            extra: list[str]) -> dict[str, Any]:
    """Rounds of every system, interleaved, so that each round sees the same machine."""
    per: dict[str, dict[str, list[dict[str, Any]]]] = {
        s: {"flat": [], "window": [], "half": []} for s in systems}
    for n in range(repeat):
        for system in systems:
            flat = run_once(system, path, work, extra)
            win = run_once(system, path, work, extra, window=window)
            per[system]["flat"].append(flat)
            per[system]["window"].append(win)
            print(f"  round {n + 1} {system:<14} flat {flat['tokens_per_s']:>10,.0f} ids/s  "
                  f"cpu {flat['cpu_s_per_mid']:.2f} s/M ids  window {window}: "
                  f"{win['tokens_per_s']:>10,.0f} ids/s  exact {flat['verified_exact']}/"
                  f"{flat['requests']}", flush=True)
            print(f"    CPU s by process (flat): {flat['cpu_by_process']}", flush=True)
    peer = per[PEER if PEER in per else systems[-1]]["flat"]
    rate = 0.5 * median([r["frames"] / r["elapsed_s"] for r in peer])
    for n in range(repeat):
        for system in systems:
            half = run_once(system, path, work, extra, rate_fps=rate)
            per[system]["half"].append(half)
            print(f"  round {n + 1} {system:<14} at {rate:,.0f} frames/s: frame p99 "
                  f"{half['latency_ms']['p99']:.2f} ms", flush=True)
    return {"systems": per, "half_rate_fps": rate}


def fig(res: dict[str, Any], system: str, kind: str, *path: str) -> float:
    """The median over rounds of one figure, e.g. fig(res, PEER, "half", "latency_ms", "p99")."""
    vals = []
    for r in res["systems"][system][kind]:
        for key in path:
            r = r[key]
        vals.append(float(r))
    return median(vals)


COLUMNS: list[tuple[str, str, tuple[str, ...], str, bool]] = [
    # heading, run kind, figure path, format, with a ratio to the peer
    ("flat ids/s", "flat", ("tokens_per_s",), ",.0f", True),
    ("w{w} ids/s", "window", ("tokens_per_s",), ",.0f", True),
    ("CPU s/Mid", "flat", ("cpu_s_per_mid",), ".2f", True),
    ("p50@50%", "half", ("latency_ms", "p50"), ".2f", False),
    ("p99@50%", "half", ("latency_ms", "p99"), ".2f", True),
    ("TTFT p99", "half", ("ttft_ms", "p99"), ".2f", False),
    ("gap p99", "half", ("gap_ms", "p99"), ".2f", False),
]


def print_systems(name: str, res: dict[str, Any], window: int) -> None:
    per = res["systems"]
    peer = PEER if PEER in per else None
    print(f"\ntrace {name}; 50% load = {res['half_rate_fps']:,.0f} frames/s (half the "
          f"peer's flat-out rate); medians of {len(per[next(iter(per))]['flat'])} rounds; "
          "latencies in ms")
    head = f"{'system':<14}"
    for title, _, _, _, rel in COLUMNS:
        head += f" {title.format(w=window):>11}" + (f" {'x peer':>6}" if rel else "")
    head += f" {'exact':>11}"
    print(head)
    print("-" * len(head))
    for system, runs in per.items():
        line = f"{system:<14}"
        for _, kind, path, fmt, rel in COLUMNS:
            x = fig(res, system, kind, *path)
            line += f" {x:>11{fmt}}"
            if rel:
                line += f" {ratio(x, fig(res, peer, kind, *path)) if peer else 1:>5.2f}x"
        exact = min(r["verified_exact"] for rs in runs.values() for r in rs)
        line += f" {exact:>5}/{runs['flat'][0]['requests']:<5}"
        print(line)


def targets(results: dict[str, Any], window: int) -> list[tuple[str, str, float, bool]]:
    """(target, trace, figure, reached) for every target this benchmark measures."""
    out = []
    x1, x2 = "sglang-tok x1", "sglang-tok x2"
    for name, res in results.items():
        per = res["systems"]
        t = name.split(":")[0]

        def rel(a: str, b: str, kind: str, *path: str) -> float:
            return ratio(fig(res, a, kind, *path), fig(res, b, kind, *path))  # noqa: B023

        cpu1 = {"a": 0.35, "b": 0.25}.get(t, 0.35)
        if x1 in per and PEER in per:
            x = rel(x1, PEER, "flat", "cpu_s_per_mid")
            out.append((f"CPU per id, 1 shard <= {cpu1:.2f}x peer", t, x, x <= cpu1))
        if x2 in per and PEER in per and t == "a":
            x = rel(x2, PEER, "flat", "cpu_s_per_mid")
            out.append(("CPU per id, 2 shards <= 0.40x peer", t, x, x <= 0.4))
        if x1 in per and PEER in per:
            x = rel(x1, PEER, "flat", "tokens_per_s")
            out.append(("saturated ids/s, 1 shard >= 2.0x peer", t, x, x >= 2.0))
            x = rel(x1, PEER, "window", "tokens_per_s")
            out.append((f"ids/s, 1 shard, {window} frames in flight (vs peer)", t, x, x >= 2.0))
        for system in (x1, x2):
            if system in per and PEER in per:
                x = rel(system, PEER, "half", "latency_ms", "p99")
                shards = "1 shard" if system == x1 else "2 shards"
                out.append((f"p99 frame latency at 50%, {shards} <= 0.5x peer", t, x,
                            x <= 0.5))
        for system, runs in per.items():
            if system.startswith("sglang-tok"):
                bad = sum(r["requests"] - r["verified_exact"] for rs in runs.values()
                          for r in rs)
                out.append((f"every request verified, {system}", t, float(bad), bad == 0))
    return out


def print_targets(rows: list[tuple[str, str, float, bool]]) -> None:
    print(f"\n{'target':<52} {'trace':<5} {'figure':>8}  result")
    print("-" * 78)
    for target, trace, x, ok in rows:
        fig = f"{x:.0f} bad" if target.startswith("every") else f"{x:.2f}x"
        print(f"{target:<52} {trace:<5} {fig:>8}  {'reached' if ok else 'NOT reached'}")
    print(f"{'shard row, egress row, client delta, 16-core model':<52} {'-':<5} {'-':>8}  "
          "measured by scripts/bench/stages.py")


def standard_traces(scale: int) -> dict[str, PlanSpec]:
    return {
        "a: 1024 conc, 1 id/row, 5% top-5": PlanSpec(
            requests=4096 // scale, concurrency=1024 // scale, ids_per_row=(1, 1),
            min_tokens=32, max_tokens=160, logprob_share=0.05, top_k=5, engines=2, seed=1),
        "b: 256 conc, 4 ids/row": PlanSpec(
            requests=1024 // scale, concurrency=256 // scale, ids_per_row=(4, 4),
            min_tokens=64, max_tokens=512, engines=2, seed=2),
    }


def main(a: argparse.Namespace) -> int:
    """`scripts/bench/peers.py`: the traces, every system on each, the tables and targets."""
    work = workdir("sglang-tok-bench-")
    systems = a.systems.split(",")
    results: dict[str, Any] = {}
    for name, spec in standard_traces(4 if a.quick else 1).items():
        if name[0] not in a.traces.split(","):
            continue
        path = str(work / f"{name[0]}.trace")
        stats = synthesise(path, spec, "deepseek-v4", 20.0, spec.top_k)
        print(f"trace {name}: {stats}", flush=True)
        extra = ["--output-format", a.output_format] if a.output_format else []
        results[name] = measure(systems, path, work, a.window, a.repeat, extra)
    for name, res in results.items():
        print_systems(name, res, a.window)
    rows = targets(results, a.window)
    print_targets(rows)
    write_json(a.json, {"results": strip(results), "targets": rows, "window": a.window})
    print(f"\nJSON: {a.json}")
    return 0


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """The flags of `scripts/bench/peers.py` (its `main` parses them)."""
    ap.add_argument("--quick", action="store_true", help="quarter-size traces")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--traces", default="a,b", help="which standard traces: a, b or a,b")
    ap.add_argument("--window", type=int, default=64, help="frames in flight")
    ap.add_argument("--repeat", type=int, default=1, help="rounds; figures are medians")
    ap.add_argument("--output-format", default="", help="sglang-tok's --output-format")
    ap.add_argument("--json", default="bench-out/bench.json")
