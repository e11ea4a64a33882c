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
                 singles: list[int] | None) -> list[str]:
    """Decode one row per slot (slots distinct): row r's ids are `row_ids[r]`, or the one id
    `singles[r]`. `heads` are the slots' first columns of `state.meta`."""
    buf, width, meta = state.pend_buf, state.width, state.meta
    texts: list[str] = []
    for r, (slot, head) in enumerate(zip(slots, heads)):
        table = tables[head[SEL]]
        if singles is not None:
            i = singles[r]
            data = table[i if 0 <= i < vocab else vocab]
        else:
            assert row_ids is not None
            ids = row_ids[r]
            data = b"".join([table[i if 0 <= i < vocab else vocab] for i in ids])
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
            meta[slot, PEND] = rest
        if head[SKIP] and text:
            text = text[1:]
            meta[slot, SKIP] = 0
        texts.append(text)
    return texts
