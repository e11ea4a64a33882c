"""The short soak: `scripts/load/soak.py`'s checks for ~10 seconds, run as the program it is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SOAK = Path(__file__).resolve().parents[2] / "scripts" / "load" / "soak.py"


def test_short_soak_leaks_nothing(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    p = subprocess.run([sys.executable, str(SOAK), "--minutes", "0.17", "--sample-every", "2",
                        "--warmup-fraction", "0.4", "--json", str(out)],
                       capture_output=True, text=True, timeout=180)
    r = json.loads(out.read_text())
    assert not r["problems"], r["problems"]
    assert r["live_at_end"] == 0
    assert r["rss_growth"] <= 0.10, r["samples"]
    assert r["fd_growth"] <= 0, r["samples"]
    assert not r["shm_leftovers"] and not r["ipc_leftovers"]
    assert r["exit_code"] == 0
    assert p.returncode == 0, p.stdout + p.stderr
