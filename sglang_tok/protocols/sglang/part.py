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

import msgspec
import numpy as np
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
    `data`: the SPANS and ITEMS columns' rows, column after column; `widths`: per such
    column, its rows' size where they are all one size, else 0; `sizes`: u32, row by row,
    each row's size in each column of several sizes. `groups`: u32, where each tokenizer
    worker's rows start (b"": one group), `ipcs` each group's worker (None: the message
    names none). `flags`: per row its decoding options when a row carries beam search
    output (`reply.beam_flags`)."""

    count: int
    kinds: bytes
    values: list[bytes]
    data: bytes = b""
    widths: list[int] = []
    sizes: bytes = b""
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

    def rows_of(self, c: int) -> list[bytes]:
        """Each row's bytes of SPANS or ITEMS column c (cold paths)."""
        fields = Fields(self)
        return [fields.body(c, r, r + 1) for r in range(self.count)]

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
        return _built(self, self.count, cols, self.flags)


def _built(like: Part, count: int, cols: dict[int, list[bytes]], flags: list[int]) -> Part:
    """A part of `count` rows with `like`'s AS_IS and SAME columns, groups and workers,
    and these rows' values of the others (a column given here becomes SPANS unless it is
    ITEMS)."""
    kinds = bytearray(like.kinds)
    values = list(like.values)
    data: list[bytes] = []
    widths: list[int] = []
    sizes: list[list[int]] = []
    for c in sorted(cols):
        if kinds[c] < SPANS:
            kinds[c], values[c] = SPANS, b""
        rows = cols[c]
        lens = [len(r) for r in rows]
        data += rows
        same = len(set(lens)) == 1
        widths.append(lens[0] if same else 0)
        if not same:
            sizes.append(lens)
    return Part(count, bytes(kinds), values, b"".join(data), widths,
                np.array(sizes, np.uint32).T.tobytes() if sizes else b"", like.groups,
                like.ipcs, flags)


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
    """A part's columns read back per group of rows, for the reply's fields: where each
    SPANS and ITEMS column's rows lie is worked out once per part, then each group's field
    is a header and one slice (`field`)."""

    __slots__ = ("part", "spans", "cols", "same", "cut")

    def __init__(self, part: Part, cut: Callable[[bytes, list[list[int]]], list[bytes] | None]
                 | None = None) -> None:
        """`cut`: a PICKLED column's field cut by rows (SGLang's own process tree: it
        unpickles), or None (a group's share of it is then nil)."""
        self.part = part
        self.cut = cut
        self.spans = part.spans_at()
        self.same: dict[tuple[int, int], bytes] = {}  # (column, rows): a SAME field
        # per SPANS or ITEMS column: (where it starts in data, its rows' width or 0, the
        # ends of its rows from its start where they are of several sizes)
        k, widths = part.count, part.widths
        var = [j for j, w in enumerate(widths) if not w]
        ends: list[list[int]] = []
        if var and k:
            ends = np.frombuffer(part.sizes, np.uint32).reshape(k, len(var)).astype(
                np.int64).cumsum(axis=0).T.tolist()
        self.cols: list[tuple[int, int, list[int]]] = []
        base, v = 0, 0
        for w in widths:
            if w:
                self.cols.append((base, w, []))
                base += k * w
            else:
                mine = ends[v]
                v += 1
                self.cols.append((base, 0, mine))
                base += mine[-1] if mine else 0

    def body(self, c: int, a: int, b: int) -> bytes:
        """Rows [a, b) of SPANS or ITEMS column c, laid end to end."""
        base, w, ends = self.cols[self.spans[c]]
        if w:
            return self.part.data[base + a * w:base + b * w]
        return self.part.data[base + (ends[a - 1] if a else 0):base + ends[b - 1]]

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
        if kind == SPANS:
            return array_head(k) + self.body(c, a, b)
        return wrapped(b"".join((part.values[c], self.body(c, a, b), TAIL)))
