"""Short runs of the replay tools: synthesise, record, replay with verification, baselines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.insert(0, str(SCRIPTS))

from tracefile import read, requests  # noqa: E402


def run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=timeout)


def test_synth_record_and_replay_verify_every_output(tmp_path: Path) -> None:
    trace = tmp_path / "t.trace"
    r = run(str(SCRIPTS / "synth.py"), str(trace), "--requests", "200", "--concurrency", "64",
            "--max-tokens", "48", "--ids-per-row", "1-3", "--engines", "2", "--stop-share",
            "0.2", "--options-share", "0.2", "--abort-share", "0.05")
    assert r.returncode == 0, r.stderr
    t = read(trace)
    assert t.meta["tokenizer"] == "deepseek-v4" and len(t.frames) > 10
    assert t.times == sorted(t.times)
    assert len(requests(t.frames)) == 200
    # the same seed gives the same bytes
    again = tmp_path / "again.trace"
    assert run(str(SCRIPTS / "synth.py"), str(again), "--requests", "200", "--concurrency",
               "64", "--max-tokens", "48", "--ids-per-row", "1-3", "--engines", "2",
               "--stop-share", "0.2", "--options-share", "0.2",
               "--abort-share", "0.05").returncode == 0
    assert read(again).frames == t.frames

    # record: a scheduler pushes into the recorder as it would into the service
    from record import record

    from sglang_tok.client import Scheduler
    rec = tmp_path / "rec.trace"
    ep = f"ipc://{tmp_path}/rec.ipc"
    ready = tmp_path / "rec.ready"
    th = threading.Thread(target=record, args=(str(rec), ep), kwargs={
        "frames": len(t.frames), "ready": str(ready), "seconds": 60})
    th.start()
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    s = Scheduler(ep)
    for f in t.frames:
        s.send(f)
    th.join(60)
    s.close()
    assert read(rec).frames == t.frames

    out = tmp_path / "r.json"
    chart = tmp_path / "r.png"
    r = run(str(SCRIPTS / "replay.py"), str(rec), "--start", "2", "--speed", "4", "--json",
            str(out), "--chart", str(chart))
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads(out.read_text())
    assert summary["verified_exact"] == summary["requests"] == 200
    assert summary["complete"] and summary["latency_ms"]["p99"] > 0
    assert set(summary["per_shard_deltas"]) == {"0", "1"}
    if os.environ.get("SGLANG_TOK_CHART"):
        assert chart.exists()


def test_baselines_run_on_the_same_protocol(tmp_path: Path) -> None:
    trace = tmp_path / "t.trace"
    assert run(str(SCRIPTS / "synth.py"), str(trace), "--requests", "64", "--concurrency",
               "32", "--max-tokens", "32", "--stop-share", "0", "--options-share", "0",
               "--special-share", "0", "--prompt-share", "0", "--abort-share", "0").returncode == 0
    for kind in ("sglang", "vllm"):
        out = tmp_path / f"{kind}.json"
        run(str(SCRIPTS / "replay.py"), str(trace), "--baseline", kind, "--max", "--json",
            str(out))
        summary = json.loads(out.read_text())
        assert summary["complete"] and summary["tokens"] > 0, kind
