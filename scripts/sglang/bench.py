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
against sglang x1 (`sglang_tok/harness/bench/sglang_bench.py`). SGLang's systems need
--sglang-python; without it they are skipped.
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok.harness.bench import sglang_bench


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="quarter-size traces")
    ap.add_argument("--systems", default=",".join(sglang_bench.SYSTEMS), help="comma-separated")
    ap.add_argument("--traces", default="a,b")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds; medians")
    ap.add_argument("--window", type=int, default=8,
                    help="most messages in flight (sent, some row not yet answered)")
    ap.add_argument("--step-ms", type=float, default=0.0,
                    help="one message per step, as a scheduler at that step time sends them "
                         "(0: flat out): what a message costs when the system waits between "
                         "messages, and whether it keeps up")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per trace run")
    ap.add_argument("--stall", type=float, default=60.0,
                    help="seconds without a reply after which a run is given up")
    ap.add_argument("--sglang-python", default=sglang_bench.DEFAULT_SGLANG_PYTHON,
                    help="a python that imports SGLang 0.5.23 (built by sglang-venv.sh)")
    ap.add_argument("--sglang-start-method", choices=["fork", "spawn"], default="fork",
                    help="how SGLang's detokenizer processes start (SGLang's Engine spawns; "
                         "fork skips their import of SGLang; see sglang_peer.py)")
    ap.add_argument("--requests-a", type=int, default=2048)
    ap.add_argument("--concurrency-a", type=int, default=1024)
    ap.add_argument("--tokens-a", default="32-96", help="output ids per request, lo-hi")
    ap.add_argument("--ids-per-row-a", default="1", help="k or lo-hi")
    ap.add_argument("--logprob-share-a", type=float, default=0.05)
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--requests-b", type=int, default=1024)
    ap.add_argument("--concurrency-b", type=int, default=256)
    ap.add_argument("--tokens-b", default="64-512", help="output ids per request, lo-hi")
    ap.add_argument("--ids-per-row-b", default="4", help="k or lo-hi")
    ap.add_argument("--json", default="", help="write the figures here")
    a = ap.parse_args()
    wrong = sglang_bench.check_systems(a)
    if wrong:
        ap.error(wrong)
    return sglang_bench.main(a)


if __name__ == "__main__":
    sys.exit(main())
