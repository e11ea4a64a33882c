"""A message's plain rows into the shard's output sink, in the sink's own form.

The sink is the output message being built (protocol.py): Deltas, COLUMNS' columns or
PACKED's buffers, each behind one interface (`add_plain`, `put`, `settle`), so nothing
here asks which. `write_rows` is the one writer of plain rows' texts and ids; the rest add
what some rows carry beside them (logprob token texts, continuous usage, attributions),
costing a Python step only for the rows that carry them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ring.link import Arrays
from sglang_tok.logprob_rows import FIELDS, RowFamilies
from sglang_tok.protocols.model.output import Sink
from sglang_tok.tokenizer import TokenizerInfo

from ..decoding.interface import Attribution, Decoded, PlainRows
from ..decoding.slots import CACHED, COMPLETION, PROMPT, Slots
from ..ending.rules import usage


def write_rows(out: Sink, rids: list[str], decoded: Decoded, rows: PlainRows, msg: Arrays,
                fams: Families) -> None:
    """A message's plain rows into the output, in the sink's own form (`add_plain`): their
    texts, their ids as they came, and their logprob values (passed through)."""
    counts = None if rows.counts is None else rows.counts.tolist()
    # the decoder's list of the ids, when the ids it decoded are the ids as they came
    sent = decoded.id_list if decoded.id_list is not None and rows.sent is rows.ids \
        else rows.sent.tolist()
    out.add_plain(rids, decoded, counts, sent, rows, msg.sparse.families, fams)


def logprob_texts(out: Sink, base: int, outs: list[int], rows: list[int],
                   fams: Families, info: TokenizerInfo) -> None:
    """`logprob_text` on the array path: the token texts of message rows `rows`, whose
    request wants them, written to output rows base + outs[k]; only those rows cost a
    Python step, and only the ones that carry logprobs get any."""
    read = fams.get()
    carrying = read.carrying
    for j, row in zip(outs, rows):
        if not carrying[row]:
            continue
        texts = read.texts("logprobs", row, info.token_texts)
        top_texts = read.texts("top_logprobs", row, info.token_texts)
        if texts is not None:
            out.put(base + j, "token_texts", texts)
        if top_texts is not None:
            out.put(base + j, "top_texts", top_texts)


def continuous_usage(out: Sink, base: int, outs: list[int], rows: list[int], slots: list[int],
                      state: Slots, reasoning: bytes) -> None:
    """`continuous_usage` on the array path: the usage so far of message rows `rows` (of
    slots `slots`), whose request asked for it, written to output rows base + outs[k]: the
    slot's completion count after the row, its first row's prompt and cached tokens, the
    row's reasoning tokens. Only those rows cost a Python step."""
    per_row = np.frombuffer(reasoning, np.uint32).tolist() if reasoning else None
    for j, row, numbers in zip(outs, rows, state.meta[slots].tolist()):
        completion, prompt = numbers[COMPLETION], numbers[PROMPT]
        out.put(base + j, "usage", usage(prompt, completion, numbers[CACHED],
                                         per_row[row] if per_row is not None else 0))


def attributions(out: Sink, base: int, attrs: list[list[Attribution] | None]) -> None:
    """Rows' attributions (None: the row's request did not ask), written to output rows
    base + j (in row order; an empty list is a value, as the per-row path sends it)."""
    for j, a in enumerate(attrs):
        if a is not None:
            out.put(base + j, "attributions", a)


class Families:
    """A message's logprob families, read into per-row lists only if a row asks."""

    __slots__ = ("families", "rows", "_read")

    def __init__(self, families: list[Any], rows: int) -> None:
        self.families, self.rows = families, rows
        self._read: RowFamilies | None = None

    def get(self) -> RowFamilies:
        if self._read is None:
            self._read = RowFamilies(self.families, self.rows)
        return self._read

    def extras(self, row: int) -> tuple[Any, Any, Any]:
        fams = self.get()
        lp, top, tid = (fams.row(f, row) for f in FIELDS.values())
        return lp, top, tid
