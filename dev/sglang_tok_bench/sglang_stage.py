"""The detokenizer stage side by side (`scripts/sglang/stage.py`): SGLang 0.5.23's
`MultiDetokenizerRouter` + N `DetokenizerManager` workers against sglang-tok's egress + N
shards (`serve --protocol sglang`), on the same scheduler messages at the field's shape
(`stage_trace.py`: R rows per step, K ids per row, rows over W tokenizer workers, time
stats with `--enable-metrics` off or on, a share of rows with logprobs).

The bench is the scheduler (it PUSHes the messages to the stage's input, flat out within a
window of messages in flight) and the TokenizerManager: it binds the stage's output and,
with W > 1, each tokenizer worker's endpoint, as SGLang's tokenizer workers do. Per
system, trace and process role (router, workers; egress, shards; the service's supervisor
and HTTP process as aux) the CPU seconds per id (psutil, from before the first message to
the last reply), and whether every request's texts add up to its full decode.

SGLang's side runs in the side environment (`sglang_peer.py`, forked from one process that
imported SGLang); sglang-tok's is the service as a deployment runs it (`LocalService`). With
N = 1, sglang-tok's one shard runs inside its egress (`--inline-shard`, as SGLang's launcher
starts it for one detokenizer) and stock is one DetokenizerManager.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from sglang_tok.kit.local_service import LocalService
from sglang_tok.protocols.sglang import wire
from sglang_tok_bench import capacity_model as cm
from sglang_tok_bench.capacity import Stage
from sglang_tok_bench.figures import markdown, median, ratio, times, write_json
from sglang_tok_bench.sglang_bench import (
    DEFAULT_SGLANG_PYTHON,
    TOKENIZER,
    Peer,
    _columns,
    _replies,
    checked,
    side_python,
)
from sglang_tok_bench.stage_trace import StageSpec, StageTrace, read
from sglang_tok_testkit.processes import cpu_seconds, package_env, tree_pids

STOCK, TOK = "stock", "sglang-tok"
ROLES = {STOCK: ("router", "workers"), TOK: ("egress", "shards")}


@dataclass(frozen=True)
class Setup:
    """One start of a system: N detokenizer workers or shards, W tokenizer workers."""

    system: str
    n: int
    workers: int
    metrics: bool


class Started:
    """A started system: its input, the endpoints its replies go to, its processes' roles."""

    def __init__(self, setup: Setup, run: Path, peer: Peer | None) -> None:
        self.setup, self.run, self.peer = setup, run, peer
        self.input = f"ipc://{run}/input.ipc"
        self.output = f"ipc://{run}/output.ipc"
        self.svc: LocalService | None = None
        self.roles: dict[int, str] = {}

    def start(self) -> None:
        s = self.setup
        if s.system == STOCK:
            assert self.peer is not None
            reply = self.peer.call({"cmd": "start", "workers": s.n, "input": self.input,
                                    "output": self.output, "tokenizer_workers": s.workers,
                                    "metrics": s.metrics}, timeout=180)
            for pid, name in zip(reply["pids"], reply["names"]):
                self.roles[pid] = "router" if name.endswith("router") else "workers"
            return
        args = ["--protocol", "sglang", "--log-level", "WARNING",
                "--sglang-tokenizer-workers", str(s.workers),
                *(["--inline-shard"] if s.n == 1 else [])]
        self.svc = LocalService(self.run / "svc", shards=s.n, tokenizer=TOKENIZER, frontend=False,
                           scheduler=False, args=args)
        self.svc.input, self.svc.output = self.input, self.output
        self.svc.cmd[self.svc.cmd.index("--input") + 1] = self.input
        self.svc.cmd[self.svc.cmd.index("--output") + 1] = self.output
        self.svc.start(timeout=300)
        assert self.svc.proc is not None
        for pid in tree_pids(self.svc.proc.pid):
            title = _title(pid)
            self.roles[pid] = "egress" if "egress" in title else \
                "shards" if "shard" in title else "aux"

    def pids(self) -> list[int]:
        return list(self.roles)

    def stop(self) -> bool:
        """Stop it; True when it failed on its own meanwhile."""
        if self.svc is not None:
            failed = self.svc.proc is not None and self.svc.proc.poll() is not None
            self.svc.stop()
            return failed
        assert self.peer is not None
        return bool(self.peer.call({"cmd": "stop"}).get("failed"))


def _title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class Sockets:
    """The bench's ends: PUSH to the stage, PULL from its output and every worker's."""

    def __init__(self, stage: Started, ipcs: list[str]) -> None:
        self.ctx = zmq.Context()
        self.push = self.ctx.socket(zmq.PUSH)
        self.push.setsockopt(zmq.LINGER, 0)
        self.pulls = []
        for ep in [stage.output, *ipcs]:
            pull = self.ctx.socket(zmq.PULL)
            pull.setsockopt(zmq.RCVHWM, 0)
            pull.setsockopt(zmq.LINGER, 0)
            pull.bind(ep)
            self.pulls.append(pull)
        self.poller = zmq.Poller()
        for pull in self.pulls:
            self.poller.register(pull, zmq.POLLIN)

    def connect(self, stage: Started) -> None:
        self.push.connect(stage.input)

    def replies(self, wait_ms: int) -> list[bytes]:
        out = []
        for sock, _ in self.poller.poll(wait_ms):
            while True:
                try:
                    out.append(sock.recv(zmq.NOBLOCK))
                except zmq.Again:
                    break
        return out

    def close(self) -> None:
        for sock in (self.push, *self.pulls):
            sock.close()
        self.ctx.term()


def warm_up(socks: Sockets, ipcs: list[str], tag: str, timeout: float = 180.0) -> None:
    """Until a first message is answered the stage may still be starting; rids enough that
    every worker and shard gets some, each with a tokenizer worker where there are several."""
    n = 64
    rids = [f"warm-{tag}-{i}" for i in range(n)]
    cols = _columns([{"rid": r, "ids": [30602, 14, 2058], "context": [],
                      "finish": {"type": "length", "length": 3}, "completion": 3,
                      "prompt_tokens": 1, "cached_tokens": 0, "logprobs": False}
                     for r in rids], 0, 1 << 20)
    if ipcs:
        cols["http_worker_ipcs"] = [ipcs[i % len(ipcs)] for i in range(n)]
    socks.push.send(wire.encode_token_ids(cols))
    left = set(rids)
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        for raw in socks.replies(200):
            left -= set(_replies.decode(raw).rids)
    if left:
        raise TimeoutError(f"{len(left)} of {n} warm-up rows unanswered in {timeout:.0f}s")


def run_trace(trace: StageTrace, socks: Sockets, stage: Started, window: int,
              timeout: float) -> dict[str, Any]:
    """Every message flat out within `window` messages in flight (sent, some row not yet
    answered); the CPU of each role over the run; every request's texts checked."""
    msgs, total = trace.messages, len(trace.messages)
    index = {rid: k for k, rid in enumerate(trace.rids)}
    rows = np.array(trace.rows, np.int64)
    first = np.array(trace.first, np.int64)
    left = np.array(trace.per_message, np.int64)
    seen = np.zeros(len(trace.rids), np.int64)
    texts: list[list[str]] = [[] for _ in trace.rids]
    finishes: list[Any] = [None] * len(trace.rids)
    pids = stage.pids()
    per0: dict[str, list[float]] = {}
    by_pid0 = _cpu_by_pid(pids)
    cpu_seconds(pids, per0)
    sent = done = 0
    t0 = time.monotonic()
    deadline = t0 + timeout
    while done < total and time.monotonic() < deadline:
        if sent < total and sent - done < window:
            socks.push.send(msgs[sent], copy=False)
            sent += 1
            wait = 0
        else:
            wait = 100
        for raw in socks.replies(wait):
            rep = _replies.decode(raw)
            ix = np.fromiter((index.get(r, -1) for r in rep.rids), np.int64, len(rep.rids))
            for k, text, fin in zip(ix.tolist(), rep.output_strs, rep.finished_reasons):
                if k >= 0:
                    texts[k].append(text)
                    if fin is not None:
                        finishes[k] = fin
            ix = ix[ix >= 0]
            m = first[ix] + seen[ix]
            seen[ix] += 1
            m = m[seen[ix] <= rows[ix]]
            if len(m):
                hit, counts = np.unique(m, return_counts=True)
                left[hit] -= counts
                done += int(np.count_nonzero(left[hit] == 0))
    elapsed = time.monotonic() - t0
    by_pid1 = _cpu_by_pid(pids)
    cpu = {role: 0.0 for role in set(stage.roles.values())}
    for pid, role in stage.roles.items():
        cpu[role] += by_pid1.get(pid, 0.0) - by_pid0.get(pid, 0.0)
    exact, problems = checked(trace.rids, texts, trace.expected, finishes, trace.lengths)
    ids = trace.ids
    return {"ids": ids, "elapsed_s": elapsed, "ids_per_s": ids / max(elapsed, 1e-9),
            "cpu_s": cpu, "us_per_id": {role: v / ids * 1e6 for role, v in cpu.items()},
            "complete": done == total, "exact": exact, "requests": len(trace.rids),
            "problems": problems[:5]}


def _cpu_by_pid(pids: list[int]) -> dict[int, float]:
    out: dict[int, float] = {}
    for pid in pids:
        got: dict[str, list[float]] = {}
        out[pid] = cpu_seconds([pid], got)
    return out


def build_traces(specs: list[StageSpec], python: str, run: Path) -> list[StageTrace]:
    """The traces, built where SGLang imports (its time stats, pickled by its classes)."""
    out = run / "traces.bin"
    cmd = [python, "-W", "ignore", "-m", "sglang_tok_bench.stage_trace", "--out",
           str(out), "--run", str(run), "--specs", json.dumps([asdict(s) for s in specs])]
    subprocess.run(cmd, check=True, env=package_env())
    return read(out)


def _key(text: str) -> tuple[int, int, bool, str]:
    n, workers, metrics, name = text.split("|", 3)
    return int(n), int(workers), metrics == "True", name


def targets_of(a: argparse.Namespace) -> list[cm.Target]:
    return [cm.Target(dp, tw, n, c) for dp in a.model_dp for tw in a.model_tm_workers
            for n in a.model_detok_workers for c in a.model_cores]


def setups(a: argparse.Namespace) -> list[Setup]:
    out = []
    for n in a.n:
        for w in a.workers:
            for metrics in a.metrics:
                for system in a.systems:
                    out.append(Setup(system, n, w, metrics))
    return out


def run_setup(setup: Setup, traces: list[StageTrace], peer: Peer | None, root: Path,
              window: int, timeout: float) -> dict[str, dict[str, Any]]:
    """One start of a system, then every trace of its shape on it."""
    mine = [t for t in traces if t.spec["workers"] == setup.workers
            and t.spec["metrics"] == setup.metrics]
    if not mine:
        return {}
    run = Path(tempfile.mkdtemp(prefix=f"{setup.system}-", dir=root))
    ipcs = mine[0].ipcs
    stage = Started(setup, run, peer)
    socks = Sockets(stage, ipcs)
    out: dict[str, dict[str, Any]] = {}
    try:
        stage.start()
        socks.connect(stage)
        warm_up(socks, ipcs, run.name)
        for trace in mine:
            out[StageSpec(**trace.spec).name] = {**run_trace(trace, socks, stage, window,
                                                             timeout), "spec": trace.spec}
    finally:
        failed = stage.stop()
        socks.close()
        for r in out.values():
            r["crashed"] = failed
    return out


def report(results: dict[tuple[int, int, bool, str], dict[str, list[dict[str, Any]]]]
           ) -> tuple[str, list[dict[str, Any]]]:
    """One line per (N, trace): each role's CPU per id (median of rounds) and the ratios
    the issue reads: egress / router, whole / whole."""
    rows, lines = [], []
    for (n, workers, metrics, name), per in sorted(results.items()):
        stock, tok = per.get(STOCK, []), per.get(TOK, [])
        if not stock or not tok:
            continue
        spec = StageSpec(**tok[0]["spec"])
        def med(runs: list[dict[str, Any]], role: str) -> float:
            return median([r["us_per_id"].get(role, 0.0) for r in runs])
        router, wk = med(stock, "router"), med(stock, "workers")
        egress, shards, aux = med(tok, "egress"), med(tok, "shards"), med(tok, "aux")
        stock_whole = router + wk
        tok_whole = egress + shards
        x_router = ratio(egress, router) if n > 1 else float("nan")
        x_whole = ratio(tok_whole, stock_whole)
        row: dict[str, Any] = {"n": n, "trace": name, "tm_workers": workers,
               "metrics": metrics, "ids_per_row": spec.ids_per_row,
               "rows_per_step": spec.rows, "logprobs": spec.logprobs,
               "router": router, "workers": wk,
               "stock_whole": stock_whole, "egress": egress, "shards": shards, "aux": aux,
               "tok_whole": tok_whole,
               "egress_x_router": x_router, "whole_x_whole": x_whole,
               "exact": f"{min(r['exact'] for r in tok)}/{tok[0]['requests']}",
               "stock_exact": f"{min(r['exact'] for r in stock)}/{stock[0]['requests']}",
               "rounds": len(tok)}
        rows.append(row)
        lines.append([n, name, f"{router:.2f}", f"{wk:.2f}", f"{stock_whole:.2f}",
                      f"{egress:.2f}", f"{shards:.2f}", f"{tok_whole:.2f}",
                      times(x_router), times(x_whole),
                      row["exact"], row["stock_exact"]])
    head = ["N", "trace", "router", "workers", "stock whole", "egress", "shards",
            "sglang-tok whole", "egress / router", "whole / whole", "exact", "stock exact"]
    return markdown(head, lines), rows


# ------------------------------------------------------------------------------- the model
def stage_costs(rows: list[dict[str, Any]], n: int, workers: int, ids: int,
                metrics: bool = False) -> dict[str, dict[str, Stage]]:
    """The detokenizer's stages of each system as the stage benchmark measured them (CPU
    seconds per id): stock x1 from N = 1, stock's router + N and the plugin's egress + N
    shards from N = `n`; at the measured tokenizer worker count nearest `workers`, without
    logprobs."""
    def pick(n_: int) -> dict[str, Any] | None:
        mine = [r for r in rows if r["n"] == n_ and r["ids_per_row"] == ids
                and r["metrics"] == metrics and not r["logprobs"]]
        if not mine:
            return None
        return min(mine, key=lambda r: (abs(r["tm_workers"] - workers), -r["tm_workers"]))
    out: dict[str, dict[str, Stage]] = {}
    one, many = pick(1), pick(n)
    if one is not None:
        out[cm.STOCK_X1] = {"detok": Stage(1, one["workers"] / 1e6)}
    if many is not None:
        out[cm.STOCK_ROUTER] = {"detok router": Stage(1, many["router"] / 1e6),
                                "detok": Stage(n, many["workers"] / 1e6)}
        out[cm.PLUGIN] = {"egress": Stage(1, many["egress"] / 1e6),
                          "shards": Stage(n, many["shards"] / 1e6)}
    return out


def server_stages(runs: list[Any], ids: int) -> dict[str, Stage]:
    """Every stage of a whole server but the detokenizer's (the TokenizerManager's
    workers, SGLang's HTTP router, the DataParallelController), from a whole-server run at
    dp 2 with tokenizer workers (`server.py --json`): stock x1's run at `ids` per row."""
    usable = [r for r in runs if r.tokenizer_workers > 1 and r.dp > 1 and not r.logprobs
              and r.ids_per_step == ids and r.system == "sglang x1"]
    if not usable:
        return {}
    return {name: Stage(p, c) for name, (p, c) in usable[0].stages.items()
            if name not in cm.DETOKENIZER}


def model(rows: list[dict[str, Any]], runs: list[Any], targets: list[cm.Target],
          metrics: bool = False) -> list[cm.Row]:
    """The field model (`capacity_model.compare`) with the detokenizer's stages from the
    stage benchmark and every other stage from a whole-server run."""
    out: list[cm.Row] = []
    for ids in sorted({r["ids_per_row"] for r in rows}):
        rest = server_stages(runs, ids)
        if not rest:
            continue
        for t in targets:
            detok = stage_costs(rows, t.detok_workers, t.tm_workers, ids, metrics)
            if len(detok) < 3:
                continue
            out += cm.compare({name: {**rest, **stages} for name, stages in detok.items()},
                              [t], ids)
    return out


def main(a: argparse.Namespace) -> int:
    if a.model_from:
        saved = json.loads(Path(a.model_from).read_text())
        table_, _ = report({_key(k): v for k, v in saved["runs"].items()})
        print(table_)
        if a.server_json:
            from sglang_tok_bench.sglang_server import load_runs

            runs = load_runs(Path(a.server_json))
            for metrics in (False, True):
                modelled = model(saved["rows"], runs, targets_of(a), metrics)
                if modelled:
                    print(f"\nthe field model, --enable-metrics {'on' if metrics else 'off'} "
                          "(detokenizer stages: this benchmark; the others: the server run)")
                    print(cm.table(modelled))
                    for line in cm.goal_met(modelled, 3.0, 2.5 if not metrics else 1.5):
                        print(f"  short: {line}")
        return 0
    root = Path(tempfile.mkdtemp(prefix="stage-"))
    python = side_python(a.sglang_python)
    if python is None:
        print(f"no side python at {a.sglang_python}: build it with "
              "../shared/tools/sglang-venv.sh, or pass --sglang-python")
        return 2
    specs = [StageSpec(rows=a.rows_per_step if k == 1 else a.rows_per_step_k,
                       ids_per_row=k, workers=w, metrics=m, logprobs=lp,
                       requests=a.requests, seed=7)
             for w in a.workers for m in a.metrics for k in a.ids for lp in a.logprobs]
    peer = Peer(python, root) if STOCK in a.systems else None
    t0 = time.monotonic()
    if a.traces and Path(a.traces).exists():
        traces = read(Path(a.traces))
        print(f"{len(traces)} traces read from {a.traces}", flush=True)
    else:
        traces = build_traces(specs, python, root)
        print(f"{len(traces)} traces built in {time.monotonic() - t0:.0f}s", flush=True)
        if a.traces:
            Path(a.traces).write_bytes((root / "traces.bin").read_bytes())
    if peer is not None:
        peer.wait_ready()
    results: dict[tuple[int, int, bool, str], dict[str, list[dict[str, Any]]]] = {}
    try:
        for rnd in range(a.repeat):
            for setup in setups(a):
                got = run_setup(setup, traces, peer, root, a.window, a.timeout)
                for name, r in got.items():
                    key = (setup.n, setup.workers, setup.metrics, name)
                    results.setdefault(key, {}).setdefault(setup.system, []).append(r)
                    print(f"round {rnd + 1} N={setup.n} {setup.system:<10} {name:<28} "
                          f"{r['ids_per_s']:>9,.0f} ids/s  us/id "
                          + " ".join(f"{k} {v:.2f}" for k, v in sorted(r["us_per_id"].items()))
                          + f"  exact {r['exact']}/{r['requests']}"
                          + ("" if r["complete"] else "  INCOMPLETE")
                          + ("  CRASHED" if r["crashed"] else ""), flush=True)
                    for p in r["problems"][:2]:
                        print(f"    {p}")
    finally:
        if peer is not None:
            peer.close()
    table, measured = report(results)
    print()
    print(table)
    if a.json:
        write_json(a.json, {"specs": [asdict(s) for s in specs], "rows": measured,
                            "runs": {"|".join(map(str, k)): v for k, v in results.items()}})
    bad = [r for per in results.values() for r in per.get(TOK, [])
           if r["exact"] < r["requests"] or not r["complete"]]
    return 1 if bad else 0


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    def ints(text: str) -> list[int]:
        return [int(x) for x in text.split(",") if x]

    ap.add_argument("--n", type=ints, default=[8], help="detokenizer workers / shards")
    ap.add_argument("--workers", type=ints, default=[1, 32], help="tokenizer workers")
    ap.add_argument("--ids", type=ints, default=[1, 4], help="ids per row")
    ap.add_argument("--metrics", type=lambda t: [x == "on" for x in t.split(",")],
                    default=[False], help="off, on or off,on (--enable-metrics)")
    ap.add_argument("--logprobs", type=lambda t: [float(x) for x in t.split(",")],
                    default=[0.0], help="shares of requests with top-5 logprobs")
    ap.add_argument("--rows-per-step", type=int, default=256, help="rows at 1 id per row")
    ap.add_argument("--rows-per-step-k", type=int, default=64, help="rows at k > 1 ids")
    ap.add_argument("--requests", type=int, default=0, help="per trace (0: 3x the rows)")
    ap.add_argument("--systems", type=lambda t: t.split(","), default=[STOCK, TOK])
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds; medians")
    ap.add_argument("--window", type=int, default=4, help="messages in flight")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--sglang-python", default=DEFAULT_SGLANG_PYTHON)
    ap.add_argument("--traces", default="",
                    help="a file of traces: read if it exists (its specs win), else built and "
                         "kept there (the workers' endpoints name the folder of that run)")
    ap.add_argument("--json", default="")
    ap.add_argument("--model-from", default="", help="a --json of an earlier run: its table "
                    "and, with --server-json, the field model")
    ap.add_argument("--server-json", default="", help="a whole-server run at dp 2 with "
                    "tokenizer workers (`server.py --json`): every stage but the detokenizer's")
    ap.add_argument("--model-dp", type=ints, default=[8])
    ap.add_argument("--model-tm-workers", type=ints, default=[16, 32])
    ap.add_argument("--model-detok-workers", type=ints, default=[8, 32])
    ap.add_argument("--model-cores", type=ints, default=[64, 16])


__all__ = ["add_cli_args", "main"]
