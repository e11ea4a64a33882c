#!/usr/bin/env python3
"""Stage costs against another checkout of the project, trial by trial.

    git worktree add /tmp/before COMMIT && python3 -m venv /tmp/before/.venv \
        && /tmp/before/.venv/bin/pip install -q -e '/tmp/before[scripts]'
    python scripts/bench/against.py /tmp/before --cycles 20
    python scripts/bench/against.py HEAD~1 --cycles 20    # the worktree and venv made here

One worker process per checkout, each importing only its own checkout's stage measures (a
checkout from before the scripts moved: its scripts/bench_stages.py), answers one trial
of each measure in turn; the figure is the median over cycles of this / the other
(`sglang_tok/harness/bench/against.py`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sglang_tok.harness.bench import against

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("other", nargs="?",
                    help="the other checkout's root, or a git revision (a worktree of it with "
                         "its own venv is made, and kept, under $TMPDIR)")
    ap.add_argument("--other-python", help="its python (default: OTHER/.venv/bin/python)")
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--keys", default=",".join(against.DEFAULT_KEYS),
                    help="TRACE.MEASURE, comma-separated (traces a, b, small; measures "
                    f"{', '.join(against.MEASURES)})")
    ap.add_argument("--pairs", type=int, default=5,
                    help="fresh worker processes this many times (a process's own bias "
                         "evens out)")
    ap.add_argument("--json", help="write every trial here")
    a = ap.parse_args()
    try:
        return against.main(a, ROOT)
    except against.Usage as exc:
        ap.error(str(exc))


if __name__ == "__main__":
    sys.exit(main())
