"""One checkout's side of `against.py`: build the traces the keys name, then answer one
trial per request line (stdin) with seconds per row (per frame for the small trace).

It is run as a file (`python -P against_worker.py TREE --stages MODULE --keys ...`) by the
measured checkout's own python, and imports nothing of the checkout it comes from: only
the standard library, and the measured checkout's stage measures (`--stages`):
`sglang_tok_bench.stages`, or in a checkout from before the scripts moved into the
package, `bench_stages` (its `scripts/bench_stages.py`, found through the PYTHONPATH the
driver gives that process). Either has `make_trace`, `shard_messages`, `own_rows`,
`measure_egress`, `measure_shard` and `measure_decodestream`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
from typing import Any

# trace: (requests, concurrency, ids per row, share with top-5 logprobs): the stage
# benchmark's defaults, written here because the other checkout's may name them nowhere
TRACES = {"a": (2048, 1024, 1, 0.05), "b": (768, 256, 4, 0.0), "small": (400, 16, 1, 0.05)}
# a BATCH frame's first byte (docs/protocol.md): the worker imports nothing of its checkout
# but the stage measures, whose modules may live anywhere in either
BATCH_TAG = 0x02
MEASURES = ("e1", "e2", "s1d", "s1c", "s1p", "s2", "step")
# where a checkout keeps the stage measures: the package, or (before the move) scripts/
STAGES = "sglang_tok_bench.stages"
HARNESS_STAGES = "sglang_tok.harness.bench.stages"  # a checkout from before dev/
OLD_STAGES = "bench_stages"


def serve(tree: str, stages: str, keys: list[str]) -> None:
    """Build, say "ready", then one trial per line of stdin, one JSON number per line out."""
    os.chdir(tree)
    bs = importlib.import_module(stages)
    from sglang_tok.tokenizer import load  # the measured checkout's, like `bs`

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
    """One run of one of the stage measures, seconds per row."""
    if measure in ("e1", "e2"):
        return float(bs.measure_egress(tr, int(measure[1]), 1, runtime))
    if measure == "step":
        return float(bs.measure_decodestream(info, tr.frames, 1))
    fmt = {"s1d": "deltas", "s1c": "columnar", "s1p": "packed", "s2": "deltas"}[measure]
    return float(bs.measure_shard(info, m2 if measure == "s2" else m1, fmt, 1, runtime)[0])


def main() -> int:
    ap = argparse.ArgumentParser(description="One checkout's side of against.py.")
    ap.add_argument("tree", help="the measured checkout's root")
    ap.add_argument("--stages", default=STAGES, help="the module of its stage measures")
    ap.add_argument("--keys", required=True, help="TRACE.MEASURE, comma-separated")
    a = ap.parse_args()
    serve(a.tree, a.stages, a.keys.split(","))
    return 0


if __name__ == "__main__":
    sys.exit(main())
