"""A shard's per-slot request state: plain requests in arrays, the others as objects.

The egress gives each rid a slot in its shard when it first sees it (ring/link.py, ARRAYS),
so a shard's rows arrive as slot numbers and the state of a plain request is one entry of
each array below: no dict lookup, no object, no string per row. A request that needs more
(stop strings, logprob texts, attribution, parsers, `stream: false`, a window-path
tokenizer) keeps a `Request` object in `objs[slot]` and takes the per-row path
(shards/paths.py decides, once, at its first row).

A plain request's last row, and an ERROR or ABORT, go through that same `Request` code:
`to_request` builds one from the slot's arrays, so the end-of-request rules (flush, stop
trimming, usage) exist once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sglang_tok.decoder import Stream
from sglang_tok.request import SENT_TAIL, Request

FREE, PLAIN, ROW = 0, 1, 2
PENDING = 4  # an incomplete UTF-8 character is at most 3 bytes; one spare keeps rows aligned
TAIL = 4 * SENT_TAIL  # bytes of sent text kept per plain slot: SENT_TAIL characters at least


class Slots:
    """Arrays indexed by slot; they grow (doubling) as the egress hands out higher slots."""

    def __init__(self, capacity: int = 1024) -> None:
        self.capacity = 0
        self.kind = np.zeros(0, np.uint8)
        self.table_sel = np.zeros(0, np.int64)  # 0: specials kept, 1: skipped
        self.pending = np.zeros((0, PENDING), np.uint8)
        self.pend_len = np.zeros(0, np.int64)
        # characters of the text still to pass over (what the prompt's own decode showed of
        # an incomplete character or byte run at its end)
        self.skip = np.zeros(0, np.int64)
        self.started = np.zeros(0, bool)  # the text has begun (byte fallback: strip spent)
        self.completion = np.zeros(0, np.int64)
        self.tail = np.zeros((0, TAIL), np.uint8)  # ring of the last TAIL bytes sent
        self.tail_len = np.zeros(0, np.int64)  # bytes ever written to the ring
        self.prompt = np.zeros(0, np.int64)
        self.cached = np.zeros(0, np.int64)
        self.rids: list[str | None] = []
        self.objs: list[Request | None] = []
        self.grow(capacity)

    def grow(self, need: int) -> None:
        if need <= self.capacity:
            return
        cap = max(need, 2 * self.capacity, 64)
        for name in ("kind", "table_sel", "pending", "pend_len", "skip", "started",
                     "completion", "tail", "tail_len", "prompt", "cached"):
            old = getattr(self, name)
            new = np.zeros((cap, *old.shape[1:]), old.dtype)
            new[:len(old)] = old
            setattr(self, name, new)
        self.rids += [None] * (cap - self.capacity)
        self.objs += [None] * (cap - self.capacity)
        self.capacity = cap

    def widen(self, width: int) -> None:
        """Room for `width` pending bytes per slot (a byte-fallback run has no bound)."""
        if width <= self.pending.shape[1]:
            return
        new = np.zeros((self.capacity, max(width, 2 * self.pending.shape[1])), np.uint8)
        new[:, :self.pending.shape[1]] = self.pending
        self.pending = new

    # ------------------------------------------------------------------ one slot
    def bind_plain(self, slot: int, rid: str, skip_special: bool,
                   start: tuple[bytes, int, bool], prompt: int, cached: int) -> None:
        """A plain request takes the slot; `start` is what its prompt left: pending bytes,
        characters to pass over, whether the text has begun."""
        self.grow(slot + 1)
        pend, skip, started = start
        self.widen(len(pend))
        self.kind[slot] = PLAIN
        self.table_sel[slot] = 1 if skip_special else 0
        self.pending[slot, :len(pend)] = np.frombuffer(pend, np.uint8)
        self.pend_len[slot] = len(pend)
        self.skip[slot] = skip
        self.started[slot] = started
        self.completion[slot] = 0
        self.tail_len[slot] = 0
        self.prompt[slot], self.cached[slot] = prompt, cached
        self.rids[slot] = rid
        self.objs[slot] = None

    def bind_row(self, slot: int, req: Request) -> None:
        self.grow(slot + 1)
        self.kind[slot] = ROW
        self.rids[slot] = req.rid
        self.objs[slot] = req

    def free(self, slot: int) -> None:
        self.kind[slot] = FREE
        self.rids[slot] = None
        self.objs[slot] = None

    def to_request(self, slot: int, req: Request, stream: Stream) -> Request:
        """Move a plain slot's state into `req` (built with the same options; `stream` is
        the slot's decoder state), for the per-row end-of-request rules; the slot then
        holds it as a ROW request."""
        req.stream = stream
        req.completion = int(self.completion[slot])
        req.prompt_tokens, req.cached_tokens = int(self.prompt[slot]), int(self.cached[slot])
        req.tail = self.sent_tail(slot)
        self.bind_row(slot, req)
        return req

    def sent_tail(self, slot: int) -> str:
        """The last SENT_TAIL characters this slot sent (what `Request.tail` would hold)."""
        written = int(self.tail_len[slot])
        if written <= TAIL:
            data = self.tail[slot, :written].tobytes()
        else:
            at = written % TAIL
            ring = self.tail[slot]
            data = ring[at:].tobytes() + ring[:at].tobytes()
            lead = 0  # the ring may begin inside a character
            while lead < len(data) and data[lead] & 0xC0 == 0x80:
                lead += 1
            data = data[lead:]
        text = data.decode("utf-8", "replace")
        return text[-SENT_TAIL:]

    # ------------------------------------------------------------------ many slots
    def record_sent(self, slots: Any, buf: np.ndarray, cuts: np.ndarray) -> None:
        """Append each row's sent bytes buf[cuts[r]:cuts[r + 1]] to its slot's ring."""
        sizes = np.diff(cuts)
        if not len(buf):
            return
        base = self.tail_len[slots]
        # byte j of row r goes to ring position (base[r] + j) % TAIL of slot slots[r]
        within = np.arange(len(buf), dtype=np.int64) - np.repeat(cuts[:-1], sizes)
        flat = np.repeat(slots * TAIL, sizes) + (np.repeat(base, sizes) + within) % TAIL
        self.tail.reshape(-1)[flat] = buf  # a row longer than the ring: its last bytes win
        self.tail_len[slots] = base + sizes
