#!/usr/bin/env python3
"""Synthesise a scheduler trace without a GPU: seeded, reproducible, multilingual.

    python scripts/load/synth.py out.trace --requests 4096 --concurrency 1024 --logprob-share 0.05

Each engine (data-parallel rank) runs its own requests at a target concurrency and emits
one BATCH frame per step, every --step-ms; engines' frames interleave by time
(`sglang_tok/harness/bench/synth.py`).
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok.harness.bench import synth


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--tokenizer", default="deepseek-v4")
    ap.add_argument("--requests", type=int, default=2048)
    ap.add_argument("--concurrency", type=int, default=1024)
    ap.add_argument("--min-tokens", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--ids-per-row", default="1", help="k or lo-hi (speculative decoding)")
    ap.add_argument("--logprob-share", type=float, default=0.05)
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--stop-share", type=float, default=0.05)
    ap.add_argument("--options-share", type=float, default=0.05)
    ap.add_argument("--special-share", type=float, default=0.05)
    ap.add_argument("--prompt-share", type=float, default=0.2)
    ap.add_argument("--abort-share", type=float, default=0.01)
    ap.add_argument("--error-share", type=float, default=0.0)
    ap.add_argument("--engines", type=int, default=2)
    ap.add_argument("--step-ms", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=0)
    return synth.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
