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
(`sglang_tok/harness/bench/sglang_server.py`); from runs at dp 2 with tokenizer workers,
the field model: dp 8, 16-32 tokenizer workers, each system's capacity and wall
(`capacity_model.py`). Every SGLang process and the clients run in
--sglang-python (SGLang 0.5.23 and sglang-tok installed: `bash ../shared/tools/sglang-venv.sh`,
then `pip install -e .`).
"""

from __future__ import annotations

import argparse
import os
import sys

from sglang_tok.harness.bench import sglang_server


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sglang-python", default=os.environ.get(
        "SGLANG_PYTHON", sglang_server.DEFAULT_SGLANG_PYTHON))
    ap.add_argument("--systems", default="sglang x1,sglang x2,sglang-tok x1,sglang-tok x2")
    ap.add_argument("--tokenizer-workers", default="1,2,4")
    ap.add_argument("--loads", default="256x1,1024x1,64x4,256x4",
                    help="CLIENTSxIDS_PER_STEP, comma-separated")
    ap.add_argument("--logprobs", default="0,0.05", help="shares of requests with top-5")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--warmup", type=float, default=6.0)
    ap.add_argument("--quick", action="store_true",
                    help="sglang x1 against sglang-tok x1, 1 TM worker, 256x1, 8 s")
    ap.add_argument("--deadline", type=float, default=0.0,
                    help="start no configuration after this many seconds (a lent machine's "
                         "time is counted)")
    ap.add_argument("--per-worker", action="store_true",
                    help="a load's clients per tokenizer worker (256x1 with 4 workers: 1024)")
    ap.add_argument("--drain", type=float, default=30.0,
                    help="seconds streams may run on after the window (then cut off)")
    ap.add_argument("--client-procs", type=int, default=1,
                    help="client processes (one streams at most ~30k ids/s)")
    ap.add_argument("--dp", default="1", help="--dp-size values (a stand-in per rank)")
    ap.add_argument("--model-dp", default="8", help="the field model's dp sizes")
    ap.add_argument("--model-tm-workers", default="16,32",
                    help="the field model's tokenizer worker counts")
    ap.add_argument("--model-detok-workers", default="8",
                    help="the field model's N: stock's detokenizer workers, the plugin's shards")
    ap.add_argument("--model-cores", default="16,32,64", help="the field model's cores")
    ap.add_argument("--model-from", default="",
                    help="a --json of an earlier run: its tables and the field model, no run")
    ap.add_argument("--idle", type=float, default=0.0,
                    help="seconds to read each process's idle CPU before the loads, then "
                         "taken out of its CPU per id (0: not taken out)")
    ap.add_argument("--ready-timeout", type=float, default=480.0,
                    help="seconds a server may take to start (minutes on a busy 2-core box)")
    ap.add_argument("--port", type=int, default=31000)
    ap.add_argument("--json", default="")
    return sglang_server.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
