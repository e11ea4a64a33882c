"""A message's rows sorted once by what each needs, and the plain ones gathered.

Every ARRAYS message takes one path through the table (shards/messages/table.py): bind its
new rids, then triage its rows (`RowTriage`): plain rows (running rows of plain requests,
and the last rows that end with them) for the tokenizer family's decoder, rows for the
per-row path, late rows. The plain rows are gathered into `PlainRows`
(shards/decoding/interface.py), the decoder's input."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from sglang_tok.ragged import ragged_index, starts_of

from ..decoding.interface import PlainRows
from ..decoding.slots import PLAIN, ROW, Slots
from ..ending.rules import Ends

I64 = npt.NDArray[np.int64]


class RowTriage(NamedTuple):
    """A message's rows by what they need: `plain` (running rows of plain requests, and
    `quick`, the last rows that end with them; `stops`: the stop tokens left out of those)
    for the tokenizer family's decoder, `per_row` (rows of per-row requests, the other last
    rows) for the per-row path, in order; every other row is late (its rid ended, or it
    follows its request's last row in the same message)."""

    n: int
    base: int  # the shard's row number of the message's first row
    slots: I64
    id_starts: I64 | None  # None: one id per row
    ends: Ends
    plain: PlainRows | None
    quick: list[int]
    stops: dict[int, int]
    per_row: list[int]


def split_ends(ends: Ends, slots: I64, kinds: Any, plain: npt.NDArray[np.bool_],
                distinct: bool) -> tuple[list[int], npt.NDArray[np.bool_] | None]:
    """A message's last rows: those of plain requests end with the running rows (marked in
    `plain`, in place: the quick ones), the others per row. Rows after their request's
    last row in the same message (no scheduler sends one; a fuzzed frame may, even a second
    last row) are late: the mask of them, or None when every slot is named once."""
    end_rows = np.fromiter(ends, np.int64, len(ends))
    plain[end_rows] = False
    late = None
    if not distinct:
        first_end: dict[int, int] = {}
        for row, slot in zip(end_rows.tolist(), slots[end_rows].tolist()):
            if slot not in first_end or row < first_end[slot]:
                first_end[slot] = row
        late = np.zeros(len(slots), bool)
        for row in (np.isin(slots, list(first_end))).nonzero()[0].tolist():
            late[row] = row > first_end[int(slots[row])]
        plain &= ~late
    quick = sorted(r for r in end_rows[kinds[end_rows] == PLAIN].tolist()
                   if late is None or not late[r])
    plain[quick] = True
    return quick, late


def per_row_rows(kinds: Any, ends: Ends, quick: list[int],
                  late: npt.NDArray[np.bool_] | None) -> list[int]:
    """The rows for the per-row path, in order: rows of per-row requests, and last rows
    that do not end with the running rows."""
    mask = kinds == ROW
    if ends:
        mask[np.fromiter(ends, np.int64, len(ends))] = True
        mask[quick] = False
    if late is not None:
        mask &= ~late
    return mask.nonzero()[0].tolist()


def gather(rows: I64, slots: I64, meta: I64, ids: I64, sent: I64,
            id_starts: I64 | None, distinct: bool) -> PlainRows:
    every = len(rows) == len(slots)
    same = sent is ids  # nothing was blanked: the rows' ids stay one array
    counts = None
    if id_starts is not None:
        counts = id_starts[1:] - id_starts[:-1]
        if not every:
            counts = counts[rows]
            take = ragged_index(id_starts[rows], counts)
            ids, id_starts = ids[take], starts_of(counts)
            sent = ids if same else sent[take]
    elif not every:
        ids = ids[rows]
        sent = ids if same else sent[rows]
    if not every:
        slots, meta = slots[rows], meta[rows]
    return PlainRows(rows, slots, meta, ids, sent, id_starts, counts, distinct, every)


def record(state: Slots, rows: PlainRows) -> None:
    """The rows' completion counts."""
    slots, counts = rows.slots, rows.counts
    if not rows.distinct:  # a slot named twice counts twice
        np.add.at(state.completion, slots, 1 if counts is None else counts)
    elif counts is None:
        state.completion[slots] += 1
    else:
        state.completion[slots] += counts
