"""Output frames as a frontend reads them: the one decoding the kit's `Client` and the
harness's `Frontend` share.

`decode_frame` is the one place that knows the output frame kinds; a PACKED message may
come as `PackedRows`, whose rows become Deltas one at a time, when a consumer reads them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sglang_tok.logprob_rows import FIELDS, RowFamilies
from sglang_tok.protocols.model import columns, errors, output, packed
from sglang_tok.protocols.model.columns import Columns
from sglang_tok.protocols.model.control import Pong, Restarted
from sglang_tok.protocols.model.deltas import Delta, Deltas

__all__ = ["PackedRows", "decode_frame"]


def decode_frame(raw: bytes | memoryview, lazy: bool = False
                 ) -> tuple[int, int, Any] | Pong | Restarted:
    """One output frame as (process, seq, deltas), or a PONG, or a RESTARTED notice.

    The one place that knows the output frame kinds: DELTAS (`D`), the columnar COLUMNS
    (`C`, `--output-format columnar`) and PACKED (`K`, `--output-format packed`), whose
    rows become the same Deltas, PONG (`Q`) and RESTARTED (`R`). With `lazy`, a PACKED
    message comes as `PackedRows` (its Deltas made per row on demand).
    """
    msg = output.decode_output(raw)
    if isinstance(msg, Pong | Restarted):
        return msg
    if isinstance(msg, Deltas):
        return msg.shard, msg.seq, msg.deltas
    if isinstance(msg, packed.Packed):
        return msg.shard, msg.seq, PackedRows(msg) if lazy else msg.deltas
    if isinstance(msg, Columns):
        return msg.shard, msg.seq, msg.deltas
    raise errors.FrameError("unknown_kind", f"unknown output message {type(msg).__name__}")


class PackedRows:
    """A PACKED message whose rows are made into Deltas one at a time, when a consumer
    reads them: the text is decoded and the offsets summed once per message, on first use,
    and each row costs only its own slices."""

    __slots__ = ("msg", "_text", "_chars", "_ids", "_id_ends", "_extras", "_fams",
                 "_carrying")

    def __init__(self, msg: packed.Packed) -> None:
        self.msg = msg
        self._text: str | None = None
        self._chars: list[int] = []
        self._ids: Any = None
        self._id_ends: list[int] | None = None
        self._extras: dict[int, Delta] = {}
        self._fams: RowFamilies | None = None  # logprobs as numbers, read per row on demand
        self._carrying: list[bool] | None = None  # per row: carries logprobs

    def _prepare(self) -> str:
        msg = self.msg
        self._text = msg.text.decode("utf-8")
        self._chars = [0, *np.cumsum(np.frombuffer(msg.text_lens, "<u4")).tolist()]
        self._ids = np.frombuffer(msg.ids, "<i8")
        if msg.id_lens:
            self._id_ends = [0, *np.cumsum(np.frombuffer(msg.id_lens, "<u4")).tolist()]
        self._extras = _extras(msg)
        return self._text

    def delta(self, r: int) -> Delta:
        text = self._text if self._text is not None else self._prepare()
        chars, ends = self._chars, self._id_ends
        ids = self._ids[r:r + 1] if ends is None else self._ids[ends[r]:ends[r + 1]]
        d = self._extras.get(r)
        if d is None:
            d = Delta(self.msg.rids[r], text[chars[r]:chars[r + 1]], ids.tolist())
        else:
            d.text, d.ids = text[chars[r]:chars[r + 1]], ids.tolist()
        if self.msg.families and self._carries(r):
            fams = self._fams
            if fams is None:
                fams = self._fams = RowFamilies(self.msg.families, len(self.msg.rids),
                                                lists=True)
            if fams.carrying[r]:
                for field_name in FIELDS.values():
                    val = fams.row(field_name, r)
                    if val is not None:
                        setattr(d, field_name, val)
        return d

    def _carries(self, r: int) -> bool:
        """Whether row r carries logprob values: read once per message from the families'
        lengths as they came (the rows listed, or every row's length), not per row."""
        carrying = self._carrying
        if carrying is None:
            marks = np.zeros(len(self.msg.rids), bool)
            for _, rows, lens, *_ in self.msg.families:
                if rows:
                    marks[np.frombuffer(rows, "<u4")] = True
                elif lens:
                    marks |= np.frombuffer(lens, "<u4") > 0
            carrying = self._carrying = marks.tolist()
        return carrying[r]

    def deltas(self) -> list[Delta]:
        return list(map(self.delta, range(len(self.msg.rids))))


def _extras(msg: packed.Packed) -> dict[int, Delta]:
    """The rows of a PACKED message that carry any sparse value (a few per message), as
    Deltas whose text and ids are filled in when read. Logprob families are not read
    here: a row's lists are made when that row is read (`PackedRows.delta`), by its
    consumer, not by the demultiplexer."""
    marked: dict[int, Delta] = {}
    for name in columns.SPARSE_COLUMNS:
        for r, val in getattr(msg, name):
            d = marked.get(r)
            if d is None:
                d = marked[r] = Delta(msg.rids[r])
            setattr(d, name, val)
    return marked
