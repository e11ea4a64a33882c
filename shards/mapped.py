"""The id lookup: byte-level rows decoded as lists of their ids' texts, at C speed.

Most rows of most text are ids whose bytes are whole UTF-8 characters, on a slot with
nothing pending: such a row's text is its ids' own texts, list lookups. So a message's
texts are one `map` over its ids, and only the other rows (bytes pending from the row
before, an id that is part of a character, characters to pass over after a prompt) go
through the family's codec step (shards/byte_codec.py). The slots' numbers are read
with one gather: a fixed cost of about twenty numpy calls per message, which is why
`byte_level.ByteLookup` leaves small messages (and those naming a slot twice) to the loop.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .attributed import Attribution, attributed_row, one_id_rows, queue_row
from .byte_codec import push
from .slots import PEND, SEL, SKIP, Slots

I64 = npt.NDArray[np.int64]


class IdTexts:
    """Per id, for both byte tables (specials kept, skipped) side by side: its bytes, its
    text when its bytes are whole characters (None when not; "" in `joinable`, for a join
    whose row is then decoded again), and that fact as a numpy mask; for attribution, its
    byte length and its kind (1, zero-width: a special of the skipping table)."""

    __slots__ = ("bytes", "texts", "joinable", "whole", "stride", "size", "kind")

    def __init__(self, tables: list[list[bytes]], strs: list[list[str | None]],
                 specials: frozenset[int] = frozenset()) -> None:
        self.stride = len(strs[0])
        self.bytes: list[bytes] = tables[0] + tables[1]
        self.texts: list[str | None] = strs[0] + strs[1]
        self.joinable: list[str] = ["" if t is None else t for t in self.texts]
        self.whole = np.fromiter((t is not None for t in self.texts), bool, len(self.texts))
        self.size = np.fromiter(map(len, self.bytes), np.int64, len(self.bytes))
        self.kind = np.zeros(len(self.bytes), np.int64)
        self.kind[[self.stride + i for i in specials if 0 <= i < self.stride - 1]] = 1


def decode_mapped(id_texts: IdTexts, state: Slots, slots: I64, meta: I64, ids: I64,
                  id_starts: I64 | None = None,
                  leave: npt.NDArray[np.bool_] | None = None) -> list[str]:
    """The text of each row (slot `slots[r]`, its numbers `meta[r]` read before, ids in
    [0, vocab]: one per row, `ids[r]`, or with `id_starts` ids[id_starts[r]:id_starts[r +
    1]]); the slots' pending bytes and characters to pass over are advanced as
    the codec step does, for the rows that have any. Rows marked in `leave` are the
    caller's (`decode_attributed`): their texts here are placeholders."""
    plain = (meta[:, PEND] == 0) & (meta[:, SKIP] == 0)
    if leave is not None:
        plain |= leave  # (not `other`: left alone)
    if id_starts is None:
        where = ids + meta[:, SEL] * id_texts.stride
        texts = list(map(id_texts.texts.__getitem__, where.tolist()))
        whole = id_texts.whole[where]
        if leave is not None:
            whole |= leave
        other = (~(plain & whole)).nonzero()[0]
        if not len(other):
            return texts  # type: ignore[return-value]
        datas = list(map(id_texts.bytes.__getitem__, where[other].tolist()))
    else:
        where = ids + np.repeat(meta[:, SEL] * id_texts.stride, id_starts[1:] - id_starts[:-1])
        at = where.tolist()
        st = id_starts.tolist()
        cuts = list(map(slice, st, st[1:]))
        pieces = list(map(id_texts.joinable.__getitem__, at))
        texts = list(map("".join, map(pieces.__getitem__, cuts)))
        broken = np.concatenate(([0], np.cumsum(~id_texts.whole[where])))
        whole = broken[id_starts[1:]] == broken[id_starts[:-1]]
        if leave is not None:
            whole |= leave
        other = (~(plain & whole)).nonzero()[0]
        if not len(other):
            return texts  # type: ignore[return-value]
        raw = list(map(id_texts.bytes.__getitem__, at))
        datas = [b"".join(raw[cuts[r]]) for r in other.tolist()]
    for r, slot, head, data in zip(other.tolist(), slots[other].tolist(),
                                   meta[other].tolist(), datas):
        texts[r] = push(state, slot, head, data)
    return texts  # type: ignore[return-value]


def decode_attributed(id_texts: IdTexts, tables: list[list[bytes]], vocab: int,
                      drops: list[frozenset[int]], state: Slots, slots: I64,
                      meta: I64, want: npt.NDArray[np.bool_], ids: I64,
                      id_starts: I64 | None = None
                      ) -> tuple[list[str], list[list[Attribution] | None]]:
    """`decode_mapped` for a message with rows that want attribution (`want`), and their
    attributions (None for the other rows).

    One id per row: every row decoded as usual, then `attributed.one_id_rows`. Rows of
    several ids: a wanting row whose ids are whole characters, on a slot holding no bytes,
    nothing to pass over and no ids pending, is its ids' texts: each id is anchored at the
    bytes of the ids before it in the row (whole-column work; an id with no bytes and no
    text after it waits for the next row's text, `Slots.carry`). Any other wanting row goes
    id by id through the family's rule (`attributed_row`), which also decodes it.
    """
    if id_starts is None:
        return _one_id_attributed(id_texts, state, slots, meta, want, ids)
    stride = id_texts.stride
    counts = id_starts[1:] - id_starts[:-1]
    where = ids + np.repeat(meta[:, SEL] * stride, counts)
    broken = np.concatenate(([0], np.cumsum(~id_texts.whole[where])))
    whole = broken[id_starts[1:]] == broken[id_starts[:-1]]
    simple = want & whole & (meta[:, PEND] == 0) & (meta[:, SKIP] == 0)
    carry = state.carry
    if carry:
        simple &= ~np.isin(slots, np.fromiter(carry, np.int64, len(carry)))
    exact = want & ~simple
    texts = decode_mapped(id_texts, state, slots, meta, ids, id_starts, exact)
    kinds, sizes = id_texts.kind[where], id_texts.size[where]
    id_list, kind_list = ids.tolist(), kinds.tolist()
    slot_list = slots.tolist()
    total = np.concatenate(([0], np.cumsum(sizes)))
    before = total[:-1] - np.repeat(total[id_starts[:-1]], counts)  # bytes before, in row
    row_bytes = total[id_starts[1:]] - total[id_starts[:-1]]
    row_rep = np.repeat(row_bytes, counts)
    inside = before < row_rep
    offs = np.where(inside, before, row_rep)
    wait_ids = ~inside & (kinds == 0)
    tuples = list(zip(id_list, kind_list, offs.tolist()))
    cuts = id_starts.tolist()
    attrs: list[list[Attribution] | None] = \
        list(map(tuples.__getitem__, map(slice, cuts, cuts[1:])))
    seen = np.concatenate(([0], np.cumsum(wait_ids)))
    leaving = (simple & (seen[id_starts[1:]] > seen[id_starts[:-1]])).nonzero()[0]
    for r in leaving.tolist():  # an id with no bytes and no text after it: it waits
        a, b = cuts[r], cuts[r + 1]
        first = int(np.argmax(wait_ids[a:b]))
        attrs[r], left = queue_row(None, tuples[a:b], first, int(row_bytes[r]))
        if left:
            carry[slot_list[r]] = left
    if not want.all():
        attrs = [x if w else None for x, w in zip(attrs, want.tolist())]
    rows = exact.nonzero()[0].tolist()
    for r, head in zip(rows, meta[rows].tolist()):  # id by id, through the per-row rules
        sel = head[SEL]
        texts[r], attrs[r] = attributed_row(tables[sel], vocab, drops[sel], state,
                                            slot_list[r], head, id_list[cuts[r]:cuts[r + 1]])
    return texts, attrs


def _one_id_attributed(id_texts: IdTexts, state: Slots, slots: I64, meta: I64,
                       want: npt.NDArray[np.bool_], ids: I64
                       ) -> tuple[list[str], list[list[Attribution] | None]]:
    """One id per row: every row decoded as usual, then `attributed.one_id_rows`."""
    n, stride = len(slots), id_texts.stride
    texts = decode_mapped(id_texts, state, slots, meta, ids)
    asked = want.nonzero()[0]
    every = len(asked) == n
    found = one_id_rows(state.carry, slots if every else slots[asked],
                        ids.tolist() if every else ids[asked].tolist(),
                        id_texts.kind[ids + meta[:, SEL] * stride] if every else
                        id_texts.kind[ids[asked] + meta[asked, SEL] * stride],
                        texts if every else [texts[r] for r in asked.tolist()])
    if every:
        return texts, list(found)
    out: list[list[Attribution] | None] = [None] * n
    for j, entries in zip(asked.tolist(), found):
        out[j] = entries
    return texts, out
