"""The SGLang benchmark: `sglang-tok serve --protocol sglang` (1 and 2 shards) against
SGLang 0.5.23's own DetokenizerManager (one process, and 2 workers behind its
MultiDetokenizerRouter), on the same SGLang scheduler messages (`scripts/sglang/bench.py`).

The bench is the scheduler (it PUSHes pre-built `BatchTokenIDOutput` messages, msgpack
IPC, to the system's input) and the TokenizerManager (it binds PULL where the system
sends `BatchStrOutput`). SGLang's systems run in the side environment's python through
`sglang_peer.py`; without it they are skipped and sglang-tok's run alone. sglang-tok's
systems are started by the harness (`LocalService`).

Flat out: a message is sent as soon as fewer than --window messages are in flight, in
flight meaning sent and not yet answered row for row (each of its rows has its reply row).
That keeps the pipe full without piling an unbounded queue in front of a slow system. Per
system and trace: ids/s (ids sent / first send to last reply), CPU seconds per million ids
summed over every process of the system (psutil; the bench excluded), and how many
requests' `output_strs` add up to the full decode of their ids. Then the goals, sglang-tok
x1 against sglang x1.

Paced (`--step-ms 20`): one message per step, as a scheduler at that step time sends them.
Inside a server the detokenizer waits between steps, and a message then costs more than
flat out (caches go cold while the other processes run): this shows what it costs at a
step rate, and whether each system keeps up with the steps.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec
import numpy as np
import zmq

from sglang_tok.kit.local_service import LocalService
from sglang_tok.kit.workload import BUILTIN_TEXTS, PlannedRequest, PlanSpec, make_requests
from sglang_tok.protocols.sglang import wire
from sglang_tok.tokenizer import TokenizerInfo, load
from sglang_tok_bench.figures import finite, median, ratio, span, times, write_json
from sglang_tok_bench.synth import corpus
from sglang_tok_testkit.processes import cpu_seconds, package_env, tree_pids

SGL_X1, SGL_X2, TOK_X1, TOK_X2 = "sglang x1", "sglang x2", "sglang-tok x1", "sglang-tok x2"
SYSTEMS = [SGL_X1, SGL_X2, TOK_X1, TOK_X2]
# the peer's process, run by the side python with this package first on its path
# (`package_env`)
PEER = ["-m", "sglang_tok_bench.sglang_peer"]
DEFAULT_SGLANG_PYTHON = "/tmp/sglv/bin/python"
TOKENIZER = "deepseek-v4"
CONTEXT_IDS = 5  # prompt ids SGLang's scheduler puts before a first row's output ids
# (trace, figure) -> (goal of sglang-tok x1 / sglang x1, higher is better)
GOALS: dict[tuple[str, str], tuple[float, bool]] = {
    ("a", "ids_per_s"): (8.0, True), ("b", "ids_per_s"): (4.0, True),
    ("a", "cpu_s_per_mid"): (0.15, False), ("b", "cpu_s_per_mid"): (0.35, False),
}


# ------------------------------------------------------------------------------- traces
@dataclass
class Trace:
    """One trace's scheduler messages and what must come back for them."""

    name: str
    title: str
    messages: list[bytes]
    rids: list[str]
    expected: list[str]  # full decode of each request's output ids
    rows: np.ndarray  # per request: its rows, so its replies
    first: np.ndarray  # per request: the message of its first row
    per_message: np.ndarray  # rows of each message
    lengths: np.ndarray  # per request: its output ids
    ids: int
    index: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {"requests": len(self.rids), "messages": len(self.messages),
                "rows": int(self.per_message.sum()), "ids": self.ids,
                "bytes": sum(map(len, self.messages))}


def _columns(rows: list[dict[str, Any]], top_k: int, vocab: int) -> dict[str, list[Any]]:
    """A BatchTokenIDOutput's columns, shaped as SGLang's scheduler fills them: the logprob
    columns are per row lists when any request of the batch asked (empty for the others)
    and None when none did; the per-row counters SGLang requires are all there."""
    n = len(rows)
    cols: dict[str, list[Any]] = {
        "rids": [r["rid"] for r in rows], "http_worker_ipcs": [None] * n,
        "finished_reasons": [r["finish"] for r in rows], "decoded_texts": [""] * n,
        "decode_ids": [r["context"] + r["ids"] for r in rows],
        "read_offsets": [len(r["context"]) for r in rows],
        "output_ids": [r["ids"] for r in rows], "skip_special_tokens": [True] * n,
        "spaces_between_special_tokens": [True] * n, "no_stop_trim": [False] * n,
        "prompt_tokens": [r["prompt_tokens"] for r in rows], "reasoning_tokens": [0] * n,
        "completion_tokens": [r["completion"] for r in rows],
        "cached_tokens": [r["cached_tokens"] for r in rows],
        "retraction_counts": [0] * n, "cached_tokens_details": [None] * n,
        "dp_ranks": [0] * n, "image_tokens": [0] * n, "audio_tokens": [0] * n,
        "video_tokens": [0] * n,
    }
    if any(r["logprobs"] for r in rows):
        empty: list[list[Any]] = [[] for _ in rows]
        for name in ("input_token_logprobs_val", "input_token_logprobs_idx",
                     "input_top_logprobs_val", "input_top_logprobs_idx",
                     "input_token_ids_logprobs_val", "input_token_ids_logprobs_idx",
                     "output_token_ids_logprobs_val", "output_token_ids_logprobs_idx"):
            cols[name] = empty
        cols["output_token_logprobs_val"] = [
            [-0.05 * (j + 1) for j in range(len(r["ids"]))] if r["logprobs"] else []
            for r in rows]
        cols["output_token_logprobs_idx"] = [list(r["ids"]) if r["logprobs"] else []
                                             for r in rows]
        cols["output_top_logprobs_val"] = [
            [[-0.05 * (j + 1) - 0.5 * q for q in range(top_k)] for j in range(len(r["ids"]))]
            if r["logprobs"] else [] for r in rows]
        cols["output_top_logprobs_idx"] = [
            [[(t + q) % vocab for q in range(top_k)] for t in r["ids"]]
            if r["logprobs"] else [] for r in rows]
    return cols


def build_trace(name: str, title: str, spec: PlanSpec, info: TokenizerInfo,
                texts: list[str]) -> Trace:
    """The workload's requests (`make_requests`), stepped as a scheduler steps them: up to
    `concurrency` active, a new one arriving as one ends, one message per step with the
    next row of every active request; each request ends by length."""
    reqs = make_requests(info, spec, texts, prefix=name)
    rng = random.Random(spec.seed)
    # an ASCII prompt tail: decoding context that is whole characters on its own
    prompt = info.tokenizer.encode(BUILTIN_TEXTS[0], add_special_tokens=False).ids
    waiting: list[PlannedRequest] = list(reversed(reqs))
    active: list[tuple[PlannedRequest, int, int]] = []  # request, its index, next row
    index = {r.rid: k for k, r in enumerate(reqs)}
    first = np.zeros(len(reqs), np.int64)
    contexts: dict[str, list[int]] = {}
    messages: list[bytes] = []
    per_message: list[int] = []
    while waiting or active:
        while waiting and len(active) < spec.concurrency:
            req = waiting.pop()
            first[index[req.rid]] = len(messages)
            at = rng.randrange(0, len(prompt) - CONTEXT_IDS)
            contexts[req.rid] = prompt[at:at + min(CONTEXT_IDS, req.prompt_tokens)]
            active.append((req, index[req.rid], 0))
        rows, still = [], []
        for req, k, pos in active:
            last = pos == len(req.chunks) - 1
            rows.append({"rid": req.rid, "ids": req.chunks[pos],
                         "context": contexts[req.rid] if pos == 0 else [],
                         "finish": {"type": "length", "length": len(req.ids)} if last else None,
                         "completion": sum(map(len, req.chunks[:pos + 1])),
                         "prompt_tokens": req.prompt_tokens,
                         "cached_tokens": req.cached_tokens, "logprobs": req.logprobs})
            if not last:
                still.append((req, k, pos + 1))
        active = still
        messages.append(wire.encode_token_ids(_columns(rows, spec.top_k, info.vocab_size)))
        per_message.append(len(rows))
    dec = info.tokenizer.decode
    return Trace(name, title, messages, [r.rid for r in reqs],
                 [dec(r.ids, skip_special_tokens=True) for r in reqs],
                 np.array([len(r.chunks) for r in reqs], np.int64), first,
                 np.array(per_message, np.int64), np.array([len(r.ids) for r in reqs]),
                 sum(len(r.ids) for r in reqs), index)


def trace_specs(a: argparse.Namespace) -> dict[str, tuple[str, PlanSpec]]:
    scale = 4 if a.quick else 1

    ca, cb = max(1, a.concurrency_a // scale), max(1, a.concurrency_b // scale)
    ta, tb = span(a.tokens_a), span(a.tokens_b)
    ka, kb = span(a.ids_per_row_a), span(a.ids_per_row_b)
    return {
        "a": (f"a: {ca} concurrent, {a.ids_per_row_a} id/row, "
              f"{a.logprob_share_a:.0%} top-{a.top_k} logprobs, {a.tokens_a} ids/request",
              PlanSpec(requests=max(ca, a.requests_a // scale), concurrency=ca,
                       ids_per_row=ka, min_tokens=ta[0], max_tokens=ta[1],
                       logprob_share=a.logprob_share_a, top_k=a.top_k, seed=1)),
        "b": (f"b: {cb} concurrent, {a.ids_per_row_b} ids/row (a request's last row: what "
              f"is left), no logprobs, {a.tokens_b} ids/request",
              PlanSpec(requests=max(cb, a.requests_b // scale), concurrency=cb,
                       ids_per_row=kb, min_tokens=tb[0], max_tokens=tb[1], seed=2)),
    }


# ------------------------------------------------------------------------------ systems
class Peer:
    """`sglang_peer` under the side python: one per bench, started first, since importing
    SGLang costs more than every other start-up together."""

    def __init__(self, python: str, work: Path, start_method: str = "fork") -> None:
        env = package_env({**os.environ, "SGLANG_USE_PICKLE_IPC": "0",
                           "SGLANG_PLUGINS": "none"})
        self.log_path = work / "sglang_peer.log"
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [python, *PEER, "--work", str(work), "--start-method", start_method],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.log, env=env, text=True, bufsize=1)
        self.ready = False

    def _reply(self, timeout: float) -> dict[str, Any]:
        out: IO[str] = self.proc.stdout  # type: ignore[assignment]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sglang_peer exited {self.proc.returncode}:\n{self.logs()}")
            if not select.select([out], [], [], 0.2)[0]:
                continue
            line = out.readline()
            if line.startswith("{"):
                reply: dict[str, Any] = json.loads(line)
                if "error" in reply:
                    raise RuntimeError(f"sglang_peer: {reply['error']}\n{self.logs()}")
                return reply
        raise TimeoutError(f"sglang_peer did not answer in {timeout:.0f}s:\n{self.logs()}")

    def wait_ready(self, timeout: float = 180.0) -> None:
        if not self.ready:
            self._reply(timeout)
            self.ready = True

    def call(self, cmd: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
        self.wait_ready()
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._reply(timeout)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class SglangSystem:
    """SGLang's detokenizer processes of one system, started by the peer."""

    def __init__(self, peer: Peer, workers: int, work: Path) -> None:
        self.peer, self.workers = peer, workers
        self.input, self.output = f"ipc://{work}/input.ipc", f"ipc://{work}/output.ipc"
        self.roots: list[int] = []
        self.names: list[str] = []
        self.failed = False

    def start(self) -> None:
        reply = self.peer.call({"cmd": "start", "workers": self.workers, "input": self.input,
                                "output": self.output})
        self.roots, self.names = reply["pids"], reply["names"]

    def pids(self) -> list[int]:
        return tree_pids(*self.roots)

    def stop(self) -> None:
        self.failed = bool(self.peer.call({"cmd": "stop"}).get("failed"))


class TokSystem:
    """`sglang-tok serve --protocol sglang --shards N`, started by the harness (`LocalService`):
    the bench binds its output and connects to its input itself."""

    def __init__(self, shards: int) -> None:
        # one shard runs inside the egress's process, as SGLang's launcher starts it for
        # --detokenizer-worker-num 1
        extra = ["--protocol", "sglang", *(["--inline-shard"] if shards == 1 else [])]
        self.svc = LocalService(shards=shards, tokenizer=TOKENIZER, frontend=False, scheduler=False,
                           args=["--log-level", "WARNING", *extra])
        self.input, self.output = self.svc.input, self.svc.output
        self.failed = False

    def start(self) -> None:
        self.svc.start()

    def pids(self) -> list[int]:
        return [] if self.svc.proc is None else tree_pids(self.svc.proc.pid)

    def stop(self) -> None:
        self.failed = self.svc.proc is not None and self.svc.proc.poll() is not None
        self.svc.stop()


System = SglangSystem | TokSystem


def make(system: str, work: Path, peer: Peer | None) -> System:
    """The system, not started: its output is bound before it starts."""
    workers = int(system[-1])
    if system.startswith("sglang-tok"):
        return TokSystem(workers)
    assert peer is not None
    return SglangSystem(peer, workers, work)


# --------------------------------------------------------------------------------- runs
class Reply(msgspec.Struct, tag="BatchStrOutput", array_like=True, gc=False):
    """The BatchStrOutput fields the bench reads, the first four of SGLang 0.5.15 on (its
    messages are 0.5.23's); the rest is left undecoded."""

    rids: list[str]
    http_worker_ipcs: msgspec.Raw
    finished_reasons: list[dict[str, Any] | None]
    output_strs: list[str]


_replies = msgspec.msgpack.Decoder(Reply)


def warm_up(push: zmq.Socket, pull: zmq.Socket, tag: str, timeout: float = 120.0) -> None:
    """Until a first message is answered the system may still be starting (its tokenizer
    loading, its sockets binding); rids enough that every worker of a router gets some."""
    n = 16
    rids = [f"warm-{tag}-{i}" for i in range(n)]
    ids = [30602, 14, 2058]
    push.send(wire.encode_token_ids(_columns(
        [{"rid": r, "ids": ids, "context": [], "finish": {"type": "length", "length": 3},
          "completion": 3, "prompt_tokens": 1, "cached_tokens": 0, "logprobs": False}
         for r in rids], 0, 1 << 20)))
    left = set(rids)
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        if pull.poll(200):
            left -= set(_replies.decode(pull.recv()).rids)
    if left:
        raise TimeoutError(f"{len(left)} of {n} warm-up rows unanswered in {timeout:.0f}s")


def run_trace(trace: Trace, push: zmq.Socket, pull: zmq.Socket, pids: list[int],
              window: int, timeout: float, stall: float, step: float = 0.0) -> dict[str, Any]:
    """Send every message flat out within the window (or, with `step` seconds, one per step
    as a scheduler does, while the system keeps up); account each reply row to the
    message of its row (a rid's rows come back in order) and keep the texts. Gives up
    after `timeout`, or `stall` seconds without a reply (a system that died)."""
    msgs, total = trace.messages, len(trace.messages)
    rem = trace.per_message.copy()
    seen = np.zeros(len(trace.rids), np.int64)
    index_get = trace.index.get
    texts: list[list[str]] = [[] for _ in trace.rids]
    finishes: list[Any] = [None] * len(trace.rids)
    stray = sent = done = 0
    per0: dict[str, list[float]] = {}
    cpu0, own0 = cpu_seconds(pids, per0), time.process_time()
    t0 = last = time.monotonic()
    deadline = t0 + timeout
    while done < total:
        now = time.monotonic()
        due = t0 + sent * step
        if sent < total and sent - done < window and now >= due:
            push.send(msgs[sent], copy=False)
            sent += 1
            wait = 0
        else:
            # paced: the next message is due (a scheduler's next step) before 100 ms
            wait = 100 if sent >= total or sent - done >= window else \
                max(0, min(100, int((due - now) * 1000)))
            if now > deadline or now - last > stall:
                break
        while pull.poll(wait):
            wait = 0
            rep = _replies.decode(pull.recv())
            last = time.monotonic()
            ix = np.fromiter((index_get(r, -1) for r in rep.rids), np.int64, len(rep.rids))
            ok = ix >= 0
            if not ok.all():
                stray += int((~ok).sum())
            for k, s, f in zip(ix.tolist(), rep.output_strs, rep.finished_reasons):
                if k >= 0:
                    texts[k].append(s)
                    if f is not None:
                        finishes[k] = f
            ix = ix[ok]
            if not len(ix):
                continue
            m = trace.first[ix] + seen[ix]
            seen[ix] += 1
            m = m[seen[ix] <= trace.rows[ix]]  # a row beyond a request's last is extra
            if not len(m):
                continue
            lo = int(m.min())
            counts = np.bincount(m - lo)
            hit = np.flatnonzero(counts)
            rem[hit + lo] -= counts[hit]
            done += int(np.count_nonzero(rem[hit + lo] == 0))
    per1: dict[str, list[float]] = {}
    cpu, own = cpu_seconds(pids, per1) - cpu0, time.process_time() - own0
    by_process = {title: round(sum(per1[title]) - sum(per0.get(title, [])), 3)
                  for title in per1}
    elapsed = max(1e-9, last - t0)
    exact, problems = checked(trace.rids, texts, trace.expected, finishes, trace.lengths,
                              [(int(n), int(want)) for n, want in zip(seen, trace.rows)])
    paced = total * step
    return {"ids": trace.ids, "elapsed_s": elapsed, "ids_per_s": trace.ids / elapsed,
            "step_ms": step * 1000,
            # paced: did the replies keep up with the steps (the last within 2 steps)?
            "kept_up": bool(step) and elapsed <= paced + 2 * step,
            "cpu_s": cpu, "cpu_by_process": by_process,
            "cpu_s_per_mid": cpu / max(1, trace.ids) * 1e6, "bench_cpu_s": own,
            "complete": done == total, "answered_messages": done, "messages": total,
            "exact": exact, "requests": len(trace.rids), "stray_rows": stray,
            "problems": problems[:10]}


def checked(rids: Sequence[str], texts: Sequence[Sequence[str]], expected: Sequence[str],
            finishes: Sequence[Any], lengths: Sequence[int] | np.ndarray[Any, Any],
            rows: Sequence[tuple[int, int]] = ()) -> tuple[int, list[str]]:
    """(requests exact, what went wrong with each other one): its text against the full
    decode, its finish (`length`), and where given, its reply rows (seen, sent)."""
    exact, problems = 0, []
    for k, rid in enumerate(rids):
        text = "".join(texts[k])
        bad = []
        if text != expected[k]:
            bad.append(text_diff(text, expected[k]))
        if rows and rows[k][0] != rows[k][1]:
            bad.append(f"{rows[k][0]} reply rows for {rows[k][1]}")
        if finishes[k] != {"type": "length", "length": int(lengths[k])}:
            bad.append(f"finish {finishes[k]}")
        if bad:
            problems.append(f"{rid}: {'; '.join(bad)}")
        else:
            exact += 1
    return exact, problems


def text_diff(got: str, want: str) -> str:
    """Where a request's text first goes wrong, with a little of both around it."""
    at = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
    lo = max(0, at - 12)
    return (f"text differs at char {at} of {len(want)} ({len(got)} sent): "
            f"{got[lo:at + 16]!r} != {want[lo:at + 16]!r}")


def run_system(system: str, traces: list[Trace], root: Path, peer: Peer | None,
               window: int, timeout: float, stall: float,
               step: float = 0.0) -> dict[str, dict[str, Any]]:
    """One fresh start of the system, then every trace on it (their rids differ)."""
    work = Path(tempfile.mkdtemp(prefix=system.replace(" ", "-") + "-", dir=root))
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 0)
    pull.setsockopt(zmq.LINGER, 0)
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    out: dict[str, dict[str, Any]] = {}
    sys_: System | None = None
    try:
        t = time.monotonic()
        made = make(system, work, peer)
        pull.bind(made.output)
        made.start()
        sys_ = made
        push.connect(sys_.input)
        warm_up(push, pull, work.name)
        startup = time.monotonic() - t
        for trace in traces:
            r = run_trace(trace, push, pull, sys_.pids(), window, timeout, stall, step)
            r["startup_s"] = startup
            out[trace.name] = r
    finally:
        if sys_ is not None:
            sys_.stop()
            for r in out.values():
                r["crashed"] = sys_.failed
        push.close()
        pull.close()
        ctx.term()
    return out


# ------------------------------------------------------------------------------ reports
def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"ids_per_s": median([r["ids_per_s"] for r in runs]),
            "cpu_s_per_mid": median([r["cpu_s_per_mid"] for r in runs]),
            "exact": min(r["exact"] for r in runs), "requests": runs[0]["requests"],
            "complete": all(r["complete"] for r in runs),
            "kept_up": all(r.get("kept_up") for r in runs),
            "crashed": any(r.get("crashed") for r in runs), "rounds": len(runs)}


def print_table(trace: Trace, per: dict[str, dict[str, Any]], step_ms: float = 0.0) -> None:
    base = per.get(SGL_X1)
    print(f"\ntrace {trace.title}: {trace.summary()}")
    head = (f"{'system':<14} {'ids/s':>11} {'x sgl1':>7} {'CPU s/Mid':>10} {'x sgl1':>7} "
            f"{'exact':>11}  notes")
    print(head)
    print("-" * len(head))
    for system, m in per.items():
        r1 = ratio(m["ids_per_s"], base["ids_per_s"]) if base else float("nan")
        r2 = ratio(m["cpu_s_per_mid"], base["cpu_s_per_mid"]) if base else float("nan")
        paced = ("kept up", m["kept_up"]), ("FELL BEHIND the steps", not m["kept_up"])
        notes = ", ".join(n for n, on in (("INCOMPLETE", not m["complete"]),
                                          *(paced if step_ms else ()),
                                          ("a process failed", m["crashed"])) if on)
        print(f"{system:<14} {m['ids_per_s']:>11,.0f} {times(r1, 2):>7} "
              f"{m['cpu_s_per_mid']:>10.2f} {times(r2, 2):>7} "
              f"{m['exact']:>5}/{m['requests']:<5}  {notes}")


def goals(results: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    for (t, fig), (goal, higher) in GOALS.items():
        per = results.get(t, {})
        if TOK_X1 not in per:
            continue
        base = per.get(SGL_X1)
        x = ratio(per[TOK_X1][fig], base[fig]) if base else float("nan")
        what = "throughput (ids/s)" if fig == "ids_per_s" else "CPU per id"
        rows.append({"goal": f"{what} {'>=' if higher else '<='} {goal:g}x sglang x1",
                     "trace": t, "ratio": x, "measured": base is not None,
                     "reached": base is not None and (x >= goal if higher else x <= goal)})
    return rows


def print_goals(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'goal (sglang-tok x1 against sglang x1)':<44} {'trace':<5} {'ratio':>8}  result")
    print("-" * 70)
    for g in rows:
        result = ("reached" if g["reached"] else "NOT reached") if g["measured"] \
            else "not measured (no sglang x1)"
        print(f"{g['goal']:<44} {g['trace']:<5} {times(g['ratio'], 3):>8}  {result}")


def side_python(path: str) -> str | None:
    """The side environment's python, if it is there; whether it imports SGLang the peer
    finds out."""
    found = shutil.which(path) if os.sep not in path else path
    return found if found and os.access(found, os.X_OK) else None


def check_systems(a: argparse.Namespace) -> str:
    """--systems as a list; what is wrong with it ("" when nothing)."""
    a.systems = [s.strip() for s in a.systems.split(",") if s.strip()]
    unknown = [s for s in a.systems if s not in SYSTEMS]
    return f"unknown systems {unknown}; choose from {SYSTEMS}" if unknown else ""


def without_sglang(systems: list[str], why: str) -> list[str]:
    print(f"SGLang systems skipped: {why}")
    return [s for s in systems if not s.startswith("sglang ")]


def start_peer(a: argparse.Namespace, root: Path) -> Peer | None:
    """The peer, started first (SGLang imports while the traces are built); None where
    no SGLang system is asked for or there is no side python."""
    if not any(s.startswith("sglang ") for s in a.systems):
        return None
    python = side_python(a.sglang_python)
    if python is None:
        a.systems = without_sglang(a.systems, f"no side python at {a.sglang_python} (build "
                                   "it with ../shared/tools/sglang-venv.sh, or pass "
                                   "--sglang-python)")
        return None
    return Peer(python, root, a.sglang_start_method)


def build_traces(a: argparse.Namespace) -> list[Trace]:
    info = load(TOKENIZER)
    texts = corpus(0)
    traces = []
    for name, (title, spec) in trace_specs(a).items():
        if name in a.traces.split(","):
            t0 = time.monotonic()
            traces.append(build_trace(name, title, spec, info, texts))
            print(f"trace {title}: {traces[-1].summary()} "
                  f"(built in {time.monotonic() - t0:.1f}s)", flush=True)
    return traces


def peer_ready(a: argparse.Namespace, peer: Peer | None) -> Peer | None:
    if peer is None:
        return None
    try:
        peer.wait_ready()
    except (RuntimeError, TimeoutError) as exc:
        a.systems = without_sglang(a.systems, f"the side python cannot run SGLang: {exc}")
        peer.close()
        return None
    return peer


Runs = dict[str, dict[str, list[dict[str, Any]]]]  # trace -> system -> its rounds


def print_round(n: int, system: str, name: str, r: dict[str, Any]) -> None:
    print(f"  round {n + 1} {system:<14} trace {name}: "
          f"{r['ids_per_s']:>10,.0f} ids/s  {r['cpu_s_per_mid']:6.2f} CPU s/Mid"
          f"  exact {r['exact']}/{r['requests']}  {r['elapsed_s']:.2f}s"
          f"  (bench CPU {r['bench_cpu_s']:.2f}s, start "
          f"{r['startup_s']:.1f}s)", flush=True)
    print(f"      CPU s by process: {r['cpu_by_process']}")
    for p in r["problems"][:3]:
        print(f"      {p}")


def run_rounds(a: argparse.Namespace, traces: list[Trace], root: Path,
               peer: Peer | None) -> tuple[Runs, list[str]]:
    """--repeat rounds, every system once in each (interleaved), every trace on it."""
    runs: Runs = {t.name: {s: [] for s in a.systems} for t in traces}
    failures = []
    for n in range(a.repeat):
        for system in a.systems:
            try:
                got = run_system(system, traces, root, peer, a.window, a.timeout, a.stall,
                                 a.step_ms / 1000)
            except (RuntimeError, TimeoutError) as exc:
                failures.append(f"round {n + 1} {system}: {exc}")
                print(f"  round {n + 1} {system:<14} FAILED: {str(exc)[:2000]}", flush=True)
                continue
            for name, r in got.items():
                runs[name][system].append(r)
                print_round(n, system, name, r)
    return runs, failures


def report(a: argparse.Namespace, traces: list[Trace], runs: Runs, failures: list[str]) -> int:
    """The tables and goals (and the JSON); 1 where sglang-tok failed or was not exact."""
    results = {t.name: {s: medians(rs) for s, rs in runs[t.name].items() if rs}
               for t in traces}
    for t in traces:
        print_table(t, results[t.name], a.step_ms)
    rows = goals(results)
    print_goals(rows)
    if a.json:
        write_json(a.json, finite({
            "window": a.window, "step_ms": a.step_ms, "repeat": a.repeat, "traces": {
                t.name: {"title": t.title, **t.summary()} for t in traces},
            "medians": results, "rounds": runs, "goals": rows, "failures": failures}))
        print(f"\nJSON: {a.json}")
    ours_bad = [f for f in failures if "sglang-tok" in f] + [
        f"{t}: {s}" for t, per in results.items() for s, m in per.items()
        if s.startswith("sglang-tok") and (m["exact"] < m["requests"] or not m["complete"])]
    return 1 if ours_bad else 0


def main(a: argparse.Namespace) -> int:
    """`scripts/sglang/bench.py` (--systems checked by `check_systems`): the peer, the
    traces, the rounds, the report; 1 where sglang-tok failed or was not exact."""
    root = Path(tempfile.mkdtemp(prefix="bench-sglang-"))
    peer = start_peer(a, root)
    traces = build_traces(a)
    peer = peer_ready(a, peer)
    try:
        runs, failures = run_rounds(a, traces, root, peer)
    finally:
        if peer is not None:
            peer.close()
    rc = report(a, traces, runs, failures)
    shutil.rmtree(root, ignore_errors=True)
    return rc


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """The flags of `scripts/sglang/bench.py` (its `main` parses them)."""
    ap.add_argument("--quick", action="store_true", help="quarter-size traces")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated")
    ap.add_argument("--traces", default="a,b")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved rounds; medians")
    ap.add_argument("--window", type=int, default=8,
                    help="most messages in flight (sent, some row not yet answered)")
    ap.add_argument("--step-ms", type=float, default=0.0,
                    help="one message per step, as a scheduler at that step time sends them "
                         "(0: flat out): what a message costs when the system waits between "
                         "messages, and whether it keeps up")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per trace run")
    ap.add_argument("--stall", type=float, default=60.0,
                    help="seconds without a reply after which a run is given up")
    ap.add_argument("--sglang-python", default=DEFAULT_SGLANG_PYTHON,
                    help="a python that imports SGLang 0.5.23 (built by sglang-venv.sh)")
    ap.add_argument("--sglang-start-method", choices=["fork", "spawn"], default="fork",
                    help="how SGLang's detokenizer processes start (SGLang's Engine spawns; "
                         "fork skips their import of SGLang; see sglang_peer.py)")
    ap.add_argument("--requests-a", type=int, default=2048)
    ap.add_argument("--concurrency-a", type=int, default=1024)
    ap.add_argument("--tokens-a", default="32-96", help="output ids per request, lo-hi")
    ap.add_argument("--ids-per-row-a", default="1", help="k or lo-hi")
    ap.add_argument("--logprob-share-a", type=float, default=0.05)
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--requests-b", type=int, default=1024)
    ap.add_argument("--concurrency-b", type=int, default=256)
    ap.add_argument("--tokens-b", default="64-512", help="output ids per request, lo-hi")
    ap.add_argument("--ids-per-row-b", default="4", help="k or lo-hi")
    ap.add_argument("--json", default="", help="write the figures here")
