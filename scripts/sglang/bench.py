#!/usr/bin/env python3
"""The SGLang benchmark: `sglang-tok serve --protocol sglang` (1 and 2 shards) against
SGLang 0.5.23's own DetokenizerManager (one process, and 2 workers behind its
MultiDetokenizerRouter), on the same SGLang scheduler messages.

    python scripts/sglang/bench.py                      # traces a and b, all four systems
    python scripts/sglang/bench.py --step-ms 20         # at SGLang's step rate
    python scripts/sglang/bench.py --quick              # quarter-size traces
    python scripts/sglang/bench.py --repeat 3 --json out.json
    python scripts/sglang/bench.py --systems "sglang-tok x1" --quick

ids/s, CPU seconds per million ids and exactness per system and trace, flat out within a
window of messages in flight or paced at a step time; then the goals, sglang-tok x1
against sglang x1 (`dev/sglang_tok_bench/sglang_bench.py`). SGLang's systems need
--sglang-python; without it they are skipped.
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok_bench import sglang_bench


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sglang_bench.add_cli_args(ap)
    a = ap.parse_args()
    wrong = sglang_bench.check_systems(a)
    if wrong:
        ap.error(wrong)
    return sglang_bench.main(a)


if __name__ == "__main__":
    sys.exit(main())
