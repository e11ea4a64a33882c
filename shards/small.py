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

from .attributed import Attribution, attributed_push, one_id_row
from .slots import ATTR, PEND, SEL, SKIP, Slots

Attrs = list[list[Attribution] | None]


def decode_small(tables: tuple[list[bytes], list[bytes]], vocab: int, state: Slots,
                 slots: list[int], heads: list[list[int]], row_ids: list[list[int]] | None,
                 singles: list[int] | None,
                 strs: tuple[list[str | None], list[str | None]],
                 drops: tuple[frozenset[int], frozenset[int]] = (frozenset(), frozenset())
                 ) -> tuple[list[str], Attrs | None]:
    """Decode one row per slot (slots distinct): row r's ids are `row_ids[r]`, or the one id
    `singles[r]`. `heads` are the slots' first columns of `state.meta`. With `strs` (each
    id's text when its bytes are whole characters, `PlainDecoder.strs`), a one-id row on a
    slot with nothing pending or to pass over is a list lookup: most rows of most text.
    Rows whose request asked for attribution also get theirs (None for the others; None
    for all when none asked): `_attributed`."""
    if state.attr_live and any(h[ATTR] for h in heads):
        return _attributed(tables, vocab, state, slots, heads, row_ids, singles, strs, drops)
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
        return texts, None
    assert row_ids is not None
    for slot, head, ids in zip(slots, heads, row_ids):
        table = tables[head[SEL]]
        texts.append(_push(state, slot, head,
                           b"".join([table[i if 0 <= i < vocab else vocab] for i in ids])))
    return texts, None


def _attributed(tables: tuple[list[bytes], list[bytes]], vocab: int, state: Slots,
                slots: list[int], heads: list[list[int]], row_ids: list[list[int]] | None,
                singles: list[int] | None, strs: tuple[list[str | None], list[str | None]],
                drops: tuple[frozenset[int], frozenset[int]]) -> tuple[list[str], Attrs]:
    """`decode_small` for a message with rows that want attribution. A one-id row is
    decoded as usual, then attributed by `one_id_row`; a row of several ids goes id by id
    through the per-row path's rules (`attributed_push`), which also decodes it."""
    texts: list[str] = []
    attrs: Attrs = []
    carry = state.carry
    for r, (slot, head) in enumerate(zip(slots, heads)):
        sel = head[SEL]
        if singles is not None:
            i = singles[r]
            ids = [i if 0 <= i < vocab else vocab]
        else:
            assert row_ids is not None
            ids = [i if 0 <= i < vocab else vocab for i in row_ids[r]]
        if not head[ATTR]:
            table = tables[sel]
            texts.append(_push(state, slot, head, b"".join([table[i] for i in ids])))
            attrs.append(None)
            continue
        if len(ids) == 1:  # its id's text (or the codec's), then `one_id_row`
            i = ids[0]
            whole = None if head[PEND] or head[SKIP] else strs[sel][i]
            text = whole if whole is not None else _push(state, slot, head, tables[sel][i])
            texts.append(text)
            attrs.append(one_id_row(carry, slot, i, 1 if i in drops[sel] else 0, text))
            continue
        held = head[PEND]
        at = slot * state.width
        pending = bytes(state.pend_buf[at:at + held]) if held else b""
        text, rest, skip, got, left = attributed_push(tables[sel], vocab, drops[sel], pending,
                                                      head[SKIP], carry.pop(slot, None), ids)
        if left:
            carry[slot] = left
        if rest:
            state.pend_buf[at:at + len(rest)] = rest
        if len(rest) != held:
            state.meta[slot, PEND] = len(rest)
        if skip != head[SKIP]:
            state.meta[slot, SKIP] = skip
        texts.append(text)
        attrs.append(got)
    return texts, attrs


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
