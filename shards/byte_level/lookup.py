"""The id lookup: byte-level rows decoded as lists of their ids' texts, at C speed.

Most rows of most text are ids whose bytes are whole UTF-8 characters, on a slot with
nothing pending: such a row's text is its ids' own texts, list lookups. So a message's
texts are one `map` over its ids, and only the other rows (bytes pending from the row
before, an id that is part of a character, characters to pass over after a prompt) go
through the family's codec step (shards/byte_level/codec.py). The slots' numbers are read
with one gather: a fixed cost of about twenty numpy calls per message, which is why
`byte_level.ByteLookup` leaves small messages (and those naming a slot twice) to the loop.
Rows that want attribution are looked up here too, and attributed by the family's rule
(shards/byte_level/attribution.py).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..decoding.slots import PEND, SEL, SKIP, Slots
from .codec import push

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
