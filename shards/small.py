"""The array path for a message of few rows: a plain loop over the same per-slot state.

A whole-array operation costs about a microsecond whatever its size, so a 16-row frame
(16 concurrent requests) would pay more in calls than in work. Here a message's slots are
read with one gather of the first columns of `Slots.meta` (path, table, pending length,
characters to pass over), each row is decoded as `decoder.ByteStream.push` does, and only
what changed is written back (pending bytes are rare in most text); completion counts and
the rings of ids are updated by the caller with whole-array operations. Same state, same
results (the property tests run both paths); only byte-level tokenizers, the common case (a
byte-fallback tokenizer's small messages take `plain_fallback`'s own loop).
"""

from __future__ import annotations

from codecs import utf_8_decode

from .slots import PEND, SEL, SKIP, Slots


def decode_small(tables: tuple[list[bytes], list[bytes]], vocab: int, state: Slots,
                 slots: list[int], heads: list[list[int]], row_ids: list[list[int]] | None,
                 singles: list[int] | None,
                 strs: tuple[list[str | None], list[str | None]]) -> list[str]:
    """Decode one row per slot (slots distinct): row r's ids are `row_ids[r]`, or the one id
    `singles[r]`. `heads` are the slots' first columns of `state.meta`. With `strs` (each
    id's text when its bytes are whole characters, `PlainDecoder.strs`), a one-id row on a
    slot with nothing pending or to pass over is a list lookup: most rows of most text."""
    texts: list[str] = []
    if singles is not None:
        for slot, head, i in zip(slots, heads, singles):
            if not 0 <= i < vocab:
                i = vocab
            if not (head[PEND] or head[SKIP]):
                whole = strs[head[SEL]][i]
                if whole is not None:
                    texts.append(whole)
                    continue
            texts.append(_push(state, slot, head, tables[head[SEL]][i]))
        return texts
    assert row_ids is not None
    for slot, head, ids in zip(slots, heads, row_ids):
        table = tables[head[SEL]]
        texts.append(_push(state, slot, head,
                           b"".join([table[i if 0 <= i < vocab else vocab] for i in ids])))
    return texts


def _push(state: Slots, slot: int, head: list[int], data: bytes) -> str:
    """A row's bytes after the slot's pending ones: the whole characters, as text (the
    codec's replacement rules for broken bytes); an incomplete tail stays pending."""
    buf, width = state.pend_buf, state.width
    held = head[PEND]
    if held:
        at = slot * width
        data = bytes(buf[at:at + held]) + data
    text, used = utf_8_decode(data, "replace", False)
    rest = len(data) - used
    if rest:
        at = slot * width
        buf[at:at + rest] = data[used:]
    if rest != held:
        state.meta[slot, PEND] = rest
    if head[SKIP] and text:
        text = text[1:]
        state.meta[slot, SKIP] = 0
    return text
