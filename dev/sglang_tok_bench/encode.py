"""Encode service benchmark: M = 1 and 2 encode workers against one process, same run
(`scripts/bench/encode.py`).

Many concurrent clients (DEALER sockets, closed loop: send, wait for the reply, send the
next) send single-prompt requests of mixed lengths, log-uniform between 50 and 20,000
tokens, to the same endpoint in turn served by:
  baseline      one process: a ROUTER calling `encode_batch` per request (what a frontend
                that moved tokenization into one helper process would have); it runs as
                `python -m sglang_tok_bench.encode ENDPOINT --ready FILE`
  sglang-tok M  `sglang-tok serve --encode-workers M --encode ENDPOINT` (broker + M workers),
                started by the harness (`LocalService`)
Prints requests/s, tokens/s, latency p50/p99 overall and p99 of short prompts (<= 500
tokens, the ones head-of-line blocking hurts), and ratios to the baseline. Ratios, not
absolute figures: the machine is shared. On a 2-core machine M = 2 is bounded by cores:
two workers, the broker and the clients share two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import zmq
import zmq.asyncio

from sglang_tok.kit.local_service import LocalService
from sglang_tok_bench.corpora import shuffled_text
from sglang_tok_bench.figures import percentile, write_json
from sglang_tok_testkit.processes import cpu_seconds, terminate, tree_pids, wait_for_file

SHORT = 500  # tokens: prompts this short are reported on their own


class _Errors(msgspec.Struct):
    error: str | None = None


def prompts(tokenizer: str, n: int, seed: int) -> list[tuple[int, bytes]]:
    """(tokens, request bytes) for n prompts of log-uniform length in [50, 20000] tokens."""
    from sglang_tok.tokenizer import load_tokenizer
    tok = load_tokenizer(tokenizer)
    text = shuffled_text()
    while len(tok.encode(text, add_special_tokens=False).ids) < 25_000:
        text = text + "\n\n" + text
    offsets = tok.encode(text, add_special_tokens=False).offsets
    rng = random.Random(seed)
    out = []
    for k in range(n):
        # log-uniform, with both ends in the pool
        want = 50 if k == 0 else 20_000 if k == 1 else int(round(50 * (400 ** rng.random())))
        start = rng.randrange(0, len(offsets) - want)
        piece = text[offsets[start][0]:offsets[start + want - 1][1]]
        tokens = len(tok.encode(piece).ids)
        out.append((tokens, msgspec.msgpack.encode({"id": k, "texts": [piece]})))
    return out


# ------------------------------------------------------------------------------- baseline
def serve_baseline(endpoint: str, tokenizer: str, ready: str) -> None:
    """A lean single process on the same socket type: decode, encode_batch, reply."""
    from sglang_tok.tokenizer import load_tokenizer
    tok = load_tokenizer(tokenizer)
    tok.no_padding()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(endpoint)
    dec = msgspec.msgpack.Decoder()
    enc = msgspec.msgpack.Encoder()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    Path(ready).touch()
    while True:
        frames = sock.recv_multipart()
        req = dec.decode(frames[-1])
        encs = tok.encode_batch(req["texts"], add_special_tokens=req.get("add_special_tokens",
                                                                          True))
        reply = {"id": req.get("id"), "ids": [e.ids for e in encs]}
        sock.send_multipart([*frames[:-1], enc.encode(reply)])


class System:
    """The baseline's process, or the service (the harness's `LocalService`)."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes] | None = None,
                 service: LocalService | None = None) -> None:
        self.name, self.proc, self.service = name, proc, service

    def cpu_seconds(self) -> float:
        """User + system time of every process of the system (the whole service tree)."""
        root = self.service.proc if self.service is not None else self.proc
        assert root is not None
        return cpu_seconds(tree_pids(root.pid))

    def stop(self) -> None:
        if self.service is not None:
            self.service.stop()
        if self.proc is not None:
            terminate(self.proc)


def start(name: str, workers: int, endpoint: str, tokenizer: str, work: Path) -> System:
    if workers == 0:
        ready = work / "baseline.ready"
        ready.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "sglang_tok_bench.encode", endpoint,
               "--tokenizer", tokenizer, "--ready", str(ready)]
        proc = subprocess.Popen(cmd)
        wait_for_file(ready, proc, 180, name)
        return System(name, proc)
    # ready once /health says every process, encode ones too, is up
    svc = LocalService(shards=1, tokenizer=tokenizer, frontend=False, scheduler=False,
                  args=["--log-level", "WARNING", "--encode-workers", str(workers),
                        "--encode", endpoint])
    svc.start(timeout=180)
    return System(name, service=svc)


# --------------------------------------------------------------------------------- driver
async def drive(endpoint: str, pool: list[tuple[int, bytes]], clients: int, duration: float,
                warmup: float, seed: int) -> dict[str, Any]:
    ctx = zmq.asyncio.Context()
    lat: list[tuple[int, float]] = []
    errors = 0
    done_tokens = 0  # every answered request's tokens, warmup included (for CPU per token)
    t_start = time.monotonic()
    t_measure, t_end = t_start + warmup, t_start + warmup + duration
    decoder = msgspec.msgpack.Decoder(_Errors)

    async def client(k: int) -> None:
        nonlocal errors, done_tokens
        rng = random.Random(seed * 1000 + k)
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint)
        try:
            while time.monotonic() < t_end:
                tokens, body = pool[rng.randrange(len(pool))]
                t0 = time.monotonic()
                await sock.send(body)
                reply = await sock.recv()
                t1 = time.monotonic()
                if decoder.decode(reply).error is not None:
                    errors += 1
                    continue
                done_tokens += tokens
                if t0 >= t_measure and t1 <= t_end:
                    lat.append((tokens, t1 - t0))
        finally:
            sock.close()

    await asyncio.gather(*(client(k) for k in range(clients)))
    ctx.term()
    return {"lat": lat, "errors": errors, "seconds": duration, "done_tokens": done_tokens}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every round of one system pooled: throughput over all measured seconds."""
    lat = [x for r in runs for x in r["lat"]]
    seconds = sum(r["seconds"] for r in runs)
    all_lat = [x for _, x in lat]
    short = [x for n, x in lat if n <= SHORT]
    return {"requests": len(lat), "errors": sum(r["errors"] for r in runs),
            "req_s": len(lat) / seconds,
            "cpu_ms_per_ktok": sum(r["cpu_s"] for r in runs) * 1e6
            / max(1, sum(r["done_tokens"] for r in runs)),
            "tokens_s": sum(n for n, _ in lat) / seconds,
            "p50_ms": percentile(all_lat, 50) * 1e3, "p99_ms": percentile(all_lat, 99) * 1e3,
            "short_p50_ms": percentile(short, 50) * 1e3,
            "short_p99_ms": percentile(short, 99) * 1e3}


def main(args: argparse.Namespace) -> int:
    """`scripts/bench/encode.py`: every system for --rounds rounds, the table, the JSON."""
    pool = prompts(args.tokenizer, args.prompts, args.seed)
    lengths = sorted(n for n, _ in pool)
    print(f"{len(pool)} prompts, {lengths[0]}..{lengths[-1]} tokens (median "
          f"{lengths[len(lengths) // 2]}); {args.clients} clients; {args.duration:.0f} s each; "
          f"{args.rounds} rounds; {len(os.sched_getaffinity(0))} cores")
    systems = [("baseline", 0)] + [(f"sglang-tok M={m}", int(m))
                                   for m in args.workers.split(",")]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in systems}
    with tempfile.TemporaryDirectory(prefix="bench-encode-") as tmp:
        work = Path(tmp)
        endpoint = f"ipc://{work}/encode.ipc"
        for r in range(args.rounds):
            for name, workers in systems:
                system = start(name, workers, endpoint, args.tokenizer, work)
                try:
                    cpu0 = system.cpu_seconds()
                    run = asyncio.run(drive(endpoint, pool, args.clients, args.duration,
                                            args.warmup, args.seed + r))
                    run["cpu_s"] = system.cpu_seconds() - cpu0
                    runs[name].append(run)
                finally:
                    system.stop()
    results = {name: summary(rs) for name, rs in runs.items()}
    base = results["baseline"]
    print(f"{'system':<18}{'req/s':>8}{'tok/s':>9}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'short p50':>10}{'short p99':>10}{'cpu ms/ktok':>12}{'errors':>7}"
          "   ratios to baseline")
    for name, f in results.items():
        ratio = (f"req/s x{f['req_s'] / base['req_s']:.2f}, p50 x{f['p50_ms'] / base['p50_ms']:.2f}"
                 f", p99 x{f['p99_ms'] / base['p99_ms']:.2f}, short p99 "
                 f"x{f['short_p99_ms'] / base['short_p99_ms']:.2f}, cpu/tok "
                 f"x{f['cpu_ms_per_ktok'] / base['cpu_ms_per_ktok']:.2f}")
        print(f"{name:<18}{f['req_s']:>8.1f}{f['tokens_s']:>9.0f}{f['p50_ms']:>9.1f}"
              f"{f['p99_ms']:>9.1f}{f['short_p50_ms']:>10.1f}{f['short_p99_ms']:>10.1f}"
              f"{f['cpu_ms_per_ktok']:>12.3f}{f['errors']:>7}   "
              f"{ratio if name != 'baseline' else ''}")
    if args.json:
        write_json(args.json, results)
    return 0 if all(r["errors"] == 0 for r in results.values()) else 1


def serve_main() -> int:
    """The baseline's process (`python -m sglang_tok_bench.encode`)."""
    ap = argparse.ArgumentParser(description="The encode benchmark's one-process baseline.")
    ap.add_argument("endpoint")
    ap.add_argument("--tokenizer", default="deepseek-v4")
    ap.add_argument("--ready", required=True, help="a file to create once bound")
    a = ap.parse_args()
    serve_baseline(a.endpoint, a.tokenizer, a.ready)
    return 0


if __name__ == "__main__":
    sys.exit(serve_main())


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """The flags of `scripts/bench/encode.py` (its `main` parses them)."""
    ap.add_argument("--tokenizer", default="deepseek-v4")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--duration", type=float, default=10.0, help="measured seconds per system")
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--prompts", type=int, default=400)
    ap.add_argument("--workers", default="1,2", help="encode worker counts to run")
    ap.add_argument("--rounds", type=int, default=2,
                    help="each system this many times, interleaved (noise on a shared machine)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default="", help="write the figures here")
