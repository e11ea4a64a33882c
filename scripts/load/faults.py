#!/usr/bin/env python3
"""Fault injection under load: kill -9 shards, the egress and the HTTP process at random.

    python scripts/load/faults.py --seconds 60 --kills 6
    python scripts/load/faults.py --kinds double --service-args "--shards 4"

Prints faults injected by kind and requests completed exact, failed with an error, lost
and wrong (`sglang_tok/harness/bench/faults.py`). Exit 0 when nothing was lost and nothing
was wrong.
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok.harness.bench import faults


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--kills", type=int, default=6)
    ap.add_argument("--frames-per-s", type=float, default=100)
    ap.add_argument("--kinds", default="shard,egress,http", help="any of shard,egress,http,double")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--service-args", default="", help="extra `sglang-tok serve` flags")
    return faults.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
