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
reused (`dev/sglang_tok_testkit/matrix.py`). Exits 0 when every release was
served or refused in one line at start.
"""

from __future__ import annotations

import argparse
import sys

from sglang_tok_testkit import matrix


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    matrix.add_cli_args(ap)
    return matrix.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
