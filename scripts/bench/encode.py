#!/usr/bin/env python3
"""Encode service benchmark: M = 1 and 2 encode workers against one process, same run.

    python scripts/bench/encode.py                       # 32 clients, 10 s per system
    python scripts/bench/encode.py --clients 8 --duration 3 --warmup 0.5   # a smoke run

Closed-loop clients send prompts of 50 to 20,000 tokens; requests/s, tokens/s, latency
p50/p99 (and of short prompts) and CPU per token, as ratios to one `encode_batch` process
(`dev/sglang_tok_bench/encode.py`).
"""

from __future__ import annotations

import argparse
import os
import sys

# one core per process: tokenizers' own thread pool stays out of the figures (the systems
# started here inherit it)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

from sglang_tok_bench import encode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    encode.add_cli_args(ap)
    return encode.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
