#!/usr/bin/env python3
"""Faults inside a whole SGLang server: kill -9 of the plugin's shards and egress while
streaming HTTP clients run, with the stand-in scheduler in place of the model.

    python scripts/sglang/faults.py demo                 # a shard, then the egress (2 shards)
    python scripts/sglang/faults.py soak --minutes 10    # random kills every 5-20 s, 4 shards,
                                                         # at 80% of the measured capacity
    python scripts/sglang/faults.py demo --dp 2          # two stand-in schedulers
    python scripts/sglang/faults.py demo --tokenizer-workers 2

The server must stay up, every cut stream end with an error within seconds, none hang,
no text be wrong, new requests after the kills be exact
(`sglang_tok/harness/bench/sglang_faults.py`). Prints one JSON report; exits 1 unless ok.
"""

from __future__ import annotations

import argparse
import os
import sys

from sglang_tok.harness.bench import sglang_faults, sglang_server


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["demo", "soak"])
    ap.add_argument("--sglang-python", default=os.environ.get(
        "SGLANG_PYTHON", sglang_server.DEFAULT_SGLANG_PYTHON))
    ap.add_argument("--shards", type=int, default=0, help="demo: 2, soak: 4")
    ap.add_argument("--dp", type=int, default=1, help="--dp-size (a stand-in per rank)")
    ap.add_argument("--tokenizer-workers", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=40.0,
                    help="demo length (the shard killed at 1/4, the egress at 5/8)")
    ap.add_argument("--minutes", type=float, default=10.0, help="soak length")
    ap.add_argument("--load", type=float, default=0.8, help="soak: share of the capacity")
    ap.add_argument("--clients", type=int, default=96, help="demo: streaming clients")
    ap.add_argument("--hang-after", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--port", type=int, default=31900)
    ap.add_argument("--json", default="")
    return sglang_faults.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
