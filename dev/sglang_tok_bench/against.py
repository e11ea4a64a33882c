"""Stage costs against another checkout of the project, trial by trial
(`scripts/bench/against.py`).

On a shared machine the same command varies by a third from one run to the next, so two
runs of the stage benchmark (one per checkout) cannot tell a 5% change. Here one worker
process per checkout (`against_worker.py`, each with its own python, importing its own
checkout's stage measures: `sglang_tok_bench.stages`, or `scripts/bench_stages.py`
in a checkout from before the scripts moved) builds the same traces, and the driver asks
them in turn for one trial of each measure, alternating which goes first: neighbouring
trials see the same noise. The figure is the median over cycles of the ratio this
checkout / the other. A worker process is biased as a whole (its hash seed, its memory
layout: the same code against itself gave 0.98-1.03 from one pair of processes), so the
cycles are spread over `--pairs` fresh pairs. The lean peer's `DecodeStream.step` is the
same code in both checkouts: its row is the noise floor.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from sglang_tok_bench.against_worker import (
    HARNESS_STAGES,
    MEASURES,
    OLD_STAGES,
    STAGES,
    TRACES,
)
from sglang_tok_bench.checkout import resolve

WORKER = Path(__file__).with_name("against_worker.py")  # run as a file by either python
TITLES = {"e1": "egress, 1 shard", "e2": "egress, 2 shards", "s1d": "shard, DELTAS out",
          "s1c": "shard, COLUMNS out", "s1p": "shard, PACKED out",
          "s2": "shard 0 of 2, DELTAS out", "step": "lean peer: DecodeStream.step (same code)"}
DEFAULT_KEYS = [f"{t}.{m}" for t in ("a", "b") for m in MEASURES] + \
    ["small.e1", "small.s1d", "small.s1p"]


class Usage(ValueError):
    """A flag the run cannot use: the script reports it as argparse reports its own."""


def unknown_keys(keys: list[str]) -> list[str]:
    return [k for k in keys if k.count(".") != 1 or k.split(".")[0] not in TRACES
            or k.split(".")[1] not in MEASURES]


def stages_of(tree: Path) -> tuple[str, dict[str, str] | None]:
    """Where `tree` keeps its stage measures: the module its worker imports, and the
    environment it needs: its dev/ folder on PYTHONPATH (the benchmarks' package beside
    the service's); a checkout from before that, its harness's module; from before that,
    its scripts/ on PYTHONPATH, where `bench_stages` imports its neighbour `common`."""
    if (tree / "dev" / "sglang_tok_bench" / "stages.py").exists():
        path = os.pathsep.join(filter(None, [str(tree / "dev"), str(tree / "standin"),
                                             os.environ.get("PYTHONPATH")]))
        return STAGES, {**os.environ, "PYTHONPATH": path}
    if (tree / "sglang_tok" / "harness" / "bench" / "stages.py").exists():
        return HARNESS_STAGES, None
    if (tree / "scripts" / "bench_stages.py").exists():
        path = os.pathsep.join(filter(None, [str(tree / "scripts"),
                                             os.environ.get("PYTHONPATH")]))
        return OLD_STAGES, {**os.environ, "PYTHONPATH": path}
    raise Usage(f"{tree} has neither dev/sglang_tok_bench/stages.py, "
                "sglang_tok/harness/bench/stages.py nor scripts/bench_stages.py")


def start(python: str, tree: Path, keys: list[str]) -> subprocess.Popen[str]:
    """A worker of `tree` under `python`, once it has built its traces."""
    stages, env = stages_of(tree)
    # -P: the worker's folder (this checkout's package) is not put on its sys.path
    proc = subprocess.Popen([python, "-P", str(WORKER), str(tree), "--stages", stages,
                             "--keys", ",".join(keys)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise SystemExit(f"bench against: the worker for {tree} did not start")
    return proc


def ask(proc: subprocess.Popen[str], key: str) -> float:
    stdin, stdout = proc.stdin, proc.stdout
    assert stdin is not None and stdout is not None
    stdin.write(key + "\n")
    stdin.flush()
    return float(json.loads(stdout.readline()))


def report(keys: list[str], ours: dict[str, list[float]], theirs: dict[str, list[float]]) -> None:
    print("| measure | other, best us | this, best us | this / other, median of cycles |")
    print("|---|---|---|---|")
    for key in keys:
        ratios = [a / b for a, b in zip(ours[key], theirs[key])]
        name, measure = key.split(".")
        print(f"| {name}: {TITLES[measure]} | {min(theirs[key]) * 1e6:.3f} | "
              f"{min(ours[key]) * 1e6:.3f} | {statistics.median(ratios):.3f} |")


def trials(here: Path, other: Path, other_python: str, keys: list[str], cycles: int,
           pairs: int) -> dict[str, dict[str, list[float]]]:
    """Per side ("this", "other") and key, one trial per cycle, over `pairs` fresh pairs
    of workers: a worker process is biased as a whole (its hash seed lays out the
    router's dicts, its memory its arrays)."""
    out: dict[str, dict[str, list[float]]] = {w: {k: [] for k in keys}
                                               for w in ("this", "other")}
    for pair in range(pairs):
        procs = {"this": start(sys.executable, here, keys),
                 "other": start(other_python, other, keys)}
        try:
            for cycle in range(pair * cycles // pairs, (pair + 1) * cycles // pairs):
                order = ["other", "this"] if cycle % 2 == 0 else ["this", "other"]
                for key in keys:
                    for side in order:
                        out[side][key].append(ask(procs[side], key))
        finally:
            for proc in procs.values():
                if proc.stdin is not None:
                    proc.stdin.close()
                proc.wait(timeout=60)
    return out


def main(a: argparse.Namespace, here: Path) -> int:
    """`scripts/bench/against.py` in the checkout at `here`; Usage for a flag it cannot
    use."""
    keys = a.keys.split(",")
    bad = unknown_keys(keys)
    if bad:
        raise Usage(f"--keys: unknown {', '.join(bad)}")
    if not a.other:
        raise Usage("the other checkout's root (or a git revision) is required")
    other = resolve(a.other, here, a.other_python)
    if not other.python.exists():
        raise Usage(f"--other-python: no python at {other.python}")
    stages_of(other.root)  # a checkout without the stage measures is a usage error
    pairs = max(1, min(a.pairs, a.cycles))
    got = trials(here, other.root, str(other.python), keys, a.cycles, pairs)
    if a.json:
        Path(a.json).write_text(json.dumps(got))
    print(f"{a.cycles} cycles over {pairs} pairs of worker processes, one trial per measure "
          f"per checkout in each, thread CPU time; us per row (small: per frame)")
    report(keys, got["this"], got["other"])
    return 0


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """The flags of `scripts/bench/against.py` (its `main` parses them)."""
    ap.add_argument("other", nargs="?",
                    help="the other checkout's root, or a git revision (a worktree of it with "
                         "its own venv is made, and kept, under $TMPDIR)")
    ap.add_argument("--other-python", help="its python (default: OTHER/.venv/bin/python)")
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--keys", default=",".join(DEFAULT_KEYS),
                    help="TRACE.MEASURE, comma-separated (traces a, b, small; measures "
                    f"{', '.join(MEASURES)})")
    ap.add_argument("--pairs", type=int, default=5,
                    help="fresh worker processes this many times (a process's own bias "
                         "evens out)")
    ap.add_argument("--json", help="write every trial here")
