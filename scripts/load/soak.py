#!/usr/bin/env python3
"""Soak: requests opening and closing continuously for minutes; nothing may leak.

    python scripts/load/soak.py --minutes 10

Checks every request exact, live-request gauges back to zero, shard RSS flat once warm,
no growth in file descriptors, nothing left in shared memory or the runtime directory
(`sglang_tok/harness/bench/soak.py`).
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok.harness.bench import soak


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--sample-every", type=float, default=5.0, help="seconds")
    ap.add_argument("--warmup-fraction", type=float, default=0.2,
                    help="share of the run before RSS is taken as warm")
    ap.add_argument("--json", default="", help="write the full result here")
    return soak.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
