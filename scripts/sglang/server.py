#!/usr/bin/env python3
"""SGLang end to end: a whole SGLang 0.5.23 server with the stand-in scheduler, its own
detokenizer against sglang-tok's plugin, driven by streaming HTTP clients.

    python scripts/sglang/server.py --quick                 # one load, 2 systems
    python scripts/sglang/server.py --json out.json         # the full table
    python scripts/sglang/server.py --systems "sglang x1,sglang-tok x1" \\
        --tokenizer-workers 4 --loads 256x1 --logprobs 0.05
    python scripts/sglang/server.py --dp 2 --tokenizer-workers 2 --logprobs 0 \\
        --systems "sglang x1,sglang x2,sglang-tok x2" --loads 128x1,64x3,64x4 \\
        --json dp2.json                                  # dp 2, then the field model
    python scripts/sglang/server.py --model-from dp2.json --model-detok-workers 8,16

Streamed ids/s, the gap between a stream's chunks, each process group's CPU per id, every
finished text checked, and the capacity those costs imply on 16 and 32 cores
(`dev/sglang_tok_bench/sglang_server.py`); from runs at dp 2 with tokenizer workers,
the field model: dp 8, 16-32 tokenizer workers, each system's capacity and wall
(`capacity_model.py`). Every SGLang process and the clients run in
--sglang-python (SGLang 0.5.23 and sglang-tok installed: `bash ../shared/tools/sglang-venv.sh`,
then `pip install -e . -e ./standin`).
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok_bench import sglang_server


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sglang_server.add_cli_args(ap)
    return sglang_server.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
