#!/usr/bin/env python3
"""The detokenizer stage side by side: SGLang's MultiDetokenizerRouter + N
DetokenizerManager workers against sglang-tok's egress + N shards, on the same SGLang 0.5.23
scheduler messages (rows over W tokenizer workers, K ids per row, time stats with
--enable-metrics off or on, logprob rows), CPU per id per process role, every text checked.

    python scripts/sglang/stage.py                                   # N=8, W=1,32, K=1,4
    python scripts/sglang/stage.py --n 8,32 --workers 1,8,32 --ids 1,3,4 --metrics off,on \\
        --logprobs 0,0.05 --repeat 3 --json stage.json

Needs the side environment's python (--sglang-python: ../shared/tools/sglang-venv.sh);
`dev/sglang_tok_bench/sglang_stage.py` says how it measures.
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok_bench import sglang_stage


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sglang_stage.add_cli_args(ap)
    return sglang_stage.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
