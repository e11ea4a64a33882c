#!/usr/bin/env python3
"""Cost per step of the scheduler-side writer, against two baselines, in the same run.

    python scripts/bench/writer.py [--rows 256 4096] [--ids-per-row 1]

The kit's `encode_step` against a lean msgpack writer and SGLang's push_generation, the
median over --repeats rounds of --number builds (`dev/sglang_tok_bench/writer.py`).
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok_bench import writer


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    writer.add_cli_args(ap)
    return writer.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
