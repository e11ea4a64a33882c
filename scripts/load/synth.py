#!/usr/bin/env python3
"""Synthesise a scheduler trace without a GPU: seeded, reproducible, multilingual.

    python scripts/load/synth.py out.trace --requests 4096 --concurrency 1024 --logprob-share 0.05

Each engine (data-parallel rank) runs its own requests at a target concurrency and emits
one BATCH frame per step, every --step-ms; engines' frames interleave by time
(`dev/sglang_tok_bench/synth.py`).
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok_bench import synth


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    synth.add_cli_args(ap)
    return synth.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
