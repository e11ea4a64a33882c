#!/usr/bin/env python3
"""Parser cost per id: every tool parser, in both `tool_stream` modes, on its own format.

    python scripts/bench/parsers.py --table --requests 100 --repeat 3
    python scripts/bench/parsers.py --latency

Parser on against the same requests without it, through the decoder and ParsedStream
alone or (--table) the shard's table; every request checked against `parse_full`
(`sglang_tok/harness/bench/parsers.py`).
"""

from __future__ import annotations

import argparse
import os
import sys

# one core: tokenizers' own thread pool stays out of the figures
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

from sglang_tok.harness.bench import parsers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=400, help="per format")
    ap.add_argument("--concurrency", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=9,
                    help="best of N alternating runs (on a shared host a best of few "
                         "moves one configuration's ratio by much more than of many)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--table", action="store_true",
                    help="through the shard's RidTable.on_arrays (ARRAYS messages, OPEN "
                         "options, Deltas), every request per row: parser on vs the same "
                         "requests without it (what a parser costs)")
    ap.add_argument("--formats", default="", help="comma-separated format names (default all)")
    ap.add_argument("--args", choices=sorted(parsers.ARGS), default="short",
                    help="short: a query, a limit, sometimes a line of code; files: every "
                         "call writes a file of 20-60 lines (a coding agent)")
    ap.add_argument("--corpus", choices=("auto", "faker", "builtin"), default="auto",
                    help="the texts outputs are made of (see `corpus`; auto: faker if "
                         "installed); the `in calls` column is the share of ids in calls")
    ap.add_argument("--only", default="", help="comma-separated label substrings")
    ap.add_argument("--latency", action="store_true",
                    help="first-fragment latency in ids for a long string argument, per "
                         "format and tool_stream mode")
    return parsers.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
