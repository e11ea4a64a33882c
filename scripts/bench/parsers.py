#!/usr/bin/env python3
"""Parser cost per id: every tool parser, in both `tool_stream` modes, on its own format.

    python scripts/bench/parsers.py --table --requests 100 --repeat 3
    python scripts/bench/parsers.py --latency

Parser on against the same requests without it, through the decoder and ParsedStream
alone or (--table) the shard's table; every request checked against `parse_full`
(`dev/sglang_tok_bench/parsers.py`).
"""

from __future__ import annotations

import argparse
import os
import sys

# one core: tokenizers' own thread pool stays out of the figures
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

from sglang_tok_bench import parsers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parsers.add_cli_args(ap)
    return parsers.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
