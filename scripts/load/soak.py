#!/usr/bin/env python3
"""Soak: requests opening and closing continuously for minutes; nothing may leak.

    python scripts/load/soak.py --minutes 10

Checks every request exact, live-request gauges back to zero, shard RSS flat once warm,
no growth in file descriptors, nothing left in shared memory or the runtime directory
(`dev/sglang_tok_bench/soak.py`).
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok_bench import soak


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    soak.add_cli_args(ap)
    return soak.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
