"""Short runs of the replay tools: synthesise, record, replay with verification, baselines."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sglang_tok.kit.workload import requests_of_trace as requests
from sglang_tok.tracefile import read

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=timeout)


def test_synth_record_and_replay_verify_every_output(tmp_path: Path) -> None:
    trace = tmp_path / "t.trace"
    r = run(str(SCRIPTS / "load" / "synth.py"), str(trace), "--requests", "200", "--concurrency", "64",
            "--max-tokens", "48", "--ids-per-row", "1-3", "--engines", "2", "--stop-share",
            "0.2", "--options-share", "0.2", "--abort-share", "0.05")
    assert r.returncode == 0, r.stderr
    t = read(trace)
    assert t.meta["tokenizer"] == "deepseek-v4" and len(t.frames) > 10
    assert t.times == sorted(t.times)
    assert len(requests(t.frames)) == 200
    # the same seed gives the same bytes
    again = tmp_path / "again.trace"
    assert run(str(SCRIPTS / "load" / "synth.py"), str(again), "--requests", "200", "--concurrency",
               "64", "--max-tokens", "48", "--ids-per-row", "1-3", "--engines", "2",
               "--stop-share", "0.2", "--options-share", "0.2",
               "--abort-share", "0.05").returncode == 0
    assert read(again).frames == t.frames

    # record: a scheduler pushes into the recorder as it would into the service
    from sglang_tok.kit.client import Scheduler
    rec = tmp_path / "rec.trace"
    ep = f"ipc://{tmp_path}/rec.ipc"
    ready = tmp_path / "rec.ready"
    recorder = subprocess.Popen([sys.executable, str(SCRIPTS / "load" / "record.py"), str(rec), "--input",
                                 ep, "--frames", str(len(t.frames)), "--seconds", "60",
                                 "--ready", str(ready)])
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        s = Scheduler(ep)
        for f in t.frames:
            s.send(f)
        assert recorder.wait(60) == 0
        s.close()
    finally:
        recorder.kill()
    assert read(rec).frames == t.frames

    out = tmp_path / "r.json"
    chart = tmp_path / "r.png"
    r = run(str(SCRIPTS / "load" / "replay.py"), str(rec), "--start", "2", "--speed", "4", "--json",
            str(out), "--chart", str(chart))
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads(out.read_text())
    assert summary["verified_exact"] == summary["requests"] == 200
    assert summary["complete"] and summary["latency_ms"]["p99"] > 0
    assert set(summary["per_shard_deltas"]) == {"0", "1"}
    if os.environ.get("SGLANG_TOK_CHART"):
        assert chart.exists()


def test_baselines_run_on_the_same_protocol(tmp_path: Path) -> None:
    """The lean baselines' text, ids, finish and usage pass the verifier; --window works."""
    trace = tmp_path / "t.trace"
    assert run(str(SCRIPTS / "load" / "synth.py"), str(trace), "--requests", "64", "--concurrency",
               "32", "--max-tokens", "32", "--ids-per-row", "1-3", "--stop-share", "0",
               "--options-share", "0.3", "--special-share", "0.1", "--prompt-share", "0.3",
               "--abort-share", "0.05").returncode == 0
    for kind in ("sglang", "vllm"):
        out = tmp_path / f"{kind}.json"
        r = run(str(SCRIPTS / "load" / "replay.py"), str(trace), "--baseline", kind, "--max",
                "--window", "4", "--json", str(out))
        assert r.returncode == 0, r.stdout + r.stderr
        summary = json.loads(out.read_text())
        assert summary["complete"] and summary["tokens"] > 0, kind
        assert summary["verified_exact"] == summary["requests"] == 64, summary["problems"]
        assert summary["window"] == 4 and summary["latency_frames"] > 0


def test_latency_counts_only_rows_that_produce_a_delta(tmp_path: Path) -> None:
    """`stream: false` requests (one delta at the end) and requests a service stop string
    ended (later rows give no delta) must not turn request lifetimes into frame latencies:
    mapping a rid's k-th row to its k-th delta gave a p99.9 of whole lifetimes here."""
    from sglang_tok.kit.workload import expected
    from sglang_tok.protocols.model import batch as native_batch
    from sglang_tok.protocols.model import tags
    from sglang_tok.tokenizer import load

    trace = tmp_path / "t.trace"
    assert run(str(SCRIPTS / "load" / "synth.py"), str(trace), "--requests", "120", "--concurrency",
               "48", "--min-tokens", "40", "--max-tokens", "60", "--options-share", "1",
               "--stop-share", "0.5", "--abort-share", "0").returncode == 0
    t = read(trace)
    info = load("deepseek-v4")
    reqs = requests(t.frames)
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for when, frame in zip(t.times, t.frames):
        if frame[0] == tags.TAG_BATCH:
            for rid in native_batch.decode_batch(frame).rids:
                first.setdefault(rid, when)
                last[rid] = when
    quiet = [last[r.rid] - first[r.rid] for r in reqs.values()
             if r.opts is not None and not r.opts.stream and r.finish is not None]
    stopped = [r for r in reqs.values() if r.finish is not None
               and expected(r, info)[1] != r.finish]
    assert len(quiet) >= 5 and min(quiet) > 0.5 and len(stopped) >= 5

    out = tmp_path / "r.json"
    r = run(str(SCRIPTS / "load" / "replay.py"), str(trace), "--start", "2", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads(out.read_text())
    assert s["verified_exact"] == s["requests"] == 120 and s["complete"]
    lat, ttft, gap = s["latency_ms"], s["ttft_ms"], s["gap_ms"]
    # every sample is a frame's or a first row's own latency: far below any lifetime
    bound_ms = 1000 * min(min(quiet) / 2, s["trace_s"] / 8)
    assert 0 < lat["p50"] <= lat["p99"] <= lat["p99.9"] <= lat["max"] < bound_ms, lat
    assert 0 < ttft["p50"] <= ttft["max"] < bound_ms, ttft
    assert s["ttft_requests"] == sum(1 for q in reqs.values()
                                     if q.opts is None or q.opts.stream)
    # deltas of a streaming request come one trace step (20 ms) apart, give or take
    assert 5 < gap["p50"] < 60, gap


def test_delta_map_follows_the_rows_that_produce_a_delta() -> None:
    """The frame each delta answers, and frames in flight, on hand-made frames and outputs
    (DELTAS and COLUMNS messages)."""
    from sglang_tok.protocols.model import batch as native_batch
    from sglang_tok.protocols.model import columns, control
    from sglang_tok.protocols.model import deltas as native_deltas
    from sglang_tok.protocols.model.deltas import Delta, Deltas
    from sglang_tok_testkit.frame_latency import DeltaMap

    def batch(*rows: tuple[str, dict | None]) -> bytes:
        return native_batch.encode_batch([{"rid": r, "ids": [100], "finish": f} for r, f in rows])

    end = {"type": "length", "length": 3}
    frames = [
        control.encode_control(control.Open("quiet", stream=False)),  # 0
        batch(("s", None), ("quiet", None), ("stop", None), ("ab", None)),  # 1
        batch(("s", None), ("quiet", None), ("stop", None)),  # 2: "stop" ends here
        control.encode_control(control.Abort(["ab"])),  # 3
        batch(("s", end), ("quiet", end), ("stop", None)),  # 4: "stop" row gives nothing
    ]
    m = DeltaMap(frames)
    assert m.pending == [0, 3, 2, 0, 3]

    def out(t: float, *deltas: Delta, columnar: bool = False) -> None:
        m.feed(t, columns.encode_columns(columns.columns_of(0, 0, list(deltas))) if columnar
               else native_deltas.encode_deltas(Deltas(0, 0, list(deltas))))

    for i, when in enumerate((0.9, 1.0, 1.1, 1.2, 5.0)):
        m.mark_sent(i, when)
    assert m.inflight == 3
    out(1.5, Delta("s"), Delta("stop"), Delta("ab"))
    assert m.inflight == 2  # frame 1 is back: its "quiet" row gives no delta
    out(1.6, Delta("s"), Delta("stop", finish={"type": "stop", "matched": "x"}),
        columnar=True)
    assert m.pending[2] == 0 and m.pending[4] == 2 and m.inflight == 1  # "stop" struck off
    out(4.5, Delta("ab", finish={"type": "abort"}))  # answers the ABORT, not a BATCH
    assert m.inflight == 1
    out(5.25, Delta("s", finish=end), Delta("quiet", finish=end), columnar=True)
    assert m.inflight == 0 and m.pending == [0] * 5
    assert m.frame_latencies(0.0) == [(1.0, 0.5), (1.1, 0.5), (5.0, 0.25)]
    assert m.first_delta(0.0) == [(1.0, 0.5)] * 3  # s, stop, ab: not the stream:false one
    assert sorted(m.gaps()) == pytest.approx([0.1, 0.1, 3.0, 3.65])


def test_bench_stages_runs_every_stage_on_a_small_trace() -> None:
    """The stage ceilings drive the egress and the shard in-process: keep them in step with
    those classes (a renamed method must fail here, not in a benchmark run)."""
    r = run(str(SCRIPTS / "bench" / "stages.py"), "--requests-a", "48", "--requests-b", "24",
            "--repeat", "1", timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert r.stdout.count("| egress, 1 shard") == 2 and "saturates first" in r.stdout


def test_bench_stages_small_frames_measures_both_stages_per_frame() -> None:
    r = run(str(SCRIPTS / "bench" / "stages.py"), "--small-frames", "--small-requests", "40",
            "--repeat", "1", timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "per frame: egress" in r.stdout and "shard" in r.stdout


def test_bench_fallback_runs_its_sections_exactly() -> None:
    """Each decoder's rows are checked against the window decoder's before timing (an assertion);
    the runs section (its tokenizer trains on faker text, the `scripts` extra) prints its
    figures for a short run where faker is installed."""
    runs = importlib.util.find_spec("faker") is not None
    r = run(str(SCRIPTS / "bench" / "fallback.py"), "--section", "all" if runs else "rows",
            "--rows", "16", "--workload", "multilingual", "--repeat", "1", "--requests", "12",
            timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert r.stdout.count("| multilingual | 16 |") == 1, r.stdout
    if runs:
        assert "anchored != oracle: 0 of" in r.stdout and "attributed 1/row" in r.stdout


@pytest.mark.parametrize("args,requests", [("short", "12"), ("files", "4")])
def test_bench_parsers_table_runs_every_format_in_both_modes_exactly(args: str,
                                                                     requests: str) -> None:
    """`bench/parsers.py --table` drives the shard's table in-process (it once called a method
    the table had lost): every format of this branch, both tool_stream modes, each request
    equal to parse_full (exit status), and each writer's calls found by its parser; with
    short arguments and with file-writing calls (long strings, escapes, `<` in code)."""
    from sglang_tok.parsers import FORMATS

    r = run(str(SCRIPTS / "bench" / "parsers.py"), "--table", "--requests", requests, "--repeat",
            "1", "--corpus", "builtin", "--args", args, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "all requests equal parse_full" in r.stdout and "no trace writer" not in r.stdout
    rows = [row for row in map(str.split, r.stdout.splitlines())
            if row and row[0].endswith(("/incremental", "/whole"))]
    benched = {row[0].split("/")[0] for row in rows}
    assert benched == {n for n in FORMATS if n not in ("deepseekv31", "qwen25", "qwen")}
    for row in rows:
        found, written = row[-1].split("/")
        assert found == written, row


def test_fault_injection_kills_each_kind_and_loses_nothing() -> None:
    """A short `scripts/load/faults.py`: each kill hits the role it names (by /health's roles),
    and no request is lost or wrong (protocol section 5, rules 5, 7 and 8)."""
    r = run(str(SCRIPTS / "load" / "faults.py"), "--seconds", "4", "--kills", "3", "--kinds",
            "shard,egress,http", "--seed", "1", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "lost                   0" in out and "wrong                  0" in out, out
    log = out.rsplit("the supervisor's log of deaths and restarts:", 1)[1]
    kills = [line.split("killed ", 1)[1] for line in out.splitlines() if " killed " in line]
    assert kills, out
    for kill in kills:  # "shard (pid 123)" -> the supervisor saw that role's process die
        kind, pid = kill.split(" (pid ")
        assert any(kind in line and f"(pid {pid.rstrip(')')}) exited" in line
                   for line in log.splitlines()), (kill, log[-3000:])


@pytest.mark.parametrize("step_ms", [0, 5])
def test_bench_sglang_runs_the_service_on_sglang_messages_exactly(tmp_path: Path,
                                                                   step_ms: int) -> None:
    """The SGLang benchmark's short version: ours alone (SGLang's systems need the side
    environment), every request exact on both traces, flat out and one message per 5 ms
    step (where it keeps up: the quick traces ask a few thousand ids per second)."""
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, str(SCRIPTS / "sglang" / "bench.py"), "--quick",
                        "--systems", "sglang-tok x1", "--step-ms", str(step_ms),
                        "--json", str(out)],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "not measured (no sglang x1)" in r.stdout
    medians = json.loads(out.read_text())["medians"]
    for trace in ("a", "b"):
        got = medians[trace]["sglang-tok x1"]
        assert got["complete"] and got["exact"] == got["requests"] > 0, (trace, got)
        assert got["kept_up"] == bool(step_ms), (trace, got)
    if step_ms:
        assert "kept up" in r.stdout and "FELL BEHIND" not in r.stdout, r.stdout[-2000:]


def test_gap_histograms_of_several_client_processes_add_up() -> None:
    """The SGLang server bench's client processes send gap histograms; their sum gives the
    percentiles of all the gaps together (to the bin's 0.5 ms)."""
    from sglang_tok_bench.gap_hist import GAP_BIN_MS, gap_histogram, percentile

    a, b = [0.001 * k for k in range(1, 51)], [0.001 * k for k in range(51, 101)]
    merged = [x + y for x, y in zip(gap_histogram(a), gap_histogram(b))]
    assert percentile(merged, 0.5) == pytest.approx(50.75, abs=GAP_BIN_MS)
    assert percentile(merged, 0.99) == pytest.approx(99.75, abs=GAP_BIN_MS)
    assert percentile(gap_histogram([]), 0.5) != percentile(gap_histogram([]), 0.5)  # nan
    assert percentile(gap_histogram([60.0]), 0.5) == pytest.approx(9999.75)  # the last bin


def test_bench_against_pairs_two_checkouts_trial_by_trial(tmp_path: Path) -> None:
    """`bench/against.py` against this same checkout: both workers answer every trial, and
    the same code on both sides gives a finite ratio per measure; an unknown measure and a
    missing python are one line each."""
    out = tmp_path / "trials.json"
    root = str(SCRIPTS.parent)
    r = run(str(SCRIPTS / "bench" / "against.py"), root, "--other-python", sys.executable,
            "--cycles", "2", "--keys", "small.e1,small.s1p", "--json", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    trials = json.loads(out.read_text())
    assert {side: sorted(t) for side, t in trials.items()} == \
        {"this": ["small.e1", "small.s1p"], "other": ["small.e1", "small.s1p"]}
    assert all(len(v) == 2 and min(v) > 0 for t in trials.values() for v in t.values())
    rows = [line for line in r.stdout.splitlines() if line.startswith("| small:")]
    assert len(rows) == 2 and all(float(row.split("|")[4]) > 0 for row in rows), r.stdout
    bad = run(str(SCRIPTS / "bench" / "against.py"), root, "--keys", "small.nope")
    assert bad.returncode == 2 and "--keys: unknown small.nope" in bad.stderr
    missing = run(str(SCRIPTS / "bench" / "against.py"), str(tmp_path))
    assert missing.returncode == 2 and "--other-python: no python at" in missing.stderr


# every entry point but sglang/server_device.sh (a shell script for another machine)
ENTRY_POINTS = sorted(SCRIPTS.rglob("*.py"))


@pytest.mark.parametrize("script", ENTRY_POINTS, ids=lambda p: str(p.relative_to(SCRIPTS)))
def test_every_script_answers_help(script: Path) -> None:
    """Every entry point parses its flags before it does anything else: `--help` prints its
    usage and exits 0 (its imports load in the project's environment)."""
    r = run(str(script), "--help", timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("usage: "), r.stdout[:500]


def test_scripts_are_thin_and_listed_where_they_live() -> None:
    """scripts/ holds entry points in folders by role, each listed (by its command) in its
    folder's README.md; none reaches into another through sys.path (their library parts
    are the package's: dev/sglang_tok_bench/)."""
    scripts = [p for p in SCRIPTS.rglob("*") if p.suffix in (".py", ".sh")]
    assert scripts and all(p.parent != SCRIPTS for p in scripts), "a script outside a folder"
    for p in scripts:
        assert "sys.path" not in p.read_text(), p
        readme = (p.parent / "README.md").read_text()
        assert f"scripts/{p.parent.name}/{p.name}" in readme, (p, "not in its README.md")
