"""One shard's part of a scheduler message: the columns SGLang's detokenizer passes on to
the TokenizerManager, cut to the shard's rows as byte ranges (egress -> shard), and put
back together per tokenizer worker into `BatchStrOutput` fields (the shard).

A column of a message is one of seven kinds (`spans.py` finds which, once per message):
AS_IS (one value for every part: nil, `[]`, a column that is not one entry per row), SAME
(an entry per row, every row's the same bytes: a column of nils, zeros, empty lists),
PICKLED (a pickle only unpickling cuts: the part's rows pickled together by the egress,
cut per group by unpickling again, in SGLang's own process tree), WORKER (each row's
tokenizer worker: a group's rows name one, its own), NUMBERS (ints the egress
decoded anyway: the rows' values travel, the shard writes them), SPANS (each row's own
bytes) and ITEMS (SGLang's pickled list of per-row objects, cut by its items:
`pickle_rows.py`). Only the last three travel row by row, in three blocks of the part: the
columns whose rows are all one size as records (a row's bytes of each such column, row
after row: one slice per part), the other byte columns column after column with each
row's size, and the numbers as int64 rows. A group of the part's rows (those of one
tokenizer worker: the egress orders a shard's rows by worker) is a range [a, b) of every
column, so a reply's field is at most a header and one slice.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Callable, Sequence

import msgspec
import numpy as np
from msgspec import Raw

from .pickle_rows import TAIL

AS_IS, SAME, PICKLED, WORKER, NUMBERS, SPANS, ITEMS = 0, 1, 2, 3, 4, 5, 6
NIL = b"\xc0"
_WRAPPER = b"\x92\xadPickleWrapper"  # SGLang's PickleWrapper: [tag, bytes]
_U16, _U32 = struct.Struct(">H"), struct.Struct(">I")
_encoder = msgspec.msgpack.Encoder()


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


class Columns(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """What every part of one message shares: per carried column (the positions' `carried`
    order) its kind and value (AS_IS its bytes, SAME one row's, ITEMS the pickle's prelude
    (`pickle_rows.Items`), PICKLED the part's rows' field, else nothing), and per SPANS or
    ITEMS column its rows' size where they are all one size (else 0). Packed once per
    message; a shard reads each packing once (`columns_of`): they repeat message to
    message."""

    kinds: bytes
    values: list[bytes]
    widths: list[int] = []


class Part(msgspec.Struct, array_like=True, gc=False):
    """A shard's `count` rows of the carried columns: `columns` (packed `Columns`, or the
    object from an egress in the shard's own process), then the rows. `records`: row after
    row, the bytes of each column of one size; `data`: the other SPANS and ITEMS columns'
    rows, column after column, and `sizes` (u32, row by row) each row's size in each of
    them; `numbers`: int64, row by row, each NUMBERS column's value. `groups`: u32, where
    each tokenizer worker's rows start (b"": one group), `ipcs` each group's worker (None:
    the message names none). `flags`: per row its decoding options when a row carries
    beam search output (`reply.beam_flags`)."""

    count: int
    columns: Raw
    records: bytes = b""
    data: bytes = b""
    sizes: bytes = b""
    numbers: bytes = b""
    groups: bytes = b""
    ipcs: list[str | None] | None = None
    flags: list[int] = []
    # a part that is its message's every row, of one worker: the fields as they came
    # (`columns` then unused)
    whole: list[Raw] = []

    @property
    def shape(self) -> Columns:
        if self.whole:  # (cold paths only read a whole part this way)
            return Columns(bytes(len(self.whole)), [bytes(f) for f in self.whole])
        return columns_of(self.columns)

    @property
    def kinds(self) -> bytes:
        return self.shape.kinds

    @property
    def values(self) -> list[bytes]:
        return self.shape.values

    def bounds(self) -> list[tuple[int, int]]:
        """Each group's rows [a, b)."""
        if not self.groups:
            return [(0, self.count)]
        starts = np.frombuffer(self.groups, np.uint32).tolist()
        return list(zip(starts, [*starts[1:], self.count]))

    def rows_of(self, c: int) -> list[bytes]:
        """Each row's bytes of a SPANS, ITEMS or NUMBERS column (cold paths)."""
        fields = Fields(self)
        if self.kinds[c] == NUMBERS:
            return [_encoder.encode(v) for v in fields.numbers(c, 0, self.count)]
        return [fields.body(c, r, r + 1) for r in range(self.count)]

    def take(self, rows: Sequence[int]) -> Part:
        """These rows of the part (in increasing order), each still in its worker's group
        (cold paths: a reply that skips rows)."""
        cols = {c: [mine[r] for r in rows] for c, kind in enumerate(self.kinds)
                if kind >= NUMBERS for mine in (self.rows_of(c),)}
        part = _built(self, len(rows), cols, [self.flags[r] for r in rows] if self.flags
                      else [], nil_pickled=True)
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
        cols = {j: self.rows_of(j) for j, kind in enumerate(self.kinds) if kind >= NUMBERS}
        cols[c] = rows
        part = _built(self, self.count, cols, self.flags)
        part.groups, part.ipcs = self.groups, self.ipcs
        return part


def _built(like: Part, count: int, cols: dict[int, list[bytes]], flags: list[int],
           nil_pickled: bool = False) -> Part:
    """A part of `count` rows with `like`'s AS_IS, SAME and PICKLED columns (the last nil,
    `nil_pickled`: only unpickling cuts them), groups and workers, and these rows' bytes of
    the others (each SPANS unless it is ITEMS): cold."""
    kinds = bytearray(like.kinds)
    values = [NIL if nil_pickled and kind == PICKLED else v
              for kind, v in zip(like.kinds, like.values)]
    records: list[list[bytes]] = [[] for _ in range(count)]
    data: list[bytes] = []
    widths: list[int] = []
    sizes: list[list[int]] = []
    for c in sorted(cols):
        if kinds[c] < SPANS:
            kinds[c], values[c] = SPANS, b""
        rows = cols[c]
        lens = [len(r) for r in rows]
        same = bool(lens) and len(set(lens)) == 1
        widths.append(lens[0] if same else 0)
        if same:
            for record, row in zip(records, rows):
                record.append(row)
        else:
            data += rows
            sizes.append(lens)
    return Part(count, packed(Columns(bytes(kinds), values, widths)),
                b"".join(b"".join(r) for r in records), b"".join(data),
                np.array(sizes, np.uint32).T.tobytes() if sizes else b"", b"", like.groups,
                like.ipcs, flags)


def whole(columns: Sequence[Raw], count: int, ipc: str | None = None,
          named: bool = False, flags: list[int] | None = None) -> Part:
    """A part that is its message's every row, of one tokenizer worker: every column as it
    came. `named`: the message has an ipcs column (`ipc` its one worker)."""
    return Part(count, _NO_COLUMNS, ipcs=[ipc] if named else None, flags=flags or [],
                whole=list(columns))


_part_encoder = msgspec.msgpack.Encoder()
part_decoder = msgspec.msgpack.Decoder(Part)
_NO_COLUMNS = Raw(b"\xc0")
_columns_decoder = msgspec.msgpack.Decoder(Columns)
_read: dict[bytes, Columns] = {}  # the packings a shard has read (a few)


def encode_part(part: Part) -> bytes:
    return _part_encoder.encode(part)


def packed(columns: Columns) -> Raw:
    """`Columns` packed once for every part of a message (a Raw goes out as it is)."""
    return Raw(_part_encoder.encode(columns))


def columns_of(raw: Raw) -> Columns:
    """A packing read back; each distinct one is read once."""
    key = bytes(raw)
    got = _read.get(key)
    if got is None:
        if len(_read) >= 256:
            _read.clear()
        got = _read[key] = _columns_decoder.decode(key)
    return got


class Fields:
    """A part's columns read back per group of rows, for the reply's fields: where each
    column's rows lie is worked out once per part, then each group's field is a header and
    one slice (`field`)."""

    __slots__ = ("part", "where", "same", "cut", "records", "ends", "numbers_", "kinds",
                 "values", "columns", "lists")

    def __init__(self, part: Part, cut: Callable[[bytes, list[list[int]]], list[bytes] | None]
                 | None = None) -> None:
        """`cut`: a PICKLED column's field cut by rows (SGLang's own process tree: it
        unpickles), or None (a group's share of it is then nil)."""
        self.part = part
        self.cut = cut
        self.same: dict[tuple[int, int], bytes] = {}  # (column, rows): a SAME field
        shape = part.shape
        self.kinds, self.values = shape.kinds, shape.values
        k, widths = part.count, shape.widths
        record = sum(widths)
        self.records = np.frombuffer(part.records, np.uint8).reshape(k, record) \
            if record and k else None
        var = widths.count(0)
        self.ends: list[list[int]] = np.frombuffer(part.sizes, np.uint32).reshape(
            k, var).astype(np.int64).cumsum(axis=0).T.tolist() if var and k else []
        nums = self.kinds.count(NUMBERS)
        self.numbers_ = np.frombuffer(part.numbers, np.int64).reshape(k, nums) \
            if nums and k else None
        self.columns: dict[int, bytes] = {}  # a record column's rows, laid end to end
        self.lists: list[list[int]] | None = None  # each NUMBERS column's values
        # per column: (its block, where it starts there, its width, its ends or number)
        self.where: list[tuple[int, int, int, int]] = []
        at_record = at_data = v = num = w = 0
        for kind in self.kinds:
            if kind == NUMBERS:
                self.where.append((NUMBERS, num, 0, 0))
                num += 1
            elif kind >= SPANS:
                width = widths[w]
                w += 1
                if width:
                    self.where.append((1, at_record, width, 0))
                    at_record += width
                else:
                    self.where.append((2, at_data, 0, v))
                    at_data += self.ends[v][-1] if k else 0
                    v += 1
            else:
                self.where.append((0, 0, 0, 0))

    def body(self, c: int, a: int, b: int) -> bytes:
        """Rows [a, b) of SPANS or ITEMS column c, laid end to end."""
        block, at, width, v = self.where[c]
        if block == 1:
            column = self.columns.get(c)
            if column is None:
                assert self.records is not None
                column = self.part.records if width == self.records.shape[1] else \
                    self.records[:, at:at + width].tobytes()  # (the only column of one size)
                self.columns[c] = column
            return column[a * width:b * width]
        ends = self.ends[v]
        return self.part.data[at + (ends[a - 1] if a else 0):at + ends[b - 1]]

    def numbers(self, c: int, a: int, b: int) -> list[int]:
        lists = self.lists
        if lists is None:
            assert self.numbers_ is not None
            lists = self.lists = self.numbers_.T.tolist()
        return lists[self.where[c][1]][a:b]

    def field(self, c: int, a: int, b: int, ipc: str | None = None) -> bytes:
        """Column c's rows [a, b) as one msgpack value (`ipc`: their tokenizer worker)."""
        kind, values = self.kinds[c], self.values
        if kind == AS_IS:
            return values[c]
        k = b - a
        if kind == WORKER:
            return array_head(k) + _encoder.encode(ipc) * k
        if kind == SAME:
            got = self.same.get((c, k))
            if got is None:
                got = self.same[(c, k)] = array_head(k) + values[c] * k
            return got
        if kind == NUMBERS:
            return _encoder.encode(self.numbers(c, a, b))
        if kind == PICKLED:
            if k == self.part.count or values[c] == NIL:
                return values[c]
            cut = self.cut(values[c], [list(range(a, b))]) if self.cut else None
            return NIL if cut is None else cut[0]
        if kind == SPANS:
            return array_head(k) + self.body(c, a, b)
        return wrapped(b"".join((values[c], self.body(c, a, b), TAIL)))
