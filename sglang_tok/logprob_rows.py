"""Logprob families as numeric columns (the egress -> shard link's ARRAYS, the PACKED
output frame), read per row in the shapes a Delta carries.

Only rows that carry values cost a Python step, and only where lists are wanted: a shard
writing PACKED passes the numbers through (`shift`), a frontend builds the lists.
"""

from __future__ import annotations

from itertools import repeat
from typing import Any

import numpy as np

from .ragged import ragged_index, starts_of

# (name, rows, lens, poslens, values, ids): u32 row numbers of the rows that carry values
# (empty, with lengths: every row, in order), u32 length per such row, u32 k per position (ragged
# families only), f32 values, i32 ids
Family = tuple[str, bytes, bytes, bytes, bytes, bytes]

# link family name -> the Delta field (and COLUMNS sparse column) it fills
FIELDS = {"output_logprobs": "logprobs", "output_top": "top_logprobs",
          "output_token_ids": "token_ids_logprobs"}


class RowFamilies:
    """`lists`: each (value, id) pair as a list, as a decoded DELTAS frame has it (a
    frontend's Deltas); else as a tuple, which encodes the same and costs less (a shard's)."""

    __slots__ = ("readers", "carrying")

    def __init__(self, families: list[Any], rows: int, lists: bool = False) -> None:
        self.readers: dict[str, _Reader] = {}
        carrying = np.zeros(rows, bool)
        for fam in families:
            reader = _Reader(fam, rows, lists)
            self.readers[FIELDS[fam[0]]] = reader
            carrying |= reader.lens > 0
        self.carrying = carrying  # per row: carries any values

    def row(self, field: str, r: int) -> list[Any] | None:
        reader = self.readers.get(field)
        return None if reader is None else reader.row(r)

    def texts(self, field: str, r: int, text_of: dict[int, str]) -> list[Any] | None:
        """`logprob_text`'s texts of row r's ids in `field` (see `_Reader.texts`)."""
        reader = self.readers.get(field)
        return None if reader is None else reader.texts(r, text_of)


class _Reader:
    __slots__ = ("lens", "ragged", "vals", "ids", "row_starts", "poslens", "pos_starts",
                 "lists", "_texts")

    def __init__(self, fam: Any, rows: int, lists: bool) -> None:
        self.lists = lists
        self._texts: list[str] | None = None
        name, frows, flens, fposlens, fvalues, fids = fam
        if frows or not flens:  # the listed rows only (maybe none)
            self.lens = np.zeros(rows, np.int64)  # per row of the message: 0 unless listed
            self.lens[np.frombuffer(frows, np.uint32)] = np.frombuffer(flens, np.uint32)
        else:  # every row, in order
            self.lens = np.frombuffer(flens, np.uint32).astype(np.int64)
        self.ragged = name != "output_logprobs"
        self.vals: list[float] = np.frombuffer(fvalues, np.float32).tolist()
        self.ids: list[int] = np.frombuffer(fids, np.int32).tolist()
        if self.ragged:
            poslens = np.frombuffer(fposlens, np.uint32).astype(np.int64)
            self.poslens: list[int] = poslens.tolist()
            pos_starts = starts_of(self.lens)
            self.pos_starts: list[int] = pos_starts.tolist()
            self.row_starts: list[int] = starts_of(poslens)[pos_starts].tolist()
        else:
            self.row_starts = starts_of(self.lens).tolist()

    def texts(self, r: int, text_of: dict[int, str]) -> list[Any] | None:
        """Row r's ids as texts (`text_of[id]`, "" for an id without one), in the row's
        shape: a list (flat family) or a list per position, None where it has no values.
        Every id of the message is looked up once, at C speed, on first use."""
        if self._texts is None:
            self._texts = list(map(text_of.get, self.ids, repeat("")))
        t, a = self._texts, self.row_starts[r]
        if not self.ragged:
            b = self.row_starts[r + 1]
            return None if a == b else t[a:b]
        p0, p1 = self.pos_starts[r], self.pos_starts[r + 1]
        if p0 == p1:
            return None
        out: list[Any] = []
        for k in self.poslens[p0:p1]:
            out.append(t[a:a + k] if k else None)
            a += k
        return out

    def row(self, r: int) -> list[Any] | None:
        a = self.row_starts[r]
        if not self.ragged:
            b = self.row_starts[r + 1]
            if a == b:
                return None
            pairs = zip(self.vals[a:b], self.ids[a:b])
            return list(map(list, pairs)) if self.lists else list(pairs)
        p0, p1 = self.pos_starts[r], self.pos_starts[r + 1]
        if p0 == p1:
            return None
        out: list[Any] = []
        j, vals, ids, lists = a, self.vals, self.ids, self.lists
        for k in self.poslens[p0:p1]:
            if k:
                alternatives = zip(ids[j:j + k], vals[j:j + k])
                out.append(list(map(list, alternatives)) if lists else list(alternatives))
            else:
                out.append(None)
            j += k
        return out


def shift(fam: Any, rows: Any, base: int) -> Family:
    """A family of a message's rows `rows` (ascending), renumbered as rows base, base+1, ...
    of an output message: values and ids pass through untouched when every listed row is
    kept, which is the array path's case (its rows carry their own values)."""
    name, frows, flens, fposlens, fvalues, fids = fam
    if frows or not flens:
        listed = np.frombuffer(frows, np.uint32).astype(np.int64)
    else:  # every row, in order: the rows that carry values
        lens_all = np.frombuffer(flens, np.uint32)
        listed = np.flatnonzero(lens_all)
        if len(rows) == len(lens_all) and base == 0:  # every row kept, numbered as is
            return fam
        flens = lens_all[listed].astype(np.uint32).tobytes()
    where = np.searchsorted(rows, listed)
    kept = (where < len(rows)) & (rows[np.minimum(where, len(rows) - 1)] == listed)
    if kept.all():
        return (name, (where + base).astype(np.uint32).tobytes(), flens, fposlens, fvalues,
                fids)
    lens = np.frombuffer(flens, np.uint32).astype(np.int64)
    if name == "output_logprobs":
        take = _segments(starts_of(lens), lens, kept)
        poslens = b""
    else:
        pl = np.frombuffer(fposlens, np.uint32).astype(np.int64)
        positions = _segments(starts_of(lens), lens, kept)
        take = _segments(starts_of(pl), pl, np.isin(np.arange(len(pl)), positions))
        poslens = pl[positions].astype(np.uint32).tobytes()
    values = np.frombuffer(fvalues, np.float32)[take]
    ids = np.frombuffer(fids, np.int32)[take]
    return (name, (where[kept] + base).astype(np.uint32).tobytes(),
            lens[kept].astype(np.uint32).tobytes(), poslens, values.tobytes(), ids.tobytes())


def _segments(starts: Any, sizes: Any, keep: Any) -> Any:
    return ragged_index(starts[:-1][keep], sizes[keep])
