#!/usr/bin/env python3
"""Overload: a producer far faster than the service and a frontend that reads slowly.

    python scripts/load/overload.py --seconds 30

Memory must stay bounded by the high-water marks, the producer must be slowed
(backpressure), and after the frontend catches up every request must be exact
(`dev/sglang_tok_bench/overload.py`). Prints the bound it measured.
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok_bench import overload


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    overload.add_cli_args(ap)
    return overload.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
