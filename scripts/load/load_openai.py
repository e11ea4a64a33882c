#!/usr/bin/env python3
"""Load the example OpenAI server: many concurrent streaming chat completions, each checked.

    python scripts/load/load_openai.py --streams 500                # starts the server itself
    python scripts/load/load_openai.py --url http://127.0.0.1:8000  # or drives a running one

Reports requests/s, time to first content chunk p50/p99 and the inter-chunk gap p99 over
every stream (`dev/sglang_tok_bench/load_openai.py`). Exit 0 when every stream was exact.
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok_bench import load_openai


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    load_openai.add_cli_args(ap)
    return load_openai.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
