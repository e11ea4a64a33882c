#!/usr/bin/env python3
"""Replay a trace into a detokenizer, act as its frontend, verify every output, report.

    python scripts/load/replay.py trace --start 2            # start sglang-tok serve with 2 shards
    python scripts/load/replay.py trace --input ipc://... --output ipc://... --shards 2
    python scripts/load/replay.py trace --start 2 --speed 2  # twice the recorded pace
    python scripts/load/replay.py trace --start 2 --max      # as fast as backpressure allows
    python scripts/load/replay.py trace --start 2 --max --window 64  # at most 64 frames in flight
    python scripts/load/replay.py trace --baseline vllm --max  # a lean peer instead

How it measures: `sglang_tok/harness/bench/replay.py`.
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok.harness.bench import replay


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--start", type=int, default=0, help="start sglang-tok with N shards")
    ap.add_argument("--baseline", choices=["sglang", "vllm"], help="start a baseline instead")
    ap.add_argument("--input", default="")
    ap.add_argument("--output", default="")
    ap.add_argument("--shards", type=int, default=1, help="shards of a running service")
    pace = ap.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=float, default=1.0, help="multiple of the recorded pace")
    pace.add_argument("--max", action="store_true", help="as fast as backpressure allows")
    pace.add_argument("--rate", type=float, default=0.0, help="a fixed rate, frames/s")
    ap.add_argument("--window", type=int, default=0,
                    help="at most N BATCH frames in flight (sent, not every delta back)")
    ap.add_argument("--output-format", default="", help="sglang-tok's --output-format")
    ap.add_argument("--json", default="", help="write the summary here")
    ap.add_argument("--chart", default="", help="write a PNG chart here")
    return replay.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
