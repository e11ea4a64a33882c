"""The logprob families of an ARRAYS message, read per row in the shapes a Delta carries.

Only rows that carry values cost a Python step; which rows those are comes from the
families' length columns in one vectorised test.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sglang_tok.ring.link import Family

from sglang_tok.ragged import starts_of

# link family name -> the Delta field (and COLUMNS sparse column) it fills
FIELDS = {"output_logprobs": "logprobs", "output_top": "top_logprobs",
          "output_token_ids": "token_ids_logprobs"}


class RowFamilies:
    __slots__ = ("readers", "carrying")

    def __init__(self, families: list[Family], rows: int) -> None:
        self.readers: dict[str, _Reader] = {}
        carrying = np.zeros(rows, bool)
        for fam in families:
            reader = _Reader(fam, rows)
            self.readers[FIELDS[fam.name]] = reader
            carrying |= reader.lens > 0
        self.carrying = carrying  # per row: carries any values

    def row(self, field: str, r: int) -> list[Any] | None:
        reader = self.readers.get(field)
        return None if reader is None else reader.row(r)


class _Reader:
    __slots__ = ("lens", "ragged", "vals", "ids", "row_starts", "poslens", "pos_starts")

    def __init__(self, fam: Family, rows: int) -> None:
        self.lens = np.zeros(rows, np.int64)  # per row of the message: 0 unless listed
        self.lens[np.frombuffer(fam.rows, np.uint32)] = np.frombuffer(fam.lens, np.uint32)
        self.ragged = bool(fam.poslens) or fam.name != "output_logprobs"
        self.vals: list[float] = np.frombuffer(fam.values, np.float32).tolist()
        self.ids: list[int] = np.frombuffer(fam.ids, np.int32).tolist()
        if self.ragged:
            poslens = np.frombuffer(fam.poslens, np.uint32).astype(np.int64)
            self.poslens: list[int] = poslens.tolist()
            pos_starts = starts_of(self.lens)
            self.pos_starts: list[int] = pos_starts.tolist()
            self.row_starts: list[int] = starts_of(poslens)[pos_starts].tolist()
        else:
            self.row_starts = starts_of(self.lens).tolist()

    def row(self, r: int) -> list[Any] | None:
        a = self.row_starts[r]
        if not self.ragged:
            b = self.row_starts[r + 1]
            return list(zip(self.vals[a:b], self.ids[a:b])) if a != b else None
        p0, p1 = self.pos_starts[r], self.pos_starts[r + 1]
        if p0 == p1:
            return None
        out: list[Any] = []
        j, vals, ids = a, self.vals, self.ids
        for k in self.poslens[p0:p1]:
            out.append(list(zip(ids[j:j + k], vals[j:j + k])) if k else None)
            j += k
        return out
