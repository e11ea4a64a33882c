"""Replay a trace into a detokenizer, act as its frontend, verify every output, report
(`scripts/load/replay.py`; the benchmark against the lean peers replays its traces with it).

The client stays cheap on a small machine: frames are pre-encoded, outputs are stored raw
with their arrival time, and decoding and verification happen after the run (with
--window, outputs are mapped to frames as they arrive, which the window needs). Reports
rows/s, tokens/s, frame latency (send to the last delta that the frame's rows produced,
see `DeltaMap`), time to first delta and inter-delta gaps of streaming requests,
per-shard load and errors, as a table, a JSON summary (--json) and a PNG chart (--chart).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import zmq

from sglang_tok.kit.local_service import LocalService
from sglang_tok.kit.sync_frontend import Frontend
from sglang_tok.kit.workload import requests_of_trace as requests
from sglang_tok.kit.workload import verify
from sglang_tok.protocols.model import batch, control, output, tags
from sglang_tok.tokenizer import load
from sglang_tok.tracefile import Trace, read
from sglang_tok_bench.figures import percentile, write_json
from sglang_tok_testkit.frame_latency import DeltaMap
from sglang_tok_testkit.processes import terminate, tree_pids, wait_for_file, workdir


class Target:
    """A running system under test: endpoints, how many PONGs a barrier needs, its pids.

    `service`: the harness's `LocalService` it is (stopped with it); `proc`: a baseline's
    process; neither: a system started elsewhere, left running."""

    def __init__(self, input_ep: str, output_ep: str, shards: int,
                 proc: subprocess.Popen[bytes] | None = None, baseline: bool = False,
                 service: LocalService | None = None) -> None:
        self.input, self.output, self.shards, self.proc = input_ep, output_ep, shards, proc
        self.baseline = baseline  # produces text, ids, finish and the last usage only
        self.service = service

    def pids(self) -> list[int]:
        root = self.service.proc if self.service is not None else self.proc
        return [] if root is None else tree_pids(root.pid)

    def stop(self) -> None:
        if self.service is not None:
            self.service.stop()
        if self.proc is not None:
            terminate(self.proc)


def start_service(shards: int, tokenizer: str, extra: Sequence[str] = ()) -> Target:
    """`sglang-tok serve --shards N` plus `extra` flags, started by the harness (`LocalService`:
    a fresh runtime directory, ready on /health); the barrier's shard count is the one the
    service reports on /health (a `--shards` in `extra` wins in `serve`). The client binds
    the output and connects to the input itself."""
    svc = LocalService(shards=shards, tokenizer=tokenizer, frontend=False, scheduler=False,
                  args=["--log-level", "WARNING", *extra])
    try:
        svc.start()
    except (RuntimeError, TimeoutError) as exc:
        raise RuntimeError(f"service failed to start: {exc}") from exc
    return Target(svc.input, svc.output, svc.shards, service=svc)


def start_baseline(kind: str, tokenizer: str, workdir: Path) -> Target:
    """A lean peer (`baselines`, `sglang` or `vllm`) as a process of its own."""
    inp, out = f"ipc://{workdir}/base-{kind}.ipc", f"ipc://{workdir}/front.ipc"
    ready = workdir / f"base-{kind}.ready"
    ready.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "sglang_tok_bench.baselines", kind,
           "--input", inp, "--output", out, "--tokenizer", tokenizer, "--ready", str(ready)]
    proc = subprocess.Popen(cmd)
    wait_for_file(ready, proc, 60, f"baseline {kind}")
    return Target(inp, out, 1, proc, baseline=True)


def _drain(sock: zmq.Socket, raw: list[tuple[float, bytes]], dmap: DeltaMap | None) -> None:
    while True:
        try:
            r = sock.recv(zmq.NOBLOCK)
        except zmq.Again:
            return
        t = time.monotonic()
        raw.append((t, r))
        if dmap is not None:
            dmap.feed(t, r)


def replay(trace: Trace, target: Target, speed: float | None, progress: bool = True,
           rate_fps: float | None = None, window: int = 0,
           probe: Callable[[], float] | None = None) -> dict[str, Any]:
    """Send every frame (paced by trace time / speed, by a fixed frame rate, or flat out;
    with `window`, never more than that many BATCH frames in flight), collect raw outputs
    with arrival times, then verify and measure.

    Without a window the client only stores raw outputs while it sends, so it stays cheap;
    a window needs to know when frames are answered, so outputs are mapped as they come.
    `probe` (e.g. the system's CPU seconds) is read at the first send and at the last PONG;
    the difference is the report's "probe".
    """
    ctx = zmq.Context()
    front = Frontend(target.output, ctx, hwm=0)
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 64)
    push.connect(target.input)
    dmap = DeltaMap(trace.frames)
    live = dmap if window else None
    time.sleep(0.2)  # let the connection come up before the clock starts
    raw: list[tuple[float, bytes]] = []
    sock = front.sock
    frames, times = trace.frames, trace.times
    p0 = probe() if probe is not None else 0.0
    t0 = time.monotonic()
    last_report = t0
    for i, frame in enumerate(frames):
        if speed is not None or rate_fps is not None:
            due = t0 + (times[i] / speed if speed is not None else i / rate_fps)  # type: ignore[operator]
            while True:
                left = due - time.monotonic()
                if left <= 0:
                    break
                if sock.poll(int(left * 1000) + 1):
                    _drain(sock, raw, live)
        if window and dmap.pending[i]:
            stall = time.monotonic() + 60
            while dmap.inflight >= window and time.monotonic() < stall:
                if sock.poll(100):
                    _drain(sock, raw, live)
        push.send(frame, copy=False)
        dmap.mark_sent(i, time.monotonic())
        _drain(sock, raw, live)
        if progress and dmap.sent[i] - last_report > 0.5:
            last_report = dmap.sent[i]
            pct = 100 * (i + 1) / len(frames)
            bar = "#" * int(pct / 4)
            print(f"\r[{bar:<25}] {pct:5.1f}% {i + 1}/{len(frames)} frames "
                  f"{(i + 1) / (dmap.sent[i] - t0):,.0f} frames/s", end="", file=sys.stderr)
    fed = len(raw) if window else 0
    nonce = 1 << 40
    push.send(control.encode_control(control.Ping(nonce)))
    want = set(range(-1, target.shards))
    deadline = time.monotonic() + 120
    while want and time.monotonic() < deadline:
        if sock.poll(200):
            t, r = time.monotonic(), sock.recv()
            raw.append((t, r))
            if r[0] == tags.TAG_PONG:
                p = output.decode_output(r)
                if p.nonce == nonce:  # type: ignore[union-attr]
                    want.discard(p.shard)  # type: ignore[union-attr]
    p1 = probe() if probe is not None else 0.0
    if progress:
        print(file=sys.stderr)
    push.close(linger=0)
    for t, r in raw[fed:]:
        dmap.feed(t, r)
    report = analyse(trace, front, raw, dmap, t0, complete=not want,
                     features=not target.baseline)
    report["window"] = window
    report["probe"] = p1 - p0
    front.close()
    ctx.term()
    return report


def _ms(xs: list[float], qs: tuple[float, ...]) -> dict[str, float]:
    out = {f"p{q:g}": 1000 * percentile(xs, q) for q in qs}
    out["max"] = 1000 * max(xs) if xs else float("nan")
    return out


def analyse(trace: Trace, front: Frontend, raw: list[tuple[float, bytes]], dmap: DeltaMap,
            t0: float, complete: bool, features: bool = True) -> dict[str, Any]:
    last = t0
    for t, r in raw:
        front.take(r)
        if r[0] != tags.TAG_PONG:
            last = max(last, t)
    rows = tokens = 0
    for frame in trace.frames:
        if frame and frame[0] == tags.TAG_BATCH:
            b = batch.decode_batch(frame)
            rows += len(b)
            tokens += b.tokens.row_starts[-1]
    lat_t = dmap.frame_latencies(t0)
    ttft_t = dmap.first_delta(t0)
    info = load(trace.meta.get("tokenizer", "deepseek-v4"))
    reqs = requests(trace.frames)
    problems = [p for r in reqs.values()
                for p in verify(r, front.requests.get(r.rid), info, features)]
    errors = sum(1 for r in front.requests.values() if r.deltas and r.last.error)
    elapsed = max(1e-9, last - t0)
    return {
        "frames": len(trace.frames), "rows": rows, "tokens": tokens, "requests": len(reqs),
        "elapsed_s": elapsed, "rows_per_s": rows / elapsed, "tokens_per_s": tokens / elapsed,
        "trace_s": trace.times[-1] if trace.times else 0.0,
        "latency_ms": _ms([v for _, v in lat_t], (50, 90, 99, 99.9)),
        "latency_frames": len(lat_t),
        "ttft_ms": _ms([v for _, v in ttft_t], (50, 99)), "ttft_requests": len(ttft_t),
        "gap_ms": _ms(dmap.gaps(), (50, 99)),
        "per_shard_deltas": {str(k): v for k, v in sorted(dmap.per_shard.items())},
        "errors": errors, "verified_exact": len(reqs) - len({p.split(":")[0] for p in problems}),
        "problems": problems[:20], "violations": front.violations[:20],
        "complete": complete, "_latency_series": lat_t, "_ttft_series": ttft_t,
    }


def _buckets(series: list[tuple[float, float]], width: float) -> dict[int, list[float]]:
    buckets: dict[int, list[float]] = {}
    for t, v in series:
        buckets.setdefault(int(t / width), []).append(v)
    return buckets


def chart(report: dict[str, Any], path: str) -> None:
    """Frames/s, frame latency p50/p99 and time to first delta p50/p99 over the run."""
    try:
        import matplotlib
    except ImportError:
        print("no chart: matplotlib is not installed (pip install -e './dev[scripts]')",
              file=sys.stderr)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    series = report["_latency_series"]
    if not series:
        return
    width = 0.5
    fig, (a1, a2, a3) = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    lat = _buckets(series, width)
    xs = sorted(lat)
    a1.plot([x * width for x in xs], [len(lat[x]) / width for x in xs])
    a1.set_ylabel("frames/s")
    a1.set_title(f"{report.get('label', 'replay')}: {report['tokens_per_s']:,.0f} tokens/s")
    for q in (50, 99):
        a2.plot([x * width for x in xs], [1000 * percentile(lat[x], q) for x in xs],
                label=f"p{q}")
    a2.set_ylabel("frame latency (ms)")
    a2.legend()
    ttft = _buckets(report["_ttft_series"], width)
    ts = sorted(ttft)
    for q in (50, 99):
        a3.plot([x * width for x in ts], [1000 * percentile(ttft[x], q) for x in ts],
                label=f"p{q}")
    a3.set_ylabel("time to first delta (ms)")
    a3.set_xlabel("seconds (frame send / request start)")
    a3.legend()
    fig.tight_layout()
    fig.savefig(path)


def print_report(r: dict[str, Any]) -> None:
    lat = r["latency_ms"]
    print(f"{r['requests']} requests, {r['frames']} frames, {r['rows']} rows, {r['tokens']} "
          f"tokens in {r['elapsed_s']:.2f}s")
    print(f"throughput: {r['rows_per_s']:,.0f} rows/s, {r['tokens_per_s']:,.0f} tokens/s")
    print(f"frame latency ms ({r['latency_frames']} frames): "
          + ", ".join(f"{k} {v:.2f}" for k, v in lat.items()))
    print(f"time to first delta ms ({r['ttft_requests']} streaming requests): "
          + ", ".join(f"{k} {v:.2f}" for k, v in r["ttft_ms"].items()))
    print("inter-delta gap ms: " + ", ".join(f"{k} {v:.2f}" for k, v in r["gap_ms"].items()))
    print(f"per-shard deltas: {r['per_shard_deltas']}; terminal errors: {r['errors']}")
    print(f"verified exact: {r['verified_exact']}/{r['requests']}; "
          f"violations: {len(r['violations'])}; complete: {r['complete']}")
    for p in r["problems"][:5]:
        print("  " + p)


def main(a: argparse.Namespace) -> int:
    """`scripts/load/replay.py`: the system (started here, a baseline, or running at
    --input/--output), one replay, the report; 0 when complete, exact and in order."""
    trace = read(a.trace)
    tokenizer = trace.meta.get("tokenizer", "deepseek-v4")
    if a.baseline:
        target = start_baseline(a.baseline, tokenizer, workdir("sglang-tok-replay-"))
    elif a.start:
        extra = ["--output-format", a.output_format] if a.output_format else []
        target = start_service(a.start, tokenizer, extra)
    else:
        target = Target(a.input, a.output, a.shards)
    try:
        report = replay(trace, target, None if a.max or a.rate else a.speed,
                        rate_fps=a.rate or None, window=a.window)
    finally:
        target.stop()
    print_report(report)
    if a.chart:
        chart(report, a.chart)
    if a.json:
        write_json(a.json, {k: v for k, v in report.items() if not k.startswith("_")})
    ok = report["complete"] and not report["problems"] and not report["violations"]
    return 0 if ok else 1


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """The flags of `scripts/load/replay.py` (its `main` parses them)."""
    ap.add_argument("trace")
    ap.add_argument("--start", type=int, default=0, help="start sglang-tok with N shards")
    ap.add_argument("--baseline", choices=["sglang", "vllm"], help="start a baseline instead")
    ap.add_argument("--input", default="")
    ap.add_argument("--output", default="")
    ap.add_argument("--shards", type=int, default=1, help="shards of a running service")
    pace = ap.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=float, default=1.0, help="multiple of the recorded pace")
    pace.add_argument("--max", action="store_true", help="as fast as backpressure allows")
    pace.add_argument("--rate", type=float, default=0.0, help="a fixed rate, frames/s")
    ap.add_argument("--window", type=int, default=0,
                    help="at most N BATCH frames in flight (sent, not every delta back)")
    ap.add_argument("--output-format", default="", help="sglang-tok's --output-format")
    ap.add_argument("--json", default="", help="write the summary here")
    ap.add_argument("--chart", default="", help="write a PNG chart here")
