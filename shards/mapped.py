"""The path for a message of one id per row: each row's text looked up by its id.

Most rows of most text are one id whose bytes are whole UTF-8 characters, on a slot with
nothing pending: that row's text is the id's own text, a list lookup. So a message's texts
are one `map` over its ids at C speed, and only the other rows (bytes pending from the
row before, an id that is part of a character, characters to pass over after a prompt)
take a loop through the incremental codec, as shards/small.py does. The slots' numbers
are read with one gather and written back with a few whole-array operations: a fixed cost
of about twenty numpy calls per message, where the general array code
(shards/array_decode.py) pays about a hundred. Same state and same results as the other
two paths (the property tests run all three).
"""

from __future__ import annotations

from codecs import utf_8_decode

import numpy as np
import numpy.typing as npt

from .slots import PEND, SEL, SKIP, Slots

I64 = npt.NDArray[np.int64]
# from this many rows of one id each a message takes this path, below them the loop: where
# the two cost the same per row (trace a's shape at 16, 32, 64 and 128 concurrent requests:
# 2.5 / 1.5 / 1.1 / 0.8 us per row here, 2.0 / 1.6 / 1.3 / 1.3 in the loop)
MAPPED_MIN_ROWS = 32


class IdTexts:
    """Per id, for both byte tables (specials kept, skipped) side by side: its bytes, its
    text when its bytes are whole characters (None when not; "" in `joinable`, for a join
    whose row is then decoded again), and that fact as a numpy mask."""

    __slots__ = ("bytes", "texts", "joinable", "whole", "stride")

    def __init__(self, tables: tuple[list[bytes], list[bytes]],
                 strs: tuple[list[str | None], list[str | None]]) -> None:
        self.stride = len(strs[0])
        self.bytes: list[bytes] = tables[0] + tables[1]
        self.texts: list[str | None] = strs[0] + strs[1]
        self.joinable: list[str] = ["" if t is None else t for t in self.texts]
        self.whole = np.fromiter((t is not None for t in self.texts), bool, len(self.texts))


def decode_mapped(id_texts: IdTexts, state: Slots, slots: I64, meta: I64, ids: I64,
                  id_starts: I64 | None = None) -> list[str]:
    """The text of each row (slot `slots[r]`, its numbers `meta[r]` read before, ids in
    [0, vocab]: one per row, `ids[r]`, or with `id_starts` ids[id_starts[r]:id_starts[r +
    1]]); the slots' pending bytes and characters to pass over are advanced as
    `ByteStream.push` does, for the rows that have any."""
    plain = (meta[:, PEND] == 0) & (meta[:, SKIP] == 0)
    if id_starts is None:
        where = ids + meta[:, SEL] * id_texts.stride
        texts = list(map(id_texts.texts.__getitem__, where.tolist()))
        other = np.flatnonzero(~(plain & id_texts.whole[where]))
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
        other = np.flatnonzero(~(plain & (broken[id_starts[1:]] == broken[id_starts[:-1]])))
        if not len(other):
            return texts  # type: ignore[return-value]
        raw = list(map(id_texts.bytes.__getitem__, at))
        datas = [b"".join(raw[cuts[r]]) for r in other.tolist()]
    for r, text in zip(other.tolist(), _decode_others(state, slots[other], meta[other], datas)):
        texts[r] = text
    return texts  # type: ignore[return-value]


def _decode_others(state: Slots, slots: I64, meta: I64, datas: list[bytes]) -> list[str]:
    """The rows that are not their ids' whole characters: each row's bytes after its slot's
    pending ones, decoded as the incremental codec does (`small._push`, with the slots'
    numbers written back once for all rows, not once per row)."""
    buf, width = state.pend_buf, state.width
    texts: list[str] = []
    rests: list[int] = []
    skipped: list[int] = []
    data: bytes | bytearray
    for slot, held, skip, data in zip(slots.tolist(), meta[:, PEND].tolist(),
                                      meta[:, SKIP].tolist(), datas):
        if held:
            at = slot * width
            data = buf[at:at + held] + data  # a bytearray: the codec takes any buffer
        text, used = utf_8_decode(data, "replace", False)
        rest = len(data) - used
        if rest:
            at = slot * width
            buf[at:at + rest] = data[used:]
        rests.append(rest)
        if skip and text:  # the prompt's incomplete character: its first one goes
            text = text[1:]
            skipped.append(slot)
        texts.append(text)
    state.meta[slots, PEND] = rests
    if skipped:
        state.meta[skipped, SKIP] = 0
    return texts
