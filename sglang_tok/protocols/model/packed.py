"""PACKED: COLUMNS with its per-row strings and numbers as buffers (docs/protocol.md section
5.4). A shard's array path has every row's text as one UTF-8 buffer already, and ids as one
int64 array, so it sends them as they are, and a frontend cuts them with C-speed slicing."""

from __future__ import annotations

from array import array
from itertools import chain
from typing import Any

import msgspec
import numpy as np

from sglang_tok.protocols.model.columns import ColumnsOut, SparseColumns
from sglang_tok.protocols.model.deltas import Delta

_encoder = msgspec.msgpack.Encoder()
_U32S = "<u4"


class _SparseFamilies(SparseColumns, kw_only=True, gc=False):
    # logprobs of the array path's rows as numbers (sglang_tok/logprob_rows.py: name, rows,
    # lens, poslens, values, ids); rows of other paths use the sparse list columns
    families: list[tuple[str, bytes, bytes, bytes, bytes, bytes]] = []


class Packed(_SparseFamilies, array_like=True, omit_defaults=True, gc=False):
    """One output message of many deltas; row r is the delta of `rids[r]`.

    Row r's text is the UTF-8 `text` decoded, from character sum(text_lens[:r]), for
    text_lens[r] characters (code points); its ids are the little-endian int64 `ids` cut by
    `id_lens` (u32 each), or one id per row when `id_lens` is empty. The sparse columns are
    COLUMNS' (section 5.2), row numbers and all.
    """

    shard: int
    seq: int
    rids: list[str]
    text: bytes
    text_lens: bytes
    id_lens: bytes
    ids: bytes

    def __len__(self) -> int:
        return len(self.rids)

    def texts(self) -> list[str]:
        """Every row's text: one decode, then slices (C speed, no per-row frame)."""
        text = self.text.decode("utf-8")
        lens = np.frombuffer(self.text_lens, _U32S)
        if not len(lens):
            return []
        ends = np.cumsum(lens).tolist()
        return list(map(text.__getitem__, map(slice, [0, *ends[:-1]], ends)))

    def id_rows(self) -> list[list[int]]:
        ids = np.frombuffer(self.ids, "<i8").tolist()
        if not self.id_lens:
            return list(map(list, zip(ids)))
        ends = np.cumsum(np.frombuffer(self.id_lens, _U32S)).tolist()
        return list(map(ids.__getitem__, map(slice, [0, *ends[:-1]], ends)))

    @property
    def deltas(self) -> list[Delta]:
        out = self._fill(list(map(Delta, self.rids, self.texts(), self.id_rows())))
        if self.families:
            from sglang_tok.logprob_rows import FIELDS, RowFamilies

            fams = RowFamilies(self.families, len(out), lists=True)
            for r in np.flatnonzero(fams.carrying).tolist():
                for field in FIELDS.values():
                    val = fams.row(field, r)
                    if val is not None:
                        setattr(out[r], field, val)
        return out


class PackedOut(ColumnsOut):
    """A PACKED message under construction: runs of rows whose text is one UTF-8 buffer
    (the array path) or single Deltas (every other path), kept in order."""

    __slots__ = ("parts", "char_lens", "id_arrays", "multi", "families", "_own_tail")

    def __init__(self) -> None:
        super().__init__()
        self.families: list[tuple[str, bytes, bytes, bytes, bytes, bytes]] = []
        self.parts: list[bytes] = []
        self.char_lens: list[Any] = []  # u32 arrays or lists
        self.id_arrays: list[Any] = []  # int64 arrays or lists
        self.multi = False  # some row has other than one id
        self._own_tail = False  # the last runs are lists `append` made: it extends them

    def append(self, d: Delta) -> None:
        """One delta of another path: consecutive ones share one run (a run per delta made
        building the message cost a conversion call per delta)."""
        row = len(self.rids)
        self.rids.append(d.rid)
        self.parts.append(d.text.encode())
        if self._own_tail:
            self.char_lens[-1].append(len(d.text))
            self.id_arrays[-1].extend(d.ids)
        else:
            self.char_lens.append([len(d.text)])
            self.id_arrays.append(list(d.ids))
            self._own_tail = True
        self.id_lens.append(len(d.ids))
        if len(d.ids) != 1:
            self.multi = True
        self._sparse(d, row)

    def add_plain(self, rids: list[str], decoded: Any, counts: list[int] | None,
                  sent: list[int], rows: Any, families: list[Any], fams: Any) -> None:
        """The array path's plain rows as one UTF-8 buffer and int64 array; their logprob
        families pass through as they came (renumbered when not every row is here)."""
        base = len(self.rids)
        data, char_lens = decoded.packed()
        self.add_rows(rids, data, char_lens, [1] * len(sent) if counts is None else counts,
                      sent)
        if families:
            if base == 0 and rows.every:  # the message's rows, numbered as they are
                self.families += families
            else:
                from sglang_tok.logprob_rows import shift  # the client reads no array path's rows

                self.families += [shift(fam, rows.rows, base) for fam in families]

    def add_rows(self, rids: list[str], text: bytes, char_lens: Any, id_lens: Any,
                 ids: Any) -> None:
        """Rows of the array path: their texts as one UTF-8 buffer and character counts,
        their ids as one int64 array and per-row counts (numpy arrays)."""
        self.rids += rids
        self.parts.append(text)
        self.char_lens.append(char_lens)
        self.id_lens += id_lens if isinstance(id_lens, list) else id_lens.tolist()
        self.id_arrays.append(ids)
        self._own_tail = False
        if len(ids) != len(rids):
            self.multi = True

    def build_packed(self, shard: int, seq: int) -> Packed:
        lens = _u32(self.char_lens)
        ids = _i64(self.id_arrays)
        id_lens = array("I", self.id_lens).tobytes() if self.multi else b""
        return Packed(shard, seq, self.rids, b"".join(self.parts), lens, id_lens, ids,
                      **self.sparse, families=self.families)


def _u32(parts: list[Any]) -> bytes:
    """Little-endian u32 of runs that are lists (the small-message path, single Deltas) or
    numpy arrays (the array path), without a numpy call for a message of lists."""
    if all(type(p) is list for p in parts):
        return array("I", chain.from_iterable(parts)).tobytes()
    return np.concatenate([np.asarray(p, np.uint32) for p in parts]).astype(_U32S).tobytes()


def _i64(parts: list[Any]) -> bytes:
    if all(type(p) is list for p in parts):
        return array("q", chain.from_iterable(parts)).tobytes()
    return np.concatenate([np.asarray(p, np.int64) for p in parts]).astype("<i8").tobytes()


def encode_packed(msg: Packed) -> bytes:
    return b"\x4b" + _encoder.encode(msg)
