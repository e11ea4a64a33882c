#!/usr/bin/env python3
"""The long ring fuzz: the test suite's fuzzing round, for minutes instead of seconds.

    python scripts/fuzz.py --minutes 10

Starts the real service (2 shards), then runs hypothesis-driven rounds of valid traffic
mixed with random and mutated frames until the time is up, checking after every round
that the service is healthy, valid requests are exact, drops are counted by reason and
every rid a dropped frame names was ended. Prints the drop counts at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from service import Service  # noqa: E402
from test_fuzz import dropped, fuzz_round  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    a = ap.parse_args()
    svc = Service(Path(tempfile.mkdtemp(prefix="sglang-tok-fuzz-")), shards=2).start()
    deadline = time.monotonic() + 60 * a.minutes
    rounds = 0
    try:
        while time.monotonic() < deadline:
            @settings(max_examples=200, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))
            @given(data=st.data())
            def run(data: st.DataObject) -> None:
                fuzz_round(svc, data)
            run()
            rounds += 200
            print(f"{rounds} rounds, drops so far: {dict(dropped(svc))}", flush=True)
    finally:
        code = svc.stop()
    print(f"done: {rounds} rounds; service exit code {code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
