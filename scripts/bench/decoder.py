#!/usr/bin/env python3
"""Decoder micro-benchmark: one core, a multilingual trace of >= 100k tokens.

    python scripts/bench/decoder.py --repeat 3
    python scripts/bench/decoder.py --tokenizer llama2-style --only ours/plain,ours/attr

DecodeStream against a shard's decoder and its rid table on the same ids, in the same
run: tokens/s and ratios, every output checked against a full decode
(`dev/sglang_tok_bench/decoder.py`).
"""

from __future__ import annotations

import argparse
import os
import sys

# one core: tokenizers' own thread pool stays out of the figures
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

from sglang_tok_bench import decoder


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    decoder.add_cli_args(ap)
    return decoder.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
