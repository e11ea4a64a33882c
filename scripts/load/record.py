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

from sglang_tok.harness.bench import record


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--input", required=True, help="endpoint to bind, where the scheduler pushes")
    ap.add_argument("--forward", default="", help="a running service's input ring")
    ap.add_argument("--tokenizer", default="deepseek-v4")
    ap.add_argument("--seconds", type=float, default=0)
    ap.add_argument("--frames", type=int, default=0)
    ap.add_argument("--ready", default="", help="a file to create once the input is bound")
    return record.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
