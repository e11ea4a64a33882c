"""Byte-level BPE rows decoded one at a time against their slots: the reference loop.

Each row is decoded as `decoder.ByteStream.push` does it (the slot's pending bytes, then
the row's ids' bytes, through the incremental codec), and only what changed is written
back to `Slots.meta` (pending bytes are rare in most text). A slot's numbers are read with
one gather per message (`heads`); when a message names a slot twice its rows share one
`heads` entry, updated in place, so the slot's later rows see what its earlier ones left.
The id lookup (shards/mapped.py) sends here the rows it cannot look up; the property tests
hold both to the full decode.
"""

from __future__ import annotations

from codecs import utf_8_decode

from .attributed import Attribution, attributed_push
from .slots import ATTR, PEND, SEL, SKIP, Slots

Attrs = list[list[Attribution] | None]
Tables = tuple[list[bytes], list[bytes]]
Strs = tuple[list[str | None], list[str | None]]
Drops = tuple[frozenset[int], frozenset[int]]


def decode_loop(tables: Tables, vocab: int, state: Slots, slots: list[int],
                heads: list[list[int]], row_ids: list[list[int]] | None,
                singles: list[int] | None, strs: Strs, drops: Drops
                ) -> tuple[list[str], Attrs | None]:
    """Decode rows in order: row r's ids are `row_ids[r]`, or the one id `singles[r]` (ids
    in [0, vocab]). With `strs` (each id's text when its bytes are whole characters), a
    one-id row on a slot with nothing pending or to pass over is a list lookup: most rows
    of most text. Rows whose request asked for attribution also get theirs (None for the
    others; None for all when none asked)."""
    if state.attr_live and any(h[ATTR] for h in heads):
        return _attributed(tables, vocab, state, slots, heads, row_ids, singles, drops)
    texts: list[str] = []
    if singles is not None:
        for slot, head, i in zip(slots, heads, singles):
            if not (head[PEND] or head[SKIP]):
                whole = strs[head[SEL]][i]
                if whole is not None:
                    texts.append(whole)
                    continue
            texts.append(push(state, slot, head, tables[head[SEL]][i]))
        return texts, None
    assert row_ids is not None
    for slot, head, ids in zip(slots, heads, row_ids):
        table = tables[head[SEL]]
        texts.append(push(state, slot, head, b"".join([table[i] for i in ids])))
    return texts, None


def _attributed(tables: Tables, vocab: int, state: Slots, slots: list[int],
                heads: list[list[int]], row_ids: list[list[int]] | None,
                singles: list[int] | None, drops: Drops) -> tuple[list[str], Attrs]:
    """`decode_loop` for a message with rows that want attribution: those go id by id
    through the per-row path's rules (`push_attributed`), which also decodes them."""
    texts: list[str] = []
    attrs: Attrs = []
    for r, (slot, head) in enumerate(zip(slots, heads)):
        sel = head[SEL]
        ids = [singles[r]] if singles is not None else row_ids[r]  # type: ignore[index]
        if head[ATTR]:
            text, got = push_attributed(tables[sel], vocab, drops[sel], state, slot, head, ids)
        else:
            table = tables[sel]
            text, got = push(state, slot, head, b"".join([table[i] for i in ids])), None
        texts.append(text)
        attrs.append(got)
    return texts, attrs


def push(state: Slots, slot: int, head: list[int], data: bytes | bytearray) -> str:
    """A row's bytes after the slot's pending ones: the whole characters, as text (the
    codec's replacement rules for broken bytes); an incomplete tail stays pending."""
    buf, width = state.pend_buf, state.width
    held = head[PEND]
    if held:
        at = slot * width
        data = buf[at:at + held] + data  # a bytearray: the codec takes any buffer
    text, used = utf_8_decode(data, "replace", False)
    rest = len(data) - used
    if rest:
        at = slot * width
        buf[at:at + rest] = data[used:]
    if rest != held:
        state.meta[slot, PEND] = head[PEND] = rest
    if head[SKIP] and text:  # the prompt's incomplete character: its first one goes
        text = text[1:]
        state.meta[slot, SKIP] = head[SKIP] = 0
    return text


def push_attributed(table: list[bytes], vocab: int, drop: frozenset[int], state: Slots,
                    slot: int, head: list[int], ids: list[int]
                    ) -> tuple[str, list[Attribution]]:
    """A row id by id through the per-row path's rules (`attributed.attributed_push`):
    its text and attributions; the slot advances (pending bytes, skip, carried ids)."""
    carry = state.carry
    buf, width = state.pend_buf, state.width
    held = head[PEND]
    at = slot * width
    pending = bytes(buf[at:at + held]) if held else b""
    text, rest, skip, got, left = attributed_push(table, vocab, drop, pending, head[SKIP],
                                                  carry.pop(slot, None), ids)
    if left:
        carry[slot] = left
    if rest:
        buf[at:at + len(rest)] = rest
    if len(rest) != held:
        state.meta[slot, PEND] = head[PEND] = len(rest)
    if skip != head[SKIP]:
        state.meta[slot, SKIP] = head[SKIP] = skip
    return text, got
