#!/usr/bin/env python3
"""Stage costs against another checkout of the project, trial by trial.

    git worktree add /tmp/before COMMIT && python3 -m venv /tmp/before/.venv \
        && /tmp/before/.venv/bin/pip install -q -e /tmp/before -e /tmp/before/standin \
        -e '/tmp/before/dev[scripts]'
    python scripts/bench/against.py /tmp/before --cycles 20
    python scripts/bench/against.py HEAD~1 --cycles 20    # the worktree and venv made here

One worker process per checkout, each importing only its own checkout's stage measures (a
checkout from before the scripts moved: its scripts/bench_stages.py), answers one trial
of each measure in turn; the figure is the median over cycles of this / the other
(`dev/sglang_tok_bench/against.py`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sglang_tok_bench import against

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    against.add_cli_args(ap)
    a = ap.parse_args()
    try:
        return against.main(a, ROOT)
    except against.Usage as exc:
        ap.error(str(exc))


if __name__ == "__main__":
    sys.exit(main())
