#!/usr/bin/env python3
"""Small frames (issue 17 item 6): egress and shard CPU per BATCH frame at 16 concurrent
requests (frames of ~15 rows, trace a's shape: 1 id per row, 5% with top-5 logprobs).

Whole-array operations have a fixed cost per call, so a small frame pays in calls what a
large one pays in work. This runs `bench_stages.py`'s egress and shard stages (thread CPU,
best of --repeat) on such a trace and prints microseconds per frame.

It imports `bench_stages` from the current directory's `scripts/`, so the same file
measures another checkout of the project in the same window, e.g. the code before the
array path: `cd ../old && python ../sglang-tok/scripts/bench_small_frames.py --format deltas`.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.join(os.getcwd(), "scripts"))
import bench_stages as bs

from sglang_tok import protocol
from sglang_tok.tokenizer import load


def _loop(info: Any, msgs: list[bytes], fmt: str, runtime: str
          ) -> tuple[Callable[[], None], Callable[[], None]]:
    """(run, setup) of a shard's `handle` on every message, as its loop calls it: what a
    message costs beyond `on_frame` (its acknowledgement to the egress and the metrics)
    shows at small frames, where each message comes alone."""
    stage = bs.ShardStage(bs.config(1, fmt, runtime), info, msgs, False)

    def setup() -> None:
        stage.setup()
        assert stage.sh is not None
        stage.sh.started = True

    def run() -> None:
        assert stage.sh is not None
        handle = stage.sh.handle
        for m in msgs:
            handle(m)

    return run, setup


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--format", default="packed", help="the shard's --output-format")
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    info = load("deepseek-v4")
    runtime = tempfile.mkdtemp(prefix="bench-small-")
    atexit.register(shutil.rmtree, runtime, True)  # whichever way this ends
    tr = bs.make_trace(info, "a", a.requests, a.concurrency, 1, 0.05)
    frames = sum(1 for f in tr.frames if f[0] == protocol.TAG_BATCH)
    egress = bs.measure_egress(tr, 1, a.repeat, runtime) * tr.rows / frames
    msgs = bs.shard_messages(tr, 1, runtime)
    shard, _ = bs.measure_shard(info, msgs, a.format, a.repeat, runtime)
    shard *= bs.own_rows(msgs)[0] / frames
    run, setup = _loop(info, msgs, a.format, runtime)
    loop = bs.best(run, a.repeat, setup) / frames
    print(f"{frames} frames of {tr.rows / frames:.1f} rows; per frame: egress "
          f"{egress * 1e6:.1f} us, shard {shard * 1e6:.1f} us ({a.format} out), "
          f"total {(egress + shard) * 1e6:.1f} us; the shard's whole loop step (parse, "
          f"decode, acknowledgement, metrics) {loop * 1e6:.1f} us; a frame's path through "
          f"the service (egress + shard loop step) {(egress + loop) * 1e6:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
