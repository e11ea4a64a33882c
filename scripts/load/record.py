#!/usr/bin/env python3
"""Record a scheduler's frames: bind as the input ring in the service's place.

    python scripts/load/record.py out.trace --input ipc:///tmp/ring.ipc [--forward ENDPOINT]

Point the scheduler's PUSH at --input. Every frame that arrives is written to the trace
with its arrival time, and with --forward also pushed on to a running service's input
ring. Stops on Ctrl-C, after --seconds, or after --frames.
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok_bench import record


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    record.add_cli_args(ap)
    return record.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
