#!/usr/bin/env python3
"""The long ring fuzz: the test suite's fuzzing round, for minutes instead of seconds.

    python scripts/load/fuzz.py --minutes 10

Exits 1 unless no frame was dropped as `internal` and the service logged no traceback
(`dev/sglang_tok_bench/fuzz.py`).
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok_bench import fuzz


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    fuzz.add_cli_args(ap)
    return fuzz.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
