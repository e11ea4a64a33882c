#!/usr/bin/env python3
"""Stage costs against another checkout of the project, trial by trial.

On a shared machine the same command varies by a third from one run to the next, so two
runs of `bench_stages.py` (one per checkout) cannot tell a 5% change. Here one worker
process per checkout (each with its own python, importing its own `scripts/bench_stages.py`)
builds the same traces, and the driver asks them in turn for one trial of each measure,
alternating which goes first: neighbouring trials see the same noise. The figure is the
median over cycles of the ratio this checkout / the other. A worker process is biased as a
whole (its hash seed, its memory layout: the same code against itself gave 0.98-1.03 from
one pair of processes), so the cycles are spread over `--pairs` fresh pairs. The lean
peer's `DecodeStream.step` is the same code in both checkouts: its row is the noise floor.

    git worktree add /tmp/before COMMIT && python3 -m venv /tmp/before/.venv \
        && /tmp/before/.venv/bin/pip install -q -e '/tmp/before[scripts]'
    python scripts/bench_against.py /tmp/before --cycles 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# trace: (requests, concurrency, ids per row, share with top-5 logprobs): bench_stages'
# defaults, written here because the other checkout's bench_stages may name them nowhere
TRACES = {"a": (2048, 1024, 1, 0.05), "b": (768, 256, 4, 0.0), "small": (400, 16, 1, 0.05)}
# a BATCH frame's first byte (docs/protocol.md): the worker imports nothing of its checkout
# but bench_stages, whose modules may live anywhere in either
BATCH_TAG = 0x02
MEASURES = ("e1", "e2", "s1d", "s1c", "s1p", "s2", "step")
TITLES = {"e1": "egress, 1 shard", "e2": "egress, 2 shards", "s1d": "shard, DELTAS out",
          "s1c": "shard, COLUMNS out", "s1p": "shard, PACKED out",
          "s2": "shard 0 of 2, DELTAS out", "step": "lean peer: DecodeStream.step (same code)"}
DEFAULT_KEYS = [f"{t}.{m}" for t in ("a", "b") for m in MEASURES] + \
    ["small.e1", "small.s1d", "small.s1p"]


def worker(tree: str, keys: list[str]) -> None:
    """One checkout's side: build the traces the keys name, then one trial per request
    line, answered with seconds per row (per frame for the small trace)."""
    os.chdir(tree)
    sys.path.insert(0, os.path.join(tree, "scripts"))
    import bench_stages as bs

    from sglang_tok.tokenizer import load

    info = load("deepseek-v4")
    with tempfile.TemporaryDirectory(prefix="bench-against-") as runtime:
        built: dict[str, tuple[Any, list[bytes], list[bytes], dict[str, float]]] = {}
        for name in dict.fromkeys(k.split(".")[0] for k in keys):
            tr = bs.make_trace(info, "a" if name == "small" else name, *TRACES[name])
            m1, m2 = bs.shard_messages(tr, 1, runtime), bs.shard_messages(tr, 2, runtime)
            built[name] = (tr, m1, m2, per_frame(bs, tr, m1, m2)
                           if name == "small" else {})
        print("ready", flush=True)
        for line in sys.stdin:
            name, measure = line.strip().split(".")
            tr, m1, m2, scale = built[name]
            seconds = trial(bs, info, runtime, tr, m1, m2, measure)
            print(json.dumps(seconds * scale.get(measure, 1.0)), flush=True)


def per_frame(bs: Any, tr: Any, m1: list[bytes], m2: list[bytes]) -> dict[str, float]:
    """Per measure, what turns its seconds per row into seconds per BATCH frame: the small
    trace's cost is per-call overheads, so it is given per frame."""
    frames = sum(1 for f in tr.frames if f[0] == BATCH_TAG)
    own1, own2 = bs.own_rows(m1)[0] / frames, bs.own_rows(m2)[0] / frames
    return {"e1": tr.rows / frames, "e2": tr.rows / frames, "s1d": own1, "s1c": own1,
            "s1p": own1, "s2": own2, "step": tr.ids / frames}


def trial(bs: Any, info: Any, runtime: str, tr: Any, m1: list[bytes], m2: list[bytes],
          measure: str) -> float:
    """One run of one of bench_stages' measures, seconds per row."""
    if measure in ("e1", "e2"):
        return float(bs.measure_egress(tr, int(measure[1]), 1, runtime))
    if measure == "step":
        return float(bs.measure_decodestream(info, tr.frames, 1))
    fmt = {"s1d": "deltas", "s1c": "columnar", "s1p": "packed", "s2": "deltas"}[measure]
    return float(bs.measure_shard(info, m2 if measure == "s2" else m1, fmt, 1, runtime)[0])


def ask(proc: subprocess.Popen[str], key: str) -> float:
    stdin, stdout = proc.stdin, proc.stdout
    assert stdin is not None and stdout is not None
    stdin.write(key + "\n")
    stdin.flush()
    return float(json.loads(stdout.readline()))


def start(python: str, tree: str, keys: list[str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen([python, __file__, "--worker", tree, "--keys", ",".join(keys)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise SystemExit(f"bench_against: the worker for {tree} did not start")
    return proc


def report(keys: list[str], ours: dict[str, list[float]], theirs: dict[str, list[float]]) -> None:
    print("| measure | other, best us | this, best us | this / other, median of cycles |")
    print("|---|---|---|---|")
    for key in keys:
        ratios = [a / b for a, b in zip(ours[key], theirs[key])]
        name, measure = key.split(".")
        print(f"| {name}: {TITLES[measure]} | {min(theirs[key]) * 1e6:.3f} | "
              f"{min(ours[key]) * 1e6:.3f} | {statistics.median(ratios):.3f} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("other", nargs="?", help="the other checkout's root")
    ap.add_argument("--other-python", help="its python (default: OTHER/.venv/bin/python)")
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--keys", default=",".join(DEFAULT_KEYS),
                    help="TRACE.MEASURE, comma-separated (traces a, b, small; measures "
                    f"{', '.join(MEASURES)})")
    ap.add_argument("--pairs", type=int, default=5,
                    help="fresh worker processes this many times (a process's own bias "
                         "evens out)")
    ap.add_argument("--json", help="write every trial here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    keys = a.keys.split(",")
    bad = [k for k in keys if k.count(".") != 1 or k.split(".")[0] not in TRACES
           or k.split(".")[1] not in MEASURES]
    if bad:
        ap.error(f"--keys: unknown {', '.join(bad)}")
    if a.worker:
        worker(a.worker, keys)
        return 0
    if not a.other:
        ap.error("the other checkout's root is required")
    here = str(Path(__file__).resolve().parent.parent)
    other_python = a.other_python or os.path.join(a.other, ".venv", "bin", "python")
    if not os.path.exists(other_python):
        ap.error(f"--other-python: no python at {other_python}")
    trials: dict[str, dict[str, list[float]]] = {w: {k: [] for k in keys}
                                                  for w in ("this", "other")}
    # a worker process is biased as a whole (its hash seed lays out the router's dicts,
    # its memory its arrays): the same code against itself gave 0.98-1.03 with one pair,
    # so the cycles are spread over --pairs fresh pairs of workers
    pairs = max(1, min(a.pairs, a.cycles))
    for pair in range(pairs):
        procs = {"this": start(sys.executable, here, keys),
                 "other": start(other_python, os.path.abspath(a.other), keys)}
        try:
            for cycle in range(pair * a.cycles // pairs, (pair + 1) * a.cycles // pairs):
                order = ["other", "this"] if cycle % 2 == 0 else ["this", "other"]
                for key in keys:
                    for side in order:
                        trials[side][key].append(ask(procs[side], key))
        finally:
            for proc in procs.values():
                if proc.stdin is not None:
                    proc.stdin.close()
                proc.wait(timeout=60)
    if a.json:
        Path(a.json).write_text(json.dumps(trials))
    print(f"{a.cycles} cycles over {pairs} pairs of worker processes, one trial per measure "
          f"per checkout in each, thread CPU time; us per row (small: per frame)")
    report(keys, trials["this"], trials["other"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
