"""A message's plain rows into the shard's output sink, in the sink's own form.

The sink is the output message being built (protocol.py): Deltas, COLUMNS' columns or
PACKED's buffers. `write_rows` is the one writer of plain rows' texts and ids; the rest
here add what some rows carry beside them (logprob token texts, continuous usage,
attributions), costing a Python step only for the rows that carry them.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Any

import numpy as np
from sglang_tok.ring.link import Arrays

from sglang_tok.logprob_rows import FIELDS, RowFamilies, shift
from sglang_tok.protocol import ColumnsOut, Delta, PackedOut, Sink
from sglang_tok.tokenizer import TokenizerInfo

from ..decoding.interface import I64, Attribution, Decoded, PlainRows
from ..decoding.slots import CACHED, COMPLETION, PROMPT, Slots
from ..ending.rules import usage


def write_rows(out: Sink, rids: list[str], decoded: Decoded, rows: PlainRows, msg: Arrays,
                fams: Families) -> None:
    """A message's plain rows into the output, in the sink's own form: their texts, their
    ids as they came, and their logprob values (passed through)."""
    counts = None if rows.counts is None else rows.counts.tolist()
    # the decoder's list of the ids, when the ids it decoded are the ids as they came
    sent = decoded.id_list if decoded.id_list is not None and rows.sent is rows.ids \
        else rows.sent.tolist()
    families = msg.sparse.families
    if isinstance(out, PackedOut):
        base = len(out.rids)
        data, char_lens = decoded.packed()
        out.add_rows(rids, data, char_lens, [1] * len(sent) if counts is None else counts, sent)
        if families:
            if base == 0 and rows.every:  # the message's rows, numbered as they are
                out.families += families
            else:
                out.families += [shift(fam, rows.rows, base) for fam in families]
        return
    if isinstance(out, ColumnsOut):
        base = len(out.rids)
        out.rids += rids
        out.texts += decoded.texts()
        out.id_lens += [1] * len(sent) if counts is None else counts
        out.ids += sent
        if families:
            _logprob_columns(out, fams.get(), rows.rows, base)
        return
    if counts is None:
        row_ids = [[i] for i in sent]
    else:
        cuts = [0, *accumulate(counts)]
        row_ids = [sent[a:b] for a, b in zip(cuts, cuts[1:])]
    deltas = list(map(Delta, rids, decoded.texts(), row_ids))
    if families:  # only the rows that carry logprob values cost a Python step
        msg_rows = rows.rows
        at = fams.get().carrying[msg_rows].nonzero()[0]
        for j, row in zip(at.tolist(), msg_rows[at].tolist()):
            d = deltas[j]
            d.logprobs, d.top_logprobs, d.token_ids_logprobs = fams.extras(row)
    out += deltas


def _logprob_columns(out: ColumnsOut, fams: RowFamilies, rows: I64, base: int) -> None:
    """The logprob values of these message rows, appended from output row `base` on as
    COLUMNS' sparse columns; only the rows that carry values cost a Python step."""
    at = fams.carrying[rows].nonzero()[0]
    outs, carrying = (at + base).tolist(), rows[at].tolist()
    for field, reader in fams.readers.items():
        col = [(j, v) for j, v in zip(outs, map(reader.row, carrying)) if v is not None]
        if col:
            out.sparse.setdefault(field, []).extend(col)


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
        if isinstance(out, ColumnsOut):
            if texts is not None:
                out.add_sparse("token_texts", base + j, texts)
            if top_texts is not None:
                out.add_sparse("top_texts", base + j, top_texts)
        else:
            out[base + j].token_texts, out[base + j].top_texts = texts, top_texts


def continuous_usage(out: Sink, base: int, outs: list[int], rows: list[int], slots: list[int],
                      state: Slots, reasoning: bytes) -> None:
    """`continuous_usage` on the array path: the usage so far of message rows `rows` (of
    slots `slots`), whose request asked for it, written to output rows base + outs[k]: the
    slot's completion count after the row, its first row's prompt and cached tokens, the
    row's reasoning tokens. Only those rows cost a Python step."""
    per_row = np.frombuffer(reasoning, np.uint32).tolist() if reasoning else None
    for j, row, numbers in zip(outs, rows, state.meta[slots].tolist()):
        completion, prompt = numbers[COMPLETION], numbers[PROMPT]
        so_far = usage(prompt, completion, numbers[CACHED],
                       per_row[row] if per_row is not None else 0)
        if isinstance(out, ColumnsOut):
            out.add_sparse("usage", base + j, so_far)
        else:
            out[base + j].usage = so_far


def attributions(out: Sink, base: int, attrs: list[list[Attribution] | None]) -> None:
    """Rows' attributions (None: the row's request did not ask), written to output rows
    base + j: a Delta's field, or COLUMNS' and PACKED's sparse column (in row order; an
    empty list is a value, as the per-row path sends it)."""
    if isinstance(out, ColumnsOut):
        col = out.sparse.setdefault("attributions", [])
        col += [(base + j, a) for j, a in enumerate(attrs) if a is not None]
        return
    for j, a in enumerate(attrs):
        if a is not None:
            out[base + j].attributions = a


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
