"""COLUMNS, the columnar output frame (docs/protocol.md section 5.2): one message of columns,
laid out like SGLang's own `BatchStrOutput`, so that neither the shard's encoder nor the
frontend's decoder builds a map per row. Rows are deltas; a sparse column holds (row, value)
pairs for the few rows that carry that field, in row order."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import accumulate
from typing import Any

import msgspec

from sglang_tok.finish import Finish
from sglang_tok.protocols.model.deltas import Delta, ToolCallDelta, Usage

_encoder = msgspec.msgpack.Encoder()
Attribution = tuple[int, int, int]


class SparseColumns(msgspec.Struct, kw_only=True, gc=False):
    """The sparse columns of COLUMNS and PACKED (sections 5.2, 5.4), declared once for both:
    keyword-only, so that msgspec lays them after each format's own dense columns."""

    finish: list[tuple[int, Finish]] = []
    usage: list[tuple[int, Usage]] = []
    error: list[tuple[int, str]] = []
    result: list[tuple[int, bytes]] = []
    logprobs: list[tuple[int, list[Any]]] = []
    top_logprobs: list[tuple[int, list[Any]]] = []
    token_ids_logprobs: list[tuple[int, list[Any]]] = []
    token_texts: list[tuple[int, list[str]]] = []
    top_texts: list[tuple[int, list[Any]]] = []
    attributions: list[tuple[int, list[Attribution]]] = []
    reasoning: list[tuple[int, str]] = []
    tool_calls: list[tuple[int, list[ToolCallDelta]]] = []

    def _fill(self, out: list[Delta]) -> list[Delta]:
        """Set each sparse value on its row's Delta (the dense fields are set already)."""
        for name in SPARSE_COLUMNS:
            for r, val in getattr(self, name):
                setattr(out[r], name, val)
        return out


class Columns(SparseColumns, array_like=True, omit_defaults=True, gc=False):
    """One output message of many deltas; row r is the delta of `rids[r]`.

    Row r's ids are `ids[s[r]:s[r + 1]]` with `s = starts()`. Trailing sparse columns that
    are empty stay off the wire (`encode_columns`); decoding fills them with `[]`.
    """

    shard: int
    seq: int
    rids: list[str]
    texts: list[str]
    id_lens: list[int]
    ids: list[int]

    def __len__(self) -> int:
        return len(self.rids)

    def starts(self) -> list[int]:
        return [0, *accumulate(self.id_lens)]

    def rows(self) -> Iterator[tuple[str, str, list[int]]]:
        """(rid, text, ids) per row, built at C speed (no per-row Python frame)."""
        if self.id_lens.count(1) == len(self.rids):  # one id per row: no slice objects
            return zip(self.rids, self.texts, map(list, zip(self.ids)))
        st = self.starts()
        return zip(self.rids, self.texts, map(self.ids.__getitem__, map(slice, st, st[1:])))

    def last_rows(self) -> list[int]:
        """Rows that are their request's last delta (they carry a finish)."""
        return [r for r, _ in self.finish]

    @property
    def deltas(self) -> list[Delta]:
        """Every row as a Delta, equal to what a DELTAS frame would carry: a client written
        for DELTAS reads COLUMNS unchanged (cold path: a struct per row)."""
        return self._fill([Delta(rid, text, ids) for rid, text, ids in self.rows()])


DENSE_COLUMNS = 6
SPARSE_COLUMNS: tuple[str, ...] = SparseColumns.__struct_fields__
# Delta fields whose default is None (a row has the key iff the value is not None), and
# the parser fields (section 8), whose defaults are "" and None: a row has the key iff the
# value is truthy, as with omit_defaults in DELTAS
_SPARSE_NONE = SPARSE_COLUMNS[:10]
_SPARSE_TRUTHY = SPARSE_COLUMNS[10:]


class ColumnsOut:
    """A shard's output message under construction, column by column.

    `append` takes a Delta (cold paths: ends, errors, features); the shard's hot loop
    appends straight to the dense columns instead.
    """

    __slots__ = ("rids", "texts", "id_lens", "ids", "sparse")

    def __init__(self) -> None:
        self.rids: list[str] = []
        self.texts: list[str] = []
        self.id_lens: list[int] = []
        self.ids: list[int] = []
        self.sparse: dict[str, list[tuple[int, Any]]] = {}

    def __len__(self) -> int:
        return len(self.rids)

    def append(self, d: Delta) -> None:
        row = len(self.rids)
        self.rids.append(d.rid)
        self.texts.append(d.text)
        self.id_lens.append(len(d.ids))
        self.ids += d.ids
        self._sparse(d, row)

    def _sparse(self, d: Delta, row: int) -> None:
        for name in _SPARSE_NONE:
            val = getattr(d, name)
            if val is not None:
                self.sparse.setdefault(name, []).append((row, val))
        for name in _SPARSE_TRUTHY:
            val = getattr(d, name)
            if val:
                self.sparse.setdefault(name, []).append((row, val))

    def add_sparse(self, name: str, row: int, val: Any) -> None:
        self.sparse.setdefault(name, []).append((row, val))

    # the sink's interface (DeltasOut has the same): where a message's rows go, whatever
    # the format; no caller tests which sink it holds
    def put(self, row: int, name: str, value: Any) -> None:
        """A row's field beside its text (a sparse column's entry)."""
        self.sparse.setdefault(name, []).append((row, value))

    def settle(self, name: str) -> None:
        """A sparse column whose entries were put out of row order, in row order again."""
        col = self.sparse.get(name)
        if col:
            col.sort(key=_first_of)

    def add_plain(self, rids: list[str], decoded: Any, counts: list[int] | None,
                  sent: list[int], rows: Any, families: list[Any], fams: Any) -> None:
        """The array path's plain rows: their texts as the decoder made them, their ids
        as they came, and their logprob values as sparse columns (only the rows that
        carry values cost a Python step). `decoded`, `rows`, `fams`: the shard's
        `Decoded`, `PlainRows` and message families."""
        base = len(self.rids)
        self.rids += rids
        self.texts += decoded.texts()
        self.id_lens += [1] * len(sent) if counts is None else counts
        self.ids += sent
        if families:
            read = fams.get()
            at = read.carrying[rows.rows].nonzero()[0]
            outs, carrying = (at + base).tolist(), rows.rows[at].tolist()
            for field, reader in read.readers.items():
                col = [(j, v) for j, v in zip(outs, map(reader.row, carrying)) if v is not None]
                if col:
                    self.sparse.setdefault(field, []).extend(col)

    def build(self, shard: int, seq: int) -> Columns:
        return Columns(shard, seq, self.rids, self.texts, self.id_lens, self.ids,
                       **self.sparse)


def _first_of(entry: tuple[int, Any]) -> int:
    return entry[0]


def columns_of(shard: int, seq: int, deltas: list[Delta]) -> Columns:
    out = ColumnsOut()
    for d in deltas:
        out.append(d)
    return out.build(shard, seq)


def encode_columns(msg: Columns) -> bytes:
    cols = msgspec.structs.astuple(msg)
    end = len(cols)
    while end > DENSE_COLUMNS and not cols[end - 1]:
        end -= 1
    return b"\x43" + _encoder.encode(cols[:end])
