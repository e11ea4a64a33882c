"""The short soak: the same checks as `scripts/soak.py --minutes 10`, for ~15 seconds."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))

from soak import soak


def test_short_soak_leaks_nothing() -> None:
    r = soak(minutes=0.25, sample_every=3.0, warmup_fraction=0.4)
    assert not r["problems"], r["problems"]
    assert r["live_at_end"] == 0
    assert r["rss_growth"] <= 0.10, r["samples"]
    assert r["fd_growth"] <= 0, r["samples"]
    assert not r["shm_leftovers"] and not r["ipc_leftovers"]
    assert r["exit_code"] == 0
