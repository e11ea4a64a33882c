#!/usr/bin/env python3
"""The benchmark: the service's targets, sglang-tok (1 and 2 shards) against the lean peers.

    python scripts/bench/peers.py                   # both standard traces (a, b)
    python scripts/bench/peers.py --quick           # quarter-size traces, for a smoke run
    python scripts/bench/peers.py --repeat 3        # three interleaved rounds, medians

Same traces, same sockets, same client, systems side by side: ids/s and CPU per id flat
out, ids/s with a window of frames in flight, latencies at half the peer's rate; then each
target with its ratio (`dev/sglang_tok_bench/peers.py`).
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok_bench import peers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    peers.add_cli_args(ap)
    return peers.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
