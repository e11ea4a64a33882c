"""Faults inside a whole SGLang server: kill -9 of the plugin's shards and egress while
streaming HTTP clients run (`sglang_clients.py`), with the stand-in scheduler in place of
the model (`sglang_server.Server` starts it) (`scripts/sglang/faults.py`). SGLang's own
detokenizer SIGQUITs the whole server when it dies; with the plugin the server must stay
up, every stream a kill cuts must end with an error within seconds, none may hang, no text
may be wrong, and new requests must be served exactly.

Every finished stream is checked against the full decode of the ids the stand-in sent
(its ledger); a stream that ended with an error must have streamed a prefix of it (a
character cut short may end in U+FFFD). A stream with no chunk for --hang-after seconds is
hung. After the kills, new requests must all be exact (`after`). Under --dp 2 (two
stand-in schedulers behind SGLang's DataParallelController) and under --tokenizer-workers
2 (the rows go to the worker each request came from) as in the plain server. Prints one
JSON report (and writes it with --json); exits 1 unless `ok`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from sglang_tok_bench.figures import write_json
from sglang_tok_bench.sglang_server import (
    CLIENTS,
    DEFAULT_SGLANG_PYTHON,
    STEP_MS,
    Expected,
    Server,
    System,
)
from sglang_tok_testkit.processes import package_env

IDS_PER_STEP = 1


def victims(server: Server) -> dict[str, psutil.Process]:
    """The plugin's processes that hold requests, by role ("egress", "shard 0", ...)."""
    out: dict[str, psutil.Process] = {}
    try:
        tree = psutil.Process(server.proc.pid).children(recursive=True)
    except psutil.Error:
        return out
    for p in tree:
        try:
            title = p.name() + " " + " ".join(p.cmdline()[:1])
        except psutil.Error:
            continue
        for role in ("egress", *(f"shard {k}" for k in range(64))):
            if f"sglang-tok: {role}" in title:
                out[role] = p
    return out


class Killer(threading.Thread):
    """kill -9 of a process of the plugin's at the given times (seconds from the start):
    a role named, or one drawn at random."""

    def __init__(self, server: Server, plan: list[tuple[float, str | None]],
                 rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.server, self.plan, self.rng = server, plan, rng
        self.kills: list[dict[str, Any]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        for at, role in self.plan:
            if self.stop.wait(max(0.0, start + at - time.monotonic())):
                return
            procs = victims(self.server)
            if role is None:
                role = self.rng.choice(sorted(procs)) if procs else None
            proc = procs.get(role) if role else None
            if proc is None:
                self.kills.append({"at": time.time(), "role": role, "pid": None})
                continue
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            self.kills.append({"at": time.time(), "role": role, "pid": proc.pid,
                               "server_alive": self.server.proc.poll() is None})


def run_clients(python: str, server: Server, clients: int, seconds: float, hang_after: float,
                out: Path) -> dict[str, Any]:
    cmd = [python, *CLIENTS, "--url", server.url, "--clients", str(clients),
           "--seconds", str(seconds), "--warmup", "0", "--ids-per-step", str(IDS_PER_STEP),
           "--read-timeout", str(hang_after), "--drain", str(3 * hang_after), "--out", str(out)]
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True, env=package_env())
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def judge(result: dict[str, Any], expected: Expected, kills: list[dict[str, Any]]
          ) -> dict[str, Any]:
    """completed / errored / hung / wrong, and how long errors took after each kill."""
    expected._read()
    wrong: list[str] = []
    unchecked = 0
    for d in result["done"]:
        e = expected.seen.get(d["rid"])
        if e is None:
            unchecked += 1
        elif d["text"] != expected.text(e):
            wrong.append(d["rid"])
    errored = [f for f in result["failed"] if not f["hung"]]
    for f in errored:
        e = expected.seen.get(f["rid"])
        if e is not None:  # a cut stream streamed a prefix of its full decode
            kept = f["text"].rstrip("\ufffd")
            if not expected.text(e).startswith(kept) or len(f["text"]) - len(kept) > 3:
                wrong.append(f["rid"])
    after = [min((f["at"] - k["at"] for k in kills if 0 <= f["at"] - k["at"]), default=None)
             for f in errored]
    lags: list[float] = [x for x in after if x is not None]
    return {"completed": len(result["done"]), "errored": len(errored),
            "hung": sum(f["hung"] for f in result["failed"]), "wrong": len(wrong),
            "wrong_rids": wrong[:10], "unchecked": unchecked,
            "error_after_kill_s_max": round(max(lags), 2) if lags else None,
            "ids_per_s": round(result["ids_per_s"], 1),
            "why": sorted({f["why"][:80] for f in errored})[:8]}


def measure_capacity(python: str, server: Server, work: Path) -> float:
    """Streamed ids/s with more clients than the server keeps up with (20 s)."""
    result = run_clients(python, server, 768, 20.0, 60.0, work / "capacity.json")
    return float(result["ids_per_s"])


def after(python: str, server: Server, expected: Expected, work: Path, clients: int = 24,
          seconds: float = 5.0) -> dict[str, Any]:
    """New requests once the kills are over (the egress's replacement's grace past): every
    one must finish exactly, none may fail."""
    result = run_clients(python, server, clients, seconds, 20.0, work / "after.json")
    got = judge(result, expected, [])
    got["exact"] = got["completed"] > 0 and got["errored"] == got["hung"] == got["wrong"] == 0
    return got


def demo(python: str, server: Server, work: Path, clients: int, seconds: float,
         plan: list[tuple[float, str | None]], hang_after: float,
         rng: random.Random) -> dict[str, Any]:
    """Clients for `seconds` while `plan`'s kills land; then new requests
    (`after`). The verdict: `ok` is the server up, every kill landed, 0 hung, 0 wrong,
    the new requests exact."""
    killer = Killer(server, plan, rng)
    killer.start()
    result = run_clients(python, server, clients, seconds, hang_after, work / "clients.json")
    killer.stop.set()
    killer.join()
    expected = Expected(server.ledger, server.dp)
    report = judge(result, expected, killer.kills)
    report["kills"] = len([k for k in killer.kills if k["pid"]])
    report["kills_by_role"] = {r: sum(k["role"] == r and bool(k["pid"]) for k in killer.kills)
                               for r in sorted({k["role"] for k in killer.kills if k["role"]})}
    time.sleep(3.0)  # the replacements' start-up
    report["after"] = after(python, server, expected, work)
    report["server_alive"] = server.proc.poll() is None
    report["ok"] = (report["server_alive"] and report["kills"] == len(plan)
                    and report["hung"] == 0 and report["wrong"] == 0
                    and report["after"]["exact"])
    return report


def main(args: argparse.Namespace) -> int:
    """`scripts/sglang/faults.py`: demo (a shard, then the egress) or soak (random kills at
    a share of the measured capacity), at --dp and --tokenizer-workers; the report."""
    shards = args.shards or (2 if args.mode == "demo" else 4)
    work = Path(tempfile.mkdtemp(prefix="sglang-faults-"))
    server = Server(System.parse(f"sglang-tok x{shards}"), args.tokenizer_workers,
                    args.sglang_python, work, args.port, dp=args.dp)
    rng = random.Random(args.seed)
    report: dict[str, Any] = {"mode": args.mode, "shards": shards, "dp": args.dp,
                              "tokenizer_workers": args.tokenizer_workers}
    try:
        server.wait_ready()
        if args.mode == "demo":
            seconds, clients = args.seconds, args.clients
            plan: list[tuple[float, str | None]] = [(seconds / 4, "shard 0"),
                                                    (seconds * 5 / 8, "egress")]
        else:
            capacity = measure_capacity(args.sglang_python, server, work)
            clients = max(1, round(args.load * capacity * STEP_MS / 1000 / IDS_PER_STEP))
            seconds = 60 * args.minutes
            plan, at = [], 0.0
            while True:
                at += rng.uniform(5.0, 20.0)
                if at > seconds - 5:
                    break
                plan.append((at, None))
            report.update(capacity_ids_per_s=round(capacity), clients=clients)
        report.update(demo(args.sglang_python, server, work, clients, seconds, plan,
                           args.hang_after, rng))
    finally:
        server.stop()
    print(json.dumps(report, indent=1))
    if args.json:
        write_json(args.json, report)
    return 0 if report.get("ok") else 1


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """The flags of `scripts/sglang/faults.py` (its `main` parses them)."""
    ap.add_argument("mode", choices=["demo", "soak"])
    ap.add_argument("--sglang-python", default=os.environ.get(
        "SGLANG_PYTHON", DEFAULT_SGLANG_PYTHON))
    ap.add_argument("--shards", type=int, default=0, help="demo: 2, soak: 4")
    ap.add_argument("--dp", type=int, default=1, help="--dp-size (a stand-in per rank)")
    ap.add_argument("--tokenizer-workers", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=40.0,
                    help="demo length (the shard killed at 1/4, the egress at 5/8)")
    ap.add_argument("--minutes", type=float, default=10.0, help="soak length")
    ap.add_argument("--load", type=float, default=0.8, help="soak: share of the capacity")
    ap.add_argument("--clients", type=int, default=96, help="demo: streaming clients")
    ap.add_argument("--hang-after", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--port", type=int, default=31900)
    ap.add_argument("--json", default="")
