"""A shard's per-slot request state: every request's decoder state in arrays, by slot.

The egress gives each rid a slot in its shard when it first sees it (ring/link.py, ARRAYS),
so a shard's rows arrive as slot numbers and a request's decoder state is one entry of each
array below, whichever path its rows take: no dict lookup, no object, no string per row. A
plain request's rows are decoded together with the other plain rows of a message (the array
path); a request that needs more (stop strings, parsers, `stream: false`, attribution on a
byte-fallback tokenizer, a window-path tokenizer) takes a ROW slot, and its shard's table
keeps a `Request` object beside these arrays, by slot, for its per-row rules
(shards/messages/paths.py decides, once, at its first row), as vLLM's model runner keeps its
requests beside its `InputBatch`; its decoder reads and writes the same arrays one row at a
time. So a request never changes decoder, and nothing is handed over when one ends by an
ERROR or ABORT."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

FREE, PLAIN, ROW = 0, 1, 2
# a slot's numbers: its path (FREE, PLAIN, ROW), its id table (0 specials kept, 1 skipped,
# more for a parser's kept markers), pending bytes, characters still to pass over (what the
# prompt's own decode showed of an incomplete character or byte run), whether its text
# began (byte fallback: the leading-space strip is spent), completion tokens, the shard's
# row number of its first row (the sent text a matched stop string looks back on is from
# there on), the usage fields of its first row, whether its logprobs carry token texts,
# whether each of its deltas carries usage (continuous_usage), and whether they carry
# attributions
COLUMNS = ("kind", "table_sel", "pend_len", "skip", "started", "completion", "since",
           "prompt", "cached", "lp_text", "cont_usage", "attr")
(KIND, SEL, PEND, SKIP, STARTED, COMPLETION, SINCE, PROMPT, CACHED,
 LP_TEXT, CONT_USAGE, ATTR) = range(len(COLUMNS))
PENDING = 4  # an incomplete UTF-8 character is at most 3 bytes; one spare keeps rows aligned


class SlotStart(NamedTuple):
    """A slot's decoder state after its request's prompt: pending bytes (an incomplete
    character, or an open byte run), characters to pass over (what decode(P) showed of
    them), whether the text has begun (a leading-space strip is spent), which of the
    family's id tables the request decodes with, and a state that is not numbers (the
    window family's window; None for the others)."""

    pending: bytes
    skip: int
    started: bool
    sel: int
    window: Any = None


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
        self.rids: list[str | None] = []
        # the same rids as an object array: a message's rows take theirs in one gather
        # (a list is the faster of the two for one slot, this for hundreds)
        self.rid_col = np.empty(0, object)
        # the window family's windows (shards/window/decoder.py), by slot: its state is not numbers
        self.windows: dict[int, Any] = {}
        self.marks = SlotMarks()
        # plain slots with continuous_usage: while none is, no message looks for them
        self.usage_live = 0
        # attribution on the array path: plain slots that want it, and the entries
        # (token_id, kind) still pending of the few slots that have any
        self.attr_live = 0
        self.carry: dict[int, list[tuple[int, int]]] = {}
        self.grow(capacity)

    def _views(self) -> None:
        meta = self.meta
        (self.kind, self.table_sel, self.pend_len, self.skip, self.started, self.completion,
         self.since, self.prompt, self.cached, self.lp_text, self.cont_usage, self.attr) = \
            (meta[:, k] for k in range(len(COLUMNS)))

    def grow(self, need: int) -> None:
        if need <= self.capacity:
            return
        cap = max(need, 2 * self.capacity, 64)
        meta = np.zeros((cap, len(COLUMNS)), np.int64)
        meta[:len(self.meta)] = self.meta
        self.meta = meta
        self._views()
        self._pending(cap, self.width)
        self.rids += [None] * (cap - self.capacity)
        col = np.empty(cap, object)
        col[:self.capacity] = self.rid_col
        self.rid_col = col
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
    def bind_plain(self, slot: int, rid: str, start: SlotStart, since: int, prompt: int,
                   cached: int, logprob_text: bool = False, continuous_usage: bool = False,
                   attribution: bool = False) -> None:
        """A plain request takes the slot: `start` is its decoder's state after the prompt,
        `since` the shard's row number of its first row."""
        self.grow(slot + 1)
        self._start(slot, start)
        # the slot's numbers in one assignment (a write per column cost a numpy call each);
        # the usage flag as it was, for `_usage_flag` to change and count
        self.meta[slot] = (PLAIN, start.sel, len(start.pending), start.skip, start.started, 0,
                           since, prompt, cached, logprob_text, self.meta[slot, CONT_USAGE],
                           self.meta[slot, ATTR])
        self._usage_flag(slot, continuous_usage)
        self._attr_flag(slot, attribution)
        self.rids[slot] = self.rid_col[slot] = rid

    def bind_row(self, slot: int, rid: str, start: SlotStart) -> None:
        """A per-row request takes the slot, its decoder's state after the prompt `start`
        (its `Request` is kept by the table, by slot)."""
        self.grow(slot + 1)
        self._start(slot, start)
        self.meta[slot, :COMPLETION + 1] = (ROW, start.sel, len(start.pending), start.skip,
                                            start.started, 0)
        self._usage_flag(slot, False)
        self._attr_flag(slot, False)
        self.rids[slot] = self.rid_col[slot] = rid

    def _start(self, slot: int, start: SlotStart) -> None:
        pend = start.pending
        if pend:
            self.widen(len(pend))
            self.pending[slot, :len(pend)] = np.frombuffer(pend, np.uint8)
        if start.window is not None:
            self.windows[slot] = start.window
        elif self.windows:
            self.windows.pop(slot, None)

    def free(self, slot: int) -> None:
        self.kind[slot] = FREE
        self._usage_flag(slot, False)
        self._attr_flag(slot, False)
        self.rids[slot] = self.rid_col[slot] = None
        if self.windows:
            self.windows.pop(slot, None)

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

    def held(self, slot: int) -> bytes:
        """The slot's pending bytes."""
        return self.pending[slot, :self.pend_len[slot]].tobytes()
