"""Where each row's value of every column a reply passes on lies in an SGLang message (found
once per message, never a Python object per row where the bytes tell), and the message cut
into each shard's `Part` as byte ranges: one gather for every column and every shard.

A column is an msgpack array of one entry per row. Its rows' boundaries come, cheapest
first, from: every row the same bytes (SAME: nothing to cut); every row one byte; every row
`w` bytes, each entry's first byte saying so (an entry's size is read from its first bytes
for every scalar: ints, floats, nil, bools, strings, bins, exts; element 0 at 0 of size w,
so element 1 at w, and so on); sizes known beforehand (an `array` ext per row from its id
count; a string per row from its length), each checked the same way at its offset; and
last, msgspec's list of raw entries. SGLang's pickled time stats are cut by their items
(`pickle_rows.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec
import numpy as np
import numpy.typing as npt
from msgspec import Raw

from sglang_tok.ragged import ragged_index

from . import wire
from .part import AS_IS, ITEMS, NIL, SAME, SPANS, Part
from .pickle_rows import items_of

I64 = npt.NDArray[np.int64]
_raw_rows = msgspec.msgpack.Decoder(list[Raw])


def _sizes_table() -> tuple[I64, I64, I64]:
    """Per first byte of an msgpack value: its size when the byte alone tells (0: it does
    not), plus 1x the next byte (str8, bin8, ext8) or 1x the next two (16-bit lengths)."""
    base = np.zeros(256, np.int64)
    add8 = np.zeros(256, np.int64)
    add16 = np.zeros(256, np.int64)
    base[0x00:0x80] = 1  # positive fixint
    base[0xE0:0x100] = 1  # negative fixint
    base[0xA0:0xC0] = 1 + np.arange(32)  # fixstr
    base[[0x80, 0x90, 0xC0, 0xC2, 0xC3]] = 1  # empty map, empty array, nil, false, true
    for b, size in ((0xCA, 5), (0xCB, 9), (0xCC, 2), (0xCD, 3), (0xCE, 5), (0xCF, 9),
                    (0xD0, 2), (0xD1, 3), (0xD2, 5), (0xD3, 9), (0xD4, 3), (0xD5, 4),
                    (0xD6, 6), (0xD7, 10), (0xD8, 18)):
        base[b] = size
    for b, size in ((0xC4, 2), (0xD9, 2), (0xC7, 3)):  # bin8, str8, ext8
        base[b], add8[b] = size, 1
    for b, size in ((0xC5, 3), (0xDA, 3), (0xC8, 4)):  # bin16, str16, ext16
        base[b], add16[b] = size, 1
    return base, add8, add16


_BASE, _ADD8, _ADD16 = _sizes_table()


def sizes_at(body: npt.NDArray[np.uint8], starts: I64) -> I64:
    """The size of the msgpack value at each offset of `body`, read from its first bytes
    (0 where they do not tell: a non-empty container, a 32-bit length)."""
    lead = body[starts]
    size = _BASE[lead]
    if _ADD8[lead].any() or _ADD16[lead].any():
        pad = np.concatenate((body, np.zeros(2, np.uint8)))
        one = pad[starts + 1].astype(np.int64)
        two = pad[starts + 2].astype(np.int64)
        size = size + _ADD8[lead] * one + _ADD16[lead] * (one * 256 + two)
    return size


class Column:
    """One passed column of one message: its kind (part.py), the value an AS_IS or SAME
    column gives every part (an ITEMS column: its pickle's prelude), and for SPANS and
    ITEMS where each row's bytes lie in `buf`."""

    __slots__ = ("kind", "value", "buf", "starts", "sizes", "width")

    def __init__(self, kind: int, value: bytes, buf: bytes = b"",
                 starts: I64 | None = None, sizes: I64 | None = None, width: int = 0) -> None:
        self.kind, self.value, self.buf = kind, value, buf
        self.starts, self.sizes = starts, sizes
        self.width = width  # every row this many bytes, laid end to end from starts[0]


def locate(field: Raw | bytes, n: int, sizes: I64 | None = None) -> Column:
    """Where each of the n rows of a column lies; `sizes`: each row's size if known
    beforehand (checked, never trusted). A column that is nil or `[]` goes to every part as
    it is, one that is not an entry per row (a pickle of every row the caller did not cut)
    as nil."""
    raw = bytes(field)
    count = wire.array_length(raw)
    if count in (-1, 0):
        return Column(AS_IS, raw)
    if count != n or not n:
        return Column(AS_IS, NIL)
    head = 1 if count < 16 else 3 if raw[0] == 0xDC else 5
    body = raw[head:]
    size = len(body)
    width, left = divmod(size, n)
    if not left and body[:width] * n == body:
        return Column(SAME, body[:width])
    u8 = np.frombuffer(body, np.uint8)
    if not left:
        starts = np.arange(0, size, width, dtype=np.int64)
        if width == 1 or (sizes_at(u8, starts) == width).all():
            return Column(SPANS, b"", body, starts, np.full(n, width, np.int64), width)
    if sizes is not None and int(sizes.sum()) == size:
        starts = np.zeros(n, np.int64)
        np.cumsum(sizes[:-1], out=starts[1:])
        if (sizes_at(u8, starts) == sizes).all():
            return Column(SPANS, b"", body, starts, sizes)
    rows = _raw_rows.decode(raw)
    got = np.fromiter(map(len, rows), np.int64, n)
    starts = np.zeros(n, np.int64)
    np.cumsum(got[:-1], out=starts[1:])
    return Column(SPANS, b"", body, starts, got)


class Locator:
    """The passed columns of the last message, by position: a column whose bytes are the
    last message's (one of nils, zeros or empty lists, one worker's name: most of them, in
    a decode step) is not located again. One per reader (per process)."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: dict[int, tuple[Raw, Column]] = {}

    def __call__(self, k: int, field: Raw, n: int,
                 sizes: Callable[[], I64 | None]) -> Column:
        if field == wire.NIL:
            return _NIL_COLUMN
        last = self.last.get(k)
        if last is not None and last[0] == field:
            return last[1]
        col = locate(field, n, sizes())
        if col.kind != SPANS:  # a SPANS column's rows differ message to message
            self.last[k] = (field, col)
        return col


def locate_items(field: Raw | bytes, n: int) -> Column | None:
    """SGLang's pickled per-row column (`["PickleWrapper", bytes]`) by its items; None if
    its pickle is not of the shape cut here (pickle_rows.py)."""
    raw = bytes(field)
    try:
        pickle = msgspec.msgpack.decode(raw, type=tuple[str, bytes])[1]
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    items = items_of(pickle, n)
    if items is None:
        return None
    return Column(ITEMS, items.prelude, pickle, items.starts, items.sizes)


_NIL_COLUMN = Column(AS_IS, NIL)


def ext_sizes(counts: Sequence[int] | I64) -> I64:
    """The size of an `array("q")` ext of each count of ids, as msgpack writes it."""
    payload = 6 + 8 * np.asarray(counts, np.int64)
    return payload + np.where(payload < 1 << 8, 3, np.where(payload < 1 << 16, 4, 6))


def str_sizes(strs: Sequence[str]) -> I64:
    """Each string's msgpack size if it is ASCII (a lower bound otherwise: `locate` checks)."""
    lens = np.fromiter(map(len, strs), np.int64, len(strs))
    return lens + np.where(lens < 32, 1, np.where(lens < 1 << 8, 2, np.where(
        lens < 1 << 16, 3, 5)))


class Cut:
    """A message's passed columns located, to be cut into parts by `parts`: each shard's
    rows in the order the egress sends them (grouped by shard, then by tokenizer worker)."""

    __slots__ = ("columns", "names", "flags")

    def __init__(self, columns: list[Column], names: list[str | None] | None,
                 flags: list[int]) -> None:
        self.columns = columns
        self.names = names  # the tokenizer worker of each group key (None: no ipcs)
        self.flags = flags

    def parts(self, order: I64, first: I64, shards: list[int],
              groups: I64 | None) -> dict[int, Part]:
        """Each shard's part: rows `order[first[s]:first[s + 1]]`; `groups` (sorted like
        `order`): each row's tokenizer worker key, whose runs become the part's groups."""
        cols = self.columns
        kinds = bytes(c.kind for c in cols)
        values = [c.value for c in cols]
        spans = [c for c in cols if c.kind >= SPANS]
        live = int(first[len(first) - 2])  # the LATE rows sort last, in no part
        cut = _gather(spans, order[:live], first[:-1], shards) if spans else None
        names, flags = self.names, self.flags
        at = _group_starts(first, shards, groups) if groups is not None else None
        out: dict[int, Part] = {}
        for j, s in enumerate(shards):
            a, b = int(first[s]), int(first[s + 1])
            part = Part(b - a, kinds, values)
            if cut is not None:
                part.data, part.ends = cut[j]
            if at is not None:
                assert names is not None and groups is not None
                starts = at[j]
                if len(starts) > 1:
                    part.groups = (starts - a).astype(np.uint32).tobytes()
                part.ipcs = [names[k] for k in groups[starts].tolist()]
            elif names is not None:
                part.ipcs = [names[0]]
            if flags:
                part.flags = [flags[i] for i in order[a:b].tolist()]
            out[s] = part
        return out


def _group_starts(first: I64, shards: list[int], groups: I64) -> list[I64]:
    """Per shard, where its runs of one tokenizer worker's rows start (in `order`)."""
    starts = first[shards]
    end = int(first[shards[-1] + 1])
    change = np.flatnonzero(groups[1:end] != groups[:end - 1]) + 1
    at = np.union1d(change, starts)
    return np.split(at, np.searchsorted(at, starts)[1:])


def _gather(spans: list[Column], order: I64, first: I64, shards: list[int]
            ) -> list[tuple[bytes, bytes]]:
    """Each shard's (data, ends): its rows of the SPANS and ITEMS columns, column after
    column, rows in `order`, and where each row ends. A column of equal-sized rows is
    gathered row by row (one copy of each row); the others byte by byte, together."""
    m, live = len(spans), len(order)
    sizes = np.empty((m, live), np.int64)
    sorted_rows: list[bytes] = [b""] * m
    var: list[int] = []
    for j, c in enumerate(spans):
        if c.width:
            rows = np.frombuffer(c.buf, np.uint8, len(c.starts) * c.width,  # type: ignore[arg-type]
                                 int(c.starts[0])).reshape(-1, c.width)  # type: ignore[index]
            sorted_rows[j] = rows[order].tobytes()
            sizes[j] = c.width
        else:
            sizes[j] = c.sizes[order]  # type: ignore[index]
            var.append(j)
    if var:
        base = np.cumsum([0] + [len(spans[j].buf) for j in var[:-1]])
        seg_starts = np.concatenate([spans[j].starts[order] + b  # type: ignore[index]
                                     for j, b in zip(var, base.tolist())])
        seg_sizes = sizes[var].ravel()
        buf = np.frombuffer(b"".join(spans[j].buf for j in var), np.uint8)
        joined = buf[ragged_index(seg_starts, seg_sizes)].tobytes()
        totals = np.cumsum(sizes[var].sum(axis=1)).tolist()
        for j, lo, hi in zip(var, [0, *totals[:-1]], totals):
            sorted_rows[j] = joined[lo:hi]
    # where each row starts in its column's sorted bytes, and each shard's bounds there
    offsets = np.zeros((m, live + 1), np.int64)
    np.cumsum(sizes, axis=1, out=offsets[:, 1:])
    bounds = offsets[:, np.append(first[shards], first[shards[-1] + 1])]
    # a shard's ends: its rows' ends within its data (column after column)
    spans_of = bounds[:, 1:] - bounds[:, :-1]  # (m, shards): each column's bytes per shard
    before = np.cumsum(spans_of, axis=0) - spans_of  # a column's start in a shard's data
    k = np.diff(first)[shards]
    which = np.repeat(np.arange(len(shards)), k)
    row_first = np.repeat(first[shards], k)
    ends = offsets[:, 1:] - offsets[:, row_first] + before[:, which]
    bounds_list = bounds.tolist()
    out = []
    for i, s in enumerate(shards):
        a, b = int(first[s]), int(first[s + 1])
        data = b"".join([sorted_rows[j][bounds_list[j][i]:bounds_list[j][i + 1]]
                         for j in range(m)])
        out.append((data, ends[:, a:b].astype(np.uint32).tobytes()))
    return out
