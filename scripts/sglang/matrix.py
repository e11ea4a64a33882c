#!/usr/bin/env python3
"""The SGLang version matrix: every release 0.5.12-0.5.23 as a whole server with the
stand-in scheduler, SGLang's own detokenizer against sglang-tok's plugin on the same
requests (/generate streamed and not, stop strings, logprobs, n>1, beam search where the
release has it, /v1/chat/completions), one row per release: started, texts exact against
the stand-in's ledger, replies equal to stock's, the plugin's refusal.

    python scripts/sglang/matrix.py                          # all releases
    python scripts/sglang/matrix.py --releases 0.5.16,0.5.23 -v
    python scripts/sglang/matrix.py --no-lay-out --json rows.json

A release other than the side environment's own is laid out first: its wheel downloaded
without dependencies (or taken from --wheels) and installed with `pip install --no-deps
--target` into its --sites folder, which then goes on PYTHONPATH; one laid out before is
reused (`sglang_tok/harness/bench/sglang_matrix.py`). Exits 0 when every release was
served or refused in one line at start.
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok.harness import releases
from sglang_tok.harness.bench import sglang_matrix


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--releases", default="all",
                    help="`all`, or releases and spans: 0.5.16,0.5.20-0.5.23")
    ap.add_argument("--sglang-python", default=releases.DEFAULT_PYTHON,
                    help="the side environment's python (SGLang and sglang-tok installed)")
    ap.add_argument("--sites", default=releases.DEFAULT_SITES,
                    help="each release's folder ({release} filled in)")
    ap.add_argument("--wheels", default=releases.DEFAULT_WHEELS,
                    help="where wheels are found, or downloaded to")
    ap.add_argument("--no-lay-out", action="store_true",
                    help="only the releases already laid out; download nothing")
    ap.add_argument("--work", default="", help="servers' logs and ledgers (default: a temp "
                                               "folder)")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds a server has to start")
    ap.add_argument("--json", default="", help="also write every row, in full, here")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="after the table, every note of every row")
    return sglang_matrix.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
