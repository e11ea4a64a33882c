#!/usr/bin/env python3
"""Fault injection under load: kill -9 shards, the egress and the HTTP process at random.

    python scripts/load/faults.py --seconds 60 --kills 6
    python scripts/load/faults.py --kinds double --service-args "--shards 4"

Prints faults injected by kind and requests completed exact, failed with an error, lost
and wrong (`dev/sglang_tok_bench/faults.py`). Exit 0 when nothing was lost and nothing
was wrong.
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok_bench import faults


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    faults.add_cli_args(ap)
    return faults.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
