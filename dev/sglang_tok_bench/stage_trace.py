"""SGLang 0.5.23 scheduler messages at the field's shape, for the detokenizer stage benchmark
(`sglang_stage.py`): R rows per step, K ids per row, rows spread over W tokenizer workers'
`http_worker_ipcs` (W = 1: none stamped, as SGLang's scheduler leaves them with one worker),
a share of rows with top-k logprobs, and `time_stats` as SGLang's scheduler pickles them with
`--enable-metrics` off (every row's `SchedulerReqTimeStats` pickles to an empty state) or on.

The time stats are SGLang's own objects pickled by SGLang's own classes, so a trace with them
is built with SGLang importable (the side environment: `python -m
sglang_tok_bench.stage_trace --out FILE ...` writes the traces there, the bench
reads them here); without SGLang a trace carries nil time stats.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from sglang_tok.kit.workload import BUILTIN_TEXTS, PlanSpec, make_requests
from sglang_tok.protocols.sglang import wire
from sglang_tok.tokenizer import TokenizerInfo, load
from sglang_tok_bench.sglang_bench import CONTEXT_IDS, TOKENIZER, _columns


@dataclass(frozen=True)
class StageSpec:
    """One trace of the stage benchmark."""

    rows: int = 256  # concurrent requests: a message's rows in the steady state
    ids_per_row: int = 1
    workers: int = 1  # tokenizer workers the rows are spread over
    metrics: bool = False  # --enable-metrics: the time stats carry their timestamps
    logprobs: float = 0.0  # share of requests with top-k logprobs
    top_k: int = 5
    requests: int = 0  # 0: 3 x rows
    min_tokens: int = 48
    max_tokens: int = 160
    time_stats: bool = True  # False: nil (no SGLang to pickle them)
    seed: int = 7

    @property
    def name(self) -> str:
        return (f"{self.rows}x{self.ids_per_row} W{self.workers} "
                f"{'metrics' if self.metrics else 'plain'}"
                f"{f' lp{self.logprobs:.0%}' if self.logprobs else ''}")


class StageTrace(msgspec.Struct):
    """The messages of one spec and what every request must stream in total."""

    spec: dict[str, Any]
    messages: list[bytes]
    rids: list[str]
    expected: list[str]
    rows: list[int]  # per request: its rows (replies)
    first: list[int]  # per request: the message of its first row
    per_message: list[int]
    lengths: list[int]  # per request: its output ids
    ipcs: list[str] = field(default_factory=list)  # the tokenizer workers' endpoints
    ids: int = 0


def worker_ipc(w: int, run: str) -> str:
    return f"ipc://{run}/tm-{w}.ipc"


class _Stats:
    """A request's `SchedulerReqTimeStats`, as SGLang's scheduler keeps one per request."""

    def __init__(self, metrics: bool) -> None:
        from sglang.srt.observability.req_time_stats import SchedulerReqTimeStats

        self.cls = SchedulerReqTimeStats
        self.metrics = metrics

    def new(self, clock: float) -> Any:
        stats = self.cls()
        stats.enable_metrics = self.metrics
        stats.wait_queue_entry_time = clock
        stats.forward_entry_time = clock + 0.001
        return stats


def _sglang_wrap() -> Any:
    """SGLang's own `wrap_as_pickle`: its scheduler wraps the time stats list this way."""
    from sglang.srt.managers.io_struct import wrap_as_pickle

    return wrap_as_pickle


def build(spec: StageSpec, info: TokenizerInfo, texts: list[str], run: str) -> StageTrace:
    """A scheduler's steps: up to `rows` requests active, a new one arriving as one ends,
    one message per step with the next row of every active request (the first with up to
    five prompt ids of context before `read_offsets`)."""
    stats = _Stats(spec.metrics) if spec.time_stats else None
    wrap: Any = _sglang_wrap() if stats is not None else None
    plan = PlanSpec(requests=spec.requests or 3 * spec.rows, concurrency=spec.rows,
                    ids_per_row=(spec.ids_per_row, spec.ids_per_row),
                    min_tokens=spec.min_tokens, max_tokens=spec.max_tokens,
                    logprob_share=spec.logprobs, top_k=spec.top_k, seed=spec.seed)
    reqs = make_requests(info, plan, texts, prefix=f"s{spec.seed}")
    rng = random.Random(spec.seed)
    for req in reqs:  # SGLang's own rids: uuid4().hex
        req.rid = f"{rng.getrandbits(128):032x}"
    prompt = info.tokenizer.encode(BUILTIN_TEXTS[0], add_special_tokens=False).ids
    ipcs = [worker_ipc(w, run) for w in range(spec.workers)] if spec.workers > 1 else []
    index = {r.rid: k for k, r in enumerate(reqs)}
    first = [0] * len(reqs)
    waiting = list(reversed(reqs))
    active: list[tuple[Any, int, Any]] = []
    messages: list[bytes] = []
    per_message: list[int] = []
    clock = 1000.0
    while waiting or active:
        while waiting and len(active) < spec.rows:
            req = waiting.pop()
            first[index[req.rid]] = len(messages)
            active.append((req, 0, stats.new(clock) if stats is not None else None))
        rows, still, row_stats = [], [], []
        for req, pos, st in active:
            last = pos == len(req.chunks) - 1
            at = rng.randrange(0, len(prompt) - CONTEXT_IDS)
            rows.append({"rid": req.rid, "ids": req.chunks[pos],
                         "context": prompt[at:at + CONTEXT_IDS] if pos == 0 else [],
                         "finish": {"type": "length", "length": len(req.ids)} if last else None,
                         "completion": sum(map(len, req.chunks[:pos + 1])),
                         "prompt_tokens": req.prompt_tokens,
                         "cached_tokens": req.cached_tokens, "logprobs": req.logprobs})
            row_stats.append(st)
            if st is not None:
                st.last_decode_finish_time = clock
            if not last:
                still.append((req, pos + 1, st))
        active = still
        cols = _columns(rows, spec.top_k, info.vocab_size)
        if ipcs:
            cols["http_worker_ipcs"] = [ipcs[index[r["rid"]] % len(ipcs)] for r in rows]
        if stats is not None:
            cols["time_stats"] = wrap(row_stats)
        messages.append(wire.encode_token_ids(cols))
        per_message.append(len(rows))
        clock += 0.02
    dec = info.tokenizer.decode
    return StageTrace(asdict(spec), messages, [r.rid for r in reqs],
                      [dec(r.ids, skip_special_tokens=True) for r in reqs],
                      [len(r.chunks) for r in reqs], first, per_message,
                      [len(r.ids) for r in reqs], ipcs, sum(len(r.ids) for r in reqs))


_traces = msgspec.msgpack.Decoder(list[StageTrace])


def write(path: Path, traces: list[StageTrace]) -> None:
    path.write_bytes(msgspec.msgpack.encode(traces))


def read(path: Path) -> list[StageTrace]:
    return _traces.decode(path.read_bytes())


def main() -> int:
    """Build traces where SGLang imports (its time stats pickled by its classes)."""
    os.environ["SGLANG_USE_PICKLE_IPC"] = "0"  # msgpack IPC: set before SGLang is imported
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--run", required=True, help="the folder the workers' ipc files go in")
    ap.add_argument("--specs", required=True, help="a JSON list of StageSpec fields")
    a = ap.parse_args()
    specs = [StageSpec(**s) for s in msgspec.json.decode(a.specs)]
    info = load(TOKENIZER)
    texts = BUILTIN_TEXTS
    write(a.out, [build(s, info, texts, a.run) for s in specs])
    return 0


if __name__ == "__main__":
    sys.exit(main())
