"""One shard's part of a scheduler message: the columns SGLang's detokenizer passes on to
the TokenizerManager, cut to the shard's rows as byte ranges (egress -> shard), and put
back together per tokenizer worker into `BatchStrOutput` fields (the shard).

A column of a message is one of five kinds (`spans.py` finds which, once per message):
AS_IS (one value for every part: nil, `[]`, a column that is not one entry per row), SAME
(an entry per row, every row's the same bytes: a column of nils, zeros, empty lists), SPANS
(each row's own bytes), ITEMS (SGLang's pickled list of per-row objects, cut by its items:
`pickle_rows.py`) and PICKLED (a pickle only unpickling cuts: the part's rows pickled
together by the egress, cut per group by unpickling again, in SGLang's own process tree).
Only SPANS and ITEMS rows travel one by one, and together: the part's `data` holds them
column after column, its `ends` where each row ends. A group of the part's rows (those of
one tokenizer worker: the egress orders a shard's rows by worker) is a range [a, b) of
every column, so a reply's field is at most a header and one slice.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
from msgspec import Raw

from .pickle_rows import TAIL

AS_IS, SAME, PICKLED, SPANS, ITEMS = 0, 1, 2, 3, 4
NIL = b"\xc0"
_WRAPPER = b"\x92\xadPickleWrapper"  # SGLang's PickleWrapper: [tag, bytes]
_U16, _U32 = struct.Struct(">H"), struct.Struct(">I")


def array_head(count: int) -> bytes:
    """A msgpack array's header for `count` entries."""
    if count < 16:
        return bytes((0x90 | count,))
    if count < 1 << 16:
        return b"\xdc" + _U16.pack(count)
    return b"\xdd" + _U32.pack(count)


def bin_head(size: int) -> bytes:
    if size < 1 << 8:
        return bytes((0xC4, size))
    if size < 1 << 16:
        return b"\xc5" + _U16.pack(size)
    return b"\xc6" + _U32.pack(size)


def wrapped(pickle: bytes) -> bytes:
    """A pickle as SGLang's `PickleWrapper` field."""
    return b"".join((_WRAPPER, bin_head(len(pickle)), pickle))


class Part(msgspec.Struct, array_like=True, gc=False):
    """A shard's `count` rows of the passed columns (the plan's `passed` order). `kinds`
    per column; `values` per column: AS_IS its bytes, SAME one row's, ITEMS the pickle's
    prelude (`pickle_rows.Items`), PICKLED the part's rows' field, SPANS nothing.
    `data`: the SPANS and ITEMS columns' rows, column after column; `ends`: u32, per such
    column its rows' ends in `data`.
    `groups`: u32, where each tokenizer worker's rows start (b"": one group), `ipcs` each
    group's worker (None: the message names none). `flags`: per row its decoding options
    when a row carries beam search output (`reply.beam_flags`)."""

    count: int
    kinds: bytes
    values: list[bytes]
    data: bytes = b""
    ends: bytes = b""
    groups: bytes = b""
    ipcs: list[str | None] | None = None
    flags: list[int] = []

    def spans_at(self) -> list[int]:
        """The index among the SPANS and ITEMS columns of each column (-1: neither)."""
        out, j = [], 0
        for kind in self.kinds:
            if kind >= SPANS:
                out.append(j)
                j += 1
            else:
                out.append(-1)
        return out

    def bounds(self) -> list[tuple[int, int]]:
        """Each group's rows [a, b)."""
        if not self.groups:
            return [(0, self.count)]
        starts = np.frombuffer(self.groups, np.uint32).tolist()
        return list(zip(starts, [*starts[1:], self.count]))

    def row_ends(self) -> npt.NDArray[np.uint32]:
        return np.frombuffer(self.ends, np.uint32)

    def rows_of(self, c: int) -> list[bytes]:
        """Each row's bytes of SPANS or ITEMS column c (cold paths)."""
        j, k = self.spans_at()[c], self.count
        ends = self.row_ends().tolist()[j * k:(j + 1) * k]
        first = int(self.row_ends()[j * k - 1]) if j else 0
        return [self.data[s:e] for s, e in zip([first, *ends[:-1]], ends)]

    def take(self, rows: Sequence[int]) -> Part:
        """These rows of the part (in increasing order), each still in its worker's group
        (cold paths: a reply that skips rows)."""
        cols = {c: [mine[r] for r in rows] for c, kind in enumerate(self.kinds)
                if kind >= SPANS for mine in (self.rows_of(c),)}
        part = _built(self, len(rows), cols, [self.flags[r] for r in rows] if self.flags
                      else [])
        if PICKLED in part.kinds:  # only unpickling cuts it: these rows carry it as nil
            part.values = [NIL if kind == PICKLED else v
                           for kind, v in zip(part.kinds, part.values)]
        starts, ipcs = [], []
        for (a, b), ipc in zip(self.bounds(), self.ipcs or [None] * len(self.bounds())):
            at = bisect_left(rows, a)
            if at < len(rows) and rows[at] < b:
                starts.append(at)
                ipcs.append(ipc)
        part.groups = np.array(starts, np.uint32).tobytes() if len(starts) > 1 else b""
        part.ipcs = ipcs if self.ipcs is not None else None
        return part

    def with_rows(self, c: int, rows: list[bytes]) -> Part:
        """The part with column c as these rows' values (beam search texts filled in)."""
        cols = {j: self.rows_of(j) for j, kind in enumerate(self.kinds) if kind >= SPANS}
        cols[c] = rows
        part = _built(self, self.count, cols, self.flags)
        part.groups, part.ipcs = self.groups, self.ipcs
        return part


def _built(like: Part, count: int, cols: dict[int, list[bytes]], flags: list[int]) -> Part:
    """A part of `count` rows with `like`'s AS_IS and SAME columns and these rows' values
    of the others (a column given here becomes SPANS unless it is ITEMS)."""
    kinds = bytearray(like.kinds)
    values = list(like.values)
    data: list[bytes] = []
    ends: list[int] = []
    at = 0
    for c in range(len(kinds)):
        if c not in cols:
            continue
        if kinds[c] < SPANS:
            kinds[c], values[c] = SPANS, b""
        for piece in cols[c]:
            data.append(piece)
            at += len(piece)
            ends.append(at)
    return Part(count, bytes(kinds), values, b"".join(data),
                np.array(ends, np.uint32).tobytes(), like.groups, like.ipcs, flags)


def whole(columns: Sequence[Raw], count: int, ipc: str | None = None,
          named: bool = False, flags: list[int] | None = None) -> Part:
    """A part that is its message's every row, of one tokenizer worker: every column as it
    came. `named`: the message has an ipcs column (`ipc` its one worker)."""
    return Part(count, bytes(len(columns)), [bytes(c) for c in columns],
                ipcs=[ipc] if named else None, flags=flags or [])


_part_encoder = msgspec.msgpack.Encoder()
part_decoder = msgspec.msgpack.Decoder(Part)


def encode_part(part: Part) -> bytes:
    return _part_encoder.encode(part)


class Fields:
    """A part's columns read back per group of rows, for the reply's fields: built once per
    part, then each group's field is a few slices (`field`)."""

    __slots__ = ("part", "spans", "ends", "same", "cut")

    def __init__(self, part: Part, cut: Callable[[bytes, list[list[int]]], list[bytes] | None]
                 | None = None) -> None:
        """`cut`: a PICKLED column's field cut by rows (SGLang's own process tree: it
        unpickles), or None (a group's share of it is then nil)."""
        self.part = part
        self.cut = cut
        self.spans = part.spans_at()
        self.ends: list[int] = part.row_ends().tolist() if part.ends else []
        self.same: dict[tuple[int, int], bytes] = {}  # (column, rows): a SAME field

    def field(self, c: int, a: int, b: int) -> bytes:
        """Column c's rows [a, b) as one msgpack value."""
        part = self.part
        kind = part.kinds[c]
        if kind == AS_IS:
            return part.values[c]
        k = b - a
        if kind == PICKLED:
            if k == part.count or part.values[c] == NIL:
                return part.values[c]
            got = self.cut(part.values[c], [list(range(a, b))]) if self.cut else None
            return NIL if got is None else got[0]
        if kind == SAME:
            got = self.same.get((c, k))
            if got is None:
                got = self.same[(c, k)] = array_head(k) + part.values[c] * k
            return got
        j = self.spans[c]
        n = part.count
        ends = self.ends
        start = (ends[j * n + a - 1] if a else (ends[j * n - 1] if j else 0))
        body = part.data[start:ends[j * n + b - 1]]
        if kind == SPANS:
            return array_head(k) + body
        return wrapped(b"".join((part.values[c], body, TAIL)))

    def column(self, c: int) -> Any:
        """Column c's rows as Python values (cold paths: beam search)."""
        return msgspec.msgpack.decode(self.field(c, 0, self.part.count))
