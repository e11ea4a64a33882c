#!/usr/bin/env python3
"""Replay a trace into a detokenizer, act as its frontend, verify every output, report.

    python scripts/load/replay.py trace --start 2            # start sglang-tok serve with 2 shards
    python scripts/load/replay.py trace --input ipc://... --output ipc://... --shards 2
    python scripts/load/replay.py trace --start 2 --speed 2  # twice the recorded pace
    python scripts/load/replay.py trace --start 2 --max      # as fast as backpressure allows
    python scripts/load/replay.py trace --start 2 --max --window 64  # at most 64 frames in flight
    python scripts/load/replay.py trace --baseline vllm --max  # a lean peer instead

How it measures: `dev/sglang_tok_bench/replay.py`.
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok_bench import replay


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    replay.add_cli_args(ap)
    return replay.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
