"""Which shard owns each rid, which rids are live there, and which have ended.

The egress alone holds this table, so that when a shard dies it can fail exactly the
rids that shard owned, with the usage they had reached (protocol rule 5). The shard of a
rid is crc32 of its UTF-8 bytes modulo N: stable across runs and processes.
"""

from __future__ import annotations

import zlib
from collections import deque

from sglang_tok.ring.link import LATE

from sglang_tok.protocol import Batch, Delta, Usage, terminal


def shard_of(rid: str, nshards: int) -> int:
    return zlib.crc32(rid.encode("utf-8")) % nshards


class Live:
    """A live rid as the egress sees it: owner, whether rows came, usage so far."""

    __slots__ = ("shard", "has_rows", "completion", "prompt", "cached", "reasoning")

    def __init__(self, shard: int) -> None:
        self.shard = shard
        self.has_rows = False
        self.completion = self.prompt = self.cached = self.reasoning = 0

    def usage(self) -> Usage:
        return Usage(self.prompt, self.completion, self.prompt + self.completion, self.cached,
                     self.reasoning)


Ended = list[tuple[str, Live]]


class Router:
    """Live rids per shard, plus a ledger of rids whose last row is still in flight.

    A rid's last row ends it here when routed, but the shard may die before processing
    it: messages to each shard are numbered, the shard acknowledges what it processed,
    and a dead shard's unacknowledged endings are failed along with its live rids.
    """

    def __init__(self, nshards: int, ended_memory: int = 1 << 20) -> None:
        self.nshards = nshards
        self.live: dict[str, Live] = {}
        self.ended: dict[str, None] = {}
        self.ended_memory = ended_memory
        self.routed = [0] * nshards
        # just after an egress restart: rows of rids seen for the first time (and not
        # OPENed since) are not routed but collected here for Egress._fail_suspects
        self.quarantine = False
        self.suspects: list[str] = []
        self.inflight: list[deque[tuple[int, Ended]]] = [deque() for _ in range(nshards)]
        self.opened: list[str] = []  # rids `route` saw first; the egress empties it

    def owner(self, rid: str) -> int:
        st = self.live.get(rid)
        return st.shard if st is not None else shard_of(rid, self.nshards)

    def is_ended(self, rid: str) -> bool:
        return rid in self.ended

    def end(self, rid: str) -> Live | None:
        ended = self.ended
        ended[rid] = None
        if len(ended) > self.ended_memory:
            del ended[next(iter(ended))]
        return self.live.pop(rid, None)

    def open(self, rid: str) -> int:
        """OPEN: a live rid keeps its state; an ended one may be reused."""
        st = self.live.get(rid)
        if st is None:
            self.ended.pop(rid, None)
            st = self.live[rid] = Live(shard_of(rid, self.nshards))
        return st.shard

    def route(self, batch: Batch) -> tuple[list[int], int, dict[int, Ended]]:
        """Owner shard per row (LATE: its rid has ended, no shard sees it), the frame's iteration
        tokens (new ids plus computed prompt tokens of first rows), and the rids each
        shard's part ends."""
        h = batch.header
        live, ended, n = self.live, self.ended, self.nshards
        owner: list[int] = []
        finished: dict[int, Ended] = {}
        prompt_computed = 0
        lens, fins = h.tok_lens, h.finish_reasons
        for i, rid in enumerate(h.rids):
            st = live.get(rid)
            if st is None:
                if rid in ended:
                    owner.append(LATE)
                    continue
                if self.quarantine:
                    owner.append(LATE)
                    self.suspects.append(rid)
                    continue
                st = live[rid] = Live(zlib.crc32(rid.encode("utf-8")) % n)
                self.opened.append(rid)  # for the egress's journal; emptied per frame
            if not st.has_rows:
                st.has_rows = True
                st.prompt, st.cached = h.prompt_tokens[i], h.cached_tokens[i]
                prompt_computed += max(0, st.prompt - st.cached)
            st.completion += lens[i]
            owner.append(st.shard)
            if fins[i] is not None:
                self.end(rid)
                finished.setdefault(st.shard, []).append((rid, st))
        return owner, batch.tokens.row_starts[-1] + prompt_computed, finished

    def dispatched(self, shard: int, ended: Ended | None = None) -> None:
        """One more message went (or is queued) to a shard; `ended` rids end with it."""
        self.routed[shard] += 1
        if ended:
            self.inflight[shard].append((self.routed[shard], ended))

    def acked(self, shard: int, count: int) -> None:
        q = self.inflight[shard]
        while q and q[0][0] <= count:
            q.popleft()

    def fail_shard(self, shard: int, message: str) -> list[Delta]:
        """Terminal error deltas for every rid a dead shard may not have finished."""
        gone = [rid for rid, st in self.live.items() if st.shard == shard]
        deltas = [self.terminal(rid, message) for rid in gone]
        for _, ended in self.inflight[shard]:
            for rid, st in ended:
                if rid not in self.live:
                    deltas.append(terminal(rid, message, st.usage()))
        self.inflight[shard].clear()
        self.routed[shard] = 0
        return deltas

    def terminal(self, rid: str, message: str) -> Delta:
        st = self.end(rid)
        usage = st.usage() if st is not None else Usage(0, 0, 0, 0, 0)
        return terminal(rid, message, usage)
