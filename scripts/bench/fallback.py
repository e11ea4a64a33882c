#!/usr/bin/env python3
"""Byte-fallback tokenizers (Llama-2 / Mistral / Gemma style): what the service costs and
holds back on them.

    python scripts/bench/fallback.py --repeat 3
    python scripts/bench/fallback.py --tokenizer path/to/llama2/tokenizer.json
    python scripts/bench/fallback.py --section runs --baseline HEAD~1

What each section measures: `dev/sglang_tok_bench/fallback.py`. `--baseline REV` runs
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

from sglang_tok_bench import fallback

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=fallback.__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    fallback.add_cli_args(ap)
    return fallback.main(ap.parse_args(), ROOT)


if __name__ == "__main__":
    sys.exit(main())
