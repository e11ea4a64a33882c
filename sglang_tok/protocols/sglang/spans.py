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

from array import array
from collections.abc import Callable, Sequence

import msgspec
import numpy as np
import numpy.typing as npt
from msgspec import Raw

from sglang_tok.ragged import ragged_index

from . import wire
from .part import AS_IS, ITEMS, NIL, NUMBERS, SAME, SPANS, Columns, Part, packed
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
    """The size of the msgpack value at each offset of `body` (padded with two bytes past
    its end: `padded`), read from its first bytes (0 where they do not tell: a non-empty
    container, a 32-bit length)."""
    lead = body[starts]
    size = _BASE[lead]
    wide8, wide16 = _ADD8[lead], _ADD16[lead]
    if wide8.any() or wide16.any():
        one = body[starts + 1].astype(np.int64)
        size = size + wide8 * one + wide16 * ((one << 8) + body[starts + 2])
    return size


def padded(body: bytes) -> npt.NDArray[np.uint8]:
    """A value's bytes and two zeros (a length read past the end reads zeros)."""
    return np.frombuffer(body + b"\0\0", np.uint8)


def size_at(body: bytes, at: int) -> int:
    """The size of the one msgpack value at `at` (0 where its first bytes do not tell)."""
    lead = body[at]
    size = _SIZES[lead]
    if _WIDE[lead]:
        size += body[at + 1] if _WIDE[lead] == 1 else int.from_bytes(body[at + 1:at + 3], "big")
    return size


def _uniform(body: bytes, width: int) -> bool:
    """Every `width`-byte row of the column is one value: the first is one value of `width`
    bytes, and every row's first bytes are the first row's (read as strided views), so row
    1 starts at `width`, is one value of `width` bytes, and so on."""
    if size_at(body, 0) != width:
        return False
    u8 = np.frombuffer(body, np.uint8)
    if not (u8[::width] == u8[0]).all():
        return bool((sizes_at(padded(body), np.arange(0, len(body), width)) == width).all())
    wide = _WIDE[body[0]]
    return not wide or (u8[1::width] == u8[1]).all() and (
        wide == 1 or (u8[2::width] == u8[2]).all())


_SIZES = _BASE.tolist()
_WIDE = (_ADD8 + 2 * _ADD16).tolist()
_ZERO = np.zeros(1, np.int64)


class Column:
    """One carried column of one message: its kind (part.py), the value an AS_IS or SAME
    column gives every part (an ITEMS column: its pickle's prelude), and for SPANS and
    ITEMS where each row's bytes lie in `buf`: every row `width` bytes from 0, or at
    `starts` with `sizes`."""

    __slots__ = ("kind", "value", "buf", "starts", "sizes", "width", "count", "numbers")

    def __init__(self, kind: int, value: bytes, buf: bytes = b"",
                 starts: I64 | None = None, sizes: I64 | None = None, width: int = 0,
                 count: int = 0, numbers: Sequence[int] | None = None) -> None:
        self.kind, self.value, self.buf = kind, value, buf
        self.starts, self.sizes = starts, sizes
        self.width = width  # every row this many bytes, laid end to end from 0
        self.count = count  # its rows
        self.numbers = numbers  # NUMBERS: each row's value


def locate(field: Raw | bytes, n: int,
           sizes: Callable[[], tuple[I64, bool] | None] | None = None,
           numbers: Sequence[int] | None = None) -> Column:
    """Where each of the n rows of a column lies; `sizes`: each row's size where it can be
    known beforehand, and whether that is a lower bound of each row's size (the sizes read
    from the column's own values: then their sum being the column's proves each one);
    otherwise each is checked at its offset, never trusted. A column that is nil or `[]`
    goes to every part as it is, one that is not an entry per row as nil (a pickle of every
    row the caller did not cut). `numbers`: the column's values, where the caller decoded
    them (ints: their rows travel as numbers, written again where the reply is built)."""
    raw = bytes(field)
    count = wire.array_length(raw)
    if count in (-1, 0):
        return Column(AS_IS, raw)
    if count != n or not n or wire.is_wrapped(raw):
        return Column(AS_IS, NIL)
    body = raw[wire.array_head_size(n):]
    size = len(body)
    width, left = divmod(size, n)
    if not left and body[:width] * n == body:
        return Column(SAME, body[:width])
    if numbers is not None:
        return Column(NUMBERS, b"", numbers=numbers, count=n)
    if not left:
        if width == 1 or _uniform(body, width):
            return Column(SPANS, b"", body, width=width, count=n)
    known = sizes() if sizes is not None else None
    if known is not None and int(known[0].sum()) == size:
        hint, bound = known
        starts = hint.cumsum() - hint
        if bound or (sizes_at(padded(body), starts) == hint).all():
            return Column(SPANS, b"", body, starts, hint, count=n)
    got = np.fromiter(map(len, _raw_rows.decode(raw)), np.int64, n)
    return Column(SPANS, b"", body, got.cumsum() - got, got, count=n)


def int_sizes(values: Sequence[int]) -> I64:
    """Each int's msgpack size, as msgspec writes it (the smallest form)."""
    v = np.fromiter(values, np.int64, len(values))
    if int(v.min(initial=0)) < 0:
        return 1 + (v < -32) + (v < -128) + 2 * (v < -32768) + 4 * (v < -(1 << 31)) \
            + (v > 127) + (v > 255) + 2 * (v > 65535) + 4 * (v > 0xFFFFFFFF)
    return _INT_SIZES[_INT_BOUNDS.searchsorted(v)]


_INT_BOUNDS = np.array([127, 255, 65535, 0xFFFFFFFF], np.int64)
_INT_SIZES = np.array([1, 2, 3, 5, 9], np.int64)


class Locator:
    """The carried columns of the last message, by position: a column whose bytes are the
    last message's (one of nils, zeros or empty lists, one worker's name: most of them, in
    a decode step) is not located again. One per reader (per process)."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: dict[int, tuple[Raw, Column]] = {}

    def __call__(self, k: int, field: Raw, n: int,
                 sizes: Callable[[], tuple[I64, bool] | None],
                 numbers: Sequence[int] | None = None) -> Column:
        if field == wire.NIL:
            return _NIL_COLUMN
        last = self.last.get(k)
        if last is not None and last[0] == field:
            return last[1]
        col = locate(field, n, sizes, numbers)
        if col.kind < NUMBERS:  # the others' rows differ message to message
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
    if items.width:
        return Column(ITEMS, items.prelude, items.data, width=items.width, count=n)
    return Column(ITEMS, items.prelude, pickle, items.starts, items.sizes, count=n)


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
    """A message's carried columns located, to be cut into parts by `parts`: each shard's
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
        live = int(first[len(first) - 2])  # the LATE rows sort last, in no part
        order = order[:live]
        at = first[shards + [shards[-1] + 1]].tolist()  # each shard's rows in `order`
        spans = [c for c in cols if c.kind >= SPANS]
        shape = packed(Columns(kinds, values, [c.width for c in spans]))
        records = _records([c for c in spans if c.width], order)
        var = _spans([c for c in spans if not c.width], order, at)
        numbers = _numbers([c for c in cols if c.kind == NUMBERS], order)
        names, flags = self.names, self.flags
        runs = _runs(order, at, groups) if groups is not None else None
        out: dict[int, Part] = {}
        for i, s in enumerate(shards):
            a, b = at[i], at[i + 1]
            part = Part(b - a, shape)
            if records is not None:
                part.records = records[a:b].tobytes()
            if var is not None:
                part.data, part.sizes = var[i]
            if numbers is not None:
                part.numbers = numbers[a:b].tobytes()
            if runs is not None:
                assert names is not None
                mine, keys = runs[i]
                if len(mine) > 1:
                    part.groups = array("I", [r - a for r in mine]).tobytes()
                part.ipcs = [names[k] for k in keys]
            elif names is not None:
                part.ipcs = [names[0]]
            if flags:
                part.flags = [flags[r] for r in order[a:b].tolist()]
            out[s] = part
        return out


def _runs(order: I64, at: list[int], groups: I64) -> list[tuple[list[int], list[int]]]:
    """Per shard, where its runs of one tokenizer worker's rows start (in `order`) and
    each run's worker key."""
    live = len(order)
    mark = np.empty(live, bool)
    mark[0] = True
    np.not_equal(groups[1:live], groups[:live - 1], out=mark[1:])
    mark[at[:-1]] = True  # a shard's first row starts a run
    starts = np.flatnonzero(mark)
    keys = groups[starts].tolist()
    bounds = starts.searchsorted(at).tolist()
    starts_list = starts.tolist()
    return [(starts_list[lo:hi], keys[lo:hi]) for lo, hi in zip(bounds, bounds[1:])]


def _records(fixed: list[Column], order: I64) -> npt.NDArray[np.uint8] | None:
    """The columns whose rows are all one size, as one record per row (a row's bytes of
    each, side by side), in `order`: one gather; a shard's rows are one slice of it."""
    if not fixed:
        return None
    mats = [np.frombuffer(c.buf, np.uint8).reshape(c.count, c.width) for c in fixed]
    return (mats[0] if len(mats) == 1 else np.hstack(mats))[order]


def _spans(var: list[Column], order: I64, at: list[int]) -> list[tuple[bytes, bytes]] | None:
    """Each shard's (data, sizes) of the columns whose rows are of several sizes: its rows'
    bytes, column after column, rows in `order` (one gather of every column's bytes), and
    each row's size in each (row by row)."""
    if not var:
        return None
    sizes = np.stack([c.sizes[order] for c in var])  # type: ignore[index]
    base = np.array([0] + [len(c.buf) for c in var[:-1]], np.int64).cumsum()
    seg_starts = np.concatenate([c.starts[order] + b  # type: ignore[index]
                                 for c, b in zip(var, base.tolist())])
    buf = np.frombuffer(b"".join(c.buf for c in var), np.uint8)
    joined = buf[ragged_index(seg_starts, sizes.ravel())].tobytes()
    offsets = np.zeros((len(var), len(order) + 1), np.int64)
    sizes.cumsum(axis=1, out=offsets[:, 1:])
    rows: list[bytes] = []
    bounds: list[list[int]] = []
    lo = 0
    for row, total in zip(offsets[:, at].tolist(), offsets[:, -1].tolist()):
        rows.append(joined[lo:lo + total])
        bounds.append(row)
        lo += total
    by_row = sizes.T.astype(np.uint32)
    return [(b"".join([col[bound[i]:bound[i + 1]] for col, bound in zip(rows, bounds)]),
             by_row[at[i]:at[i + 1]].tobytes()) for i in range(len(at) - 1)]


def _numbers(cols: list[Column], order: I64) -> npt.NDArray[np.int64] | None:
    """The NUMBERS columns as int64 rows (a row's value of each), in `order`."""
    if not cols:
        return None
    values = np.array([c.numbers for c in cols], np.int64).T
    return values[order]
