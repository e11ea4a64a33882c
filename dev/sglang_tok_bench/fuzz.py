"""The long ring fuzz: the test suite's fuzzing round, for minutes instead of seconds
(`scripts/load/fuzz.py`).

Starts the real service (2 shards), then runs hypothesis-driven rounds of valid traffic
mixed with random and mutated frames until the time is up, checking after every round
that the service is healthy, valid requests are exact, drops are counted by reason and
every rid a dropped frame names was ended. Prints frames, drops by reason, the `internal`
drop count and the tracebacks in the service log at the end; exits 1 unless both are 0
(a frame that reaches either found a bug, however malformed it was).
"""

from __future__ import annotations

import argparse
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_tok.kit.local_service import LocalService
from sglang_tok_testkit.fuzzing import dropped, fuzz_round, tracebacks


def main(a: argparse.Namespace) -> int:
    """`scripts/load/fuzz.py`."""
    svc = LocalService(shards=2).start()
    deadline = time.monotonic() + 60 * a.minutes
    rounds = 0
    failure = ""
    try:
        while time.monotonic() < deadline:
            @settings(max_examples=200, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))
            @given(data=st.data())
            def run(data: st.DataObject) -> None:
                fuzz_round(svc, data)
            try:
                run()
            except Exception as exc:  # report the figures below, then fail
                failure = f"{type(exc).__name__}: {str(exc)[:2000]}"
                break
            rounds += 200
            print(f"{rounds} rounds, drops so far: {dict(dropped(svc))}", flush=True)
        drops = dropped(svc)
        frames = sum(int(v) for k, v in svc.metrics().items()
                     if k.split("{")[0].endswith("frames_total"))
        traces = tracebacks(svc)
    finally:
        code = svc.stop()
    print(f"done: {rounds} rounds; frames accepted {frames}, dropped {sum(drops.values())}")
    print(f"drops by reason: {dict(sorted(drops.items()))}")
    print(f"internal {drops['internal']}; tracebacks in the log {traces}; "
          f"service exit code {code}")
    if failure:
        print(f"a round failed: {failure}")
    return 1 if failure or drops["internal"] or traces else 0


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """The flags of `scripts/load/fuzz.py` (its `main` parses them)."""
    ap.add_argument("--minutes", type=float, default=10.0)
