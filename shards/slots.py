"""A shard's per-slot request state: plain requests in arrays, the others as objects.

The egress gives each rid a slot in its shard when it first sees it (ring/link.py, ARRAYS),
so a shard's rows arrive as slot numbers and the state of a plain request is one entry of
each array below: no dict lookup, no object, no string per row. A request that needs more
(stop strings, parsers, `stream: false`, attribution on a byte-fallback tokenizer, a
window-path tokenizer) keeps a `Request` object in `objs[slot]` and takes the per-row path
(shards/paths.py decides, once, at its first row).

A plain request's last row, and an ERROR or ABORT, go through that same `Request` code:
`to_request` builds one from the slot's arrays, so the end-of-request rules (flush, stop
trimming, usage) exist once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # a slot holds a request; the request module uses the shard's rules
    from sglang_tok.shards.request import Request

    from sglang_tok.decoder import Stream

FREE, PLAIN, ROW = 0, 1, 2
# a slot's numbers: its path (FREE, PLAIN, ROW), its byte table (0 specials kept, 1
# skipped), pending bytes, characters still to pass over (what the prompt's own decode
# showed of an incomplete character or byte run), whether its text began (byte fallback:
# the leading-space strip is spent), completion tokens, ids written to its ring, the
# usage fields of its first row, whether its logprobs carry token texts, and whether each
# of its deltas carries usage (continuous_usage), and whether they carry attributions
COLUMNS = ("kind", "table_sel", "pend_len", "skip", "started", "completion", "ring_len",
           "prompt", "cached", "lp_text", "cont_usage", "attr")
(KIND, SEL, PEND, SKIP, STARTED, COMPLETION, RING_LEN, PROMPT, CACHED,
 LP_TEXT, CONT_USAGE, ATTR) = range(len(COLUMNS))
PENDING = 4  # an incomplete UTF-8 character is at most 3 bytes; one spare keeps rows aligned
# ids kept per plain slot, for the text it sent last (`Request.tail`, request.SENT_TAIL chars:
# 320 ids of at least one byte each hold 78 characters even after a cut character at each
# end; only a run of skipped special tokens (no text) can make them hold fewer)
RING = 320


class SlotMarks:
    """Tells whether a message names a slot twice (rows of one request must then be
    handled in order): a Python set for a few rows, else a per-slot scratch array and
    three vectorised operations (each numpy call costs what a set of ~50 ints does)."""

    __slots__ = ("mark",)

    def __init__(self) -> None:
        self.mark = np.zeros(0, np.int64)

    def distinct(self, slots: Any, capacity: int) -> bool:
        n = len(slots)
        if n <= 64:
            return len(set(slots.tolist())) == n
        if len(self.mark) < capacity:
            self.mark = np.zeros(capacity, np.int64)
        rows = np.arange(n)
        self.mark[slots] = rows
        return bool((self.mark[slots] == rows).all())


class Slots:
    """Arrays indexed by slot; they grow (doubling) as the egress hands out higher slots."""

    def __init__(self, capacity: int = 1024) -> None:
        self.capacity = 0
        # the numbers of a slot, one row of `meta` (its columns, by name, are the views
        # below): vectorised code works on a column, the reference loop takes a
        # message's rows with one gather and writes them back with one assignment
        self.meta = np.zeros((0, len(COLUMNS)), np.int64)
        # pending bytes, `width` per slot: a bytearray (the reference loop slices it at
        # Python speed) with `pending` its numpy view (the whole-array code gathers from it)
        self.width = PENDING
        self.pend_buf = bytearray()
        self.pending = np.zeros((0, PENDING), np.uint8)
        self.ring = np.zeros((0, RING), np.int32)  # the last RING ids of each plain slot
        self.rids: list[str | None] = []
        # the same rids as an object array: a message's rows take theirs in one gather
        # (a list is the faster of the two for one slot, this for hundreds)
        self.rid_col = np.empty(0, object)
        self.objs: list[Request | None] = []
        # a slot's state after its prompt, when the prompt left any (rare): the start of
        # the text its ring of ids decodes to
        self.starts: dict[int, tuple[bytes, int, bool]] = {}
        self.marks = SlotMarks()
        # plain slots with continuous_usage: while none is, no message looks for them
        self.usage_live = 0
        # attribution (shards/attributed.py): plain slots that want it, and the entries
        # (token_id, kind) still pending of the few slots that have any
        self.attr_live = 0
        self.carry: dict[int, list[tuple[int, int]]] = {}
        self.grow(capacity)

    def _views(self) -> None:
        meta = self.meta
        (self.kind, self.table_sel, self.pend_len, self.skip, self.started, self.completion,
         self.ring_len, self.prompt, self.cached, self.lp_text, self.cont_usage, self.attr) = \
            (meta[:, k] for k in range(len(COLUMNS)))

    def grow(self, need: int) -> None:
        if need <= self.capacity:
            return
        cap = max(need, 2 * self.capacity, 64)
        for name in ("meta", "ring"):
            old = getattr(self, name)
            new = np.zeros((cap, *old.shape[1:]), old.dtype)
            new[:len(old)] = old
            setattr(self, name, new)
        self._views()
        self._pending(cap, self.width)
        self.rids += [None] * (cap - self.capacity)
        col = np.empty(cap, object)
        col[:self.capacity] = self.rid_col
        self.rid_col = col
        self.objs += [None] * (cap - self.capacity)
        self.capacity = cap

    def widen(self, width: int) -> None:
        """Room for `width` pending bytes per slot (a byte-fallback run has no bound)."""
        if width > self.width:
            self._pending(self.capacity, max(width, 2 * self.width))

    def _pending(self, cap: int, width: int) -> None:
        old, old_width = self.pending, self.width
        self.pend_buf = bytearray(cap * width)
        self.pending = np.frombuffer(self.pend_buf, np.uint8).reshape(cap, width)
        self.pending[:len(old), :old_width] = old
        self.width = width

    # ------------------------------------------------------------------ one slot
    def bind_plain(self, slot: int, rid: str, skip_special: bool,
                   start: tuple[bytes, int, bool], prompt: int, cached: int,
                   logprob_text: bool = False, continuous_usage: bool = False,
                   attribution: bool = False) -> None:
        """A plain request takes the slot; `start` is what its prompt left: pending bytes,
        characters to pass over, whether the text has begun."""
        self.grow(slot + 1)
        pend, skip, started = start
        if pend:
            self.widen(len(pend))
            self.pending[slot, :len(pend)] = np.frombuffer(pend, np.uint8)
        if pend or skip:
            self.starts[slot] = start
        else:
            self.starts.pop(slot, None)
        # the slot's numbers in one assignment (a write per column cost a numpy call each);
        # the usage flag as it was, for `_usage_flag` to change and count
        self.meta[slot] = (PLAIN, 1 if skip_special else 0, len(pend), skip, started, 0, 0,
                           prompt, cached, logprob_text, self.meta[slot, CONT_USAGE],
                           self.meta[slot, ATTR])
        self._usage_flag(slot, continuous_usage)
        self._attr_flag(slot, attribution)
        self.rids[slot] = self.rid_col[slot] = rid
        self.objs[slot] = None

    def bind_row(self, slot: int, req: Request) -> None:
        self.grow(slot + 1)
        self.kind[slot] = ROW
        self._usage_flag(slot, False)
        self._attr_flag(slot, False)
        self.rids[slot] = self.rid_col[slot] = req.rid
        self.objs[slot] = req

    def free(self, slot: int) -> None:
        self.kind[slot] = FREE
        self._usage_flag(slot, False)
        self._attr_flag(slot, False)
        self.rids[slot] = self.rid_col[slot] = None
        self.objs[slot] = None

    def _usage_flag(self, slot: int, on: bool) -> None:
        was = bool(self.cont_usage[slot])
        if was != on:
            self.cont_usage[slot] = on
            self.usage_live += 1 if on else -1

    def _attr_flag(self, slot: int, on: bool) -> None:
        if self.attr[slot] != on:
            self.attr[slot] = on
            self.attr_live += 1 if on else -1
        if self.carry:
            self.carry.pop(slot, None)

    def to_request(self, slot: int, req: Request, stream: Stream, tail: str) -> Request:
        """Move a plain slot's state into `req` (built with the same options; `stream` is
        the slot's decoder state, `tail` the text it sent last), for the per-row
        end-of-request rules; the slot then holds it as a ROW request."""
        req.stream = stream
        req.completion = int(self.completion[slot])
        req.prompt_tokens, req.cached_tokens = int(self.prompt[slot]), int(self.cached[slot])
        req.tail = tail
        self.bind_row(slot, req)
        return req

    def recent_ids(self, slot: int) -> tuple[list[int], tuple[bytes, int, bool] | None]:
        """The slot's last ids in order (at most RING), and its start state if they are
        every id since its start (else None: the first ids are gone)."""
        n = int(self.ring_len[slot])
        ring = self.ring[slot]
        if n <= RING:
            return ring[:n].tolist(), self.starts.get(slot, (b"", 0, False))
        at = n % RING
        return ring[at:].tolist() + ring[:at].tolist(), None

    # ------------------------------------------------------------------ many slots
    def record_one_each(self, slots: Any, meta: Any, ids: Any) -> None:
        """`record_ids` and the completion counts for rows of one id each (distinct slots;
        `meta` their numbers read before): two whole-array writes."""
        self.ring.reshape(-1)[slots * RING + meta[:, RING_LEN] % RING] = ids
        self.meta[slots, COMPLETION:RING_LEN + 1] += 1

    def record_ids(self, slots: Any, ids: Any, id_starts: Any, distinct: bool = True) -> None:
        """Append each row's ids (in [0, vocab]: the caller maps the others to vocab) to its
        slot's ring."""
        counts = id_starts[1:] - id_starts[:-1]
        if not distinct:  # a slot named twice: in order
            for r in range(len(slots)):
                self.record_ids(slots[r:r + 1], ids[id_starts[r]:id_starts[r + 1]],
                                np.array([0, counts[r]], np.int64))
            return
        base = self.ring_len[slots]
        if len(ids) == len(slots):  # one id per row
            self.ring[slots, base % RING] = ids
        else:
            within = np.arange(len(ids), dtype=np.int64) - np.repeat(id_starts[:-1], counts)
            where = np.repeat(slots * RING, counts) + (np.repeat(base, counts) + within) % RING
            self.ring.reshape(-1)[where] = ids  # a row longer than the ring: its last win
        self.ring_len[slots] = base + counts
