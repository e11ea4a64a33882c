#!/usr/bin/env python3
"""Stage ceilings: the per-row cost of each stage of the pipeline alone, and what it implies.

    python scripts/bench/stages.py --repeat 5
    python scripts/bench/stages.py --small-frames --format packed
    python scripts/bench/stages.py --only shard --seconds 30     # one stage, for py-spy

Egress, shard and frontend, one at a time in this process, CPU time per row against one
DecodeStream.step per id, and a model of the service on C cores
(`dev/sglang_tok_bench/stages.py`).
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok_bench import stages


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    stages.add_cli_args(ap)
    return stages.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
