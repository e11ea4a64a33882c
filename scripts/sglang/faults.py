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
(`dev/sglang_tok_bench/sglang_faults.py`). Prints one JSON report; exits 1 unless ok.
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok_bench import sglang_faults


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sglang_faults.add_cli_args(ap)
    return sglang_faults.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
