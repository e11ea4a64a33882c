#!/usr/bin/env python3
"""Encode service benchmark: M = 1 and 2 encode workers against one process, same run.

    python scripts/bench/encode.py                       # 32 clients, 10 s per system
    python scripts/bench/encode.py --clients 8 --duration 3 --warmup 0.5   # a smoke run

Closed-loop clients send prompts of 50 to 20,000 tokens; requests/s, tokens/s, latency
p50/p99 (and of short prompts) and CPU per token, as ratios to one `encode_batch` process
(`sglang_tok/harness/bench/encode.py`).
"""

from __future__ import annotations

import argparse
import os
import sys

# one core per process: tokenizers' own thread pool stays out of the figures (the systems
# started here inherit it)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

from sglang_tok.harness.bench import encode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", default="deepseek-v4")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--duration", type=float, default=10.0, help="measured seconds per system")
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--prompts", type=int, default=400)
    ap.add_argument("--workers", default="1,2", help="encode worker counts to run")
    ap.add_argument("--rounds", type=int, default=2,
                    help="each system this many times, interleaved (noise on a shared machine)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default="", help="write the figures here")
    return encode.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
