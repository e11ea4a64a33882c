#!/usr/bin/env python3
"""Byte-fallback tokenizers (Llama-2 / Mistral / Gemma style): what the service costs and
holds back on them.

    python scripts/bench/fallback.py --repeat 3
    python scripts/bench/fallback.py --tokenizer path/to/llama2/tokenizer.json
    python scripts/bench/fallback.py --section runs --baseline HEAD~1

What each section measures: `sglang_tok/harness/bench/fallback.py`. `--baseline REV` runs
the runs section's decoding in a checkout of REV with its own venv as well (a git worktree
made, and kept, under $TMPDIR; or a checkout's folder with its .venv), each side importing
only its own checkout.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# one core: tokenizers' own thread pool stays out of the figures
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

from sglang_tok.harness.bench import fallback

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=fallback.__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--section", choices=["rows", "runs", "all"], default="rows")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved runs; the best is kept")
    rows = ap.add_argument_group("--section rows")
    rows.add_argument("--tokenizer",
                      help="a byte-fallback tokenizer.json (default: trained in-process)")
    rows.add_argument("--rows", type=int, nargs="+", default=[16, 256, 1024])
    rows.add_argument("--ids-per-row", type=int, default=1)
    rows.add_argument("--length", type=int, default=120, help="ids per request")
    rows.add_argument("--skip-special", action="store_true")
    rows.add_argument("--workload", nargs="+", choices=["latin", "multilingual"],
                      default=["latin", "multilingual"])
    runs = ap.add_argument_group("--section runs")
    runs.add_argument("--requests", type=int, default=120)
    runs.add_argument("--vocab", type=int, default=4000)
    runs.add_argument("--baseline",
                      help="another checkout to measure side by side: a git revision (e.g. "
                           "HEAD~1; a worktree with its own venv is made) or a checkout's folder")
    runs.add_argument("--save", help="write the trained tokenizer.json here")
    return fallback.main(ap.parse_args(), ROOT)


if __name__ == "__main__":
    sys.exit(main())
