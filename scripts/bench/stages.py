#!/usr/bin/env python3
"""Stage ceilings: the per-row cost of each stage of the pipeline alone, and what it implies.

    python scripts/bench/stages.py --repeat 5
    python scripts/bench/stages.py --small-frames --format packed
    python scripts/bench/stages.py --only shard --seconds 30     # one stage, for py-spy

Egress, shard and frontend, one at a time in this process, CPU time per row against one
DecodeStream.step per id, and a model of the service on C cores
(`sglang_tok/harness/bench/stages.py`).
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok.harness.bench import stages


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", default="deepseek-v4")
    ap.add_argument("--requests-a", type=int, default=2048)
    ap.add_argument("--requests-b", type=int, default=768)
    ap.add_argument("--repeat", type=int, default=0,
                    help="runs per figure; the best is kept (default 5, 7 with --small-frames)")
    ap.add_argument("--traces", default="a,b")
    ap.add_argument("--only", choices=("egress", "shard"),
                    help="run this stage on the first trace for --seconds (for py-spy)")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--shards", type=int, default=2, help="with --only")
    ap.add_argument("--small-frames", action="store_true",
                    help="CPU per BATCH frame at --small-concurrency concurrent requests")
    ap.add_argument("--small-requests", type=int, default=400)
    ap.add_argument("--small-concurrency", type=int, default=16)
    ap.add_argument("--format", default="packed",
                    help="the shard's --output-format, with --small-frames")
    return stages.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
