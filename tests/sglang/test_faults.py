"""kill -9 of a shard and of the egress in `--protocol sglang`, where SGLang's own
detokenizer would take the server down: every request in flight ends (with an abort finish
the TokenizerManager turns into an error, or with its own finish if its last row got
through), none is wrong (a request's text is a prefix of its full decode, all of it when it
finished normally; an aborted one may end in the U+FFFD of a character cut short), and requests after the restart are exact. The scheduler never learns of
the fault: it keeps sending rows for requests the service has ended, which are ignored."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from sglang_cases import SglangService, token_ids_message

from sglang_tok.kit.workload import BUILTIN_TEXTS
from sglang_tok.tokenizer import load

INFO = load("deepseek-v4")


class Workload:
    """Requests stepped as SGLang's scheduler steps them: a row per live request per step,
    new requests joining as others finish."""

    def __init__(self, prefix: str, n: int, seed: int, per_row: int = 1,
                 workers: list[str] | None = None) -> None:
        rng = random.Random(seed)
        corpus = [INFO.tokenizer.encode(t, add_special_tokens=False).ids for t in BUILTIN_TEXTS]
        self.ids = {f"{prefix}-{k}": rng.choice(corpus)[: rng.randint(12, 40)] for k in range(n)}
        self.pos = dict.fromkeys(self.ids, 0)
        self.per_row = per_row
        # with tokenizer workers: each request's, named on every one of its rows
        self.ipc = {rid: workers[k % len(workers)] for k, rid in enumerate(self.ids)} \
            if workers else {}

    def steps(self, concurrency: int) -> list[bytes]:
        waiting, active, out = list(self.ids), [], []
        while waiting or active:
            while waiting and len(active) < concurrency:
                active.append(waiting.pop(0))
            rows = []
            for rid in active:
                ids = self.ids[rid]
                at = self.pos[rid]
                chunk = ids[at:at + self.per_row]
                self.pos[rid] = at + len(chunk)
                done = self.pos[rid] >= len(ids)
                rows.append({"rid": rid, "ids": chunk, "completion": self.pos[rid],
                             "ipc": self.ipc.get(rid),
                             "prompt": [671] if at == 0 else [],
                             "finish": {"type": "length", "length": len(ids)} if done else None})
            active = [r for r in active if self.pos[r] < len(self.ids[r])]
            out.append(token_ids_message(rows))
        return out

    def exact(self, rid: str) -> str:
        return INFO.tokenizer.decode(self.ids[rid])


def _caught_up(s: SglangService, sent: int, timeout: float = 20.0) -> None:
    """Until the egress has read every message sent so far (its activity counter). A
    request whose rows all sat in a dying egress's receive queue dies unseen with it:
    SGLang's scheduler does not send again, and no process of the service ever saw the rid
    (docs/sglang.md, faults). On a loaded host the egress can lag a whole short request
    behind; the kill must still find requests in flight, not such ones."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s.side.poll(0.01)
        if s.svc.health()[1]["activity"] >= sent:
            return
    raise AssertionError(f"the egress read {s.svc.health()[1]['activity']} of {sent} messages")


def _waiting(s: SglangService, work: Workload, steps: list[bytes]) -> str:
    """The requests left waiting: each with the rows it got, and the steps its rows were in."""
    out = []
    for rid in work.ids:
        if not s.side.finished(rid):
            out.append(f"{rid}: {len(s.side.rows.get(rid, []))} rows back, sent in steps "
                       f"{[k for k, m in enumerate(steps) if rid.encode() in m]}")
    return "\n".join(out)


@pytest.mark.parametrize("slot,name", [(1, "shard"), (0, "egress"), (0, "inline"),
                                       (1, "shard-workers"), (0, "egress-workers")])
def test_kill_9_in_flight_requests_end_none_wrong_new_ones_exact(tmp_path: Path, slot: int,
                                                                  name: str) -> None:
    """"inline": the egress holding the one shard (--inline-shard) dies with it; the
    replacement fails what the journal left open. "-workers": SGLang's tokenizer workers
    (two), each row naming its request's: every request's last row, the service's errors
    included, must reach its own worker (SGLang's router takes no row without one)."""
    shards, args = (1, ["--inline-shard"]) if name == "inline" else (2, [])
    if name.endswith("-workers"):
        args = [*args, "--sglang-tokenizer-workers", "2"]
    with SglangService(tmp_path, shards=shards, args=args) as s:
        workers = list(s.where.values())[:2] if name.endswith("-workers") else None
        work = Workload(name, 96, seed=slot, workers=workers)
        steps = work.steps(concurrency=48)
        victim = 0
        for k, msg in enumerate(steps):
            if k == len(steps) // 3:
                if slot == 0:
                    _caught_up(s, k)
                victim = s.svc.kill(slot)
            s.send(msg)
            s.side.poll(0.005)
        assert s.side.wait(work.ids, timeout=60), (_waiting(s, work, steps), s.svc.logs())
        s.svc.wait_back(slot, victim)
        aborted = 0
        for rid in work.ids:
            fin, text = s.side.finish(rid), s.side.text(rid)
            # an ended request's last row flushes a character its ids had only begun, as
            # the full decode of the ids it received does (U+FFFD per its rules)
            kept = text.rstrip("\ufffd")
            assert work.exact(rid).startswith(kept) and len(text) - len(kept) <= 3, (rid, text)
            if fin["type"] == "abort":
                aborted += 1
                assert fin["status_code"] == 503 and fin["message"].startswith("detokenizer")
            else:
                assert text == work.exact(rid), rid
            finals = [r for r in s.side.rows[rid] if r["finished_reasons"] is not None]
            assert len(finals) >= 1
            if workers:  # every row on its request's own worker, the errors too
                assert set(s.side.where[rid]) == {work.ipc[rid]}, (rid, s.side.where[rid])
        assert aborted, "the kill hit no request in flight"
        # after the restart (and the egress's grace), new requests are exact
        time.sleep(0.5)
        again = Workload(f"{name}-after", 32, seed=10 + slot, per_row=3, workers=workers)
        for msg in again.steps(concurrency=16):
            s.send(msg)
        assert s.side.wait(again.ids, timeout=30), s.svc.logs()
        for rid in again.ids:
            assert s.side.text(rid) == again.exact(rid), rid
            assert s.side.finish(rid)["type"] == "length"
